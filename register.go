package nccl

import (
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// Memory registration, NCCL's allocator, symmetric windows and PreMulSum ops.

// Registration is a buffer registered with Comm.Register.
type Registration struct {
	h    uintptr
	comm *Comm
}

// Register registers a buffer with the communicator for zero-copy transfers
// (ncclCommRegister, NCCL >= 2.19). Deregister before freeing it.
func (c *Comm) Register(b Buffer) (Registration, error) {
	if !c.made() {
		var z0 Registration
		return z0, zeroComm("Register")
	}
	const op = "ncclCommRegister"
	if c.lib.nc.Fn[capi.FnCommRegister] == 0 {
		return Registration{}, c.lib.unsupported(capi.FnCommRegister)
	}
	if err := c.checkBuf(op, "buffer", b, b.dt, b.n, Stream{}); err != nil {
		return Registration{}, err
	}
	h, err := c.enter(op, false)
	if err != nil {
		return Registration{}, err
	}
	r := new(uintptr) // a non-blocking communicator may fill it in later
	err = c.lib.nc.CommRegister(h, uintptr(b.ptr), uintptr(b.Size()), r)
	c.exit()
	if err = c.settled(op, err); err != nil {
		c.keep(r)
		return Registration{}, err
	}
	return Registration{h: atomic.LoadUintptr(r), comm: c}, nil
}

// Handle is NCCL's registration handle.
func (r Registration) Handle() uintptr { return r.h }

// Deregister undoes Register.
func (c *Comm) Deregister(r Registration) error {
	if !c.made() {
		return zeroComm("Deregister")
	}
	const op = "ncclCommDeregister"
	if r.comm != c {
		return argError(op, "registration of another communicator")
	}
	h, err := c.enter(op, false)
	if err != nil {
		return err
	}
	err = c.lib.nc.CommDeregister(h, r.h)
	c.exit()
	return c.settled(op, err)
}

// Window is a window registration made by RegisterWindow.
type Window struct {
	h    uintptr
	comm *Comm
}

// RegisterWindow registers b as a window (ncclCommWindowRegister, NCCL >= 2.27).
// With WinCollSymmetric it is a symmetric window: every rank registers the same
// size together. NCCL can report success without a window when symmetric
// memory is unavailable: that is an error matching ErrNotSupported.
func (c *Comm) RegisterWindow(b Buffer, flags int) (Window, error) {
	if !c.made() {
		var z0 Window
		return z0, zeroComm("RegisterWindow")
	}
	const op = "ncclCommWindowRegister"
	if c.lib.nc.Fn[capi.FnCommWindowRegister] == 0 {
		return Window{}, c.lib.unsupported(capi.FnCommWindowRegister)
	}
	if err := c.checkBuf(op, "buffer", b, b.dt, b.n, Stream{}); err != nil {
		return Window{}, err
	}
	if err := checkInt32(op, "flags", flags, 0); err != nil {
		return Window{}, err
	}
	return c.registerWindow(b.ptr, b.mem.size-int(b.ptr-b.mem.base), flags)
}

func (c *Comm) registerWindow(p DevicePtr, size, flags int) (Window, error) {
	const op = "ncclCommWindowRegister"
	h, err := c.enter(op, false)
	if err != nil {
		return Window{}, err
	}
	w := new(uintptr) // a non-blocking communicator fills it in when the registration is done
	err = c.lib.nc.CommWindowRegister(h, uintptr(DevicePtr(p)), uintptr(size), w, int32(flags))
	c.exit()
	if err = c.settled(op, err); err != nil {
		c.keep(w)
		return Window{}, err
	}
	wh := atomic.LoadUintptr(w)
	if wh == 0 {
		return Window{}, &UnsupportedError{Name: op + " (returned no window: symmetric memory unavailable)", Path: c.lib.Path, Version: c.lib.version, Requires: "symmetric memory support"}
	}
	c.winMu.Lock()
	c.wins = append(c.wins, windowSpan{h: wh, base: uintptr(p), size: uintptr(size), symmetric: flags&WinCollSymmetric != 0})
	c.winMu.Unlock()
	return Window{h: wh, comm: c}, nil
}

// window is c's registration of handle h, if it has one.
func (c *Comm) window(h uintptr) (windowSpan, bool) {
	c.winMu.Lock()
	defer c.winMu.Unlock()
	for _, w := range c.wins {
		if w.h == h {
			return w, true
		}
	}
	return windowSpan{}, false
}

// inSymmetricWindow is whether [p, p+n) lies inside one of c's symmetric
// windows.
func (c *Comm) inSymmetricWindow(p, n uintptr) bool {
	c.winMu.Lock()
	defer c.winMu.Unlock()
	for _, w := range c.wins {
		if w.symmetric && p >= w.base && p-w.base <= w.size && n <= w.size-(p-w.base) {
			return true
		}
	}
	return false
}

// Handle is the ncclWindow_t.
func (w Window) Handle() uintptr { return w.h }

// DeregisterWindow undoes RegisterWindow (collective for a symmetric window).
func (c *Comm) DeregisterWindow(w Window) error {
	if !c.made() {
		return zeroComm("DeregisterWindow")
	}
	const op = "ncclCommWindowDeregister"
	if w.comm != c {
		return argError(op, "window of another communicator")
	}
	h, err := c.enter(op, false)
	if err != nil {
		return err
	}
	err = c.lib.nc.CommWindowDeregister(h, w.h)
	c.exit()
	if err = c.settled(op, err); err == nil {
		c.winMu.Lock()
		c.wins = slices.DeleteFunc(c.wins, func(s windowSpan) bool { return s.h == w.h })
		c.winMu.Unlock()
	}
	return err
}

// MemAlloc allocates n elements of dt on device dev with NCCL's allocator
// (ncclMemAlloc, NCCL >= 2.19), suited to registration and windows. Free it
// with Buffer.Free.
func (l *Library) MemAlloc(dev int, dt DataType, n int) (Buffer, error) {
	const op = "ncclMemAlloc"
	if l == nil {
		return Buffer{}, nilLibrary("MemAlloc")
	}
	if l.nc.Fn[capi.FnMemAlloc] == 0 {
		return Buffer{}, l.unsupported(capi.FnMemAlloc)
	}
	size, err := bufferSize(op, dt, n)
	if err != nil {
		return Buffer{}, err
	}
	if err := checkDevice(op, dev); err != nil {
		return Buffer{}, err
	}
	p, err := l.memAlloc(dev, size)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{ptr: p, n: n, dt: dt, mem: &allocation{n: n, cu: l.cuda, lib: l, dev: dev, base: p, size: size, kind: allocNCCL}}, nil
}

func (l *Library) memAlloc(dev, size int) (DevicePtr, error) {
	var p DevicePtr
	err := l.onDevice("ncclMemAlloc", dev, func() error { return l.nc.MemAlloc((*uintptr)(&p), uintptr(size)) })
	return p, err
}

func (l *Library) memFree(dev int, p DevicePtr) error {
	return l.onDevice("ncclMemFree", dev, func() error { return l.nc.MemFree(uintptr(p)) })
}

// AllocSymmetric allocates n elements of dt with ncclMemAlloc on the
// communicator's device and registers them as a symmetric window
// (WinCollSymmetric), which NCCL's symmetric kernels and VCCL's native
// AlltoAllv use. Every rank calls it with the same n; windows are whole pages.
// Buffer.Free deregisters and frees it (every rank together). Where NCCL
// returns no window, the error matches ErrNotSupported and the memory is freed.
func (c *Comm) AllocSymmetric(dt DataType, n int) (Buffer, error) {
	if !c.made() {
		var z0 Buffer
		return z0, zeroComm("AllocSymmetric")
	}
	const op = "AllocSymmetric"
	l := c.lib
	for _, sym := range []int{capi.FnMemAlloc, capi.FnCommWindowRegister} {
		if l.nc.Fn[sym] == 0 {
			return Buffer{}, l.unsupported(sym)
		}
	}
	size, err := bufferSize(op, dt, n)
	if err != nil {
		return Buffer{}, err
	}
	if r := size % abi.WindowAlignment; r != 0 || size == 0 {
		if size > int(^uint(0)>>1)-abi.WindowAlignment {
			return Buffer{}, argError(op, "%d bytes overflow when rounded to whole pages", size)
		}
		size += abi.WindowAlignment - r
	}
	p, err := l.memAlloc(c.dev, size)
	if err != nil {
		return Buffer{}, err
	}
	w, err := c.registerWindow(p, size, WinCollSymmetric)
	if err != nil {
		l.memFree(c.dev, p)
		return Buffer{}, err
	}
	return Buffer{ptr: p, n: n, dt: dt, mem: &allocation{n: n, cu: l.cuda, lib: l, comm: c, dev: c.dev, base: p, size: size, kind: allocSymmetric, win: w.h}}, nil
}

// PreMulSum creates on c the reduction "sum of scalar × x" for T's data type
// (ncclRedOpCreatePreMulSum with the scalar read now, NCCL >= 2.11). Destroy it
// with DestroyRedOp once the operations using it are enqueued.
func PreMulSum[T Element](c *Comm, scalar T) (RedOp, error) {
	if !c.made() {
		return 0, zeroComm("PreMulSum")
	}
	v := scalar
	op, err := c.createPreMulSum(uintptr(unsafe.Pointer(&v)), TypeOf[T](), abi.ScalarHostImmediate)
	runtime.KeepAlive(&v)
	return op, err
}

// PreMulSumDevice creates the reduction "sum of scalar × x" with the scalar in
// device memory (one element of the buffer's type), read by every operation
// that uses the op, so it can change between them.
func (c *Comm) PreMulSumDevice(scalar Buffer) (RedOp, error) {
	if !c.made() {
		var z0 RedOp
		return z0, zeroComm("PreMulSumDevice")
	}
	const op = "ncclRedOpCreatePreMulSum"
	if err := c.checkBuf(op, "scalar", scalar, scalar.dt, 1, Stream{}); err != nil {
		return 0, err
	}
	return c.createPreMulSum(uintptr(scalar.ptr), scalar.dt, abi.ScalarDevice)
}

//go:uintptrescapes
func (c *Comm) createPreMulSum(scalar uintptr, dt DataType, res abi.ScalarResidence) (RedOp, error) {
	const op = "ncclRedOpCreatePreMulSum"
	if c.lib.nc.Fn[capi.FnRedOpCreatePreMulSum] == 0 {
		return 0, c.lib.unsupported(capi.FnRedOpCreatePreMulSum)
	}
	h, err := c.enter(op, false)
	if err != nil {
		return 0, err
	}
	var r RedOp
	err = c.lib.nc.RedOpCreatePreMulSum(&r, scalar, dt, int32(res), h)
	c.exit()
	if err = c.settled(op, err); err != nil {
		return 0, err
	}
	c.opsMu.Lock()
	if c.userOps == nil {
		c.userOps = map[RedOp]DataType{}
	}
	c.userOps[RedOp(r)] = dt
	c.opsMu.Unlock()
	return RedOp(r), nil
}

// DestroyRedOp frees an op made by PreMulSum or PreMulSumDevice.
func (c *Comm) DestroyRedOp(op RedOp) error {
	if !c.made() {
		return zeroComm("DestroyRedOp")
	}
	const name = "ncclRedOpDestroy"
	if op.Builtin() {
		return argError(name, "%v is built in", op)
	}
	c.opsMu.Lock()
	_, ok := c.userOps[op]
	c.opsMu.Unlock()
	if !ok && c.state() == stOpen {
		// NCCL refuses it inside the call, leaving a non-blocking
		// communicator in error.
		return argError(name, "%v: not a PreMulSum op of this communicator (or destroyed already)", op)
	}
	h, err := c.enter(name, false)
	if err != nil {
		return err
	}
	err = c.lib.nc.RedOpDestroy(op, h)
	c.exit()
	if err = c.settled(name, err); err == nil {
		c.opsMu.Lock()
		delete(c.userOps, op)
		c.opsMu.Unlock()
	}
	return err
}
