package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"golang.org/x/sys/unix"
)

// settings are what the flags choose for a bench.
type settings struct {
	op         *operation
	dt         nccl.DataType // -d, chosen at run time: buffers carry it
	red        nccl.RedOp
	root       int
	grouped    bool          // -grouped: c.SetPath(nccl.Grouped)
	maxBytes   int           // -e: every send and receive buffer holds this much
	perIter    bool          // -I: CUDA events around every iteration
	graphs     int           // -G: launches of a CUDA graph holding the timed iterations (0: none)
	register   int           // -R: 0 none, 1 ncclCommRegister, 2 symmetric windows
	graphDot   string        // -graph-dot: a folder for each captured graph's DOT text ("": none)
	threads    bool          // -threads: the local GPUs' launches from nccl.Threads, one OS thread each
	threadSpin time.Duration // -threads-spin
}

// The -R modes, nccl-tests' local_register.
const (
	registerNone      = 0
	registerLocal     = 1 // ncclCommRegister on the send and receive buffers
	registerSymmetric = 2 // the buffers in symmetric windows (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC)
)

// registerNames are -R's modes as the header and -json name them.
var registerNames = [...]string{"none", "local", "symmetric"}

// rank is one of this process's ranks: its communicator, a stream, and one
// send and one receive buffer sized for the largest run, as nccl-tests
// allocates them.
type rank struct {
	comm       *nccl.Comm
	stream     nccl.Stream
	send, recv nccl.Buffer
	scratch    nccl.Buffer  // float64, for reductions over the job (jobReduce)
	events     []nccl.Event // -I: iters+1
	// -R 1: the registrations of send and recv (ncclCommRegister)
	sendReg, recvReg nccl.Registration
	registered       bool
	graph            *nccl.Graph // -G: the captured iterations of this rank's stream, while a size runs
}

type bench struct {
	settings
	lib       *nccl.Library
	ranks     []rank
	n         int    // ranks in the job
	cap       int    // elements of every send and receive buffer
	symmetric bool   // buffers in symmetric windows: -R 2, or a native call that wants them
	alloc     string // what allocated the send and receive buffers

	synced []bool // sync's per-stream state, one per rank

	layouts map[int]nccl.Layout // the operation's layouts by count, kept for the run
	layout  nccl.Layout         // the one of the count being run

	// -threads with several local GPUs: each GPU's launches (its iteration
	// of an operation, its capture, its graph's) from a thread of th, one
	// call of th for all of them. step, made once, is the iteration of
	// stepArgs on rank i; thGraphs and thStreams are Threads.Launch's arguments.
	th       *nccl.Threads
	step     func(i int) error
	stepArgs struct {
		count, shift int
		inPlace      bool
	}
	thGraphs  []*nccl.Graph
	thStreams []nccl.Stream
}

