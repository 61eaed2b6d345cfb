package abi

import "strconv"

// CudaError is cudaError_t, numbered as since CUDA 10.1 (earlier runtimes had
// NotReady at 34 and InvalidResourceHandle at 33).
type CudaError int32

const (
	CudaSuccess                    CudaError = 0
	CudaErrorInvalidValue          CudaError = 1
	CudaErrorMemoryAllocation      CudaError = 2
	CudaErrorInitializationError   CudaError = 3
	CudaErrorInsufficientDriver    CudaError = 35
	CudaErrorNoDevice              CudaError = 100
	CudaErrorInvalidDevice         CudaError = 101
	CudaErrorInvalidResourceHandle CudaError = 400
	CudaErrorNotReady              CudaError = 600
)

var cudaErrorNames = map[CudaError]string{
	CudaSuccess: "cudaSuccess", CudaErrorInvalidValue: "cudaErrorInvalidValue",
	CudaErrorMemoryAllocation: "cudaErrorMemoryAllocation", CudaErrorInitializationError: "cudaErrorInitializationError",
	CudaErrorInsufficientDriver: "cudaErrorInsufficientDriver", CudaErrorNoDevice: "cudaErrorNoDevice",
	CudaErrorInvalidDevice: "cudaErrorInvalidDevice", CudaErrorInvalidResourceHandle: "cudaErrorInvalidResourceHandle",
	CudaErrorNotReady: "cudaErrorNotReady",
}

func (e CudaError) String() string {
	if s, ok := cudaErrorNames[e]; ok {
		return s
	}
	return "cudaError(" + strconv.Itoa(int(e)) + ")"
}

// MemcpyKind is cudaMemcpyKind.
type MemcpyKind int32

const (
	MemcpyHostToHost     MemcpyKind = 0
	MemcpyHostToDevice   MemcpyKind = 1
	MemcpyDeviceToHost   MemcpyKind = 2
	MemcpyDeviceToDevice MemcpyKind = 3
	MemcpyDefault        MemcpyKind = 4 // inferred from the pointers (unified addressing)
)

var memcpyNames = [...]string{"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"}

func (k MemcpyKind) String() string {
	if k >= 0 && int(k) < len(memcpyNames) {
		return memcpyNames[k]
	}
	return "cudaMemcpyKind(" + strconv.Itoa(int(k)) + ")"
}

// Stream flags (cudaStreamCreateWithFlags).
const (
	StreamDefault     = 0x0
	StreamNonBlocking = 0x1 // no implicit synchronisation with the legacy default stream
)

// Event flags (cudaEventCreateWithFlags).
const (
	EventDefault       = 0x0
	EventBlockingSync  = 0x1
	EventDisableTiming = 0x2
	EventInterprocess  = 0x4
)

// MemoryType is cudaMemoryType.
type MemoryType int32

const (
	MemoryTypeUnregistered MemoryType = 0
	MemoryTypeHost         MemoryType = 1
	MemoryTypeDevice       MemoryType = 2
	MemoryTypeManaged      MemoryType = 3
)

var memoryTypeNames = [...]string{"cudaMemoryTypeUnregistered", "cudaMemoryTypeHost", "cudaMemoryTypeDevice", "cudaMemoryTypeManaged"}

func (m MemoryType) String() string {
	if m >= 0 && int(m) < len(memoryTypeNames) {
		return memoryTypeNames[m]
	}
	return "cudaMemoryType(" + strconv.Itoa(int(m)) + ")"
}

// PointerAttributes is struct cudaPointerAttributes (CUDA >= 11). CUDA 13.0
// appended long reserved[8], making it 88 bytes; the Go struct carries that tail
// so a CUDA 13 runtime cannot write past it, and CUDA 11/12 fill the first 24
// bytes, whose layout is unchanged.
type PointerAttributes struct {
	Type          MemoryType
	Device        int32
	DevicePointer uintptr
	HostPointer   uintptr
	Reserved      [8]int64 // C long on LP64
}

// DecodeCudaVersion reads the code of cudaRuntimeGetVersion and
// cudaDriverGetVersion, 1000*major + 10*minor: 12040 is 12.4.
func DecodeCudaVersion(code int) (major, minor int) {
	return code / 1000, code % 1000 / 10
}
