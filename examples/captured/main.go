// Command captured captures a step of -ops all-reduces into a CUDA graph once
// per rank (CUDA.Capture) and replays it -replays times: a launch is one call
// however many operations the graph holds, which is what makes small
// collectives fast. Before a sample of the replays (the first, the last and
// every 100th) it changes the inputs with stream-ordered asynchronous copies,
// outside the graph, and checks every element of every output against the
// closed-form sum. Then it times the replays against the same all-reduces
// launched plainly, and checks both results again.
//
// It needs CUDA >= 11.4 (graphs) and an NCCL that can be captured (>= 2.9).
// Every rank captures the same operations, after a first plain step has
// connected the ranks. The graph is destroyed before the communicator is
// closed: NCCL >= 2.26 waits in ncclCommDestroy for graphs that hold its
// operations, and gonccl's Close refuses while one does (ErrGraphsAlive).
//
// -symmetric puts the buffers in symmetric windows (Comm.AllocSymmetric, NCCL
// >= 2.27), where NCCL runs its symmetric kernels: with a graph, the fast path
// for small all-reduces.
//
// Alone it runs one goroutine per GPU (-gpus, default all), each launching its
// own rank's graph. Started by a launcher (torchrun, mpirun, srun) or with
// -np N, it runs one rank per process, which NCCL recommends with graphs.
// Every wait on the other ranks ends at -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

type params struct {
	ops, n, replays int
	nonBlocking     bool
	symmetric       bool
	timeout         time.Duration
}

