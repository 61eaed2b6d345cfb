package capi

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// NCCL's C functions, one Go function each, with its prototype from nccl.h
// above it: every call gonccl makes into NCCL goes through one of these, or
// launches an Op (ops.go). The row of each function in NCCLSymbols says which
// release added it.
//
// Arguments keep their C order and meaning. A handle (ncclComm_t,
// ncclWindow_t, cudaStream_t), a device address or memory outside Go's heap
// is a uintptr; a pointer into Go memory is an unsafe.Pointer or a typed
// pointer, kept alive for the call (callPtr).

// NCCL is a loaded NCCL's function table.
type NCCL struct {
	Fn  [NumNCCL]uintptr
	TD  *ThreadDevice // the CUDA runtime's guard; nil without a runtime
	Err Failures
}

// call runs function sym with arguments that hold no Go pointers and turns
// its result into an error. It allocates nothing on success.
func (t *NCCL) call(sym int, args ...uintptr) error {
	return call(t.TD, t.Err, sym, t.Fn[sym], args...)
}

// call is a table's call: function sym at fn (0: the library lacks it) on a
// thread with a device (td), its failures made by errs. Both C APIs return
// 0 for success (ncclSuccess, cudaSuccess).
func call(td *ThreadDevice, errs Failures, sym int, fn uintptr, args ...uintptr) error {
	if fn == 0 {
		return errs.Missing(sym)
	}
	r, g := td.Call(-1, fn, args...)
	if g != 0 {
		return errs.Guard(g)
	}
	if int32(r) != 0 {
		return errs.Result(sym, int32(r))
	}
	return nil
}

// callPtr is call for arguments converted from Go pointers in the argument
// list (see ccall.CallPtr).
//
//go:uintptrescapes
func (t *NCCL) callPtr(sym int, args ...uintptr) error {
	return t.call(sym, args...)
}

// structCall calls a function taking the 128-byte id by value at argument
// pos. Pointer arguments are converted in the argument list (see
// ccall.CallPtr).
//
//go:uintptrescapes
func (t *NCCL) structCall(sym, pos int, id *abi.UniqueID, args ...uintptr) error {
	fn := t.Fn[sym]
	if fn == 0 {
		return t.Err.Missing(sym)
	}
	if r := int32(ccall.CallStruct128(fn, pos, &id.Internal, args...)); r != int32(abi.Success) {
		return t.Err.Result(sym, r)
	}
	return nil
}

// raw calls a function that returns something other than ncclResult_t.
func (t *NCCL) raw(sym int, args ...uintptr) uintptr {
	return ccall.Call(t.Fn[sym], args...)
}

// ncclResult_t ncclGetVersion(int* version); fn is its address: it is
// called while loading, before a Library's table is filled.
func GetVersion(fn uintptr, version *int32) abi.Result {
	return abi.Result(int32(ccall.CallPtr(fn, uintptr(unsafe.Pointer(version)))))
}

// ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
func (t *NCCL) GetUniqueId(id *abi.UniqueID) error {
	return t.callPtr(FnGetUniqueID, uintptr(unsafe.Pointer(id)))
}

// const char* ncclGetErrorString(ncclResult_t result);
func (t *NCCL) GetErrorString(r abi.Result) uintptr {
	return t.raw(FnGetErrorString, uintptr(r))
}

// const char* ncclGetLastError(ncclComm_t comm); (comm is unused: NCCL keeps
// one buffer per process)
func (t *NCCL) GetLastError() uintptr {
	return t.raw(FnGetLastError, 0)
}

// ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
// ncclUniqueId commId, int rank, ncclConfig_t* config); commId by value.
func (t *NCCL) CommInitRankConfig(comm *uintptr, nranks int, id *abi.UniqueID, rank int, config uintptr) error {
	return t.structCall(FnCommInitRankConfig, 2, id, uintptr(unsafe.Pointer(comm)), uintptr(int32(nranks)), uintptr(int32(rank)), config)
}

// ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
func (t *NCCL) CommInitAll(comms *uintptr, ndev int, devlist *int32) error {
	return t.callPtr(FnCommInitAll, uintptr(unsafe.Pointer(comms)), uintptr(int32(ndev)), uintptr(unsafe.Pointer(devlist)))
}

// ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks,
// int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);
func (t *NCCL) CommInitRankScalable(newcomm *uintptr, nranks, myrank, nID int, commIDs *abi.UniqueID, config uintptr) error {
	return t.callPtr(FnCommInitRankScalable, uintptr(unsafe.Pointer(newcomm)), uintptr(int32(nranks)), uintptr(int32(myrank)),
		uintptr(int32(nID)), uintptr(unsafe.Pointer(commIDs)), config)
}

// ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
// ncclComm_t* newcomm, ncclConfig_t* config); newcomm outside Go's heap or
// kept by the caller (a non-blocking split writes it later).
func (t *NCCL) CommSplit(comm uintptr, color, key int, newcomm, config uintptr) error {
	return t.call(FnCommSplit, comm, uintptr(int32(color)), uintptr(int32(key)), newcomm, config)
}

// ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
// int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
func (t *NCCL) CommShrink(comm uintptr, exclude *int32, count int, newcomm, config uintptr, flags int) error {
	return t.callPtr(FnCommShrink, comm, uintptr(unsafe.Pointer(exclude)), uintptr(int32(count)), newcomm, config, uintptr(int32(flags)))
}

// ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId*
// uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config); comm 0 and
// rank >= 0 for a new rank, rank -1 for an existing one.
func (t *NCCL) CommGrow(comm uintptr, nranks int, id *abi.UniqueID, rank int, newcomm, config uintptr) error {
	return t.callPtr(FnCommGrow, comm, uintptr(int32(nranks)), uintptr(unsafe.Pointer(id)), uintptr(int32(rank)), newcomm, config)
}

// ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
func (t *NCCL) CommGetUniqueId(comm uintptr, id *abi.UniqueID) error {
	return t.callPtr(FnCommGetUniqueID, comm, uintptr(unsafe.Pointer(id)))
}

// ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
func (t *NCCL) CommRevoke(comm uintptr, flags int32) error {
	return t.call(FnCommRevoke, comm, uintptr(flags))
}

// ncclResult_t ncclCommFinalize(ncclComm_t comm);
func (t *NCCL) CommFinalize(comm uintptr) error {
	return t.call(FnCommFinalize, comm)
}

// ncclResult_t ncclCommDestroy(ncclComm_t comm);
func (t *NCCL) CommDestroy(comm uintptr) error {
	return t.call(FnCommDestroy, comm)
}

// ncclResult_t ncclCommAbort(ncclComm_t comm);
func (t *NCCL) CommAbort(comm uintptr) error {
	return t.call(FnCommAbort, comm)
}

// ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
// asyncError outside Go's heap or kept by the caller.
func (t *NCCL) CommGetAsyncError(comm uintptr, asyncError *int32) error {
	return t.call(FnCommGetAsyncError, comm, uintptr(unsafe.Pointer(asyncError)))
}

// ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
func (t *NCCL) CommCount(comm uintptr, count *int32) error {
	return t.callPtr(FnCommCount, comm, uintptr(unsafe.Pointer(count)))
}

// ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
func (t *NCCL) CommCuDevice(comm uintptr, device *int32) error {
	return t.callPtr(FnCommCuDevice, comm, uintptr(unsafe.Pointer(device)))
}

// ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
func (t *NCCL) CommUserRank(comm uintptr, rank *int32) error {
	return t.callPtr(FnCommUserRank, comm, uintptr(unsafe.Pointer(rank)))
}

// ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t* props);
func (t *NCCL) CommQueryProperties(comm uintptr, props unsafe.Pointer) error {
	return t.callPtr(FnCommQueryProperties, comm, uintptr(props))
}

// ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
func (t *NCCL) CommSuspend(comm uintptr, flags int32) error {
	return t.call(FnCommSuspend, comm, uintptr(flags))
}

// ncclResult_t ncclCommResume(ncclComm_t comm);
func (t *NCCL) CommResume(comm uintptr) error {
	return t.call(FnCommResume, comm)
}

// ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
func (t *NCCL) CommMemStats(comm uintptr, stat int32, value *uint64) error {
	return t.callPtr(FnCommMemStats, comm, uintptr(stat), uintptr(unsafe.Pointer(value)))
}

// ncclResult_t ncclGroupStart();
func (t *NCCL) GroupStart() error {
	return t.call(FnGroupStart)
}

