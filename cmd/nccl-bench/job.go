package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/launch"
)

// A job is processes × g ranks; these are what spans its processes:
// communicator creation, and the reductions of times and wrong counts that
// nccl-tests does over MPI.

// initJob creates this process's communicators: g ranks on GPUs
// LocalRank·g … LocalRank·g+g-1. Alone (no launcher), through ncclCommInitAll;
// in a job, every GPU's ncclCommInitRank from its own goroutine, as each
// blocks until all ranks of the job have joined; the unique id is shared as
// share says (launch.UniqueID: torchrun's store, NCCL_COMM_ID, a file). The
// communicators are blocking, as nccl-tests' (a context that never ends), and
// configured as nccl-tests configures them (testsConfig).
func initJob(lib *nccl.Library, job launch.Job, g int, share launch.Share) ([]*nccl.Comm, error) {
	ctx := context.Background()
	cfg := testsConfig(lib)
	devs := make([]int, g)
	for i := range devs {
		devs[i] = job.LocalRank*g + i
	}
	if job.Size == 1 {
		return lib.InitAll(ctx, devs, cfg)
	}
	idCtx, cancel := context.WithTimeout(ctx, time.Minute) // for rank 0's id to arrive
	id, err := launch.UniqueID(idCtx, lib, job, share)
	cancel()
	if err != nil {
		return nil, err
	}
	comms := make([]*nccl.Comm, g)
	errs := make([]error, g)
	var wg sync.WaitGroup
	for i, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[i], errs[i] = lib.InitRank(ctx, dev, id, job.Size*g, job.Rank*g+i, cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			if c != nil {
				c.Abort()
			}
		}
		return nil, err
	}
	launch.Cleanup(job, share)
	return comms, nil
}

// testsConfig is the configuration nccl-tests 2.19 gives its communicators
// (initComms in src/common.cu): NVLink-centric scheduling from NCCL 2.28 on,
// which NCCL passes to its kernel launches on GPUs of compute capability 10.0
// and up (CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING, enqueue.cc).
// Older libraries get NCCL's defaults (nil), as nccl-tests built against them.
func testsConfig(lib *nccl.Library) *nccl.Config {
	if !lib.Version().AtLeast(abi.V(2, 28, 0)) {
		return nil
	}
	one := int32(1)
	return &nccl.Config{NvlinkCentricSched: &one}
}

// closeComms closes the communicators together: finalizing one may wait for
// the other ranks.
func closeComms(comms []*nccl.Comm) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Close(context.Background())
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// local says whether this process holds every rank of the job.
func (b *bench) local() bool { return len(b.ranks) == b.n }

// barrier returns once every process has reached it (an all-reduce over the
// job); one process alone has nothing to wait for.
func (b *bench) barrier() {
	if !b.local() {
		b.jobReduce([]float64{0}, nccl.Sum)
	}
}

// jobReduce combines v over the job's processes with op (nccl.Sum or
// nccl.Max): nccl-tests' Allreduce over MPI, here an NCCL all-reduce of
// float64. The process's first rank brings v; its other ranks bring zeros for
// a sum and v again for a maximum, so each process counts once.
func (b *bench) jobReduce(v []float64, op nccl.RedOp) []float64 {
	if b.local() {
		return v
	}
	if b.ranks[0].scratch.Len() < len(v) {
		cu := b.lib.CUDA()
		for i := range b.ranks {
			r := &b.ranks[i]
			must(r.scratch.Free())
			var err error
			r.scratch, err = cu.Alloc(r.comm.Device(), nccl.Float64, len(v))
			must(err)
		}
	}
	zeros := make([]float64, len(v))
	for i, r := range b.ranks {
		in := v
		if i > 0 && op == nccl.Sum {
			in = zeros
		}
		must(nccl.CopyIn(r.scratch, in))
	}
	must(b.lib.Group(func() error {
		for _, r := range b.ranks {
			x := r.scratch.Slice(0, len(v))
			if err := r.comm.AllReduce(x, x, op, r.stream); err != nil {
				return err
			}
		}
		return nil
	}))
	b.sync()
	out := make([]float64, len(v))
	must(nccl.CopyOut(out, b.ranks[0].scratch))
	return out
}
