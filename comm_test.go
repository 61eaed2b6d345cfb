package nccl_test

import (
	"bytes"
	"context"
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
	"github.com/gonccl/nccl/internal/fakes"
)

// symbolIn resolves a C function of an already-loaded library file.
func symbolIn(t testing.TB, path, name string) uintptr {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeFn resolves a test accessor of the fake NCCL (fakenccl_config_int, ...),
// or any NCCL function gonccl does not expose.
func fakeFn(t testing.TB, l *nccl.Library, name string) uintptr {
	t.Helper()
	return symbolIn(t, l.Path, name)
}

// cudaFn resolves a function of the fake CUDA runtime (cudaSetDevice,
// fakecuda_set_dma_delay_us, ...), for what the API no longer exposes.
func cudaFn(t testing.TB, cu *nccl.CUDA, name string) uintptr {
	t.Helper()
	return symbolIn(t, cu.Path, name)
}

func configInt(t testing.TB, l *nccl.Library, c *nccl.Comm, field string) int32 {
	t.Helper()
	var v int32
	f := append([]byte(field), 0)
	if r := ccall.CallPtr(fakeFn(t, l, "fakenccl_config_int"), c.Handle(), uintptr(unsafe.Pointer(&f[0])), uintptr(unsafe.Pointer(&v))); r != 0 {
		t.Fatalf("fakenccl_config_int(%s) = %d", field, r)
	}
	return v
}

// liveComms is the number of communicators the fake NCCL holds, not destroyed
// or aborted, in the whole process.
func liveComms(t testing.TB, l *nccl.Library) int {
	t.Helper()
	return int(int32(ccall.Call(fakeFn(t, l, "fakenccl_live_comms"))))
}

// commMode is how a test makes its communicators: blocking ones from
// context.Background, non-blocking ones from a context that can end.
type commMode struct {
	name        string
	nonBlocking bool
}

var commModes = []commMode{{"blocking", false}, {"nonblocking", true}}

// ctx is a context that makes communicators of the mode.
func (m commMode) ctx(t testing.TB) context.Context {
	if !m.nonBlocking {
		return context.Background()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// check verifies c is of the mode, in gonccl and in the config NCCL got.
func (m commMode) check(t testing.TB, l *nccl.Library, c *nccl.Comm) {
	t.Helper()
	want := int32(1)
	if m.nonBlocking {
		want = 0
	}
	if c.Blocking() == m.nonBlocking {
		t.Errorf("%s: Blocking() = %v", m.name, c.Blocking())
	}
	if got := configInt(t, l, c, "blocking"); got != want {
		t.Errorf("%s: config blocking reached NCCL as %d, want %d", m.name, got, want)
	}
}

// startRanks makes an n-rank communicator of mode m with initRanksCtx and
// checks that NCCL got the mode.
func startRanks(t testing.TB, l *nccl.Library, n int, m commMode) []rank {
	t.Helper()
	ranks := initRanksCtx(t, l, n, m.ctx(t))
	for _, rk := range ranks {
		m.check(t, l, rk.comm)
	}
	return ranks
}

func TestInitRankConfigReachesNCCL(t *testing.T) {
	i := func(v int32) *int32 { return &v }
	yes, no := true, false
	for _, variant := range []string{"default", "old"} {
		l := open(t, variant)
		// Blocking as set, or decided by the context when unset.
		for _, mode := range []struct {
			name     string
			blocking *bool
			deadline bool
			want     int32
		}{
			{"Blocking=true", &yes, false, 1},
			{"Blocking=false", &no, false, 0},
			{"Blocking=true with a deadline", &yes, true, 1},
			{"unset, context.Background", nil, false, 1},
			{"unset, a deadline", nil, true, 1}, // blocking by default; the deadline bounds the init
		} {
			ctx := context.Background()
			if mode.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			id, _ := l.GetUniqueID()
			cfg := &nccl.Config{Blocking: mode.blocking}
			if variant == "default" {
				cfg.CGAClusterSize, cfg.MaxCTAs, cfg.SplitShare, cfg.CommName, cfg.NvlsCTAs = i(2), i(16), i(1), "trainer", i(4)
			}
			c, err := l.InitRank(ctx, 1, id, 1, 0, cfg)
			if err != nil {
				t.Fatalf("%s, %s: %v", variant, mode.name, err)
			}
			want := map[string]int32{"blocking": mode.want, "minCTAs": abi.Undefined}
			if variant == "default" {
				want["cgaClusterSize"], want["maxCTAs"], want["splitShare"], want["nvlsCTAs"] = 2, 16, 1, 4
				name := ccall.GoString(ccall.Call(fakeFn(t, l, "fakenccl_comm_name"), c.Handle()))
				if name != "trainer" {
					t.Errorf("%s: commName reached NCCL as %q", mode.name, name)
				}
			}
			for f, w := range want {
				if got := configInt(t, l, c, f); got != w {
					t.Errorf("%s, %s: config %s = %d, want %d", variant, mode.name, f, got, w)
				}
			}
			if c.Blocking() != (mode.want == 1) {
				t.Errorf("%s, %s: Blocking() = %v", variant, mode.name, c.Blocking())
			}
			if c.Device() != 1 {
				t.Errorf("device %d", c.Device())
			}
			if err := c.Close(ctx); err != nil {
				t.Errorf("%s, %s: Close: %v", variant, mode.name, err)
			}
			if cfg.Blocking != mode.blocking {
				t.Errorf("%s: InitRank changed the caller's Config", mode.name)
			}
		}
		// A field 2.14 lacks is refused before NCCL sees it, as a missing
		// function is: ErrNotSupported, naming the field and its release.
		if variant == "old" {
			id, _ := l.GetUniqueID()
			for _, cfg := range []*nccl.Config{{CommName: "x"}, {CTAPolicy: new(int32)}} {
				_, err := l.InitRank(context.Background(), 0, id, 1, 0, cfg)
				var ue *nccl.UnsupportedError
				if !errors.Is(err, nccl.ErrNotSupported) || !errors.As(err, &ue) || !strings.Contains(err.Error(), "requires >= 2.27") ||
					!strings.HasPrefix(ue.Name, "ncclConfig_t.") {
					t.Errorf("a 2.27 field on 2.14: %v", err)
				}
			}
		}
	}
}

// TestInitRestoresDevice: creating a communicator on device 3, and the other
// calls that take a device, must leave the calling thread's device as it was.
// The API no longer reads or sets the thread's device: the test calls the
// runtime's cudaGetDevice and cudaSetDevice itself, on a locked thread.
func TestInitRestoresDevice(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	setDev, getDev := cudaFn(t, cu, "cudaSetDevice"), cudaFn(t, cu, "cudaGetDevice")
	cuDevice := fakeFn(t, l, "ncclCommCuDevice")
	current := func(t *testing.T) int {
		t.Helper()
		var d int32
		if r := ccall.CallPtr(getDev, uintptr(unsafe.Pointer(&d))); r != 0 {
			t.Fatalf("cudaGetDevice = %d", r)
		}
		return int(d)
	}
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			prev := current(t)
			defer ccall.Call(setDev, uintptr(prev))
			if r := ccall.Call(setDev, 5); r != 0 {
				t.Fatalf("cudaSetDevice(5) = %d", r)
			}
			still := func(after string) {
				t.Helper()
				if d := current(t); d != 5 {
					t.Errorf("device after %s on 3: %d, want 5", after, d)
				}
			}
			ctx := m.ctx(t)
			id, _ := l.GetUniqueID()
			c, err := l.InitRank(ctx, 3, id, 1, 0, modeOf(ctx, nil))
			if err != nil {
				t.Fatal(err)
			}
			still("InitRank")
			m.check(t, l, c)
			var d int32
			if r := ccall.CallPtr(cuDevice, c.Handle(), uintptr(unsafe.Pointer(&d))); r != 0 || d != 3 || c.Device() != 3 {
				t.Errorf("comm on device %d, NCCL says %d (%d)", c.Device(), d, r)
			}
			buf, err := cu.Alloc(3, nccl.Float32, 16)
			if err != nil {
				t.Fatal(err)
			}
			still("Alloc")
			mem, err := l.MemAlloc(3, nccl.Float32, 16)
			if err != nil {
				t.Fatal(err)
			}
			still("MemAlloc")
			s, err := cu.NewStream(3, nccl.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			still("NewStream")
			if err := nccl.CopyIn(buf, make([]float32, 16)); err != nil {
				t.Fatal(err)
			}
			still("CopyIn")
			if err := c.AllReduce(buf, mem, nccl.Sum, s); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, s); err != nil {
				t.Fatal(err)
			}
			sub, err := c.Split(ctx, 0, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			still("Split")
			if sub.Device() != 3 || sub.Blocking() != c.Blocking() {
				t.Errorf("split comm on device %d, blocking %v", sub.Device(), sub.Blocking())
			}
			if err := sub.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(s.Destroy(), buf.Free(), mem.Free()); err != nil {
				t.Fatal(err)
			}
			still("Destroy and Free")
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			still("Close")
		})
	}
}

// TestNonBlockingInit: a non-blocking init returns inside NCCL at once and
// gonccl waits for the other ranks outside it, so the context ends the wait.
func TestNonBlockingInit(t *testing.T) {
	l := open(t, "default")
	no, yes := false, true
	deadline := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		cfg      *nccl.Config
		blocking bool
	}{
		{"Blocking=false", context.Background(), &nccl.Config{Blocking: &no}, false},
		{"a deadline", deadline(), nil, false},
		{"a deadline, Blocking=true", deadline(), &nccl.Config{Blocking: &yes}, true},
	} {
		comms := initComms(t, l, 2, tc.ctx, tc.cfg)
		for r, c := range comms {
			want := int32(0)
			if tc.blocking {
				want = 1
			}
			if c.Blocking() != tc.blocking || configInt(t, l, c, "blocking") != want {
				t.Errorf("%s: rank %d blocking %v, NCCL's config %d", tc.name, r, c.Blocking(), configInt(t, l, c, "blocking"))
			}
			// Init waited until the rank joined: nothing is in progress.
			if err := c.AsyncError(); err != nil {
				t.Errorf("%s: AsyncError after init = %v", tc.name, err)
			}
		}
		for _, c := range comms {
			if err := c.Close(tc.ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.Done():
			default:
				t.Errorf("%s: Done not closed after Close", tc.name)
			}
		}
	}

	// A rank whose peer never comes: the deadline ends the non-blocking init,
	// which aborts the half-made communicator.
	before := liveComms(t, l)
	id, _ := l.GetUniqueID()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("init without its peer: %v; want context.DeadlineExceeded", err)
	}
	if c != nil { // init.go returns the aborted communicator beside the error
		select {
		case <-c.Done():
		default:
			t.Errorf("init without its peer returned an open communicator beside %v", err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("init returned %v after its deadline", d)
	}
	if n := liveComms(t, l); n != before {
		t.Errorf("%d communicators live after the failed init, %d before: not aborted", n, before)
	}
	// A context already ended makes nothing.
	done, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if _, err := l.InitRank(done, 0, id, 1, 0, modeOf(done, nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("init with an ended context: %v", err)
	}
	if n := liveComms(t, l); n != before {
		t.Errorf("init with an ended context made a communicator")
	}
}

func TestInitAllAndGroupAcrossComms(t *testing.T) {
	no, yes := false, true
	for _, tc := range []struct {
		name     string
		deadline bool
		cfg      *nccl.Config
		blocking bool
		config   int32 // blocking in the config NCCL got
	}{
		{"context.Background", false, nil, true, abi.Undefined}, // ncclCommInitAll, no config
		{"a deadline", true, nil, true, abi.Undefined},          // ncclCommInitAll on a goroutine of its own (bounded)
		{"Blocking=false", false, &nccl.Config{Blocking: &no}, false, 0},
		{"Blocking=true", false, &nccl.Config{Blocking: &yes}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := open(t, "default")
			cu := l.CUDA()
			ctx := context.Background()
			if tc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			devs := []int{0, 1, 2, 3}
			comms, err := l.InitAll(ctx, devs, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			bufs := make([]nccl.Buffer, len(devs))
			streams := make([]nccl.Stream, len(devs))
			for i, c := range comms {
				if c.Rank() != i || c.Size() != 4 || c.Device() != devs[i] || c.Blocking() != tc.blocking {
					t.Fatalf("comm %d: rank %d of %d on %d, blocking %v", i, c.Rank(), c.Size(), c.Device(), c.Blocking())
				}
				if got := configInt(t, l, c, "blocking"); got != tc.config {
					t.Errorf("comm %d: config blocking reached NCCL as %d, want %d", i, got, tc.config)
				}
				if bufs[i], err = cu.Alloc(devs[i], nccl.Uint64, 1); err != nil {
					t.Fatal(err)
				}
				if streams[i], err = cu.NewStream(devs[i], nccl.StreamDefault); err != nil {
					t.Fatal(err)
				}
				if err := nccl.CopyIn(bufs[i], []uint64{uint64(10 * (i + 1))}); err != nil {
					t.Fatal(err)
				}
			}
			// One goroutine drives all four: only one group makes that possible.
			err = l.Group(func() error {
				for i, c := range comms {
					if err := c.AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range comms {
				if err := c.Wait(ctx, streams[i]); err != nil {
					t.Fatal(err)
				}
				host := make([]uint64, 1)
				if err := nccl.CopyOut(host, bufs[i]); err != nil {
					t.Fatal(err)
				}
				if host[0] != 100 {
					t.Errorf("comm %d: %d, want 100", i, host[0])
				}
				if err := errors.Join(c.Close(ctx), bufs[i].Free(), streams[i].Destroy()); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestSplit(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) { testSplit(t, m) })
	}
}

func testSplit(t *testing.T, m commMode) {
	l := open(t, "default")
	cu := l.CUDA()
	const n = 6
	ranks := startRanks(t, l, n, m)
	ctx := m.ctx(t)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				color := r % 3
				if r == 5 {
					color = nccl.SplitNoColor
				}
				// Key reverses the order inside each color.
				sub, err := rk.comm.Split(ctx, color, -r, nil)
				if err != nil {
					return err
				}
				if color == nccl.SplitNoColor {
					if sub != nil {
						return errors.New("no-color rank got a communicator")
					}
					return nil
				}
				defer sub.Close(ctx)
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
				if sub.Size() != len(members) || sub.Rank() != wantRank || sub.Device() != rk.dev {
					return fmt.Errorf("split rank %d of %d on device %d, want %d of %d on %d",
						sub.Rank(), sub.Size(), sub.Device(), wantRank, len(members), rk.dev)
				}
				if sub.Blocking() != rk.comm.Blocking() {
					return fmt.Errorf("split comm blocking %v, parent %v", sub.Blocking(), rk.comm.Blocking())
				}
				buf, err := cu.Alloc(rk.dev, nccl.Uint64, 1)
				if err != nil {
					return err
				}
				defer buf.Free()
				if err := nccl.CopyIn(buf, []uint64{uint64(r)}); err != nil {
					return err
				}
				if err := sub.AllReduce(buf, buf, nccl.Sum, rk.s); err != nil {
					return err
				}
				if err := sub.Wait(ctx, rk.s); err != nil {
					return err
				}
				host := make([]uint64, 1)
				if err := nccl.CopyOut(host, buf); err != nil {
					return err
				}
				var want uint64
				for _, p := range members {
					want += uint64(p)
				}
				if host[0] != want {
					return fmt.Errorf("sum %d in the split communicator, want %d", host[0], want)
				}
				return nil
			}()
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
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			l := open(t, "default")
			ctx := m.ctx(t)
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
					comms[r], errs[r] = l.InitRankScalable(ctx, r, ids, 3, r, modeOf(ctx, nil))
				}()
			}
			wg.Wait()
			for r, c := range comms {
				if errs[r] != nil || c.Rank() != r || c.Size() != 3 {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				m.check(t, l, c)
			}
			for _, c := range comms {
				if err := c.Close(ctx); err != nil {
					t.Error(err)
				}
			}
			if _, err := open(t, "old").InitRankScalable(ctx, 0, ids, 1, 0, modeOf(ctx, nil)); !errors.Is(err, nccl.ErrNotSupported) {
				t.Errorf("InitRankScalable on 2.14: %v", err)
			}
		})
	}
}

func TestRegistrationAndMemory(t *testing.T) {
	l := open(t, "default")
	ranks := startRanks(t, l, 1, commModes[0])
	c := ranks[0].comm
	p, err := l.MemAlloc(c.Device(), nccl.Uint8, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 8192 || p.Size() != 8192 || p.Device() != c.Device() || p.Type() != nccl.Uint8 {
		t.Fatalf("MemAlloc buffer: %d elements of %v, %d bytes on device %d", p.Len(), p.Type(), p.Size(), p.Device())
	}
	attr, err := l.CUDA().PointerAttributes(uintptr(p.Ptr()))
	if err != nil || attr.Type != nccl.MemoryDevice || int(attr.Device) != c.Device() {
		t.Fatalf("MemAlloc memory: %+v, %v", attr, err)
	}
	h, err := c.Register(p)
	if err != nil || h == (nccl.Registration{}) {
		t.Fatalf("Register: %v", err)
	}
	if err := c.Deregister(h); err != nil {
		t.Fatal(err)
	}
	if err := c.Deregister(nccl.Registration{}); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Deregister of no registration: %v", err)
	}
	w, err := c.RegisterWindow(p, nccl.WinCollSymmetric)
	if err != nil || w == (nccl.Window{}) {
		t.Fatalf("RegisterWindow: %v", err)
	}
	if err := c.DeregisterWindow(w); err != nil {
		t.Fatal(err)
	}
	if err := c.DeregisterWindow(w); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("second deregister: %v", err)
	}
	// A symmetric buffer: whole pages in a window.
	sym, err := c.AllocSymmetric(nccl.Float32, 100)
	if err != nil || sym.Window() == 0 || sym.Len() != 100 || sym.Device() != c.Device() {
		t.Fatalf("AllocSymmetric: window %#x, %d elements: %v", sym.Window(), sym.Len(), err)
	}
	if err := sym.Free(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKENCCL_NULL_WINDOW", "1")
	if _, err := c.RegisterWindow(p, nccl.WinCollSymmetric); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("NULL window: %v, want ErrNotSupported", err)
	}
	if _, err := c.AllocSymmetric(nccl.Float32, 100); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("AllocSymmetric with no window: %v, want ErrNotSupported", err)
	}
	if err := p.Slice(8, 16).Free(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Free of a slice: %v", err)
	}
	if err := p.Free(); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("second Free: %v", err)
	}
	// What NCCL would not take is refused: freed memory, memory on another device.
	if _, err := c.Register(p); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Register of freed memory: %v", err)
	}
	other, err := l.CUDA().Alloc(c.Device()+1, nccl.Uint8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	if _, err := c.Register(other); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Register of memory on another device: %v", err)
	}
}

