// Command allreduce sums a vector across GPUs, one process per GPU.
//
// Started by a launcher (torchrun, mpirun, srun), the ranks share NCCL's unique
// id the launcher's way (launch.UniqueID): through torchrun's TCPStore, NCCL's
// own bootstrap at NCCL_COMM_ID, or a shared file with -idfile. Started alone
// with -np N, it launches N local ranks itself. Every wait on the other ranks has
// a deadline (-timeout): a rank that never arrives makes the others fail instead
// of hang. See examples/README.md for the commands.
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

func main() {
	n := flag.Int("n", 1<<20, "elements per rank")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the other ranks to join and finish the all-reduce, and again to close")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	job, err := lf.Detect() // -rank/-size, else torchrun's, mpirun's or srun's variables
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if err := run(lib, job, lf.Share(), *n, *timeout); err != nil {
		log.Fatalf("rank %d: %v", job.Rank, err)
	}
}

func run(lib *nccl.Library, job launch.Job, share launch.Share, n int, timeout time.Duration) (err error) {
	// The deadline bounds joining, the wait for the all-reduce and closing:
	// a rank that never arrives or dies costs the others this long.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	via, _ := launch.Choose(job, share) // only to print it; UniqueID says why when there is no way
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
	launch.Cleanup(job, share) // every rank has read the id file, or the job has failed
	if err != nil {
		return err
	}
	defer closeComm(comm, timeout, &err)
	// NCCL connects the ranks inside their first operation, where no context
	// reaches: abort at the deadline, so a peer that never shows up cannot
	// hang the all-reduce call itself.
	stop := context.AfterFunc(ctx, func() { comm.Abort() })
	defer stop()

	cu := lib.CUDA()
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	buf, err := cu.Alloc(dev, nccl.Float32, n)
	if err != nil {
		return err
	}
	defer buf.Free()

	// Rank r contributes (r+1)·(i%100): the sum is known in closed form.
	host := make([]float32, n)
	for i := range host {
		host[i] = float32((job.Rank + 1) * (i % 100))
	}
	if err := nccl.CopyIn(buf, host); err != nil {
		return err
	}
	if err := comm.AllReduce(buf, buf, nccl.Sum, s); err != nil { // in place
		return err
	}
	// Wait, unlike s.Synchronize, gives up at the deadline and aborts the
	// communicator: a peer that never joins the all-reduce cannot hang us.
	if err := comm.Wait(ctx, s); err != nil {
		return err
	}
	if err := nccl.CopyOut(host, buf); err != nil {
		return err
	}
	scale := float64(job.Size * (job.Size + 1) / 2)
	var checksum float64
	for i, v := range host {
		if want := scale * float64(i%100); float64(v) != want {
			return fmt.Errorf("element %d = %v, want %v", i, v, want)
		}
		checksum += float64(v)
	}
	fmt.Printf("allreduce: rank %d/%d (%s, id via %s) on GPU %d, NCCL %s: %d floats correct, checksum %.0f\n",
		job.Rank, job.Size, job.Launcher, via, dev, lib.Version(), n, checksum)
	return nil
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