// newBench sets up the ranks of comms (this process's share of the job). A
// library or runtime that lacks what -R or -G needs is an error naming the
// function (the library's *UnsupportedError), before any buffer is made.
//
// The send and receive buffers are allocated once, for the largest size, as
// nccl-tests does: with ncclMemAlloc where the library has it (nccl-tests
// built against NCCL >= 2.19 always uses it), else cudaMalloc; with -R 2 (or
// for a native call that wants them) in symmetric windows (ncclMemAlloc and
// ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, Comm.AllocSymmetric);
// with -R 1 both are then registered whole with ncclCommRegister.
func newBench(lib *nccl.Library, comms []*nccl.Comm, s settings) (*bench, error) {
	b := &bench{settings: s, lib: lib, n: comms[0].Size(), cap: s.maxBytes / s.dt.Size(), ranks: make([]rank, len(comms)), synced: make([]bool, len(comms))}
	if s.graphs > 0 {
		b.perIter = false // nccl-tests: -I is incompatible with -G
	}
	switch s.register {
	case registerNone:
	case registerLocal:
		if err := lib.Require("ncclCommRegister"); err != nil {
			return nil, fmt.Errorf("-R 1: %w", err)
		}
	case registerSymmetric:
		if err := lib.Require("ncclCommWindowRegister", "ncclMemAlloc"); err != nil {
			return nil, fmt.Errorf("-R 2: %w", err)
		}
	default:
		return nil, fmt.Errorf("bad -R %d: 0, 1 or 2", s.register)
	}
	path := nccl.Auto
	if s.grouped {
		path = nccl.Grouped
	}
	cu := lib.CUDA()
	for i, c := range comms {
		r := &b.ranks[i]
		r.comm = c
		if err := c.SetPath(path); err != nil {
			return nil, err
		}
		var err error
		if r.stream, err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
			return nil, err
		}
		if r.scratch, err = cu.Alloc(c.Device(), nccl.Float64, 2); err != nil {
			return nil, err
		}
	}
	if s.graphs > 0 && !cu.HasGraphs() {
		return b, fmt.Errorf("-G %d: %w", s.graphs, noGraphs(cu, b.ranks[0].stream))
	}
	// VCCL's ncclAlltoAllv runs on symmetric windows only: where the library
	// routes the operation natively, the buffers come from AllocSymmetric.
	b.symmetric = s.register == registerSymmetric || s.op.symmetric && comms[0].PathOf(s.op.path) == nccl.Native
	b.alloc = "cudaMalloc"
	if lib.Has("ncclMemAlloc") {
		b.alloc = "ncclMemAlloc"
	}
	if b.symmetric {
		b.alloc = "ncclMemAlloc+ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)"
	}
	err := b.eachRank(b.symmetric, func(r *rank) (err error) {
		dev := r.comm.Device()
		alloc := func() (nccl.Buffer, error) { return cu.Alloc(dev, s.dt, b.cap) }
		switch {
		case b.symmetric:
			alloc = func() (nccl.Buffer, error) { return r.comm.AllocSymmetric(s.dt, b.cap) }
		case b.alloc == "ncclMemAlloc":
			alloc = func() (nccl.Buffer, error) { return lib.MemAlloc(dev, s.dt, b.cap) }
		}
		if r.send, err = alloc(); err != nil {
			return err
		}
		if r.recv, err = alloc(); err != nil {
			return err
		}
		if s.register != registerLocal {
			return nil
		}
		if r.sendReg, err = r.comm.Register(r.send); err != nil {
			return err
		}
		if r.recvReg, err = r.comm.Register(r.recv); err != nil {
			r.comm.Deregister(r.sendReg)
			return err
		}
		r.registered = true
		return nil
	})
	if err == nil && s.threads && len(comms) > 1 {
		err = b.startThreads()
	}
	return b, err
}

// startThreads gives the bench a thread per local GPU (-threads).
func (b *bench) startThreads() error {
	devs := make([]int, len(b.ranks))
	for i := range b.ranks {
		devs[i] = b.ranks[i].comm.Device()
		b.thStreams = append(b.thStreams, b.ranks[i].stream)
	}
	var err error
	if b.th, err = b.lib.CUDA().NewThreads(devs...); err != nil {
		return fmt.Errorf("-threads: %w", err)
	}
	b.th.SetSpin(b.threadSpin)
	b.thGraphs = make([]*nccl.Graph, len(b.ranks))
	b.step = func(i int) error {
		a := &b.stepArgs
		if !b.op.group {
			return b.enqueue(i, a.count, a.inPlace, a.shift)
		}
		return b.lib.Group(func() error { return b.enqueue(i, a.count, a.inPlace, a.shift) })
	}
	return nil
}

// noGraphs is the runtime's own error for the graph function it lacks: a
// capture refused before it begins (CUDA.BeginCapture checks the functions
// first), as gonccl has no other call that returns it.
func noGraphs(cu *nccl.CUDA, s nccl.Stream) error {
	err := cu.BeginCapture(s)
	if err == nil { // not expected: HasGraphs said no
		if g, _ := cu.EndCapture(s); g != nil {
			g.Destroy()
		}
		return errors.New("the CUDA runtime lacks CUDA graphs")
	}
	return err
}

