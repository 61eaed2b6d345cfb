package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/ccall"
)

// onRanks runs f for each of rs in its own goroutine and fails the test with
// every error.
func onRanks(t *testing.T, rs []int, f func(r int) error) {
	t.Helper()
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(r); err != nil {
				errs[i] = fmt.Errorf("rank %d: %w", r, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// sumCheck all-reduces on c a vector that says who sent it (element i is
// tag×1000003+i) and checks that the sum is over exactly the members' tags:
// the communicator holds those ranks and no other.
func sumCheck(ctx context.Context, c *nccl.Comm, s nccl.Stream, tag uint64, members []uint64) error {
	const n = 257
	cu := c.Library().CUDA()
	buf, err := cu.Alloc(c.Device(), nccl.Uint64, n)
	if err != nil {
		return err
	}
	defer buf.Free()
	host := make([]uint64, n)
	for i := range host {
		host[i] = tag*1000003 + uint64(i)
	}
	if err := nccl.CopyIn(buf, host); err != nil {
		return err
	}
	if err := c.AllReduce(buf, buf, nccl.Sum, s); err != nil {
		return err
	}
	if err := c.Wait(ctx, s); err != nil {
		return err
	}
	if err := nccl.CopyOut(host, buf); err != nil {
		return err
	}
	for i, got := range host {
		var want uint64
		for _, m := range members {
			want += m*1000003 + uint64(i)
		}
		if got != want {
			return fmt.Errorf("element %d is %d, want %d (the sum over ranks %v)", i, got, want, members)
		}
	}
	return nil
}

// hang starts, on each of rs, an all-reduce that a missing rank never joins,
// and checks it is still running. The buffers are freed at cleanup.
func hang(t *testing.T, ranks []rank, rs ...int) {
	t.Helper()
	cu := ranks[0].comm.Library().CUDA()
	for _, r := range rs {
		rk := ranks[r]
		buf, err := cu.Alloc(rk.dev, nccl.Float32, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { buf.Free() })
		if err := rk.comm.AllReduce(buf, buf, nccl.Sum, rk.s); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for _, r := range rs {
		if done, err := ranks[r].s.Query(); done || err != nil {
			t.Fatalf("rank %d: the all-reduce ended (%v) without the missing rank", r, err)
		}
	}
}

func tags(rs ...int) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = uint64(r)
	}
	return out
}

func TestRevoke(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			l := open(t, "v230")
			before := liveComms(t, l)
			ranks := startRanks(t, l, 3, m)
			ctx := m.ctx(t)
			onRanks(t, []int{0, 1, 2}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1, 2)) })
			hang(t, ranks, 0, 1) // rank 2 never joins
			// Revoke stops the hung all-reduce: the streams drain.
			onRanks(t, []int{0, 1, 2}, func(r int) error {
				if err := ranks[r].comm.Revoke(ctx); err != nil {
					return err
				}
				return ranks[r].s.Synchronize()
			})
			buf, err := l.CUDA().Alloc(0, nccl.Float32, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Free()
			if err := ranks[0].comm.AllReduce(buf, buf, nccl.Sum, ranks[0].s); !errors.Is(err, nccl.ErrInvalidUsage) ||
				!strings.Contains(err.Error(), "revoked") {
				t.Errorf("AllReduce after Revoke: %v, want ErrInvalidUsage saying revoked", err)
			}
			if err := ranks[1].comm.Revoke(ctx); !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("second Revoke: %v, want ErrInvalidArgument", err)
			}
			// Close destroys without ncclCommFinalize, which NCCL refuses after a revoke.
			for r, rk := range ranks {
				if err := rk.comm.Close(ctx); err != nil {
					t.Errorf("rank %d: Close after Revoke: %v", r, err)
				}
			}
			if got := liveComms(t, l); got != before {
				t.Errorf("%d communicators live after Close, want %d", got, before)
			}
		})
	}
}

func TestShrink(t *testing.T) {
	for _, variant := range []string{"default", "v230"} {
		for _, m := range commModes {
			t.Run(variant+"/"+m.name, func(t *testing.T) { testShrink(t, variant, m) })
		}
	}
}

