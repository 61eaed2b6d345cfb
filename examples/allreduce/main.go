// Command allreduce sums a vector across GPUs, one process per GPU.
//
// Started by a launcher (mpirun, srun, torchrun-style variables), the ranks meet
// through NCCL's own rendezvous at NCCL_COMM_ID (or MASTER_ADDR:MASTER_PORT), or
// through a shared file with -idfile. Started alone with -np N, it launches N
// local ranks itself. See examples/README.md for the commands.
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"os"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
	"github.com/gonccl/nccl/internal/launch"
)

func main() {
	n := flag.Int("n", 1<<20, "elements per rank")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	job, err := launch.Detect()
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	id, err := launch.UniqueID(lib, job, lf.IDFile)
	if err != nil {
		log.Fatal(err)
	}
	dev := job.LocalRank
	comm, err := lib.InitRank(dev, id, job.Size, job.Rank)
	if err != nil {
		log.Fatalf("rank %d: %v", job.Rank, err)
	}
	defer comm.Destroy()
	launch.Cleanup(job, lf.IDFile)

	cu := lib.CUDA()
	s, err := cu.StreamCreate(dev, abi.StreamNonBlocking)
	if err != nil {
		log.Fatal(err)
	}
	defer cu.StreamDestroy(s)
	buf, err := collectives.Alloc[float32](cu, dev, *n)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free(cu)

	// Rank r contributes (r+1)·(i%100): the sum is known in closed form.
	host := make([]float32, *n)
	for i := range host {
		host[i] = float32((job.Rank + 1) * (i % 100))
	}
	if err := buf.CopyIn(cu, host); err != nil {
		log.Fatal(err)
	}
	if err := collectives.AllReduce(comm, buf, buf, abi.Sum, s); err != nil {
		log.Fatal(err)
	}
	if err := cu.StreamSynchronize(s); err != nil {
		log.Fatal(err)
	}
	if err := buf.CopyOut(cu, host); err != nil {
		log.Fatal(err)
	}
	scale := float64(job.Size * (job.Size + 1) / 2)
	var checksum float64
	for i, v := range host {
		if want := scale * float64(i%100); math.Abs(float64(v)-want) > 0 {
			log.Fatalf("rank %d: element %d = %v, want %v", job.Rank, i, v, want)
		}
		checksum += float64(v)
	}
	fmt.Printf("allreduce: rank %d/%d (%s) on GPU %d, NCCL %s: %d floats correct, checksum %.0f\n",
		job.Rank, job.Size, job.Launcher, dev, lib.Version(), *n, checksum)
}
