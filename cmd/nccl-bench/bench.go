package main

import (
	"errors"
	"log"
	"sync"

	"github.com/gonccl/nccl"
)

// settings are what the flags choose for a bench.
type settings struct {
	op       *operation
	dt       nccl.DataType // -d, chosen at run time: buffers carry it
	red      nccl.RedOp
	root     int
	grouped  bool // -grouped: c.SetPath(nccl.Grouped)
	maxBytes int  // -e: every send and receive buffer holds this much
	perIter  bool // -I: CUDA events around every iteration
}

// rank is one of this process's ranks: its communicator, a stream, and one
// send and one receive buffer sized for the largest run, as nccl-tests
// allocates them.
type rank struct {
	comm       *nccl.Comm
	stream     nccl.Stream
	send, recv nccl.Buffer
	scratch    nccl.Buffer  // float64, for reductions over the job (jobReduce)
	events     []nccl.Event // -I: iters+1
}

type bench struct {
	settings
	lib       *nccl.Library
	ranks     []rank
	n         int  // ranks in the job
	cap       int  // elements of every send and receive buffer
	symmetric bool // buffers in symmetric windows, for a native call that wants them

	layouts map[int]nccl.Layout // the operation's layouts by count, kept for the run
	layout  nccl.Layout         // the one of the count being run
}

// newBench sets up the ranks of comms (this process's share of the job).
func newBench(lib *nccl.Library, comms []*nccl.Comm, s settings) (*bench, error) {
	b := &bench{settings: s, lib: lib, n: comms[0].Size(), cap: s.maxBytes / s.dt.Size(), ranks: make([]rank, len(comms))}
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
	// VCCL's ncclAlltoAllv runs on symmetric windows only: where the library
	// routes the operation natively, the buffers come from AllocSymmetric.
	b.symmetric = s.op.symmetric && comms[0].PathOf(s.op.path) == nccl.Native
	err := b.eachRank(b.symmetric, func(r *rank) (err error) {
		alloc := func() (nccl.Buffer, error) { return cu.Alloc(r.comm.Device(), s.dt, b.cap) }
		if b.symmetric {
			alloc = func() (nccl.Buffer, error) { return r.comm.AllocSymmetric(s.dt, b.cap) }
		}
		if r.send, err = alloc(); err != nil {
			return err
		}
		r.recv, err = alloc()
		return err
	})
	return b, err
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

// close frees the buffers (symmetric ones together, as freeing them is
// collective), the streams and the events.
func (b *bench) close() error {
	return b.eachRank(b.symmetric, func(r *rank) error {
		var errs []error
		for _, buf := range []nccl.Buffer{r.send, r.recv, r.scratch} {
			if buf.Len() > 0 {
				errs = append(errs, buf.Free())
			}
		}
		for _, e := range r.events {
			errs = append(errs, e.Destroy())
		}
		return errors.Join(append(errs, r.stream.Destroy())...)
	})
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
// does. It allocates nothing.
func (b *bench) launch(count int, inPlace bool, it int) error {
	shift := b.shift(count, it)
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
// testStreamSynchronize: cudaStreamQuery in a loop, and the communicator's
// asynchronous error while a stream is busy.
func (b *bench) sync() {
	for _, r := range b.ranks {
		for {
			done, err := r.stream.Query()
			must(err)
			if done {
				break
			}
			must(r.comm.AsyncError())
		}
	}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
