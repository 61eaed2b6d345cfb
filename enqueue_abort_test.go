package nccl_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestAbortDuringNonBlockingLaunch: an operation on a non-blocking
// communicator whose launch NCCL's thread is still running when an Abort
// comes returns ErrClosed only once the abort has run (Done is closed), so
// that nothing more is enqueued on its stream: a Synchronize then covers all
// the work, and its buffers may be freed. Before, it returned at the abort;
// NCCL's launch thread then enqueued the operation on a stream already
// synchronized, into buffers the caller had freed (heap corruption in 4 to
// 15 of 100 runs of a loop of all-reduces aborted at random moments). The
// fake's launch thread is slowed (FAKENCCL_LAUNCH_DELAY_US) so that the abort
// always comes during it.
func TestAbortDuringNonBlockingLaunch(t *testing.T) {
	t.Setenv("FAKENCCL_LAUNCH_DELAY_US", "100000")
	l := open(t, "default")
	for _, grouped := range []bool{false, true} {
		comms := initComms(t, l, 2, nonBlockingCtx(t), nil)
		bufs := make([]nccl.Buffer, 2)
		streams := make([]nccl.Stream, 2)
		for r := range comms {
			bufs[r] = upload(t, l, r, make([]float32, 4096))
			var err error
			if streams[r], err = l.CUDA().NewStream(r, nccl.StreamNonBlocking); err != nil {
				t.Fatal(err)
			}
			defer streams[r].Destroy()
		}
		type result struct {
			err  error
			done bool // Done was closed when the call returned
		}
		results := make(chan result, 2)
		for r, c := range comms {
			go func() {
				op := func() error { return c.AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]) }
				var err error
				if grouped {
					err = l.Group(op)
				} else {
					err = op()
				}
				done := false
				select {
				case <-c.Done():
					done = true
				default:
				}
				results <- result{err, done}
			}()
		}
		time.Sleep(20 * time.Millisecond) // the launches are in NCCL's thread now
		for _, c := range comms {
			c.Abort()
		}
		for range comms {
			res := <-results
			if !errors.Is(res.err, nccl.ErrClosed) {
				t.Fatalf("grouped=%v: %v, want ErrClosed", grouped, res.err)
			}
			if !res.done {
				t.Fatalf("grouped=%v: the call returned %v before the abort ran (Done still open): NCCL's launch thread may still enqueue the operation", grouped, res.err)
			}
		}
		for r := range comms {
			if err := streams[r].Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
