package nccl

import (
	"fmt"

	"github.com/gonccl/nccl/abi"
)

// The checks of an operation's arguments before any C call: buffers against
// the counts, types and device; roots and peers; reductions. Each has a
// verdict without an error for the common path and a check with the error.

// checkPair checks a send and a receive buffer of the same type and length want.
func (c *Comm) checkPair(op string, send, recv Buffer, want int, s Stream) error {
	if c.shapeFine(send, recv, want, s) && c.memFine(send) && c.memFine(recv) {
		return nil
	}
	// The zero Buffer first: its length (0) says nothing of the other's.
	if recv.mem == nil {
		return argError(op, "recv is the zero Buffer")
	}
	if send.mem == nil {
		return argError(op, "send is the zero Buffer")
	}
	if err := c.checkBuf(op, "send", send, recv.dt, want, s); err != nil {
		return err
	}
	return c.checkBuf(op, "recv", recv, recv.dt, want, s)
}

// shapeFine and memFine are checkPair's verdict without its error: both
// buffers hold want elements of recv's type, which the library knows, on the
// communicator's device (memFine: a live allocation, never the zero Buffer), as the stream is. The path
// every valid call takes, in parts small enough to inline.
func (c *Comm) shapeFine(send, recv Buffer, want int, s Stream) bool {
	return send.n == want && recv.n == want && send.dt == recv.dt && uint32(recv.dt) < uint32(len(c.lib.types)) &&
		c.lib.types[recv.dt] && (s.cu == nil || s.dev == c.dev && s.alive())
}

// memFine: b is a live allocation on the communicator's device.
func (c *Comm) memFine(b Buffer) bool {
	return b.mem != nil && b.mem.dev == c.dev && !b.mem.freed.Load()
}

// fine is checkBuf's verdict without its error: the path every valid call
// takes, small enough to inline.
func (c *Comm) fine(b Buffer, dt DataType, want int, s Stream) bool {
	return b.n == want && b.dt == dt && uint32(dt) < uint32(len(c.lib.types)) && c.lib.types[dt] &&
		b.mem != nil && b.mem.dev == c.dev && !b.mem.freed.Load() &&
		(s.cu == nil || s.dev == c.dev && s.alive())
}

// opFine is checkOp's verdict without its error, for the common case: a
// built-in reduction the library has. PreMulSum ops take checkOp's path.
func (c *Comm) opFine(op RedOp) bool {
	return uint32(op) <= uint32(Avg) && (op < Avg || c.lib.allOps)
}

// checkBuf checks one buffer: type dt, want elements, on the communicator's
// device, as the stream is; and the type's support by the library.
func (c *Comm) checkBuf(op, name string, b Buffer, dt DataType, want int, s Stream) error {
	if c.fine(b, dt, want, s) {
		return nil
	}
	if b.mem == nil {
		return argError(op, "%s is the zero Buffer", name)
	}
	if b.n != want {
		return argError(op, "%s has %d elements, want %d", name, b.n, want)
	}
	if b.dt != dt {
		return argError(op, "%s holds %v, the operation moves %v", name, b.dt, dt)
	}
	if !c.lib.typeOK(dt) {
		if !dt.Valid() {
			return argError(op, "%s: unknown data type %v", name, dt)
		}
		return &UnsupportedError{Name: dt.String(), Path: c.lib.Path, Version: c.lib.version, Requires: ">= " + shortVersion(dt.Since())}
	}
	if b.mem.freed.Load() {
		return argError(op, "%s at %#x was freed", name, uintptr(b.ptr))
	}
	if b.mem.dev != c.dev {
		return argError(op, "%s is on device %d, the communicator on device %d", name, b.mem.dev, c.dev)
	}
	if s.cu != nil && s.dev != c.dev {
		return argError(op, "stream is on device %d, the communicator on device %d", s.dev, c.dev)
	}
	if !s.alive() {
		return destroyedStream(op)
	}
	return nil
}

