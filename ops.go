package nccl

import "github.com/gonccl/nccl/internal/capi"

// Stream operations: each enqueues work on stream s and returns; none
// synchronises. Before any C call each checks what NCCL would not, or would
// check only on the GPU: buffer lengths against the counts and the number of
// ranks, that both buffers hold the same type and lie on the communicator's
// device, that the stream is on it too, roots and peers, and the library's
// support for the type. A failed check is an *Error matching
// ErrInvalidArgument; a closed communicator, one matching ErrClosed.
//
// AlltoAll, Gather, Scatter and AlltoAllv run the library's own function
// where it has one and grouped Send/Recv otherwise (see Path).

// AllReduce reduces send across ranks into recv on every rank; both hold the
// same number of elements. recv may be send (in place).
func (c *Comm) AllReduce(send, recv Buffer, op RedOp, s Stream) error {
	if !c.made() {
		return zeroComm("AllReduce")
	}
	const name = "ncclAllReduce"
	// Each operation tests the verdicts of its checks inline and runs the
	// checks themselves, for their errors, only when a verdict is no.
	if !c.shapeFine(send, recv, recv.n, s) || !(c.memFine(send) && c.memFine(recv)) || !c.opFine(op) {
		if err := c.checkPair(name, send, recv, recv.n, s); err != nil {
			return err
		}
		if err := c.checkOp(name, op, recv.dt); err != nil {
			return err
		}
	}
	op, err := c.reduceOp(name, op, recv.dt)
	if err != nil {
		return err
	}
	var o capi.Op
	capi.AllReduce(&o, uintptr(send.ptr), uintptr(recv.ptr), recv.n, recv.dt, op, s.h)
	return c.stream(&o)
}

// Broadcast copies root's send into every rank's recv. send is read on root
// only; other ranks may pass the zero Buffer. recv may be send on root.
func (c *Comm) Broadcast(send, recv Buffer, root int, s Stream) error {
	if !c.made() {
		return zeroComm("Broadcast")
	}
	const name = "ncclBroadcast"
	if !c.rootFine(root) || !c.fine(recv, recv.dt, recv.n, s) || c.rank == root && !c.fine(send, recv.dt, recv.n, s) {
		if err := c.checkRoot(name, "root", root); err != nil {
			return err
		}
		if err := c.checkBuf(name, "recv", recv, recv.dt, recv.n, s); err != nil {
			return err
		}
		if c.rank == root {
			if err := c.checkBuf(name, "send", send, recv.dt, recv.n, s); err != nil {
				return err
			}
		}
	}
	if c.rank != root {
		send.ptr = recv.ptr
	}
	var o capi.Op
	capi.Broadcast(&o, uintptr(send.ptr), uintptr(recv.ptr), recv.n, recv.dt, root, s.h)
	return c.stream(&o)
}

// Reduce reduces send across ranks into root's recv. Other ranks may pass the
// zero Buffer as recv.
func (c *Comm) Reduce(send, recv Buffer, op RedOp, root int, s Stream) error {
	if !c.made() {
		return zeroComm("Reduce")
	}
	const name = "ncclReduce"
	if !c.rootFine(root) || !c.fine(send, send.dt, send.n, s) || c.rank == root && !c.fine(recv, send.dt, send.n, s) || !c.opFine(op) {
		if err := c.checkRoot(name, "root", root); err != nil {
			return err
		}
		if err := c.checkBuf(name, "send", send, send.dt, send.n, s); err != nil {
			return err
		}
		if c.rank == root {
			if err := c.checkBuf(name, "recv", recv, send.dt, send.n, s); err != nil {
				return err
			}
		}
		if err := c.checkOp(name, op, send.dt); err != nil {
			return err
		}
	}
	op, err := c.reduceOp(name, op, send.dt)
	if err != nil {
		return err
	}
	if c.rank != root {
		recv.ptr = send.ptr
	}
	var o capi.Op
	capi.Reduce(&o, uintptr(send.ptr), uintptr(recv.ptr), send.n, send.dt, op, root, s.h)
	return c.stream(&o)
}

// AllGather gathers every rank's send into recv, which holds Size()×send.Len()
// elements, rank i's block at i×send.Len(). In place: send is
// recv.Slice(rank×k, (rank+1)×k).
func (c *Comm) AllGather(send, recv Buffer, s Stream) error {
	if !c.made() {
		return zeroComm("AllGather")
	}
	const name = "ncclAllGather"
	if !c.fine(send, send.dt, send.n, s) || !c.fine(recv, send.dt, send.n*c.nranks, s) {
		if err := c.checkBuf(name, "send", send, send.dt, send.n, s); err != nil {
			return err
		}
		if err := c.checkBuf(name, "recv", recv, send.dt, send.n*c.nranks, s); err != nil {
			return err
		}
	}
	var o capi.Op
	capi.AllGather(&o, uintptr(send.ptr), uintptr(recv.ptr), send.n, send.dt, s.h)
	return c.stream(&o)
}

