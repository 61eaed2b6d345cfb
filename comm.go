package nccl

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// Comm is an NCCL communicator: one rank's member of a group of ranks that run
// collective operations together.
//
// # Concurrency
//
// Operations on one communicator must reach NCCL in the same order on every
// rank: NCCL matches the n-th operation of each rank with the n-th of the
// others. Issue a communicator's operations from one goroutine at a time. NCCL
// also forbids calls in parallel on different communicators of one device
// (docs: usage/threadsafety.rst): issue the operations of all communicators of
// a device from one goroutine at a time too. Goroutines driving different
// devices, each with its own communicators, run in parallel. On a
// non-blocking communicator an operation (or a Group's launch) made while
// another goroutine's launch on it runs is refused with an error matching
// ErrInvalidUsage: NCCL would refuse it inside and leave the communicator in
// error for good.
//
// gonccl makes the rest safe from any goroutine at any moment: Abort, Wait,
// AsyncError, Done, and the accessors. Polls of NCCL's asynchronous state take
// turns across the library (two threads completing one non-blocking group
// kill the process). Abort never frees a communicator under a call still
// inside NCCL, nor while a call is inside NCCL on another rank of the same
// communicator held in this process (NCCL frees them together and forbids
// it); a group's launch counts as a call on each of its communicators. The
// last such call to return frees it. After Abort or Close, every method
// returns an error matching ErrClosed. So does every method of the zero Comm
// and of a nil *Comm, which gonccl did not make: they count as closed (Done is
// closed, the accessors give zero values).
//
// # Blocking and non-blocking communicators
//
// Communicators are blocking unless Config.Blocking says otherwise (or
// NCCL_COMM_BLOCKING=0), as in NCCL. A blocking communicator is the fast one
// for plain launches: NCCL launches each operation of a non-blocking one from
// a thread it starts for it (BenchmarkNonBlockingAllReduce).
//
// Every call that takes a context returns by its end in both modes. Close
// waits for the communicator's work outside NCCL and aborts it if the context
// ends first. Where NCCL waits inside a blocking call for other ranks (init,
// InitAll, GrowRank, Split, Shrink, Grow), the call runs on a goroutine of
// gonccl's: at the context's end the caller gets an error wrapping ctx.Err()
// while NCCL's call goes on, and what it made or used is aborted when NCCL
// returns (Library.Close refuses until then; a peer that never comes keeps
// that goroutine for good). Wait gives up at its context's end and aborts, in
// both modes.
//
// A non-blocking communicator (ncclConfig_t.blocking = 0) returns from init,
// Split, Shrink, Grow and Close at once and lets gonccl wait for them outside
// NCCL, so a context ending aborts the call inside NCCL and frees what it
// took, and no goroutine is left behind: the mode for services that must give
// up cleanly on a dead peer at every step. See Comm.Blocking.
//
// # Several ranks in one process
//
// The ranks of one communicator that one goroutine made in this process
// (InitAll, or InitRanks inside one Group) are driven either from one
// goroutine, with each step's operations of every rank in one Group, or from a
// goroutine per rank. NCCL connects the ranks inside their first operations: a
// rank's first operation outside a Group (or a Group's that holds some ranks
// but not all) waits for the others'. So gonccl holds such a first operation,
// before NCCL, until every rank has one waiting from a goroutine of its own,
// or until a Group launched operations of every rank. The goroutine that made the ranks is refused after ArrivalGrace with
// an error matching ErrInvalidUsage ("put the ranks' operations in one
// Group"): it would otherwise wait inside NCCL for ranks it has yet to call.
// Other goroutines wait as NCCL would, before NCCL, where Abort and Close
// reach them: one of them driving several ranks is told apart from the first
// of a goroutine per rank by nothing but time, so it is not refused. After the ranks met once, operations go straight to NCCL: a
// later operation that connects anew (a Send to a new peer, a size that takes
// a new algorithm) still waits inside NCCL for the other ranks, so one
// goroutine keeps every step of several ranks in one Group. Ranks made by
// several goroutines (InitRank from a goroutine per rank) are not held.
type Comm struct {
	lib      *Library
	h        uintptr // ncclComm_t; valid while state says so, never cleared
	dev      int
	rank     int
	nranks   int
	blocking bool
	cfg      *configBuffer // the ncclConfig_t and its strings, kept for the communicator's life
	path     atomic.Int32  // Path for AlltoAll, Gather, Scatter, AlltoAllv

	// Lifecycle: the state (high 32 bits) and the number of calls inside NCCL
	// (low 32 bits) in one word, so that entering and leaving a call is one
	// atomic add each. Calls count themselves while the state is open (or
	// closing, for Close's own calls). Abort moves the state to aborting;
	// whoever sees the count reach zero in that state frees the communicator,
	// so it is never freed under a call.
	life     atomic.Int64
	released atomic.Bool
	revoked  atomic.Bool // Revoke succeeded: Close destroys without finalizing
	revoking atomic.Bool // a revoke was started (by Revoke or a Wait's deadline)
	// Shrink with ShrinkAbort was called: Close aborts instead of destroying.
	abortOnClose atomic.Bool
	onDeadline   atomic.Int32  // DeadlineAction of Wait
	done         chan struct{} // closed once freed
	freeErr      error         // what freeing returned; read after done

	keptMu sync.Mutex
	kept   []*uintptr // where NCCL writes after a call returned (non-blocking Split, windows)

	lastStream atomic.Uintptr // the stream of its last operation (see waitOutstanding)
	streams    streamSet      // every stream its operations went to

	q         *clique       // the ranks of its communicator held in this process
	launching atomic.Bool   // a non-blocking launch runs (see busyError)
	deriveSeq atomic.Uint64 // derives (Split, Shrink, Grow) started, for their cliques' keys

	graphs    atomic.Int32 // live Graphs holding its operations (see Graph)
	graphMu   sync.Mutex
	graphList []*Graph

	winMu sync.Mutex
	wins  []windowSpan // registered windows, for the checks of one-sided calls

	opsMu   sync.Mutex
	userOps map[RedOp]DataType // PreMulSum ops made here, by their data type
}

