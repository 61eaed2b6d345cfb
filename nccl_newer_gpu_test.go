//go:build gpu

package nccl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// The NCCL 2.27–2.30 calls on a real library: each subtest runs where the
// loaded NCCL exports the function, and otherwise checks the typed "requires
// NCCL >= x" error, so one binary covers 2.28.3, 2.28.9, VCCL 2.29.2 and 2.30.7.

// gated runs f if l exports sym, or checks that call returns the
// *UnsupportedError naming sym.
func gated(t *testing.T, l *nccl.Library, sym string, call func() error, f func(t *testing.T)) {
	t.Helper()
	if l.Has(sym) {
		f(t)
		return
	}
	err := call()
	var ue *nccl.UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, nccl.ErrNotSupported) || ue.Name != sym {
		t.Fatalf("%s on NCCL %s: %v, want the typed unsupported error", sym, l.Version(), err)
	}
	t.Logf("NCCL %s lacks %s: %v", l.Version(), sym, err)
}

func TestGPUNewerQueries(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	ranks := initRanks(t, l, 2)
	c := ranks[1].comm
	t.Run("Properties", func(t *testing.T) {
		gated(t, l, "ncclCommQueryProperties", func() error { _, err := c.Properties(); return err }, func(t *testing.T) {
			for r, rk := range ranks {
				p, err := rk.comm.Properties()
				if err != nil {
					t.Fatal(err)
				}
				if p.Rank != r || p.Size != 2 || p.CUDADevice != rk.dev {
					t.Errorf("rank %d: properties %+v", r, p)
				}
				t.Logf("rank %d: %+v", r, p)
			}
		})
	})
	t.Run("Params", func(t *testing.T) {
		gated(t, l, "ncclParamBind", func() error { _, err := l.BindParam("NCCL_DEBUG_SUBSYS"); return err }, func(t *testing.T) {
			keys, err := l.ParamKeys()
			if err != nil || len(keys) == 0 {
				t.Fatalf("ParamKeys: %d keys, %v", len(keys), err)
			}
			for _, k := range keys {
				v, err := l.Param(k)
				if err != nil {
					t.Errorf("Param(%s): %v", k, err)
				}
				t.Logf("%s = %q", k, v)
			}
			// gpu-check.sh leaves the debug settings at their defaults.
			h, err := l.BindParam("NCCL_DEBUG_SUBSYS")
			if err != nil {
				t.Fatal(err)
			}
			if v, err := nccl.ParamValue[uint64](h); err != nil || v != 0x1081 {
				t.Errorf("NCCL_DEBUG_SUBSYS = %#x, %v; want the default INIT|ENV|BOOTSTRAP", v, err)
			}
			if v, err := l.Param("NCCL_DEBUG_SUBSYS"); err != nil || v != "INIT,ENV,BOOTSTRAP" {
				t.Errorf("Param(NCCL_DEBUG_SUBSYS) = %q, %v", v, err)
			}
			if _, err := l.BindParam("NCCL_NVLS_ENABLE"); !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("NCCL_NVLS_ENABLE, an NCCL_PARAM outside the registry: %v", err)
			}
			if _, err := l.BindParam("NCCL_NO_SUCH_THING"); !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("an unknown key: %v", err)
			}
		})
	})
	t.Run("MemStatsSuspendResume", func(t *testing.T) {
		gated(t, l, "ncclCommSuspend", func() error { return c.Suspend(nccl.SuspendMem) }, func(t *testing.T) {
			ctx := context.Background()
			onRanks(t, []int{0, 1}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })
			before, err := c.MemStats()
			if err != nil {
				t.Fatal(err)
			}
			free0, _, _ := l.CUDA().MemGetInfo(ranks[1].dev)
			onRanks(t, []int{0, 1}, func(r int) error { return ranks[r].comm.Suspend(nccl.SuspendMem) })
			during, err := c.MemStats()
			if err != nil {
				t.Fatal(err)
			}
			free1, _, _ := l.CUDA().MemGetInfo(ranks[1].dev)
			if err := c.Suspend(nccl.SuspendMem); err == nil {
				t.Error("Suspend twice succeeded")
			} else {
				t.Logf("Suspend twice: %v", err)
			}
			onRanks(t, []int{0, 1}, func(r int) error { return ranks[r].comm.Resume() })
			after, err := c.MemStats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("before %+v; suspended %+v (GPU free +%d MiB); resumed %+v", before, during, (int64(free1)-int64(free0))>>20, after)
			if !during.Suspended || after.Suspended {
				t.Errorf("Suspended flag: %v while suspended, %v after Resume", during.Suspended, after.Suspended)
			}
			onRanks(t, []int{0, 1}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })
		})
	})
}

