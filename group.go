package nccl

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
	"github.com/gonccl/nccl/internal/ccall"
	"github.com/gonccl/nccl/internal/goid"
)

// Groups are all-or-nothing because nothing of a group reaches NCCL before
// the function has succeeded. NCCL itself has no way to abandon a group: a
// failed call inside one makes ncclGroupEnd discard the tasks but not what
// the calls already did (group.cc, groupCleanup, 2.28 to 2.30): the per-peer
// connection flags of a Send or Recv stay set, so the next group with that
// peer fails in the bootstrap exchange ("Message truncated"), and every
// non-blocking member is left in error for good (ncclCommSetAsyncError). So
// the operations fn issues are checked and recorded in Go, and replayed
// between ncclGroupStart and ncclGroupEnd once fn has returned nil.

// Group runs fn and launches the operations it issues on this goroutine
// together, as one NCCL group (ncclGroupStart ... ncclGroupEnd): the Sends
// and Recvs of a rank, or the operations of several communicators driven from
// one goroutine. Operations of goroutines fn starts do not join the group.
// Groups nest; the outermost launches.
//
// A group is all-or-nothing. Each operation is checked when fn issues it (its
// error is returned to fn then) and recorded; nothing reaches NCCL until fn
// returns. If fn returns an error or panics, nothing of the group (or of that
// nested Group) reaches NCCL or a peer, every communicator stays usable, and
// the error is returned unchanged (the panic goes on unchanged). If fn
// returns nil, the operations are launched in the order fn issued them. A
// communicator closed or aborted before the launch makes the whole group fail
// with an error matching ErrClosed, nothing launched. Should NCCL refuse an
// operation that gonccl's checks let through, NCCL discards the group its way
// and the error is returned (non-blocking members then stay in error, as NCCL
// leaves them).
//
// Calls that make communicators (InitRank, InitRankScalable, GrowRank: one
// goroutine making the ranks of several GPUs inside a Group, as NCCL's
// multi-GPU init wants) cannot be held back: they reach NCCL at once, in an
// NCCL group opened for them; if fn then fails, NCCL discards that group its
// own way. NCCL joins such communicators at the group's end: use them after
// Group returns. A non-blocking one is waited for there, with the context
// its init was given; if it fails or that context ends, it is aborted and
// Group returns the error. When the Group fails (fn returns an error or
// panics, or a communicator fails to join), every communicator fn made comes
// out aborted, blocking ones too: NCCL destroys the init work of a failed
// group unrun, which would leave a blocking communicator uninitialized
// (proven on GPUs with NCCL 2.28.3 to 2.30.7). Other calls that are not
// stream operations (Split, registration) are not grouped: make them outside
// a Group.
//
// All communicators of a group must share a blocking mode (NCCL refuses a
// mix). With non-blocking ones, Group returns once NCCL has launched the
// group. Operations inside a Group are enqueued on their streams when the
// group launches, after the CUDA work fn itself enqueued (as in NCCL, where a
// group's operations reach their streams at ncclGroupEnd).
func (l *Library) Group(fn func() error) (err error) {
	if l == nil {
		return nilLibrary("Group")
	}
	if fn == nil { // refused before the group opens: nothing to undo
		return argError("Group", "nil function")
	}
	g, mark, err := l.groupBegin()
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done { // fn panicked: drop what it recorded, let the panic go on
			l.groupEnd(g, mark, errPanicInGroup)
		}
	}()
	ferr := fn()
	done = true
	return l.groupEnd(g, mark, ferr)
}

var errPanicInGroup = fmt.Errorf("panic inside Group")

// groupOp is one recorded operation: its communicator, its function and its
// number of C arguments (at most ccall.BatchArgs: ncclAlltoAllv's 11). The
// call itself is recorded as the launch will make it, in the group's calls
// (its comm slot filled in at launch, see Comm.stream).
type groupOp struct {
	c   *Comm
	sym int32
	n   int32
}

