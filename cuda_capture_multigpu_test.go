package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes/graphtest"
)

// TestCaptureSeveralGPUsOneGoroutine: one goroutine driving N GPUs captures
// each GPU's stream at once (BeginCapture on every stream, one Group of
// all-reduces, EndCapture on every stream; and nested Capture calls), as
// nccl-bench -g N -G does. CUDA refuses to instantiate a graph on a thread
// that still captures (900, seen on H100; the fake cudart refuses too): the
// graphs wait for the last EndCapture. Before it, a waiting graph's Launch is
// refused with ErrCapturing; after it, every graph launches, fresh random
// inputs each time, every element checked against a host reduction. A
// waiting graph destroyed before the last EndCapture is skipped.
func TestCaptureSeveralGPUsOneGoroutine(t *testing.T) {
	for _, tc := range []struct {
		variant string
		nranks  int
		nested  bool
	}{{"default", 2, false}, {"default", 4, false}, {"v230", 3, false}, {"default", 3, true}} {
		t.Run(fmt.Sprintf("%s/%dgpus/nested=%v", tc.variant, tc.nranks, tc.nested), func(t *testing.T) {
			captureSeveralGPUs(t, open(t, tc.variant), tc.nranks, tc.nested)
		})
	}
}

// captureSeveralGPUs is TestCaptureSeveralGPUsOneGoroutine on l's first
// nranks GPUs (the fakes' or real ones: TestGPUCaptureSeveralGPUs).
func captureSeveralGPUs(t *testing.T, l *nccl.Library, nranks int, nested bool) {
	comms := initComms(t, l, nranks, context.Background(), nil)
	defer graphtest.CloseComms(t, comms)
	cu := l.CUDA()
	const n, launches = 333, 3
	specs := []graphtest.Spec{{DT: nccl.Float64, Op: nccl.Sum}, {DT: nccl.Int64, Op: nccl.Max}}
	rks := make([]*graphtest.Rank, nranks)
	ins := make([][]nccl.Buffer, nranks)
	outs := make([][]nccl.Buffer, nranks)
	for r, c := range comms {
		rk, err := graphtest.NewRank(cu, c, 16*n*len(specs)*launches)
		if err != nil {
			t.Fatal(err)
		}
		rks[r] = rk
		defer rk.Free()
		for _, sp := range specs {
			in, err := rk.Alloc(sp.DT, n, 0)
			if err != nil {
				t.Fatal(err)
			}
			out, err := rk.Alloc(sp.DT, n, graphtest.Sentinel)
			if err != nil {
				t.Fatal(err)
			}
			ins[r], outs[r] = append(ins[r], in), append(outs[r], out)
		}
	}
	group := func() error {
		return l.Group(func() error {
			for r, rk := range rks {
				for k, sp := range specs {
					if err := rk.Comm.AllReduce(ins[r][k], outs[r][k], sp.Op, rk.Stream); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if nested {
		var capt func(r int) error
		capt = func(r int) error {
			if r == len(rks) {
				return group()
			}
			g, err := cu.Capture(rks[r].Stream, func() error { return capt(r + 1) })
			rks[r].Graph = g
			return err
		}
		if err := capt(0); err != nil {
			t.Fatalf("nested captures: %v", err)
		}
	} else {
		for _, rk := range rks {
			if err := cu.BeginCapture(rk.Stream); err != nil {
				t.Fatal(err)
			}
		}
		if err := group(); err != nil {
			t.Fatal(err)
		}
		for r, rk := range rks {
			g, err := cu.EndCapture(rk.Stream)
			if err != nil {
				t.Fatalf("EndCapture of GPU %d: %v", r, err)
			}
			rk.Graph = g
			if r == len(rks)-1 {
				break
			}
			// Captures are still open on this goroutine: not instantiated yet.
			err = g.Launch(rk.Stream)
			if !errors.Is(err, nccl.ErrCapturing) {
				t.Fatalf("Launch of GPU %d's graph before the last EndCapture: %v, want ErrCapturing", r, err)
			}
			// The refusal names a capture still open, which the graph waits for.
			var ce *nccl.CaptureError
			open := false
			for _, later := range rks[r+1:] {
				open = open || errors.As(err, &ce) && ce.Stream == later.Stream.Handle() && ce.Device == later.Comm.Device()
			}
			if !open {
				t.Fatalf("Launch of GPU %d's waiting graph: %v does not name a capture still open", r, err)
			}
		}
	}
	for r, rk := range rks {
		if rk.Graph == nil || rk.Graph.Handle() == 0 {
			t.Fatalf("GPU %d's graph was not instantiated after the last capture ended", r)
		}
		if err := rk.Sync(); err != nil {
			t.Fatal(err)
		}
		for _, out := range outs[r] {
			if err := graphtest.Untouched(out, graphtest.Sentinel); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := rand.Uint64()
	for launch := range launches {
		for r, rk := range rks {
			for k, sp := range specs {
				if err := rk.Put(ins[r][k], graphtest.GenData(sp.DT, n, graphtest.Seed(base, r, launch, k))); err != nil {
					t.Fatal(err)
				}
			}
		}
		for r, rk := range rks { // graph launches of one collective, one goroutine: no group needed
			if err := rk.Graph.Launch(rk.Stream); err != nil {
				t.Fatalf("launch %d on GPU %d: %v", launch, r, err)
			}
		}
		got := make([][][]byte, len(rks))
		for r, rk := range rks {
			for k := range specs {
				b, err := rk.Get(outs[r][k])
				if err != nil {
					t.Fatal(err)
				}
				got[r] = append(got[r], b)
			}
		}
		for r, rk := range rks {
			if err := rk.Sync(); err != nil {
				t.Fatal(err)
			}
			for k, sp := range specs {
				all := make([][]byte, len(rks))
				for p := range rks {
					all[p] = graphtest.GenData(sp.DT, n, graphtest.Seed(base, p, launch, k))
				}
				if err := graphtest.SameData(sp.DT, got[r][k], graphtest.ReduceRef(sp.DT, sp.Op, all)); err != nil {
					t.Fatalf("launch %d, GPU %d, all-reduce %d (%v, %v): %v", launch, r, k, sp.DT, sp.Op, err)
				}
			}
		}
	}
}

// TestCaptureWaitingGraphDestroyed: a graph waiting for its goroutine's other
// capture to end can be destroyed; the last EndCapture then skips it, and the
// other graph works.
func TestCaptureWaitingGraphDestroyed(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	var ss []nccl.Stream
	for dev := range 2 {
		s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		ss = append(ss, s)
	}
	b, err := cu.Alloc(1, nccl.Int32, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for _, s := range ss {
		if err := cu.BeginCapture(s); err != nil {
			t.Fatal(err)
		}
	}
	g0, err := cu.EndCapture(ss[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := g0.Destroy(); err != nil {
		t.Fatalf("Destroy of a waiting graph: %v", err)
	}
	if err := b.MemsetAsync(7, ss[1]); err != nil {
		t.Fatal(err)
	}
	g1, err := cu.EndCapture(ss[1])
	if err != nil {
		t.Fatalf("the last EndCapture, after the waiting graph was destroyed: %v", err)
	}
	defer g1.Destroy()
	if err := g0.Launch(ss[0]); !errors.Is(err, nccl.ErrClosed) {
		t.Fatalf("Launch of the destroyed graph: %v, want ErrClosed", err)
	}
	if err := g1.Launch(ss[1]); err != nil {
		t.Fatal(err)
	}
	if err := ss[1].Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, b.Size())
	if err := b.ReadBytes(got); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 7 {
			t.Fatalf("byte %d = %d after the graph's memset, want 7", i, v)
		}
	}
}

// TestCaptureRefusesGoMemory: a typed async copy between ordinary Go memory
// and a capturing stream is refused (ErrCapturing) before CUDA: the graph
// would copy from that address at every launch, after the garbage collector
// may have reused it (a new user saw a graph read a newer allocation's bytes).
// The capture goes on; a copy from page-locked memory (MallocHostOf) is
// captured, and each launch reads what that memory holds then.
func TestCaptureRefusesGoMemory(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	b, err := cu.Alloc(0, nccl.Float32, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	pinned, err := nccl.MallocHostOf[float32](cu, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer nccl.FreeHostOf(cu, pinned)
	goMem := make([]float32, 256)
	g, err := cu.Capture(s, func() error {
		if err := nccl.CopyInAsync(b, goMem, s); !errors.Is(err, nccl.ErrCapturing) {
			return fmt.Errorf("CopyInAsync from Go memory into a capture: %v, want ErrCapturing", err)
		}
		if err := nccl.CopyOutAsync(goMem, b, s); !errors.Is(err, nccl.ErrCapturing) {
			return fmt.Errorf("CopyOutAsync into Go memory from a capture: %v, want ErrCapturing", err)
		}
		return nccl.CopyInAsync(b, pinned, s) // the capture is still good
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	for launch := range 3 {
		for i := range pinned {
			pinned[i] = float32(launch*1000 + i)
		}
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 256)
		if err := nccl.CopyOut(got, b); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != float32(launch*1000+i) {
				t.Fatalf("launch %d: element %d = %v, want the page-locked memory's %v", launch, i, v, float32(launch*1000+i))
			}
		}
	}
	// Outside a capture Go memory is fine.
	if err := nccl.CopyInAsync(b, goMem, s); err != nil {
		t.Fatal(err)
	}
}