func testShrink(t *testing.T, variant string, m commMode) {
	l := open(t, variant)
	ranks := startRanks(t, l, 4, m)
	ctx := m.ctx(t)
	onRanks(t, []int{0, 1, 2, 3}, func(r int) error {
		return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1, 2, 3))
	})
	// Rank 1 dies: the others' next all-reduce never ends. They shrink it
	// away with ShrinkAbort, which stops that all-reduce first.
	hang(t, ranks, 0, 2, 3)
	subs := make([]*nccl.Comm, 4)
	survivors := []int{0, 2, 3}
	onRanks(t, survivors, func(r int) error {
		sub, err := ranks[r].comm.Shrink(ctx, []int{1}, nil, nccl.ShrinkAbort)
		if err != nil {
			return err
		}
		subs[r] = sub
		t.Cleanup(func() { sub.Close(context.Background()) })
		return ranks[r].s.Synchronize()
	})
	for i, r := range survivors { // renumbered in order: 0, 2, 3 become 0, 1, 2
		sub := subs[r]
		if sub.Rank() != i || sub.Size() != 3 || sub.Device() != ranks[r].dev || sub.Blocking() != ranks[r].comm.Blocking() {
			t.Fatalf("rank %d: shrunk to rank %d of %d on device %d (blocking %v), want rank %d of 3 on %d",
				r, sub.Rank(), sub.Size(), sub.Device(), sub.Blocking(), i, ranks[r].dev)
		}
	}
	onRanks(t, survivors, func(r int) error { return sumCheck(ctx, subs[r], ranks[r].s, uint64(r), tags(0, 2, 3)) })
	// A parent shrunk with ShrinkAbort is aborted by Close, not destroyed
	// (NCCL 2.31.2's ncclCommDestroy would wait for the dead rank).
	for _, r := range survivors {
		h := ranks[r].comm.Handle()
		if err := ranks[r].comm.Close(ctx); err != nil {
			t.Fatalf("rank %d: Close of the parent shrunk with ShrinkAbort: %v", r, err)
		}
		if by := ccall.GoString(ccall.Call(fakeFn(t, l, "fakenccl_freed_by"), h)); by != "ncclCommAbort" {
			t.Fatalf("rank %d: the parent shrunk with ShrinkAbort was freed by %q, want ncclCommAbort", r, by)
		}
	}

	// A healthy communicator shrinks with ShrinkDefault: its rank 0 leaves.
	subs2 := make([]*nccl.Comm, 4)
	onRanks(t, []int{2, 3}, func(r int) error {
		sub, err := subs[r].Shrink(ctx, []int{0}, nil, nccl.ShrinkDefault)
		if err != nil {
			return err
		}
		subs2[r] = sub
		defer sub.Close(ctx)
		if sub.Rank() != r-2 || sub.Size() != 2 {
			return fmt.Errorf("rank %d of %d, want %d of 2", sub.Rank(), sub.Size(), r-2)
		}
		return sumCheck(ctx, sub, ranks[r].s, uint64(r), tags(2, 3))
	})
}

func TestShrinkRefusesBadInput(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 3)
	ctx := context.Background()
	c := ranks[0].comm
	for _, tc := range []struct {
		name    string
		exclude []int
		flags   int
	}{
		{"a rank out of range", []int{3}, nccl.ShrinkDefault},
		{"a negative rank", []int{-1}, nccl.ShrinkDefault},
		{"itself", []int{0}, nccl.ShrinkDefault},
		{"a rank twice", []int{2, 2}, nccl.ShrinkDefault},
		{"nothing", nil, nccl.ShrinkDefault},
		{"unknown flags", []int{1}, 2},
	} {
		if sub, err := c.Shrink(ctx, tc.exclude, nil, tc.flags); sub != nil || !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("Shrink excluding %s: %v, %v; want ErrInvalidArgument", tc.name, sub, err)
		}
	}
	// The fake refuses the same as NCCL does, past gonccl's checks.
	excl := []int32{7}
	var out uintptr
	r := ccall.CallPtr(fakeFn(t, l, "ncclCommShrink"), c.Handle(), uintptr(unsafe.Pointer(&excl[0])), 1, uintptr(unsafe.Pointer(&out)), 0, 0)
	if int32(r) != 4 || out != 0 || !strings.Contains(l.LastError(), "out of range") {
		t.Errorf("ncclCommShrink excluding rank 7 of 3: result %d, comm %#x, %q; want ncclInvalidArgument", int32(r), out, l.LastError())
	}
	// The communicator is as it was.
	onRanks(t, []int{0, 1, 2}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1, 2)) })
}