// groupRec is one goroutine's open group.
type groupRec struct {
	owner    atomic.Uintptr // goid.Current of the goroutine inside Group; 0 when free
	depth    int
	blocking int // -1 until the first operation; then the members' mode
	ops      []groupOp
	calls    []ccall.Entry // ncclGroupStart, the call of each of ops, then the end: launched in one batch
	comms    []*Comm       // the members, each once (at launch)
	ncclOpen bool          // ncclGroupStart was called for a call that is not recorded (an init)
	inits    []pendingInit
	cut      []*Comm // non-blocking members whose launch an abort cut short (see launch)
}

// A pendingInit is a communicator made inside a Group: NCCL joins it only at
// ncclGroupEnd, so it is waited for (with its init's context) once the group
// has ended, and aborted if the group failed.
type pendingInit struct {
	c   *Comm
	ctx context.Context
	op  string
}

// groupBegin opens a group on the calling goroutine, or a nested level of the
// one it has; mark is where the level's records begin. The outermost level
// locks the OS thread: NCCL's group state belongs to the thread.
func (l *Library) groupBegin() (g *groupRec, mark int, err error) {
	if err := l.live("ncclGroupStart"); err != nil {
		return nil, 0, err
	}
	me := goid.Current()
	if g = l.groupOf(me); g != nil {
		g.depth++
		return g, len(g.ops), nil
	}
	runtime.LockOSThread()
	l.groupsMu.Lock()
	if n := len(l.groupFree); n > 0 {
		g = l.groupFree[n-1]
		l.groupFree = l.groupFree[:n-1]
	} else {
		g = &groupRec{}
	}
	g.owner.Store(me)
	g.depth, g.blocking = 1, -1
	l.groups = append(l.groups, g)
	l.groupsOpen.Add(1)
	l.groupsMu.Unlock()
	l.lastGroup.Store(g)
	return g, 0, nil
}

// groupOf is the open group of the goroutine me, or nil. The group opened
// last is tried first, without the lock: one goroutine driving several GPUs
// finds its group in one load.
func (l *Library) groupOf(me uintptr) *groupRec {
	if g := l.lastGroup.Load(); g != nil && g.owner.Load() == me {
		return g
	}
	l.groupsMu.Lock()
	defer l.groupsMu.Unlock()
	for _, g := range l.groups {
		if g.owner.Load() == me {
			return g
		}
	}
	return nil
}

// recording is the group the calling goroutine is inside, or nil: one atomic
// load when no goroutine of the library is in a Group.
func (l *Library) recording() *groupRec {
	if l.groupsOpen.Load() == 0 {
		return nil
	}
	return l.groupOf(goid.Current())
}

// record adds a stream operation to the group; args as Comm.stream takes them.
//
//go:noinline
func (g *groupRec) record(c *Comm, sym int, args []uintptr) error {
	name := capi.NCCLSymbols[sym].Name
	if s := c.state(); s != stOpen {
		return &ClosedError{Op: name, What: "communicator"}
	}
	if c.lib.nc.Fn[sym] == 0 {
		return c.lib.unsupported(sym)
	}
	mode := 0
	if c.blocking {
		mode = 1
	}
	if g.blocking >= 0 && g.blocking != mode {
		return argError(name, "a group cannot hold blocking and non-blocking communicators (NCCL refuses the mix)")
	}
	g.blocking = mode
	g.ops = append(g.ops, groupOp{c: c, sym: int32(sym), n: int32(len(args))})
	if len(g.calls) == 0 {
		g.grow() // ncclGroupStart's, filled at launch
	}
	e := g.grow()
	e.Fn = c.lib.nc.Fn[sym]
	copy(e.Args[:], args)
	return nil
}

// grow adds an entry to the group's calls and returns it. A reused entry
// keeps what it held: the slots past a call's arguments are not read (the
// callee takes fewer), and Batch sets each result.
func (g *groupRec) grow() *ccall.Entry {
	if n := len(g.calls); n < cap(g.calls) {
		g.calls = g.calls[:n+1]
	} else {
		g.calls = append(g.calls, ccall.Entry{})
	}
	return &g.calls[len(g.calls)-1]
}

