package nccl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gonccl/nccl/internal/capi"
)

// Comm.Wait: a program's wait for its work, bounded by a context, and what
// the context's end does to the communicator (DeadlineAction).

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