func TestGrow(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			l := open(t, "v230")
			ranks := startRanks(t, l, 2, m)
			ctx := m.ctx(t)
			id, err := ranks[0].comm.GrowID()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ranks[1].comm.GrowID(); !errors.Is(err, nccl.ErrInvalidUsage) {
				t.Errorf("a second GrowID while one is unused: %v, want ErrInvalidUsage", err)
			}
			const n = 4
			comms := make([]*nccl.Comm, n)
			streams := make([]nccl.Stream, n)
			for r := range n {
				if r < len(ranks) {
					streams[r] = ranks[r].s
					continue
				}
				s, err := l.CUDA().NewStream(r%8, nccl.StreamNonBlocking)
				if err != nil {
					t.Fatal(err)
				}
				streams[r] = s
				t.Cleanup(func() { s.Destroy() })
			}
			onRanks(t, []int{0, 1, 2, 3}, func(r int) error {
				var c *nccl.Comm
				var err error
				switch r {
				case 0: // the rank that made the id passes it
					c, err = ranks[r].comm.Grow(ctx, n, &id, nil)
				case 1:
					c, err = ranks[r].comm.Grow(ctx, n, nil, nil)
				default: // new ranks
					c, err = l.GrowRank(ctx, r%8, id, n, r, modeOf(ctx, nil))
				}
				if err != nil {
					return err
				}
				comms[r] = c
				t.Cleanup(func() { c.Close(context.Background()) })
				if c.Rank() != r || c.Size() != n || c.Device() != r%8 || c.Blocking() == m.nonBlocking {
					return fmt.Errorf("grown comm says rank %d of %d on device %d, blocking %v", c.Rank(), c.Size(), c.Device(), c.Blocking())
				}
				return sumCheck(ctx, c, streams[r], uint64(r), tags(0, 1, 2, 3))
			})
			// The id served its grow.
			if c, err := l.GrowRank(ctx, 0, id, n, 3, modeOf(ctx, nil)); c != nil || !errors.Is(err, nccl.ErrInvalidUsage) {
				t.Errorf("GrowRank with a used id: %v, %v; want ErrInvalidUsage", c, err)
			}
			// New ranks take numbers the existing ranks do not have.
			id2, err := comms[0].GrowID()
			if err != nil {
				t.Fatal(err)
			}
			if c, err := l.GrowRank(ctx, 0, id2, 6, 1, modeOf(ctx, nil)); c != nil || !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("GrowRank as existing rank 1: %v, %v; want ErrInvalidArgument", c, err)
			}
			plain, err := l.GetUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			if c, err := l.GrowRank(ctx, 0, plain, 6, 5, modeOf(ctx, nil)); c != nil || !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("GrowRank with an init id: %v, %v; want ErrInvalidArgument", c, err)
			}
			if c, err := comms[1].Grow(ctx, n, nil, nil); c != nil || !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("Grow to the same size: %v, %v; want ErrInvalidArgument", c, err)
			}
		})
	}
}

