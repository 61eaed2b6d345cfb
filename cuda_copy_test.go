package nccl_test

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
)

// TestCopyAsync: typed stream-ordered copies, from ordinary and page-locked
// host memory, between buffers on one device and on two, every element
// checked; bad input refused before CUDA; no allocation per copy.
func TestCopyAsync(t *testing.T) {
	cu := open(t, "default").CUDA()
	const n = 4099
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, err := cu.Alloc(0, nccl.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	b, err := cu.Alloc(0, nccl.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	c1, err := cu.Alloc(1, nccl.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Free()
	pinned, err := nccl.MallocHostOf[float32](cu, n)
	if err != nil {
		t.Fatal(err)
	}
	defer nccl.FreeHostOf(cu, pinned)
	if len(pinned) != n {
		t.Fatalf("MallocHostOf: %d elements", len(pinned))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, n)
	for round := range 3 {
		for i := range src {
			src[i] = rng.Float32()
		}
		host := src
		if round == 1 {
			copy(pinned, src)
			host = pinned
		}
		if err := nccl.CopyInAsync(a, host, s); err != nil {
			t.Fatal(err)
		}
		if err := nccl.CopyAsync(b, a, s); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if round == 2 { // into page-locked memory: valid after the stream passes it
			clear(pinned)
			if err := nccl.CopyOutAsync(pinned, b, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			copy(got, pinned)
		} else {
			if err := nccl.CopyOutAsync(got, b, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range got {
			if got[i] != src[i] {
				t.Fatalf("round %d: element %d = %v, want %v", round, i, got[i], src[i])
			}
		}
	}
	// Across devices, on the destination's stream.
	s1, err := cu.NewStream(1, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Destroy()
	if err := nccl.CopyAsync(c1, a, s1); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := nccl.CopyOutAsync(got, c1, s1); err != nil {
		t.Fatal(err)
	}
	if err := s1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got[n-1] != src[n-1] || got[0] != src[0] {
		t.Fatalf("cross-device copy: %v..%v, want %v..%v", got[0], got[n-1], src[0], src[n-1])
	}

	ints := make([]int32, 4)
	for name, err := range map[string]error{
		"wrong type":         nccl.CopyInAsync(a, ints, s),
		"too long":           nccl.CopyInAsync(a, make([]float32, n+1), s),
		"too long out":       nccl.CopyOutAsync(make([]float32, n+1), a, s),
		"stream elsewhere":   nccl.CopyInAsync(a, src[:4], s1),
		"zero stream":        nccl.CopyOutAsync(got, a, nccl.Stream{}),
		"copy types":         nccl.CopyAsync(a, mustAlloc(t, cu, nccl.Int32, 4), s),
		"copy longer source": nccl.CopyAsync(a.Slice(0, 4), b, s),
		"zero buffer":        nccl.CopyInAsync(nccl.Buffer{}, src[:1], s),
	} {
		if !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := nccl.MallocHostOf[float64](cu, 0); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("MallocHostOf(0): %v", err)
	}
	if n := testing.AllocsPerRun(100, func() {
		nccl.CopyInAsync(a, pinned[:16], s)
		nccl.CopyOutAsync(pinned[:16], a, s)
		nccl.CopyAsync(b, a.Slice(0, 16), s)
	}); n != 0 {
		t.Errorf("%v allocations per three async copies", n)
	}
	s.Synchronize()
}

func mustAlloc(t *testing.T, cu *nccl.CUDA, dt nccl.DataType, n int) nccl.Buffer {
	t.Helper()
	b, err := cu.Alloc(0, dt, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

// TestRequire: one call says whether the loaded NCCL has what a program
// needs, with the same typed error a call would give.
func TestRequire(t *testing.T) {
	if err := open(t, "v230").Require("ncclPutSignal", "ncclCommShrink", "ncclAllReduce"); err != nil {
		t.Errorf("v230: %v", err)
	}
	err := open(t, "default").Require("ncclAllReduce", "ncclPutSignal")
	var ue *nccl.UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, nccl.ErrNotSupported) || ue.Name != "ncclPutSignal" || !strings.Contains(err.Error(), "requires >= 2.29.2") {
		t.Errorf("2.28.3 Require(ncclPutSignal): %v", err)
	}
	// A fork that reports a new enough version without the function says so.
	if l := open(t, "vccl11"); !l.Has("ncclPutSignal") {
		err := l.Require("ncclPutSignal")
		if !errors.Is(err, nccl.ErrNotSupported) || !strings.Contains(err.Error(), "(2.29.2; requires >= 2.29.2, which this build does not export)") {
			t.Errorf("VCCL 2.29.2 Require(ncclPutSignal): %v", err)
		}
	} else {
		t.Error("the vccl11 fake exports ncclPutSignal, which VCCL 2.29.2 lacks")
	}
	if err := open(t, "default").Require("ncclNoSuchThing"); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("an unknown name: %v", err)
	}
}

// TestAsyncCopiesOfPageableMemory: as CUDA does, a copy from ordinary Go
// memory is staged during the call (the slice may change at once), and a copy
// into it is done when the call returns.
func TestAsyncCopiesOfPageableMemory(t *testing.T) {
	cu := open(t, "v230").CUDA()
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	b := mustAlloc(t, cu, nccl.Float32, 4)
	host := []float32{1, 2, 3, 4}
	if err := nccl.CopyInAsync(b, host, s); err != nil {
		t.Fatal(err)
	}
	host[0] = 99
	got := make([]float32, 4)
	if err := nccl.CopyOutAsync(got, b, s); err != nil {
		t.Fatal(err)
	}
	if got[0] != 1 || got[3] != 4 { // no Synchronize: done at return
		t.Errorf("got %v, want [1 2 3 4]", got)
	}
}

// TestAsyncCopyOnAnotherDevicesLegacyStream: an async copy on
// DefaultStream(1) from a thread whose current device is 0 goes to device 1's
// legacy stream, not to the current device's legacy stream (0), so
// DefaultStream(1).Synchronize waits for it.
func TestAsyncCopyOnAnotherDevicesLegacyStream(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	b, err := cu.Alloc(1, nccl.Float32, 1024)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]float32, 1024)
	for i := range src {
		src[i] = 5
	}
	if err := nccl.CopyIn(b, src); err != nil {
		t.Fatal(err)
	}
	host, err := nccl.MallocHostOf[float32](cu, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer nccl.FreeHostOf(cu, host)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := cu.DefaultStream(1)
	if err := nccl.CopyOutAsync(host, b, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if host[1023] != 5 {
		t.Errorf("after DefaultStream(1).Synchronize the copy has not landed (host[1023]=%v): it went to device 0's legacy stream", host[1023])
	}
}