// TestAlltoAllvABIs calls VCCL's ncclAlltoAllv through both forms. The fake
// checks that the datatype, communicator and relay count arrive in the slots
// its form puts them; calling one form's library with the other form fails.
// Auto takes the native call on symmetric buffers where the library has it.
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
		for _, path := range []nccl.Path{nccl.Native, nccl.Auto} {
			err := alltoallvRound(t, l, 3, path, nccl.Native)
			if c.ok && err != nil {
				t.Errorf("%s with the %d-argument form (%v): %v", c.variant, c.abi, path, err)
			}
			if !c.ok && !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("%s with the wrong %d-argument form (%v): %v, want ErrInvalidArgument", c.variant, c.abi, path, err)
			}
		}
	}
	l := open(t, "default")
	if err := alltoallvRound(t, l, 2, nccl.Native, nccl.Grouped); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("native AlltoAllv on NCCL: %v", err)
	}
	if err := alltoallvRound(t, l, 2, nccl.Auto, nccl.Grouped); err != nil {
		t.Errorf("AlltoAllv on NCCL, grouped: %v", err)
	}
}

// alltoallvRound runs one uneven exchange on n ranks in symmetric buffers on
// path, which PathOf must report as want, and checks every element: rank i
// sends i+j+1 int32 to rank j.
func alltoallvRound(t *testing.T, l *nccl.Library, n int, path, want nccl.Path) error {
	t.Helper()
	ranks := startRanks(t, l, n, commModes[0])
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
	layout := nccl.Layout{SendCounts: sc, SendDispls: sd, RecvCounts: rc, RecvDispls: rd}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				if err := rk.comm.SetPath(path); err != nil {
					return err
				}
				if got := rk.comm.PathOf("AlltoAllv"); got != want {
					return fmt.Errorf("PathOf(AlltoAllv) = %v with %v, want %v", got, path, want)
				}
				// Symmetric allocation is collective: one goroutine per rank.
				send, err := rk.comm.AllocSymmetric(nccl.Int32, 1024)
				if err != nil {
					return err
				}
				defer send.Free()
				recv, err := rk.comm.AllocSymmetric(nccl.Int32, 1024)
				if err != nil {
					return err
				}
				defer recv.Free()
				host := make([]int32, 1024)
				for j := range n {
					for e := range int(sc[r*n+j]) {
						host[int(sd[r*n+j])+e] = int32(r<<16 | j<<8 | e)
					}
				}
				if err := nccl.CopyIn(send, host); err != nil {
					return err
				}
				if err := rk.comm.AlltoAllv(send, recv, layout, rk.s); err != nil {
					return err
				}
				if err := rk.s.Synchronize(); err != nil {
					return err
				}
				got := make([]int32, 1024)
				if err := nccl.CopyOut(got, recv); err != nil {
					return err
				}
				for i := range n {
					for e := range int(rc[r*n+i]) {
						if v := uint32(got[int(rd[r*n+i])+e]); v != uint32(i<<16|r<<8|e) {
							return fmt.Errorf("element %d from rank %d: %#x", e, i, v)
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func TestPreMulSumDeviceScalar(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := startRanks(t, l, 2, commModes[0])
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				scalar, err := cu.Alloc(rk.dev, nccl.Int64, 1)
				if err != nil {
					return err
				}
				defer scalar.Free()
				buf, err := cu.Alloc(rk.dev, nccl.Int64, 1)
				if err != nil {
					return err
				}
				defer buf.Free()
				if err := errors.Join(nccl.CopyIn(scalar, []int64{3}), nccl.CopyIn(buf, []int64{int64(r + 1)})); err != nil {
					return err
				}
				op, err := rk.comm.PreMulSumDevice(scalar)
				if err != nil {
					return err
				}
				defer rk.comm.DestroyRedOp(op)
				host := make([]int64, 1)
				// The scalar is read by each operation: changing it between
				// them changes the result.
				for _, step := range []struct{ scalar, want int64 }{{3, 3*1 + 3*2}, {5, 5*9 + 5*9}} {
					if err := nccl.CopyIn(scalar, []int64{step.scalar}); err != nil {
						return err
					}
					if err := rk.comm.AllReduce(buf, buf, op, rk.s); err != nil {
						return err
					}
					if err := rk.s.Synchronize(); err != nil {
						return err
					}
					if err := nccl.CopyOut(host, buf); err != nil {
						return err
					}
					if host[0] != step.want {
						return fmt.Errorf("PreMulSum with scalar %d: %d, want %d", step.scalar, host[0], step.want)
					}
				}
				// A host scalar of the buffer's type, read once.
				hop, err := nccl.PreMulSum(rk.comm, int64(2))
				if err != nil {
					return err
				}
				defer rk.comm.DestroyRedOp(hop)
				if err := rk.comm.AllReduce(buf, buf, hop, rk.s); err != nil {
					return err
				}
				if err := errors.Join(rk.s.Synchronize(), nccl.CopyOut(host, buf)); err != nil {
					return err
				}
				if host[0] != 2*90+2*90 {
					return fmt.Errorf("PreMulSum with host scalar 2: %d, want 360", host[0])
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// A scalar must be one element on the communicator's device.
	c := ranks[0].comm
	three, err := cu.Alloc(ranks[0].dev, nccl.Float32, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer three.Free()
	if _, err := c.PreMulSumDevice(three); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("3-element float32 scalar: %v", err)
	}
	elsewhere, err := cu.Alloc(ranks[0].dev+1, nccl.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Free()
	if _, err := c.PreMulSumDevice(elsewhere); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("scalar on another device: %v", err)
	}
	// An op made for float32 is refused on int64 data.
	f32, err := nccl.PreMulSum(c, float32(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.DestroyRedOp(f32)
	ints, err := cu.Alloc(ranks[0].dev, nccl.Int64, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ints.Free()
	if err := c.AllReduce(ints, ints, f32, ranks[0].s); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("float32 PreMulSum on int64: %v", err)
	}
	if err := c.DestroyRedOp(nccl.Sum); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("DestroyRedOp(Sum): %v", err)
	}
}

func TestCUDARuntime(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	if v, err := cu.RuntimeVersion(); err != nil || v != 12040 {
		t.Errorf("RuntimeVersion = %d, %v", v, err)
	}
	if v, err := cu.DriverVersion(); err != nil || v != 12080 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	if n, err := cu.DeviceCount(); err != nil || n != 8 {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	if _, err := cu.Alloc(99, nccl.Uint8, 16); !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("Alloc on device 99: %v", err)
	}
	var ce *nccl.CUDAError
	if err := cu.FreeHost(make([]byte, 16)); !errors.As(err, &ce) || ce.Code != abi.CudaErrorInvalidValue || ce.Msg != "invalid argument" {
		t.Errorf("FreeHost of memory MallocHost did not give: %v", err)
	}
	if cu.ErrorName(abi.CudaErrorNotReady) != "cudaErrorNotReady" {
		t.Error(cu.ErrorName(abi.CudaErrorNotReady))
	}
	// Every copy direction, through device memory and page-locked host memory.
	a, err := cu.Alloc(2, nccl.Uint8, 64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cu.Alloc(2, nccl.Uint8, 64)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := cu.MallocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pinned {
		pinned[i] = byte(i)
	}
	s, err := cu.NewStream(2, nccl.StreamNonBlocking)
	if err != nil || s.Device() != 2 || s.Handle() == 0 {
		t.Fatalf("NewStream: %v on device %d", err, s.Device())
	}
	steps := []error{
		cu.MemcpyAsync(uintptr(a.Ptr()), uintptr(unsafe.Pointer(&pinned[0])), 64, s), // host to device
		cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 64, s),                    // device to device
		a.MemsetAsync(0, s),
		s.Synchronize(),
	}
	clear(pinned)
	steps = append(steps,
		cu.MemcpyAsync(uintptr(unsafe.Pointer(&pinned[0])), uintptr(b.Ptr()), 64, s), // device to host
		s.Synchronize())
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
	if err := a.ReadBytes(zero); err != nil {
		t.Fatal(err)
	}
	for _, v := range zero {
		if v != 0 {
			t.Fatal("MemsetAsync did not run")
		}
	}
	if done, err := s.Query(); err != nil || !done {
		t.Errorf("Query after Synchronize = %v, %v", done, err)
	}
	if err := cu.MemcpyAsync(uintptr(a.Ptr()), 0, 64, s); !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("copy from NULL: %v", err)
	}
	if err := cu.MemcpyAsync(uintptr(a.Ptr()), uintptr(b.Ptr()), -1, s); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("copy of -1 bytes: %v", err)
	}
	attr, _ := cu.PointerAttributes(uintptr(unsafe.Pointer(&pinned[0])))
	if attr.Type != nccl.MemoryHost {
		t.Errorf("pinned memory type %v", attr.Type)
	}
	if attr, err := cu.PointerAttributes(uintptr(a.Ptr())); err != nil || attr.Type != nccl.MemoryDevice || attr.Device != 2 {
		t.Errorf("device memory: %+v, %v", attr, err)
	}

	// Events: timing, and ordering one stream after another.
	start, err := cu.NewEvent(2, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	end, err := cu.NewEvent(2, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	never, err := cu.NewEvent(2, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(start.Record(s), a.MemsetAsync(1, s), end.Record(s), end.Synchronize()); err != nil {
		t.Fatal(err)
	}
	if done, err := end.Query(); err != nil || !done {
		t.Errorf("event Query after Synchronize = %v, %v", done, err)
	}
	if d, err := end.Elapsed(start); err != nil || d <= 0 {
		t.Errorf("Elapsed = %v, %v", d, err)
	}
	if _, err := never.Elapsed(start); !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("Elapsed from an event never recorded: %v", err)
	}
	s0, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	if err := start.Record(s0); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Record on a stream of another device: %v", err)
	}
	// s2 copies a into b after the memsets queued on s, each of which takes
	// the fake 0.2 ms: without After the copy would read an early value.
	s2, err := cu.NewStream(2, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	ordered := func(how string, want byte) {
		t.Helper()
		got := make([]byte, 64)
		if err := b.ReadBytes(got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bytes.Repeat([]byte{want}, 64)) {
			t.Errorf("%s: the copy read %v, want all %d", how, got[:8], want)
		}
	}
	for v := range byte(8) {
		if err := a.MemsetAsync(v+1, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(s2.After(s), cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 64, s2), s2.Synchronize()); err != nil {
		t.Fatal(err)
	}
	ordered("After", 8)
	// The same the other way round with an event of the caller's.
	mark, err := cu.NewEvent(2, nccl.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	for v := range byte(8) {
		if err := a.MemsetAsync(20+v, s2); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(mark.Record(s2), s.Wait(mark), cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 64, s), s.Synchronize()); err != nil {
		t.Fatal(err)
	}
	ordered("Wait", 27)
	if err := errors.Join(start.Destroy(), end.Destroy(), never.Destroy(), mark.Destroy()); err != nil {
		t.Error(err)
	}

	if err := cu.DefaultStream(2).Synchronize(); err != nil {
		t.Errorf("legacy stream Synchronize: %v", err)
	}
	if err := cu.DefaultStream(2).Destroy(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Destroy of the legacy stream: %v", err)
	}
	if err := (nccl.Stream{}).Synchronize(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Synchronize of the zero Stream: %v", err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); !errors.Is(err, nccl.ErrClosed) { // never reaches CUDA with a dead handle
		t.Errorf("second stream Destroy: %v", err)
	}
	if err := errors.Join(s0.Destroy(), s2.Destroy(), cu.FreeHost(pinned), a.Free(), b.Free()); err != nil {
		t.Error(err)
	}
	if err := cu.DeviceSynchronize(2); err != nil {
		t.Error(err)
	}
}

// TestNoDevice: with no GPU, the runtime's answer is a typed error and creating
// a communicator fails cleanly, in a process whose runtime sees no device.
func TestNoDevice(t *testing.T) {
	out, err := fakes.RunChild(t, 0, "no-device", "FAKECUDA_DEVICES=0",
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
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, ctx := range []context.Context{context.Background(), ctx} {
			if _, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil)); !errors.Is(err, nccl.ErrNoDevice) {
				return fmt.Errorf("InitRank: %v, want ErrNoDevice", err)
			}
		}
		if _, err := l.CUDA().Alloc(0, nccl.Float32, 1); !errors.Is(err, nccl.ErrNoDevice) {
			return fmt.Errorf("Alloc: %v, want ErrNoDevice", err)
		}
		return nil
	}
}

func TestLibraryClose(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			l := open(t, "default")
			ctx := m.ctx(t)
			id, _ := l.GetUniqueID()
			c, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil))
			if err != nil {
				t.Fatal(err)
			}
			m.check(t, l, c)
			if err := l.Close(); !errors.Is(err, nccl.ErrInvalidUsage) {
				t.Fatalf("Close with an open communicator: %v", err)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.GetUniqueID(); !errors.Is(err, nccl.ErrClosed) {
				t.Errorf("GetUniqueID after Close: %v", err)
			}
			if _, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil)); !errors.Is(err, nccl.ErrClosed) {
				t.Errorf("InitRank after Close: %v", err)
			}
			if _, err := l.InitAll(ctx, []int{0, 1}, modeOf(ctx, nil)); !errors.Is(err, nccl.ErrClosed) {
				t.Errorf("InitAll after Close: %v", err)
			}
			if _, err := l.MemAlloc(0, nccl.Float32, 16); !errors.Is(err, nccl.ErrClosed) {
				t.Errorf("MemAlloc after Close: %v", err)
			}
			if err := l.Group(func() error { return nil }); !errors.Is(err, nccl.ErrClosed) {
				t.Errorf("Group after Close: %v", err)
			}
			// The CUDA runtime is not NCCL's: as Close's doc says, it stays usable.
			b, err := l.CUDA().Alloc(0, nccl.Float32, 16)
			if err != nil {
				t.Errorf("CUDA Alloc after Library.Close: %v", err)
			} else if err := b.Free(); err != nil {
				t.Error(err)
			}
			if s, err := l.CUDA().NewStream(0, nccl.StreamNonBlocking); err != nil {
				t.Errorf("NewStream after Library.Close: %v", err)
			} else if err := s.Destroy(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestAlltoAllvMatricesKeptUntilGroupEnd: VCCL reads the count and
// displacement arrays when the group ends, long after AlltoAllv returned. The
// arrays here are reachable from nowhere else, and the garbage collector runs
// and memory is churned before the group ends; the fake, which like VCCL reads
// them then, fails the group if they changed. It also shows the fake catches a
// caller who changes them.
func TestAlltoAllvMatricesKeptUntilGroupEnd(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) { testAlltoAllvMatricesKept(t, m) })
	}
}

func testAlltoAllvMatricesKept(t *testing.T, m commMode) {
	l := open(t, "vccl11")
	ranks := startRanks(t, l, 2, m)
	bufs := make([][2]nccl.Buffer, 2)
	collective := func(fn func(r int, rk rank) error) error {
		errs := make([]error, len(ranks))
		var wg sync.WaitGroup
		for r, rk := range ranks { // symmetric allocation is collective: one goroutine per rank
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = fn(r, rk)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	err := collective(func(r int, rk rank) error {
		if err := rk.comm.SetPath(nccl.Native); err != nil { // the path that reads the matrices late
			return err
		}
		for k := range bufs[r] {
			b, err := rk.comm.AllocSymmetric(nccl.Int32, 1024)
			if err != nil {
				return err
			}
			bufs[r][k] = b
		}
		return nil
	})
	defer collective(func(r int, rk rank) error {
		var err error
		for _, b := range bufs[r] {
			if b != (nccl.Buffer{}) {
				err = errors.Join(err, b.Free())
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var keep [][]uint64
	enqueue := func(change bool) error {
		return l.Group(func() error {
			for r, rk := range ranks {
				mat := a2avMatrix(2, 3) // fresh arrays, referenced only by the call
				if change {
					keep = mat[:]
				}
				layout := nccl.Layout{SendCounts: mat[0], SendDispls: mat[1], RecvCounts: mat[2], RecvDispls: mat[3]}
				if err := rk.comm.AlltoAllv(bufs[r][0], bufs[r][1], layout, rk.s); err != nil {
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
	// gonccl replays the group's calls when the group ends, so the fake reads
	// the changed arrays in ncclAlltoAllv itself and refuses them there.
	if err := enqueue(true); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Fatalf("arrays changed inside the group: %v, want ErrInvalidArgument from the fake", err)
	}
	for _, rk := range ranks {
		if err := rk.s.Synchronize(); err != nil {
			t.Error(err)
		}
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

// TestCopyInComplete: the fake runtime, like CUDA, returns from a pageable
// host-to-device cudaMemcpy before the bytes land (they follow on the legacy
// stream). CopyIn and Buffer.WriteBytes promise they are there: a non-blocking
// stream's copy right after must read them, and a raw cudaMemcpy (called here
// through the runtime itself) gives no such promise.
func TestCopyInComplete(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	// Staged copies land 2 ms late, so the outcome does not hang on timing.
	setDelay := cudaFn(t, cu, "fakecuda_set_dma_delay_us")
	ccall.Call(setDelay, 2000)
	defer ccall.Call(setDelay, 0)
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, err := cu.Alloc(0, nccl.Uint8, 4096)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cu.Alloc(0, nccl.Uint8, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	defer b.Free()
	host, got := make([]byte, 4096), make([]byte, 4096)
	round := func(it int, copyIn func() error) bool {
		for k := range host {
			host[k] = byte(it*31 + k%251)
		}
		if err := copyIn(); err != nil {
			t.Fatal(err)
		}
		if err := cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), len(host), s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := b.ReadBytes(got); err != nil {
			t.Fatal(err)
		}
		return bytes.Equal(got, host)
	}
	for it := range 20 {
		if !round(it, func() error { return nccl.CopyIn(a, host) }) {
			t.Fatalf("round %d: the bytes of CopyIn had not landed when it returned", it)
		}
	}
	for it := range 20 {
		if !round(50+it, func() error { return a.WriteBytes(host) }) {
			t.Fatalf("round %d: the bytes of WriteBytes had not landed when it returned", it)
		}
	}
	memcpy := cudaFn(t, cu, "cudaMemcpy")
	stale := 0
	for it := range 20 {
		if !round(100+it, func() error {
			return cu.OnDevice(0, func() error { // the runtime's current device is the destination's
				if r := ccall.CallPtr(memcpy, uintptr(a.Ptr()), uintptr(unsafe.Pointer(&host[0])), uintptr(len(host)), uintptr(abi.MemcpyHostToDevice)); r != 0 {
					return fmt.Errorf("cudaMemcpy = %d", r)
				}
				return nil
			})
		}) {
			stale++
		}
	}
	if stale < 15 { // 2 ms late against a 0.2 ms stream: all 20, barring a stalled machine
		t.Errorf("a raw pageable cudaMemcpy was complete %d times of 20: the fake no longer models CUDA's staged copy", 20-stale)
	}
}

// TestOpenReadsVersionOnce: Open reads NCCL's version once, in the search's
// check of the candidate, and keeps what it read.
func TestOpenReadsVersionOnce(t *testing.T) {
	l := lcOpen(t)
	defer l.Close()
	reads := fakeFn(t, l, "fakenccl_version_reads")
	before := ccall.Call(reads)
	l2, err := nccl.Open(nccl.WithLibrary(l.Path), nccl.WithoutCUDARuntime())
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if n := ccall.Call(reads) - before; n != 1 || l2.Version() != l.Version() {
		t.Fatalf("Open read the version %d times (version %v, want %v); want once", n, l2.Version(), l.Version())
	}
}
