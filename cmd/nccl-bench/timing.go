package main

import (
	"log"
	"math"
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
	b.sync()
	us := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters)
	r := result{us: b.jobReduce([]float64{us}, nccl.Sum)[0] / float64(b.n/len(b.ranks)), wrong: wrong}
	if b.perIter {
		r.iter = stats(b.jobReduce(b.iterTimes(iters), nccl.Max))
	}
	return r
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