func TestFaultToleranceRequires(t *testing.T) {
	ctx := context.Background()
	l := open(t, "default") // 2.28.3: shrink, but no revoke or grow
	c := initRanks(t, l, 1)[0].comm
	want := func(what string, err error, requires string) {
		t.Helper()
		if !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "(2.28.3; requires >= "+requires+")") {
			t.Errorf("%s on 2.28.3: %v, want ErrNotSupported requiring >= %s", what, err, requires)
		}
	}
	want("Revoke", c.Revoke(ctx), "2.28.7")
	_, err := c.GrowID()
	want("GrowID", err, "2.29.2")
	_, err = c.Grow(ctx, 2, nil, nil)
	want("Grow", err, "2.29.2")
	_, err = l.GrowRank(ctx, 0, nccl.UniqueID{}, 2, 1, modeOf(ctx, nil))
	want("GrowRank", err, "2.29.2")

	old := open(t, "old")
	_, err = initRanks(t, old, 2)[0].comm.Shrink(ctx, []int{1}, nil, nccl.ShrinkDefault)
	if !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "(2.14.3; requires >= 2.27)") {
		t.Errorf("Shrink on 2.14.3: %v", err)
	}
	present := map[string]bool{}
	for _, f := range open(t, "v230").Features() {
		present[f.Name] = f.Present
	}
	for _, name := range []string{"ncclCommShrink", "ncclCommRevoke", "ncclCommGetUniqueId", "ncclCommGrow"} {
		if !present[name] || !l.Has("ncclCommShrink") || l.Has("ncclCommGrow") {
			t.Errorf("%s: present %v in 2.30.7", name, present[name])
		}
	}
}

// TestWaitRevokesOnDeadline: under RevokeOnDeadline a Wait whose context ends
// while a peer never joins revokes the communicator instead of aborting it:
// the error wraps the deadline, the communicator is revoked but not closed,
// and the ranks that waited shrink the missing rank away and go on. The
// default (AbortOnDeadline) still aborts; an older library refuses the action
// with the typed version error.
func TestWaitRevokesOnDeadline(t *testing.T) {
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			l := open(t, "v230")
			ranks := startRanks(t, l, 3, m)
			ctx := m.ctx(t)
			onRanks(t, []int{0, 1, 2}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1, 2)) })
			if err := ranks[0].comm.SetDeadlineAction(nccl.DeadlineAction(7)); !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Errorf("SetDeadlineAction(7): %v", err)
			}
			for _, r := range []int{0, 1} {
				if err := ranks[r].comm.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
					t.Fatal(err)
				}
			}
			hang(t, ranks, 0, 1) // rank 2 is gone
			onRanks(t, []int{0, 1}, func(r int) error {
				wctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				err := ranks[r].comm.Wait(wctx, ranks[r].s)
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "revoked") {
					return fmt.Errorf("Wait: %v, want the deadline and a revoked communicator", err)
				}
				if !ranks[r].comm.Revoked() {
					return errors.New("not Revoked() after the Wait")
				}
				select {
				case <-ranks[r].comm.Done():
					return errors.New("the communicator was freed: aborted, not revoked")
				default:
				}
				return ranks[r].s.Synchronize() // the hung all-reduce was stopped
			})
			subs := make([]*nccl.Comm, 2)
			onRanks(t, []int{0, 1}, func(r int) error {
				sub, err := ranks[r].comm.Shrink(ctx, []int{2}, nil, nccl.ShrinkAbort)
				if err != nil {
					return err
				}
				subs[r] = sub
				return sumCheck(ctx, sub, ranks[r].s, uint64(r), tags(0, 1))
			})
			for r, rk := range ranks {
				if r < 2 {
					if err := subs[r].Close(ctx); err != nil {
						t.Errorf("rank %d: Close of the shrunk communicator: %v", r, err)
					}
				}
				if r == 2 {
					rk.comm.Abort() // the "dead" rank
					continue
				}
				if err := rk.comm.Close(ctx); err != nil {
					t.Errorf("rank %d: Close of the revoked communicator: %v", r, err)
				}
			}
		})
	}
	t.Run("abort by default", func(t *testing.T) {
		l := open(t, "v230")
		ranks := startRanks(t, l, 2, commModes[1])
		ctx := commModes[1].ctx(t)
		onRanks(t, []int{0, 1}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })
		hang(t, ranks, 0)
		wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := ranks[0].comm.Wait(wctx, ranks[0].s); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait: %v", err)
		}
		<-ranks[0].comm.Done()
		if ranks[0].comm.Revoked() {
			t.Error("revoked under AbortOnDeadline")
		}
		ranks[1].comm.Abort()
	})
	t.Run("older library", func(t *testing.T) {
		l := open(t, "default") // NCCL 2.28.3: no ncclCommRevoke
		ranks := startRanks(t, l, 1, commModes[0])
		var ue *nccl.UnsupportedError
		if err := ranks[0].comm.SetDeadlineAction(nccl.RevokeOnDeadline); !errors.As(err, &ue) || !strings.Contains(err.Error(), "2.28.7") {
			t.Errorf("SetDeadlineAction(RevokeOnDeadline) on 2.28.3: %v", err)
		}
		if err := ranks[0].comm.SetDeadlineAction(nccl.AbortOnDeadline); err != nil {
			t.Error(err)
		}
		ranks[0].comm.Close(context.Background())
	})
}

