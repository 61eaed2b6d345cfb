package nccl

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
)

// Stream-ordered copies between typed host slices and buffers (and between raw
// addresses), and page-locked host memory.

// CopyInAsync enqueues on s a copy of host into the start of b, whose type must
// be T's. From ordinary Go memory CUDA stages the bytes before it returns, so
// host may change at once; from page-locked memory (MallocHostOf, HostRegister)
// the copy happens later, in stream order: leave host unchanged until s has
// passed it. s must be on b's device. It allocates nothing.
//
// On a stream that captures a graph (CUDA.Capture), host must be page-locked
// memory that outlives the graph: the graph copies from host's address at
// every launch, and ordinary Go memory may be freed or reused by then, so it
// is refused with an error matching ErrCapturing.
func CopyInAsync[T Element](b Buffer, host []T, s Stream) error {
	const op = "cudaMemcpyAsync"
	if err := checkAsyncCopy(op, b, TypeOf[T](), len(host), s); err != nil {
		return err
	}
	if len(host) == 0 {
		return nil
	}
	p := unsafe.Pointer(&host[0])
	if err := b.mem.cu.refuseGoMemoryInCapture(op, uintptr(p), s); err != nil {
		return err
	}
	return b.mem.cu.memcpyAsync(uintptr(b.ptr), uintptr(p), uintptr(len(host)*b.dt.Size()), s)
}

// CopyOutAsync enqueues on s a copy of the start of b, whose type must be T's,
// into host. Into ordinary Go memory CUDA returns once the copy is done; into
// page-locked memory it returns at once and host holds the elements once s has
// passed the copy (Stream.Synchronize, or an Event recorded after it). On a
// capturing stream host must be page-locked, as for CopyInAsync.
func CopyOutAsync[T Element](host []T, b Buffer, s Stream) error {
	const op = "cudaMemcpyAsync"
	if err := checkAsyncCopy(op, b, TypeOf[T](), len(host), s); err != nil {
		return err
	}
	if len(host) == 0 {
		return nil
	}
	p := unsafe.Pointer(&host[0])
	if err := b.mem.cu.refuseGoMemoryInCapture(op, uintptr(p), s); err != nil {
		return err
	}
	return b.mem.cu.memcpyAsync(uintptr(p), uintptr(b.ptr), uintptr(len(host)*b.dt.Size()), s)
}

// refuseGoMemoryInCapture refuses a copy between host memory that is not
// page-locked and a stream whose capture gonccl began: the graph would keep
// the address of Go memory. One atomic load when no capture is open.
func (cu *CUDA) refuseGoMemoryInCapture(op string, host uintptr, s Stream) error {
	if cu.capt.n.Load() == 0 || s.h == 0 {
		return nil
	}
	cu.capt.mu.Lock()
	var c *capture
	for _, o := range cu.capt.open {
		if o.stream == s.h {
			c = o
		}
	}
	cu.capt.mu.Unlock()
	if c == nil {
		return nil
	}
	if a, err := cu.PointerAttributes(host); err == nil && a.Type != MemoryUnregistered {
		return nil
	}
	return c.refuse(op, "a graph would copy from (to) this Go memory at every launch, after Go may have freed or reused it: "+
		"use page-locked memory (MallocHostOf, HostRegister) that outlives the graph")
}

// CopyAsync enqueues on s a copy of src into the start of dst: the same
// element type, dst at least as long. Buffers on different devices are copied
// directly where peer access is on, else through the host, as CUDA does.
func CopyAsync(dst, src Buffer, s Stream) error {
	const op = "cudaMemcpyAsync"
	if err := checkAsyncCopy(op, dst, src.dt, src.n, s); err != nil {
		return err
	}
	if _, err := src.cuda(op); err != nil {
		return err
	}
	if src.n == 0 {
		return nil
	}
	return dst.mem.cu.memcpyAsync(uintptr(dst.ptr), uintptr(src.ptr), uintptr(src.Size()), s)
}

