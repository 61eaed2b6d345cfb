package nccl_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// Abort racing groups, on the fakes here and on GPUs in group_gpu_test.go: a
// watchdog aborts every rank's communicator at a random moment while one
// goroutine runs Groups of all-reduces on all of them (one process driving
// several GPUs). NCCL frees an aborted communicator at once, also one linked
// in another thread's open group, and may crash when ncclCommAbort runs
// while a thread is inside NCCL on a rank of the same communicator (seen:
// SIGSEGV inside ncclGroupEnd, "double free or corruption" in ncclCommAbort,
// NCCL 2.30.7). Passing means: no crash, every Group returns nil or an error
// matching ErrClosed, the streams drain, every communicator is freed (Done),
// and every call afterwards says ErrClosed.
func testAbortRacingGroups(t *testing.T, l *nccl.Library, n, rounds int, m commMode) {
	cu := l.CUDA()
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	bufs := make([]nccl.Buffer, n)
	for r := range n {
		b, err := cu.Alloc(devOf(r), nccl.Float32, 1<<18)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		bufs[r] = b
	}
	groups, closed := 0, 0
	for round := range rounds {
		ranks := initRanksCtx(t, l, n, m.ctx(t))
		group := func() error {
			return l.Group(func() error {
				for r, rk := range ranks {
					if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
						return err
					}
				}
				return nil
			})
		}
		// One group together first: NCCL connects the peers in it.
		if err := group(); err != nil {
			t.Fatalf("round %d: first group: %v", round, err)
		}
		done := make(chan error, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if err := group(); err != nil {
					if !errors.Is(err, nccl.ErrClosed) {
						done <- err
						return
					}
					closed++
					done <- nil
					return
				}
				groups++
			}
		}()
		time.Sleep(time.Duration(rng.IntN(20000)) * time.Microsecond)
		for r, rk := range ranks {
			if err := rk.comm.Abort(); err != nil {
				t.Fatalf("round %d: rank %d: Abort: %v", round, r, err)
			}
		}
		close(stop)
		if err := <-done; err != nil {
			t.Fatalf("round %d: a Group racing the aborts: %v", round, err)
		}
		for r, rk := range ranks {
			select {
			case <-rk.comm.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: rank %d: not freed 30 s after Abort", round, r)
			}
			if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); !errors.Is(err, nccl.ErrClosed) {
				t.Fatalf("round %d: rank %d: AllReduce after Abort: %v", round, r, err)
			}
			if err := rk.comm.SetPath(nccl.Grouped); !errors.Is(err, nccl.ErrClosed) {
				t.Fatalf("round %d: rank %d: SetPath after Abort: %v", round, r, err)
			}
			if err := rk.comm.Wait(context.Background(), rk.s); !errors.Is(err, nccl.ErrClosed) {
				t.Fatalf("round %d: rank %d: Wait after Abort: %v", round, r, err)
			}
			if err := rk.s.Synchronize(); err != nil {
				t.Fatalf("round %d: rank %d: the stream after Abort: %v", round, r, err)
			}
		}
	}
	t.Logf("%d rounds: %d groups launched while racing; %d Groups refused with ErrClosed", rounds, groups, closed)
}

func TestAbortRacingGroups(t *testing.T) {
	for _, variant := range []string{"default", "v230"} {
		for _, n := range []int{2, 4} {
			for _, m := range commModes {
				t.Run(variant+"/"+m.name+"/"+string(rune('0'+n))+" ranks", func(t *testing.T) {
					testAbortRacingGroups(t, open(t, variant), n, 10, m)
				})
			}
		}
	}
}
