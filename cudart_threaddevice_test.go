package nccl_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

// TestNoContextOnDeviceZero: a process that uses GPU 1 alone leaves GPU 0
// alone, although its goroutines run on threads that never chose a device
// (which read as device 0 to CUDA) and NCCL saves and restores the caller's
// device around a launch. The fake CUDA runtime makes contexts as CUDA >= 12
// does (cudaSetDevice, and the first call that needs one on a thread without
// a device) and the fake NCCL restores the device as group.cc does. Without
// the guard, every process of nccl-bench -np 4 off GPU 0 holds a context
// there (TestGPUNoContextOnDeviceZero). In a child process: contexts are per
// process.
func TestNoContextOnDeviceZero(t *testing.T) {
	for _, mode := range []string{"blocking", "nonblocking"} {
		t.Run(mode, func(t *testing.T) {
			out, err := fakes.RunChild(t, 60*time.Second, "device-one-only", "FAKECUDA_DEVICES=2", "GONCCL_TEST_MODE="+mode,
				"GONCCL_NCCL_LIB="+nccl.FakeNCCL(t, "default"), "GONCCL_CUDART_LIB="+nccl.FakeCUDART(t))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// onFreshThread runs fn on an OS thread of its own that never ran Go code
// before: the goroutine ends locked, so the runtime retires its thread.
func onFreshThread(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ch <- fn()
	}()
	return <-ch
}

// primaryContexts returns a function that reports which devices have a
// primary context in this process, one bit per device: from the fake CUDA
// runtime (fakecuda_primary_contexts), or from the driver of a real one
// (cuDevicePrimaryCtxGetState, which makes no context itself).
func primaryContexts(cudart string) (func() (uint64, error), error) {
	h, err := purego.Dlopen(cudart, purego.RTLD_NOW)
	if err != nil {
		return nil, err
	}
	if fake, err := purego.Dlsym(h, "fakecuda_primary_contexts"); err == nil {
		return func() (uint64, error) { r, _, _ := purego.SyscallN(fake); return uint64(r), nil }, nil
	}
	drv, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW)
	if err != nil {
		return nil, err
	}
	var fn [4]uintptr
	for i, name := range []string{"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxGetState"} {
		if fn[i], err = purego.Dlsym(drv, name); err != nil {
			return nil, err
		}
	}
	cuInit, cuDeviceGetCount, cuDeviceGet, cuState := fn[0], fn[1], fn[2], fn[3]
	return func() (uint64, error) {
		if r, _, _ := purego.SyscallN(cuInit, 0); int32(r) != 0 {
			return 0, fmt.Errorf("cuInit: CUresult %d", int32(r))
		}
		var n int32
		if r, _, _ := purego.SyscallN(cuDeviceGetCount, uintptr(unsafe.Pointer(&n))); int32(r) != 0 {
			return 0, fmt.Errorf("cuDeviceGetCount: CUresult %d", int32(r))
		}
		var mask uint64
		for i := range n {
			var dev, flags, active int32
			if r, _, _ := purego.SyscallN(cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(i)); int32(r) != 0 {
				return 0, fmt.Errorf("cuDeviceGet(%d): CUresult %d", i, int32(r))
			}
			if r, _, _ := purego.SyscallN(cuState, uintptr(dev), uintptr(unsafe.Pointer(&flags)),
				uintptr(unsafe.Pointer(&active))); int32(r) != 0 {
				return 0, fmt.Errorf("cuDevicePrimaryCtxGetState(%d): CUresult %d", i, int32(r))
			}
			if active != 0 {
				mask |= 1 << i
			}
		}
		return mask, nil
	}, nil
}

func init() {
	// device-one-only: every step of a program on device 1 alone, each on a
	// fresh OS thread, then all of them again on one thread, and after each
	// step no context but device 1's.
	// GONCCL_TEST_MODE=nonblocking makes the communicator non-blocking.
	nccl.Children["device-one-only"] = func() error {
		const dev = 1
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		mask, err := primaryContexts(l.CUDA().Path)
		if err != nil {
			return err
		}
		var cfg *nccl.Config
		if os.Getenv("GONCCL_TEST_MODE") == "nonblocking" {
			cfg = &nccl.Config{Blocking: new(bool)}
		}
		cu := l.CUDA()
		var (
			s    nccl.Stream
			buf  nccl.Buffer
			comm *nccl.Comm
			g    *nccl.Graph
		)
		const elems = 1024
		in := make([]float32, elems)
		for i := range in {
			in[i] = float32(i%251) - 125
		}
		steps := []struct {
			name string
			fn   func() error
		}{
			{"NewStream", func() (err error) { s, err = cu.NewStream(dev, nccl.StreamNonBlocking); return }},
			{"Alloc", func() (err error) { buf, err = cu.Alloc(dev, nccl.Float32, elems); return }},
			{"CopyIn", func() error { return nccl.CopyIn(buf, in) }},
			{"InitRank", func() error {
				id, err := l.GetUniqueID()
				if err != nil {
					return err
				}
				comm, err = l.InitRank(context.Background(), dev, id, 1, 0, cfg)
				return err
			}},
			{"Stream.Query", func() error { _, err := s.Query(); return err }},
			{"AllReduce", func() error { return comm.AllReduce(buf, buf, nccl.Sum, s) }},
			{"Wait", func() error { return comm.Wait(context.Background(), s) }},
			{"Group", func() error {
				return l.Group(func() error { return comm.AllReduce(buf, buf, nccl.Sum, s) })
			}},
			{"Wait", func() error { return comm.Wait(context.Background(), s) }},
			{"Capture", func() (err error) {
				g, err = cu.Capture(s, func() error { return comm.AllReduce(buf, buf, nccl.Sum, s) })
				return err
			}},
			{"Graph.Launch", func() error { return g.Launch(s) }},
			{"Stream.Synchronize", func() error { return s.Synchronize() }},
			{"Graph.Destroy", func() error { return g.Destroy() }},
			{"CopyOut", func() error {
				// One rank: a sum is the identity, however often it ran.
				out := make([]float32, elems)
				if err := nccl.CopyOut(out, buf); err != nil {
					return err
				}
				for i := range out {
					if out[i] != in[i] {
						return fmt.Errorf("element %d: %v, want %v", i, out[i], in[i])
					}
				}
				return nil
			}},
			{"Close", func() error { return comm.Close(context.Background()) }},
			{"Free", func() error { return buf.Free() }},
			{"Stream.Destroy", func() error { return s.Destroy() }},
		}
		check := func(step, where string) error {
			m, err := mask()
			if err != nil {
				return err
			}
			if m != 1<<dev {
				return fmt.Errorf("after %s %s, primary contexts %#b: want only device %d's", step, where, m, dev)
			}
			return nil
		}
		for _, st := range steps {
			if err := onFreshThread(st.fn); err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
			if err := check(st.name, "on a fresh thread"); err != nil {
				return err
			}
		}
		// Then every step again on one thread: after its first call the
		// guard has marked it, and the later calls skip the question.
		return onFreshThread(func() error {
			for _, st := range steps {
				if err := st.fn(); err != nil {
					return fmt.Errorf("%s on one thread: %w", st.name, err)
				}
				if err := check(st.name, "on one thread"); err != nil {
					return err
				}
			}
			return nil
		})
	}
}
