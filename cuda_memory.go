package nccl

import (
	"unsafe"

	"github.com/gonccl/nccl/internal/capi"
)

// CUDA runtime calls programs need beside NCCL: host memory registration,
// device attributes, peer access, stream priorities and stream-ordered
// allocation.

// More of CUDA's error codes (cudaError_t), in *CUDAError.Code.
const (
	CUDAErrorIllegalState                = CUDAErrorCode(401)
	CUDAErrorPeerAccessUnsupported       = CUDAErrorCode(217)
	CUDAErrorPeerAccessAlreadyEnabled    = CUDAErrorCode(704)
	CUDAErrorPeerAccessNotEnabled        = CUDAErrorCode(705)
	CUDAErrorHostMemoryAlreadyRegistered = CUDAErrorCode(712)
	CUDAErrorHostMemoryNotRegistered     = CUDAErrorCode(713)
)

// HostRegisterFlags are cudaHostRegister's flags.
type HostRegisterFlags uint32

const (
	HostRegisterDefault  HostRegisterFlags = 0
	HostRegisterPortable HostRegisterFlags = 1 // page-locked for every CUDA context, not only the current one
	HostRegisterMapped   HostRegisterFlags = 2 // mapped into the device's address space
	HostRegisterIoMemory HostRegisterFlags = 4 // the range is I/O memory (a device's BAR)
	HostRegisterReadOnly HostRegisterFlags = 8 // the device only reads it
)

// HostRegister page-locks p (cudaHostRegister) so that asynchronous copies
// from and to it are truly asynchronous and NCCL can use it. p must stay
// allocated and reachable until HostUnregister: Go's collector does not move
// memory but frees it when unreferenced (keep p referenced, or use memory Go
// does not manage, from mmap). Registering a range that overlaps a registered
// one fails with CUDAErrorHostMemoryAlreadyRegistered.
func (cu *CUDA) HostRegister(p []byte, flags HostRegisterFlags) error {
	if cu == nil {
		return nilCUDA("HostRegister")
	}
	const op = "cudaHostRegister"
	if len(p) == 0 {
		return argError(op, "empty range")
	}
	if flags&^(HostRegisterPortable|HostRegisterMapped|HostRegisterIoMemory|HostRegisterReadOnly) != 0 {
		return argError(op, "unknown flags %#x", uint32(flags))
	}
	if err := cu.refuseHere(op); err != nil {
		return err
	}
	return cu.rt.HostRegister(unsafe.Pointer(&p[0]), uintptr(len(p)), uint32(flags))
}

// HostUnregister unregisters memory registered by HostRegister; p starts where
// the registered range started.
func (cu *CUDA) HostUnregister(p []byte) error {
	if cu == nil {
		return nilCUDA("HostUnregister")
	}
	const op = "cudaHostUnregister"
	if len(p) == 0 {
		return argError(op, "empty range")
	}
	if err := cu.refuseHere(op); err != nil {
		return err
	}
	return cu.rt.HostUnregister(unsafe.Pointer(&p[0]))
}

// DeviceAttr is cudaDeviceAttr: what DeviceAttribute reads.
type DeviceAttr int32

// Device attributes (the values of cudaDeviceAttr, the same in CUDA 11, 12 and 13).
const (
	DevAttrWarpSize               DeviceAttr = 10
	DevAttrMultiProcessorCount    DeviceAttr = 16
	DevAttrCanMapHostMemory       DeviceAttr = 19
	DevAttrPciBusID               DeviceAttr = 33
	DevAttrPciDeviceID            DeviceAttr = 34
	DevAttrL2CacheSize            DeviceAttr = 38
	DevAttrUnifiedAddressing      DeviceAttr = 41
	DevAttrPciDomainID            DeviceAttr = 50
	DevAttrComputeCapabilityMajor DeviceAttr = 75
	DevAttrComputeCapabilityMinor DeviceAttr = 76
	DevAttrMemoryPoolsSupported   DeviceAttr = 115 // cudaMallocAsync works
)