// streamSet is the streams a communicator's operations were enqueued on (see
// noteStream, waitOutstanding). The hot path compares a stream with the last one noted (one atomic load);
// only a change takes the lock.
type streamSet struct {
	mu   sync.Mutex
	list []uintptr
}

// windowSpan is a registered window: its handle and the memory it covers (see
// registerWindow).
type windowSpan struct {
	h, base, size uintptr
	symmetric     bool
}

// keep holds p, a place NCCL may still write to because the wait for the
// call that was given it ended early (an abort, a context), until the
// communicator is freed. A wait that completes reads p and needs no keeping.
func (c *Comm) keep(p *uintptr) {
	c.keptMu.Lock()
	c.kept = append(c.kept, p)
	c.keptMu.Unlock()
}

const (
	stOpen     int32 = iota
	stClosing        // Close is finalizing: only its own calls enter
	stAborting       // Abort was asked for: nothing enters; the last call out frees
	stClosed
)

const callMask = 1<<32 - 1

func stateOf(v int64) int32 { return int32(v >> 32) }

// state is the lifecycle state; calls is the number of calls inside NCCL.
func (c *Comm) state() int32 { return stateOf(c.life.Load()) }
func (c *Comm) calls() int64 { return c.life.Load() & callMask }

// moveState changes the state from one of from to to, keeping the count; it
// reports the word it replaced, or false if the state was none of from.
func (c *Comm) moveState(to int32, from ...int32) (int64, bool) {
	for {
		v := c.life.Load()
		s, ok := stateOf(v), false
		for _, f := range from {
			ok = ok || s == f
		}
		if !ok {
			return v, false
		}
		if c.life.CompareAndSwap(v, int64(to)<<32|v&callMask) {
			return v, true
		}
	}
}

// enter admits a call into NCCL on c's handle. closing admits Close's own
// calls while it finalizes. Every successful enter is paired with exit. While
// an abort frees a member of c's clique, it waits (see clique).
func (c *Comm) enter(op string, closing bool) (uintptr, error) {
	for {
		v := c.life.Add(1)
		s := stateOf(v)
		if s != stOpen && (!closing || s != stClosing) {
			return 0, c.refuse(op)
		}
		if c.q.gate.Load()&gateAbort == 0 {
			return c.h, nil
		}
		c.exit()
		c.q.waitOpen()
	}
}

// Results of admit.
const (
	admitted = iota
	admitGated
	admitClosed
)

// admit is enter for a group's members: it counts a call in, or reports
// that the communicator is closed, or that its clique's gate is closed (then
// nothing is counted).
func (c *Comm) admit() int {
	if stateOf(c.life.Add(1)) != stOpen {
		c.exit()
		return admitClosed
	}
	if c.q.gate.Load()&gateAbort != 0 {
		c.exit()
		return admitGated
	}
	return admitted
}

// refuse undoes the count of a call that was not admitted and returns its
// error. Out of line: the hot path never takes it.
//
//go:noinline
func (c *Comm) refuse(op string) error {
	c.exit()
	return &ClosedError{Op: op, What: "communicator"}
}

