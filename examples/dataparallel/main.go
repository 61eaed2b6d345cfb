// Command dataparallel trains a linear model data-parallel, in the spirit of the
// MPI+NCCL tutorial: each rank (a goroutine driving one GPU) computes the
// gradient of the squared error on its own shard, the ranks average their
// gradients with AllReduce(avg), and every rank applies the same update. At the
// end every rank holds bit-identical weights, and they match a single-process
// run over all the data.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gonccl/nccl"
)

const features = 16

func main() {
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	perRank := flag.Int("samples", 4096, "training samples per rank")
	steps := flag.Int("steps", 50, "gradient steps")
	lr := flag.Float64("lr", 0.05, "learning rate")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the other ranks to join and finish every step, and again to close")
	flag.Parse()
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if *ngpu == 0 {
		if *ngpu, err = lib.CUDA().DeviceCount(); err != nil {
			log.Fatal(err)
		}
	}
	n := *ngpu
	// The data set: y = x·w* + noise, split into n equal shards.
	rng := rand.New(rand.NewPCG(7, 11))
	wStar := make([]float64, features)
	for i := range wStar {
		wStar[i] = rng.NormFloat64()
	}
	xs := make([][]float64, n**perRank)
	ys := make([]float64, len(xs))
	for i := range xs {
		xs[i] = make([]float64, features)
		for f := range xs[i] {
			xs[i][f] = rng.NormFloat64()
			ys[i] += xs[i][f] * wStar[f]
		}
		ys[i] += 0.01 * rng.NormFloat64()
	}
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
			lo, hi := r**perRank, (r+1)**perRank
			var err error
			if weights[r], err = train(lib, id, n, r, xs[lo:hi], ys[lo:hi], *steps, *lr, *timeout); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
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
	// The same training in one process over all the data: the average of the
	// shards' mean gradients is the mean gradient over all samples.
	ref := make([]float64, features)
	for range *steps {
		g := gradient(ref, xs, ys)
		for f := range ref {
			ref[f] -= *lr * g[f]
		}
	}
	var maxDiff, dist float64
	for f := range ref {
		maxDiff = math.Max(maxDiff, math.Abs(ref[f]-weights[0][f]))
		dist += (weights[0][f] - wStar[f]) * (weights[0][f] - wStar[f])
	}
	if maxDiff > 1e-9 {
		log.Fatalf("data-parallel weights differ from the single-process run by %g", maxDiff)
	}
	fmt.Printf("dataparallel: %d ranks, %d steps, NCCL %s: weights identical on every rank, |w-w*| = %.4f, max diff to 1-process run %.1e\n",
		n, *steps, lib.Version(), math.Sqrt(dist), maxDiff)
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

func train(lib *nccl.Library, id nccl.UniqueID, n, r int, xs [][]float64, ys []float64, steps int, lr float64, timeout time.Duration) (w []float64, err error) {
	cu := lib.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	comm, err := lib.InitRank(ctx, r, id, n, r, nil)
	if err != nil {
		return nil, err
	}
	defer closeComm(comm, timeout, &err)
	s, err := cu.NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	defer s.Destroy()
	grad, err := cu.Alloc(r, nccl.Float64, features)
	if err != nil {
		return nil, err
	}
	defer grad.Free()
	w = make([]float64, features)
	g := make([]float64, features)
	for range steps {
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
			w[f] -= lr * g[f]
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