// groupEnd closes the level groupBegin opened. ferr, fn's failure, drops the
// level's records and is returned; the outermost level launches what is left
// (ferr nil) and releases the goroutine's group.
func (l *Library) groupEnd(g *groupRec, mark int, ferr error) error {
	if ferr != nil {
		clear(g.ops[mark:])
		g.ops = g.ops[:mark]
		if len(g.calls) > 0 {
			g.calls = g.calls[:mark+1]
		}
	}
	if g.depth--; g.depth > 0 {
		return ferr
	}
	var err error
	switch {
	case ferr == nil:
		err = l.launch(g, capi.FnGroupEnd, 0)
	case g.ncclOpen:
		// Calls that cannot be recorded opened NCCL's group: make it fail
		// so that ncclGroupEnd discards it (NCCL refuses an operation on a
		// NULL communicator and keeps the failure for the group).
		l.nc.AllReduceOnNoComm()
		l.nc.GroupEnd()
	}
	var inits []pendingInit
	if len(g.inits) > 0 {
		inits = slices.Clone(g.inits)
	}
	var cut []*Comm
	if len(g.cut) > 0 {
		cut = slices.Clone(g.cut)
		if err == nil {
			err = &ClosedError{Op: "ncclGroupEnd", What: "communicator"}
		}
	}
	l.groupRelease(g)
	for _, c := range cut {
		c.afterCutShort()
	}
	// The group has ended: the communicators made inside it finish joining
	// now. Where the group failed they are aborted: NCCL's groupCleanup
	// destroys the init jobs of a failed group unrun (group.cc), which
	// leaves a non-blocking communicator in the group's error and a
	// blocking one an uninitialized shell whose async error reads
	// ncclSuccess, so that NCCL would take calls on it; and the caller
	// could not tell a joined communicator from one that was not.
	cause := ferr
	if cause == nil {
		cause = err
	}
	for _, p := range inits {
		if cause != nil {
			break
		}
		cause = p.c.ready(p.ctx, p.op)
		err = cause
	}
	if cause != nil {
		for _, p := range inits {
			_ = p.c.abortAfter(cause)
		}
	}
	if ferr != nil {
		return ferr
	}
	return err
}

// groupRelease forgets g and unlocks the thread.
func (l *Library) groupRelease(g *groupRec) {
	clear(g.ops)
	g.calls = g.calls[:0]
	clear(g.comms)
	clear(g.inits)
	clear(g.cut)
	g.ops, g.comms, g.inits, g.cut, g.ncclOpen = g.ops[:0], g.comms[:0], g.inits[:0], g.cut[:0], false
	l.groupsMu.Lock()
	if i := slices.Index(l.groups, g); i >= 0 {
		l.groups = slices.Delete(l.groups, i, i+1)
	}
	g.owner.Store(0)
	l.groupFree = append(l.groupFree, g)
	open := l.groupsOpen.Add(-1)
	l.groupsMu.Unlock()
	if open == 0 {
		l.releasePins()
	}
	runtime.UnlockOSThread()
}

// joinNCCLGroup opens NCCL's group for a call that cannot be recorded (an
// init) made inside a Group on this goroutine, so that it is grouped with the
// others as NCCL wants. No-op outside a Group.
func (l *Library) joinNCCLGroup() error {
	g := l.recording()
	if g == nil || g.ncclOpen {
		return nil
	}
	if err := l.nc.GroupStart(); err != nil {
		return err
	}
	g.ncclOpen = true
	return nil
}

