package nccl

import (
	"context"
	"slices"

	"github.com/gonccl/nccl/internal/capi"
)

// A blocking communicator's ncclCommFinalize synchronizes NCCL's own device
// stream, which every launch makes wait for the user's stream
// (ncclStrongStreamWaitStream in enqueue.cc's launch path): with a kernel that
// waits for a dead peer, the finalize waits inside NCCL, where no context
// reaches and Abort may not free the communicator under it. So gonccl notes
// every stream a communicator's operations went to, and Close waits for them
// outside NCCL first, under its context: once they are idle, the finalize has
// nothing of the user's to wait for; if the context ends first, nothing is
// inside NCCL and the communicator is aborted, which ends its kernels.

// noStream is the last stream of a communicator that has enqueued nothing (0
// is the legacy default stream, a stream like any other here).
const noStream = ^uintptr(0)

// Handles the CUDA runtime gives itself meaning "the calling thread's stream":
// cudaStreamLegacy is the current device's legacy stream (as 0), and
// cudaStreamPerThread the calling thread's own, which no other thread can
// query.
const (
	cudaStreamLegacy    = 1
	cudaStreamPerThread = 2
)

// noteStream records h, a stream that differs from the last one noted. Out
// of line: the hot path calls it only when an operation changes streams.
//
//go:noinline
func (c *Comm) noteStream(h uintptr) {
	c.streams.mu.Lock()
	if !slices.Contains(c.streams.list, h) {
		c.streams.list = forgetDestroyed(c.streams.list)
		c.streams.list = append(c.streams.list, h)
	}
	c.streams.mu.Unlock()
	c.lastStream.Store(h)
}

// forgetDestroyed drops from list the streams destroyed through gonccl (work
// already on a destroyed stream still completes, but its handle must not reach
// CUDA again), so that a program making a stream per step keeps the list
// short.
func forgetDestroyed(list []uintptr) []uintptr {
	if len(list) < 8 {
		return list
	}
	return slices.DeleteFunc(list, streamDestroyed)
}

// waitOutstanding waits, outside NCCL, until the work enqueued on every
// stream of c's operations has finished, or the communicator reports an
// asynchronous error (that error), or ctx ends (an error wrapping ctx.Err()),
// or c is aborted (an error matching ErrClosed). Without a CUDA runtime
// (WithoutCUDARuntime) there is nothing to query: it returns nil at once.
// A stream that another library captures now cannot be queried without
// breaking its capture, nor can another thread's per-thread stream be
// queried: those are skipped, as are streams destroyed through gonccl.
func (c *Comm) waitOutstanding(ctx context.Context, op string) error {
	cu := c.lib.cuda
	if cu == nil {
		return nil
	}
	c.streams.mu.Lock()
	pending := slices.Clone(c.streams.list)
	c.streams.mu.Unlock()
	pending = slices.DeleteFunc(pending, func(h uintptr) bool {
		return h == cudaStreamPerThread || streamDestroyed(h)
	})
	if len(pending) == 0 {
		return nil
	}
	return c.waitFor(ctx, op, func() (bool, error) {
		r, err := c.asyncResult(op, true)
		if err != nil {
			return false, err
		}
		if _, err := c.pollVerdict("ncclCommGetAsyncError", r, nil); err != nil && !isInProgress(err) {
			return false, inMethod(op, err) // a peer died, the network failed: the work will not finish
		}
		pending = slices.DeleteFunc(pending, func(h uintptr) bool { return c.streamIdle(cu, h) })
		return len(pending) == 0, nil
	})
}

// streamIdle reports whether stream h of c's device has no work left, or
// cannot be queried (destroyed meanwhile, or captured by another library):
// either way there is nothing of it to wait for.
func (c *Comm) streamIdle(cu *CUDA, h uintptr) bool {
	if streamDestroyed(h) || cu.refuseStream("cudaStreamQuery", h, c.dev) != nil {
		return true
	}
	var done bool
	err := cu.OnDevice(c.dev, func() error {
		if cu.rt.Fn[capi.CuStreamIsCapturing] != 0 {
			// cudaStreamQuery on a capturing stream ends the capture in error.
			var status int32
			if err := cu.rt.StreamIsCapturing(h, &status); err != nil || status != 0 {
				done = true
				return err
			}
		}
		var err error
		done, err = cu.rt.StreamQuery(h)
		return err
	})
	return done || err != nil
}
