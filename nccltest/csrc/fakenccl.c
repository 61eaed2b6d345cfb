/* A fake NCCL for gonccl's tests, over the fake CUDA runtime (fakecudart.c).
 *
 * It behaves like NCCL where a binding can go wrong: the unique id travels by
 * value and is checked byte for byte; ncclCommInitRank blocks until every rank
 * has joined; operations are checked with NCCL's result codes and last-error
 * text, then run later on the stream's worker thread, meeting the other ranks'
 * workers; group depth and pending operations belong to the calling thread;
 * results are exact for every data type and reduction.
 *
 * Ranks in different processes meet as NCCL's bootstrap makes them, over
 * loopback TCP. The id carries the rendezvous address and the pid of the
 * process that made it: ncclGetUniqueId starts a root in this process (one
 * listening socket and thread per process, shared by its ids), and with
 * NCCL_COMM_ID=host:port rank 0's init listens at that address until every
 * rank has joined ("Call to bind failed: Address already in use" if it can't).
 * The process serving the rendezvous is the hub: its own ranks meet as ranks
 * of one process always did, and each rank of another process is a proxy
 * communicator there, fed over that rank's TCP connection: its collectives
 * send their input and get their output back, computed at the hub by the same
 * code, so results stay exact; point-to-point batches, splits and the
 * rendezvous of symmetric windows go the same way. A clique made by
 * ncclCommSplit lives in the process of its new rank 0 (NCCL bootstraps a
 * split from the new root). The hub carries its remote ranks' traffic: its
 * own ranks end an operation only once the remote ranks have their answers,
 * and its Finalize/Destroy lets the last answers (and one-sided puts and
 * signals still held for remote ranks) leave, up to 2 s, since the process
 * may exit next; it must outlive the work of its cliques. A peer's death is
 * detected only across nodes, as NCCL's network transport sees a closed
 * socket where SHM and P2P see nothing: each rank brings its node (its
 * NCCL_HOSTID, else its host name) when it joins, and a rank of another
 * process whose connection to the hub closes is lost to its clique there;
 * the ranks of other nodes whose work needs it fail with a kept
 * ncclRemoteError (lost_peer), as does a remote rank whose hub, on another
 * node, is gone (hub_lost). Within a node, whoever waits for a dead peer
 * waits until aborted or revoked.
 *
 * Fault tolerance and one-sided RMA work across processes too (2.28.7-2.30,
 * see their sections): ncclCommRevoke needs no peer (a remote rank lets its
 * connection go, so a dead hub is never waited for); ncclCommShrink's staying
 * ranks meet without the parent's hub, which may be the dead process, in the
 * process of the lowest staying rank (an abstract Unix socket named by the new
 * clique's key); a grow id carries the root of the process that made it,
 * where the grown clique lives and every rank of another process joins (the
 * existing ranks that pass no id learn it from their hub); puts and signals
 * between processes go through the hub, a remote rank's bytes landing when
 * its ncclWaitSignal takes the signal. Not across processes: splitting a
 * revoked communicator (ncclInvalidUsage, saying so).
 *
 * Every collective is checked across ranks: a rank calling another operation,
 * count, type, reduction or root than the others fails it on every rank
 * (stderr, the last error, and the communicator's async error becomes
 * ncclInvalidUsage) and no data moves.
 *
 * Groups and aborts fail as NCCL's do (2.28-2.30): a call failing inside a
 * group discards the whole group and gives its error to every non-blocking
 * member, which only ncclCommAbort frees then (discard_group); a discarded
 * Send/Recv leaves NCCL's per-peer connection flags set, and the next setup of
 * that connection fails on both sides (p2p_stale); a non-blocking group runs
 * on a thread of its own, a job that the first successful poll of a member
 * completes, and two threads completing one job stop the process
 * (job_complete); so do ncclCommAbort beside another thread's call on the
 * same communicator (call_enter, release_begin) and a communicator freed
 * under another thread's open group (group_check_freed). A one-rank
 * communicator's collective runs at the call, in a group too.
 *
 * Connections are made lazily, as NCCL 2.22+ does (NCCL_RUNTIME_CONNECT=0
 * turns that off): a communicator's first operation waits inside the call
 * (at ncclGroupEnd for a group; in the launch thread of a non-blocking
 * communicator) until the ranks it needs (every rank for a collective, the
 * peers for sends and receives) have issued their first operation too. One
 * thread driving several ranks without a group deadlocks there, as in NCCL;
 * after 10 s (FAKENCCL_CONNECT_WARN_MS) it says so on stderr, and waits on.
 *
 * CUDA graphs: an operation enqueued on a capturing stream (collectives,
 * point-to-point alone or grouped, AlltoAllv, one-sided RMA) is recorded into
 * the graph, through the fake CUDA runtime, instead of running: checked and
 * connected at the call, as NCCL plans and connects at capture time, but not
 * numbered. Each cudaGraphLaunch runs a fresh copy of it in stream order,
 * numbered then among the communicator's operations, so a launch is
 * collective as in NCCL: every rank must capture the same operations, and
 * rank 0's k-th launch meets rank 1's k-th launch (or its matching direct
 * call); it completes only once the peers have launched theirs, and a
 * mismatch fails at launch as a direct call's does. Ranks of other processes
 * can be captured too: their launches take their turn on the connection to
 * the hub as direct calls do. A communicator counts the captured launches that
 * live graphs hold (NCCL's localPersistentRefs); from 2.26 its ncclCommDestroy
 * and ncclCommAbort wait, without error, until the graphs (executable graphs
 * and the graphs they came from, and launches still in flight) are destroyed,
 * as NCCL's commDestroySync does, saying so once on stderr after
 * FAKENCCL_CONNECT_WARN_MS (real NCCL waits silently); before 2.26 they do
 * not wait, and launching such a graph afterwards stops the process loudly
 * (the use of freed memory real NCCL would make). Not modelled: NCCL's
 * graph-mixing and persistent-buffer rules (NCCL_GRAPH_MIXING_SUPPORT), user
 * buffer registration through graphs, and a non-blocking communicator's
 * destroy running asynchronously (it blocks in the call).
 *
 * Variants: the default is NCCL 2.28.3; -DFAKENCCL_OLD is 2.14.3 (no Split,
 * Register, MemAlloc, windows, AlltoAll/Gather/Scatter, InitRankScalable, fp8);
 * -DFAKENCCL_VCCL=11 or =10 is VCCL 2.29.2 with ncclAlltoAllv in that ABI;
 * -DFAKENCCL_230 is NCCL 2.30.7 with the newer host API (revoke, grow, ...);
 * -DFAKENCCL_BROKEN lacks ncclCommInitRank; -DFAKENCCL_VERSION_CODE=N reports N.
 * Registering a symmetric window is collective, as in NCCL: every rank of the
 * communicator must call it, and each call waits for the others.
 * FAKENCCL_NULL_WINDOW=1 makes ncclCommWindowRegister succeed with no window;
 * FAKENCCL_CORRUPT_BYTES=N flips the first result byte of every collective
 * writing N bytes or more (wrong results a checker must catch). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

#if defined(FAKENCCL_OLD)
#define VERSION_CODE 21403
#define HAS_228 0
#define NUM_TYPES 10
#elif defined(FAKENCCL_230)
#define VERSION_CODE 23007
#define HAS_228 1
#define NUM_TYPES 12
#elif defined(FAKENCCL_VCCL)
#define VERSION_CODE 22902
#define HAS_228 1
#define NUM_TYPES 12
#else
#define VERSION_CODE 22803
#define HAS_228 1
#define NUM_TYPES 12
#endif
/* HAS_230: the 2.28.7-2.30 host API (revoke, grow, one-sided RMA, suspend, ...). */
#ifdef FAKENCCL_230
#define HAS_230 1
#else
#define HAS_230 0
#endif
#ifdef FAKENCCL_VERSION_CODE
#undef VERSION_CODE
#define VERSION_CODE FAKENCCL_VERSION_CODE
#endif
/* GRAPH_WAIT: NCCL >= 2.26 makes ncclCommDestroy and ncclCommAbort wait until
 * the CUDA graphs holding the communicator's captured work are destroyed. */