// launch admits every member of the group (none is freed while NCCL may hold
// it), replays the records between ncclGroupStart and end (ncclGroupEnd, or
// ncclGroupSimulateEnd with its argument), waits for non-blocking members to
// leave ncclInProgress, and lets the members go.
func (l *Library) launch(g *groupRec, end int, endArg uintptr) error {
	if len(g.ops) == 0 && !g.ncclOpen {
		return nil
	}
	for i := range g.ops {
		op := &g.ops[i]
		if c := op.c; !slices.Contains(g.comms, c) {
			g.comms = append(g.comms, c)
		}
		if (op.sym == capi.FnSend || op.sym == capi.FnRecv) && int32(g.calls[i+1].Args[3]) == int32(op.c.rank) && !g.ncclOpen {
			if err := g.selfPaired(op.c); err != nil {
				return err
			}
		}
	}
	if !g.ncclOpen {
		if err := meetPartial(g.comms); err != nil {
			return err
		}
	}
	if err := admitAll(g.comms); err != nil {
		if g.ncclOpen {
			l.nc.GroupEnd()
		}
		return err
	}
	for i, c := range g.comms {
		if !c.blocking && !c.launching.CompareAndSwap(false, true) {
			for _, d := range g.comms[:i] {
				d.launching.Store(false)
			}
			if g.ncclOpen {
				l.nc.GroupEnd()
			}
			exitAll(g.comms)
			return busyError("ncclGroupEnd")
		}
	}
	// One deferred call, which the compiler open-codes: the members' launch
	// marks cleared, then their counts given back.
	defer launched(g.comms)
	err := l.launchAdmitted(g, end, endArg)
	if err == nil && end == capi.FnGroupEnd {
		metInGroup(g.comms)
	}
	return err
}

// launched ends launch: it clears the non-blocking members' launch marks,
// then lets every member go.
func launched(comms []*Comm) {
	for _, c := range comms {
		if !c.blocking {
			c.launching.Store(false)
		}
	}
	exitAll(comms)
}