// ReduceScatter reduces send (Size()×recv.Len() elements) across ranks and
// leaves block rank in recv. In place: recv is send.Slice(rank×k, (rank+1)×k).
func (c *Comm) ReduceScatter(send, recv Buffer, op RedOp, s Stream) error {
	if !c.made() {
		return zeroComm("ReduceScatter")
	}
	const name = "ncclReduceScatter"
	if !c.fine(recv, recv.dt, recv.n, s) || !c.fine(send, recv.dt, recv.n*c.nranks, s) || !c.opFine(op) {
		if err := c.checkBuf(name, "recv", recv, recv.dt, recv.n, s); err != nil {
			return err
		}
		if err := c.checkBuf(name, "send", send, recv.dt, recv.n*c.nranks, s); err != nil {
			return err
		}
		if err := c.checkOp(name, op, recv.dt); err != nil {
			return err
		}
	}
	op, err := c.reduceOp(name, op, recv.dt)
	if err != nil {
		return err
	}
	var o capi.Op
	capi.ReduceScatter(&o, uintptr(send.ptr), uintptr(recv.ptr), recv.n, recv.dt, op, s.h)
	return c.stream(&o)
}

// Send sends buf to peer, which posts a Recv of the same length and type. A
// rank that both sends and receives does so inside one Group. A Send to the
// communicator's own rank (a one-rank communicator's only peer) goes in one
// Group with its matching Recv: outside a Group it is refused with an error
// matching ErrInvalidUsage, as NCCL refuses it.
func (c *Comm) Send(buf Buffer, peer int, s Stream) error {
	if !c.made() {
		return zeroComm("Send")
	}
	const name = "ncclSend"
	// A peer that is this rank takes the checks' path too, for checkSelf:
	// one comparison on the common path.
	if !c.rootFine(peer) || peer == c.rank || !c.fine(buf, buf.dt, buf.n, s) {
		if err := c.checkRoot(name, "peer", peer); err != nil {
			return err
		}
		if err := c.checkBuf(name, "buf", buf, buf.dt, buf.n, s); err != nil {
			return err
		}
		if err := c.checkSelf(name, peer); err != nil {
			return err
		}
	}
	var o capi.Op
	capi.Send(&o, uintptr(buf.ptr), buf.n, buf.dt, peer, s.h)
	return c.stream(&o)
}

// Recv receives into buf from peer. A Recv from the communicator's own rank
// goes in one Group with its matching Send (see Send).
func (c *Comm) Recv(buf Buffer, peer int, s Stream) error {
	if !c.made() {
		return zeroComm("Recv")
	}
	const name = "ncclRecv"
	if !c.rootFine(peer) || peer == c.rank || !c.fine(buf, buf.dt, buf.n, s) {
		if err := c.checkRoot(name, "peer", peer); err != nil {
			return err
		}
		if err := c.checkBuf(name, "buf", buf, buf.dt, buf.n, s); err != nil {
			return err
		}
		if err := c.checkSelf(name, peer); err != nil {
			return err
		}
	}
	var o capi.Op
	capi.Recv(&o, uintptr(buf.ptr), buf.n, buf.dt, peer, s.h)
	return c.stream(&o)
}

