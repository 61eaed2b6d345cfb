package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// The ranks of one communicator made in this process by one goroutine
// (InitAll) and driven outside a Group: one goroutine driving several ranks
// is refused before C (NCCL would wait inside the first call for the ranks
// the goroutine has yet to call); a goroutine per rank, however late each
// starts, and one goroutine after a Group of every rank, are not. The same
// scenarios run on real NCCL in arrival_gpu_test.go.

func TestArrivalOneGoroutineRefused(t *testing.T) {
	l := open(t, "v230", nccl.WithArrivalGrace(300*time.Millisecond))
	for _, m := range commModes {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d ranks", m.name, n), func(t *testing.T) {
				oneGoroutineRefused(t, l, m.ctx(t), n, 300*time.Millisecond, loneAllReduce)
			})
		}
	}
}

// oneGoroutineRefused: InitAll of n ranks; the same goroutine all-reduces on
// rank 0 outside a Group while a watchdog aborts every rank 5 s in. The call
// must come back within grace + 1 s, refused with ErrInvalidUsage and the
// advice to use a Group; nothing reached NCCL, so a Group of every rank then
// all-reduces correctly and the ranks close one after another.
func oneGoroutineRefused(t *testing.T, l *nccl.Library, ctx context.Context, n int, grace time.Duration, call firstCall) {
	comms, err := l.InitAll(ctx, devList(n), modeOf(ctx, nil))
	if err != nil {
		t.Fatal(err)
	}
	cu := l.CUDA()
	b, err := cu.Alloc(comms[0].Device(), nccl.Float32, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	s, err := cu.NewStream(comms[0].Device(), nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	watchdog := time.AfterFunc(5*time.Second, func() {
		for _, c := range comms {
			c.Abort()
		}
	})
	defer watchdog.Stop()
	// From the goroutine that made the ranks, as a program driving them all
	// would: without the refusal the call waits inside NCCL for good, where
	// the watchdog's abort does not reach it (the test then times out).
	start := time.Now()
	err = call(l, comms[0], b, s)
	el := time.Since(start)
	if !errors.Is(err, nccl.ErrInvalidUsage) || !strings.Contains(err.Error(), "one Group") {
		t.Fatalf("after %v: %v, want ErrInvalidUsage saying to use one Group", el, err)
	}
	if el > grace+time.Second {
		t.Fatalf("refused after %v, grace %v", el, grace)
	}
	t.Logf("refused after %v: %v", el.Round(time.Millisecond), err)
	if !watchdog.Stop() {
		t.Fatal("the watchdog aborted the ranks")
	}
	groupedSumCheck(t, l, comms, 7)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range comms {
		if err := c.Close(cctx); err != nil {
			t.Fatalf("rank %d: Close: %v", c.Rank(), err)
		}
	}
}

// firstCall is the maker's first operation on rank c in oneGoroutineRefused.
type firstCall func(l *nccl.Library, c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error

// loneAllReduce is an all-reduce outside a Group.
func loneAllReduce(l *nccl.Library, c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error {
	return c.AllReduce(b, b, nccl.Sum, s)
}

// groupOfOne is an all-reduce in a Group of its own rank only.
func groupOfOne(l *nccl.Library, c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error {
	return l.Group(func() error { return c.AllReduce(b, b, nccl.Sum, s) })
}

func TestArrivalGoroutinePerRank(t *testing.T) {
	l := open(t, "v230", nccl.WithArrivalGrace(300*time.Millisecond))
	for _, m := range commModes {
		for _, n := range []int{2, 4} {
			for _, mainDrives := range []bool{false, true} {
				name := fmt.Sprintf("%s/%d ranks/goroutine per rank", m.name, n)
				if mainDrives {
					name = fmt.Sprintf("%s/%d ranks/the maker drives rank 0", m.name, n)
				}
				t.Run(name, func(t *testing.T) {
					goroutinePerRank(t, l, m.ctx(t), n, mainDrives, 150*time.Millisecond)
				})
			}
		}
	}
}

// goroutinePerRank: InitAll of n ranks, then a goroutine per rank (or, with
// mainDrives, this goroutine for rank 0 and one each for the others) runs
// three all-reduces outside a Group on random int64 data, every element
// checked. Rank r starts r × stagger late: a rank may come after the maker's
// grace without anyone being refused, where the maker itself waits first
// (mainDrives) only within the grace.
func goroutinePerRank(t *testing.T, l *nccl.Library, ctx context.Context, n int, mainDrives bool, stagger time.Duration) {
	comms, err := l.InitAll(ctx, devList(n), modeOf(ctx, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := nccl.CloseAll(cctx, comms); err != nil {
			t.Error(err)
		}
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	drive := func(r int) {
		errs[r] = driveRank(l, comms[r], n, 3)
	}
	first := 0
	if mainDrives {
		first = 1
	}
	for r := first; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !mainDrives {
				time.Sleep(time.Duration(r) * stagger)
			} else {
				time.Sleep(time.Duration(r) * stagger / time.Duration(n))
			}
			drive(r)
		}()
	}
	if mainDrives {
		drive(0)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// driveRank runs rounds all-reduces on c outside a Group from the calling
// goroutine, each on random int64 data seeded by round and rank, and checks
// every element against the sum over the n ranks' data.
func driveRank(l *nccl.Library, c *nccl.Comm, n, rounds int) error {
	return driveRankIn(l, c, n, rounds, false)
}

// driveRankIn is driveRank, each all-reduce inside a Group of its own when
// grouped (a goroutine per rank, each grouping its own rank's operations).
func driveRankIn(l *nccl.Library, c *nccl.Comm, n, rounds int, grouped bool) error {
	const count = 2053
	cu := l.CUDA()
	b, err := cu.Alloc(c.Device(), nccl.Int64, count)
	if err != nil {
		return err
	}
	defer b.Free()
	s, err := cu.NewStream(c.Device(), nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range rounds {
		seed := func(r int) uint64 { return uint64(round*1000 + r + 1) }
		if err := nccl.CopyIn(b, randomInt64s(seed(c.Rank()), count)); err != nil {
			return err
		}
		var err error
		if grouped {
			err = l.Group(func() error { return c.AllReduce(b, b, nccl.Sum, s) })
		} else {
			err = c.AllReduce(b, b, nccl.Sum, s)
		}
		if err != nil {
			return err
		}
		if err := c.Wait(ctx, s); err != nil {
			return err
		}
		got := make([]int64, count)
		if err := nccl.CopyOut(got, b); err != nil {
			return err
		}
		want := make([]int64, count)
		for r := range n {
			for i, v := range randomInt64s(seed(r), count) {
				want[i] += v
			}
		}
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("round %d: element %d is %d, want %d", round, i, got[i], want[i])
			}
		}
	}
	return nil
}

// TestArrivalAfterGroup: once a Group launched operations of every rank (NCCL
// connected them there), one goroutine's operations outside a Group go
// straight to NCCL: each rank's all-reduce is enqueued in turn, and the sums
// are checked.
func TestArrivalAfterGroup(t *testing.T) {
	l := open(t, "v230", nccl.WithArrivalGrace(300*time.Millisecond))
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			comms, err := l.InitAll(context.Background(), devList(n), nil)
			if err != nil {
				t.Fatal(err)
			}
			groupedSumCheck(t, l, comms, 11)
			cu := l.CUDA()
			const count = 509
			bufs := make([]nccl.Buffer, n)
			streams := make([]nccl.Stream, n)
			want := make([]int64, count)
			for r, c := range comms {
				host := randomInt64s(uint64(100+r), count)
				for i, v := range host {
					want[i] += v
				}
				if bufs[r], err = cu.Alloc(c.Device(), nccl.Int64, count); err != nil {
					t.Fatal(err)
				}
				defer bufs[r].Free()
				if err := nccl.CopyIn(bufs[r], host); err != nil {
					t.Fatal(err)
				}
				if streams[r], err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
					t.Fatal(err)
				}
				defer streams[r].Destroy()
			}
			start := time.Now()
			for r, c := range comms {
				if err := c.AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
					t.Fatal(err)
				}
			}
			if el := time.Since(start); el > 200*time.Millisecond {
				t.Fatalf("the enqueues took %v: held", el)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for r, c := range comms {
				if err := c.Wait(ctx, streams[r]); err != nil {
					t.Fatal(err)
				}
				got := make([]int64, count)
				if err := nccl.CopyOut(got, bufs[r]); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("rank %d: element %d is %d, want %d", r, i, got[i], want[i])
					}
				}
			}
			for _, c := range comms {
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestArrivalOtherGoroutineAbortable: a goroutine other than the ranks' maker
// drives two ranks outside a Group. gonccl cannot tell it from the first of
// a goroutine per rank, so it waits as NCCL would, but before C: the abort
// of the ranks ends the wait with ErrClosed, and nothing reached NCCL.
func TestArrivalOtherGoroutineAbortable(t *testing.T) {
	l := open(t, "v230", nccl.WithArrivalGrace(300*time.Millisecond))
	for _, m := range commModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := m.ctx(t)
			comms, err := l.InitAll(ctx, devList(2), modeOf(ctx, nil))
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.CUDA().Alloc(comms[0].Device(), nccl.Float32, 64)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			done := make(chan error, 1)
			go func() { done <- comms[0].AllReduce(b, b, nccl.Sum, nccl.Stream{}) }()
			select {
			case err := <-done:
				t.Fatalf("returned before the abort: %v", err)
			case <-time.After(time.Second):
			}
			start := time.Now()
			for _, c := range comms {
				c.Abort()
			}
			select {
			case err := <-done:
				if !errors.Is(err, nccl.ErrClosed) {
					t.Fatalf("after the abort: %v, want ErrClosed", err)
				}
				t.Logf("returned %v after the abort: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(2 * time.Second):
				t.Fatal("the abort did not end the wait")
			}
		})
	}
}

// TestArrivalPartialGroups: a Group holding some ranks of a clique made by
// one goroutine but not all waits, before NCCL, for the others as a lone
// operation does. From the maker, a Group per rank (a natural mistake) is
// refused after the grace, where NCCL would wait inside ncclGroupEnd for
// good; a Group of every rank then works. A goroutine per rank, each grouping
// its own rank's operations, is not held back.
func TestArrivalPartialGroups(t *testing.T) {
	l := open(t, "v230", nccl.WithArrivalGrace(300*time.Millisecond))
	for _, m := range commModes {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d ranks/the maker, a Group per rank", m.name, n), func(t *testing.T) {
				oneGoroutineRefused(t, l, m.ctx(t), n, 300*time.Millisecond, groupOfOne)
			})
			t.Run(fmt.Sprintf("%s/%d ranks/a goroutine per rank, a Group each", m.name, n), func(t *testing.T) {
				ctx := m.ctx(t)
				comms, err := l.InitAll(ctx, devList(n), modeOf(ctx, nil))
				if err != nil {
					t.Fatal(err)
				}
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(time.Duration(r) * 150 * time.Millisecond)
						errs[r] = driveRankIn(l, comms[r], n, 3, true)
					}()
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := nccl.CloseAll(cctx, comms); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestCloseAllNames: CloseAll's errors name each communicator by its index
// in the slice and its rank; a nil one counts as closed.
func TestCloseAllNames(t *testing.T) {
	l := open(t, "v230")
	comms, err := l.InitAll(context.Background(), devList(2), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = nccl.CloseAll(ctx, []*nccl.Comm{comms[0], nil, comms[1]})
	if !errors.Is(err, nccl.ErrClosed) || !strings.Contains(err.Error(), "comms[1] (rank 0)") || strings.Contains(err.Error(), "comms[0]") {
		t.Fatalf("CloseAll with a nil entry: %v", err)
	}
	for _, c := range comms {
		select {
		case <-c.Done():
		default:
			t.Fatalf("rank %d not closed", c.Rank())
		}
	}
}