// eachRank runs fn for every local rank: at once, one goroutine each, when
// the calls are collective (a symmetric window's registration would wait for
// the other ranks), else in turn.
func (b *bench) eachRank(collective bool, fn func(r *rank) error) error {
	errs := make([]error, len(b.ranks))
	var wg sync.WaitGroup
	for i := range b.ranks {
		if !collective {
			errs[i] = fn(&b.ranks[i])
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(&b.ranks[i])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// close destroys any graph left, deregisters the buffers (-R 1) and frees
// them (symmetric ones together, as freeing them is collective), the streams
// and the events: all before the communicators close, as a communicator that
// graphs or registrations hold cannot.
func (b *bench) close() error {
	gerr := b.destroyGraphs()
	if b.th != nil {
		b.th.Close()
	}
	return errors.Join(gerr, b.eachRank(b.symmetric, func(r *rank) error {
		var errs []error
		if r.registered {
			errs = append(errs, r.comm.Deregister(r.sendReg), r.comm.Deregister(r.recvReg))
			r.registered = false
		}
		for _, buf := range []nccl.Buffer{r.send, r.recv, r.scratch} {
			if buf.Len() > 0 {
				errs = append(errs, buf.Free())
			}
		}
		for _, e := range r.events {
			errs = append(errs, e.Destroy())
		}
		if r.stream != (nccl.Stream{}) {
			errs = append(errs, r.stream.Destroy())
		}
		return errors.Join(errs...)
	}))
}

// count is the element count per rank of a size as nccl-tests prints it.
func (b *bench) count(size int) int {
	count := size / b.dt.Size()
	if b.op.timesN {
		count /= b.n
	}
	if b.op.layout != nil { // nccl-tests aligns alltoallv's per-peer count to 16 bytes
		count &^= max(16/b.dt.Size(), 1) - 1
	}
	return count
}

// elems is the element count of the operation's larger buffer.
func (b *bench) elems(count int) int {
	if b.op.timesN {
		return count * b.n
	}
	return count
}

// shift is the element offset of iteration it into the buffers: nccl-tests
// moves every iteration to the next slot of the size, so that a small
// operation does not always find its data in cache.
func (b *bench) shift(count, it int) int {
	e := b.elems(count)
	return e * (it % max(b.cap/max(e, 1), 1))
}

// prepare readies a run of count elements: the operation's layout, made once
// per count and kept (NCCL may read it until a group ends).
func (b *bench) prepare(count int) {
	if b.op.layout == nil {
		return
	}
	l, ok := b.layouts[count]
	if !ok {
		l = b.op.layout(b.n, count, b.dt.Size())
		if b.layouts == nil {
			b.layouts = map[int]nccl.Layout{}
		}
		b.layouts[count] = l
	}
	b.layout = l
}

// launch enqueues iteration it on every local rank: in one group when there
// are several ranks or the operation is sends and receives, as nccl-tests
// does; with -threads, each rank's from its own thread, in a group of its
// own where the operation is sends and receives. It allocates nothing.
func (b *bench) launch(count int, inPlace bool, it int) error {
	shift := b.shift(count, it)
	if b.th != nil {
		b.stepArgs.count, b.stepArgs.inPlace, b.stepArgs.shift = count, inPlace, shift
		return b.th.Run(context.Background(), b.step)
	}
	if len(b.ranks) == 1 && !b.op.group {
		return b.enqueue(0, count, inPlace, shift)
	}
	return b.lib.Group(func() error {
		for i := range b.ranks {
			if err := b.enqueue(i, count, inPlace, shift); err != nil {
				return err
			}
		}
		return nil
	})
}

// enqueue issues local rank i's call at element offset shift.
func (b *bench) enqueue(i, count int, inPlace bool, shift int) error {
	r := &b.ranks[i]
	send, recv := b.op.buffers(r.send.Slice(shift, b.cap), r.recv.Slice(shift, b.cap), count, b.n, r.comm.Rank(), inPlace)
	return b.op.call(r.comm, args{send: send, recv: recv, red: b.red, root: b.root, layout: b.layout, s: r.stream})
}

// warmUp runs warm iterations at every size from lo to hi, doubling, out of
// place, before anything is timed, as nccl-tests does.
func (b *bench) warmUp(lo, hi, warm int) {
	for size := lo; size <= hi; size *= 2 {
		count := b.count(size)
		if count == 0 {
			continue
		}
		b.prepare(count)
		for it := range warm {
			must(b.launch(count, false, it))
		}
		b.sync()
	}
}

// sync waits for every local stream by polling, as nccl-tests'
// testStreamSynchronize does: rounds over the streams not yet done, each
// polled with cudaStreamQuery and, while busy, its communicator's
// asynchronous error; after a round in which none finished, the thread yields
// its CPU (sched_yield). It allocates nothing.
func (b *bench) sync() {
	done := b.synced
	clear(done)
	for remaining := len(b.ranks); remaining > 0; {
		idle := true
		for i := range b.ranks {
			if done[i] {
				continue
			}
			r := &b.ranks[i]
			ok, err := r.stream.Query()
			must(err)
			if ok {
				done[i] = true
				remaining--
				idle = false
				continue
			}
			must(r.comm.AsyncError())
		}
		if idle {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
