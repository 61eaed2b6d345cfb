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
// Alone it drives every GPU (-gpus, default all) from one goroutine through
// nccl.Threads: an OS thread per GPU runs each rank's part of a step, all at
// once, and one call launches every GPU's graph. Started by a launcher
// (torchrun, mpirun, srun) or with -np N, it runs one rank per process, which
// NCCL recommends with graphs.
// Every wait on the other ranks ends at -timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
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
	t, err := allGPUs(ctx, lib, n, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("captured: %d ranks, %s: %s (rank 0)\n", n, what, t)
}

// timing is the time per all-reduce, from graph replays and plain.
type timing struct{ graph, plain time.Duration }

func (t timing) String() string {
	return fmt.Sprintf("results checked; %.1f µs per all-reduce from the graph, %.1f µs launched plainly",
		float64(t.graph.Nanoseconds())/1e3, float64(t.plain.Nanoseconds())/1e3)
}

// rank is rank r of n on GPU dev, alone in its process.
func rank(ctx context.Context, lib *nccl.Library, id nccl.UniqueID, dev, n, r int, p params, joined func()) (t timing, err error) {
	blocking := !p.nonBlocking
	comm, err := lib.InitRank(ctx, dev, id, n, r, &nccl.Config{Blocking: &blocking})
	joined() // every rank has read the id, or the job has failed
	if err != nil {
		return t, err
	}
	defer closeComm(comm, p.timeout, &err) // runs after the rank's release below
	// Nothing NCCL enqueues can outlive the deadline: abort there (which
	// destroys the graphs holding the communicator), and say so.
	stop := context.AfterFunc(ctx, func() { comm.Abort() })
	defer stop()
	defer explain(ctx, p.timeout, &err)
	k := &rankOf{p: p, comm: comm, cu: lib.CUDA(), n: n, r: r}
	defer k.release()
	return steps(ctx, p, func(f func(k *rankOf) error) error { return f(k) }, func() error { return k.g.Launch(k.s) })
}

// allGPUs runs n ranks in this process, one per GPU, from this goroutine:
// nccl.Threads keeps an OS thread per GPU, each rank's part of a step runs
// on its GPU's thread, every rank's at once, and a replay launches every
// GPU's graph in one call (Threads.Launch).
func allGPUs(ctx context.Context, lib *nccl.Library, n int, p params) (t timing, err error) {
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	blocking := !p.nonBlocking
	comms, err := lib.InitAll(ctx, devs, &nccl.Config{Blocking: &blocking})
	if err != nil {
		return t, err
	}
	defer closeAll(comms, p.timeout, &err)
	stop := context.AfterFunc(ctx, func() {
		for _, c := range comms {
			c.Abort()
		}
	})
	defer stop()
	defer explain(ctx, p.timeout, &err)
	th, err := lib.CUDA().NewThreads(devs...)
	if err != nil {
		return t, err
	}
	defer th.Close()
	ks := make([]*rankOf, n)
	for r, c := range comms {
		ks[r] = &rankOf{p: p, comm: c, cu: lib.CUDA(), n: n, r: r}
	}
	defer func() { // on the threads, every rank at once: freeing symmetric buffers is collective
		rctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		defer cancel()
		th.Run(rctx, func(r int) error { ks[r].release(); return nil })
	}()
	graphs, streams := make([]*nccl.Graph, n), make([]nccl.Stream, n)
	each := func(f func(k *rankOf) error) error {
		return th.Run(ctx, func(r int) error { return f(ks[r]) })
	}
	launch := func() error {
		for r, k := range ks {
			graphs[r], streams[r] = k.g, k.s
		}
		return th.Launch(ctx, graphs, streams)
	}
	return steps(ctx, p, each, launch)
}

// steps is the run, for the rank of this process or for every GPU's: each
// calls f for every rank (at once where there are several), launch replays
// every rank's graph. A plain step first, as NCCL connects the ranks in
// their first operations; the capture; the replays, the inputs changed and
// the outputs checked on a sample of them; then the graph's replays and as
// many plain steps timed.
func steps(ctx context.Context, p params, each func(f func(k *rankOf) error) error, launch func() error) (t timing, err error) {
	if err := each((*rankOf).setUp); err != nil {
		return t, err
	}
	if err := each(func(k *rankOf) error { return k.setInputs(0) }); err != nil {
		return t, err
	}
	if err := each((*rankOf).step); err != nil {
		return t, err
	}
	if err := each(func(k *rankOf) error { return k.check(ctx, 0, "first plain step") }); err != nil {
		return t, err
	}
	if err := each((*rankOf).capture); err != nil {
		return t, err
	}
	for r := range p.replays {
		sample := r%100 == 0 || r == p.replays-1
		if sample { // new inputs, copied in stream order before the launch
			if err := each(func(k *rankOf) error { return k.setInputs(r + 1) }); err != nil {
				return t, err
			}
		}
		if err := launch(); err != nil {
			return t, err
		}
		if sample {
			if err := each(func(k *rankOf) error { return k.check(ctx, r+1, fmt.Sprintf("replay %d", r)) }); err != nil {
				return t, err
			}
		}
	}
	// Timed: as many of the same all-reduces from the graph, then plainly,
	// each run from fresh inputs and ending in a wait for the streams.
	timed := func(v int, what string, launch func() error) (time.Duration, error) {
		if err := each(func(k *rankOf) error { return k.setInputs(v) }); err != nil {
			return 0, err
		}
		if err := each(func(k *rankOf) error { return k.comm.Wait(ctx, k.s) }); err != nil {
			return 0, err
		}
		start := time.Now()
		for range p.replays {
			if err := launch(); err != nil {
				return 0, err
			}
		}
		if err := each(func(k *rankOf) error { return k.comm.Wait(ctx, k.s) }); err != nil {
			return 0, err
		}
		per := time.Since(start) / time.Duration(p.replays*p.ops)
		return per, each(func(k *rankOf) error { return k.check(ctx, v, what) })
	}
	if t.graph, err = timed(p.replays+1, "timed replays", launch); err != nil {
		return t, err
	}
	t.plain, err = timed(p.replays+2, "timed plain steps", func() error { return each((*rankOf).step) })
	return t, err
}

