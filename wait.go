package nccl

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl/abi"
	"golang.org/x/sys/unix"
)

// Waiting happens in Go, between short NCCL and CUDA calls, never inside a
// call that could block on a peer: that is what lets a context end it and
// Abort run while it goes on.

// spinFor is how long waitFor polls without sleeping.
const spinFor = 500 * time.Microsecond

// waitFor polls cond until it reports done or an error, ctx ends (an error
// wrapping ctx.Err()), or the communicator is aborted (an error matching
// ErrClosed). For spinFor it polls without sleeping, for waits that end within
// microseconds (an operation's launch on a non-blocking communicator), then
// sleeps between polls, up to a millisecond. It allocates nothing.
//
// While it spins, the goroutine stays on its OS thread, and every 16th poll
// the thread yields its CPU to the kernel (sched_yield), not the goroutine to
// the Go scheduler. A goroutine free to move was handed to another thread at
// nearly every runtime.Gosched (the fakes count the polls made elsewhere:
// TestNonBlockingLaunchStaysOnItsThread); kept on its thread, each Gosched
// parks the thread until another one hands the goroutine back, two orders of
// magnitude slower than for a free goroutine (TestWaitSpinsWithoutParking). A
// spin that never yields starves NCCL's launch thread where CPUs are few
// (BenchmarkNonBlockingAllReduce on the fakes; scripts/bench-nonblocking.sh
// on GPUs). Where the spinning waits hold every P (GOMAXPROCS=1,
// or as many ranks waiting at once as Ps), a kernel yield lets no other
// goroutine run, and the spinners' CPUs are the ones NCCL's launch threads
// need: there the wait still yields to the Go scheduler, handoff and all
// (TestWaitSharesBusyPs).
func (c *Comm) waitFor(ctx context.Context, op string, cond func() (bool, error)) error {
	delay := time.Duration(0)
	var start time.Time
	locked, procs := false, int32(0)
	unlock := func() {
		spinning.Add(-1)
		runtime.UnlockOSThread()
		locked = false
	}
	defer func() {
		if locked {
			unlock()
		}
	}()
	for i := 0; ; i++ {
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if s := c.state(); s == stAborting || s == stClosed {
			return &ClosedError{Op: op, What: "communicator"}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		// Spin for the first spinFor: a non-blocking communicator's launch
		// ends within tens to hundreds of µs, and a sleep costs more than
		// that. Then back off to a millisecond, in sleeps (time.Sleep reuses
		// the goroutine's timer: no allocation), so that ctx's end is seen
		// within a millisecond.
		if i == 0 {
			start = time.Now()
		}
		if time.Since(start) < spinFor {
			if !locked {
				runtime.LockOSThread()
				locked = true
				spinning.Add(1)
				procs = int32(runtime.GOMAXPROCS(0))
			}
			if i%16 == 15 {
				if spinning.Load() >= procs {
					runtime.Gosched() // every P spins: let the other goroutines run
				} else {
					unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
				}
			}
			continue
		}
		if locked { // a long wait sleeps without its own lock (a launch's stays: Comm.stream)
			unlock()
		}
		switch {
		case delay == 0:
			delay = 20 * time.Microsecond
		case delay < time.Millisecond:
			delay = min(delay*3/2, time.Millisecond)
		}
		time.Sleep(delay)
	}
}

// spinning counts the waits of the process that spin now, each on a P.
var spinning atomic.Int32

// waitReady waits for a non-blocking communicator's state to leave
// ncclInProgress (init, Split, Finalize, an operation's launch).
func (c *Comm) waitReady(ctx context.Context, op string, closing bool) error {
	return c.waitFor(ctx, op, func() (bool, error) {
		r, err := c.asyncResult(op, closing)
		return c.pollVerdict(op, r, err)
	})
}

// ready waits for a new non-blocking communicator to finish joining; on
// failure or ctx's end it aborts it.
func (c *Comm) ready(ctx context.Context, op string) error {
	if c.blocking {
		return nil
	}
	if err := c.waitReady(ctx, op, false); err != nil {
		return c.abortAfter(err)
	}
	return nil
}

// pollVerdict is a wait's verdict on one poll: done, still in progress, or the
// communicator's failure.
func (c *Comm) pollVerdict(op string, r abi.Result, err error) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case r == abi.Success:
		return true, nil
	case r == abi.InProgress:
		return false, nil
	}
	return false, &Error{Op: op, Code: r, Msg: c.lib.LastError()}
}

// settle waits out an operation that a non-blocking communicator launched in
// the background (it returned ncclInProgress): NCCL takes no further call on the
// communicator until then. Abort ends the wait.
func (c *Comm) settle(op string) error {
	return c.waitReady(context.Background(), op, false)
}

// settled finishes a call on a non-blocking communicator: NCCL may have left
// it in progress (a launch, a registration) and takes no other call until it
// is done. Blocking communicators return err unchanged.
func (c *Comm) settled(op string, err error) error {
	if c.blocking || err != nil && !isInProgress(err) {
		return err
	}
	return c.settle(op)
}

// settleHeld is settle for a caller that holds a call counted in (the
// communicator cannot be freed meanwhile): it polls without entering.
func (c *Comm) settleHeld(op string) error {
	return c.waitFor(context.Background(), op, func() (bool, error) {
		r, err := c.lib.pollAsync(c.h)
		return c.pollVerdict(op, r, err)
	})
}

// settledHeld is settled for a caller that holds a call counted in.
func (c *Comm) settledHeld(op string, err error) error {
	if c.blocking || err != nil && !isInProgress(err) {
		return err
	}
	return c.settleHeld(op)
}