// TestConcurrentWaitsRevokeOnce: two Waits reaching one deadline under
// RevokeOnDeadline revoke once; neither aborts the communicator.
func TestConcurrentWaitsRevokeOnce(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	aborted := 0
	for iter := 0; iter < 20; iter++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		comms := initComms(t, l, 2, ctx, nil)
		c := comms[0]
		c.SetDeadlineAction(nccl.RevokeOnDeadline)
		bufs, ss := connectedRanks(ctx, cu, comms)
		var wg sync.WaitGroup
		s2, _ := cu.NewStream(0, nccl.StreamNonBlocking)
		c.AllReduce(bufs[0], bufs[0], nccl.Sum, ss[0])
		c.AllReduce(bufs[0], bufs[0], nccl.Sum, s2)
		wctx, wc := context.WithTimeout(context.Background(), 100*time.Millisecond)
		errs := make([]error, 2)
		for i, s := range []nccl.Stream{ss[0], s2} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = c.Wait(wctx, s) }()
		}
		wg.Wait()
		wc()
		select {
		case <-c.Done():
			aborted++
			if aborted == 1 {
				t.Logf("iter %d: aborted: %v | %v", iter, errs[0], errs[1])
			}
		default:
			if iter == 0 {
				t.Logf("iter %d: alive: %v | %v", iter, errs[0], errs[1])
			}
			c.Abort()
		}
		comms[1].Abort()
		cancel()
	}
	if aborted > 0 {
		t.Errorf("%d of 20: RevokeOnDeadline communicator aborted because two Waits revoked it at once", aborted)
	}
}

// TestWaitAfterRevokeFails: a Wait whose work a revoke stopped reports
// ErrRevoked instead of success.
func TestWaitAfterRevokeFails(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := initComms(t, l, 2, ctx, nil)
	defer comms[1].Abort()
	defer comms[0].Abort()
	c := comms[0]
	bufs, ss := connectedRanks(ctx, cu, comms)
	c.AllReduce(bufs[0], bufs[0], nccl.Sum, ss[0]) // peer never comes
	c.SetDeadlineAction(nccl.RevokeOnDeadline)
	wctx, wc := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer wc()
	done := make(chan error)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done <- c.Revoke(context.Background()) // e.g. the watchdog, or another Wait's deadline
	}()
	err := c.Wait(wctx, ss[0])
	t.Logf("Revoke: %v", <-done)
	t.Logf("Wait on the stream whose all-reduce was revoked: %v; AsyncError=%v", err, c.AsyncError())
	if !errors.Is(err, nccl.ErrRevoked) {
		t.Errorf("Wait: %v, want ErrRevoked (the all-reduce never completed: the communicator was revoked)", err)
	}
}

// connectedRanks gives every rank of comms a buffer of 8 floats and a stream,
// and runs one all-reduce on every rank (a goroutine each), so that the
// ranks are connected before a test makes one of them wait for a peer.
func connectedRanks(ctx context.Context, cu *nccl.CUDA, comms []*nccl.Comm) ([]nccl.Buffer, []nccl.Stream) {
	bufs := make([]nccl.Buffer, len(comms))
	ss := make([]nccl.Stream, len(comms))
	for r, cc := range comms {
		bufs[r], _ = cu.Alloc(cc.Device(), nccl.Float32, 8)
		ss[r], _ = cu.NewStream(cc.Device(), nccl.StreamNonBlocking)
	}
	var wg sync.WaitGroup
	for r, cc := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); cc.AllReduce(bufs[r], bufs[r], nccl.Sum, ss[r]); cc.Wait(ctx, ss[r]) }()
	}
	wg.Wait()
	return bufs, ss
}