func main() {
	ngpu := flag.Int("gpus", 0, "ranks in one process, one goroutine and GPU each (default: all GPUs)")
	var p params
	flag.IntVar(&p.ops, "ops", 8, "all-reduces per graph")
	flag.IntVar(&p.n, "n", 1024, "float32 elements per all-reduce")
	flag.IntVar(&p.replays, "replays", 1000, "graph launches, and plain steps to compare")
	flag.BoolVar(&p.nonBlocking, "nonblocking", false, "a non-blocking communicator: abortable inside NCCL, but NCCL launches each plain operation from a thread it starts")
	flag.BoolVar(&p.symmetric, "symmetric", false, "buffers in symmetric windows (Comm.AllocSymmetric, NCCL >= 2.27): NCCL's symmetric kernels")
	flag.DurationVar(&p.timeout, "timeout", 60*time.Second, "deadline for the other ranks to join and finish every replay, and again to close")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if p.ops < 1 || p.n < 1 || p.replays < 1 {
		log.Fatal("-ops, -n and -replays must be positive")
	}
	job, err := lf.Detect()
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if cu := lib.CUDA(); !cu.HasGraphs() {
		log.Fatalf("captured: the CUDA runtime %s has no graph capture (CUDA >= 11.4 needed)", cu.Path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	what := fmt.Sprintf("%d all-reduces of %d float32 per graph, %d replays, NCCL %s", p.ops, p.n, p.replays, lib.Version())
	if p.symmetric {
		what += ", symmetric buffers"
	}
	if job.Launcher != launch.Alone { // one rank in this process
		via, _ := launch.Choose(job, lf.Share())
		id, err := launch.UniqueID(ctx, lib, job, lf.Share())
		if err != nil {
			log.Fatalf("rank %d: %v", job.Rank, err)
		}
		visible, err := lib.CUDA().DeviceCount()
		if err != nil {
			log.Fatal(err)
		}
		dev, err := job.Device(visible) // the local rank's GPU, or a shared one under NCCL_MULTI_RANK_GPU_ENABLE=1
		if err != nil {
			log.Fatal(err)
		}
		t, err := rank(ctx, lib, id, dev, job.Size, job.Rank, p, func() { launch.Cleanup(job, lf.Share()) })
		if err != nil {
			log.Fatalf("rank %d: %v", job.Rank, err)
		}
		fmt.Printf("captured: rank %d/%d (%s, id via %s) on GPU %d, %s: %s\n", job.Rank, job.Size, job.Launcher, via, dev, what, t)
		return
	}
	n := *ngpu
	if n == 0 {
		if n, err = lib.CUDA().DeviceCount(); err != nil {
			log.Fatal(err)
		}
	}
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	ctx, fail := context.WithCancel(ctx) // a rank that fails ends the others' waits
	defer fail()
	times, errs := make([]timing, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if times[r], errs[r] = rank(ctx, lib, id, r, n, r, p, func() {}); errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
				fail()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("captured: %d ranks, %s: %s (rank 0)\n", n, what, times[0])
}

// timing is one rank's time per all-reduce, from graph replays and plain.
type timing struct{ graph, plain time.Duration }

func (t timing) String() string {
	return fmt.Sprintf("results checked; %.1f µs per all-reduce from the graph, %.1f µs launched plainly",
		float64(t.graph.Nanoseconds())/1e3, float64(t.plain.Nanoseconds())/1e3)
}

// rank is rank r of n on GPU dev: it captures, replays, checks and times.
func rank(ctx context.Context, lib *nccl.Library, id nccl.UniqueID, dev, n, r int, p params, joined func()) (t timing, err error) {
	blocking := !p.nonBlocking
	comm, err := lib.InitRank(ctx, dev, id, n, r, &nccl.Config{Blocking: &blocking})
	joined() // every rank has read the id, or the job has failed
	if err != nil {
		return t, err
	}
	defer closeComm(comm, p.timeout, &err) // runs after the graph's Destroy below
	// Nothing NCCL enqueues can outlive the deadline: abort there (which
	// destroys the graphs holding the communicator), and say so.
	stop := context.AfterFunc(ctx, func() { comm.Abort() })
	defer stop()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (the -timeout of %v passed: the communicator was aborted)", err, p.timeout)
		}
	}()
	cu := lib.CUDA()
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return t, err
	}
	defer s.Destroy()
	total := p.ops * p.n
	alloc := func() (nccl.Buffer, error) { return cu.Alloc(dev, nccl.Float32, total) }
	if p.symmetric { // every rank together; freed before the communicator is closed
		alloc = func() (nccl.Buffer, error) { return comm.AllocSymmetric(nccl.Float32, total) }
	}
	in, err := alloc()
	if err != nil {
		return t, err
	}
	defer in.Free()
	out, err := alloc()
	if err != nil {
		return t, err
	}
	defer out.Free()
	host, err := nccl.MallocHostOf[float32](cu, total) // page-locked: the source of asynchronous copies
	if err != nil {
		return t, err
	}
	defer nccl.FreeHostOf(cu, host)
	got := make([]float32, total)
	// The step: op o all-reduces elements [o·n, (o+1)·n) of in into out.
	step := func() error {
		for o := range p.ops {
			if err := comm.AllReduce(in.Slice(o*p.n, (o+1)*p.n), out.Slice(o*p.n, (o+1)*p.n), nccl.Sum, s); err != nil {
				return err
			}
		}
		return nil
	}
	// Rank r's input v is (r+1)·((i+v)%97) at element i: the sum is known.
	setInputs := func(v int) error {
		for i := range host {
			host[i] = float32((r + 1) * ((i + v) % 97))
		}
		return nccl.CopyInAsync(in, host, s)
	}
	check := func(v int, what string) error {
		if err := comm.Wait(ctx, s); err != nil {
			return err
		}
		if err := nccl.CopyOut(got, out); err != nil {
			return err
		}
		for i, x := range got {
			if want := float32(n * (n + 1) / 2 * ((i + v) % 97)); x != want {
				return fmt.Errorf("%s: all-reduce %d element %d = %v, want %v", what, i/p.n, i%p.n, x, want)
			}
		}
		return nil
	}
	// One plain step first: NCCL connects the ranks in their first operations.
	if err := setInputs(0); err != nil {
		return t, err
	}
	if err := step(); err != nil {
		return t, err
	}
	if err := check(0, "first plain step"); err != nil {
		return t, err
	}
	g, err := cu.Capture(s, step) // nothing runs: the step is recorded
	if err != nil {
		return t, err
	}
	defer g.Destroy()
	// Uploaded now, the graph's first replay does not upload it, and the
	// timed replays below measure launches alone.
	if err := g.Upload(s); err != nil {
		return t, err
	}
	for k := range p.replays {
		sample := k%100 == 0 || k == p.replays-1
		if sample { // new inputs, copied in stream order before the launch
			if err := setInputs(k + 1); err != nil {
				return t, err
			}
		}
		if err := g.Launch(s); err != nil {
			return t, err
		}
		if sample {
			if err := check(k+1, fmt.Sprintf("replay %d", k)); err != nil {
				return t, err
			}
		}
	}
	// Timed: as many of the same all-reduces from the graph, then plainly,
	// each run from fresh inputs and ending in a wait for the stream.
	timed := func(v int, what string, launch func() error) (time.Duration, error) {
		if err := setInputs(v); err != nil {
			return 0, err
		}
		if err := comm.Wait(ctx, s); err != nil {
			return 0, err
		}
		start := time.Now()
		for range p.replays {
			if err := launch(); err != nil {
				return 0, err
			}
		}
		if err := comm.Wait(ctx, s); err != nil {
			return 0, err
		}
		per := time.Since(start) / time.Duration(p.replays*p.ops)
		return per, check(v, what)
	}
	if t.graph, err = timed(p.replays+1, "timed replays", func() error { return g.Launch(s) }); err != nil {
		return t, err
	}
	t.plain, err = timed(p.replays+2, "timed plain steps", step)
	return t, err
}

// closeComm closes c, giving the other ranks timeout to close theirs too, and
// reports its failure in *err unless an earlier error is there.
func closeComm(c *nccl.Comm, timeout time.Duration, err *error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if cerr := c.Close(ctx); cerr != nil && *err == nil {
		*err = fmt.Errorf("close: %w", cerr)
	}
}
