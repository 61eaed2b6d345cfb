// Package nccl binds NVIDIA NCCL (and forks such as VCCL) for Go without cgo.
//
// gonccl opens libnccl.so.2 and the CUDA runtime (libcudart.so) at run time with
// dlopen, so programs build with CGO_ENABLED=0, need no NCCL headers or libraries
// at build time, and one source cross-compiles for linux/amd64 and linux/arm64.
//
// # Loading
//
// Open searches for the libraries in a documented order (an explicit option, then
// GONCCL_NCCL_LIB / GONCCL_CUDART_LIB, then NUMBA_NCCLLIB, NCCL_HOME, a Python
// virtualenv's NVIDIA wheels, CONDA_PREFIX, a copy already loaded, the system
// loader, and CUDA_HOME / CUDA_PATH for the runtime). The result says which file
// was mapped (Library.Path), how it was found (Library.Via), every candidate tried
// (Library.Trace), the version, and which optional functions the library has
// (Library.Features). Swapping NCCL for a VCCL build is one environment variable:
//
//	GONCCL_NCCL_LIB=/opt/vccl/lib ./trainer
//
// # Communicators and operations
//
// Library.InitRank (and InitRankScalable, InitAll, Comm.Split) makes a Comm;
// each takes a context, which ends a wait for ranks that never arrive. Every
// operation is one method of Comm taking Buffers, which carry their element
// type, length and device (CUDA.Alloc, CUDA.Wrap, Comm.AllocSymmetric), and a
// Stream: AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll,
// Gather, Scatter, Send, Recv, AlltoAllv. Operations check their arguments before
// any C call, enqueue work on the stream and return; Comm.Wait waits for it
// under a context. Comm.Close finalizes and frees a communicator; Comm.Abort
// ends it at once from any goroutine.
//
// # Threads
//
// Two pieces of CUDA and NCCL state belong to the OS thread: the current device
// and NCCL's group. Goroutines move between threads, so gonccl pins them for the
// user: calls that need a device run on a locked thread with the device of the
// memory, stream or communicator they act on current (the previous device is
// restored), and Group records the operations its function issues and, once
// the function has succeeded, runs ncclGroupStart, the operations and
// ncclGroupEnd on one locked thread (a failed function leaves nothing behind).
// No method depends on the calling thread's current device.
//
// Operations on one communicator, and on all communicators of one device, come
// from one goroutine at a time, as NCCL requires; Abort, Wait and AsyncError
// are safe from any goroutine at any moment (see Comm).
//
// # Errors
//
// NCCL failures are *Error values carrying the C function, the ncclResult_t and
// NCCL's last-error text; errors.Is matches them against ErrInvalidArgument,
// ErrInvalidUsage and the other sentinels. Arguments gonccl refuses before any C
// call are *Error values matching ErrInvalidArgument. A closed or aborted
// communicator returns an error matching ErrClosed instead of reaching NCCL. A
// function the loaded library lacks returns an error matching ErrNotSupported
// that names the file, its version and the version required. A wait a context
// ended returns an error wrapping ctx.Err().
//
// Package collectives computes on the host what each collective produces, the
// reference tests check results against; package launch reads a process's place
// in a job from mpirun, srun or torchrun; package abi mirrors the C types.
package nccl
