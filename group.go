package nccl

import (
	"fmt"
	"runtime"
)

// Group runs fn between ncclGroupStart and ncclGroupEnd on one locked OS
// thread: NCCL's group state belongs to the thread, and a goroutine may
// otherwise move between threads in the middle. The operations fn issues on
// this goroutine join the group (not those of goroutines fn starts); they are
// launched together when the group ends. Groups nest.
//
// If fn returns an error or panics, the group is discarded: gonccl makes NCCL
// record a failure in the group (an operation on a NULL communicator, which
// NCCL refuses and remembers), so ncclGroupEnd launches none of the
// operations fn enqueued and returns that failure; the error of fn is
// returned (a panic goes on up once the group is closed). Either way the
// thread leaves the group, and the all-to-all-v matrices the group pinned are
// released. Discarding is what NCCL itself does when one of the group's calls
// fails: a partial group (a Send without its Recv) would otherwise run and
// hang or mismatch across ranks.
//
// With non-blocking communicators, Group returns once NCCL has launched the
// group (their state leaves ncclInProgress).
func (l *Library) Group(fn func() error) (err error) {
	if err := l.groupBegin(); err != nil {
		return err
	}
	done := false
	defer func() {
		if done {
			return
		}
		// fn panicked: close the group, then let the panic go on.
		l.groupEnd(errPanicInGroup)
	}()
	ferr := fn()
	done = true
	return l.groupEnd(ferr)
}

var errPanicInGroup = fmt.Errorf("panic inside Group")

// groupBegin starts a group on a locked thread; groupEnd must follow on the
// same goroutine.
func (l *Library) groupBegin() error {
	if err := l.live("ncclGroupStart"); err != nil {
		return err
	}
	runtime.LockOSThread()
	if err := l.call(fnGroupStart); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	l.groupsOpen.Add(1)
	return nil
}

// groupEnd ends the group groupBegin started; ferr, the failure of the work
// inside, discards it. It allocates nothing on success.
func (l *Library) groupEnd(ferr error) error {
	if ferr != nil {
		l.poisonGroup()
	}
	eerr := l.call(fnGroupEnd)
	if l.groupsOpen.Add(-1) == 0 {
		l.releasePins()
	}
	runtime.UnlockOSThread()
	if isInProgress(eerr) {
		eerr = l.settleAll()
	}
	switch {
	case ferr != nil:
		return ferr
	case eerr != nil:
		return eerr
	}
	return nil
}

// poisonGroup makes NCCL's current group fail: NCCL refuses an operation on a
// NULL communicator and, inside a group, keeps the failure for ncclGroupEnd,
// which then frees the group's tasks without launching them.
func (l *Library) poisonGroup() {
	l.call(fnAllReduce, 0, 0, 0, uintptr(Float32), uintptr(Sum), 0, 0)
}

// settleAll waits for every non-blocking communicator of the library to leave
// ncclInProgress, after a group NCCL launched in the background.
func (l *Library) settleAll() error {
	var first error
	for _, c := range l.openComms() {
		if c.blocking {
			continue
		}
		if err := c.settle("ncclGroupEnd"); err != nil && first == nil && !isClosed(err) {
			first = err
		}
	}
	return first
}

// releasePins unpins the AlltoAllv matrices once no group is open. The count
// is read under the lock: a pin added after a group started is never in the
// list this call sees with the count at zero.
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

// pinner is a runtime.Pinner for one AlltoAllv call, reused so that the call
// allocates nothing once warm.
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

// unpin releases p's pins and keeps it for the next call.
func (l *Library) unpin(p *runtime.Pinner) {
	p.Unpin()
	l.pinsMu.Lock()
	l.spare = append(l.spare, p)
	l.pinsMu.Unlock()
}
