package nccl

import (
	"strconv"

	"github.com/gonccl/nccl/abi"
)

// The C enums, spelled from this package. They are aliases of the types in
// package abi (the mirror of the C headers), which users never need to import.

// DataType is ncclDataType_t: the element type of a buffer.
type DataType = abi.DataType

// NCCL's data types. Bfloat16 needs NCCL >= 2.10, the FP8 types >= 2.24
// (Library.SupportsType).
const (
	Int8       = abi.Int8
	Uint8      = abi.Uint8
	Int32      = abi.Int32
	Uint32     = abi.Uint32
	Int64      = abi.Int64
	Uint64     = abi.Uint64
	Float16    = abi.Float16
	Float32    = abi.Float32
	Float64    = abi.Float64
	Bfloat16   = abi.Bfloat16
	Float8e4m3 = abi.Float8e4m3
	Float8e5m2 = abi.Float8e5m2
)

// RedOp is ncclRedOp_t: a reduction. Values from 5 up are PreMulSum ops made at
// run time (PreMulSum, Comm.PreMulSumDevice).
type RedOp = abi.RedOp

// The built-in reductions. Avg needs NCCL >= 2.10.
const (
	Sum  = abi.Sum
	Prod = abi.Prod
	Max  = abi.Max
	Min  = abi.Min
	Avg  = abi.Avg
)

// Result is ncclResult_t, the code in an *Error.
type Result = abi.Result

// Version is an NCCL release.
type Version = abi.Version

// CUDAErrorCode is cudaError_t, the code in a *CUDAError.
type CUDAErrorCode = abi.CudaError

// PointerAttributes is what CUDA.PointerAttributes reports of an address.
type PointerAttributes = abi.PointerAttributes

// MemoryType is cudaMemoryType, in PointerAttributes.
type MemoryType = abi.MemoryType

// Memory types of PointerAttributes.Type.
const (
	MemoryUnregistered = abi.MemoryTypeUnregistered
	MemoryHost         = abi.MemoryTypeHost
	MemoryDevice       = abi.MemoryTypeDevice
	MemoryManaged      = abi.MemoryTypeManaged
)

// StreamFlags are cudaStreamCreateWithFlags' flags.
type StreamFlags uint32

const (
	// StreamDefault synchronises with the legacy default stream.
	StreamDefault StreamFlags = abi.StreamDefault
	// StreamNonBlocking does not: the usual choice for communication.
	StreamNonBlocking StreamFlags = abi.StreamNonBlocking
)

// EventFlags are cudaEventCreateWithFlags' flags.
type EventFlags uint32

const (
	EventDefault       EventFlags = abi.EventDefault
	EventBlockingSync  EventFlags = abi.EventBlockingSync
	EventDisableTiming EventFlags = abi.EventDisableTiming
)

// SplitNoColor, passed to Comm.Split, makes the rank join no new communicator.
const SplitNoColor = abi.SplitNoColor

// Window registration flags (Comm.RegisterWindow).
const (
	// WinCollSymmetric: every rank registers the same size together; NCCL's
	// symmetric kernels and VCCL's ncclAlltoAllv use such windows (NCCL >= 2.27).
	WinCollSymmetric = abi.WinCollSymmetric
)

// Path is how AlltoAll, Gather, Scatter and AlltoAllv run (Comm.SetPath).
type Path int32

const (
	// Auto: the library's own function where it has it, else grouped.
	Auto Path = iota
	// Native: the library's own function (ncclAlltoAll, ncclGather,
	// ncclScatter from NCCL 2.28; VCCL's ncclAlltoAllv); an error matching
	// ErrNotSupported where it lacks it.
	Native
	// Grouped: ncclSend and ncclRecv to every peer inside one group, as
	// PyTorch and nccl-tests do, whatever the library has.
	Grouped
)

func (p Path) String() string {
	switch p {
	case Auto:
		return "auto"
	case Native:
		return "native"
	case Grouped:
		return "grouped"
	}
	return "Path(" + strconv.Itoa(int(p)) + ")"
}

// Element is every Go type whose values NCCL moves, for CopyIn, CopyOut and
// PreMulSum. Its DataType is TypeOf.
type Element interface {
	int8 | uint8 | int32 | uint32 | int64 | uint64 | float32 | float64 |
		F16 | BF16 | F8E4M3 | F8E5M2
}

// TypeOf is the NCCL data type of T.
func TypeOf[T Element]() DataType {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case F16:
		return Float16
	case BF16:
		return Bfloat16
	case F8E4M3:
		return Float8e4m3
	case F8E5M2:
		return Float8e5m2
	}
	panic("unreachable")
}
