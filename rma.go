package nccl

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// One-sided RMA (NCCL >= 2.29.2): a rank writes into a peer's window without
// the peer posting a receive, and signals it; the peer's stream waits for the
// signals. Windows are symmetric ones (AllocSymmetric, or RegisterWindow with
// WinCollSymmetric): a rank names the peer's window by its own handle of the
// same collective registration, and the source must lie in a symmetric window
// too. Like the other operations these enqueue on a stream and return.

// WaitSignalDesc is ncclWaitSignalDesc_t: wait for OpCnt signals from Peer.
// SigIdx and Ctx must be 0 in NCCL 2.29 and 2.30.
type WaitSignalDesc = abi.WaitSignalDesc

// WinStrictOrdering is NCCL_WIN_STRICT_ORDERING (NCCL >= 2.29.7), a
// RegisterWindow flag.
const WinStrictOrdering = abi.WinStrictOrdering

// PutSignal copies src into peer's part of win at byte offset, then signals
// peer (ncclPutSignal, signal index 0, context 0). src must lie in a symmetric
// window of c; win is c's handle of the symmetric window that the peer's
// bytes land in (see WindowOf).
func (c *Comm) PutSignal(src Buffer, peer int, win Window, offset int, s Stream) error {
	if !c.made() {
		return zeroComm("PutSignal")
	}
	const name = "ncclPutSignal"
	if c.lib.nc.Fn[capi.FnPutSignal] == 0 {
		return c.lib.unsupported(capi.FnPutSignal)
	}
	if err := c.checkRoot(name, "peer", peer); err != nil {
		return err
	}
	if err := c.checkBuf(name, "src", src, src.dt, src.n, s); err != nil {
		return err
	}
	if win.comm != c {
		return argError(name, "window of another communicator, or none")
	}
	if offset < 0 {
		return argError(name, "negative window offset %d", offset)
	}
	// What NCCL would refuse only inside the call, which leaves a
	// non-blocking communicator in error for good, is refused here.
	bytes := uintptr(src.n) * uintptr(src.dt.Size())
	peerWin, ok := c.window(win.h)
	switch {
	case !ok:
		return argError(name, "window %#x is not registered (deregistered?)", win.h)
	case !peerWin.symmetric:
		return argError(name, "the peer's window must be symmetric (WinCollSymmetric)")
	case uintptr(offset) > peerWin.size || bytes > peerWin.size-uintptr(offset):
		return argError(name, "%d bytes at offset %d overrun the window of %d bytes", bytes, offset, peerWin.size)
	case !c.inSymmetricWindow(uintptr(src.ptr), bytes):
		return argError(name, "src is not inside a symmetric window of this communicator (AllocSymmetric, or RegisterWindow with WinCollSymmetric)")
	}
	var o capi.Op
	capi.PutSignal(&o, uintptr(src.ptr), src.n, src.dt, peer, win.h, uintptr(offset), 0, 0, 0, s.h)
	return c.stream(&o)
}

// Signal signals peer without moving data (ncclSignal, signal index 0,
// context 0).
func (c *Comm) Signal(peer int, s Stream) error {
	if !c.made() {
		return zeroComm("Signal")
	}
	const name = "ncclSignal"
	if c.lib.nc.Fn[capi.FnSignal] == 0 {
		return c.lib.unsupported(capi.FnSignal)
	}
	if err := c.checkRoot(name, "peer", peer); err != nil {
		return err
	}
	if err := c.checkStream(name, s); err != nil {
		return err
	}
	var o capi.Op
	capi.Signal(&o, peer, 0, 0, 0, s.h)
	return c.stream(&o)
}

// WaitSignal makes s wait until the signals waits describe have arrived, and
// consumes them (ncclWaitSignal). NCCL reads waits during the call (inside a Group, when the group launches): reuse the
// slice.
func (c *Comm) WaitSignal(waits []WaitSignalDesc, s Stream) error {
	if !c.made() {
		return zeroComm("WaitSignal")
	}
	const name = "ncclWaitSignal"
	if c.lib.nc.Fn[capi.FnWaitSignal] == 0 {
		return c.lib.unsupported(capi.FnWaitSignal)
	}
	if len(waits) == 0 || len(waits) > 1<<31-1 {
		return argError(name, "%d descriptors", len(waits))
	}
	for i, w := range waits {
		if w.OpCnt <= 0 {
			return argError(name, "descriptor %d waits for %d signals", i, w.OpCnt)
		}
		// NCCL (through 2.30) has signal index 0 and context 0 only, and
		// refuses others inside the call, which leaves a non-blocking
		// communicator in error: refuse them here.
		if w.SigIdx != 0 {
			return argError(name, "descriptor %d: sigIdx %d (NCCL has signal index 0 only)", i, w.SigIdx)
		}
		if w.Ctx != 0 {
			return argError(name, "descriptor %d: context %d (NCCL has context 0 only)", i, w.Ctx)
		}
		if err := c.checkRoot(name, "peer", int(w.Peer)); err != nil {
			return err
		}
	}
	if err := c.checkStream(name, s); err != nil {
		return err
	}
	// NCCL reads the descriptors in the call, which inside a Group comes
	// when the group launches: pinned until then.
	pin := c.lib.pinner()
	pin.Pin(&waits[0])
	var o capi.Op
	capi.WaitSignal(&o, len(waits), unsafe.Pointer(&waits[0]), s.h)
	err := c.stream(&o)
	c.lib.unpinAfter(pin)
	return err
}

func (c *Comm) checkStream(name string, s Stream) error {
	if s.cu != nil && s.dev != c.dev {
		return argError(name, "stream is on device %d, the communicator on device %d", s.dev, c.dev)
	}
	if !s.alive() {
		return destroyedStream(name)
	}
	return nil
}

// WindowAddress is the start of the memory w was registered over
// (ncclWinGetUserPtr, NCCL >= 2.29.2).
func (c *Comm) WindowAddress(w Window) (DevicePtr, error) {
	if !c.made() {
		var z0 DevicePtr
		return z0, zeroComm("WindowAddress")
	}
	const op = "ncclWinGetUserPtr"
	if c.lib.nc.Fn[capi.FnWinGetUserPtr] == 0 {
		return 0, c.lib.unsupported(capi.FnWinGetUserPtr)
	}
	if w.comm != c {
		return 0, argError(op, "window of another communicator, or none")
	}
	h, err := c.enter(op, false)
	if err != nil {
		return 0, err
	}
	p := new(uintptr)
	err = c.lib.nc.WinGetUserPtr(h, w.h, p)
	c.exit()
	return DevicePtr(*p), err
}

// WindowOf is the symmetric window of b, a Buffer from c's AllocSymmetric
// (or a slice of one), and b's byte offset in it: what PutSignal takes.
func (c *Comm) WindowOf(b Buffer) (Window, int, error) {
	if !c.made() {
		var z0 Window
		var z1 int
		return z0, z1, zeroComm("WindowOf")
	}
	const op = "WindowOf"
	if err := c.openOr(op); err != nil {
		return Window{}, 0, err
	}
	if b.mem == nil || b.mem.kind != allocSymmetric || b.mem.comm != c {
		return Window{}, 0, argError(op, "buffer is not from this communicator's AllocSymmetric")
	}
	if b.mem.freed.Load() {
		return Window{}, 0, argError(op, "buffer at %#x was freed", uintptr(b.ptr))
	}
	return Window{h: b.mem.win, comm: c}, int(b.ptr - b.mem.base), nil
}
