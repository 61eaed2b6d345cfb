package nccl_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

// TestNoContextOnDeviceZero: a process that uses GPU 1 alone leaves GPU 0
// alone, although its goroutines run on threads that never chose a device
// (which read as device 0 to CUDA) and NCCL saves and restores the caller's
// device around a launch. The fake CUDA runtime makes contexts as CUDA >= 12
// does (cudaSetDevice, and the first call that needs one on a thread without
// a device) and the fake NCCL restores the device as group.cc does. On 4 ×
// H200 before the guard, every process of nccl-bench -np 4 off GPU 0 held a
// context of about 525 MiB there. In a child process: contexts are per
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

func init() {
	nccl.Children["device-one-only"] = func() error {
		const dev = 1
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		h, err := purego.Dlopen(l.CUDA().Path, purego.RTLD_NOW)
		if err != nil {
			return err
		}
		maskFn, err := purego.Dlsym(h, "fakecuda_primary_contexts")
		if err != nil {
			return err
		}
		mask := func() uint64 { r, _, _ := purego.SyscallN(maskFn); return uint64(r) }
		var cfg *nccl.Config
		if os.Getenv("GONCCL_TEST_MODE") == "nonblocking" {
			cfg = &nccl.Config{Blocking: new(bool)}
		}
		cu := l.CUDA()
		var (
			s    nccl.Stream
			buf  nccl.Buffer
			comm *nccl.Comm
		)
		steps := []struct {
			name string
			fn   func() error
		}{
			{"NewStream", func() (err error) { s, err = cu.NewStream(dev, nccl.StreamNonBlocking); return }},
			{"Alloc", func() (err error) { buf, err = cu.Alloc(dev, nccl.Float32, 1024); return }},
			{"CopyIn", func() error { return nccl.CopyIn(buf, make([]float32, 1024)) }},
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
			{"CopyOut", func() error { return nccl.CopyOut(make([]float32, 1024), buf) }},
			{"Close", func() error { return comm.Close(context.Background()) }},
			{"Free", func() error { return buf.Free() }},
			{"Stream.Destroy", func() error { return s.Destroy() }},
		}
		for _, st := range steps {
			if err := onFreshThread(st.fn); err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
			if m := mask(); m != 1<<dev {
				return fmt.Errorf("after %s on a fresh thread, primary contexts %#b: want only device %d's", st.name, m, dev)
			}
		}
		return nil
	}
}
