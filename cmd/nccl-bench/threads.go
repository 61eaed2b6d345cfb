package main

import (
	"errors"
	"runtime"
	"sync"

	"github.com/gonccl/nccl"
)

// -t: threads per process, as nccl-tests' -t. Each thread drives -g GPUs:
// its own bench over its share of the process's communicators, run by a
// goroutine locked to an OS thread of its own from the first barrier to the
// buffers' release. The threads meet where nccl-tests' do, in the job-wide
// barriers and reductions (jobReduce: each bench counts as a process there,
// so times are averaged over every thread of every process, as nccl-tests
// averages them). With one GPU per thread each GPU's launches, plain or of
// its graph, come from its own thread, where -g alone launches every GPU's
// from one, whose graph launches then set the time (docs/performance.md,
// "-t 4 -g 1" against "-g 4").

// newBenches makes one bench per thread over consecutive groups of g of
// comms: all at once where there are several, as a symmetric window's
// allocation waits for every rank.
func newBenches(lib *nccl.Library, comms []*nccl.Comm, threads, g int, s settings) ([]*bench, error) {
	if threads == 1 {
		b, err := newBench(lib, comms, s)
		return []*bench{b}, err
	}
	benches := make([]*bench, threads)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	for k := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			benches[k], errs[k] = newBench(lib, comms[k*g:(k+1)*g], s)
		}()
	}
	wg.Wait()
	return benches, errors.Join(errs...)
}

// eachThread runs drive for every bench: on this goroutine where there is
// one, else each on a goroutine locked to an OS thread of its own, and
// returns once all have. The first bench's drive gets first true: it
// reports.
func eachThread(benches []*bench, drive func(b *bench, first bool)) {
	if len(benches) == 1 {
		drive(benches[0], true)
		return
	}
	var wg sync.WaitGroup
	for k, b := range benches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			drive(b, k == 0)
		}()
	}
	wg.Wait()
}