#define GRAPH_WAIT (VERSION_CODE >= 22600)

typedef enum { ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument,
               ncclInvalidUsage, ncclRemoteError, ncclInProgress } ncclResult_t;
enum { tInt8, tUint8, tInt32, tUint32, tInt64, tUint64, tFloat16, tFloat32, tFloat64, tBfloat16, tE4M3, tE5M2 };
enum { opSum, opProd, opMax, opMin, opAvg, opPreMul };
typedef struct { char internal[128]; } ncclUniqueId;

/* From the fake CUDA runtime. */
int fakecuda_ptr_device(const void* p, size_t len);
int fakecuda_stream_enqueue(void* stream, int dev, void (*fn)(void*), void* arg);
int fakecuda_stream_capturing(void* stream, int dev);
int fakecuda_connect_guard(int inline_);
int fakecuda_stream_enqueue_graphable(void* stream, int dev, void (*run)(void*), void* arg, void* (*clone)(void*),
                                      void (*release)(void*));
int fakecuda_current_device(void);
int cudaMalloc(void** p, size_t n);
int cudaGetDeviceCount(int* n);
int cudaFree(void* p);
int cudaGetDevice(int* d);
int cudaSetDevice(int d);

/* The parts, in this order: each uses what the ones before it declare. */
#include "fakenccl/net.c" /* errors, TCP, unique ids */
#include "fakenccl/comms.c" /* cliques and communicators, groups, calls inside the library, non-blocking jobs */
#include "fakenccl/debug.c" /* NCCL_DEBUG's INFO line for each operation (subsystem COLL) */
#include "fakenccl/lifecycle.c" /* a remote rank's connection; ncclCommInit*, Split, Finalize, Destroy, Abort, queries */
#include "fakenccl/ops.c" /* element types; what the collectives compute, and how ranks meet */
#include "fakenccl/remote_ops.c" /* a remote rank's operations, CUDA graphs, lazy connection, ncclGroupStart */
#include "fakenccl/enqueue.c" /* discarded groups' connection flags, ncclGroupEnd, ncclAllReduce ... ncclRedOpDestroy */
#include "fakenccl/memory.c" /* registration, memory, windows */
#include "fakenccl/fault.c" /* fault tolerance: shrink, revoke, grow */
#include "fakenccl/rma.c" /* one-sided RMA */
#include "fakenccl/newer.c" /* ncclGroupSimulateEnd, properties, suspend, parameters */
#include "fakenccl/hub.c" /* the hub: serves the ranks of other processes */
