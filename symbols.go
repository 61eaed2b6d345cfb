package nccl

import (
	"fmt"
	"runtime"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/dl"
)

// The symbol tables: one row per C function gonccl calls. A row drives loading
// (required rows must resolve, optional ones are probed), feature queries
// (Library.Has, Library.Features) and the "not supported ... requires >= x"
// errors. Adding an NCCL function is one row here plus its Go method.

// MinVersion is the oldest NCCL gonccl loads: the first with ncclConfig_t,
// ncclCommFinalize and non-blocking communicators.
var MinVersion = abi.V(2, 14, 0)

// symbol describes one C function.
type symbol struct {
	name   string      // C name
	alt    string      // another exported name for the same function, tried second
	since  abi.Version // the release that added it
	vendor string      // non-empty for a fork's extension ("VCCL"); never required

	// cname and calt are name and alt as C strings, made once per process (init)
	// so that resolving a table builds no string.
	cname, calt *byte
}

// required reports whether loading fails without the symbol: everything every
// supported release has.
func (s symbol) required(min abi.Version) bool {
	return s.vendor == "" && min.AtLeast(s.since)
}

func (s symbol) requirement() string {
	if s.vendor != "" {
		return "requires " + s.vendor
	}
	return "requires >= " + s.since.String()
}

// NCCL functions, indexes into ncclSymbols and Library.fn.
const (
	fnGetVersion = iota
	fnGetUniqueID
	fnGetErrorString
	fnGetLastError
	fnCommInitRank
	fnCommInitRankConfig
	fnCommInitAll
	fnCommInitRankScalable
	fnCommSplit
	fnCommFinalize
	fnCommDestroy
	fnCommAbort
	fnCommGetAsyncError
	fnCommCount
	fnCommCuDevice
	fnCommUserRank
	fnAllReduce
	fnBroadcast
	fnReduce
	fnAllGather
	fnReduceScatter
	fnAlltoAll
	fnGather
	fnScatter
	fnSend
	fnRecv
	fnAlltoAllv
	fnGroupStart
	fnGroupEnd
	fnRedOpCreatePreMulSum
	fnRedOpDestroy
	fnCommRegister
	fnCommDeregister
	fnMemAlloc
	fnMemFree
	fnCommWindowRegister
	fnCommWindowDeregister
	fnCommShrink
	fnCommRevoke
	fnCommGetUniqueID
	fnCommGrow
	fnPutSignal
	fnSignal
	fnWaitSignal
	fnWinGetUserPtr
	fnGroupSimulateEnd
	fnCommQueryProperties
	fnCommSuspend
	fnCommResume
	fnCommMemStats
	fnParamBind
	fnParamGetI8
	fnParamGetI16
	fnParamGetI32
	fnParamGetI64
	fnParamGetU8
	fnParamGetU16
	fnParamGetU32
	fnParamGetU64
	fnParamGetStr
	fnParamGetParameter
	fnParamGetAllParameterKeys
	numNCCLSymbols
)