// busyError is a call on a non-blocking communicator while another
// goroutine's launch on it runs. NCCL refuses such a call inside
// (ncclCommEnsureReady: "Attempt to use communicator before the previous
// operation returned ncclSuccess") and makes the refusal the communicator's
// error for good (enqueue.cc, ncclEnqueueCheck's fail path), so gonccl refuses
// it first.
//
//go:noinline
func busyError(op string) error {
	return &Error{Op: op, Code: abi.InvalidUsage, Msg: "another goroutine's operation on this non-blocking communicator is still launching: " +
		"NCCL takes one call at a time on it and would have left it in error (issue a communicator's operations from one goroutine)"}
}

// exit ends a call; the last call out of an aborted communicator frees it.
// Small enough to inline: one atomic add and a test.
func (c *Comm) exit() {
	if c.life.Add(-1) == int64(stAborting)<<32 { // no call left, aborting
		c.lastOut()
	}
}

// lastOut frees the communicator for the last call out after Abort.
//
//go:noinline
func (c *Comm) lastOut() { c.abortFree() }

// free releases the handle once, with ncclCommAbort or ncclCommDestroy.
func (c *Comm) free(sym int) error {
	if !c.released.CompareAndSwap(false, true) {
		<-c.done
		return c.freeErr
	}
	if sym == capi.FnCommAbort && c.graphs.Load() > 0 {
		// NCCL would wait in ncclCommAbort for the graphs holding the
		// communicator to be destroyed: an abort cannot wait for the user.
		// The state is no longer open, so a capture that ends from now on
		// destroys its graph itself (EndCapture); one still open keeps
		// ncclCommAbort waiting until it ends.
		c.graphMu.Lock()
		gs := slices.Clone(c.graphList)
		c.graphMu.Unlock()
		for _, g := range gs {
			g.destroyForAbort()
		}
	}
	var err error
	if sym == capi.FnCommAbort {
		// ncclCommAbort completes the communicator's pending non-blocking
		// group as a poll does (ncclCommEnsureReady): not beside one.
		c.lib.pollMu.Lock()
		err = c.lib.nc.CommAbort(c.h)
		c.lib.pollMu.Unlock()
	} else {
		err = c.lib.nc.CommDestroy(c.h)
	}
	if isInProgress(err) { // a non-blocking destroy runs on; NCCL owns it now
		err = nil
	}
	c.freeErr = err
	c.moveState(stClosed, stOpen, stClosing, stAborting)
	c.cfg.free()
	c.lib.untrack()
	c.lib.leaveClique(c, sym == capi.FnCommAbort)
	close(c.done)
	return err
}

// Abort ends the communicator at once (ncclCommAbort), cancelling its
// outstanding work on the GPU, and returns without waiting for calls other
// goroutines have inside NCCL: the last of them to return frees it. Graphs
// captured through gonccl that hold its operations are destroyed first
// (NCCL >= 2.26 would wait for them; a Launch of one in progress is waited
// for); their later Launch and Destroy return errors matching ErrClosed. A
// capture still open that holds its operations keeps ncclCommAbort waiting
// inside NCCL until it ends, and EndCapture then destroys the graph and
// returns an error matching ErrClosed. It is the
// way out of a hung operation, a blocked init, Split or Close, and of a peer
// that died. It returns an error matching ErrClosed if the communicator was
// already closed or aborted.
//
// A call blocked inside NCCL on a blocking communicator (its init, Split or
// the finalize of Close, or an operation NCCL blocks in) is not interrupted:
// NCCL offers no safe way to, and the communicator is freed when that call
// returns. The calls that take a context return at its end anyway (see Comm).
// Non-blocking communicators never block inside NCCL.
//
// Buffers after an Abort: an operation that returns an error matching
// ErrClosed because of it returns once ncclCommAbort has run (NCCL's launch
// thread of a non-blocking communicator may be enqueuing the operation until
// then). After that, Synchronize the operations' streams
// (the work NCCL enqueued stops at its abort flag) before freeing or reusing
// their buffers.
func (c *Comm) Abort() error {
	if !c.made() {
		return zeroComm("Abort")
	}
	v, ok := c.moveState(stAborting, stOpen, stClosing)
	if !ok {
		return &ClosedError{Op: "ncclCommAbort", What: "communicator"}
	}
	if v&callMask == 0 { // nothing inside NCCL: free now
		return c.abortFree()
	}
	return nil
}