// AlltoAll sends block j of send to rank j and receives rank j's block into
// block j of recv; both hold Size()×k elements. send and recv must not
// overlap: NCCL exchanges the blocks with concurrent sends and receives (an
// in-place exchange was seen corrupted on H200 with NCCL 2.28.3).
func (c *Comm) AlltoAll(send, recv Buffer, s Stream) error {
	if !c.made() {
		return zeroComm("AlltoAll")
	}
	const name = "ncclAlltoAll"
	if send.n%c.nranks != 0 {
		return argError(name, "send has %d elements, not a multiple of %d ranks", send.n, c.nranks)
	}
	if err := c.checkPair(name, send, recv, send.n, s); err != nil {
		return err
	}
	if overlap(send, recv) {
		return argError(name, "send and recv overlap: AlltoAll cannot run in place")
	}
	k := send.n / c.nranks
	native, err := c.route(capi.FnAlltoAll)
	if err != nil {
		return err
	}
	if native {
		var o capi.Op
		capi.AlltoAll(&o, uintptr(send.ptr), uintptr(recv.ptr), k, send.dt, s.h)
		return c.stream(&o)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	for p := range c.nranks {
		if err = c.p2p(g, capi.FnSend, send.ptr+offset(send.dt, p*k), k, send.dt, p, s); err != nil {
			break
		}
		if err = c.p2p(g, capi.FnRecv, recv.ptr+offset(recv.dt, p*k), k, recv.dt, p, s); err != nil {
			break
		}
	}
	return c.lib.groupEnd(g, mark, err)
}

// Gather collects every rank's send into root's recv (Size()×send.Len()
// elements, rank i's block at i×send.Len()); other ranks may pass the zero
// Buffer as recv.
func (c *Comm) Gather(send, recv Buffer, root int, s Stream) error {
	if !c.made() {
		return zeroComm("Gather")
	}
	const name = "ncclGather"
	if err := c.checkRoot(name, "root", root); err != nil {
		return err
	}
	if err := c.checkBuf(name, "send", send, send.dt, send.n, s); err != nil {
		return err
	}
	k := send.n
	if c.rank == root {
		if err := c.checkBuf(name, "recv", recv, send.dt, k*c.nranks, s); err != nil {
			return err
		}
	} else {
		recv.ptr = send.ptr
	}
	native, err := c.route(capi.FnGather)
	if err != nil {
		return err
	}
	if native {
		var o capi.Op
		capi.Gather(&o, uintptr(send.ptr), uintptr(recv.ptr), k, send.dt, root, s.h)
		return c.stream(&o)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	if c.rank == root {
		for p := range c.nranks {
			if err = c.p2p(g, capi.FnRecv, recv.ptr+offset(send.dt, p*k), k, send.dt, p, s); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = c.p2p(g, capi.FnSend, send.ptr, k, send.dt, root, s)
	}
	return c.lib.groupEnd(g, mark, err)
}

// Scatter sends block i of root's send (Size()×recv.Len() elements) to rank i's
// recv; other ranks may pass the zero Buffer as send.
func (c *Comm) Scatter(send, recv Buffer, root int, s Stream) error {
	if !c.made() {
		return zeroComm("Scatter")
	}
	const name = "ncclScatter"
	if err := c.checkRoot(name, "root", root); err != nil {
		return err
	}
	if err := c.checkBuf(name, "recv", recv, recv.dt, recv.n, s); err != nil {
		return err
	}
	k := recv.n
	if c.rank == root {
		if err := c.checkBuf(name, "send", send, recv.dt, k*c.nranks, s); err != nil {
			return err
		}
	} else {
		send.ptr = recv.ptr
	}
	native, err := c.route(capi.FnScatter)
	if err != nil {
		return err
	}
	if native {
		var o capi.Op
		capi.Scatter(&o, uintptr(send.ptr), uintptr(recv.ptr), k, recv.dt, root, s.h)
		return c.stream(&o)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	if c.rank == root {
		for p := range c.nranks {
			if err = c.p2p(g, capi.FnSend, send.ptr+offset(recv.dt, p*k), k, recv.dt, p, s); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = c.p2p(g, capi.FnRecv, recv.ptr, k, recv.dt, root, s)
	}
	return c.lib.groupEnd(g, mark, err)
}

// SetPath chooses how the communicator runs AlltoAll, Gather, Scatter and
// AlltoAllv from now on (Auto by default).
func (c *Comm) SetPath(p Path) error {
	if !c.made() {
		return zeroComm("SetPath")
	}
	if err := c.openOr("SetPath"); err != nil {
		return err
	}
	if p < Auto || p > Grouped {
		return argError("SetPath", "unknown path %d", int(p))
	}
	c.path.Store(int32(p))
	return nil
}

// PathOf says how the next call of the named operation ("AlltoAll", "Gather",
// "Scatter", "AlltoAllv") would run: Native or Grouped. AlltoAllv runs
// natively only on buffers in symmetric windows, and on a stream that is not
// capturing a CUDA graph, too.
func (c *Comm) PathOf(op string) Path {
	if !c.made() {
		return Grouped
	}
	var sym int
	switch op {
	case "AlltoAll":
		sym = capi.FnAlltoAll
	case "Gather":
		sym = capi.FnGather
	case "Scatter":
		sym = capi.FnScatter
	case "AlltoAllv":
		sym = capi.FnAlltoAllv
	default:
		return Grouped
	}
	if native, _ := c.route(sym); native {
		return Native
	}
	return Grouped
}

// route decides native or grouped for one call: an index into the symbol
// table, no string.
func (c *Comm) route(sym int) (bool, error) {
	switch Path(c.path.Load()) {
	case Grouped:
		return false, nil
	case Native:
		if c.lib.nc.Fn[sym] == 0 {
			return false, c.lib.unsupported(sym)
		}
		return true, nil
	}
	return c.lib.nc.Fn[sym] != 0, nil
}

// p2p records an unchecked Send or Recv in g, for the grouped paths.
func (c *Comm) p2p(g *groupRec, sym int, p DevicePtr, n int, dt DataType, peer int, s Stream) error {
	return g.record(c, sym, []uintptr{uintptr(p), uintptr(n), uintptr(dt), uintptr(int32(peer)), 0, s.h})
}

func offset(dt DataType, elems int) DevicePtr { return DevicePtr(elems * dt.Size()) }

// overlap reports whether two buffers share memory.
func overlap(a, b Buffer) bool {
	return a.n > 0 && b.n > 0 && a.ptr < b.ptr+offset(b.dt, b.n) && b.ptr < a.ptr+offset(a.dt, a.n)
}