var ncclSymbols = [numNCCLSymbols]symbol{
	fnGetVersion:           {name: "ncclGetVersion", since: abi.V(2, 3, 0)},
	fnGetUniqueID:          {name: "ncclGetUniqueId", since: abi.V(2, 3, 0)},
	fnGetErrorString:       {name: "ncclGetErrorString", since: abi.V(2, 3, 0)},
	fnGetLastError:         {name: "ncclGetLastError", since: abi.V(2, 13, 0)},
	fnCommInitRank:         {name: "ncclCommInitRank", since: abi.V(2, 3, 0)},
	fnCommInitRankConfig:   {name: "ncclCommInitRankConfig", since: abi.V(2, 14, 0)},
	fnCommInitAll:          {name: "ncclCommInitAll", since: abi.V(2, 3, 0)},
	fnCommInitRankScalable: {name: "ncclCommInitRankScalable", since: abi.V(2, 23, 0)},
	fnCommSplit:            {name: "ncclCommSplit", since: abi.V(2, 18, 0)},
	fnCommFinalize:         {name: "ncclCommFinalize", since: abi.V(2, 14, 0)},
	fnCommDestroy:          {name: "ncclCommDestroy", since: abi.V(2, 3, 0)},
	fnCommAbort:            {name: "ncclCommAbort", since: abi.V(2, 4, 0)},
	fnCommGetAsyncError:    {name: "ncclCommGetAsyncError", since: abi.V(2, 4, 0)},
	fnCommCount:            {name: "ncclCommCount", since: abi.V(2, 3, 0)},
	fnCommCuDevice:         {name: "ncclCommCuDevice", since: abi.V(2, 3, 0)},
	fnCommUserRank:         {name: "ncclCommUserRank", since: abi.V(2, 3, 0)},
	fnAllReduce:            {name: "ncclAllReduce", since: abi.V(2, 3, 0)},
	fnBroadcast:            {name: "ncclBroadcast", since: abi.V(2, 3, 0)},
	fnReduce:               {name: "ncclReduce", since: abi.V(2, 3, 0)},
	fnAllGather:            {name: "ncclAllGather", since: abi.V(2, 3, 0)},
	fnReduceScatter:        {name: "ncclReduceScatter", since: abi.V(2, 3, 0)},
	fnAlltoAll:             {name: "ncclAlltoAll", since: abi.V(2, 28, 0)},
	fnGather:               {name: "ncclGather", since: abi.V(2, 28, 0)},
	fnScatter:              {name: "ncclScatter", since: abi.V(2, 28, 0)},
	fnSend:                 {name: "ncclSend", since: abi.V(2, 7, 0)},
	fnRecv:                 {name: "ncclRecv", since: abi.V(2, 7, 0)},
	fnAlltoAllv:            {name: "ncclAlltoAllv", vendor: "VCCL"},
	fnGroupStart:           {name: "ncclGroupStart", since: abi.V(2, 3, 0)},
	fnGroupEnd:             {name: "ncclGroupEnd", since: abi.V(2, 3, 0)},
	fnRedOpCreatePreMulSum: {name: "ncclRedOpCreatePreMulSum", since: abi.V(2, 11, 0)},
	fnRedOpDestroy:         {name: "ncclRedOpDestroy", since: abi.V(2, 11, 0)},
	fnCommRegister:         {name: "ncclCommRegister", since: abi.V(2, 19, 0)},
	fnCommDeregister:       {name: "ncclCommDeregister", since: abi.V(2, 19, 0)},
	fnMemAlloc:             {name: "ncclMemAlloc", since: abi.V(2, 19, 0)},
	fnMemFree:              {name: "ncclMemFree", since: abi.V(2, 19, 0)},
	fnCommWindowRegister:   {name: "ncclCommWindowRegister", since: abi.V(2, 27, 0)},
	fnCommWindowDeregister: {name: "ncclCommWindowDeregister", since: abi.V(2, 27, 0)},
	fnCommShrink:           {name: "ncclCommShrink", since: abi.V(2, 27, 0)},
	fnCommRevoke:           {name: "ncclCommRevoke", since: abi.V(2, 28, 7)},
	fnCommGetUniqueID:      {name: "ncclCommGetUniqueId", since: abi.V(2, 29, 2)},
	fnCommGrow:             {name: "ncclCommGrow", since: abi.V(2, 29, 2)},
	fnPutSignal:            {name: "ncclPutSignal", since: abi.V(2, 29, 2)},
	fnSignal:               {name: "ncclSignal", since: abi.V(2, 29, 2)},
	fnWaitSignal:           {name: "ncclWaitSignal", since: abi.V(2, 29, 2)},
	fnWinGetUserPtr:        {name: "ncclWinGetUserPtr", since: abi.V(2, 29, 2)},
	fnGroupSimulateEnd:     {name: "ncclGroupSimulateEnd", since: abi.V(2, 22, 0)},
	fnCommQueryProperties:  {name: "ncclCommQueryProperties", since: abi.V(2, 29, 2)},
	fnCommSuspend:          {name: "ncclCommSuspend", since: abi.V(2, 29, 7)},
	fnCommResume:           {name: "ncclCommResume", since: abi.V(2, 29, 7)},
	fnCommMemStats:         {name: "ncclCommMemStats", since: abi.V(2, 29, 7)},
	// ncclParamHandle_t is a struct in 2.30.4 (functions take ncclParamHandle_t*)
	// and a pointer typedef from 2.30.7: one pointer either way, the same ABI.
	fnParamBind:                {name: "ncclParamBind", since: abi.V(2, 30, 4)},
	fnParamGetI8:               {name: "ncclParamGetI8", since: abi.V(2, 30, 4)},
	fnParamGetI16:              {name: "ncclParamGetI16", since: abi.V(2, 30, 4)},
	fnParamGetI32:              {name: "ncclParamGetI32", since: abi.V(2, 30, 4)},
	fnParamGetI64:              {name: "ncclParamGetI64", since: abi.V(2, 30, 4)},
	fnParamGetU8:               {name: "ncclParamGetU8", since: abi.V(2, 30, 4)},
	fnParamGetU16:              {name: "ncclParamGetU16", since: abi.V(2, 30, 4)},
	fnParamGetU32:              {name: "ncclParamGetU32", since: abi.V(2, 30, 4)},
	fnParamGetU64:              {name: "ncclParamGetU64", since: abi.V(2, 30, 4)},
	fnParamGetStr:              {name: "ncclParamGetStr", since: abi.V(2, 30, 4)},
	fnParamGetParameter:        {name: "ncclParamGetParameter", since: abi.V(2, 30, 4)},
	fnParamGetAllParameterKeys: {name: "ncclParamGetAllParameterKeys", since: abi.V(2, 30, 4)},
}

