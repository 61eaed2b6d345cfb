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
// # Threads
//
// Two pieces of CUDA and NCCL state belong to the OS thread: the current device
// and NCCL's group depth. Goroutines move between threads, so gonccl pins them
// for the user: communicator creation runs on a locked thread with the
// communicator's device current (the previous device is restored), and Group runs
// ncclGroupStart, the operations and ncclGroupEnd on one locked thread.
//
// Safe from any goroutine: every method of Library, CUDA and Comm. Stream
// operations (AllReduce, Send, ...) only enqueue work on a CUDA stream; they never
// synchronise. CUDA.SetDevice and CUDA.Device act on the calling thread and mean
// something only on a thread the caller has locked; CUDA.OnDevice is the safe form.
//
// # Errors
//
// NCCL failures are *Error values carrying the C function, the ncclResult_t and
// NCCL's last-error text; errors.Is matches them against ErrInvalidArgument,
// ErrInvalidUsage and the other sentinels. A destroyed or aborted communicator
// returns an error matching ErrClosed instead of reaching NCCL. A function the
// loaded library lacks returns an error matching ErrNotSupported that names the
// file, its version and the version required.
//
// The typed layer (element types, validated buffers, all-to-all-v on any NCCL)
// lives in package collectives; package abi mirrors the C types.
package nccl
