package nccl

import (
	"encoding/binary"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl/internal/capi"
)

// A clique is the ranks of one communicator that this process holds (NCCL's
// intra-process ranks, comm->intraComm0). NCCL shares state between them: the
// last of them to be aborted or destroyed frees them all (init.cc,
// commReclaim), and its docs forbid any NCCL call on the communicator while
// ncclCommAbort runs ("make sure no thread is calling any NCCL operations
// while calling ncclCommAbort", usage/communicators.rst). Seen breaking that
// rule: "double free or corruption" inside ncclCommAbort of one rank while
// another rank's thread was inside ncclAllReduce (VCCL 2.29.2, NVIDIA 2.29.2
// and 2.30.7 at 4 ranks). So an abort closes its clique's gate: new calls on
// the clique's members wait, and ncclCommAbort runs once no call is inside
// NCCL on any of them.
type clique struct {
	key  uint64
	gate atomic.Int32 // gateAbort while an abort frees a member; gateArrive (see arrive)
	mu   sync.Mutex   // one abort at a time; guards members
	refs int          // members, under the library's cliquesMu
	mem  []*Comm

	arrival arrival // one-goroutine cliques' first operations (see arrive)
}

// The clique's gate bits. Any bit sends an operation down the slow path
// (Comm.reenter); only gateAbort keeps calls out.
const (
	gateAbort  = 1 << iota // an abort frees a member: nothing enters
	gateArrive             // operations outside a Group meet first (see arrive)
)

// cliqueKey of ranks that join with id: every rank of one communicator in
// this process passes the same id.
func cliqueKey(id *UniqueID) uint64 {
	h := fnv.New64a()
	h.Write(id.Internal[:])
	return h.Sum64()
}

// derivedKey of the communicator that the seq-th derive (Split, Shrink,
// Grow) of a parent with key parent makes for color: the ranks of the parent
// held here that derive together with one color make one communicator.
func derivedKey(parent uint64, seq uint64, color int) uint64 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], parent)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(color))
	h := fnv.New64a()
	h.Write(b[:])
	return h.Sum64()
}

// soloKey is a key no other communicator has (ncclCommInitAll's set is one
// clique made at once; a communicator whose peers are unknown stands alone).
var soloKeys atomic.Uint64

func soloKey() uint64 { return 1<<63 | soloKeys.Add(1) }

// joinClique adds c to the clique of key.
func (l *Library) joinClique(c *Comm, key uint64) {
	l.cliquesMu.Lock()
	q := l.cliques[key]
	if q == nil {
		q = &clique{key: key}
		if l.cliques == nil {
			l.cliques = map[uint64]*clique{}
		}
		l.cliques[key] = q
	}
	q.refs++
	l.cliquesMu.Unlock()
	q.mu.Lock()
	q.mem = append(q.mem, c)
	q.mu.Unlock()
	q.arrival.members.Add(1)
	c.q = q
}

// leaveClique removes c once it is freed (q.mu held by the freeing abort, or
// taken here for a destroy).
func (l *Library) leaveClique(c *Comm, locked bool) {
	q := c.q
	if !locked {
		q.mu.Lock()
	}
	for i, m := range q.mem {
		if m == c {
			q.mem = append(q.mem[:i], q.mem[i+1:]...)
			break
		}
	}
	if !locked {
		q.mu.Unlock()
	}
	q.arrival.members.Add(-1)
	l.cliquesMu.Lock()
	if q.refs--; q.refs == 0 && l.cliques[q.key] == q {
		delete(l.cliques, q.key)
	}
	l.cliquesMu.Unlock()
}

// busy reports whether a member other than c has a call inside NCCL (q.mu held).
func (q *clique) busy(c *Comm) bool {
	for _, m := range q.mem {
		if m != c && m.calls() != 0 {
			return true
		}
	}
	return false
}

// waitOpen waits while an abort holds the gate.
func (q *clique) waitOpen() {
	for i := 0; q.gate.Load()&gateAbort != 0; i++ {
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// abortFree frees c with ncclCommAbort once no member of its clique has a
// call inside NCCL: it closes the gate, so that no new call enters, and waits
// for the calls inside to return. It never blocks its caller, which may hold
// calls counted in on other members (a group's launch): if another abort of
// the clique is under way, or a member has a call inside, the rest is done in
// the background (Abort does not wait for other goroutines' calls; Done
// tells when the communicator is freed).
func (c *Comm) abortFree() error {
	q := c.q
	if q.mu.TryLock() {
		q.gate.Or(gateAbort)
		if !q.busy(c) {
			return c.freeGated()
		}
	} else {
		go func() {
			q.mu.Lock()
			q.gate.Or(gateAbort)
			c.freeWhenQuiet()
		}()
		return nil
	}
	go c.freeWhenQuiet()
	return nil
}

// freeWhenQuiet waits, gate closed and q.mu held, until no other member has
// a call inside NCCL, then frees c.
func (c *Comm) freeWhenQuiet() {
	for c.q.busy(c) {
		time.Sleep(20 * time.Microsecond)
	}
	c.freeGated()
}

// freeGated frees c (q.mu held, gate closed), then opens the gate.
func (c *Comm) freeGated() error {
	err := c.free(capi.FnCommAbort)
	c.q.gate.And(^int32(gateAbort))
	c.q.mu.Unlock()
	return err
}