// ncclResult_t ncclGroupEnd();
func (t *NCCL) GroupEnd() error {
	return t.call(FnGroupEnd)
}

// ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, NULL, NULL): NCCL refuses
// it ("comm argument is NULL") and keeps the failure for the thread's open
// group, which ncclGroupEnd then discards (see groupEnd).
func (t *NCCL) AllReduceOnNoComm() error {
	return t.call(FnAllReduce, 0, 0, 0, uintptr(abi.Float32), uintptr(abi.Sum), 0, 0)
}

// ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
// ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
// scalar: a device address, or host memory NCCL reads in the call.
func (t *NCCL) RedOpCreatePreMulSum(op *abi.RedOp, scalar uintptr, dt abi.DataType, residence int32, comm uintptr) error {
	return t.callPtr(FnRedOpCreatePreMulSum, uintptr(unsafe.Pointer(op)), scalar, uintptr(dt), uintptr(residence), comm)
}

// ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
func (t *NCCL) RedOpDestroy(op abi.RedOp, comm uintptr) error {
	return t.call(FnRedOpDestroy, uintptr(op), comm)
}

// ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
func (t *NCCL) CommRegister(comm uintptr, buff uintptr, size uintptr, handle *uintptr) error {
	return t.callPtr(FnCommRegister, comm, uintptr(buff), size, uintptr(unsafe.Pointer(handle)))
}

// ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
func (t *NCCL) CommDeregister(comm, handle uintptr) error {
	return t.call(FnCommDeregister, comm, handle)
}

// ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
// ncclWindow_t* win, int winFlags);
func (t *NCCL) CommWindowRegister(comm uintptr, buff uintptr, size uintptr, win *uintptr, flags int32) error {
	return t.callPtr(FnCommWindowRegister, comm, uintptr(buff), size, uintptr(unsafe.Pointer(win)), uintptr(flags))
}

// ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
func (t *NCCL) CommWindowDeregister(comm, win uintptr) error {
	return t.call(FnCommWindowDeregister, comm, win)
}

// ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
func (t *NCCL) WinGetUserPtr(comm, win uintptr, out *uintptr) error {
	return t.callPtr(FnWinGetUserPtr, comm, win, uintptr(unsafe.Pointer(out)))
}

// ncclResult_t ncclMemAlloc(void** ptr, size_t size);
func (t *NCCL) MemAlloc(ptr *uintptr, size uintptr) error {
	return t.callPtr(FnMemAlloc, uintptr(unsafe.Pointer(ptr)), size)
}

// ncclResult_t ncclMemFree(void* ptr);
func (t *NCCL) MemFree(ptr uintptr) error {
	return t.call(FnMemFree, uintptr(ptr))
}

// ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key);
func (t *NCCL) ParamBind(out *uintptr, key *byte) error {
	return t.callPtr(FnParamBind, uintptr(unsafe.Pointer(out)), uintptr(unsafe.Pointer(key)))
}

// ncclResult_t ncclParamGet{I8,I16,I32,I64,U8,U16,U32,U64}(ncclParamHandle_t
// handle, T* out); which is sym.
func (t *NCCL) ParamGetInt(sym int, handle uintptr, out unsafe.Pointer) error {
	return t.callPtr(sym, handle, uintptr(out))
}

// ncclResult_t ncclParamGetStr(ncclParamHandle_t handle, const char** out);
func (t *NCCL) ParamGetStr(handle uintptr, out *uintptr) error {
	return t.callPtr(FnParamGetStr, handle, uintptr(unsafe.Pointer(out)))
}

// ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen);
func (t *NCCL) ParamGetParameter(key *byte, value *uintptr, valueLen *int32) error {
	return t.callPtr(FnParamGetParameter, uintptr(unsafe.Pointer(key)), uintptr(unsafe.Pointer(value)), uintptr(unsafe.Pointer(valueLen)))
}

// ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
func (t *NCCL) ParamGetAllParameterKeys(table *uintptr, tableLen *int32) error {
	return t.callPtr(FnParamGetAllParameterKeys, uintptr(unsafe.Pointer(table)), uintptr(unsafe.Pointer(tableLen)))
}

// Call runs function sym, chosen at run time (a group's end), with arguments
// that hold no Go pointers.
func (t *NCCL) Call(sym int, args ...uintptr) error {
	return t.call(sym, args...)
}