// MemcpyAsync enqueues a copy of n bytes from src to dst on s; both are device
// or page-locked host addresses (the runtime tells which, by unified addressing).
func (cu *CUDA) MemcpyAsync(dst, src uintptr, n int, s Stream) error {
	if cu == nil {
		return nilCUDA("MemcpyAsync")
	}
	if n < 0 {
		return argError("cudaMemcpyAsync", "negative size %d", n)
	}
	if !s.alive() {
		return destroyedStream("cudaMemcpyAsync")
	}
	return cu.rt.MemcpyAsync(dst, src, uintptr(n), abi.MemcpyDefault, s.h)
}

// memcpyAsync enqueues a copy of n bytes on s: on the legacy stream of s's
// device when s is one (not the calling thread's current device's). A host
// address converted from a Go pointer in the call's arguments keeps its
// memory in place and alive for the call (uintptrescapes: what the caller's
// pointer points to lives on the heap, which does not move).
//
//go:uintptrescapes
func (cu *CUDA) memcpyAsync(dst, src, n uintptr, s Stream) error {
	if s.h == 0 {
		return cu.OnDevice(s.dev, func() error { return cu.rt.MemcpyAsync(dst, src, n, abi.MemcpyDefault, 0) })
	}
	return cu.rt.MemcpyAsync(dst, src, n, abi.MemcpyDefault, s.h)
}

func checkAsyncCopy(op string, b Buffer, dt DataType, n int, s Stream) error {
	if _, err := b.cuda(op); err != nil {
		return err
	}
	if dt != b.dt {
		return argError(op, "%v elements and a buffer of %v", dt, b.dt)
	}
	if n > b.n {
		return argError(op, "%d elements and a buffer of %d", n, b.n)
	}
	if s.cu == nil {
		return argError(op, "the zero Stream (make one with CUDA.NewStream, or use CUDA.DefaultStream)")
	}
	if !s.alive() {
		return destroyedStream(op)
	}
	if s.dev != b.mem.dev {
		return argError(op, "stream on device %d, buffer on device %d", s.dev, b.mem.dev)
	}
	return nil
}

// MallocHost allocates size bytes of page-locked host memory, usable by
// asynchronous copies. Free it with FreeHost; Go does not.
func (cu *CUDA) MallocHost(size int) ([]byte, error) {
	if cu == nil {
		return nil, nilCUDA("MallocHost")
	}
	if size <= 0 {
		return nil, argError("cudaMallocHost", "size %d: must be positive", size)
	}
	if err := cu.refuseHere("cudaMallocHost"); err != nil {
		return nil, err
	}
	var p uintptr
	if err := cu.rt.MallocHost(&p, uintptr(size)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), size), nil
}

// FreeHost frees memory from MallocHost.
func (cu *CUDA) FreeHost(b []byte) error {
	if cu == nil {
		return nilCUDA("FreeHost")
	}
	if len(b) == 0 {
		return nil
	}
	if err := cu.refuseHere("cudaFreeHost"); err != nil {
		return err
	}
	return cu.rt.FreeHost(unsafe.Pointer(&b[0]))
}

// MallocHostOf allocates page-locked host memory for n elements of T
// (cudaMallocHost): the source or destination of truly asynchronous copies.
// Free it with FreeHostOf.
func MallocHostOf[T Element](cu *CUDA, n int) ([]T, error) {
	var z T
	if cu == nil {
		return nil, nilCUDA("MallocHostOf")
	}
	size, err := bufferSize("cudaMallocHost", TypeOf[T](), n)
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, argError("cudaMallocHost", "%d elements: must be positive", n)
	}
	b, err := cu.MallocHost(size)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), size/int(unsafe.Sizeof(z))), nil
}

// FreeHostOf frees memory from MallocHostOf: pass the slice it returned (a
// sub-slice starting elsewhere is refused by CUDA; an empty one frees nothing).
func FreeHostOf[T Element](cu *CUDA, p []T) error {
	if cu == nil {
		return nilCUDA("FreeHostOf")
	}
	if cap(p) == 0 {
		return nil
	}
	p = p[:cap(p)] // a slice shortened to [:0] still names the allocation
	return cu.FreeHost(asBytes(p))
}
