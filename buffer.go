package nccl

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gonccl/nccl/abi"
)

// DevicePtr is an address in device memory (or any address NCCL accepts as a
// buffer: registered host memory, managed memory).
type DevicePtr uintptr

// Buffer is Len elements of one DataType at an address on one CUDA device:
// what every operation takes, as nccl4py's buffer specs. It is a small value,
// copied freely; Slice views part of it. Make one with CUDA.Alloc, CUDA.MallocAsync,
// Comm.AllocSymmetric, Library.MemAlloc, or CUDA.Wrap for memory another
// library allocated (a PyTorch tensor's data_ptr, say).
//
// Copies, memsets and Free run on the buffer's device whatever device the
// calling thread has current.
type Buffer struct {
	ptr DevicePtr
	n   int
	dt  DataType
	mem *allocation // nil only for the zero Buffer
}

// allocation is what a Buffer and its slices share.
type allocation struct {
	cu    *CUDA
	lib   *Library // for ncclMemFree
	comm  *Comm    // the communicator of a symmetric window
	dev   int
	base  DevicePtr
	size  int // bytes allocated (ncclMemAlloc rounds up)
	n     int // elements of the Buffer made with it: Free takes that Buffer only
	kind  allocKind
	win   uintptr
	freed atomic.Bool

	stream uintptr // allocStream: the stream it was allocated on, where Free frees it
}

type allocKind int8

const (
	allocCUDA      allocKind = iota // cudaMalloc
	allocNCCL                       // ncclMemAlloc
	allocSymmetric                  // ncclMemAlloc and a symmetric window
	allocForeign                    // CUDA.Wrap: not gonccl's to free
	allocStream                     // cudaMallocAsync: freed in stream order (cuda_memory.go)
)

// Ptr is the device address of element 0.
func (b Buffer) Ptr() DevicePtr { return b.ptr }

// Len is the number of elements.
func (b Buffer) Len() int { return b.n }

// Type is the element type.
func (b Buffer) Type() DataType { return b.dt }

// Size is the size in bytes.
func (b Buffer) Size() int { return b.n * b.dt.Size() }

// Device is the CUDA device the memory lives on; -1 for the zero Buffer.
func (b Buffer) Device() int {
	if b.mem == nil {
		return -1
	}
	return b.mem.dev
}

// Window is the symmetric window the buffer lies in, or 0.
func (b Buffer) Window() uintptr {
	if b.mem == nil {
		return 0
	}
	return b.mem.win
}

// Slice is elements [from, to) of b. It panics on bad bounds, as a Go slice does.
func (b Buffer) Slice(from, to int) Buffer {
	if from < 0 || to < from || to > b.n {
		panic(fmt.Sprintf("nccl: slice [%d:%d] of a buffer of %d", from, to, b.n))
	}
	return Buffer{ptr: b.ptr + DevicePtr(from*b.dt.Size()), n: to - from, dt: b.dt, mem: b.mem}
}

// Alloc allocates n elements of dt on device dev with cudaMalloc. Free it with
// Buffer.Free.
func (cu *CUDA) Alloc(dev int, dt DataType, n int) (Buffer, error) {
	const op = "cudaMalloc"
	if cu == nil {
		return Buffer{}, nilCUDA("Alloc")
	}
	size, err := bufferSize(op, dt, n)
	if err != nil {
		return Buffer{}, err
	}
	if err := checkDevice(op, dev); err != nil {
		return Buffer{}, err
	}
	var p DevicePtr
	err = cu.OnDevice(dev, func() error {
		if err := cu.refuseHere(op); err != nil { // CUDA forbids cudaMalloc on a capturing thread
			return err
		}
		return cu.rt.Malloc((*uintptr)(&p), uintptr(size))
	})
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{ptr: p, n: n, dt: dt, mem: &allocation{n: n, cu: cu, dev: dev, base: p, size: size, kind: allocCUDA}}, nil
}

// Wrap describes memory allocated elsewhere: n elements of dt at ptr on device
// dev. gonccl does not free it (Free refuses). On a nil *CUDA (a library
// opened WithoutCUDARuntime) it still describes it, for NCCL's operations;
// copies to and from such a buffer are refused, there being no runtime.
func (cu *CUDA) Wrap(dev int, ptr DevicePtr, dt DataType, n int) (Buffer, error) {
	const op = "Wrap"
	size, err := bufferSize(op, dt, n)
	if err != nil {
		return Buffer{}, err
	}
	if err := checkDevice(op, dev); err != nil {
		return Buffer{}, err
	}
	if ptr == 0 && n > 0 {
		return Buffer{}, argError(op, "NULL pointer for %d elements", n)
	}
	if uint64(ptr)+uint64(size) < uint64(ptr) {
		return Buffer{}, argError(op, "%d bytes at %#x wrap around the address space", size, ptr)
	}
	return Buffer{ptr: ptr, n: n, dt: dt, mem: &allocation{n: n, cu: cu, dev: dev, base: ptr, size: size, kind: allocForeign}}, nil
}

func bufferSize(op string, dt DataType, n int) (int, error) {
	if !dt.Valid() {
		return 0, argError(op, "unknown data type %v", dt)
	}
	return byteSize(op, n, dt.Size())
}

// zeroBuffer is how errors name the zero Buffer.
const zeroBuffer = "the zero Buffer (not allocated: make one with CUDA.Alloc, CUDA.MallocAsync, Library.MemAlloc or CUDA.Wrap)"

