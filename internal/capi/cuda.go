package capi

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// The CUDA runtime's C functions, one Go function each, with its prototype
// from cuda_runtime_api.h above it: every call gonccl makes into the runtime
// goes through one of these (nccl.go is the same for NCCL). The row of each
// in CUDASymbols says whether it is optional.
//
// A handle (cudaStream_t, cudaEvent_t, cudaGraph_t, cudaGraphExec_t), a device
// address or memory outside Go's heap is a uintptr; a pointer into Go memory
// is an unsafe.Pointer or a typed pointer, kept alive for the call (callPtr).

// CUDA is a loaded CUDA runtime's function table and its thread-device guard.
type CUDA struct {
	Fn  [NumCUDA]uintptr
	TD  ThreadDevice
	Err Failures
}

// call runs function sym on a thread with a device (see ThreadDevice) and
// turns its cudaError_t into an error. It allocates nothing on success.
func (t *CUDA) call(sym int, args ...uintptr) error {
	return call(&t.TD, t.Err, sym, t.Fn[sym], args...)
}

// callPtr is call for arguments converted from Go pointers in the argument
// list (see ccall.CallPtr).
//
//go:uintptrescapes
func (t *CUDA) callPtr(sym int, args ...uintptr) error {
	return t.call(sym, args...)
}

// ready is a query (cudaStreamQuery, cudaEventQuery): cudaErrorNotReady is
// false, not an error.
func (t *CUDA) ready(sym int, h uintptr) (bool, error) {
	fn := t.Fn[sym]
	if fn == 0 {
		return false, t.Err.Missing(sym)
	}
	r, g := t.TD.Call(-1, fn, h)
	if g != 0 {
		return false, t.Err.Guard(g)
	}
	switch abi.CudaError(int32(r)) {
	case abi.CudaSuccess:
		return true, nil
	case abi.CudaErrorNotReady:
		return false, nil
	}
	return false, t.Err.Result(sym, int32(r))
}

// cudaError_t cudaRuntimeGetVersion(int* runtimeVersion);
func (t *CUDA) RuntimeGetVersion(v *int32) error {
	return t.callPtr(CuRuntimeGetVersion, uintptr(unsafe.Pointer(v)))
}

// cudaError_t cudaDriverGetVersion(int* driverVersion);
func (t *CUDA) DriverGetVersion(v *int32) error {
	return t.callPtr(CuDriverGetVersion, uintptr(unsafe.Pointer(v)))
}

// cudaError_t cudaGetDeviceCount(int* count);
func (t *CUDA) GetDeviceCount(n *int32) error {
	return t.callPtr(CuGetDeviceCount, uintptr(unsafe.Pointer(n)))
}

// cudaError_t cudaSetDevice(int device);
func (t *CUDA) SetDevice(dev int) error {
	return t.call(CuSetDevice, uintptr(int32(dev)))
}

// cudaError_t cudaGetDevice(int* device);
func (t *CUDA) GetDevice(dev *int32) error {
	return t.callPtr(CuGetDevice, uintptr(unsafe.Pointer(dev)))
}

// cudaError_t cudaDeviceSynchronize(void);
func (t *CUDA) DeviceSynchronize() error {
	return t.call(CuDeviceSynchronize)
}

// cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
func (t *CUDA) DeviceGetAttribute(value *int32, attr int32, dev int) error {
	return t.callPtr(CuDeviceGetAttribute, uintptr(unsafe.Pointer(value)), uintptr(attr), uintptr(int32(dev)))
}

// cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice);
func (t *CUDA) DeviceCanAccessPeer(can *int32, dev, peer int) error {
	return t.callPtr(CuDeviceCanAccessPeer, uintptr(unsafe.Pointer(can)), uintptr(int32(dev)), uintptr(int32(peer)))
}

// cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
func (t *CUDA) DeviceEnablePeerAccess(peer int) error {
	return t.call(CuDeviceEnablePeerAccess, uintptr(int32(peer)), 0)
}

// cudaError_t cudaDeviceDisablePeerAccess(int peerDevice);
func (t *CUDA) DeviceDisablePeerAccess(peer int) error {
	return t.call(CuDeviceDisablePeerAccess, uintptr(int32(peer)))
}

// cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority);
func (t *CUDA) DeviceGetStreamPriorityRange(least, greatest *int32) error {
	return t.callPtr(CuDeviceGetStreamPriorityRange, uintptr(unsafe.Pointer(least)), uintptr(unsafe.Pointer(greatest)))
}

