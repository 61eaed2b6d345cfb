package nccl

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// The CUDA runtime's C functions, one Go function each, with its prototype
// from cuda_runtime_api.h above it: every call gonccl makes into the runtime
// goes through one of these (cnccl.go is the same for NCCL). The row of each
// in symbols.go says whether it is optional.
//
// A handle (cudaStream_t, cudaEvent_t, cudaGraph_t, cudaGraphExec_t), a device
// address or memory outside Go's heap is a uintptr; a pointer into Go memory
// is an unsafe.Pointer or a typed pointer, kept alive for the call (callPtr).

// cudaError_t cudaRuntimeGetVersion(int* runtimeVersion);
func (cu *CUDA) cudaRuntimeGetVersion(v *int32) error {
	return cu.callPtr(cuRuntimeGetVersion, uintptr(unsafe.Pointer(v)))
}

// cudaError_t cudaDriverGetVersion(int* driverVersion);
func (cu *CUDA) cudaDriverGetVersion(v *int32) error {
	return cu.callPtr(cuDriverGetVersion, uintptr(unsafe.Pointer(v)))
}

// cudaError_t cudaGetDeviceCount(int* count);
func (cu *CUDA) cudaGetDeviceCount(n *int32) error {
	return cu.callPtr(cuGetDeviceCount, uintptr(unsafe.Pointer(n)))
}

// cudaError_t cudaSetDevice(int device);
func (cu *CUDA) cudaSetDevice(dev int) error {
	return cu.call(cuSetDevice, uintptr(int32(dev)))
}

// cudaError_t cudaGetDevice(int* device);
func (cu *CUDA) cudaGetDevice(dev *int32) error {
	return cu.callPtr(cuGetDevice, uintptr(unsafe.Pointer(dev)))
}

// cudaError_t cudaDeviceSynchronize(void);
func (cu *CUDA) cudaDeviceSynchronize() error {
	return cu.call(cuDeviceSynchronize)
}

// cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
func (cu *CUDA) cudaDeviceGetAttribute(value *int32, attr DeviceAttr, dev int) error {
	return cu.callPtr(cuDeviceGetAttribute, uintptr(unsafe.Pointer(value)), uintptr(attr), uintptr(int32(dev)))
}

// cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice);
func (cu *CUDA) cudaDeviceCanAccessPeer(can *int32, dev, peer int) error {
	return cu.callPtr(cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(can)), uintptr(int32(dev)), uintptr(int32(peer)))
}

// cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
func (cu *CUDA) cudaDeviceEnablePeerAccess(peer int) error {
	return cu.call(cuDeviceEnablePeerAccess, uintptr(int32(peer)), 0)
}

// cudaError_t cudaDeviceDisablePeerAccess(int peerDevice);
func (cu *CUDA) cudaDeviceDisablePeerAccess(peer int) error {
	return cu.call(cuDeviceDisablePeerAccess, uintptr(int32(peer)))
}

// cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority);
func (cu *CUDA) cudaDeviceGetStreamPriorityRange(least, greatest *int32) error {
	return cu.callPtr(cuDeviceGetStreamPriorityRange, uintptr(unsafe.Pointer(least)), uintptr(unsafe.Pointer(greatest)))
}

// cudaError_t cudaMalloc(void** devPtr, size_t size);
func (cu *CUDA) cudaMalloc(p *DevicePtr, size uintptr) error {
	return cu.callPtr(cuMalloc, uintptr(unsafe.Pointer(p)), size)
}

// cudaError_t cudaFree(void* devPtr);
func (cu *CUDA) cudaFree(p DevicePtr) error {
	return cu.call(cuFree, uintptr(p))
}

// cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream);
func (cu *CUDA) cudaMallocAsync(p *DevicePtr, size, stream uintptr) error {
	return cu.callPtr(cuMallocAsync, uintptr(unsafe.Pointer(p)), size, stream)
}

// cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream);
func (cu *CUDA) cudaFreeAsync(p DevicePtr, stream uintptr) error {
	return cu.call(cuFreeAsync, uintptr(p), stream)
}

// cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
func (cu *CUDA) cudaMemGetInfo(free, total *uintptr) error {
	return cu.callPtr(cuMemGetInfo, uintptr(unsafe.Pointer(free)), uintptr(unsafe.Pointer(total)))
}

// cudaError_t cudaMallocHost(void** ptr, size_t size);
func (cu *CUDA) cudaMallocHost(p *uintptr, size uintptr) error {
	return cu.callPtr(cuMallocHost, uintptr(unsafe.Pointer(p)), size)
}

// cudaError_t cudaFreeHost(void* ptr); ptr is page-locked memory cudaMallocHost made.
func (cu *CUDA) cudaFreeHost(p unsafe.Pointer) error {
	return cu.call(cuFreeHost, uintptr(p))
}

// cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags);
// ptr: memory the caller keeps in place until cudaHostUnregister.
func (cu *CUDA) cudaHostRegister(p unsafe.Pointer, size uintptr, flags HostRegisterFlags) error {
	return cu.call(cuHostRegister, uintptr(p), size, uintptr(flags))
}

// cudaError_t cudaHostUnregister(void* ptr);
func (cu *CUDA) cudaHostUnregister(p unsafe.Pointer) error {
	return cu.call(cuHostUnregister, uintptr(p))
}

// cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
// dst and src: device addresses or Go memory, kept alive for the call.
//
//go:uintptrescapes
func (cu *CUDA) cudaMemcpy(dst, src, count uintptr, kind abi.MemcpyKind) error {
	return cu.call(cuMemcpy, dst, src, count, uintptr(kind))
}

// cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
// cudaMemcpyKind kind, cudaStream_t stream); dst and src outside Go's heap
// (the copy runs after the call returns).
func (cu *CUDA) cudaMemcpyAsync(dst, src, count uintptr, kind abi.MemcpyKind, stream uintptr) error {
	return cu.call(cuMemcpyAsync, dst, src, count, uintptr(kind), stream)
}

// cudaError_t cudaMemset(void* devPtr, int value, size_t count);
func (cu *CUDA) cudaMemset(p DevicePtr, value int32, count uintptr) error {
	return cu.call(cuMemset, uintptr(p), uintptr(value), count)
}

// cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream);
func (cu *CUDA) cudaMemsetAsync(p DevicePtr, value int32, count, stream uintptr) error {
	return cu.call(cuMemsetAsync, uintptr(p), uintptr(value), count, stream)
}

// cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
func (cu *CUDA) cudaPointerGetAttributes(attr unsafe.Pointer, p uintptr) error {
	return cu.callPtr(cuPointerGetAttributes, uintptr(attr), p)
}

// cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags);
func (cu *CUDA) cudaStreamCreateWithFlags(s *uintptr, flags StreamFlags) error {
	return cu.callPtr(cuStreamCreateWithFlags, uintptr(unsafe.Pointer(s)), uintptr(flags))
}

// cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority);
func (cu *CUDA) cudaStreamCreateWithPriority(s *uintptr, flags StreamFlags, priority int) error {
	return cu.callPtr(cuStreamCreateWithPriority, uintptr(unsafe.Pointer(s)), uintptr(flags), uintptr(int32(priority)))
}

// cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority);
func (cu *CUDA) cudaStreamGetPriority(stream uintptr, priority *int32) error {
	return cu.callPtr(cuStreamGetPriority, stream, uintptr(unsafe.Pointer(priority)))
}

// cudaError_t cudaStreamDestroy(cudaStream_t stream);
func (cu *CUDA) cudaStreamDestroy(stream uintptr) error {
	return cu.call(cuStreamDestroy, stream)
}

// cudaError_t cudaStreamSynchronize(cudaStream_t stream);
func (cu *CUDA) cudaStreamSynchronize(stream uintptr) error {
	return cu.call(cuStreamSynchronize, stream)
}

// cudaError_t cudaStreamQuery(cudaStream_t stream); cudaErrorNotReady is
// false, not an error.
func (cu *CUDA) cudaStreamQuery(stream uintptr) (bool, error) {
	return cu.ready(cuStreamQuery, stream)
}

// cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
func (cu *CUDA) cudaStreamWaitEvent(stream, event uintptr) error {
	return cu.call(cuStreamWaitEvent, stream, event, 0)
}

// cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
func (cu *CUDA) cudaEventCreateWithFlags(e *uintptr, flags EventFlags) error {
	return cu.callPtr(cuEventCreateWithFlags, uintptr(unsafe.Pointer(e)), uintptr(flags))
}

// cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
func (cu *CUDA) cudaEventRecord(event, stream uintptr) error {
	return cu.call(cuEventRecord, event, stream)
}

// cudaError_t cudaEventSynchronize(cudaEvent_t event);
func (cu *CUDA) cudaEventSynchronize(event uintptr) error {
	return cu.call(cuEventSynchronize, event)
}

// cudaError_t cudaEventQuery(cudaEvent_t event); cudaErrorNotReady is false,
// not an error.
func (cu *CUDA) cudaEventQuery(event uintptr) (bool, error) {
	return cu.ready(cuEventQuery, event)
}

// cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
// (or cudaEventElapsedTime_v2, CUDA 12.8, the same arguments)
func (cu *CUDA) cudaEventElapsedTime(ms *float32, start, end uintptr) error {
	return cu.callPtr(cuEventElapsedTime, uintptr(unsafe.Pointer(ms)), start, end)
}

// cudaError_t cudaEventDestroy(cudaEvent_t event);
func (cu *CUDA) cudaEventDestroy(event uintptr) error {
	return cu.call(cuEventDestroy, event)
}

// cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
func (cu *CUDA) cudaStreamBeginCapture(stream uintptr, mode int32) error {
	return cu.call(cuStreamBeginCapture, stream, uintptr(mode))
}

// cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
func (cu *CUDA) cudaThreadExchangeStreamCaptureMode(mode *int32) error {
	return cu.callPtr(cuThreadExchangeStreamCaptureMode, uintptr(unsafe.Pointer(mode)))
}

// cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph);
func (cu *CUDA) cudaStreamEndCapture(stream uintptr, graph *uintptr) error {
	return cu.callPtr(cuStreamEndCapture, stream, uintptr(unsafe.Pointer(graph)))
}

// cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus);
func (cu *CUDA) cudaStreamIsCapturing(stream uintptr, status *int32) error {
	return cu.callPtr(cuStreamIsCapturing, stream, uintptr(unsafe.Pointer(status)))
}

// cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec,
// cudaGraph_t graph, unsigned long long flags);
func (cu *CUDA) cudaGraphInstantiateWithFlags(exec *uintptr, graph uintptr) error {
	return cu.callPtr(cuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(exec)), graph, 0)
}

// cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
func (cu *CUDA) cudaGraphLaunch(exec, stream uintptr) error {
	return cu.call(cuGraphLaunch, exec, stream)
}

// cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream);
func (cu *CUDA) cudaGraphUpload(exec, stream uintptr) error {
	return cu.call(cuGraphUpload, exec, stream)
}

// cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
func (cu *CUDA) cudaGraphExecDestroy(exec uintptr) error {
	return cu.call(cuGraphExecDestroy, exec)
}

// cudaError_t cudaGraphDestroy(cudaGraph_t graph);
func (cu *CUDA) cudaGraphDestroy(graph uintptr) error {
	return cu.call(cuGraphDestroy, graph)
}

// cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path,
// unsigned int flags); path NUL-terminated.
func (cu *CUDA) cudaGraphDebugDotPrint(graph uintptr, path *byte, flags uint32) error {
	return cu.callPtr(cuGraphDebugDotPrint, graph, uintptr(unsafe.Pointer(path)), uintptr(flags))
}

// const char* cudaGetErrorName(cudaError_t error);
func (cu *CUDA) cudaGetErrorName(e abi.CudaError) uintptr {
	return ccall.Call(cu.fn[cuGetErrorName], uintptr(e))
}

// const char* cudaGetErrorString(cudaError_t error);
func (cu *CUDA) cudaGetErrorString(e abi.CudaError) uintptr {
	return ccall.Call(cu.fn[cuGetErrorString], uintptr(e))
}

// cudaError_t cudaGetLastError(void); clears the thread's last error.
func (cu *CUDA) cudaGetLastError() abi.CudaError {
	return abi.CudaError(int32(ccall.Call(cu.fn[cuGetLastError])))
}