// TestGPUPutSignal: one-sided puts between two GPUs over symmetric windows,
// every byte checked, both directions.
func TestGPUPutSignal(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	ranks := initRanksCtx(t, l, 2, commModes[1].ctx(t))
	gated(t, l, "ncclSignal", func() error {
		return ranks[0].comm.Signal(1, ranks[0].s)
	}, func(t *testing.T) {
		const half, size, off = 1 << 20, 1<<20 - 4096 - 17, 4096 + 3
		syms := make([]nccl.Buffer, 2)
		onRanks(t, []int{0, 1}, func(r int) (err error) {
			syms[r], err = ranks[r].comm.AllocSymmetric(nccl.Uint8, 2*half)
			return err
		})
		defer onRanks(t, []int{0, 1}, func(r int) error { return syms[r].Free() })
		rng := rand.New(rand.NewPCG(3, 4))
		data := make([][]byte, 2)
		puts := make([]nccl.Stream, 2)
		for r := range 2 {
			data[r] = make([]byte, size)
			for i := range data[r] {
				data[r][i] = byte(rng.Uint32())
			}
			if err := syms[r].Memset(0); err != nil {
				t.Fatal(err)
			}
			if err := nccl.CopyIn(syms[r].Slice(0, size), data[r]); err != nil {
				t.Fatal(err)
			}
			s, err := l.CUDA().NewStream(ranks[r].dev, nccl.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			puts[r] = s
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Connect the ranks with an all-reduce first (NCCL connects inside
		// a communicator's first operations), then put, then wait.
		onRanks(t, []int{0, 1}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })
		onRanks(t, []int{0, 1}, func(r int) error {
			c, peer := ranks[r].comm, 1-r
			win, base, err := c.WindowOf(syms[r].Slice(half, 2*half))
			if err != nil {
				return err
			}
			if err := c.PutSignal(syms[r].Slice(0, size), peer, win, base+off, puts[r]); err != nil {
				return err
			}
			if err := c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(peer)}}, ranks[r].s); err != nil {
				return err
			}
			if err := c.Wait(ctx, puts[r]); err != nil {
				return fmt.Errorf("put: %w", err)
			}
			return c.Wait(ctx, ranks[r].s)
		})
		for r := range 2 {
			got := make([]byte, half)
			if err := nccl.CopyOut(got, syms[r].Slice(half, 2*half)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[off:off+size], data[1-r]) {
				t.Errorf("rank %d: the window does not hold rank %d's bytes", r, 1-r)
			}
			if !bytes.Equal(got[:off], make([]byte, off)) || !bytes.Equal(got[off+size:], make([]byte, half-off-size)) {
				t.Errorf("rank %d: bytes outside the put changed", r)
			}
		}
		t.Logf("%d bytes put each way at window offset %d, every byte checked", size, off)
		// Bad input: a source outside any window.
		plain, err := l.CUDA().Alloc(ranks[0].dev, nccl.Uint8, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Free()
		win, _, err := ranks[0].comm.WindowOf(syms[0])
		if err != nil {
			t.Fatal(err)
		}
		err = ranks[0].comm.PutSignal(plain, 1, win, 0, puts[0])
		t.Logf("PutSignal from unregistered memory: %v", err)
		if err == nil {
			t.Error("PutSignal from memory outside every window succeeded")
		}
	})
}