// cudaError_t cudaMalloc(void** devPtr, size_t size);
func (t *CUDA) Malloc(p *uintptr, size uintptr) error {
	return t.callPtr(CuMalloc, uintptr(unsafe.Pointer(p)), size)
}

// cudaError_t cudaFree(void* devPtr);
func (t *CUDA) Free(p uintptr) error {
	return t.call(CuFree, uintptr(p))
}

// cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream);
func (t *CUDA) MallocAsync(p *uintptr, size, stream uintptr) error {
	return t.callPtr(CuMallocAsync, uintptr(unsafe.Pointer(p)), size, stream)
}

// cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream);
func (t *CUDA) FreeAsync(p uintptr, stream uintptr) error {
	return t.call(CuFreeAsync, uintptr(p), stream)
}

// cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
func (t *CUDA) MemGetInfo(free, total *uintptr) error {
	return t.callPtr(CuMemGetInfo, uintptr(unsafe.Pointer(free)), uintptr(unsafe.Pointer(total)))
}

// cudaError_t cudaMallocHost(void** ptr, size_t size);
func (t *CUDA) MallocHost(p *uintptr, size uintptr) error {
	return t.callPtr(CuMallocHost, uintptr(unsafe.Pointer(p)), size)
}

// cudaError_t cudaFreeHost(void* ptr); ptr is page-locked memory cudaMallocHost made.
func (t *CUDA) FreeHost(p unsafe.Pointer) error {
	return t.call(CuFreeHost, uintptr(p))
}

// cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags);
// ptr: memory the caller keeps in place until cudaHostUnregister.
func (t *CUDA) HostRegister(p unsafe.Pointer, size uintptr, flags uint32) error {
	return t.call(CuHostRegister, uintptr(p), size, uintptr(flags))
}

// cudaError_t cudaHostUnregister(void* ptr);
func (t *CUDA) HostUnregister(p unsafe.Pointer) error {
	return t.call(CuHostUnregister, uintptr(p))
}

// cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
// dst and src: device addresses or Go memory, kept alive for the call.
//
//go:uintptrescapes
func (t *CUDA) Memcpy(dst, src, count uintptr, kind abi.MemcpyKind) error {
	return t.call(CuMemcpy, dst, src, count, uintptr(kind))
}

// cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
// cudaMemcpyKind kind, cudaStream_t stream); dst and src outside Go's heap
// (the copy runs after the call returns).
func (t *CUDA) MemcpyAsync(dst, src, count uintptr, kind abi.MemcpyKind, stream uintptr) error {
	return t.call(CuMemcpyAsync, dst, src, count, uintptr(kind), stream)
}

// cudaError_t cudaMemset(void* devPtr, int value, size_t count);
func (t *CUDA) Memset(p uintptr, value int32, count uintptr) error {
	return t.call(CuMemset, uintptr(p), uintptr(value), count)
}

// cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream);
func (t *CUDA) MemsetAsync(p uintptr, value int32, count, stream uintptr) error {
	return t.call(CuMemsetAsync, uintptr(p), uintptr(value), count, stream)
}

// cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
func (t *CUDA) PointerGetAttributes(attr unsafe.Pointer, p uintptr) error {
	return t.callPtr(CuPointerGetAttributes, uintptr(attr), p)
}

// cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags);
func (t *CUDA) StreamCreateWithFlags(s *uintptr, flags uint32) error {
	return t.callPtr(CuStreamCreateWithFlags, uintptr(unsafe.Pointer(s)), uintptr(flags))
}

// cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority);
func (t *CUDA) StreamCreateWithPriority(s *uintptr, flags uint32, priority int) error {
	return t.callPtr(CuStreamCreateWithPriority, uintptr(unsafe.Pointer(s)), uintptr(flags), uintptr(int32(priority)))
}

// cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority);
func (t *CUDA) StreamGetPriority(stream uintptr, priority *int32) error {
	return t.callPtr(CuStreamGetPriority, stream, uintptr(unsafe.Pointer(priority)))
}

// cudaError_t cudaStreamDestroy(cudaStream_t stream);
func (t *CUDA) StreamDestroy(stream uintptr) error {
	return t.call(CuStreamDestroy, stream)
}

// cudaError_t cudaStreamSynchronize(cudaStream_t stream);
func (t *CUDA) StreamSynchronize(stream uintptr) error {
	return t.call(CuStreamSynchronize, stream)
}

