package abi

import (
	"fmt"
	"strconv"
)

// Result is ncclResult_t.
type Result int32

const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6 // 2.13
	InProgress         Result = 7 // 2.14: non-blocking communicators
	Timeout            Result = 8 // 2.30.3
)

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}

func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "ncclResult(" + strconv.Itoa(int(r)) + ")"
}

// DataType is ncclDataType_t.
type DataType int32

const (
	Int8       DataType = 0
	Uint8      DataType = 1
	Int32      DataType = 2
	Uint32     DataType = 3
	Int64      DataType = 4
	Uint64     DataType = 5
	Float16    DataType = 6
	Float32    DataType = 7
	Float64    DataType = 8
	Bfloat16   DataType = 9  // 2.10
	Float8e4m3 DataType = 10 // 2.24
	Float8e5m2 DataType = 11 // 2.24

	// NCCL's aliases.
	Char   = Int8
	Int    = Int32
	Half   = Float16
	Float  = Float32
	Double = Float64
)

var typeInfo = [...]struct {
	name  string
	size  int
	since Version
}{
	Int8: {"ncclInt8", 1, V(2, 3, 0)}, Uint8: {"ncclUint8", 1, V(2, 3, 0)},
	Int32: {"ncclInt32", 4, V(2, 3, 0)}, Uint32: {"ncclUint32", 4, V(2, 3, 0)},
	Int64: {"ncclInt64", 8, V(2, 3, 0)}, Uint64: {"ncclUint64", 8, V(2, 3, 0)},
	Float16: {"ncclFloat16", 2, V(2, 3, 0)}, Float32: {"ncclFloat32", 4, V(2, 3, 0)},
	Float64: {"ncclFloat64", 8, V(2, 3, 0)}, Bfloat16: {"ncclBfloat16", 2, V(2, 10, 0)},
	Float8e4m3: {"ncclFloat8e4m3", 1, V(2, 24, 0)}, Float8e5m2: {"ncclFloat8e5m2", 1, V(2, 24, 0)},
}

// Valid reports whether t is a data type some NCCL release knows.
func (t DataType) Valid() bool { return t >= 0 && int(t) < len(typeInfo) }

func (t DataType) String() string {
	if t.Valid() {
		return typeInfo[t].name
	}
	return "ncclDataType(" + strconv.Itoa(int(t)) + ")"
}

// Size is the size of one element in bytes; 0 for an unknown type.
func (t DataType) Size() int {
	if t.Valid() {
		return typeInfo[t].size
	}
	return 0
}

// Since is the first NCCL release with the type; the zero Version if unknown.
func (t DataType) Since() Version {
	if t.Valid() {
		return typeInfo[t].since
	}
	return Version{}
}

// RedOp is ncclRedOp_t. Values from 5 up are PreMulSum ops made at run time by
// ncclRedOpCreatePreMulSum.
type RedOp int32

const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4 // 2.10
)

var opNames = [...]string{"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"}

func (o RedOp) String() string {
	switch {
	case o.Builtin():
		return opNames[o]
	case o >= 5:
		return "ncclPreMulSum(" + strconv.Itoa(int(o)) + ")"
	}
	return "ncclRedOp(" + strconv.Itoa(int(o)) + ")"
}

// Builtin reports whether o is one of the five fixed ops.
func (o RedOp) Builtin() bool { return o >= Sum && o <= Avg }

// Since is the first NCCL release with the op: PreMulSum handles come with
// 2.11; the zero Version for a negative (never valid) op.
func (o RedOp) Since() Version {
	switch {
	case o < 0:
		return Version{}
	case o == Avg:
		return V(2, 10, 0)
	case o > Avg:
		return V(2, 11, 0)
	}
	return V(2, 3, 0)
}

// ScalarResidence is ncclScalarResidence_t: where a PreMulSum scalar lives.
type ScalarResidence int32

const (
	ScalarDevice        ScalarResidence = 0 // read by each operation from device memory
	ScalarHostImmediate ScalarResidence = 1 // read from host memory during the create call
)

const (
	SplitNoColor     = -1   // NCCL_SPLIT_NOCOLOR: the rank joins no new communicator
	WinCollSymmetric = 0x01 // NCCL_WIN_COLL_SYMMETRIC (2.27)
	WindowAlignment  = 4096 // windows are registered in whole pages

	WinStrictOrdering = 0x02 // NCCL_WIN_STRICT_ORDERING (2.29.7)

	CTAPolicyDefault    = 0x00 // NCCL_CTA_POLICY_DEFAULT (2.27)
	CTAPolicyEfficiency = 0x01 // NCCL_CTA_POLICY_EFFICIENCY (2.27)
	CTAPolicyZero       = 0x02 // NCCL_CTA_POLICY_ZERO (2.28)

	ShrinkDefault = 0x00 // NCCL_SHRINK_DEFAULT (2.27): shrink a healthy parent
	ShrinkAbort   = 0x01 // NCCL_SHRINK_ABORT (2.27): stop the parent's in-flight work first
	RevokeDefault = 0x00 // NCCL_REVOKE_DEFAULT (2.28.7), the only revoke flag
	SuspendMem    = 0x01 // NCCL_SUSPEND_MEM (2.29.7): release dynamic GPU memory
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID is ncclUniqueId: a struct, so it can be passed by value as C does.
type UniqueID struct{ Internal [UniqueIDBytes]byte }

// Version is an NCCL release.
type Version struct{ Major, Minor, Patch int }

// V is shorthand for Version{major, minor, patch}.
func V(major, minor, patch int) Version { return Version{major, minor, patch} }

// DecodeVersion reads ncclGetVersion's code: X*1000+Y*100+Z before 2.9,
// X*10000+Y*100+Z from 2.9 (2.8.4 is 2804, 2.30.7 is 23007). A code of 10000 or
// more is always the second form.
func DecodeVersion(code int) Version {
	if code < 10000 {
		return Version{code / 1000, code % 1000 / 100, code % 100}
	}
	return Version{code / 10000, code % 10000 / 100, code % 100}
}

// Code is the version code NCCL reports for v, chosen as nccl.h's NCCL_VERSION
// macro chooses: the old form while X <= 2 and Y <= 8.
func (v Version) Code() int {
	if v.Major <= 2 && v.Minor <= 8 {
		return v.Major*1000 + v.Minor*100 + v.Patch
	}
	return v.Major*10000 + v.Minor*100 + v.Patch
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= o.
func (v Version) AtLeast(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch >= o.Patch
}

// WaitSignalDesc is ncclWaitSignalDesc_t (2.29.2): how many signals to wait
// for from one peer, on one signal index and context.
type WaitSignalDesc struct {
	OpCnt  int32 // signal operations to wait for, > 0
	Peer   int32 // the rank that signals
	SigIdx int32 // signal index; NCCL 2.29-2.30 take only 0
	Ctx    int32 // context; NCCL 2.29-2.30 take only 0
}
