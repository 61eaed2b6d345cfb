// Command dataparallel trains a linear model data-parallel, in the spirit of the
// MPI+NCCL tutorial: each rank computes the gradient of the squared error on its
// own shard, the ranks average their gradients with AllReduce(avg), and every
// rank applies the same update. At the end every rank holds bit-identical
// weights, and they match a single-process run over all the data.
//
// Alone it runs one goroutine per GPU in this process. Started by a launcher
// (torchrun, mpirun, srun) or with -np N, it runs one rank per process, each
// process driving the GPU of its local rank; the ranks share NCCL's unique id
// the launcher's way (launch.UniqueID), and check with two all-reduces (max and
// min) that every rank's weights are the same bits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

const features = 16

type params struct {
	perRank, steps int
	lr             float64
	timeout        time.Duration
}

func main() {
	ngpu := flag.Int("gpus", 0, "ranks in one process, one goroutine and GPU each (default: all GPUs)")
	var p params
	flag.IntVar(&p.perRank, "samples", 4096, "training samples per rank")
	flag.IntVar(&p.steps, "steps", 50, "gradient steps")
	flag.Float64Var(&p.lr, "lr", 0.05, "learning rate")
	flag.DurationVar(&p.timeout, "timeout", 60*time.Second, "deadline for the other ranks to join and finish every step, and again to close")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	job, err := lf.Detect()
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if job.Launcher != launch.Alone {
		if err := oneRank(lib, job, lf.Share(), p); err != nil {
			log.Fatalf("rank %d: %v", job.Rank, err)
		}
		return
	}
	n := *ngpu
	if n == 0 {
		if n, err = lib.CUDA().DeviceCount(); err != nil {
			log.Fatal(err)
		}
	}
	xs, ys, wStar := dataset(n * p.perRank)
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	weights := make([][]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() (err error) {
				ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
				defer cancel()
				comm, err := lib.InitRank(ctx, r, id, n, r, nil)
				if err != nil {
					return err
				}
				defer closeComm(comm, p.timeout, &err)
				lo, hi := r*p.perRank, (r+1)*p.perRank
				weights[r], err = train(ctx, comm, r, xs[lo:hi], ys[lo:hi], p)
				return err
			}()
			if errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	for r := 1; r < n; r++ {
		for f := range weights[r] {
			if math.Float64bits(weights[r][f]) != math.Float64bits(weights[0][f]) {
				log.Fatalf("rank %d weight %d = %v, rank 0 has %v", r, f, weights[r][f], weights[0][f])
			}
		}
	}
	dist, maxDiff, err := compare(weights[0], xs, ys, wStar, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dataparallel: %d ranks, %d steps, NCCL %s: weights identical on every rank, |w-w*| = %.4f, max diff to 1-process run %.1e\n",
		n, p.steps, lib.Version(), dist, maxDiff)
}

// oneRank is this process's rank of a launched job: it trains its shard of the
// same data set every rank generates, then checks that every rank ends with
// the same weights, bit for bit, and that they match a single-process run.
func oneRank(lib *nccl.Library, job launch.Job, share launch.Share, p params) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	via, _ := launch.Choose(job, share)
	id, err := launch.UniqueID(ctx, lib, job, share)
	if err != nil {
		return err
	}
	visible, err := lib.CUDA().DeviceCount()
	if err != nil {
		return err
	}
	dev, err := job.Device(visible) // the local rank's GPU, or a shared one under NCCL_MULTI_RANK_GPU_ENABLE=1
	if err != nil {
		return err
	}
	comm, err := lib.InitRank(ctx, dev, id, job.Size, job.Rank, nil)
	launch.Cleanup(job, share)
	if err != nil {
		return err
	}
	defer closeComm(comm, p.timeout, &err)
	// The first operation connects the ranks where no context reaches:
	// abort at the deadline so that a rank that never comes cannot hang it.
	stop := context.AfterFunc(ctx, func() { comm.Abort() })
	defer stop()
	xs, ys, wStar := dataset(job.Size * p.perRank)
	lo, hi := job.Rank*p.perRank, (job.Rank+1)*p.perRank
	w, err := train(ctx, comm, dev, xs[lo:hi], ys[lo:hi], p)
	if err != nil {
		return err
	}
	if err := sameOnEveryRank(ctx, comm, dev, w); err != nil {
		return err
	}
	dist, maxDiff, err := compare(w, xs, ys, wStar, p)
	if err != nil {
		return err
	}
	fmt.Printf("dataparallel: rank %d/%d (%s, id via %s) on GPU %d, %d steps, NCCL %s: weights identical on every rank, |w-w*| = %.4f, max diff to 1-process run %.1e\n",
		job.Rank, job.Size, job.Launcher, via, dev, p.steps, lib.Version(), dist, maxDiff)
	return nil
}

