package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// Failing groups, on the fakes here and on GPUs in group_gpu_test.go, with one
// body: a Group whose function fails must leave nothing behind, on any rank.
// Each case fails a group after some of its operations were issued, then
// checks that the failure came out unchanged, that the buffers the failed
// operations named are untouched, that no communicator reports an error, and
// that later groups (a Send/Recv ring and an all-reduce, fresh random data)
// give the right result in every element. On NCCL a discarded Send leaves the
// peer connection half set up (the next group with that peer fails with
// "Message truncated") and a non-blocking member is left in error for good:
// the fakes do the same, so these fail if gonccl lets a failed group reach
// NCCL.

// gfWorld is n ranks with, per rank, a buffer the failing groups name
// (target, whose contents must survive) and two for the later checks.
type gfWorld struct {
	t      *testing.T
	l      *nccl.Library
	ranks  []rank
	ctx    context.Context
	k      int
	target []nccl.Buffer
	orig   [][]int32
	a, b   []nccl.Buffer
	rng    *rand.Rand
	perRk  bool // each rank drives its own communicator from its own goroutine
}

var errGroupBoom = errors.New("the function inside Group failed")

func newGFWorld(t *testing.T, l *nccl.Library, n int, ctx context.Context, perRank bool) *gfWorld {
	t.Helper()
	w := &gfWorld{t: t, l: l, ranks: initRanksCtx(t, l, n, ctx), ctx: ctx, k: 1027, perRk: perRank,
		rng: rand.New(rand.NewPCG(uint64(n), 20))}
	cu := l.CUDA()
	alloc := func(r int) nccl.Buffer {
		b, err := cu.Alloc(devOf(r), nccl.Int32, w.k)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free() })
		return b
	}
	for r := range n {
		w.target = append(w.target, alloc(r))
		w.a = append(w.a, alloc(r))
		w.b = append(w.b, alloc(r))
		host := w.random()
		if err := nccl.CopyIn(w.target[r], host); err != nil {
			t.Fatal(err)
		}
		w.orig = append(w.orig, host)
	}
	return w
}

func (w *gfWorld) random() []int32 {
	h := make([]int32, w.k)
	for i := range h {
		h[i] = int32(w.rng.IntN(1<<20)) - 1<<19
	}
	return h
}

// drive runs group for all ranks from this goroutine, or for each rank in a
// goroutine of its own, and returns what each run returned.
func (w *gfWorld) drive(group func(ranks []int) error) []error {
	n := len(w.ranks)
	if !w.perRk {
		return []error{group(rankList(n))}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = group([]int{r})
		}()
	}
	wg.Wait()
	return errs
}

