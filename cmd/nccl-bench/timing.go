package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/gonccl/nccl"
)

// result is one timed run: µs per iteration averaged over the job's
// processes, the wrong elements of the checked run summed over its ranks (-1:
// not checked) and, with -I, the per-iteration statistics. skipped: the
// operation does not run in place (nothing was timed).
type result struct {
	us      float64
	cpu     float64 // the host's time of the launches, nccl-tests' cputime (-C)
	wrong   int
	iter    *iterStats
	skipped bool
}

// run times iters iterations of count elements. Before the timing, one run
// (the checked one with check) and a barrier, as nccl-tests. The host clock
// runs around the launches and the final synchronisation of every stream, so
// launch costs count, as in nccl-tests. With perIter, a CUDA event is also
// recorded on every stream before each iteration and after the last, as
// nccl-tests' -I 1 does.
func (b *bench) run(count int, inPlace bool, iters int, check bool) result {
	if inPlace && !b.op.inPlace {
		return result{wrong: -1, skipped: true}
	}
	if e := b.elems(count); e > b.cap {
		log.Fatalf("%d elements do not fit the %d-element buffers", e, b.cap)
	}
	b.prepare(count)
	if b.graphs > 0 {
		return b.runGraphs(count, inPlace, iters, check)
	}
	wrong := -1
	if check && b.checkable(inPlace) {
		wrong = b.check(count, inPlace)
	} else {
		must(b.launch(count, inPlace, 0))
		b.sync()
	}
	if b.perIter {
		b.makeEvents(iters)
	}
	b.barrier()
	t0 := time.Now()
	for it := range iters {
		if b.perIter {
			b.record(it)
		}
		must(b.launch(count, inPlace, it))
	}
	if b.perIter {
		b.record(iters)
	}
	cpu := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters)
	b.sync()
	us := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters)
	r := b.timed(us, cpu)
	r.wrong = wrong
	if b.perIter {
		r.iter = stats(b.jobReduce(b.iterTimes(iters), nccl.Max))
	}
	return r
}

// runGraphs is run with -G, as nccl-tests' BenchTime with cudaGraphLaunches:
// one run and a barrier; the iters iterations captured, each at its shift,
// into one CUDA graph per local stream (the warm-up is not); a barrier, then
// on the host clock the graphs launched b.graphs times (each round every
// local GPU's graph in turn) and every stream synchronised; µs per operation
// is that time over iters × b.graphs, averaged over the processes. The graphs
// are destroyed, then with check the result is checked after a run captured
// into graphs of its own, launched once, as nccl-tests checks in this mode.
func (b *bench) runGraphs(count int, inPlace bool, iters int, check bool) result {
	must(b.launch(count, inPlace, 0))
	b.sync()
	b.barrier()
	must(b.capture(func() error {
		for it := range iters {
			if err := b.launch(count, inPlace, it); err != nil {
				return err
			}
		}
		return nil
	}))
	if b.graphDot != "" {
		must(b.writeDots(count, inPlace))
	}
	b.barrier()
	t0 := time.Now()
	must(b.launchGraphs(b.graphs))
	// nccl-tests divides the graph launches' host time by the iterations
	// only, not by the launches as well (BenchTime's cputimeSec): so here.
	cpu := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters)
	b.sync()
	us := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters*b.graphs)
	r := b.timed(us, cpu)
	r.wrong = -1
	must(b.destroyGraphs())
	if check && b.checkable(inPlace) {
		b.barrier()
		r.wrong = b.checkGraph(count, inPlace)
	}
	return r
}

// timed is a run's result from this process's µs per operation and host µs
// of the launches: each averaged over the job's processes (one collective).
func (b *bench) timed(us, cpu float64) result {
	t := b.jobReduce([]float64{us, cpu}, nccl.Sum)
	procs := float64(b.n / len(b.ranks))
	return result{us: t[0] / procs, cpu: t[1] / procs}
}

// capture records what fn enqueues on the local streams into one CUDA graph
// per stream, as nccl-tests captures: every stream's capture begun, in
// thread-local mode, by this goroutine (locked to its OS thread until the
// captures end), fn, every capture ended and instantiated. On failure the
// captures are ended and their graphs destroyed. With -threads each rank's
// thread captures its own stream, fn's launches coming from the threads.
func (b *bench) capture(fn func() error) error {
	cu := b.lib.CUDA()
	if b.th != nil {
		return b.captureOnThreads(fn)
	}
	begun := 0
	var err error
	for ; begun < len(b.ranks); begun++ {
		if err = cu.BeginCapture(b.ranks[begun].stream); err != nil {
			break
		}
	}
	if err == nil {
		err = fn()
	}
	for i := range begun {
		g, eerr := cu.EndCapture(b.ranks[i].stream)
		b.ranks[i].graph = g
		if err == nil {
			err = eerr
		}
	}
	if err != nil {
		return errors.Join(fmt.Errorf("capturing %s into a CUDA graph (-G): %w", b.op.name, err), b.destroyGraphs())
	}
	return nil
}

