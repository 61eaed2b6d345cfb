package nccl

import (
	"strconv"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

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
	return c.stream(fnAllReduce, uintptr(send.ptr), uintptr(recv.ptr), uintptr(recv.n), uintptr(recv.dt), uintptr(op), 0, s.h)
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
	return c.stream(fnBroadcast, uintptr(send.ptr), uintptr(recv.ptr), uintptr(recv.n), uintptr(recv.dt), uintptr(int32(root)), 0, s.h)
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
	return c.stream(fnReduce, uintptr(send.ptr), uintptr(recv.ptr), uintptr(send.n), uintptr(send.dt), uintptr(op), uintptr(int32(root)), 0, s.h)
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
	return c.stream(fnAllGather, uintptr(send.ptr), uintptr(recv.ptr), uintptr(send.n), uintptr(send.dt), 0, s.h)
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
	return c.stream(fnReduceScatter, uintptr(send.ptr), uintptr(recv.ptr), uintptr(recv.n), uintptr(recv.dt), uintptr(op), 0, s.h)
}

// Send sends buf to peer, which posts a Recv of the same length and type. A
// rank that both sends and receives does so inside one Group.
func (c *Comm) Send(buf Buffer, peer int, s Stream) error {
	if !c.made() {
		return zeroComm("Send")
	}
	const name = "ncclSend"
	if !c.rootFine(peer) || !c.fine(buf, buf.dt, buf.n, s) {
		if err := c.checkRoot(name, "peer", peer); err != nil {
			return err
		}
		if err := c.checkBuf(name, "buf", buf, buf.dt, buf.n, s); err != nil {
			return err
		}
	}
	return c.stream(fnSend, uintptr(buf.ptr), uintptr(buf.n), uintptr(buf.dt), uintptr(int32(peer)), 0, s.h)
}