// cudaError_t cudaStreamQuery(cudaStream_t stream); cudaErrorNotReady is
// false, not an error.
func (t *CUDA) StreamQuery(stream uintptr) (bool, error) {
	return t.ready(CuStreamQuery, stream)
}

// cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
func (t *CUDA) StreamWaitEvent(stream, event uintptr) error {
	return t.call(CuStreamWaitEvent, stream, event, 0)
}

// cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
func (t *CUDA) EventCreateWithFlags(e *uintptr, flags uint32) error {
	return t.callPtr(CuEventCreateWithFlags, uintptr(unsafe.Pointer(e)), uintptr(flags))
}

// cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
func (t *CUDA) EventRecord(event, stream uintptr) error {
	return t.call(CuEventRecord, event, stream)
}

// cudaError_t cudaEventSynchronize(cudaEvent_t event);
func (t *CUDA) EventSynchronize(event uintptr) error {
	return t.call(CuEventSynchronize, event)
}

// cudaError_t cudaEventQuery(cudaEvent_t event); cudaErrorNotReady is false,
// not an error.
func (t *CUDA) EventQuery(event uintptr) (bool, error) {
	return t.ready(CuEventQuery, event)
}

// cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
// (or cudaEventElapsedTime_v2, CUDA 12.8, the same arguments)
func (t *CUDA) EventElapsedTime(ms *float32, start, end uintptr) error {
	return t.callPtr(CuEventElapsedTime, uintptr(unsafe.Pointer(ms)), start, end)
}

// cudaError_t cudaEventDestroy(cudaEvent_t event);
func (t *CUDA) EventDestroy(event uintptr) error {
	return t.call(CuEventDestroy, event)
}

// cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
func (t *CUDA) StreamBeginCapture(stream uintptr, mode int32) error {
	return t.call(CuStreamBeginCapture, stream, uintptr(mode))
}

// cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
func (t *CUDA) ThreadExchangeStreamCaptureMode(mode *int32) error {
	return t.callPtr(CuThreadExchangeStreamCaptureMode, uintptr(unsafe.Pointer(mode)))
}

// cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph);
func (t *CUDA) StreamEndCapture(stream uintptr, graph *uintptr) error {
	return t.callPtr(CuStreamEndCapture, stream, uintptr(unsafe.Pointer(graph)))
}

// cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus);
func (t *CUDA) StreamIsCapturing(stream uintptr, status *int32) error {
	return t.callPtr(CuStreamIsCapturing, stream, uintptr(unsafe.Pointer(status)))
}

// cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec,
// cudaGraph_t graph, unsigned long long flags);
func (t *CUDA) GraphInstantiateWithFlags(exec *uintptr, graph uintptr) error {
	return t.callPtr(CuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(exec)), graph, 0)
}

// cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
func (t *CUDA) GraphLaunch(exec, stream uintptr) error {
	return t.call(CuGraphLaunch, exec, stream)
}

// cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream);
func (t *CUDA) GraphUpload(exec, stream uintptr) error {
	return t.call(CuGraphUpload, exec, stream)
}

// cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
func (t *CUDA) GraphExecDestroy(exec uintptr) error {
	return t.call(CuGraphExecDestroy, exec)
}

// cudaError_t cudaGraphDestroy(cudaGraph_t graph);
func (t *CUDA) GraphDestroy(graph uintptr) error {
	return t.call(CuGraphDestroy, graph)
}

// cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path,
// unsigned int flags); path NUL-terminated.
func (t *CUDA) GraphDebugDotPrint(graph uintptr, path *byte, flags uint32) error {
	return t.callPtr(CuGraphDebugDotPrint, graph, uintptr(unsafe.Pointer(path)), uintptr(flags))
}

// const char* cudaGetErrorName(cudaError_t error);
func (t *CUDA) GetErrorName(e abi.CudaError) uintptr {
	return ccall.Call(t.Fn[CuGetErrorName], uintptr(e))
}

// const char* cudaGetErrorString(cudaError_t error);
func (t *CUDA) GetErrorString(e abi.CudaError) uintptr {
	return ccall.Call(t.Fn[CuGetErrorString], uintptr(e))
}

// cudaError_t cudaGetLastError(void); clears the thread's last error.
func (t *CUDA) GetLastError() abi.CudaError {
	return abi.CudaError(int32(ccall.Call(t.Fn[CuGetLastError])))
}