// afterCutShort follows a non-blocking launch whose wait an Abort (or Close)
// cut short: NCCL's launch thread may still be enqueuing the operation on
// the caller's stream, and stops only once ncclCommAbort has run. The call
// returns after that (the communicator is freed: Done), so that nothing more
// reaches the stream: a Synchronize of it then covers all the work, and the
// buffers may be freed. The caller's count is already given back, so the
// abort can go ahead.
//
//go:noinline
func (c *Comm) afterCutShort() {
	<-c.done
}

// openOr is nil while the communicator is open, else op's error matching
// ErrClosed: for methods that make no NCCL call.
func (c *Comm) openOr(op string) error {
	if c.state() != stOpen {
		return &ClosedError{Op: op, What: "communicator"}
	}
	return nil
}

// abortAfter aborts the communicator after a failed close or wait and returns
// cause, noting an abort failure.
func (c *Comm) abortAfter(cause error) error {
	if aerr := c.Abort(); aerr != nil && !isClosed(aerr) {
		return fmt.Errorf("%w (and abort: %v)", cause, aerr)
	}
	return cause
}

// Done is closed once the communicator has been freed, by Close or by Abort.
func (c *Comm) Done() <-chan struct{} {
	if !c.made() {
		return closedChan
	}
	return c.done
}

// closedChan is the Done of a Comm gonccl did not make.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// made reports whether gonccl made c. The zero Comm and a nil *Comm are not
// communicators: they count as closed ones (every method returns an error
// matching ErrClosed, Done is closed, the accessors give zero values).
func (c *Comm) made() bool { return c != nil && c.lib != nil }

func zeroComm(op string) error {
	return &ClosedError{Op: op, What: "communicator (the zero Comm, which gonccl did not make)"}
}

// Device is the CUDA device ordinal of the communicator.
func (c *Comm) Device() int {
	if c == nil {
		return 0
	}
	return c.dev
}

// Rank is this communicator's rank.
func (c *Comm) Rank() int {
	if c == nil {
		return 0
	}
	return c.rank
}

// Size is the number of ranks.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.nranks
}

// Blocking reports whether the communicator is blocking (see Comm).
func (c *Comm) Blocking() bool { return c != nil && c.blocking }

// Library is the library the communicator was made with.
func (c *Comm) Library() *Library {
	if c == nil {
		return nil
	}
	return c.lib
}

// Handle is the raw ncclComm_t, for a C function gonccl does not wrap, or 0
// once closed. The handle is freed by Close or Abort: do not use it after.
func (c *Comm) Handle() uintptr {
	if !c.made() {
		return 0
	}
	if c.state() == stClosed || c.released.Load() {
		return 0
	}
	return c.h
}

// AsyncError is ncclCommGetAsyncError: nil, an error matching ErrInProgress while
// a non-blocking init, Split, Close or operation runs, or the communicator's
// asynchronous failure (a peer that died, a network error).
func (c *Comm) AsyncError() error {
	if !c.made() {
		return zeroComm("AsyncError")
	}
	r, err := c.asyncResult("ncclCommGetAsyncError", false)
	if err != nil {
		return err
	}
	if r != abi.Success {
		// NCCL's last error text says what went wrong (a mismatch names both
		// calls); its code's string only says which kind. Wait says the same.
		msg := c.lib.LastError()
		if msg == "" {
			msg = c.lib.ErrorString(r)
		}
		return &Error{Op: "ncclCommGetAsyncError", Code: r, Msg: msg}
	}
	return nil
}

func (c *Comm) asyncResult(op string, closing bool) (abi.Result, error) {
	h, err := c.enter(op, closing)
	if err != nil {
		return 0, err
	}
	r, err := c.lib.pollAsync(h)
	c.exit()
	return r, err
}

// pollAsync is ncclCommGetAsyncError on h, whose caller holds a call counted
// in. The library's polls take turns: a non-blocking group runs on a thread
// of NCCL's linked to each member, and a poll that sees it finish joins and
// frees it (init.cc, ncclCommGetAsyncError; group.cc, ncclGroupJobComplete).
// Two threads doing that at once on members of one group kill the process
// ("terminate called without an active exception", seen on NCCL 2.30.7 and
// VCCL 2.29.2). NCCL writes the result into the library's slot: no
// allocation.
func (l *Library) pollAsync(h uintptr) (abi.Result, error) {
	l.pollMu.Lock()
	err := l.nc.CommGetAsyncError(h, &l.pollRes)
	r := abi.Result(l.pollRes)
	l.pollMu.Unlock()
	return r, err
}

func isClosed(err error) bool {
	_, ok := err.(*ClosedError)
	return ok
}
