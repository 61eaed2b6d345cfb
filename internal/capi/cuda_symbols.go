package capi

import "github.com/gonccl/nccl/abi"

// The CUDA runtime's functions, indexes into CUDASymbols and CUDA.Fn.
const (
	CuRuntimeGetVersion = iota
	CuDriverGetVersion
	CuGetDeviceCount
	CuSetDevice
	CuGetDevice
	CuDeviceSynchronize
	CuMalloc
	CuFree
	CuMemGetInfo
	CuMallocHost
	CuFreeHost
	CuMemcpy
	CuMemcpyAsync
	CuMemset
	CuMemsetAsync
	CuStreamCreateWithFlags
	CuStreamDestroy
	CuStreamSynchronize
	CuStreamQuery
	CuStreamWaitEvent
	CuEventCreateWithFlags
	CuEventRecord
	CuEventSynchronize
	CuEventQuery
	CuEventElapsedTime
	CuEventDestroy
	CuPointerGetAttributes
	CuGetErrorName
	CuGetErrorString
	CuGetLastError
	CuHostRegister
	CuHostUnregister
	CuDeviceGetAttribute
	CuDeviceCanAccessPeer
	CuDeviceEnablePeerAccess
	CuDeviceDisablePeerAccess
	CuDeviceGetStreamPriorityRange
	CuStreamCreateWithPriority
	CuStreamGetPriority
	CuMallocAsync
	CuFreeAsync
	CuStreamBeginCapture
	CuStreamEndCapture
	CuStreamIsCapturing
	CuGraphInstantiateWithFlags
	CuGraphLaunch
	CuGraphExecDestroy
	CuGraphDestroy
	CuThreadExchangeStreamCaptureMode
	CuGraphDebugDotPrint
	CuGraphUpload
	NumCUDA
)

// CUDASymbols is the CUDA runtime's table. Rows without a Since every runtime
// since 11.0 has, and are required; the others are probed.
var CUDASymbols = [NumCUDA]Symbol{
	CuRuntimeGetVersion:     {Name: "cudaRuntimeGetVersion"},
	CuDriverGetVersion:      {Name: "cudaDriverGetVersion"},
	CuGetDeviceCount:        {Name: "cudaGetDeviceCount"},
	CuSetDevice:             {Name: "cudaSetDevice"},
	CuGetDevice:             {Name: "cudaGetDevice"},
	CuDeviceSynchronize:     {Name: "cudaDeviceSynchronize"},
	CuMalloc:                {Name: "cudaMalloc"},
	CuFree:                  {Name: "cudaFree"},
	CuMemGetInfo:            {Name: "cudaMemGetInfo"},
	CuMallocHost:            {Name: "cudaMallocHost"},
	CuFreeHost:              {Name: "cudaFreeHost"},
	CuMemcpy:                {Name: "cudaMemcpy"},
	CuMemcpyAsync:           {Name: "cudaMemcpyAsync"},
	CuMemset:                {Name: "cudaMemset"},
	CuMemsetAsync:           {Name: "cudaMemsetAsync"},
	CuStreamCreateWithFlags: {Name: "cudaStreamCreateWithFlags"},
	CuStreamDestroy:         {Name: "cudaStreamDestroy"},
	CuStreamSynchronize:     {Name: "cudaStreamSynchronize"},
	CuStreamQuery:           {Name: "cudaStreamQuery"},
	CuStreamWaitEvent:       {Name: "cudaStreamWaitEvent"},
	CuEventCreateWithFlags:  {Name: "cudaEventCreateWithFlags"},
	CuEventRecord:           {Name: "cudaEventRecord"},
	CuEventSynchronize:      {Name: "cudaEventSynchronize"},
	CuEventQuery:            {Name: "cudaEventQuery"},
	// CUDA 12.8 added the _v2 form; accept whichever the runtime exports.
	CuEventElapsedTime:             {Name: "cudaEventElapsedTime", Alt: "cudaEventElapsedTime_v2"},
	CuEventDestroy:                 {Name: "cudaEventDestroy"},
	CuPointerGetAttributes:         {Name: "cudaPointerGetAttributes"},
	CuGetErrorName:                 {Name: "cudaGetErrorName"},
	CuGetErrorString:               {Name: "cudaGetErrorString"},
	CuGetLastError:                 {Name: "cudaGetLastError"},
	CuHostRegister:                 {Name: "cudaHostRegister"},
	CuHostUnregister:               {Name: "cudaHostUnregister"},
	CuDeviceGetAttribute:           {Name: "cudaDeviceGetAttribute"},
	CuDeviceCanAccessPeer:          {Name: "cudaDeviceCanAccessPeer"},
	CuDeviceEnablePeerAccess:       {Name: "cudaDeviceEnablePeerAccess"},
	CuDeviceDisablePeerAccess:      {Name: "cudaDeviceDisablePeerAccess"},
	CuDeviceGetStreamPriorityRange: {Name: "cudaDeviceGetStreamPriorityRange"},
	CuStreamCreateWithPriority:     {Name: "cudaStreamCreateWithPriority"},
	CuStreamGetPriority:            {Name: "cudaStreamGetPriority"},
	// Rows with a since (the CUDA release that added them) are optional: probed,
	// and a call without them fails with Failures.Missing.
	CuMallocAsync:               {Name: "cudaMallocAsync", Since: abi.V(11, 2, 0)},
	CuFreeAsync:                 {Name: "cudaFreeAsync", Since: abi.V(11, 2, 0)},
	CuStreamBeginCapture:        {Name: "cudaStreamBeginCapture", Since: abi.V(10, 1, 0)},
	CuStreamEndCapture:          {Name: "cudaStreamEndCapture", Since: abi.V(10, 0, 0)},
	CuStreamIsCapturing:         {Name: "cudaStreamIsCapturing", Since: abi.V(10, 0, 0)},
	CuGraphInstantiateWithFlags: {Name: "cudaGraphInstantiateWithFlags", Since: abi.V(11, 4, 0)},
	CuGraphLaunch:               {Name: "cudaGraphLaunch", Since: abi.V(10, 0, 0)},
	CuGraphExecDestroy:          {Name: "cudaGraphExecDestroy", Since: abi.V(10, 0, 0)},
	CuGraphDestroy:              {Name: "cudaGraphDestroy", Since: abi.V(10, 0, 0)},
	// Relaxes the capturing thread while NCCL connects inside a captured
	// operation (see CUDA.Relaxed).
	CuThreadExchangeStreamCaptureMode: {Name: "cudaThreadExchangeStreamCaptureMode", Since: abi.V(10, 1, 0)},
	// Graph.WriteDot.
	CuGraphDebugDotPrint: {Name: "cudaGraphDebugDotPrint", Since: abi.V(11, 3, 0)},
	// Graph.Upload.
	CuGraphUpload: {Name: "cudaGraphUpload", Since: abi.V(11, 1, 0)},
}
