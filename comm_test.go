package nccl_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// fakeFn resolves a test accessor of the fake NCCL (fakenccl_config_int, ...).
func fakeFn(t *testing.T, l *nccl.Library, name string) uintptr {
	t.Helper()
	h, err := purego.Dlopen(l.Path, purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func configInt(t *testing.T, l *nccl.Library, c *nccl.Comm, field string) int32 {
	t.Helper()
	var v int32
	f := append([]byte(field), 0)
	if r := ccall.CallPtr(fakeFn(t, l, "fakenccl_config_int"), c.Handle(), uintptr(unsafe.Pointer(&f[0])), uintptr(unsafe.Pointer(&v))); r != 0 {
		t.Fatalf("fakenccl_config_int(%s) = %d", field, r)
	}
	return v
}

func TestInitRankConfigReachesNCCL(t *testing.T) {
	i := func(v int32) *int32 { return &v }
	for _, variant := range []string{"default", "old"} {
		l := open(t, variant)
		id, _ := l.GetUniqueID()
		yes := true
		cfg := &nccl.Config{Blocking: &yes}
		if variant == "default" {
			cfg.CGAClusterSize, cfg.MaxCTAs, cfg.SplitShare, cfg.CommName, cfg.NvlsCTAs = i(2), i(16), i(1), "trainer", i(4)
		}
		c, err := l.InitRankConfig(1, id, 1, 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int32{"blocking": 1, "minCTAs": abi.Undefined}
		if variant == "default" {
			want["cgaClusterSize"], want["maxCTAs"], want["splitShare"], want["nvlsCTAs"] = 2, 16, 1, 4
			name := ccall.GoString(ccall.Call(fakeFn(t, l, "fakenccl_comm_name"), c.Handle()))
			if name != "trainer" {
				t.Errorf("commName reached NCCL as %q", name)
			}
		}
		for f, w := range want {
			if got := configInt(t, l, c, f); got != w {
				t.Errorf("%s: config %s = %d, want %d", variant, f, got, w)
			}
		}
		if c.Device() != 1 {
			t.Errorf("device %d", c.Device())
		}
		c.Destroy()
		// A field 2.14 lacks is refused before NCCL sees it.
		if variant == "old" {
			_, err := l.InitRankConfig(0, id, 1, 0, &nccl.Config{CommName: "x"})
			if !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "requires NCCL >= 2.27") {
				t.Errorf("commName on 2.14: %v", err)
			}
		}
	}
}

// TestInitRestoresDevice: creating a communicator on device 3 must leave the
// calling thread's device as it was.
func TestInitRestoresDevice(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	err := cu.OnDevice(5, func() error {
		id, _ := l.GetUniqueID()
		c, err := l.InitRank(3, id, 1, 0)
		if err != nil {
			return err
		}
		defer c.Destroy()
		if d, _ := cu.Device(); d != 5 {
			t.Errorf("device after InitRank on 3: %d, want 5", d)
		}
		if c.Device() != 3 {
			t.Errorf("comm on device %d", c.Device())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNonBlockingInit(t *testing.T) {
	l := open(t, "default")
	id, _ := l.GetUniqueID()
	no := false
	comms := make([]*nccl.Comm, 2)
	for r := range comms {
		c, err := l.InitRankConfig(r, id, 2, r, &nccl.Config{Blocking: &no})
		if err != nil {
			t.Fatalf("non-blocking init returned %v", err)
		}
		comms[r] = c
	}
	// Both ranks were started from this goroutine: neither call blocked.
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range comms {
		for {
			err := c.AsyncError()
			if err == nil {
				break
			}
			if !errors.Is(err, nccl.ErrInProgress) || time.Now().After(deadline) {
				t.Fatalf("AsyncError = %v", err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, c := range comms {
		if err := c.Finalize(); err != nil {
			t.Fatal(err)
		}
		if err := c.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInitAllAndGroupAcrossComms(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	devs := []int{0, 1, 2, 3}
	comms, err := l.InitAll(devs)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([]nccl.DevicePtr, len(devs))
	streams := make([]nccl.Stream, len(devs))
	for i, c := range comms {
		if c.Rank() != i || c.Count() != 4 || c.Device() != devs[i] {
			t.Fatalf("comm %d: rank %d of %d on %d", i, c.Rank(), c.Count(), c.Device())
		}
		bufs[i], _ = cu.Malloc(devs[i], 8)
		streams[i], _ = cu.StreamCreate(devs[i], 0)
		host := make([]byte, 8)
		binary.LittleEndian.PutUint64(host, uint64(10*(i+1)))
		cu.CopyToDevice(bufs[i], host)
	}
	// One goroutine drives all four: only one group makes that possible.
	err = l.Group(func() error {
		for i, c := range comms {
			if err := c.AllReduce(bufs[i], bufs[i], 1, abi.Uint64, abi.Sum, streams[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range comms {
		cu.StreamSynchronize(streams[i])
		host := make([]byte, 8)
		cu.CopyFromDevice(host, bufs[i])
		if got := binary.LittleEndian.Uint64(host); got != 100 {
			t.Errorf("comm %d: %d, want 100", i, got)
		}
		c.Destroy()
		cu.Free(bufs[i])
		cu.StreamDestroy(streams[i])
	}
}

func TestSplit(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	const n = 6
	ranks := initRanks(t, l, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			color := r % 3
			if r == 5 {
				color = abi.SplitNoColor
			}
			// Key reverses the order inside each color.
			sub, err := rk.comm.Split(color, -r, nil)
			if err != nil {
				errs[r] = err
				return
			}
			if color == abi.SplitNoColor {
				if sub != nil {
					errs[r] = errors.New("no-color rank got a communicator")
				}
				return
			}
			defer sub.Destroy()
			members := []int{}
			for p := n - 1; p >= 0; p-- {
				if p%3 == color && p != 5 {
					members = append(members, p)
				}
			}
			wantRank := 0
			for i, p := range members {
				if p == r {
					wantRank = i
				}
			}
			if sub.Count() != len(members) || sub.Rank() != wantRank || sub.Device() != rk.dev {
				errs[r] = errors.New("wrong split rank or size")
				return
			}
			buf, _ := cu.Malloc(rk.dev, 8)
			defer cu.Free(buf)
			host := make([]byte, 8)
			binary.LittleEndian.PutUint64(host, uint64(r))
			cu.CopyToDevice(buf, host)
			if errs[r] = sub.AllReduce(buf, buf, 1, abi.Uint64, abi.Sum, rk.s); errs[r] != nil {
				return
			}
			cu.StreamSynchronize(rk.s)
			cu.CopyFromDevice(host, buf)
			var want uint64
			for _, p := range members {
				want += uint64(p)
			}
			if got := binary.LittleEndian.Uint64(host); got != want {
				errs[r] = errors.New("wrong sum in the split communicator")
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestInitRankScalable(t *testing.T) {
	l := open(t, "default")
	ids := make([]nccl.UniqueID, 2)
	for i := range ids {
		ids[i], _ = l.GetUniqueID()
	}
	var wg sync.WaitGroup
	comms := make([]*nccl.Comm, 3)
	errs := make([]error, 3)
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = l.InitRankScalable(r, ids, 3, r, nil)
		}()
	}
	wg.Wait()
	for r, c := range comms {
		if errs[r] != nil || c.Rank() != r || c.Count() != 3 {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		c.Destroy()
	}
	if _, err := open(t, "old").InitRankScalable(0, ids, 1, 0, nil); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("InitRankScalable on 2.14: %v", err)
	}
}

func TestRegistrationAndMemory(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 1)
	c := ranks[0].comm
	p, err := l.MemAlloc(c.Device(), 8192)
	if err != nil {
		t.Fatal(err)
	}
	attr, err := l.CUDA().PointerAttributes(uintptr(p))
	if err != nil || attr.Type != abi.MemoryTypeDevice || int(attr.Device) != c.Device() {
		t.Fatalf("MemAlloc memory: %+v, %v", attr, err)
	}
	h, err := c.Register(p, 8192)
	if err != nil || h == 0 {
		t.Fatalf("Register: %v", err)
	}
	if err := c.Deregister(h); err != nil {
		t.Fatal(err)
	}
	w, err := c.WindowRegister(p, 8192, abi.WinCollSymmetric)
	if err != nil || w == 0 {
		t.Fatalf("WindowRegister: %v", err)
	}
	if err := c.WindowDeregister(w); err != nil {
		t.Fatal(err)
	}
	if err := c.WindowDeregister(w); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("second deregister: %v", err)
	}
	t.Setenv("FAKENCCL_NULL_WINDOW", "1")
	if _, err := c.WindowRegister(p, 8192, abi.WinCollSymmetric); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("NULL window: %v, want ErrNotSupported", err)
	}
	if err := l.MemFree(p); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(p, -1); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("negative size: %v", err)
	}
}

// TestAlltoAllvABIs calls VCCL's ncclAlltoAllv through both forms. The fake
// checks that the datatype, communicator and relay count arrive in the slots
// its form puts them; calling one form's library with the other form fails.
func TestAlltoAllvABIs(t *testing.T) {
	for _, c := range []struct {
		variant string
		abi     int
		ok      bool
	}{{"vccl11", 11, true}, {"vccl10", 10, true}, {"vccl11", 10, false}, {"vccl10", 11, false}} {
		l := open(t, c.variant, nccl.WithAlltoAllvABI(c.abi))
		if l.AlltoAllvABI() != c.abi || !l.Has("ncclAlltoAllv") {
			t.Fatalf("%s: ABI %d", c.variant, l.AlltoAllvABI())
		}
		err := alltoallvRound(t, l, 3)
		if c.ok && err != nil {
			t.Errorf("%s with the %d-argument form: %v", c.variant, c.abi, err)
		}
		if !c.ok && !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("%s with the wrong %d-argument form: %v, want ErrInvalidArgument", c.variant, c.abi, err)
		}
	}
	if err := alltoallvRound(t, open(t, "default"), 2); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("AlltoAllv on NCCL: %v", err)
	}
}

// alltoallvRound runs one uneven exchange on n ranks in symmetric windows and
// checks every element: rank i sends i+j+1 int32 to rank j.
func alltoallvRound(t *testing.T, l *nccl.Library, n int) error {
	cu := l.CUDA()
	ranks := initRanks(t, l, n)
	sc, sd := make([]uint64, n*n), make([]uint64, n*n)
	rc, rd := make([]uint64, n*n), make([]uint64, n*n)
	for i := range n {
		var off uint64
		for j := range n {
			sc[i*n+j], sd[i*n+j] = uint64(i+j+1), off
			off += sc[i*n+j]
		}
	}
	for j := range n {
		var off uint64
		for i := range n {
			rc[j*n+i], rd[j*n+i] = sc[i*n+j], off
			off += rc[j*n+i]
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send, _ := l.MemAlloc(rk.dev, 4096)
			recv, _ := l.MemAlloc(rk.dev, 4096)
			defer l.MemFree(send)
			defer l.MemFree(recv)
			ws, err := rk.comm.WindowRegister(send, 4096, abi.WinCollSymmetric)
			if err != nil {
				errs[r] = err
				return
			}
			defer rk.comm.WindowDeregister(ws)
			wr, _ := rk.comm.WindowRegister(recv, 4096, abi.WinCollSymmetric)
			defer rk.comm.WindowDeregister(wr)
			host := make([]byte, 4096)
			for j := range n {
				for e := range int(sc[r*n+j]) {
					binary.LittleEndian.PutUint32(host[4*(int(sd[r*n+j])+e):], uint32(r<<16|j<<8|e))
				}
			}
			cu.CopyToDevice(send, host)
			if errs[r] = rk.comm.AlltoAllv(send, sc, sd, recv, rc, rd, 0, 0, abi.Int32, rk.s); errs[r] != nil {
				return
			}
			cu.StreamSynchronize(rk.s)
			cu.CopyFromDevice(host, recv)
			for i := range n {
				for e := range int(rc[r*n+i]) {
					if got := binary.LittleEndian.Uint32(host[4*(int(rd[r*n+i])+e):]); got != uint32(i<<16|r<<8|e) {
						errs[r] = errors.New("wrong element")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func TestPreMulSumDeviceScalar(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := initRanks(t, l, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scalar, _ := cu.Malloc(rk.dev, 8)
			buf, _ := cu.Malloc(rk.dev, 8)
			defer cu.Free(scalar)
			defer cu.Free(buf)
			host := make([]byte, 8)
			binary.LittleEndian.PutUint64(host, uint64(3))
			cu.CopyToDevice(scalar, host)
			binary.LittleEndian.PutUint64(host, uint64(r+1))
			cu.CopyToDevice(buf, host)
			op, err := rk.comm.CreatePreMulSumDevice(scalar, abi.Int64)
			if err != nil {
				errs[r] = err
				return
			}
			defer rk.comm.DestroyRedOp(op)
			if errs[r] = rk.comm.AllReduce(buf, buf, 1, abi.Int64, op, rk.s); errs[r] != nil {
				return
			}
			cu.StreamSynchronize(rk.s)
			cu.CopyFromDevice(host, buf)
			if got := binary.LittleEndian.Uint64(host); got != 3*1+3*2 {
				errs[r] = errors.New("wrong PreMulSum result")
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if _, err := ranks[0].comm.CreatePreMulSum([]byte{1, 2, 3}, abi.Float32); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("3-byte float32 scalar: %v", err)
	}
}

func TestCUDARuntime(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	if v, err := cu.RuntimeVersion(); err != nil || v != 12040 {
		t.Errorf("RuntimeVersion = %d, %v", v, err)
	}
	if n, err := cu.DeviceCount(); err != nil || n != 8 {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	if _, err := cu.Malloc(99, 16); !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("Malloc on device 99: %v", err)
	}
	var ce *nccl.CUDAError
	if err := cu.Free(nccl.DevicePtr(12345)); !errors.As(err, &ce) || ce.Code != abi.CudaErrorInvalidValue || ce.Msg != "invalid argument" {
		t.Errorf("Free of a bad pointer: %v", err)
	}
	if cu.ErrorName(abi.CudaErrorNotReady) != "cudaErrorNotReady" {
		t.Error(cu.ErrorName(abi.CudaErrorNotReady))
	}
	// Every copy kind, through device memory and page-locked host memory.
	a, _ := cu.Malloc(2, 64)
	b, _ := cu.Malloc(2, 64)
	pinned, err := cu.MallocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pinned {
		pinned[i] = byte(i)
	}
	s, _ := cu.StreamCreate(2, abi.StreamNonBlocking)
	steps := []error{
		cu.Memcpy(uintptr(a), uintptr(unsafe.Pointer(&pinned[0])), 64, abi.MemcpyHostToDevice),
		cu.MemcpyAsync(uintptr(b), uintptr(a), 64, abi.MemcpyDeviceToDevice, s),
		cu.MemsetAsync(a, 0, 64, s),
		cu.StreamSynchronize(s),
		cu.Memcpy(uintptr(unsafe.Pointer(&pinned[0])), uintptr(b), 64, abi.MemcpyDefault),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	for i, v := range pinned {
		if v != byte(i) {
			t.Fatalf("byte %d = %d after the round trip", i, v)
		}
	}
	zero := make([]byte, 64)
	cu.CopyFromDevice(zero, a)
	for _, v := range zero {
		if v != 0 {
			t.Fatal("MemsetAsync did not run")
		}
	}
	if err := cu.Memcpy(uintptr(a), 0x1000, 64, abi.MemcpyDeviceToDevice); !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("copy from a non-device pointer: %v", err)
	}
	attr, _ := cu.PointerAttributes(uintptr(unsafe.Pointer(&pinned[0])))
	if attr.Type != abi.MemoryTypeHost {
		t.Errorf("pinned memory type %v", attr.Type)
	}
	cu.StreamDestroy(s)
	if err := cu.StreamDestroy(s); !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("second StreamDestroy: %v", err)
	}
	cu.FreeHost(pinned)
	cu.Free(a)
	cu.Free(b)
	if err := cu.DeviceSynchronize(2); err != nil {
		t.Error(err)
	}
}

// TestNoDevice: with no GPU, the runtime's answer is a typed error and creating
// a communicator fails cleanly, in a process whose runtime sees no device.
func TestNoDevice(t *testing.T) {
	out, err := nccl.RunChild(t, "no-device", "FAKECUDA_DEVICES=0",
		"GONCCL_NCCL_LIB="+nccl.FakeNCCL(t, "default"), "GONCCL_CUDART_LIB="+nccl.FakeCUDART(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func init() {
	nccl.Children["no-device"] = func() error {
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		if _, err := l.CUDA().DeviceCount(); !errors.Is(err, nccl.ErrNoDevice) {
			return fmt.Errorf("DeviceCount: %v, want ErrNoDevice", err)
		}
		id, _ := l.GetUniqueID()
		if _, err := l.InitRank(0, id, 1, 0); !errors.Is(err, nccl.ErrNoDevice) {
			return fmt.Errorf("InitRank: %v, want ErrNoDevice", err)
		}
		return nil
	}
}

func TestLibraryClose(t *testing.T) {
	l := open(t, "default")
	id, _ := l.GetUniqueID()
	c, err := l.InitRank(0, id, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Fatalf("Close with an open communicator: %v", err)
	}
	c.Destroy()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GetUniqueID(); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("GetUniqueID after Close: %v", err)
	}
	if _, err := l.InitRank(0, id, 1, 0); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("InitRank after Close: %v", err)
	}
	if err := l.Group(func() error { return nil }); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("Group after Close: %v", err)
	}
}

// TestAlltoAllvMatricesKeptUntilGroupEnd: VCCL reads the count and
// displacement arrays when the group ends, long after AlltoAllv returned. The
// arrays here are reachable from nowhere else, and the garbage collector runs
// and memory is churned before the group ends; the fake, which like VCCL reads
// them then, fails the group if they changed. It also shows the fake catches a
// caller who changes them.
func TestAlltoAllvMatricesKeptUntilGroupEnd(t *testing.T) {
	l := open(t, "vccl11")
	ranks := initRanks(t, l, 2)
	bufs := make([][2]nccl.DevicePtr, 2)
	var wg sync.WaitGroup
	for r, rk := range ranks { // symmetric registration is collective: one goroutine per rank
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range bufs[r] {
				p, err := l.MemAlloc(rk.dev, 4096)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := rk.comm.WindowRegister(p, 4096, abi.WinCollSymmetric); err != nil {
					t.Error(err)
					return
				}
				bufs[r][k] = p
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var keep [][]uint64
	enqueue := func(change bool) error {
		return l.Group(func() error {
			for r, rk := range ranks {
				m := a2avMatrix(2, 3) // fresh arrays, referenced only by the call
				if change {
					keep = m[:]
				}
				if err := rk.comm.AlltoAllv(bufs[r][0], m[0], m[1], bufs[r][1], m[2], m[3], 0, 0, abi.Int32, rk.s); err != nil {
					return err
				}
			}
			churn()
			if change {
				keep[0][1]++
			}
			return nil
		})
	}
	for range 5 {
		if err := enqueue(false); err != nil {
			t.Fatalf("arrays not kept until the group ended: %v", err)
		}
	}
	if err := enqueue(true); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Fatalf("arrays changed inside the group: %v, want ErrInvalidUsage from the fake", err)
	}
	for _, rk := range ranks {
		l.CUDA().StreamSynchronize(rk.s)
	}
}

// a2avMatrix is an n-rank exchange of k int32 between every two ranks.
//
//go:noinline
func a2avMatrix(n, k int) [4][]uint64 {
	var m [4][]uint64
	for i := range m {
		m[i] = make([]uint64, n*n)
	}
	for i := range n {
		for j := range n {
			if i != j {
				m[0][i*n+j], m[2][j*n+i] = uint64(k), uint64(k)
			}
		}
	}
	return m
}

// churn collects garbage and reuses the freed memory with other values.
func churn() {
	for range 3 {
		runtime.GC()
		var junk [][]uint64
		for range 1000 {
			s := make([]uint64, 4)
			for i := range s {
				s[i] = 0xdeadbeef
			}
			junk = append(junk, s)
		}
		runtime.KeepAlive(junk)
	}
}

// TestCopyToDeviceComplete: the fake runtime, like CUDA, returns from a
// pageable host-to-device cudaMemcpy before the bytes land (they follow on the
// legacy stream). CopyToDevice promises they are there: a non-blocking stream's
// copy right after must read them, and a raw Memcpy gives no such promise.
func TestCopyToDeviceComplete(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	// Staged copies land 2 ms late, so the outcome does not hang on timing.
	setDelay, err := purego.Dlsym(purego.RTLD_DEFAULT, "fakecuda_set_dma_delay_us")
	if err != nil {
		t.Fatal(err)
	}
	ccall.Call(setDelay, 2000)
	defer ccall.Call(setDelay, 0)
	s, err := cu.StreamCreate(0, abi.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer cu.StreamDestroy(s)
	a, _ := cu.Malloc(0, 4096)
	b, _ := cu.Malloc(0, 4096)
	defer cu.Free(a)
	defer cu.Free(b)
	host, got := make([]byte, 4096), make([]byte, 4096)
	round := func(it int, copyIn func() error) bool {
		for k := range host {
			host[k] = byte(it*31 + k%251)
		}
		if err := copyIn(); err != nil {
			t.Fatal(err)
		}
		if err := cu.MemcpyAsync(uintptr(b), uintptr(a), len(host), abi.MemcpyDeviceToDevice, s); err != nil {
			t.Fatal(err)
		}
		if err := cu.StreamSynchronize(s); err != nil {
			t.Fatal(err)
		}
		if err := cu.CopyFromDevice(got, b); err != nil {
			t.Fatal(err)
		}
		return bytes.Equal(got, host)
	}
	for it := range 20 {
		if !round(it, func() error { return cu.CopyToDevice(a, host) }) {
			t.Fatalf("round %d: the bytes of CopyToDevice had not landed when it returned", it)
		}
	}
	stale := 0
	for it := range 20 {
		if !round(100+it, func() error {
			return cu.Memcpy(uintptr(a), uintptr(unsafe.Pointer(&host[0])), len(host), abi.MemcpyHostToDevice)
		}) {
			stale++
		}
	}
	if stale < 15 { // 2 ms late against a 0.2 ms stream: all 20, barring a stalled machine
		t.Errorf("a raw pageable cudaMemcpy was complete %d times of 20: the fake no longer models CUDA's staged copy", 20-stale)
	}
}