// launchAdmitted is launch once the members are admitted and marked: the
// group's C calls, then the non-blocking members settled.
func (l *Library) launchAdmitted(g *groupRec, end int, endArg uintptr) error {
	// The group's C calls in one batch, one switch to the system stack for
	// all of them: ncclGroupStart (unless an init opened NCCL's group), the
	// records in order (g.calls[1:], made by record), the end.
	if len(g.calls) == 0 {
		g.grow()
	}
	g.calls[0].Fn = l.nc.Fn[capi.FnGroupStart]
	captured := false
	for i := range g.ops {
		op, args := &g.ops[i], &g.calls[i+1].Args
		args[op.n-2] = op.c.h
		if h := args[op.n-1]; h != op.c.lastStream.Load() {
			op.c.noteStream(h)
		}
		if cu := l.cuda; cu != nil && cu.capt.n.Load() != 0 {
			captured = cu.noteComm(op.c, args[op.n-1]) || captured
		}
	}
	if captured { // NCCL may connect inside the end (see CUDA.relax)
		prev, ok := l.cuda.relax()
		defer l.cuda.unrelax(prev, ok)
	}
	last := g.grow()
	last.Fn, last.Args[0] = l.nc.Fn[end], endArg // ncclGroupEnd takes no argument
	calls, first := g.calls, 1
	if g.ncclOpen {
		calls, first = calls[1:], 0
	}
	if cu := l.cuda; cu != nil && len(g.comms) > 0 && cu.rt.TD.Target(g.comms[0].dev) >= 0 {
		// NCCL saves and restores the thread's device around the launch:
		// give the thread one first (see capi.ThreadDevice).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cu.rt.TD.SetForGroup(g.comms[0].dev)
	}
	var err error
	switch k := ccall.Batch(calls, int32(abi.InProgress)); {
	case k < 0: // launched (a non-blocking group: in progress, settled below)
	case k < first:
		return l.result(capi.FnGroupStart, int32(calls[k].R))
	case k < len(calls)-1:
		// NCCL keeps an operation's failure for the group, which its end
		// then discards: the batch stopped there, the end is called now.
		err = l.result(int(g.ops[k-first].sym), int32(calls[k].R))
		if end == capi.FnGroupSimulateEnd {
			_ = l.nc.Call(end, endArg)
		} else {
			_ = l.nc.Call(end)
		}
	default:
		err = l.result(end, int32(calls[k].R))
	}
	// A non-blocking group runs on a thread of NCCL's, linked to every
	// member; polling a member that sees it finish joins it. The members
	// are polled here, from this goroutine alone (and under the library's
	// poll lock), before anything else may use them (see Comm.AsyncError).
	for _, c := range g.comms {
		if c.blocking {
			continue
		}
		serr := c.settleHeld("ncclGroupEnd")
		if isClosed(serr) {
			g.cut = append(g.cut, c) // see Comm.afterCutShort: waited for once the members are let go
		} else if serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// admitAll counts a call into each of comms (see Comm.enter): all of them or,
// with an error matching ErrClosed, none. While a gate of theirs is closed
// (an abort frees a member of the same clique) it lets go and tries again.
func admitAll(comms []*Comm) error {
	for {
		gated := false
		for i, c := range comms {
			switch c.admit() {
			case admitted:
				continue
			case admitGated:
				gated = true
			default:
				exitAll(comms[:i])
				return &ClosedError{Op: "ncclGroupEnd", What: "communicator"}
			}
			exitAll(comms[:i])
			break
		}
		if !gated {
			return nil
		}
		for _, c := range comms {
			c.q.waitOpen()
		}
	}
}

func exitAll(comms []*Comm) {
	for _, c := range comms {
		c.exit()
	}
}

// releasePins unpins the AlltoAllv matrices and WaitSignal descriptors once
// no group is open: NCCL reads them until the group that holds their
// operation launches. The count is read under the lock: a pin added after a
// group started is never in the list this call sees with the count at zero.
func (l *Library) releasePins() {
	l.pinsMu.Lock()
	defer l.pinsMu.Unlock()
	if len(l.pins) == 0 || l.groupsOpen.Load() != 0 {
		return
	}
	for _, p := range l.pins {
		p.Unpin()
		l.spare = append(l.spare, p)
	}
	clear(l.pins)
	l.pins = l.pins[:0]
}

// pinner is a runtime.Pinner for one call, reused so that the call allocates
// nothing once warm.
func (l *Library) pinner() *runtime.Pinner {
	l.pinsMu.Lock()
	defer l.pinsMu.Unlock()
	if n := len(l.spare); n > 0 {
		p := l.spare[n-1]
		l.spare = l.spare[:n-1]
		return p
	}
	return new(runtime.Pinner)
}

// unpinAfter releases p once NCCL is done with what it pins: at once outside
// a group, else when no group is open (see Group).
func (l *Library) unpinAfter(p *runtime.Pinner) {
	if l.groupsOpen.Load() == 0 {
		p.Unpin()
		l.pinsMu.Lock()
		l.spare = append(l.spare, p)
		l.pinsMu.Unlock()
		return
	}
	l.pinsMu.Lock()
	l.pins = append(l.pins, p)
	l.pinsMu.Unlock()
	l.releasePins()
}

// selfPaired refuses a group whose Sends to c's own rank and Recvs from it
// do not pair up: NCCL pairs them one by one at the group's end and refuses
// the group otherwise (enqueue.cc, scheduleP2pTasksToPlan: "Trying to send to
// self without a matching recv"), leaving a non-blocking communicator in
// error for good. Runs only for a group that holds such a call.
func (g *groupRec) selfPaired(c *Comm) error {
	sends, recvs := 0, 0
	for i := range g.ops {
		op := &g.ops[i]
		if op.c != c || int32(g.calls[i+1].Args[3]) != int32(c.rank) {
			continue
		}
		switch op.sym {
		case capi.FnSend:
			sends++
		case capi.FnRecv:
			recvs++
		}
	}
	if sends == recvs {
		return nil
	}
	return &Error{Op: "ncclGroupEnd", Code: abi.InvalidUsage, Msg: fmt.Sprintf(
		"rank %d's Group holds %d Send(s) to its own rank and %d Recv(s) from it: NCCL pairs them one by one and refuses the group; put each Send to itself with its Recv", c.rank, sends, recvs)}
}