// TestGPURevokeShrinkGrow: rank 1 stops taking part; rank 0's Wait reaches its
// deadline and, under RevokeOnDeadline, revokes; rank 0 shrinks to itself,
// all-reduces alone, then grows back to two ranks with a new rank 1 on the
// second GPU, and the two all-reduce, checked.
func TestGPURevokeShrinkGrow(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	ctx := commModes[1].ctx(t)
	ranks := initRanksCtx(t, l, 2, ctx) // non-blocking
	gated(t, l, "ncclCommGetUniqueId", func() error { _, err := ranks[0].comm.GrowID(); return err }, func(t *testing.T) {
		onRanks(t, []int{0, 1}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })
		if err := ranks[0].comm.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
			t.Fatal(err)
		}
		hang(t, ranks, 0) // rank 1 never joins
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		began := time.Now()
		err := ranks[0].comm.Wait(wctx, ranks[0].s)
		if !errors.Is(err, context.DeadlineExceeded) || !ranks[0].comm.Revoked() {
			t.Fatalf("Wait: %v (revoked %v)", err, ranks[0].comm.Revoked())
		}
		if err := ranks[0].s.Synchronize(); err != nil {
			t.Fatalf("the stream after the revoke: %v", err)
		}
		t.Logf("Wait revoked after %v: %v", time.Since(began).Round(time.Millisecond), err)
		// Rank 1 is the "dead" one here: its communicator is aborted.
		ranks[1].comm.Abort()
		began = time.Now()
		solo, err := ranks[0].comm.Shrink(ctx, []int{1}, nil, nccl.ShrinkAbort)
		if err != nil {
			t.Fatalf("Shrink: %v", err)
		}
		t.Logf("shrunk to %d rank in %v", solo.Size(), time.Since(began).Round(time.Millisecond))
		if err := ranks[0].comm.Close(ctx); err != nil {
			t.Errorf("Close of the revoked communicator: %v", err)
		}
		if err := sumCheck(ctx, solo, ranks[0].s, 0, tags(0)); err != nil {
			t.Fatal(err)
		}
		id, err := solo.GrowID()
		if err != nil {
			t.Fatal(err)
		}
		s1, err := l.CUDA().NewStream(devOf(1), nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		defer s1.Destroy()
		grown := make([]*nccl.Comm, 2)
		streams := []nccl.Stream{ranks[0].s, s1}
		began = time.Now()
		onRanks(t, []int{0, 1}, func(r int) (err error) {
			if r == 0 {
				grown[0], err = solo.Grow(ctx, 2, &id, nil)
			} else {
				grown[1], err = l.GrowRank(ctx, devOf(1), id, 2, 1, modeOf(ctx, nil))
			}
			if err != nil {
				return err
			}
			return sumCheck(ctx, grown[r], streams[r], uint64(10+r), tags(10, 11))
		})
		t.Logf("grown back to 2 ranks and all-reduced in %v", time.Since(began).Round(time.Millisecond))
		for r, c := range append(grown, solo) {
			if err := c.Close(ctx); err != nil {
				t.Errorf("close %d: %v", r, err)
			}
		}
	})
}

// TestGPUCaptureOneRank: a real capture of NCCL operations (one rank, so that
// one process drives one GPU as NCCL's graph support wants): K all-reduces
// captured, replayed with new inputs, every element checked; Close refuses
// while the graph holds the communicator and succeeds once it is destroyed;
// synchronous calls during the capture are refused and the capture survives.
func TestGPUCaptureOneRank(t *testing.T) {
	l, _ := openReal(t)
	cu := l.CUDA()
	if !cu.HasGraphs() {
		t.Skip("the CUDA runtime lacks graphs")
	}
	ranks := initRanks(t, l, 1)
	c, s := ranks[0].comm, ranks[0].s
	const k, elems = 4, 1 << 12
	bufs := make([]nccl.Buffer, k)
	for i := range bufs {
		b, err := cu.Alloc(0, nccl.Float32, elems)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		bufs[i] = b
	}
	out, err := cu.Alloc(0, nccl.Float32, elems)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	g, err := cu.Capture(s, func() error {
		if err := bufs[0].Memset(0); !errors.Is(err, nccl.ErrCapturing) {
			return fmt.Errorf("a synchronous memset during the capture: %v", err)
		}
		for i := range k - 1 { // out = in0 + ... chained: b[i+1] = allreduce(b[i])
			if err := c.AllReduce(bufs[i], bufs[i+1], nccl.Sum, s); err != nil {
				return err
			}
		}
		return c.AllReduce(bufs[k-1], out, nccl.Max, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	host := make([]float32, elems)
	got := make([]float32, elems)
	for launch := range 5 {
		for i := range host {
			host[i] = float32(rng.IntN(1000))
		}
		if err := nccl.CopyIn(bufs[0], host); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if err := nccl.CopyOut(got, out); err != nil {
			t.Fatal(err)
		}
		for i := range host {
			if got[i] != host[i] {
				t.Fatalf("launch %d: element %d = %v, want %v", launch, i, got[i], host[i])
			}
		}
	}
	if err := c.Close(context.Background()); !errors.Is(err, nccl.ErrGraphsAlive) {
		t.Fatalf("Close with a live graph: %v", err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close after the graph was destroyed did not return in 30 s")
	}
	t.Logf("%d launches of %d captured all-reduces checked; Close refused with the graph alive, closed after Destroy", 5, k)
}