// Recv receives into buf from peer.
func (c *Comm) Recv(buf Buffer, peer int, s Stream) error {
	if !c.made() {
		return zeroComm("Recv")
	}
	const name = "ncclRecv"
	if !c.rootFine(peer) || !c.fine(buf, buf.dt, buf.n, s) {
		if err := c.checkRoot(name, "peer", peer); err != nil {
			return err
		}
		if err := c.checkBuf(name, "buf", buf, buf.dt, buf.n, s); err != nil {
			return err
		}
	}
	return c.stream(fnRecv, uintptr(buf.ptr), uintptr(buf.n), uintptr(buf.dt), uintptr(int32(peer)), 0, s.h)
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
	native, err := c.route(fnAlltoAll)
	if err != nil {
		return err
	}
	if native {
		return c.stream(fnAlltoAll, uintptr(send.ptr), uintptr(recv.ptr), uintptr(k), uintptr(send.dt), 0, s.h)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	for p := range c.nranks {
		if err = c.p2p(g, fnSend, send.ptr+offset(send.dt, p*k), k, send.dt, p, s); err != nil {
			break
		}
		if err = c.p2p(g, fnRecv, recv.ptr+offset(recv.dt, p*k), k, recv.dt, p, s); err != nil {
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
	native, err := c.route(fnGather)
	if err != nil {
		return err
	}
	if native {
		return c.stream(fnGather, uintptr(send.ptr), uintptr(recv.ptr), uintptr(k), uintptr(send.dt), uintptr(int32(root)), 0, s.h)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	if c.rank == root {
		for p := range c.nranks {
			if err = c.p2p(g, fnRecv, recv.ptr+offset(send.dt, p*k), k, send.dt, p, s); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = c.p2p(g, fnSend, send.ptr, k, send.dt, root, s)
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
	native, err := c.route(fnScatter)
	if err != nil {
		return err
	}
	if native {
		return c.stream(fnScatter, uintptr(send.ptr), uintptr(recv.ptr), uintptr(k), uintptr(recv.dt), uintptr(int32(root)), 0, s.h)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	if c.rank == root {
		for p := range c.nranks {
			if err = c.p2p(g, fnSend, send.ptr+offset(recv.dt, p*k), k, recv.dt, p, s); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = c.p2p(g, fnRecv, recv.ptr, k, recv.dt, root, s)
	}
	return c.lib.groupEnd(g, mark, err)
}

// Path is how AlltoAll, Gather, Scatter and AlltoAllv run.
type Path int32

const (
	// Auto: the library's own function where it has it, else grouped.
	Auto Path = iota
	// Native: the library's own function (ncclAlltoAll, ncclGather,
	// ncclScatter from NCCL 2.28; VCCL's ncclAlltoAllv); an error matching
	// ErrNotSupported where it lacks it.
	Native
	// Grouped: ncclSend and ncclRecv to every peer inside one group, as
	// PyTorch and nccl-tests do, whatever the library has.
	Grouped
)

func (p Path) String() string {
	switch p {
	case Auto:
		return "auto"
	case Native:
		return "native"
	case Grouped:
		return "grouped"
	}
	return "Path(" + strconv.Itoa(int(p)) + ")"
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
// natively only on buffers in symmetric windows too.
func (c *Comm) PathOf(op string) Path {
	if !c.made() {
		return Grouped
	}
	var sym int
	switch op {
	case "AlltoAll":
		sym = fnAlltoAll
	case "Gather":
		sym = fnGather
	case "Scatter":
		sym = fnScatter
	case "AlltoAllv":
		sym = fnAlltoAllv
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
		if c.lib.fn[sym] == 0 {
			return false, c.lib.unsupported(sym)
		}
		return true, nil
	}
	return c.lib.fn[sym] != 0, nil
}

// stream runs a stream operation whose last two C arguments are the
// communicator and the stream: args holds a placeholder for the communicator,
// filled in once the call is admitted. Inside a Group on this goroutine it
// records the operation instead (see Group). No allocation.
//
// This is the hot path of every operation, written out by hand (enter, call,
// exit and settled, with their rare branches out of line): a load to see
// that no Group is open, one atomic add to be admitted, a load of the
// clique's gate, one add to leave, a load for the capture check, and the C
// call.
func (c *Comm) stream(sym int, args ...uintptr) error {
	l := c.lib
	if l.groupsOpen.Load() != 0 {
		if g := l.recording(); g != nil {
			return g.record(c, sym, args)
		}
	}
	// enter: counted while open, so that Abort leaves the freeing to the
	// last call out.
	if stateOf(c.life.Add(1)) != stOpen || c.q.gate.Load() != 0 {
		if err := c.reenter(ncclSymbols[sym].name); err != nil {
			return err
		}
	}
	if !c.blocking && !c.launching.CompareAndSwap(false, true) {
		c.exit()
		return busyError(ncclSymbols[sym].name)
	}
	n := len(args)
	args[n-2] = c.h
	if cu := l.cuda; cu != nil && cu.capt.n.Load() != 0 {
		cu.noteComm(c, args[n-1])
	}
	var err error
	if fn := l.fn[sym]; fn == 0 {
		err = l.unsupported(sym)
	} else if r := int32(ccall.Call(fn, args...)); r != int32(abi.Success) {
		err = l.result(sym, r)
	}
	if err == nil && c.blocking {
		c.exit()
		return nil
	}
	// A non-blocking launch runs on in NCCL: the call stays counted until
	// it is done, so that an Abort waits for it.
	err = c.settledHeld(ncclSymbols[sym].name, err)
	if !c.blocking {
		c.launching.Store(false)
	}
	c.exit()
	if err != nil && !c.blocking && isClosed(err) {
		c.afterCutShort()
	}
	return err
}

// afterCutShort follows a non-blocking launch whose wait an Abort (or Close)
// cut short: NCCL's launch thread may still be enqueuing the operation on
// the caller's stream, and stops only once ncclCommAbort has run. The call
// returns after that (the communicator is freed: Done), so that nothing more
// reaches the stream: a Synchronize of it then covers all the work, and the
// buffers may be freed. The caller's count is already given back, so the
// abort can go ahead.
//
//go:noinline
func (c *Comm) afterCutShort() {
	<-c.done
}

// busyError is a call on a non-blocking communicator while another
// goroutine's launch on it runs. NCCL refuses such a call inside
// (ncclCommEnsureReady: "Attempt to use communicator before the previous
// operation returned ncclSuccess") and makes the refusal the communicator's
// error for good (enqueue.cc, ncclEnqueueCheck's fail path), so gonccl refuses
// it first.
//
//go:noinline
func busyError(op string) error {
	return &Error{Op: op, Code: abi.InvalidUsage, Msg: "another goroutine's operation on this non-blocking communicator is still launching: " +
		"NCCL takes one call at a time on it and would have left it in error (issue a communicator's operations from one goroutine)"}
}

// reenter is the slow path of stream's enter: it undoes the count and
// enters again, waiting while the clique's gate is closed, or returns the
// error of a closed communicator.
//
//go:noinline
func (c *Comm) reenter(op string) error {
	c.exit()
	_, err := c.enter(op, false)
	return err
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
		c.lib.types[recv.dt] && (s.cu == nil || s.dev == c.dev)
}

// memFine: b is a live allocation on the communicator's device.
func (c *Comm) memFine(b Buffer) bool {
	return b.mem != nil && b.mem.dev == c.dev && !b.mem.freed.Load()
}

// fine is checkBuf's verdict without its error: the path every valid call
// takes, small enough to inline.
func (c *Comm) fine(b Buffer, dt DataType, want int, s Stream) bool {
	return b.n == want && b.dt == dt && dt >= 0 && int(dt) < len(c.lib.types) && c.lib.types[dt] &&
		b.mem != nil && b.mem.dev == c.dev && !b.mem.freed.Load() &&
		(s.cu == nil || s.dev == c.dev)
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
