package nccl

import (
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// CUDA is a loaded CUDA runtime (libcudart), found by the same search as NCCL.
// The runtime's current device belongs to the OS thread: methods that need one
// take the device and run pinned to a thread with it current (OnDevice).
type CUDA struct {
	LibraryFile
	fn [numCUDASymbols]uintptr
}

// Event is a cudaEvent_t.
type Event uintptr

// OpenCUDA loads the CUDA runtime alone. Of the options only WithCUDARuntime
// matters.
func OpenCUDA(opts ...Option) (*CUDA, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	file, err := search(cudartSpec, o.cudart, os.Getenv)
	if err != nil {
		return nil, err
	}
	cu := &CUDA{LibraryFile: file}
	if err := resolve(file.handle, file.Path, cudaSymbols[:], cu.fn[:], func(*symbol) bool { return true }); err != nil {
		return nil, err
	}
	return cu, nil
}

func (cu *CUDA) call(sym int, args ...uintptr) error {
	if r := abi.CudaError(int32(ccall.Call(cu.fn[sym], args...))); r != abi.CudaSuccess {
		return cu.failure(sym, r)
	}
	return nil
}

//go:uintptrescapes
func (cu *CUDA) callPtr(sym int, args ...uintptr) error {
	return cu.call(sym, args...)
}

func (cu *CUDA) failure(sym int, r abi.CudaError) error {
	// Clear the thread's last error, as cudaGetLastError would be expected to.
	ccall.Call(cu.fn[cuGetLastError])
	return &CUDAError{Op: cudaSymbols[sym].name, Code: r, Msg: cu.ErrorString(r)}
}

// ErrorName is cudaGetErrorName ("cudaErrorInvalidValue").
func (cu *CUDA) ErrorName(e abi.CudaError) string {
	return ccall.GoString(ccall.Call(cu.fn[cuGetErrorName], uintptr(e)))
}

// ErrorString is cudaGetErrorString ("invalid argument").
func (cu *CUDA) ErrorString(e abi.CudaError) string {
	return ccall.GoString(ccall.Call(cu.fn[cuGetErrorString], uintptr(e)))
}

// RuntimeVersion is cudaRuntimeGetVersion's code (12040 for 12.4).
func (cu *CUDA) RuntimeVersion() (int, error) {
	var v int32
	err := cu.callPtr(cuRuntimeGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// DriverVersion is cudaDriverGetVersion's code; 0 when no driver is installed.
func (cu *CUDA) DriverVersion() (int, error) {
	var v int32
	err := cu.callPtr(cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// DeviceCount is the number of visible devices. No GPU or no driver is an error
// matching ErrNoDevice.
func (cu *CUDA) DeviceCount() (int, error) {
	var n int32
	err := cu.callPtr(cuGetDeviceCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// OnDevice runs fn on a locked OS thread with dev current, then restores the
// thread's previous device.
func (cu *CUDA) OnDevice(dev int, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var prev int32
	if err := cu.callPtr(cuGetDevice, uintptr(unsafe.Pointer(&prev))); err != nil {
		return err
	}
	if int(prev) != dev {
		if err := cu.call(cuSetDevice, uintptr(dev)); err != nil {
			return err
		}
		defer cu.call(cuSetDevice, uintptr(prev))
	}
	return fn()
}

// SetDevice makes dev current on the calling OS thread. Only meaningful on a
// thread the caller has locked (runtime.LockOSThread); OnDevice is the safe form.
func (cu *CUDA) SetDevice(dev int) error { return cu.call(cuSetDevice, uintptr(dev)) }

// Device is the calling OS thread's current device (see SetDevice).
func (cu *CUDA) Device() (int, error) {
	var d int32
	err := cu.callPtr(cuGetDevice, uintptr(unsafe.Pointer(&d)))
	return int(d), err
}

// DeviceSynchronize waits for all work on device dev.
func (cu *CUDA) DeviceSynchronize(dev int) error {
	return cu.OnDevice(dev, func() error { return cu.call(cuDeviceSynchronize) })
}

// Malloc allocates size bytes on device dev.
func (cu *CUDA) Malloc(dev, size int) (DevicePtr, error) {
	if size < 0 {
		return 0, &CUDAError{Op: "cudaMalloc", Code: abi.CudaErrorInvalidValue, Msg: "negative size"}
	}
	var p uintptr
	err := cu.OnDevice(dev, func() error { return cu.callPtr(cuMalloc, uintptr(unsafe.Pointer(&p)), uintptr(size)) })
	return DevicePtr(p), err
}

// Free frees device memory from Malloc.
func (cu *CUDA) Free(p DevicePtr) error { return cu.call(cuFree, uintptr(p)) }

// MallocHost allocates size bytes of page-locked host memory, usable by
// asynchronous copies. Free it with FreeHost, never let Go forget it.
func (cu *CUDA) MallocHost(size int) ([]byte, error) {
	if size <= 0 {
		return nil, &CUDAError{Op: "cudaMallocHost", Code: abi.CudaErrorInvalidValue, Msg: "size must be positive"}
	}
	var p uintptr
	if err := cu.callPtr(cuMallocHost, uintptr(unsafe.Pointer(&p)), uintptr(size)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), size), nil
}

// FreeHost frees memory from MallocHost.
func (cu *CUDA) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return cu.call(cuFreeHost, uintptr(unsafe.Pointer(&b[0])))
}

// Memcpy copies n bytes between any two addresses the runtime understands
// (kind abi.MemcpyDefault lets it tell). Host addresses in Go memory must be kept
// alive by the caller; CopyToDevice and CopyFromDevice do that for slices.
// As cudaMemcpy, a copy from pageable host memory to the device may return
// before the bytes land, and work on a non-blocking stream is not ordered
// after it; CopyToDevice waits for them.
func (cu *CUDA) Memcpy(dst, src uintptr, n int, kind abi.MemcpyKind) error {
	if n < 0 {
		return &CUDAError{Op: "cudaMemcpy", Code: abi.CudaErrorInvalidValue, Msg: "negative size"}
	}
	return cu.call(cuMemcpy, dst, src, uintptr(n), uintptr(kind))
}

// MemcpyAsync enqueues a copy on s. Host memory must be page-locked (MallocHost)
// for the copy to be asynchronous, and must stay untouched until s reaches it.
func (cu *CUDA) MemcpyAsync(dst, src uintptr, n int, kind abi.MemcpyKind, s Stream) error {
	if n < 0 {
		return &CUDAError{Op: "cudaMemcpyAsync", Code: abi.CudaErrorInvalidValue, Msg: "negative size"}
	}
	return cu.call(cuMemcpyAsync, dst, src, uintptr(n), uintptr(kind), uintptr(s))
}

// CopyToDevice copies src to device memory at dst and returns once the bytes
// are there. cudaMemcpy alone returns from a pageable host-to-device copy once
// the data is staged, before its DMA lands, and work on a non-blocking stream
// is not ordered after it: CopyToDevice also waits for the legacy stream, which
// carries that DMA.
func (cu *CUDA) CopyToDevice(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := cu.callPtr(cuMemcpy, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), uintptr(abi.MemcpyHostToDevice)); err != nil {
		return err
	}
	return cu.call(cuStreamSynchronize, 0)
}

// CopyFromDevice copies device memory at src into dst, synchronously.
func (cu *CUDA) CopyFromDevice(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return cu.callPtr(cuMemcpy, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), uintptr(abi.MemcpyDeviceToHost))
}

// Memset sets n bytes at p to value.
func (cu *CUDA) Memset(p DevicePtr, value byte, n int) error {
	return cu.call(cuMemset, uintptr(p), uintptr(value), uintptr(n))
}

// MemsetAsync enqueues Memset on s.
func (cu *CUDA) MemsetAsync(p DevicePtr, value byte, n int, s Stream) error {
	return cu.call(cuMemsetAsync, uintptr(p), uintptr(value), uintptr(n), uintptr(s))
}

// StreamCreate creates a stream on device dev; flags abi.StreamNonBlocking keeps
// it from synchronising with the legacy default stream.
func (cu *CUDA) StreamCreate(dev int, flags uint32) (Stream, error) {
	var s uintptr
	err := cu.OnDevice(dev, func() error {
		return cu.callPtr(cuStreamCreateWithFlags, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	})
	return Stream(s), err
}

// StreamDestroy destroys a stream (its pending work still completes).
func (cu *CUDA) StreamDestroy(s Stream) error { return cu.call(cuStreamDestroy, uintptr(s)) }

// StreamSynchronize waits until all work on s is done.
func (cu *CUDA) StreamSynchronize(s Stream) error { return cu.call(cuStreamSynchronize, uintptr(s)) }

// StreamQuery reports whether all work on s is done, without waiting.
func (cu *CUDA) StreamQuery(s Stream) (bool, error) {
	return cu.ready(cuStreamQuery, uintptr(s))
}

func (cu *CUDA) ready(sym int, h uintptr) (bool, error) {
	r := abi.CudaError(int32(ccall.Call(cu.fn[sym], h)))
	switch r {
	case abi.CudaSuccess:
		return true, nil
	case abi.CudaErrorNotReady:
		return false, nil
	}
	return false, cu.failure(sym, r)
}

// StreamWaitEvent makes later work on s wait until e completes.
func (cu *CUDA) StreamWaitEvent(s Stream, e Event) error {
	return cu.call(cuStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// EventCreate creates an event on device dev with abi.Event* flags.
func (cu *CUDA) EventCreate(dev int, flags uint32) (Event, error) {
	var e uintptr
	err := cu.OnDevice(dev, func() error {
		return cu.callPtr(cuEventCreateWithFlags, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	})
	return Event(e), err
}

// EventRecord records e at the current end of s.
func (cu *CUDA) EventRecord(e Event, s Stream) error {
	return cu.call(cuEventRecord, uintptr(e), uintptr(s))
}

// EventSynchronize waits until e completes.
func (cu *CUDA) EventSynchronize(e Event) error { return cu.call(cuEventSynchronize, uintptr(e)) }

// EventQuery reports whether e has completed, without waiting.
func (cu *CUDA) EventQuery(e Event) (bool, error) { return cu.ready(cuEventQuery, uintptr(e)) }

// EventElapsed is the time between two completed events.
func (cu *CUDA) EventElapsed(start, end Event) (time.Duration, error) {
	var ms float32
	if err := cu.callPtr(cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// EventDestroy destroys an event.
func (cu *CUDA) EventDestroy(e Event) error { return cu.call(cuEventDestroy, uintptr(e)) }

// PointerAttributes says what memory p is: device (and which), host, or unknown.
func (cu *CUDA) PointerAttributes(p uintptr) (abi.PointerAttributes, error) {
	var a abi.PointerAttributes
	err := cu.callPtr(cuPointerGetAttributes, uintptr(unsafe.Pointer(&a)), p)
	return a, err
}
