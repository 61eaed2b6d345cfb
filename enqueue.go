package nccl

import (
	"runtime"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// The one path every stream operation takes into NCCL (Comm.stream): the
// group record, admission against Close and Abort, the call, and the wait for
// a non-blocking launch.

// stream runs a stream operation (a capi.Op), whose last two C arguments
// are the communicator and the stream: the Op holds a placeholder for the
// communicator, filled in once the call is admitted. Inside a Group on this goroutine it
// records the operation instead (see Group). No allocation.
//
// This is the hot path of every operation, written out by hand (enter, call,
// exit and settled, with their rare branches out of line): a load to see
// that no Group is open, one atomic add to be admitted, a load of the
// clique's gate, one add to leave, a load for the capture check, and the C
// call.
func (c *Comm) stream(o *capi.Op) error {
	sym, args := o.Sym, o.A[:o.N]
	l := c.lib
	if l.groupsOpen.Load() != 0 {
		if g := l.recording(); g != nil {
			return g.record(c, sym, args)
		}
	}
	// enter: counted while open, so that Abort leaves the freeing to the
	// last call out.
	if stateOf(c.life.Add(1)) != stOpen || c.q.gate.Load() != 0 {
		if err := c.reenter(capi.NCCLSymbols[sym].Name); err != nil {
			return err
		}
	}
	if !c.blocking {
		if !c.launching.CompareAndSwap(false, true) {
			c.exit()
			return busyError(capi.NCCLSymbols[sym].Name)
		}
		// The launch call and the polls that wait it out stay on one OS
		// thread (see waitFor): a goroutine that moves between them pays a
		// handoff between threads.
		runtime.LockOSThread()
	}
	n := len(args)
	args[n-2] = c.h
	if h := args[n-1]; h != c.lastStream.Load() { // for Close (see waitOutstanding)
		c.noteStream(h)
	}
	captured := false
	if cu := l.cuda; cu != nil && cu.capt.n.Load() != 0 {
		captured = cu.noteComm(c, args[n-1])
	}
	var err error
	if fn := l.nc.Fn[sym]; fn == 0 {
		err = l.unsupported(sym)
	} else if captured {
		var r uintptr
		if r, err = l.cuda.callRelaxed(c.dev, fn, args); err == nil && int32(r) != int32(abi.Success) {
			err = l.result(sym, int32(r))
		}
	} else {
		var r uintptr
		if r, err = l.callOn(c.dev, fn, args...); err == nil && int32(r) != int32(abi.Success) {
			err = l.result(sym, int32(r))
		}
	}
	if err == nil && c.blocking {
		c.exit()
		return nil
	}
	// A non-blocking launch runs on in NCCL: the call stays counted until
	// it is done, so that an Abort waits for it.
	err = c.settledHeld(capi.NCCLSymbols[sym].Name, err)
	if !c.blocking {
		c.launching.Store(false)
		runtime.UnlockOSThread()
	}
	c.exit()
	if err != nil && !c.blocking && isClosed(err) {
		c.afterCutShort()
	}
	return err
}

// reenter is the slow path of stream's enter: it undoes the count, meets
// the clique's other ranks first where they must (see arrive), and enters
// again, waiting while the clique's gate is closed, or returns the error of a
// closed communicator.
//
//go:noinline
func (c *Comm) reenter(op string) error {
	c.exit()
	if c.q.gate.Load()&gateArrive != 0 {
		if err := c.arrive(op); err != nil {
			return err
		}
	}
	_, err := c.enter(op, false)
	return err
}