// reduceOp is op, or on a communicator of one rank what oneRankOp makes of
// it; small enough to inline, so the common case costs one comparison.
func (c *Comm) reduceOp(name string, op RedOp, dt DataType) (RedOp, error) {
	if op < Avg || c.nranks != 1 {
		return op, nil
	}
	return oneRankOp(name, op, dt)
}

// oneRankOp is the reduction to pass NCCL on a communicator of one rank. There
// NCCL runs Avg of a float as a PreMulSum by 1, and PreMulSum with a kernel
// of its own whose fp8 cases are compiled out of its host code (onerank.cu,
// 2.24 to 2.30): it refuses both for fp8 types, and the refusal leaves a
// non-blocking communicator in error. Avg on one rank is the Sum it equals
// (x×1 = x, a copy); PreMulSum of fp8 is refused here, the communicator left
// usable.
//
//go:noinline
func oneRankOp(name string, op RedOp, dt DataType) (RedOp, error) {
	if dt != Float8e4m3 && dt != Float8e5m2 {
		return op, nil
	}
	if op == Avg {
		return Sum, nil
	}
	return op, argError(name, "PreMulSum of %v on a communicator of one rank: NCCL has no kernel for it (its one-rank path lacks fp8)", dt)
}

// rootFine is checkRoot's verdict without its error.
func (c *Comm) rootFine(r int) bool { return uint(r) < uint(c.nranks) }

func (c *Comm) checkRoot(op, name string, r int) error {
	if r < 0 || r >= c.nranks {
		return argError(op, "%s %d out of range [0, %d)", name, r, c.nranks)
	}
	return nil
}

// checkSelf refuses a Send to this rank, or a Recv from it, made outside a
// Group on this goroutine. NCCL pairs a rank's Sends to itself with its Recvs
// from itself when it schedules a group, and refuses a half left over
// ("Trying to send to self without a matching recv", "Trying to recv to self
// without a matching send": enqueue.cc, scheduleP2pTasksToPlan, which
// ncclLaunchPrepare runs at the group's end, 2.14 to 2.30.7). A call outside
// a group is a group of its own, so either half alone is refused, inside
// NCCL: on a non-blocking communicator through the group's cleanup, which
// leaves it in error for good. Inside a Group the pair is legal and is left
// to NCCL. A closed communicator's call is refused as such first.
func (c *Comm) checkSelf(op string, peer int) error {
	if peer != c.rank || c.lib.recording() != nil {
		return nil
	}
	if err := c.openOr(op); err != nil {
		return err
	}
	if op == "ncclRecv" {
		return &Error{Op: op, Code: abi.InvalidUsage, Msg: fmt.Sprintf(
			"Recv from its own rank %d outside a Group: NCCL refuses either half alone; put the Recv and the matching Send in one Group", peer)}
	}
	return &Error{Op: op, Code: abi.InvalidUsage, Msg: fmt.Sprintf(
		"Send to its own rank %d outside a Group: NCCL refuses either half alone; put the Send and the matching Recv in one Group", peer)}
}

// checkOp checks a reduction for data of type dt: a built-in one the library
// has, or a PreMulSum op this communicator made for dt and has not destroyed.
// NCCL refuses the others inside the call, which leaves a non-blocking
// communicator in error for good.
func (c *Comm) checkOp(name string, op RedOp, dt DataType) error {
	if op >= Sum && op < Avg { // every release has them
		return nil
	}
	if op < 0 {
		return argError(name, "invalid reduction %v", op)
	}
	if !c.lib.version.AtLeast(op.Since()) {
		return &UnsupportedError{Name: op.String(), Path: c.lib.Path, Version: c.lib.version, Requires: ">= " + shortVersion(op.Since())}
	}
	if op == Avg {
		return nil
	}
	c.opsMu.Lock()
	made, ok := c.userOps[op]
	c.opsMu.Unlock()
	switch {
	case !ok:
		return argError(name, "reduction %v: not a PreMulSum op of this communicator (or destroyed)", op)
	case made != dt:
		return argError(name, "reduction %v was made for %v, the operation moves %v", op, made, dt)
	}
	return nil
}
