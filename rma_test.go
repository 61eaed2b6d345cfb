package nccl_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

func TestPutSignal(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) { testPutSignal(t, m) })
	}
}

func testPutSignal(t *testing.T, m commMode) {
	l := open(t, "v230")
	const n, half, size, off = 3, 8192, 5003, 1237
	ranks := startRanks(t, l, n, m)
	all := []int{0, 1, 2}
	next := func(r int) int { return (r + 1) % n }
	prev := func(r int) int { return (r + n - 1) % n }
	// One symmetric buffer per rank: the source in the first half, the
	// window the predecessor writes to in the second.
	syms := make([]nccl.Buffer, n)
	onRanks(t, all, func(r int) (err error) {
		syms[r], err = ranks[r].comm.AllocSymmetric(nccl.Uint8, 2*half)
		return err
	})
	defer onRanks(t, all, func(r int) error { return syms[r].Free() })
	puts := make([]nccl.Stream, n) // a stream for the puts: the ranks' own streams wait
	data := make([][]byte, n)
	rng := rand.New(rand.NewPCG(7, 11))
	for r := range n {
		s, err := l.CUDA().NewStream(ranks[r].dev, nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		puts[r] = s
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
	}
	// Each rank's stream waits for its predecessor's put, which has not come.
	onRanks(t, all, func(r int) error {
		return ranks[r].comm.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(prev(r))}}, ranks[r].s)
	})
	time.Sleep(20 * time.Millisecond)
	for r := range n {
		if done, err := ranks[r].s.Query(); done || err != nil {
			t.Fatalf("rank %d: WaitSignal ended (%v) before any signal", r, err)
		}
	}
	onRanks(t, all, func(r int) error {
		c := ranks[r].comm
		win, base, err := c.WindowOf(syms[r].Slice(half, 2*half))
		if err != nil {
			return err
		}
		if base != half {
			t.Errorf("rank %d: window offset %d, want %d", r, base, half)
		}
		if p, err := c.WindowAddress(win); err != nil || p != syms[r].Ptr() {
			t.Errorf("rank %d: WindowAddress %#x, %v; want %#x", r, p, err, syms[r].Ptr())
		}
		if err := c.PutSignal(syms[r].Slice(0, size), next(r), win, base+off, puts[r]); err != nil {
			return err
		}
		if err := puts[r].Synchronize(); err != nil {
			return err
		}
		return ranks[r].s.Synchronize() // the signal arrived: the wait ends
	})
	for r := range n { // every byte: the predecessor's data at the offset, nothing elsewhere
		got := make([]byte, half)
		if err := nccl.CopyOut(got, syms[r].Slice(half, 2*half)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[off:off+size], data[prev(r)]) {
			t.Errorf("rank %d: the window does not hold rank %d's bytes", r, prev(r))
		}
		if !bytes.Equal(got[:off], make([]byte, off)) || !bytes.Equal(got[off+size:], make([]byte, half-off-size)) {
			t.Errorf("rank %d: bytes outside the put changed", r)
		}
	}
	// Signals alone: two from each rank, one wait that consumes both.
	onRanks(t, all, func(r int) error {
		c := ranks[r].comm
		for range 2 {
			if err := c.Signal(next(r), puts[r]); err != nil {
				return err
			}
		}
		if err := c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 2, Peer: int32(prev(r))}}, ranks[r].s); err != nil {
			return err
		}
		return ranks[r].s.Synchronize()
	})
}

// TestPutSignalRefusesBadInput: every bad argument is a typed error from
// gonccl, before NCCL sees it: NCCL refuses some of them (a source outside
// every symmetric window, a put past the window) only inside the call, which
// leaves a non-blocking communicator in error for good (seen on NCCL 2.30.7,
// modelled by the fake). Both kinds of communicator must work on afterwards.
func TestPutSignalRefusesBadInput(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) { testPutSignalRefusesBadInput(t, m) })
	}
}

func testPutSignalRefusesBadInput(t *testing.T, m commMode) {
	l := open(t, "v230")
	ranks := initRanksCtx(t, l, 2, m.ctx(t))
	all := []int{0, 1}
	syms := make([]nccl.Buffer, 2)
	onRanks(t, all, func(r int) (err error) {
		syms[r], err = ranks[r].comm.AllocSymmetric(nccl.Uint8, 4096)
		return err
	})
	defer onRanks(t, all, func(r int) error { return syms[r].Free() })
	c, s := ranks[0].comm, ranks[0].s
	win, _, err := c.WindowOf(syms[0])
	if err != nil {
		t.Fatal(err)
	}
	plain, err := l.CUDA().Alloc(0, nccl.Uint8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Free()
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"a source outside any symmetric window", c.PutSignal(plain, 1, win, 0, s), "symmetric window"},
		{"a put past the window's end", c.PutSignal(syms[0].Slice(0, 64), 1, win, 4096-63, s), "overrun"},
		{"no window", c.PutSignal(syms[0].Slice(0, 64), 1, nccl.Window{}, 0, s), "window"},
		{"a peer out of range", c.PutSignal(syms[0].Slice(0, 64), 2, win, 0, s), "peer"},
		{"a negative offset", c.PutSignal(syms[0].Slice(0, 64), 1, win, -1, s), "offset"},
		{"a wait for no signal", c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 0, Peer: 1}}, s), "signals"},
		{"a wait on signal index 1", c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: 1, SigIdx: 1}}, s), "sigIdx"},
		{"a wait on context 1", c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: 1, Ctx: 1}}, s), "context"},
		{"no descriptors", c.WaitSignal(nil, s), "descriptors"},
		{"a signal to a peer out of range", c.Signal(-1, s), "peer"},
	} {
		if !errors.Is(tc.err, nccl.ErrInvalidArgument) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", tc.what, tc.err, tc.want)
		}
	}
	if _, _, err := c.WindowOf(plain); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("WindowOf a cudaMalloc buffer: %v", err)
	}
	if err := s.Synchronize(); err != nil { // nothing was enqueued
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	onRanks(t, all, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })
	if m.nonBlocking {
		return
	}

	old := open(t, "default")
	oc := initRanks(t, old, 1)[0]
	for what, err := range map[string]error{
		"PutSignal":  oc.comm.PutSignal(plain, 0, nccl.Window{}, 0, oc.s),
		"Signal":     oc.comm.Signal(0, oc.s),
		"WaitSignal": oc.comm.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1}}, oc.s),
	} {
		if !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "(2.28.3; requires >= 2.29.2)") {
			t.Errorf("%s on 2.28.3: %v", what, err)
		}
	}
	if _, err := oc.comm.WindowAddress(nccl.Window{}); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("WindowAddress on 2.28.3: %v", err)
	}
}

// The RMA calls allocate nothing (a WaitSignal whose slice is reused).
func TestRMANoAllocs(t *testing.T) {
	l := open(t, "v230")
	rk := initRanks(t, l, 1)[0]
	c := rk.comm
	sym, err := c.AllocSymmetric(nccl.Uint8, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer sym.Free()
	win, base, err := c.WindowOf(sym)
	if err != nil {
		t.Fatal(err)
	}
	src := sym.Slice(0, 64)
	waits := []nccl.WaitSignalDesc{{OpCnt: 2, Peer: 0}}
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.PutSignal(src, 0, win, base+4096, rk.s); err != nil {
			t.Fatal(err)
		}
		if err := c.Signal(0, rk.s); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitSignal(waits, rk.s); err != nil {
			t.Fatal(err)
		}
	})
	if err := rk.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per PutSignal, Signal and WaitSignal", allocs)
	}
}
