package capi

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
)

// NCCL's stream operations, one constructor each, with its prototype from
// nccl.h above it. A constructor fills the caller's Op (declared on its
// stack: filled in place, the Op is neither copied nor zeroed twice, which
// BenchmarkAllReduceGonccl in internal/cgobench sees) and only describes
// the call: the package above
// admits it against Close and Abort, records it inside a Group, or launches
// it (Launch), which is why none of them calls C here.

// MaxOpArgs is the most arguments a stream operation takes (ncclPutSignal).
const MaxOpArgs = 11

// CommArg stands for the ncclComm_t argument of a stream operation: the
// package above writes the communicator's handle there once it has admitted
// the call. Every operation's last two arguments are the communicator and the
// stream.
const CommArg = 0

// Op is one stream operation's C call: the function and its arguments in C
// order.
type Op struct {
	Sym int
	N   int // arguments used in A
	A   [MaxOpArgs]uintptr
}

// ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
func AllReduce(o *Op, send, recv uintptr, count int, dt abi.DataType, op abi.RedOp, stream uintptr) {
	o.Sym, o.N = FnAllReduce, 7
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6] = send, recv, uintptr(count), uintptr(dt), uintptr(op), CommArg, stream
}

// ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func Broadcast(o *Op, send, recv uintptr, count int, dt abi.DataType, root int, stream uintptr) {
	o.Sym, o.N = FnBroadcast, 7
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6] = send, recv, uintptr(count), uintptr(dt), uintptr(int32(root)), CommArg, stream
}

// ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
func Reduce(o *Op, send, recv uintptr, count int, dt abi.DataType, op abi.RedOp, root int, stream uintptr) {
	o.Sym, o.N = FnReduce, 8
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6], o.A[7] = send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(int32(root)), CommArg, stream
}

// ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func AllGather(o *Op, send, recv uintptr, sendcount int, dt abi.DataType, stream uintptr) {
	o.Sym, o.N = FnAllGather, 6
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5] = send, recv, uintptr(sendcount), uintptr(dt), CommArg, stream
}

// ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
// ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
func ReduceScatter(o *Op, send, recv uintptr, recvcount int, dt abi.DataType, op abi.RedOp, stream uintptr) {
	o.Sym, o.N = FnReduceScatter, 7
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6] = send, recv, uintptr(recvcount), uintptr(dt), uintptr(op), CommArg, stream
}

// ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func AlltoAll(o *Op, send, recv uintptr, count int, dt abi.DataType, stream uintptr) {
	o.Sym, o.N = FnAlltoAll, 6
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5] = send, recv, uintptr(count), uintptr(dt), CommArg, stream
}

// ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func Gather(o *Op, send, recv uintptr, count int, dt abi.DataType, root int, stream uintptr) {
	o.Sym, o.N = FnGather, 7
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6] = send, recv, uintptr(count), uintptr(dt), uintptr(int32(root)), CommArg, stream
}

// ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func Scatter(o *Op, send, recv uintptr, count int, dt abi.DataType, root int, stream uintptr) {
	o.Sym, o.N = FnScatter, 7
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6] = send, recv, uintptr(count), uintptr(dt), uintptr(int32(root)), CommArg, stream
}

// ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
// int peer, ncclComm_t comm, cudaStream_t stream);
func Send(o *Op, send uintptr, count int, dt abi.DataType, peer int, stream uintptr) {
	o.Sym, o.N = FnSend, 6
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5] = send, uintptr(count), uintptr(dt), uintptr(int32(peer)), CommArg, stream
}

// ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
// int peer, ncclComm_t comm, cudaStream_t stream);
func Recv(o *Op, recv uintptr, count int, dt abi.DataType, peer int, stream uintptr) {
	o.Sym, o.N = FnRecv, 6
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5] = recv, uintptr(count), uintptr(dt), uintptr(int32(peer)), CommArg, stream
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
func AlltoAllv11(o *Op, send uintptr, sc, sd uintptr, recv uintptr, rc, rd, relay uintptr, relaycount int, dt abi.DataType, stream uintptr) {
	o.Sym, o.N = FnAlltoAllv, 11
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6], o.A[7], o.A[8], o.A[9], o.A[10] = send, sc, sd, recv, rc, rd, relay, uintptr(relaycount), uintptr(dt), CommArg, stream
}

// Jan 2026, 10 arguments:
// ncclResult_t ncclAlltoAllv(const void* sendbuff, const size_t* sendcounts,
// const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
// const size_t* rdispls, const void* relaybuff, ncclDataType_t datatype,
// ncclComm_t comm, cudaStream_t stream);
func AlltoAllv10(o *Op, send uintptr, sc, sd uintptr, recv uintptr, rc, rd, relay uintptr, dt abi.DataType, stream uintptr) {
	o.Sym, o.N = FnAlltoAllv, 10
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6], o.A[7], o.A[8], o.A[9] = send, sc, sd, recv, rc, rd, relay, uintptr(dt), CommArg, stream
}

// ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t
// datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
// int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
func PutSignal(o *Op, local uintptr, count int, dt abi.DataType, peer int, peerWin, peerWinOffset uintptr, sigIdx, ctx int32, flags uint32, stream uintptr) {
	o.Sym, o.N = FnPutSignal, 11
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5], o.A[6], o.A[7], o.A[8], o.A[9], o.A[10] = local, uintptr(count), uintptr(dt), uintptr(int32(peer)), peerWin, peerWinOffset, uintptr(sigIdx), uintptr(ctx), uintptr(flags), CommArg, stream
}

// ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
// ncclComm_t comm, cudaStream_t stream);
func Signal(o *Op, peer int, sigIdx, ctx int32, flags uint32, stream uintptr) {
	o.Sym, o.N = FnSignal, 6
	o.A[0], o.A[1], o.A[2], o.A[3], o.A[4], o.A[5] = uintptr(int32(peer)), uintptr(sigIdx), uintptr(ctx), uintptr(flags), CommArg, stream
}

// ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs,
// ncclComm_t comm, cudaStream_t stream); the descriptors are Go memory the
// caller keeps pinned until NCCL has read them.
func WaitSignal(o *Op, nDesc int, descs unsafe.Pointer, stream uintptr) {
	o.Sym, o.N = FnWaitSignal, 4
	o.A[0], o.A[1], o.A[2], o.A[3] = uintptr(int32(nDesc)), uintptr(descs), CommArg, stream
}
