package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gonccl/nccl/internal/capi"
)

// Closing a communicator: its work waited for outside NCCL (outstanding.go),
// then ncclCommFinalize and ncclCommDestroy, each bounded by the context.

// Close frees the communicator once its outstanding work is done, returning
// by ctx's end in both modes: if ctx ends first, or Abort is called
// meanwhile, the communicator is aborted instead and the error wraps ctx.Err()
// (or matches ErrClosed). Every rank closes its communicator; later calls
// return an error matching ErrClosed.
//
// It waits, outside NCCL and under ctx, for the work enqueued on every stream
// the communicator's operations used, then finalizes (ncclCommFinalize) and
// destroys (ncclCommDestroy) it. A peer that died leaves that work waiting
// for good: at ctx's end the communicator is aborted, which ends its kernels,
// and nothing was inside NCCL. An asynchronous failure seen meanwhile (a peer's
// connection closed) aborts it too and is returned. Should NCCL itself wait
// inside a blocking communicator's finalize or destroy past ctx's end, Close
// returns then with an error wrapping ctx.Err() that says so, and the
// communicator is freed (aborted) when NCCL returns (Done is closed then). Of
// a non-blocking communicator, NCCL waits for nothing inside.
//
// The ranks of one communicator held in this process (InitAll) may be closed
// one after another from one goroutine, or together with CloseAll.
//
// A communicator that Shrink was called on with ShrinkAbort is aborted, not
// finalized and destroyed: the shrink aborted its outstanding work, and NCCL
// 2.31.2's ncclCommDestroy would wait for its excluded ranks on a barrier
// with no timeout.
//
// While CUDA graphs captured through gonccl hold the communicator's
// operations, Close refuses with an error matching ErrGraphsAlive and leaves
// the communicator open: NCCL (>= 2.26) would wait in ncclCommDestroy until
// they are destroyed, and launching them afterwards would use freed memory.
// Destroy the graphs first (see Graph).
func (c *Comm) Close(ctx context.Context) error {
	const op = "Close"
	if !c.made() {
		return zeroComm(op)
	}
	if ctx == nil {
		return nilContext(op)
	}
	if n := c.graphs.Load(); n > 0 && c.state() == stOpen {
		return fmt.Errorf("%s: %d CUDA graph(s) or open capture(s) hold this communicator's operations; end and destroy them first: %w", op, n, ErrGraphsAlive)
	}
	if c.abortOnClose.Load() {
		// A parent shrunk with ShrinkAbort: its outstanding work was
		// aborted by the shrink, and NCCL (2.31.2) can hang destroying it.
		if err := c.Abort(); err != nil {
			return err
		}
		<-c.done
		return c.freeErr
	}
	if _, ok := c.moveState(stClosing, stOpen); !ok {
		return &ClosedError{Op: op, What: "communicator"}
	}
	// Other goroutines' calls in NCCL finish first; they are short on a
	// non-blocking communicator.
	if err := c.waitFor(ctx, op, func() (bool, error) { return c.calls() == 0, nil }); err != nil {
		return c.abortAfter(err)
	}
	// NCCL refuses ncclCommFinalize after ncclCommRevoke: a revoked
	// communicator is already quiescent and is destroyed alone.
	if !c.revoked.Load() {
		if c.blocking {
			if err := c.waitOutstanding(ctx, op); err != nil {
				if ctx.Err() != nil && !isClosed(err) {
					err = fmt.Errorf("%s: the communicator's work had not finished when the context ended (a peer that died or never called leaves it waiting); communicator aborted: %w", op, ctx.Err())
				}
				return c.abortAfter(err)
			}
		}
		if err := c.finalize(ctx, op); err != nil {
			return err
		}
	}
	if c.state() == stAborting {
		// Abort came in meanwhile: it frees the communicator.
		<-c.done
		return &ClosedError{Op: op + ": ncclCommDestroy", What: "communicator"}
	}
	if c.blocking {
		return c.bounded(ctx, op, "ncclCommDestroy", func() error { return c.free(capi.FnCommDestroy) }, nil, false)
	}
	return c.free(capi.FnCommDestroy)
}

// CloseAll closes comms under one ctx, as Close closes each: the ranks of one
// communicator held in this process (InitAll's) together. Communicators of
// different devices close in parallel, those of one device in turn (NCCL
// takes no calls in parallel on one device's communicators). It returns once
// every Close has returned, their errors joined, each naming its index in
// comms and its rank (a nil or zero Comm counts as closed: ErrClosed).
func CloseAll(ctx context.Context, comms []*Comm) error {
	if ctx == nil {
		return nilContext("CloseAll")
	}
	byDev := map[int][]int{} // indexes into comms, by device
	var devs []int
	for k, c := range comms {
		d := c.Device()
		if _, ok := byDev[d]; !ok {
			devs = append(devs, d)
		}
		byDev[d] = append(byDev[d], k)
	}
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var de []error
			for _, k := range byDev[d] {
				c := comms[k]
				if err := c.Close(ctx); err != nil {
					de = append(de, fmt.Errorf("comms[%d] (rank %d): %w", k, c.Rank(), err))
				}
			}
			errs[i] = errors.Join(de...)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// finalize is Close's ncclCommFinalize, its state closing. A non-blocking
// communicator's is waited for outside NCCL; a blocking one's runs on a
// goroutine of its own, so that Close returns at ctx's end even if NCCL
// waits inside it. Its errors abort the communicator.
func (c *Comm) finalize(ctx context.Context, op string) error {
	const fn = "ncclCommFinalize"
	h, err := c.enter(op, true)
	if err != nil {
		return err
	}
	if c.blocking {
		// The call stays counted until NCCL returns: an abort at ctx's end
		// frees the communicator then, never under the call.
		return c.bounded(ctx, op, fn, func() error { return c.lib.nc.CommFinalize(h) }, c.exit, true)
	}
	err = c.lib.nc.CommFinalize(h)
	c.exit()
	if isInProgress(err) {
		err = c.waitReady(ctx, op, true)
	}
	if err != nil {
		return c.abortAfter(inMethod(op, err))
	}
	return nil
}

// bounded runs call, the C function fn of a blocking communicator's method
// that NCCL may wait inside, on a goroutine of its own and waits for it until
// ctx ends; after, if not nil, runs on that goroutine once call returns. If ctx ends first,
// the error says that NCCL still runs call, and with abort the communicator
// is aborted (freed once call has returned, see Comm.exit). A failure of call
// aborts the communicator too (a destroy's failure has freed it already).
func (c *Comm) bounded(ctx context.Context, method, fn string, call func() error, after func(), abort bool) error {
	what := method + ": " + fn
	res := make(chan error, 1)
	go func() {
		err := call()
		if after != nil {
			after()
		}
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return c.abortAfter(inMethod(method, err))
		}
		return nil
	case <-ctx.Done():
		select {
		case err := <-res: // it returned as ctx ended: its result stands
			if err != nil {
				return c.abortAfter(inMethod(method, err))
			}
			return nil
		default:
		}
		if !abort { // freeing already: Done is closed when NCCL returns
			return fmt.Errorf("%s had not returned when the context ended (NCCL waits inside it, where no context reaches); the communicator is freed when it returns (Comm.Done): %w", what, ctx.Err())
		}
		return c.abortAfter(fmt.Errorf("%s had not returned when the context ended (NCCL waits inside it, where no context reaches); the communicator is aborted when it returns (Comm.Done): %w", what, ctx.Err()))
	}
}