// CUDA runtime functions, indexes into cudaSymbols and CUDA.fn. All are required:
// every CUDA runtime since 11.0 has them.
const (
	cuRuntimeGetVersion = iota
	cuDriverGetVersion
	cuGetDeviceCount
	cuSetDevice
	cuGetDevice
	cuDeviceSynchronize
	cuMalloc
	cuFree
	cuMemGetInfo
	cuMallocHost
	cuFreeHost
	cuMemcpy
	cuMemcpyAsync
	cuMemset
	cuMemsetAsync
	cuStreamCreateWithFlags
	cuStreamDestroy
	cuStreamSynchronize
	cuStreamQuery
	cuStreamWaitEvent
	cuEventCreateWithFlags
	cuEventRecord
	cuEventSynchronize
	cuEventQuery
	cuEventElapsedTime
	cuEventDestroy
	cuPointerGetAttributes
	cuGetErrorName
	cuGetErrorString
	cuGetLastError
	cuHostRegister
	cuHostUnregister
	cuDeviceGetAttribute
	cuDeviceCanAccessPeer
	cuDeviceEnablePeerAccess
	cuDeviceDisablePeerAccess
	cuDeviceGetStreamPriorityRange
	cuStreamCreateWithPriority
	cuStreamGetPriority
	cuMallocAsync
	cuFreeAsync
	cuStreamBeginCapture
	cuStreamEndCapture
	cuStreamIsCapturing
	cuGraphInstantiateWithFlags
	cuGraphLaunch
	cuGraphExecDestroy
	cuGraphDestroy
	cuThreadExchangeStreamCaptureMode
	cuGraphDebugDotPrint
	cuGraphUpload
	numCUDASymbols
)

