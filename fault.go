package nccl

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// Fault tolerance: revoking a communicator, shrinking it to the ranks that
// are still alive, and growing it with new ranks. Each makes its new
// communicator as Split does: a non-blocking parent returns at once inside
// NCCL and gonccl waits outside, so ctx can end the wait (aborting the parent,
// since NCCL cannot abandon the operation half done).

// Flags of Comm.Shrink.
const (
	// ShrinkDefault shrinks a healthy parent: its in-flight work finishes first.
	ShrinkDefault = abi.ShrinkDefault
	// ShrinkAbort first stops the parent's in-flight work (its results are
	// lost), for a parent whose excluded ranks died mid-operation.
	ShrinkAbort = abi.ShrinkAbort
)

// Revoke stops the communicator's in-flight operations and refuses new ones
// (ncclCommRevoke, NCCL >= 2.28.7): an operation issued afterwards fails with
// an error matching ErrInvalidUsage. It returns once the communicator is
// quiescent; then Split, Shrink and Close are safe (Close destroys it without
// finalizing, which NCCL forbids after a revoke). Revoking twice is an error
// matching ErrInvalidArgument. On a non-blocking communicator ctx bounds the
// wait for quiescence; when it ends the communicator is aborted.
func (c *Comm) Revoke(ctx context.Context) error {
	if !c.made() {
		return zeroComm("Revoke")
	}
	if ctx == nil {
		return nilContext("Revoke")
	}
	const op = "ncclCommRevoke"
	if c.lib.nc.Fn[capi.FnCommRevoke] == 0 {
		return c.lib.unsupported(capi.FnCommRevoke)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	h, err := c.enter(op, false)
	if err != nil {
		return err
	}
	c.revoking.Store(true) // a Wait's revoke on its deadline now waits for this one
	err = c.lib.nc.CommRevoke(h, abi.RevokeDefault)
	c.exit()
	if err != nil && !isInProgress(err) {
		if !c.revoked.Load() {
			c.revoking.Store(false) // nothing was revoked
		}
		return err
	}
	c.revoked.Store(true)
	if !c.blocking {
		if err := c.waitReady(ctx, op, false); err != nil {
			return c.abortAfter(err)
		}
	}
	return nil
}

// Revoked reports whether Revoke (or a Wait under RevokeOnDeadline) revoked
// the communicator: its operations fail, and Shrink, Split and Close remain.
func (c *Comm) Revoked() bool { return c.made() && c.revoked.Load() }

// Shrink makes a communicator of c's ranks without those in exclude
// (ncclCommShrink, NCCL >= 2.27), returning by ctx's end in both modes as
// Split does, renumbered in order: rank r becomes r minus the number of
// excluded ranks below it. Every rank not excluded calls it with
// the same list; excluded ranks do not call it, and may be dead. flags is
// ShrinkDefault or ShrinkAbort. cfg may be nil; the new communicator keeps
// c's blocking mode. An excluded rank out of range, listed twice, or the
// calling rank itself is an error matching ErrInvalidArgument, and c is left
// as it was.
func (c *Comm) Shrink(ctx context.Context, exclude []int, cfg *Config, flags int) (_ *Comm, err error) {
	defer func() { err = inMethod("Shrink", err) }()
	if !c.made() {
		var z0 *Comm
		return z0, zeroComm("Shrink")
	}
	if ctx == nil {
		return nil, nilContext("Shrink")
	}
	const op = "ncclCommShrink"
	if c.lib.nc.Fn[capi.FnCommShrink] == 0 {
		return nil, c.lib.unsupported(capi.FnCommShrink)
	}
	if len(exclude) == 0 {
		return nil, argError(op, "no ranks to exclude")
	}
	if flags != ShrinkDefault && flags != ShrinkAbort {
		return nil, argError(op, "flags %#x: want ShrinkDefault or ShrinkAbort", flags)
	}
	list := make([]int32, len(exclude)) // NCCL sorts the list in place
	seen := make(map[int]bool, len(exclude))
	for i, r := range exclude {
		if err := checkRank(op, "excluded rank", r, c.nranks); err != nil {
			return nil, err
		}
		if r == c.rank {
			return nil, argError(op, "rank %d excludes itself: excluded ranks do not call Shrink", r)
		}
		if seen[r] {
			return nil, argError(op, "rank %d excluded twice", r)
		}
		seen[r] = true
		list[i] = int32(r)
	}
	if len(exclude) >= c.nranks {
		return nil, argError(op, "excluding %d of %d ranks leaves none", len(exclude), c.nranks)
	}
	if flags == ShrinkAbort {
		// NCCL 2.31.2's ncclCommDestroy waits on an intra-node barrier with no
		// timeout, which a parent shrunk with NCCL_SHRINK_ABORT never passes:
		// such a parent is aborted, not destroyed (see Close). Marked before
		// the call: a shrink that fails half done leaves the parent as
		// unusable.
		c.abortOnClose.Store(true)
	}
	return c.derive(ctx, op, cfg, 0, false, func(h, out, cfgPtr uintptr) error {
		return c.lib.nc.CommShrink(h, &list[0], len(list), out, cfgPtr, flags)
	})
}

// GrowID makes the id that new ranks join c with (ncclCommGetUniqueId, NCCL
// >= 2.29.2). One rank of c calls it and passes the id to Grow and to the new
// ranks (Library.GrowRank). An id serves one grow; asking for another before
// it was used is an error matching ErrInvalidUsage.
func (c *Comm) GrowID() (UniqueID, error) {
	if !c.made() {
		var z0 UniqueID
		return z0, zeroComm("GrowID")
	}
	const op = "ncclCommGetUniqueId"
	var id UniqueID
	if c.lib.nc.Fn[capi.FnCommGetUniqueID] == 0 {
		return id, c.lib.unsupported(capi.FnCommGetUniqueID)
	}
	h, err := c.enter(op, false)
	if err != nil {
		return id, err
	}
	p := new(UniqueID)
	err = c.lib.nc.CommGetUniqueId(h, (*abi.UniqueID)(p))
	c.exit()
	return *p, err
}

// Grow makes a communicator of nranks ranks from c and new ranks (ncclCommGrow,
// NCCL >= 2.29.2), returning by ctx's end in both modes as Split does: c's
// ranks keep their numbers, the new ranks (which call
// Library.GrowRank) take the others. Every rank of c calls it; the rank that
// called GrowID passes the id, the others nil. cfg may be nil; the new
// communicator keeps c's blocking mode.
func (c *Comm) Grow(ctx context.Context, nranks int, id *UniqueID, cfg *Config) (_ *Comm, err error) {
	defer func() { err = inMethod("Grow", err) }()
	if !c.made() {
		var z0 *Comm
		return z0, zeroComm("Grow")
	}
	if ctx == nil {
		return nil, nilContext("Grow")
	}
	const op = "ncclCommGrow"
	if c.lib.nc.Fn[capi.FnCommGrow] == 0 {
		return nil, c.lib.unsupported(capi.FnCommGrow)
	}
	if err := checkInt32(op, "nranks", nranks, c.nranks+1); err != nil {
		return nil, err
	}
	var idp *UniqueID
	if id != nil {
		idp = new(UniqueID)
		*idp = *id
	}
	return c.derive(ctx, op, cfg, 0, false, func(h, out, cfgPtr uintptr) error {
		return c.lib.nc.CommGrow(h, nranks, (*abi.UniqueID)(idp), -1, out, cfgPtr)
	})
}

// GrowRank joins a communicator being grown as rank, one of the new ranks, on
// CUDA device dev (ncclCommGrow with no parent, NCCL >= 2.29.2). id is the one
// the existing ranks' GrowID made; nranks is the grown size. It returns once
// every rank has joined, as InitRank does.
func (l *Library) GrowRank(ctx context.Context, dev int, id UniqueID, nranks, rank int, cfg *Config) (_ *Comm, err error) {
	defer func() { err = inMethod("GrowRank", err) }()
	const op = "ncclCommGrow"
	if l == nil {
		return nil, nilLibrary("GrowRank")
	}
	if ctx == nil {
		return nil, nilContext("GrowRank")
	}
	if l.nc.Fn[capi.FnCommGrow] == 0 {
		return nil, l.unsupported(capi.FnCommGrow)
	}
	if err := checkInitArgs(op, dev, nranks, rank); err != nil {
		return nil, err
	}
	idp := new(UniqueID)
	*idp = id
	return l.initComm(ctx, op, dev, nranks, rank, cfg, cliqueKey(&id), func(h *uintptr, cfgPtr uintptr) error {
		return l.nc.CommGrow(0, nranks, (*abi.UniqueID)(idp), rank, uintptr(unsafe.Pointer(h)), cfgPtr)
	})
}
