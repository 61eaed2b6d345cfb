package nccl

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/goid"
)

// NCCL connects a communicator's ranks inside their first operations (2.22+;
// Send/Recv peers always, each new algorithm at its first use): a rank's first
// operation outside a group waits inside NCCL until the other ranks make
// theirs. One goroutine driving several ranks of one communicator held in
// this process (InitAll, a Group of InitRanks) without a Group never makes
// the second call: the first waits for good, where no context or Abort
// reaches it. NCCL's rule is that one thread driving several ranks puts their
// operations in one group.
//
// gonccl holds such a clique's operations made outside a Group (and a
// Group's launch that holds some of its ranks but not all), before C, until
// every rank held here has one waiting from a goroutine of its own:
// then they go to NCCL together and the clique is known to be driven a
// goroutine per rank. A Group that launched operations of every rank held
// here connected them too. After either, no operation waits here (the hot
// path tests the gate word it already loads). A goroutine that made the clique and waits
// here longer than ArrivalGrace for the others is refused with an error
// matching ErrInvalidUsage: nothing reached NCCL. Other goroutines wait as
// NCCL would, outside NCCL, where Abort and Close reach them.

// arrival is a clique's meeting of first operations.
type arrival struct {
	members atomic.Int32 // members held here (joinClique, leaveClique)

	mu      sync.Mutex
	creator uintptr // goid of the goroutine that made every member; 0 once two did
	claimed bool    // creator was set (a second claimer clears it)
	proven  bool    // every member arrived from goroutines of their own
	waiting map[*Comm]uintptr
}

// claim records that the calling goroutine made members of q (InitAll,
// InitRank, Split): a clique that one goroutine made meets at its first
// operations; one made by several goroutines is driven a goroutine per rank.
func (q *clique) claim() {
	me := goid.Current()
	a := &q.arrival
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.claimed:
		a.claimed, a.creator = true, me
	case a.creator != me:
		a.creator = 0
	}
	if a.creator != 0 && !a.proven && a.members.Load() > 1 {
		q.gate.Or(gateArrive)
	} else {
		q.gate.And(^int32(gateArrive))
	}
}

// arrive holds c's operation, outside NCCL, until every member of its clique
// has one waiting; see above.
func (c *Comm) arrive(op string) error {
	return c.q.arrive(op, []*Comm{c}, false)
}

// arrive holds the operations of cs, members of q (one operation outside a
// Group, or a Group holding some of q's members but not all), outside NCCL,
// until every member of q has one waiting.
func (q *clique) arrive(op string, cs []*Comm, grouped bool) error {
	a := &q.arrival
	me := goid.Current()
	a.mu.Lock()
	if a.proven || q.gate.Load()&gateArrive == 0 {
		a.mu.Unlock()
		return nil
	}
	if a.waiting == nil {
		a.waiting = map[*Comm]uintptr{}
	}
	for _, c := range cs {
		a.waiting[c] = me
	}
	a.mu.Unlock()
	leave := func() {
		a.mu.Lock()
		for _, c := range cs {
			if a.waiting[c] == me {
				delete(a.waiting, c)
			}
		}
		a.mu.Unlock()
	}
	start := time.Now()
	for delay := time.Duration(0); ; {
		a.mu.Lock()
		if !a.proven && a.members.Load() > 1 && len(a.waiting) >= int(a.members.Load()) {
			a.proven, a.waiting = true, nil
			q.gate.And(^int32(gateArrive))
		}
		// Proven, or another goroutine claimed members (see claim).
		through := a.proven || q.gate.Load()&gateArrive == 0
		creator := a.creator == me
		a.mu.Unlock()
		if through {
			leave()
			return nil
		}
		for _, c := range cs {
			if c.state() != stOpen {
				leave()
				return &ClosedError{Op: op, What: "communicator"}
			}
		}
		if grace := cs[0].lib.arrivalGrace; creator && grace > 0 && time.Since(start) >= grace {
			leave()
			return q.refusal(op, cs, grouped, grace)
		}
		delay = min(max(delay*2, 20*time.Microsecond), time.Millisecond)
		time.Sleep(delay)
	}
}

// refusal is the error of a maker that waited grace for the other ranks.
func (q *clique) refusal(op string, cs []*Comm, grouped bool, grace time.Duration) error {
	others := int(q.arrival.members.Load()) - len(cs)
	what := fmt.Sprintf("rank %d's operation outside a Group", cs[0].rank)
	if grouped {
		ranks := make([]int, len(cs))
		for i, c := range cs {
			ranks[i] = c.rank
		}
		what = fmt.Sprintf("a Group holding rank(s) %v but not the others", ranks)
	}
	return &Error{Op: op, Code: abi.InvalidUsage, Msg: fmt.Sprintf(
		"%s waited %v for the other %d rank(s) of its communicator held in this process to be called from goroutines of their own: "+
			"one goroutine driving several ranks must put every rank's operations in one Group (NCCL would wait inside this call for ranks the goroutine has yet to call)",
		what, grace, others)}
}

// meetPartial holds a Group's launch while it holds some members of a
// clique that must meet (see arrive) but not all: NCCL would connect those
// inside ncclGroupEnd and wait there for the others.
func meetPartial(comms []*Comm) error {
	for i, c := range comms {
		q := c.q
		if q.gate.Load()&gateArrive == 0 {
			continue
		}
		seen := false
		for _, d := range comms[:i] {
			seen = seen || d.q == q
		}
		if seen {
			continue
		}
		var cs []*Comm
		for _, d := range comms[i:] {
			if d.q == q {
				cs = append(cs, d)
			}
		}
		if len(cs) >= int(q.arrival.members.Load()) {
			continue // every member: the Group meets them (metInGroup)
		}
		if err := q.arrive("ncclGroupEnd", cs, true); err != nil {
			return err
		}
	}
	return nil
}

// metInGroup notes a Group that launched operations of comms: a clique all of
// whose members held here were in it had them connected together, as a
// meeting at their first operations would have.
func metInGroup(comms []*Comm) {
	for _, c := range comms {
		q := c.q
		if q.gate.Load()&gateArrive == 0 {
			continue
		}
		n := 0
		for _, d := range comms {
			if d.q == q {
				n++
			}
		}
		a := &q.arrival
		a.mu.Lock()
		if n >= int(a.members.Load()) {
			a.proven = true
			q.gate.And(^int32(gateArrive))
		}
		a.mu.Unlock()
	}
}