func (b Buffer) cuda(op string) (*CUDA, error) {
	if b.mem == nil {
		return nil, argError(op, zeroBuffer)
	}
	if b.mem.cu == nil {
		return nil, argError(op, "buffer has no CUDA runtime (its library was opened WithoutCUDARuntime, or it was wrapped by a nil *CUDA)")
	}
	if b.mem.freed.Load() {
		return nil, argError(op, "buffer at %#x was freed", uintptr(b.ptr))
	}
	return b.mem.cu, nil
}

// WriteBytes copies p into the start of b and returns once the bytes are on the
// device (see CUDA's note on pageable copies in CopyIn).
func (b Buffer) WriteBytes(p []byte) error {
	const op = "cudaMemcpy"
	cu, err := b.cuda(op)
	if err != nil {
		return err
	}
	if len(p) > b.Size() {
		return argError(op, "%d bytes into a buffer of %d", len(p), b.Size())
	}
	if len(p) == 0 {
		return nil
	}
	if err := cu.refuseDevice(op, b.mem.dev); err != nil {
		return err
	}
	return cu.OnDevice(b.mem.dev, func() error { return cu.copyToDevice(b.ptr, p) })
}

// ReadBytes copies the start of b into p, synchronously.
func (b Buffer) ReadBytes(p []byte) error {
	const op = "cudaMemcpy"
	cu, err := b.cuda(op)
	if err != nil {
		return err
	}
	if len(p) > b.Size() {
		return argError(op, "%d bytes out of a buffer of %d", len(p), b.Size())
	}
	if len(p) == 0 {
		return nil
	}
	if err := cu.refuseDevice(op, b.mem.dev); err != nil {
		return err
	}
	return cu.OnDevice(b.mem.dev, func() error { return cu.copyFromDevice(p, b.ptr) })
}

// copyToDevice copies src to dst and waits for the bytes to land: a pageable
// cudaMemcpy returns once the data is staged, before its DMA lands, and work on
// a non-blocking stream is not ordered after it, so this also waits for the
// legacy stream of the current device, which carries that DMA. The caller has
// made the destination's device current.
func (cu *CUDA) copyToDevice(dst DevicePtr, src []byte) error {
	if err := cu.rt.Memcpy(uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), abi.MemcpyHostToDevice); err != nil {
		return err
	}
	return cu.rt.StreamSynchronize(0)
}

// copyFromDevice copies device memory at src into dst, synchronously, on the
// current device.
func (cu *CUDA) copyFromDevice(dst []byte, src DevicePtr) error {
	return cu.rt.Memcpy(uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), abi.MemcpyDeviceToHost)
}

// Memset sets every byte of b to v, synchronously.
func (b Buffer) Memset(v byte) error {
	const op = "cudaMemset"
	cu, err := b.cuda(op)
	if err != nil {
		return err
	}
	if err := cu.refuseDevice(op, b.mem.dev); err != nil {
		return err
	}
	return cu.OnDevice(b.mem.dev, func() error {
		if err := cu.rt.Memset(uintptr(b.ptr), int32(v), uintptr(b.Size())); err != nil {
			return err
		}
		return cu.rt.StreamSynchronize(0)
	})
}

// MemsetAsync enqueues setting every byte of b to v on s.
func (b Buffer) MemsetAsync(v byte, s Stream) error {
	const op = "cudaMemsetAsync"
	cu, err := b.cuda(op)
	if err != nil {
		return err
	}
	if !s.alive() {
		return destroyedStream(op)
	}
	if s.h == 0 && s.cu != nil { // the legacy stream of s's device, not the thread's current one
		return cu.OnDevice(s.dev, func() error { return cu.rt.MemsetAsync(uintptr(b.ptr), int32(v), uintptr(b.Size()), 0) })
	}
	return cu.rt.MemsetAsync(uintptr(b.ptr), int32(v), uintptr(b.Size()), s.h)
}

// CopyIn copies host into the start of b, whose type must be T's, and returns
// once the elements are on the device. A pageable cudaMemcpy returns before its
// DMA lands and work on a non-blocking stream is not ordered after it, so
// CopyIn also waits for the device's legacy stream, which carries that DMA.
func CopyIn[T Element](b Buffer, host []T) error {
	if b.mem == nil { // before the type check: the zero Buffer's type means nothing
		return argError("CopyIn", zeroBuffer)
	}
	if t := TypeOf[T](); t != b.dt {
		return argError("CopyIn", "%v elements into a buffer of %v", t, b.dt)
	}
	return b.WriteBytes(asBytes(host))
}

// CopyOut copies the start of b, whose type must be T's, into host, synchronously.
// It reads b as it is at the call: it does not wait for work on non-blocking
// streams (those of NewStream with StreamNonBlocking, and NCCL's operations on
// them). After an operation, Comm.Wait or Stream.Synchronize first, or CopyOut
// returns what b held before.
func CopyOut[T Element](host []T, b Buffer) error {
	if b.mem == nil { // before the type check: the zero Buffer's type means nothing
		return argError("CopyOut", zeroBuffer)
	}
	if t := TypeOf[T](); t != b.dt {
		return argError("CopyOut", "%v elements out of a buffer of %v", t, b.dt)
	}
	return b.ReadBytes(asBytes(host))
}

func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}
