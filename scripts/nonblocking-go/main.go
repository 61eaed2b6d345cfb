// Command nonblocking-go is scripts/nonblocking-ref.c written with gonccl, line
// for line, to split gonccl's share of a non-blocking launch from a
// benchmark harness's: one process per GPU under a launcher, one pair of
// buffers, plain all-reduces of 8 B, 64 KiB and 8 MiB on a blocking and then
// a non-blocking communicator, 20 untimed launches and then -n timed ones.
// Each rank prints its own µs per all-reduce; scripts/bench-nonblocking.sh
// averages them over the ranks as the C program does.
//
// Where the C program calls MPI_Barrier before the timed loop, this one
// all-reduces one float and synchronizes: the ranks leave it together.
//
//	mpirun -np 4 ./nonblocking-go -n 2400
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
	iters := flag.Int("n", 2400, "timed all-reduces per size and communicator")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *iters < 1 {
		log.Fatal("-n must be positive")
	}
	job, err := lf.Detect()
	if err != nil {
		log.Fatal(err)
	}
	if job.Launcher == launch.Alone {
		log.Fatal("nonblocking-go runs one rank per process: start it with a launcher (mpirun, torchrun) or -np N")
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if job.Rank == 0 {
		fmt.Printf("Go nccl version %d %s\n", lib.Version().Code(), lib.Path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, lib, job, lf, *iters); err != nil {
		log.Fatalf("rank %d: %v", job.Rank, err)
	}
}

// run is one rank: the blocking communicator's three sizes, then the
// non-blocking one's, each communicator closed before the next is made.
func run(ctx context.Context, lib *nccl.Library, job launch.Job, lf *launch.Flags, iters int) error {
	cu := lib.CUDA()
	visible, err := cu.DeviceCount()
	if err != nil {
		return err
	}
	dev, err := job.Device(visible)
	if err != nil {
		return err
	}
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	counts := []int{2, 16384, 2097152}
	in, err := cu.Alloc(dev, nccl.Float32, counts[2])
	if err != nil {
		return err
	}
	defer in.Free()
	out, err := cu.Alloc(dev, nccl.Float32, counts[2])
	if err != nil {
		return err
	}
	defer out.Free()
	if err := in.Memset(0); err != nil {
		return err
	}
	var id nccl.UniqueID
	for i, blocking := range []bool{true, false} {
		share := lf.Share()
		via, err := launch.Choose(job, share)
		if err != nil {
			return err
		}
		if i == 0 || via != launch.ViaCommID { // NCCL_COMM_ID's one id serves both communicators in turn, as in C
			if i > 0 {
				share.Name = "nonblocking" // the second id's key in a store or file
			}
			if id, err = launch.UniqueID(ctx, lib, job, share); err != nil {
				return err
			}
		}
		comm, err := lib.InitRank(ctx, dev, id, job.Size, job.Rank, &nccl.Config{Blocking: &blocking})
		launch.Cleanup(job, share)
		if err != nil {
			return err
		}
		for _, n := range counts {
			us, err := timeAllReduce(comm, in.Slice(0, n), out.Slice(0, n), s, in.Slice(0, 1), out.Slice(0, 1), iters)
			if err != nil {
				comm.Abort()
				return err
			}
			mode := "blocking"
			if !blocking {
				mode = "-nonblocking"
			}
			fmt.Printf("Go np %d n %d %s: rank %d %.1f us per all-reduce launched plainly (%d iters)\n",
				job.Size, n, mode, job.Rank, us, iters)
		}
		if err := comm.Close(ctx); err != nil {
			return err
		}
	}
	return nil
}

// timeAllReduce is the C program's inner loop: 20 launches, a barrier, then
// iters launches timed to the stream's end, in µs per launch.
func timeAllReduce(comm *nccl.Comm, in, out nccl.Buffer, s nccl.Stream, bin, bout nccl.Buffer, iters int) (float64, error) {
	for range 20 {
		if err := comm.AllReduce(in, out, nccl.Sum, s); err != nil {
			return 0, err
		}
	}
	if err := comm.AllReduce(bin, bout, nccl.Sum, s); err != nil { // the barrier
		return 0, err
	}
	if err := s.Synchronize(); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for range iters {
		if err := comm.AllReduce(in, out, nccl.Sum, s); err != nil {
			return 0, err
		}
	}
	if err := s.Synchronize(); err != nil {
		return 0, err
	}
	return float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters), nil
}