// dataset is y = x·w* + noise over n samples, the same in every process.
func dataset(n int) (xs [][]float64, ys, wStar []float64) {
	rng := rand.New(rand.NewPCG(7, 11))
	wStar = make([]float64, features)
	for i := range wStar {
		wStar[i] = rng.NormFloat64()
	}
	xs = make([][]float64, n)
	ys = make([]float64, n)
	for i := range xs {
		xs[i] = make([]float64, features)
		for f := range xs[i] {
			xs[i][f] = rng.NormFloat64()
			ys[i] += xs[i][f] * wStar[f]
		}
		ys[i] += 0.01 * rng.NormFloat64()
	}
	return xs, ys, wStar
}

// compare trains in one process over all the data (the average of the
// shards' mean gradients is the mean gradient over all samples) and returns
// w's distance to w* and its largest difference to that run.
func compare(w []float64, xs [][]float64, ys, wStar []float64, p params) (dist, maxDiff float64, err error) {
	ref := make([]float64, features)
	for range p.steps {
		g := gradient(ref, xs, ys)
		for f := range ref {
			ref[f] -= p.lr * g[f]
		}
	}
	for f := range ref {
		maxDiff = math.Max(maxDiff, math.Abs(ref[f]-w[f]))
		dist += (w[f] - wStar[f]) * (w[f] - wStar[f])
	}
	if maxDiff > 1e-9 {
		return 0, 0, fmt.Errorf("data-parallel weights differ from the single-process run by %g", maxDiff)
	}
	return math.Sqrt(dist), maxDiff, nil
}

// sameOnEveryRank checks that every rank holds w, bit for bit: the element-wise
// maximum and minimum over the ranks must both equal w.
func sameOnEveryRank(ctx context.Context, comm *nccl.Comm, dev int, w []float64) error {
	cu := comm.Library().CUDA()
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	hi, err := cu.Alloc(dev, nccl.Float64, len(w))
	if err != nil {
		return err
	}
	defer hi.Free()
	lo, err := cu.Alloc(dev, nccl.Float64, len(w))
	if err != nil {
		return err
	}
	defer lo.Free()
	if err := nccl.CopyIn(hi, w); err != nil {
		return err
	}
	if err := nccl.CopyIn(lo, w); err != nil {
		return err
	}
	if err := comm.Library().Group(func() error {
		if err := comm.AllReduce(hi, hi, nccl.Max, s); err != nil {
			return err
		}
		return comm.AllReduce(lo, lo, nccl.Min, s)
	}); err != nil {
		return err
	}
	if err := comm.Wait(ctx, s); err != nil {
		return err
	}
	for _, b := range []nccl.Buffer{hi, lo} {
		got := make([]float64, len(w))
		if err := nccl.CopyOut(got, b); err != nil {
			return err
		}
		for f := range w {
			if math.Float64bits(got[f]) != math.Float64bits(w[f]) {
				return fmt.Errorf("weight %d differs between ranks: here %v, max/min over the ranks %v", f, w[f], got[f])
			}
		}
	}
	return nil
}

// gradient of the mean squared error ½·mean((x·w − y)²) with respect to w.
func gradient(w []float64, xs [][]float64, ys []float64) []float64 {
	g := make([]float64, len(w))
	for i, x := range xs {
		var pred float64
		for f := range w {
			pred += x[f] * w[f]
		}
		e := pred - ys[i]
		for f := range w {
			g[f] += e * x[f]
		}
	}
	for f := range g {
		g[f] /= float64(len(xs))
	}
	return g
}

// train runs p.steps steps on comm's rank, which drives GPU dev, over its
// shard xs, ys, and returns the weights.
func train(ctx context.Context, comm *nccl.Comm, dev int, xs [][]float64, ys []float64, p params) ([]float64, error) {
	cu := comm.Library().CUDA()
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	defer s.Destroy()
	grad, err := cu.Alloc(dev, nccl.Float64, features)
	if err != nil {
		return nil, err
	}
	defer grad.Free()
	w := make([]float64, features)
	g := make([]float64, features)
	for range p.steps {
		if err := nccl.CopyIn(grad, gradient(w, xs, ys)); err != nil {
			return nil, err
		}
		if err := comm.AllReduce(grad, grad, nccl.Avg, s); err != nil {
			return nil, err
		}
		if err := comm.Wait(ctx, s); err != nil {
			return nil, err
		}
		if err := nccl.CopyOut(g, grad); err != nil {
			return nil, err
		}
		for f := range w {
			w[f] -= p.lr * g[f]
		}
	}
	return w, nil
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