func rankList(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// failCase is one way of failing: it issues operations on ranks (all of
// them, or the one this goroutine drives) inside Group and fails; it returns
// what Group returned and the panic value Group let through.
type failCase struct {
	name string
	run  func(w *gfWorld, ranks []int) (err error, panicked any)
}

var boomPanic = &struct{ msg string }{"panic inside the group"}

func (w *gfWorld) allReduceTarget(r int) error {
	rk := w.ranks[r]
	return rk.comm.AllReduce(w.target[r], w.target[r], nccl.Sum, rk.s)
}

func (w *gfWorld) sendTarget(r int) error {
	rk, n := w.ranks[r], len(w.ranks)
	return rk.comm.Send(w.target[r], (r+1)%n, rk.s)
}

func (w *gfWorld) recvTarget(r int) error {
	rk, n := w.ranks[r], len(w.ranks)
	return rk.comm.Recv(w.target[r], (r+n-1)%n, rk.s)
}

func catch(f func() error) (err error, p any) {
	defer func() { p = recover() }()
	return f(), nil
}

var failCases = []failCase{
	{"error after the first rank's operation", func(w *gfWorld, ranks []int) (error, any) {
		return w.l.Group(func() error {
			if err := w.allReduceTarget(ranks[0]); err != nil {
				return err
			}
			return errGroupBoom
		}), nil
	}},
	{"error after every rank's operation", func(w *gfWorld, ranks []int) (error, any) {
		return w.l.Group(func() error {
			for _, r := range ranks {
				if err := w.allReduceTarget(r); err != nil {
					return err
				}
			}
			return errGroupBoom
		}), nil
	}},
	{"panic after every rank's operation", func(w *gfWorld, ranks []int) (error, any) {
		return catch(func() error {
			return w.l.Group(func() error {
				for _, r := range ranks {
					if err := w.allReduceTarget(r); err != nil {
						return err
					}
				}
				panic(boomPanic)
			})
		})
	}},
	{"error between Send and Recv", func(w *gfWorld, ranks []int) (error, any) {
		return w.l.Group(func() error {
			for _, r := range ranks {
				if err := w.sendTarget(r); err != nil {
					return err
				}
			}
			return errGroupBoom
		}), nil
	}},
	{"panic after Send and Recv", func(w *gfWorld, ranks []int) (error, any) {
		return catch(func() error {
			return w.l.Group(func() error {
				for _, r := range ranks {
					if err := w.sendTarget(r); err != nil {
						return err
					}
					if err := w.recvTarget(r); err != nil {
						return err
					}
				}
				panic(boomPanic)
			})
		})
	}},
	{"error in a nested group, passed on", func(w *gfWorld, ranks []int) (error, any) {
		return w.l.Group(func() error {
			for _, r := range ranks {
				if err := w.sendTarget(r); err != nil {
					return err
				}
			}
			return w.l.Group(func() error {
				for _, r := range ranks {
					if err := w.recvTarget(r); err != nil {
						return err
					}
				}
				return errGroupBoom
			})
		}), nil
	}},
	{"outer group fails after a nested one succeeded", func(w *gfWorld, ranks []int) (error, any) {
		return w.l.Group(func() error {
			if err := w.l.Group(func() error {
				for _, r := range ranks {
					if err := w.allReduceTarget(r); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return err
			}
			return errGroupBoom
		}), nil
	}},
}

// checkAfter verifies the world after a failed group: targets untouched,
// no communicator in error, then a ring and an all-reduce of fresh data,
// every element checked, with a goroutine polling every communicator's
// AsyncError meanwhile (as a health check would).
func (w *gfWorld) checkAfter(what string) {
	t := w.t
	n := len(w.ranks)
	for r, rk := range w.ranks {
		if err := rk.s.Synchronize(); err != nil {
			t.Fatalf("%s: rank %d: stream: %v", what, r, err)
		}
		if err := rk.comm.AsyncError(); err != nil {
			t.Fatalf("%s: rank %d: AsyncError after the failed group: %v", what, r, err)
		}
		got := make([]int32, w.k)
		if err := nccl.CopyOut(got, w.target[r]); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, w.orig[r]); i >= 0 {
			t.Fatalf("%s: rank %d: element %d of the failed group's buffer is %d, was %d: part of the group ran", what, r, i, got[i], w.orig[r][i])
		}
	}
	stop := make(chan struct{})
	var polls atomic.Int64
	var pollErr atomic.Value
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, rk := range w.ranks {
				if err := rk.comm.AsyncError(); err != nil && !errors.Is(err, nccl.ErrInProgress) {
					pollErr.CompareAndSwap(nil, err)
				}
				polls.Add(1)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
	defer func() {
		close(stop)
		pw.Wait()
		if err, _ := pollErr.Load().(error); err != nil {
			t.Fatalf("%s: AsyncError polled during the later groups: %v", what, err)
		}
	}()
	// The groups begin once the poller polls: they can end within
	// microseconds, before a busy machine gives the poller a P.
	for polls.Load() == 0 {
		time.Sleep(10 * time.Microsecond)
	}
	send := make([][]int32, n)
	sum := make([]int32, w.k)
	for r := range n {
		send[r] = w.random()
		if err := nccl.CopyIn(w.a[r], send[r]); err != nil {
			t.Fatal(err)
		}
		for i, v := range send[r] {
			sum[i] += v
		}
	}
	ring := func(ranks []int) error {
		return w.l.Group(func() error {
			for _, r := range ranks {
				rk := w.ranks[r]
				if err := rk.comm.Send(w.a[r], (r+1)%n, rk.s); err != nil {
					return err
				}
				if err := rk.comm.Recv(w.b[r], (r+n-1)%n, rk.s); err != nil {
					return err
				}
			}
			return nil
		})
	}
	reduce := func(ranks []int) error {
		return w.l.Group(func() error {
			for _, r := range ranks {
				rk := w.ranks[r]
				if err := rk.comm.AllReduce(w.a[r], w.a[r], nccl.Sum, rk.s); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for step, run := range []func([]int) error{ring, reduce} {
		errs := w.drive(func(ranks []int) error {
			if err := run(ranks); err != nil {
				return err
			}
			for _, r := range ranks {
				if err := w.ranks[r].comm.Wait(w.ctx, w.ranks[r].s); err != nil {
					return fmt.Errorf("rank %d: Wait: %w", r, err)
				}
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: the group after it (step %d): %v", what, step, err)
		}
		for r := range n {
			got := make([]int32, w.k)
			want := send[(r+n-1)%n]
			src := w.b[r]
			if step == 1 {
				want, src = sum, w.a[r]
			}
			if err := nccl.CopyOut(got, src); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("%s: step %d: rank %d: element %d is %d, want %d", what, step, r, i, got[i], want[i])
			}
		}
	}
}

func firstDiff(a, b []int32) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// testGroupFailures runs every case on an n-rank world of the mode, driven
// from one goroutine and from one goroutine per rank.
func testGroupFailures(t *testing.T, l *nccl.Library, n int, m commMode) {
	for _, perRank := range []bool{false, true} {
		driver := "one goroutine"
		if perRank {
			driver = "a goroutine per rank"
		}
		t.Run(driver, func(t *testing.T) {
			for _, fc := range failCases {
				if perRank && fc.name == "error after the first rank's operation" {
					continue // one rank failing alone is a rank diverging, not a group failing
				}
				// Fresh communicators for each case: NCCL connects Send/Recv
				// peers lazily, and flags a discarded group left behind only
				// matter before the first connection.
				w := newGFWorld(t, l, n, m.ctx(t), perRank)
				errs := w.drive(func(ranks []int) error {
					err, p := fc.run(w, ranks)
					if p != nil && p != any(boomPanic) {
						return fmt.Errorf("the panic came out as %v, want the one raised", p)
					}
					if p == nil && strings.HasPrefix(fc.name, "panic") {
						return fmt.Errorf("the panic did not come out (Group returned %v)", err)
					}
					if p == nil && err != errGroupBoom {
						return fmt.Errorf("Group returned %v, want the function's error unchanged", err)
					}
					return nil
				})
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("%s: %v", fc.name, err)
				}
				w.checkAfter(fc.name)
				for r, rk := range w.ranks {
					if err := rk.comm.Close(w.ctx); err != nil {
						t.Errorf("%s: rank %d: Close: %v", fc.name, r, err)
					}
				}
			}
		})
	}
}

// TestGroupFailuresLeaveNothing: every failing-group case at 2, 3 and 4
// ranks, blocking and non-blocking, on the fake NCCL 2.28 and 2.30.
func TestGroupFailuresLeaveNothing(t *testing.T) {
	for _, variant := range []string{"default", "v230"} {
		for _, n := range []int{2, 3, 4} {
			for _, m := range commModes {
				t.Run(fmt.Sprintf("%s/%d ranks/%s", variant, n, m.name), func(t *testing.T) {
					testGroupFailures(t, open(t, variant), n, m)
				})
			}
		}
	}
}
