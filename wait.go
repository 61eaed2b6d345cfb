package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
	"golang.org/x/sys/unix"
)

// Waiting happens in Go, between short NCCL and CUDA calls, never inside a
// call that could block on a peer: that is what lets a context end it and
// Abort run while it goes on.

// Wait blocks until the work enqueued on s so far has finished, the
// communicator reports an asynchronous error (a peer died, NCCL failed), or ctx
// ends. On ctx's end it frees the hung NCCL operation and returns an error
// wrapping ctx.Err(): by aborting the communicator, or, after
// SetDeadlineAction(RevokeOnDeadline), by revoking it so that the ranks still
// alive can Shrink it. On a revoked communicator it returns an error matching
// ErrRevoked: the work it waited for was stopped, not done.
func (c *Comm) Wait(ctx context.Context, s Stream) error {
	if !c.made() {
		return zeroComm("Wait")
	}
	if ctx == nil {
		return nilContext("Wait")
	}
	const op = "Wait"
	if s.cu == nil && s.h != 0 {
		return argError(op, "stream has no CUDA runtime (make it with CUDA.NewStream or CUDA.WrapStream)")
	}
	if s.cu != nil && s.dev != c.dev {
		// Its work is not this communicator's: a wait on it proves nothing
		// of the communicator's operations (AllReduce refuses it too).
		return argError(op, "stream is on device %d, the communicator on device %d", s.dev, c.dev)
	}
	if !s.alive() {
		return destroyedStream(op)
	}
	cu := s.cu
	if cu == nil {
		if cu = c.lib.cuda; cu == nil {
			return argError(op, "no CUDA runtime to query the stream (library opened WithoutCUDARuntime)")
		}
		s = cu.DefaultStream(c.dev)
	}
	err := c.waitFor(ctx, op, func() (bool, error) {
		if c.revoking.Load() { // the stream drains, but its work was stopped, not done
			return false, revokedError(op)
		}
		if err := c.AsyncError(); err != nil && !isInProgress(err) {
			return false, err
		}
		done, err := s.Query()
		if done && err == nil {
			if c.revoking.Load() { // a revoke that began meanwhile drained it
				return false, revokedError(op)
			}
			// Work that failed and then finished between the two queries
			// set the error before the stream went idle: look once more.
			if err := c.AsyncError(); err != nil && !isInProgress(err) {
				return false, err
			}
		}
		return done, err
	})
	if err != nil && ctx.Err() != nil {
		if DeadlineAction(c.onDeadline.Load()) == RevokeOnDeadline {
			return c.revokeAfter(err)
		}
		return c.abortAfter(err)
	}
	return err
}

// DeadlineAction is what Wait does to the communicator when its context ends
// before the work does.
type DeadlineAction int32

const (
	// AbortOnDeadline (the default) aborts the communicator: it is freed, and
	// every later call returns an error matching ErrClosed.
	AbortOnDeadline DeadlineAction = iota
	// RevokeOnDeadline revokes it (ncclCommRevoke, NCCL >= 2.28.7): the
	// in-flight work stops, later operations fail, and the communicator stays
	// for Shrink (with ShrinkAbort), Split or Close. For jobs that go on
	// without a dead rank. If the revoke fails, or does not end within
	// RevokeGrace, the communicator is aborted after all. On a blocking
	// communicator ncclCommRevoke waits for quiescence inside NCCL, where
	// RevokeGrace cannot reach it (NCCL raises its abort flag first, so its
	// kernels end).
	RevokeOnDeadline
)

// RevokeGrace bounds the revoke that Wait makes under RevokeOnDeadline.
const RevokeGrace = 30 * time.Second

// SetDeadlineAction sets what Wait does when its context ends first (see
// DeadlineAction). RevokeOnDeadline needs ncclCommRevoke (NCCL >= 2.28.7); on
// an older library it returns the *UnsupportedError and changes nothing.
func (c *Comm) SetDeadlineAction(a DeadlineAction) error {
	if !c.made() {
		return zeroComm("SetDeadlineAction")
	}
	if err := c.openOr("SetDeadlineAction"); err != nil {
		return err
	}
	switch a {
	case AbortOnDeadline:
	case RevokeOnDeadline:
		if c.lib.nc.Fn[capi.FnCommRevoke] == 0 {
			return c.lib.unsupported(capi.FnCommRevoke)
		}
	default:
		return argError("SetDeadlineAction", "action %d: want AbortOnDeadline or RevokeOnDeadline", a)
	}
	c.onDeadline.Store(int32(a))
	return nil
}

// Revoked reports whether Revoke (or a Wait under RevokeOnDeadline) revoked
// the communicator: its operations fail, and Shrink, Split and Close remain.
func (c *Comm) Revoked() bool { return c.made() && c.revoked.Load() }

func revokedError(op string) error {
	return fmt.Errorf("%s: the communicator was revoked: its work was stopped, not done: %w", op, ErrRevoked)
}

// revokeAfter revokes the communicator after a wait ended by its context, and
// returns cause noting that, or the revoke's failure (it aborted then). Of
// several waits that reach their deadline together one revokes; the others
// wait for that revoke and report it.
func (c *Comm) revokeAfter(cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), RevokeGrace)
	defer cancel()
	if errors.Is(cause, ErrRevoked) { // revoked meanwhile, by Revoke or another Wait
		return cause
	}
	revoked := fmt.Errorf("%w; %w: Shrink or Close it", cause, ErrRevoked)
	if !c.revoking.CompareAndSwap(false, true) {
		for !c.revoked.Load() {
			if s := c.state(); s == stAborting || s == stClosed {
				return cause
			}
			if ctx.Err() != nil {
				return c.abortAfter(fmt.Errorf("%w (the revoke under way did not end within %v, communicator aborted)", cause, RevokeGrace))
			}
			time.Sleep(100 * time.Microsecond)
		}
		return revoked
	}
	if err := c.Revoke(ctx); err != nil {
		if isClosed(err) {
			return cause
		}
		// The operation still hangs: free it the other way.
		return c.abortAfter(fmt.Errorf("%w (revoke failed, communicator aborted: %v)", cause, err))
	}
	return revoked
}

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