// rankOf is one rank: its communicator, stream, buffers and graph.
type rankOf struct {
	p       params
	comm    *nccl.Comm
	cu      *nccl.CUDA
	n, r    int // ranks, and this one
	s       nccl.Stream
	in, out nccl.Buffer
	host    []float32 // page-locked: the source of asynchronous copies
	got     []float32
	g       *nccl.Graph
}

// setUp makes the rank's stream and buffers.
func (k *rankOf) setUp() (err error) {
	dev := k.comm.Device()
	if k.s, err = k.cu.NewStream(dev, nccl.StreamNonBlocking); err != nil {
		return err
	}
	total := k.p.ops * k.p.n
	alloc := func() (nccl.Buffer, error) { return k.cu.Alloc(dev, nccl.Float32, total) }
	if k.p.symmetric { // every rank together; freed before the communicator is closed
		alloc = func() (nccl.Buffer, error) { return k.comm.AllocSymmetric(nccl.Float32, total) }
	}
	if k.in, err = alloc(); err != nil {
		return err
	}
	if k.out, err = alloc(); err != nil {
		return err
	}
	if k.host, err = nccl.MallocHostOf[float32](k.cu, total); err != nil {
		return err
	}
	k.got = make([]float32, total)
	return nil
}

// release destroys the graph (before the communicator closes: NCCL >= 2.26
// waits for graphs that hold it) and frees what setUp made.
func (k *rankOf) release() {
	if k.g != nil {
		k.g.Destroy()
	}
	if k.host != nil {
		nccl.FreeHostOf(k.cu, k.host)
	}
	for _, b := range []nccl.Buffer{k.in, k.out} {
		if b.Len() > 0 {
			b.Free()
		}
	}
	if k.s != (nccl.Stream{}) {
		k.s.Destroy()
	}
}

// step is the step: op o all-reduces elements [o·n, (o+1)·n) of in into out.
func (k *rankOf) step() error {
	n := k.p.n
	for o := range k.p.ops {
		if err := k.comm.AllReduce(k.in.Slice(o*n, (o+1)*n), k.out.Slice(o*n, (o+1)*n), nccl.Sum, k.s); err != nil {
			return err
		}
	}
	return nil
}

// capture records the step into the rank's graph (nothing runs) and uploads
// it, so that its first replay does not upload it and the timed replays
// measure launches alone.
func (k *rankOf) capture() (err error) {
	if k.g, err = k.cu.Capture(k.s, k.step); err != nil {
		return err
	}
	return k.g.Upload(k.s)
}

// setInputs makes input v: rank r's is (r+1)·((i+v)%97) at element i, so the
// sum is known.
func (k *rankOf) setInputs(v int) error {
	for i := range k.host {
		k.host[i] = float32((k.r + 1) * ((i + v) % 97))
	}
	return nccl.CopyInAsync(k.in, k.host, k.s)
}

// check waits for the rank's stream and checks every element of input v's
// sum.
func (k *rankOf) check(ctx context.Context, v int, what string) error {
	if err := k.comm.Wait(ctx, k.s); err != nil {
		return err
	}
	if err := nccl.CopyOut(k.got, k.out); err != nil {
		return err
	}
	for i, x := range k.got {
		if want := float32(k.n * (k.n + 1) / 2 * ((i + v) % 97)); x != want {
			return fmt.Errorf("rank %d, %s: all-reduce %d element %d = %v, want %v", k.r, what, i/k.p.n, i%k.p.n, x, want)
		}
	}
	return nil
}

// explain adds to *err that the deadline passed, where it did.
func explain(ctx context.Context, timeout time.Duration, err *error) {
	if *err != nil && ctx.Err() != nil {
		*err = fmt.Errorf("%w (the -timeout of %v passed: the communicators were aborted)", *err, timeout)
	}
}

// closeAll closes comms together, giving them timeout, and reports its
// failure in *err unless an earlier error is there.
func closeAll(comms []*nccl.Comm, timeout time.Duration, err *error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if cerr := nccl.CloseAll(ctx, comms); cerr != nil && *err == nil {
		*err = fmt.Errorf("close: %w", cerr)
	}
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
