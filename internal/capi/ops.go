package capi

import (
	"unsafe"

	"github.com/gonccl/nccl/abi"
)

// NCCL's stream operations, one constructor each, with its prototype from
// nccl.h above it. A constructor only describes the call: the package above
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
func AllReduce(send, recv uintptr, count int, dt abi.DataType, op abi.RedOp, stream uintptr) Op {
	return Op{Sym: FnAllReduce, N: 7, A: [MaxOpArgs]uintptr{send, recv, uintptr(count), uintptr(dt), uintptr(op), CommArg, stream}}
}

// ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func Broadcast(send, recv uintptr, count int, dt abi.DataType, root int, stream uintptr) Op {
	return Op{Sym: FnBroadcast, N: 7, A: [MaxOpArgs]uintptr{send, recv, uintptr(count), uintptr(dt), uintptr(int32(root)), CommArg, stream}}
}

// ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
func Reduce(send, recv uintptr, count int, dt abi.DataType, op abi.RedOp, root int, stream uintptr) Op {
	return Op{Sym: FnReduce, N: 8, A: [MaxOpArgs]uintptr{send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(int32(root)), CommArg, stream}}
}

// ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func AllGather(send, recv uintptr, sendcount int, dt abi.DataType, stream uintptr) Op {
	return Op{Sym: FnAllGather, N: 6, A: [MaxOpArgs]uintptr{send, recv, uintptr(sendcount), uintptr(dt), CommArg, stream}}
}

// ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
// ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
func ReduceScatter(send, recv uintptr, recvcount int, dt abi.DataType, op abi.RedOp, stream uintptr) Op {
	return Op{Sym: FnReduceScatter, N: 7, A: [MaxOpArgs]uintptr{send, recv, uintptr(recvcount), uintptr(dt), uintptr(op), CommArg, stream}}
}

// ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
func AlltoAll(send, recv uintptr, count int, dt abi.DataType, stream uintptr) Op {
	return Op{Sym: FnAlltoAll, N: 6, A: [MaxOpArgs]uintptr{send, recv, uintptr(count), uintptr(dt), CommArg, stream}}
}

// ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func Gather(send, recv uintptr, count int, dt abi.DataType, root int, stream uintptr) Op {
	return Op{Sym: FnGather, N: 7, A: [MaxOpArgs]uintptr{send, recv, uintptr(count), uintptr(dt), uintptr(int32(root)), CommArg, stream}}
}

// ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
func Scatter(send, recv uintptr, count int, dt abi.DataType, root int, stream uintptr) Op {
	return Op{Sym: FnScatter, N: 7, A: [MaxOpArgs]uintptr{send, recv, uintptr(count), uintptr(dt), uintptr(int32(root)), CommArg, stream}}
}

// ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
// int peer, ncclComm_t comm, cudaStream_t stream);
func Send(send uintptr, count int, dt abi.DataType, peer int, stream uintptr) Op {
	return Op{Sym: FnSend, N: 6, A: [MaxOpArgs]uintptr{send, uintptr(count), uintptr(dt), uintptr(int32(peer)), CommArg, stream}}
}

// ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
// int peer, ncclComm_t comm, cudaStream_t stream);
func Recv(recv uintptr, count int, dt abi.DataType, peer int, stream uintptr) Op {
	return Op{Sym: FnRecv, N: 6, A: [MaxOpArgs]uintptr{recv, uintptr(count), uintptr(dt), uintptr(int32(peer)), CommArg, stream}}
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
func AlltoAllv11(send uintptr, sc, sd uintptr, recv uintptr, rc, rd, relay uintptr, relaycount int, dt abi.DataType, stream uintptr) Op {
	return Op{Sym: FnAlltoAllv, N: 11, A: [MaxOpArgs]uintptr{send, sc, sd, recv, rc, rd, relay, uintptr(relaycount), uintptr(dt), CommArg, stream}}
}

// Jan 2026, 10 arguments:
// ncclResult_t ncclAlltoAllv(const void* sendbuff, const size_t* sendcounts,
// const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
// const size_t* rdispls, const void* relaybuff, ncclDataType_t datatype,
// ncclComm_t comm, cudaStream_t stream);
func AlltoAllv10(send uintptr, sc, sd uintptr, recv uintptr, rc, rd, relay uintptr, dt abi.DataType, stream uintptr) Op {
	return Op{Sym: FnAlltoAllv, N: 10, A: [MaxOpArgs]uintptr{send, sc, sd, recv, rc, rd, relay, uintptr(dt), CommArg, stream}}
}

// ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t
// datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
// int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
func PutSignal(local uintptr, count int, dt abi.DataType, peer int, peerWin, peerWinOffset uintptr, sigIdx, ctx int32, flags uint32, stream uintptr) Op {
	return Op{Sym: FnPutSignal, N: 11, A: [MaxOpArgs]uintptr{local, uintptr(count), uintptr(dt), uintptr(int32(peer)), peerWin, peerWinOffset, uintptr(sigIdx), uintptr(ctx), uintptr(flags), CommArg, stream}}
}

// ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
// ncclComm_t comm, cudaStream_t stream);
func Signal(peer int, sigIdx, ctx int32, flags uint32, stream uintptr) Op {
	return Op{Sym: FnSignal, N: 6, A: [MaxOpArgs]uintptr{uintptr(int32(peer)), uintptr(sigIdx), uintptr(ctx), uintptr(flags), CommArg, stream}}
}

// ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs,
// ncclComm_t comm, cudaStream_t stream); the descriptors are Go memory the
// caller keeps pinned until NCCL has read them.
func WaitSignal(nDesc int, descs unsafe.Pointer, stream uintptr) Op {
	return Op{Sym: FnWaitSignal, N: 4, A: [MaxOpArgs]uintptr{uintptr(int32(nDesc)), uintptr(descs), CommArg, stream}}
}
