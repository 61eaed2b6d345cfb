package collectives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// Wait blocks until the work enqueued on s has finished, the communicator
// reports an asynchronous error, or ctx ends. It polls, so it never hangs in a
// CUDA or NCCL call: on cancellation or deadline it aborts the communicator
// (the only way to free a hung NCCL operation) and returns an error wrapping
// ctx.Err(). Non-blocking communicators are waited for the same way: while the
// communicator reports ErrInProgress the wait goes on.
func Wait(ctx context.Context, c *nccl.Comm, s nccl.Stream) error {
	cu := c.Library().CUDA()
	delay := 20 * time.Microsecond
	for {
		err := c.AsyncError()
		switch {
		case err == nil:
			if s == waitCommOnly {
				return nil
			}
			done, qerr := cu.StreamQuery(s)
			if qerr != nil {
				return qerr
			}
			if done {
				return nil
			}
		case errors.Is(err, nccl.ErrInProgress):
		default:
			return err
		}
		select {
		case <-ctx.Done():
			aerr := c.Abort()
			if aerr != nil && !errors.Is(aerr, nccl.ErrClosed) {
				return fmt.Errorf("collectives: wait: %w (and abort: %v)", ctx.Err(), aerr)
			}
			return fmt.Errorf("collectives: wait: communicator aborted: %w", ctx.Err())
		case <-time.After(delay):
		}
		if delay < time.Millisecond {
			delay *= 2
		}
	}
}

// waitCommOnly is a stream value no CUDA runtime hands out, meaning "the
// communicator only".
const waitCommOnly = nccl.Stream(^uintptr(0))

// WaitReady waits until a non-blocking communicator has finished initialising
// (or Split, or Finalize): its asynchronous state leaves ErrInProgress. On
// cancellation it aborts the communicator, as Wait does.
func WaitReady(ctx context.Context, c *nccl.Comm) error {
	return Wait(ctx, c, waitCommOnly)
}

// StreamWait makes later work on waiter wait for everything enqueued on waitee
// so far, on the GPU, without blocking the host (an event recorded on waitee,
// waited on by waiter). Use it to order a compute stream after a communication
// stream and the reverse.
func StreamWait(cu *nccl.CUDA, dev int, waiter, waitee nccl.Stream) error {
	e, err := cu.EventCreate(dev, abi.EventDisableTiming)
	if err != nil {
		return err
	}
	// The runtime keeps what the wait needs: the event can go at once.
	defer cu.EventDestroy(e)
	if err := cu.EventRecord(e, waitee); err != nil {
		return err
	}
	return cu.StreamWaitEvent(waiter, e)
}