// DeviceAttribute reads one attribute of device dev (cudaDeviceGetAttribute).
// Any cudaDeviceAttr value may be passed; one the runtime does not know is a
// *CUDAError with cudaErrorInvalidValue.
func (cu *CUDA) DeviceAttribute(dev int, a DeviceAttr) (int, error) {
	if cu == nil {
		return 0, nilCUDA("DeviceAttribute")
	}
	if err := checkDevice("cudaDeviceGetAttribute", dev); err != nil {
		return 0, err
	}
	var v int32
	err := cu.rt.DeviceGetAttribute(&v, int32(a), dev)
	return int(v), err
}

// ComputeCapability is device dev's compute capability (9, 0 for an H100).
func (cu *CUDA) ComputeCapability(dev int) (major, minor int, err error) {
	if cu == nil {
		return 0, 0, nilCUDA("ComputeCapability")
	}
	if major, err = cu.DeviceAttribute(dev, DevAttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = cu.DeviceAttribute(dev, DevAttrComputeCapabilityMinor)
	return major, minor, err
}

// MultiProcessorCount is device dev's number of streaming multiprocessors.
func (cu *CUDA) MultiProcessorCount(dev int) (int, error) {
	if cu == nil {
		return 0, nilCUDA("MultiProcessorCount")
	}
	return cu.DeviceAttribute(dev, DevAttrMultiProcessorCount)
}

// CanAccessPeer reports whether device dev can access peer's memory directly
// (cudaDeviceCanAccessPeer); false for dev == peer, as CUDA says.
func (cu *CUDA) CanAccessPeer(dev, peer int) (bool, error) {
	if cu == nil {
		return false, nilCUDA("CanAccessPeer")
	}
	const op = "cudaDeviceCanAccessPeer"
	if err := checkDevice(op, dev); err != nil {
		return false, err
	}
	if err := checkInt32(op, "peer", peer, 0); err != nil {
		return false, err
	}
	var can int32
	err := cu.rt.DeviceCanAccessPeer(&can, dev, peer)
	return can != 0, err
}

// EnablePeerAccess lets device dev access peer's memory
// (cudaDeviceEnablePeerAccess, run with dev current). Access already enabled
// is not an error: CUDA's cudaErrorPeerAccessAlreadyEnabled is taken as
// success and cleared from the thread's last error, so EnablePeerAccess can be
// called by every goroutine that needs the access.
func (cu *CUDA) EnablePeerAccess(dev, peer int) error {
	if cu == nil {
		return nilCUDA("EnablePeerAccess")
	}
	const op = "cudaDeviceEnablePeerAccess"
	if err := checkInt32(op, "peer", peer, 0); err != nil {
		return err
	}
	if dev == peer {
		return argError(op, "device %d cannot be its own peer", dev)
	}
	return cu.OnDevice(dev, func() error {
		err := cu.rt.DeviceEnablePeerAccess(peer)
		if e, ok := err.(*CUDAError); ok && e.Code == CUDAErrorPeerAccessAlreadyEnabled {
			return nil // failure already cleared the thread's last error
		}
		return err
	})
}

// DisablePeerAccess ends device dev's access to peer's memory. Access not
// enabled is a *CUDAError with CUDAErrorPeerAccessNotEnabled.
func (cu *CUDA) DisablePeerAccess(dev, peer int) error {
	if cu == nil {
		return nilCUDA("DisablePeerAccess")
	}
	const op = "cudaDeviceDisablePeerAccess"
	if err := checkInt32(op, "peer", peer, 0); err != nil {
		return err
	}
	return cu.OnDevice(dev, func() error { return cu.rt.DeviceDisablePeerAccess(peer) })
}

// StreamPriorityRange is device dev's range of stream priorities: least is the
// lowest priority (0), greatest the highest, a smaller number (-5 on an H100).
func (cu *CUDA) StreamPriorityRange(dev int) (least, greatest int, err error) {
	if cu == nil {
		return 0, 0, nilCUDA("StreamPriorityRange")
	}
	var l, g int32
	err = cu.OnDevice(dev, func() error { return cu.rt.DeviceGetStreamPriorityRange(&l, &g) })
	return int(l), int(g), err
}

// NewStreamWithPriority creates a stream on device dev with a priority
// (cudaStreamCreateWithPriority): a lower number runs first. CUDA clamps a
// priority outside StreamPriorityRange into it; one that is not a C int is refused.
func (cu *CUDA) NewStreamWithPriority(dev int, flags StreamFlags, priority int) (Stream, error) {
	if cu == nil {
		return Stream{}, nilCUDA("NewStreamWithPriority")
	}
	const op = "cudaStreamCreateWithPriority"
	if priority < -1<<31 || priority > 1<<31-1 {
		return Stream{}, argError(op, "priority %d is not a C int", priority)
	}
	var h uintptr
	err := cu.OnDevice(dev, func() error { return cu.rt.StreamCreateWithPriority(&h, uint32(flags), priority) })
	if err == nil {
		destroyedStreams.Delete(h) // CUDA may hand out a destroyed stream's handle again
	}
	return Stream{cu: cu, h: h, dev: dev, life: new(streamLife)}, err
}

// Priority is the stream's priority (cudaStreamGetPriority).
func (s Stream) Priority() (int, error) {
	const op = "cudaStreamGetPriority"
	cu, err := s.runtime(op)
	if err != nil {
		return 0, err
	}
	var p int32
	if s.h == 0 {
		err = cu.OnDevice(s.dev, func() error { return cu.rt.StreamGetPriority(0, &p) })
	} else {
		err = cu.rt.StreamGetPriority(s.h, &p)
	}
	return int(p), err
}

// MallocAsync allocates n elements of dt from the memory pool of s's device,
// in stream order (cudaMallocAsync, CUDA >= 11.2): the memory may be used by
// work enqueued on s after this call (other streams: order them after s). The
// Buffer's Free frees it in stream order on s (which must still exist then);
// FreeAsync on another stream of the device. Neither waits. Stream-ordered allocation inside a capture is refused.
func (cu *CUDA) MallocAsync(dt DataType, n int, s Stream) (Buffer, error) {
	if cu == nil {
		return Buffer{}, nilCUDA("MallocAsync")
	}
	const op = "cudaMallocAsync"
	size, err := bufferSize(op, dt, n)
	if err != nil {
		return Buffer{}, err
	}
	if !cu.has(capi.CuMallocAsync) || !cu.has(capi.CuFreeAsync) {
		return Buffer{}, cu.unsupported(capi.CuMallocAsync)
	}
	if s.cu == nil {
		return Buffer{}, argError(op, "the zero Stream (use CUDA.DefaultStream or NewStream)")
	}
	if !s.alive() {
		return Buffer{}, destroyedStream(op)
	}
	if err := cu.refuseStream(op, s.h, s.dev); err != nil {
		return Buffer{}, err
	}
	var p DevicePtr
	alloc := func() error { return cu.rt.MallocAsync((*uintptr)(&p), uintptr(size), s.h) }
	if s.h == 0 { // the legacy stream of s's device
		err = cu.OnDevice(s.dev, alloc)
	} else {
		err = alloc()
	}
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{ptr: p, n: n, dt: dt, mem: &allocation{n: n, cu: cu, dev: s.dev, base: p, size: size, kind: allocStream, stream: s.h}}, nil
}

// FreeAsync frees memory from MallocAsync in stream order on s, a stream of
// the buffer's device (cudaFreeAsync): the memory goes back to the pool once
// the work enqueued on s before it is done. It does not wait.
func (b Buffer) FreeAsync(s Stream) error {
	const op = "cudaFreeAsync"
	m := b.mem
	switch {
	case m == nil:
		return argError(op, zeroBuffer)
	case m.kind != allocStream:
		return argError(op, "memory not from MallocAsync (use Free)")
	case b.ptr != m.base:
		return argError(op, "a slice of an allocation (free the buffer MallocAsync returned)")
	case !s.alive():
		return destroyedStream(op)
	case s.cu == nil:
		return argError(op, "the zero Stream")
	case s.dev != m.dev:
		return argError(op, "buffer on device %d, stream on device %d", m.dev, s.dev)
	}
	if err := m.cu.refuseStream(op, s.h, s.dev); err != nil {
		return err
	}
	if !m.freed.CompareAndSwap(false, true) {
		return argError(op, "buffer at %#x already freed", uintptr(b.ptr))
	}
	var err error
	if s.h == 0 {
		err = m.cu.OnDevice(s.dev, func() error { return m.cu.rt.FreeAsync(uintptr(m.base), 0) })
	} else {
		err = m.cu.rt.FreeAsync(uintptr(m.base), s.h)
	}
	if err != nil {
		m.freed.Store(false) // not freed: it may be freed again (on a live stream)
	}
	return err
}