var cudaSymbols = [numCUDASymbols]symbol{
	cuRuntimeGetVersion:     {name: "cudaRuntimeGetVersion"},
	cuDriverGetVersion:      {name: "cudaDriverGetVersion"},
	cuGetDeviceCount:        {name: "cudaGetDeviceCount"},
	cuSetDevice:             {name: "cudaSetDevice"},
	cuGetDevice:             {name: "cudaGetDevice"},
	cuDeviceSynchronize:     {name: "cudaDeviceSynchronize"},
	cuMalloc:                {name: "cudaMalloc"},
	cuFree:                  {name: "cudaFree"},
	cuMemGetInfo:            {name: "cudaMemGetInfo"},
	cuMallocHost:            {name: "cudaMallocHost"},
	cuFreeHost:              {name: "cudaFreeHost"},
	cuMemcpy:                {name: "cudaMemcpy"},
	cuMemcpyAsync:           {name: "cudaMemcpyAsync"},
	cuMemset:                {name: "cudaMemset"},
	cuMemsetAsync:           {name: "cudaMemsetAsync"},
	cuStreamCreateWithFlags: {name: "cudaStreamCreateWithFlags"},
	cuStreamDestroy:         {name: "cudaStreamDestroy"},
	cuStreamSynchronize:     {name: "cudaStreamSynchronize"},
	cuStreamQuery:           {name: "cudaStreamQuery"},
	cuStreamWaitEvent:       {name: "cudaStreamWaitEvent"},
	cuEventCreateWithFlags:  {name: "cudaEventCreateWithFlags"},
	cuEventRecord:           {name: "cudaEventRecord"},
	cuEventSynchronize:      {name: "cudaEventSynchronize"},
	cuEventQuery:            {name: "cudaEventQuery"},
	// CUDA 12.8 added the _v2 form; accept whichever the runtime exports.
	cuEventElapsedTime:             {name: "cudaEventElapsedTime", alt: "cudaEventElapsedTime_v2"},
	cuEventDestroy:                 {name: "cudaEventDestroy"},
	cuPointerGetAttributes:         {name: "cudaPointerGetAttributes"},
	cuGetErrorName:                 {name: "cudaGetErrorName"},
	cuGetErrorString:               {name: "cudaGetErrorString"},
	cuGetLastError:                 {name: "cudaGetLastError"},
	cuHostRegister:                 {name: "cudaHostRegister"},
	cuHostUnregister:               {name: "cudaHostUnregister"},
	cuDeviceGetAttribute:           {name: "cudaDeviceGetAttribute"},
	cuDeviceCanAccessPeer:          {name: "cudaDeviceCanAccessPeer"},
	cuDeviceEnablePeerAccess:       {name: "cudaDeviceEnablePeerAccess"},
	cuDeviceDisablePeerAccess:      {name: "cudaDeviceDisablePeerAccess"},
	cuDeviceGetStreamPriorityRange: {name: "cudaDeviceGetStreamPriorityRange"},
	cuStreamCreateWithPriority:     {name: "cudaStreamCreateWithPriority"},
	cuStreamGetPriority:            {name: "cudaStreamGetPriority"},
	// Rows with a since (the CUDA release that added them) are optional: probed,
	// and a call without them is an *UnsupportedError (see cudaOptional).
	cuMallocAsync:               {name: "cudaMallocAsync", since: abi.V(11, 2, 0)},
	cuFreeAsync:                 {name: "cudaFreeAsync", since: abi.V(11, 2, 0)},
	cuStreamBeginCapture:        {name: "cudaStreamBeginCapture", since: abi.V(10, 1, 0)},
	cuStreamEndCapture:          {name: "cudaStreamEndCapture", since: abi.V(10, 0, 0)},
	cuStreamIsCapturing:         {name: "cudaStreamIsCapturing", since: abi.V(10, 0, 0)},
	cuGraphInstantiateWithFlags: {name: "cudaGraphInstantiateWithFlags", since: abi.V(11, 4, 0)},
	cuGraphLaunch:               {name: "cudaGraphLaunch", since: abi.V(10, 0, 0)},
	cuGraphExecDestroy:          {name: "cudaGraphExecDestroy", since: abi.V(10, 0, 0)},
	cuGraphDestroy:              {name: "cudaGraphDestroy", since: abi.V(10, 0, 0)},
	// Relaxes the capturing thread while NCCL connects inside a captured
	// operation (see CUDA.callRelaxed).
	cuThreadExchangeStreamCaptureMode: {name: "cudaThreadExchangeStreamCaptureMode", since: abi.V(10, 1, 0)},
	// Graph.WriteDot.
	cuGraphDebugDotPrint: {name: "cudaGraphDebugDotPrint", since: abi.V(11, 3, 0)},
	// Graph.Upload.
	cuGraphUpload: {name: "cudaGraphUpload", since: abi.V(11, 1, 0)},
}

func init() {
	for _, t := range [][]symbol{ncclSymbols[:], cudaSymbols[:]} {
		for i := range t {
			t[i].cname = cString(t[i].name)
			if t[i].alt != "" {
				t[i].calt = cString(t[i].alt)
			}
		}
	}
}

// cString is s with a NUL byte appended. What it returns is kept by a package
// variable or used within one call: Go's heap does not move it.
func cString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// resolve fills fn from table, keeping rows already filled (ncclGetVersion, read
// first). Rows for which required reports true must resolve; the first missing
// one is returned as a *MissingSymbolError.
func resolve(h uintptr, path string, table []symbol, fn []uintptr, required func(*symbol) bool) error {
	// dlsym's error state is per thread: one lock for the whole table.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range table {
		s := &table[i]
		if fn[i] != 0 {
			continue
		}
		p := dl.SymLocked(h, s.cname)
		if p == 0 && s.calt != nil {
			p = dl.SymLocked(h, s.calt)
		}
		fn[i] = p
		if p == 0 && required(s) {
			return &MissingSymbolError{Symbol: s.name, Path: path}
		}
	}
	return nil
}

// Feature is one optional NCCL function and whether the loaded library has it.
type Feature struct {
	Name    string      // C name, e.g. "ncclCommSplit"
	Since   abi.Version // the NCCL release that added it (zero for a fork's extension)
	Vendor  string      // "VCCL" for a fork's extension
	Present bool
}

func (f Feature) String() string {
	mark := "-"
	if f.Present {
		mark = "+"
	}
	if f.Vendor != "" {
		return fmt.Sprintf("%s%s (%s)", mark, f.Name, f.Vendor)
	}
	return fmt.Sprintf("%s%s (%s)", mark, f.Name, f.Since)
}

// Symbols lists every C function gonccl resolves when it opens the libraries:
// NCCL's, then the CUDA runtime's.
func Symbols() []string {
	var out []string
	for _, t := range [][]symbol{ncclSymbols[:], cudaSymbols[:]} {
		for _, s := range t {
			out = append(out, s.name)
		}
	}
	return out
}