// captureOnThreads is capture with -threads: every thread begins its
// stream's capture, fn (whose launches run on the threads), every thread
// ends its capture.
func (b *bench) captureOnThreads(fn func() error) error {
	cu := b.lib.CUDA()
	ctx := context.Background()
	err := b.th.Run(ctx, func(i int) error { return cu.BeginCapture(b.ranks[i].stream) })
	if err == nil {
		err = fn()
	}
	eerr := b.th.Run(ctx, func(i int) error {
		g, err := cu.EndCapture(b.ranks[i].stream)
		b.ranks[i].graph = g
		return err
	})
	if err == nil {
		err = eerr
	}
	if err != nil {
		return errors.Join(fmt.Errorf("capturing %s into a CUDA graph (-G -threads): %w", b.op.name, err), b.destroyGraphs())
	}
	return nil
}

// writeDots writes every local rank's graph into the -graph-dot folder, one
// file per size, placement and GPU, with each node's parameters.
func (b *bench) writeDots(count int, inPlace bool) error {
	place := "out-of-place"
	if inPlace {
		place = "in-place"
	}
	for i := range b.ranks {
		r := &b.ranks[i]
		name := fmt.Sprintf("%s-count%d-%s-rank%d.dot", b.op.name, count, place, r.comm.Rank())
		if err := r.graph.WriteDot(filepath.Join(b.graphDot, name), true); err != nil {
			return err
		}
	}
	return nil
}

// launchGraphs launches every local rank's graph on its stream, n rounds;
// with -threads each round is one Threads.Launch. It allocates nothing.
func (b *bench) launchGraphs(n int) error {
	if b.th != nil {
		for i := range b.ranks {
			b.thGraphs[i] = b.ranks[i].graph
		}
		for range n {
			if err := b.th.Launch(context.Background(), b.thGraphs, b.thStreams); err != nil {
				return err
			}
		}
		return nil
	}
	for range n {
		for i := range b.ranks {
			r := &b.ranks[i]
			if err := r.graph.Launch(r.stream); err != nil {
				return err
			}
		}
	}
	return nil
}

// destroyGraphs destroys the local ranks' graphs, if any.
func (b *bench) destroyGraphs() error {
	var errs []error
	for i := range b.ranks {
		r := &b.ranks[i]
		if r.graph != nil {
			errs = append(errs, r.graph.Destroy())
			r.graph = nil
		}
	}
	return errors.Join(errs...)
}

// makeEvents gives every local stream iters+1 timing events.
func (b *bench) makeEvents(iters int) {
	if len(b.ranks[0].events) == iters+1 {
		return
	}
	cu := b.lib.CUDA()
	for i := range b.ranks {
		r := &b.ranks[i]
		for _, e := range r.events {
			must(e.Destroy())
		}
		r.events = r.events[:0]
		for range iters + 1 {
			e, err := cu.NewEvent(r.comm.Device(), nccl.EventDefault)
			must(err)
			r.events = append(r.events, e)
		}
	}
}

// record records event k on every local stream.
func (b *bench) record(k int) {
	for _, r := range b.ranks {
		must(r.events[k].Record(r.stream))
	}
}

// iterTimes are the µs of each iteration on the slowest local GPU.
func (b *bench) iterTimes(iters int) []float64 {
	t := make([]float64, iters)
	for _, r := range b.ranks {
		for it := range iters {
			d, err := r.events[it+1].Elapsed(r.events[it])
			must(err)
			t[it] = max(t[it], float64(d.Nanoseconds())/1e3)
		}
	}
	return t
}

// iterStats summarise per-iteration times taken with CUDA events (nccl-tests'
// -I): each iteration's time is the slowest GPU's, over the whole job.
type iterStats struct {
	MinUs   float64   `json:"min_us"`
	MaxUs   float64   `json:"max_us"`
	AvgUs   float64   `json:"avg_us"`
	P50Us   float64   `json:"p50_us"`
	P95Us   float64   `json:"p95_us"`
	P99Us   float64   `json:"p99_us"`
	StdevUs float64   `json:"stdev_us"`
	CVPct   float64   `json:"cv_pct"`
	TimesUs []float64 `json:"times_us"`
}

// stats computes iterStats as nccl-tests' computeIterStats (src/util.cu).
func stats(times []float64) *iterStats {
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	n := len(sorted)
	pct := func(p int) float64 { return sorted[min(n-1, (n*p+99)/100-1)] }
	st := &iterStats{MinUs: sorted[0], MaxUs: sorted[n-1], P50Us: sorted[n/2], P95Us: pct(95), P99Us: pct(99), TimesUs: times}
	for _, t := range sorted {
		st.AvgUs += t
	}
	st.AvgUs /= float64(n)
	for _, t := range sorted {
		st.StdevUs += (t - st.AvgUs) * (t - st.AvgUs)
	}
	st.StdevUs = math.Sqrt(st.StdevUs / float64(n))
	if st.AvgUs > 0 {
		st.CVPct = st.StdevUs / st.AvgUs * 100
	}
	return st
}
