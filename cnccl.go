package nccl

import (
	"unsafe"

	"github.com/gonccl/nccl/internal/ccall"
)

// NCCL's C functions, one Go function each, with its prototype from nccl.h
// above it: every call gonccl makes into NCCL goes through one of these
// (except the group replay, which calls what Group recorded). The row of
// each function in symbols.go says which release added it.
//
// Arguments keep their C order and meaning. A handle (ncclComm_t,
// ncclWindow_t, cudaStream_t), a device address or memory outside Go's heap
// is a uintptr; a pointer into Go memory is an unsafe.Pointer, kept alive
// for the call (callPtr). Stream operations are methods of Comm: their
// ncclComm_t argument is filled in by Comm.stream once the call is admitted
// (it stands as commArg here), and inside a Group they are recorded instead.

// commArg stands for the ncclComm_t argument of a stream operation: Comm.stream
// writes the communicator's handle there once it has admitted the call.
const commArg = 0

// ncclResult_t ncclGetVersion(int* version); fn is its address: it is
// called while loading, before a Library's table is filled.
func ncclGetVersion(fn uintptr, version *int32) Result {
	return Result(int32(ccall.CallPtr(fn, uintptr(unsafe.Pointer(version)))))
}

// ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
func (l *Library) ncclGetUniqueId(id *UniqueID) error {
	return l.callPtr(fnGetUniqueID, uintptr(unsafe.Pointer(id)))
}

// const char* ncclGetErrorString(ncclResult_t result);
func (l *Library) ncclGetErrorString(r Result) uintptr {
	return l.raw(fnGetErrorString, uintptr(r))
}

// const char* ncclGetLastError(ncclComm_t comm); (comm is unused: NCCL keeps
// one buffer per process)
func (l *Library) ncclGetLastError() uintptr {
	return l.raw(fnGetLastError, 0)
}

// ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
// ncclUniqueId commId, int rank, ncclConfig_t* config); commId by value.
func (l *Library) ncclCommInitRankConfig(comm *uintptr, nranks int, id *UniqueID, rank int, config uintptr) error {
	return l.structCall(fnCommInitRankConfig, 2, id, uintptr(unsafe.Pointer(comm)), uintptr(int32(nranks)), uintptr(int32(rank)), config)
}

// ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
func (l *Library) ncclCommInitAll(comms *uintptr, ndev int, devlist *int32) error {
	return l.callPtr(fnCommInitAll, uintptr(unsafe.Pointer(comms)), uintptr(int32(ndev)), uintptr(unsafe.Pointer(devlist)))
}

// ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks,
// int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);
func (l *Library) ncclCommInitRankScalable(newcomm *uintptr, nranks, myrank, nID int, commIDs *UniqueID, config uintptr) error {
	return l.callPtr(fnCommInitRankScalable, uintptr(unsafe.Pointer(newcomm)), uintptr(int32(nranks)), uintptr(int32(myrank)),
		uintptr(int32(nID)), uintptr(unsafe.Pointer(commIDs)), config)
}

// ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
// ncclComm_t* newcomm, ncclConfig_t* config); newcomm outside Go's heap or
// kept by the caller (a non-blocking split writes it later).
func (l *Library) ncclCommSplit(comm uintptr, color, key int, newcomm, config uintptr) error {
	return l.call(fnCommSplit, comm, uintptr(int32(color)), uintptr(int32(key)), newcomm, config)
}

// ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
// int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
func (l *Library) ncclCommShrink(comm uintptr, exclude *int32, count int, newcomm, config uintptr, flags int) error {
	return l.callPtr(fnCommShrink, comm, uintptr(unsafe.Pointer(exclude)), uintptr(int32(count)), newcomm, config, uintptr(int32(flags)))
}

// ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId*
// uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config); comm 0 and
// rank >= 0 for a new rank, rank -1 for an existing one.
func (l *Library) ncclCommGrow(comm uintptr, nranks int, id *UniqueID, rank int, newcomm, config uintptr) error {
	return l.callPtr(fnCommGrow, comm, uintptr(int32(nranks)), uintptr(unsafe.Pointer(id)), uintptr(int32(rank)), newcomm, config)
}

// ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
func (l *Library) ncclCommGetUniqueId(comm uintptr, id *UniqueID) error {
	return l.callPtr(fnCommGetUniqueID, comm, uintptr(unsafe.Pointer(id)))
}

// ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
func (l *Library) ncclCommRevoke(comm uintptr, flags int32) error {
	return l.call(fnCommRevoke, comm, uintptr(flags))
}

// ncclResult_t ncclCommFinalize(ncclComm_t comm);
func (l *Library) ncclCommFinalize(comm uintptr) error {
	return l.call(fnCommFinalize, comm)
}

// ncclResult_t ncclCommDestroy(ncclComm_t comm);
func (l *Library) ncclCommDestroy(comm uintptr) error {
	return l.call(fnCommDestroy, comm)
}

// ncclResult_t ncclCommAbort(ncclComm_t comm);
func (l *Library) ncclCommAbort(comm uintptr) error {
	return l.call(fnCommAbort, comm)
}

// ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
// asyncError outside Go's heap or kept by the caller.
func (l *Library) ncclCommGetAsyncError(comm uintptr, asyncError *int32) error {
	return l.call(fnCommGetAsyncError, comm, uintptr(unsafe.Pointer(asyncError)))
}

// ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
func (l *Library) ncclCommCount(comm uintptr, count *int32) error {
	return l.callPtr(fnCommCount, comm, uintptr(unsafe.Pointer(count)))
}

// ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
func (l *Library) ncclCommCuDevice(comm uintptr, device *int32) error {
	return l.callPtr(fnCommCuDevice, comm, uintptr(unsafe.Pointer(device)))
}

// ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
func (l *Library) ncclCommUserRank(comm uintptr, rank *int32) error {
	return l.callPtr(fnCommUserRank, comm, uintptr(unsafe.Pointer(rank)))
}

// ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t* props);
func (l *Library) ncclCommQueryProperties(comm uintptr, props unsafe.Pointer) error {
	return l.callPtr(fnCommQueryProperties, comm, uintptr(props))
}

// ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
func (l *Library) ncclCommSuspend(comm uintptr, flags int32) error {
	return l.call(fnCommSuspend, comm, uintptr(flags))
}

// ncclResult_t ncclCommResume(ncclComm_t comm);
func (l *Library) ncclCommResume(comm uintptr) error {
	return l.call(fnCommResume, comm)
}

// ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
func (l *Library) ncclCommMemStats(comm uintptr, stat int32, value *uint64) error {
	return l.callPtr(fnCommMemStats, comm, uintptr(stat), uintptr(unsafe.Pointer(value)))
}

// ncclResult_t ncclGroupStart();
func (l *Library) ncclGroupStart() error {
	return l.call(fnGroupStart)
}

// ncclResult_t ncclGroupEnd();
func (l *Library) ncclGroupEnd() error {
	return l.call(fnGroupEnd)
}

// ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, NULL, NULL): NCCL refuses
// it ("comm argument is NULL") and keeps the failure for the thread's open
// group, which ncclGroupEnd then discards (see groupEnd).
func (l *Library) ncclAllReduceOnNoComm() error {
	return l.call(fnAllReduce, 0, 0, 0, uintptr(Float32), uintptr(Sum), 0, 0)
}

// ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
// ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
// scalar: a device address, or host memory NCCL reads in the call.
func (l *Library) ncclRedOpCreatePreMulSum(op *RedOp, scalar uintptr, dt DataType, residence int32, comm uintptr) error {
	return l.callPtr(fnRedOpCreatePreMulSum, uintptr(unsafe.Pointer(op)), scalar, uintptr(dt), uintptr(residence), comm)
}

// ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
func (l *Library) ncclRedOpDestroy(op RedOp, comm uintptr) error {
	return l.call(fnRedOpDestroy, uintptr(op), comm)
}

// ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
func (l *Library) ncclCommRegister(comm uintptr, buff DevicePtr, size uintptr, handle *uintptr) error {
	return l.callPtr(fnCommRegister, comm, uintptr(buff), size, uintptr(unsafe.Pointer(handle)))
}

// ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
func (l *Library) ncclCommDeregister(comm, handle uintptr) error {
	return l.call(fnCommDeregister, comm, handle)
}

// ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
// ncclWindow_t* win, int winFlags);
func (l *Library) ncclCommWindowRegister(comm uintptr, buff DevicePtr, size uintptr, win *uintptr, flags int32) error {
	return l.callPtr(fnCommWindowRegister, comm, uintptr(buff), size, uintptr(unsafe.Pointer(win)), uintptr(flags))
}

// ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
func (l *Library) ncclCommWindowDeregister(comm, win uintptr) error {
	return l.call(fnCommWindowDeregister, comm, win)
}

// ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
func (l *Library) ncclWinGetUserPtr(comm, win uintptr, out *uintptr) error {
	return l.callPtr(fnWinGetUserPtr, comm, win, uintptr(unsafe.Pointer(out)))
}

// ncclResult_t ncclMemAlloc(void** ptr, size_t size);
func (l *Library) ncclMemAlloc(ptr *DevicePtr, size uintptr) error {
	return l.callPtr(fnMemAlloc, uintptr(unsafe.Pointer(ptr)), size)
}

// ncclResult_t ncclMemFree(void* ptr);
func (l *Library) ncclMemFree(ptr DevicePtr) error {
	return l.call(fnMemFree, uintptr(ptr))
}

// ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key);
func (l *Library) ncclParamBind(out *uintptr, key *byte) error {
	return l.callPtr(fnParamBind, uintptr(unsafe.Pointer(out)), uintptr(unsafe.Pointer(key)))
}

// ncclResult_t ncclParamGet{I8,I16,I32,I64,U8,U16,U32,U64}(ncclParamHandle_t
// handle, T* out); which is sym.
func (l *Library) ncclParamGetInt(sym int, handle uintptr, out unsafe.Pointer) error {
	return l.callPtr(sym, handle, uintptr(out))
}

// ncclResult_t ncclParamGetStr(ncclParamHandle_t handle, const char** out);
func (l *Library) ncclParamGetStr(handle uintptr, out *uintptr) error {
	return l.callPtr(fnParamGetStr, handle, uintptr(unsafe.Pointer(out)))
}

// ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen);
func (l *Library) ncclParamGetParameter(key *byte, value *uintptr, valueLen *int32) error {
	return l.callPtr(fnParamGetParameter, uintptr(unsafe.Pointer(key)), uintptr(unsafe.Pointer(value)), uintptr(unsafe.Pointer(valueLen)))
}

// ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
func (l *Library) ncclParamGetAllParameterKeys(table *uintptr, tableLen *int32) error {
	return l.callPtr(fnParamGetAllParameterKeys, uintptr(unsafe.Pointer(table)), uintptr(unsafe.Pointer(tableLen)))
}

// Stream operations.

// ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclAllReduce(send, recv DevicePtr, count int, dt DataType, op RedOp, stream uintptr) error {
	return c.stream(fnAllReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), commArg, stream)
}

// ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclBroadcast(send, recv DevicePtr, count int, dt DataType, root int, stream uintptr) error {
	return c.stream(fnBroadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(root)), commArg, stream)
}

// ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclReduce(send, recv DevicePtr, count int, dt DataType, op RedOp, root int, stream uintptr) error {
	return c.stream(fnReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(int32(root)), commArg, stream)
}

// ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclAllGather(send, recv DevicePtr, sendcount int, dt DataType, stream uintptr) error {
	return c.stream(fnAllGather, uintptr(send), uintptr(recv), uintptr(sendcount), uintptr(dt), commArg, stream)
}

// ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
// ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclReduceScatter(send, recv DevicePtr, recvcount int, dt DataType, op RedOp, stream uintptr) error {
	return c.stream(fnReduceScatter, uintptr(send), uintptr(recv), uintptr(recvcount), uintptr(dt), uintptr(op), commArg, stream)
}

// ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclAlltoAll(send, recv DevicePtr, count int, dt DataType, stream uintptr) error {
	return c.stream(fnAlltoAll, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), commArg, stream)
}

// ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclGather(send, recv DevicePtr, count int, dt DataType, root int, stream uintptr) error {
	return c.stream(fnGather, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(root)), commArg, stream)
}

// ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclScatter(send, recv DevicePtr, count int, dt DataType, root int, stream uintptr) error {
	return c.stream(fnScatter, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(root)), commArg, stream)
}

// ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
// int peer, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclSend(send DevicePtr, count int, dt DataType, peer int, stream uintptr) error {
	return c.stream(fnSend, uintptr(send), uintptr(count), uintptr(dt), uintptr(int32(peer)), commArg, stream)
}

// ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
// int peer, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclRecv(recv DevicePtr, count int, dt DataType, peer int, stream uintptr) error {
	return c.stream(fnRecv, uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(peer)), commArg, stream)
}

// VCCL's ncclAlltoAllv, in the two forms that both report 2.29.2 (see
// alltoallv.go). The count and displacement arrays are host size_t arrays
// that the library reads until the group ends: the caller pins them.
//
// Current (Feb 2026), 11 arguments:
// ncclResult_t ncclAlltoAllv(const void* sendbuff, const size_t* sendcounts,
// const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
// const size_t* rdispls, void* relaybuff, size_t relaycount,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclAlltoAllv11(send DevicePtr, sc, sd uintptr, recv DevicePtr, rc, rd, relay uintptr, relaycount int, dt DataType, stream uintptr) error {
	return c.stream(fnAlltoAllv, uintptr(send), sc, sd, uintptr(recv), rc, rd, relay, uintptr(relaycount), uintptr(dt), commArg, stream)
}

// Jan 2026, 10 arguments:
// ncclResult_t ncclAlltoAllv(const void* sendbuff, const size_t* sendcounts,
// const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
// const size_t* rdispls, const void* relaybuff, ncclDataType_t datatype,
// ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclAlltoAllv10(send DevicePtr, sc, sd uintptr, recv DevicePtr, rc, rd, relay uintptr, dt DataType, stream uintptr) error {
	return c.stream(fnAlltoAllv, uintptr(send), sc, sd, uintptr(recv), rc, rd, relay, uintptr(dt), commArg, stream)
}

// ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t
// datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
// int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclPutSignal(local DevicePtr, count int, dt DataType, peer int, peerWin, peerWinOffset uintptr, sigIdx, ctx int32, flags uint32, stream uintptr) error {
	return c.stream(fnPutSignal, uintptr(local), uintptr(count), uintptr(dt), uintptr(int32(peer)), peerWin, peerWinOffset,
		uintptr(sigIdx), uintptr(ctx), uintptr(flags), commArg, stream)
}

// ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
// ncclComm_t comm, cudaStream_t stream);
func (c *Comm) ncclSignal(peer int, sigIdx, ctx int32, flags uint32, stream uintptr) error {
	return c.stream(fnSignal, uintptr(int32(peer)), uintptr(sigIdx), uintptr(ctx), uintptr(flags), commArg, stream)
}

// ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs,
// ncclComm_t comm, cudaStream_t stream); the descriptors are Go memory the
// caller keeps pinned until NCCL has read them.
func (c *Comm) ncclWaitSignal(nDesc int, descs unsafe.Pointer, stream uintptr) error {
	return c.stream(fnWaitSignal, uintptr(int32(nDesc)), uintptr(descs), commArg, stream)
}

// raw calls an NCCL function that returns something other than
// ncclResult_t.
func (l *Library) raw(sym int, args ...uintptr) uintptr {
	return ccall.Call(l.fn[sym], args...)
}
