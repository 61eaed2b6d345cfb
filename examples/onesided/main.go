// Command onesided moves bytes between GPUs one-sidedly (NCCL >= 2.29.2): a
// rank writes straight into a peer's symmetric window with Comm.PutSignal, and
// the peer, which posts no receive, makes its stream wait for the signal
// (Comm.WaitSignal) before it copies the bytes out. Every rank allocates its
// window and its source with Comm.AllocSymmetric (ncclMemAlloc plus a
// symmetric window: puts need both ends in one). Rank 0 puts seeded random
// bytes into rank 1's window at -offset, rank 1 regenerates them and checks
// every byte, then the roles swap (with n ranks, each puts into the next in
// turn). On an older NCCL it exits with the library's "requires >= 2.29.2".
//
// Alone it runs one goroutine per GPU (-gpus, default 2). Started by a
// launcher (torchrun, mpirun, srun) or with -np N, it runs one rank per
// process. Every wait on the other ranks ends at -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

func main() {
	ngpu := flag.Int("gpus", 2, "ranks in one process, one goroutine and GPU each")
	size := flag.Int("bytes", 1<<20, "bytes each rank puts")
	offset := flag.Int("offset", 4096, "byte offset in the peer's window where they land")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the other ranks to join and finish the transfers, and again to close")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *size <= 0 || *offset < 0 {
		log.Fatalf("-bytes must be positive and -offset not negative")
	}
	job, err := lf.Detect()
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	// Say at once if this NCCL is too old, before any rank waits for another.
	if err := lib.Require("ncclPutSignal", "ncclWaitSignal", "ncclWinGetUserPtr"); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if job.Launcher != launch.Alone { // one rank in this process
		via, _ := launch.Choose(job, lf.Share())
		id, err := launch.UniqueID(ctx, lib, job, lf.Share())
		if err != nil {
			log.Fatalf("rank %d: %v", job.Rank, err)
		}
		where := fmt.Sprintf("(%s, id via %s) ", job.Launcher, via)
		visible, err := lib.CUDA().DeviceCount()
		if err != nil {
			log.Fatal(err)
		}
		dev, err := job.Device(visible) // the local rank's GPU, or a shared one under NCCL_MULTI_RANK_GPU_ENABLE=1
		if err != nil {
			log.Fatal(err)
		}
		line, err := rank(ctx, lib, id, dev, job.Size, job.Rank, *size, *offset, *timeout, where, func() { launch.Cleanup(job, lf.Share()) })
		if err != nil {
			log.Fatalf("rank %d: %v", job.Rank, err)
		}
		fmt.Print(line)
		return
	}
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	n := *ngpu
	visible, err := lib.CUDA().DeviceCount()
	if err != nil {
		log.Fatal(err)
	}
	devs := make([]int, n)
	for r := range devs { // a GPU each, or shared under NCCL_MULTI_RANK_GPU_ENABLE=1
		if devs[r], err = (launch.Job{LocalRank: r, SharedGPUs: job.SharedGPUs}).Device(visible); err != nil {
			log.Fatal(err)
		}
	}
	ctx, fail := context.WithCancel(ctx) // a rank that fails ends the others' waits
	defer fail()
	lines, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if lines[r], errs[r] = rank(ctx, lib, id, devs[r], n, r, *size, *offset, *timeout, "", func() {}); errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
				fail()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	for _, line := range lines {
		fmt.Print(line)
	}
}

// rank is rank r of n on GPU dev: it joins the communicator, takes its turn to
// put size bytes into the next rank's window at offset, and checks the bytes
// the previous rank put into its own. It returns its line to print; where
// says how the process was placed, if it is one rank of a launched job.
func rank(ctx context.Context, lib *nccl.Library, id nccl.UniqueID, dev, n, r, size, offset int, timeout time.Duration, where string, joined func()) (line string, err error) {
	if n < 2 {
		return "", fmt.Errorf("one-sided transfers need at least 2 ranks, not %d", n)
	}
	comm, err := lib.InitRank(ctx, dev, id, n, r, nil)
	joined() // every rank has read the id, or the job has failed
	if err != nil {
		return "", err
	}
	defer closeComm(comm, timeout, &err)
	// Nothing NCCL enqueues can outlive the deadline: abort there.
	stop := context.AfterFunc(ctx, func() { comm.Abort() })
	defer stop()
	cu := lib.CUDA()
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return "", err
	}
	defer s.Destroy()
	// Symmetric allocations are collective: every rank makes the same ones,
	// in the same order, and frees them together.
	win, err := comm.AllocSymmetric(nccl.Uint8, offset+size)
	if err != nil {
		return "", err
	}
	defer free(win, &err)
	src, err := comm.AllocSymmetric(nccl.Uint8, size)
	if err != nil {
		return "", err
	}
	defer free(src, &err)
	out, err := cu.Alloc(dev, nccl.Uint8, offset+size)
	if err != nil {
		return "", err
	}
	defer free(out, &err)
	w, base, err := comm.WindowOf(win) // this rank's handle names every rank's window
	if err != nil {
		return "", err
	}
	// The first call NCCL 2.29.2 added: an older library says so here.
	if p, err := comm.WindowAddress(w); err != nil {
		return "", err
	} else if p != win.Ptr() {
		return "", fmt.Errorf("window starts at %#x, the buffer at %#x", p, win.Ptr())
	}
	if err := win.Memset(0); err != nil {
		return "", err
	}
	// A barrier: no rank puts before every rank has zeroed its window, or a
	// late Memset would wipe bytes that already landed.
	if err := comm.AllReduce(out.Slice(0, 1), out.Slice(0, 1), nccl.Sum, s); err != nil {
		return "", err
	}
	if err := comm.Wait(ctx, s); err != nil {
		return "", err
	}
	next, prev := (r+1)%n, (r+n-1)%n
	data, got := make([]byte, size), make([]byte, offset+size)
	for turn := range n { // rank turn puts into rank turn+1, the others wait
		switch r {
		case turn:
			fill(data, r)
			if err := nccl.CopyIn(src, data); err != nil {
				return "", err
			}
			if err := comm.PutSignal(src, next, w, base+offset, s); err != nil {
				return "", err
			}
			if err := comm.Wait(ctx, s); err != nil {
				return "", err
			}
		case (turn + 1) % n:
			// The stream waits for prev's signal, then copies the window out:
			// the copy is ordered after the put's bytes have landed.
			if err := comm.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(prev)}}, s); err != nil {
				return "", err
			}
			if err := nccl.CopyAsync(out, win.Slice(0, offset+size), s); err != nil {
				return "", err
			}
			if err := comm.Wait(ctx, s); err != nil {
				return "", err
			}
			if err := out.ReadBytes(got); err != nil {
				return "", err
			}
			fill(data, prev) // what prev put, regenerated here
			for i, b := range got[:offset] {
				if b != 0 {
					return "", fmt.Errorf("window byte %d, before the offset, changed to %#x", i, b)
				}
			}
			for i, b := range got[offset:] {
				if b != data[i] {
					return "", fmt.Errorf("window byte %d (put byte %d) from rank %d = %#x, want %#x", offset+i, i, prev, b, data[i])
				}
			}
		}
	}
	return fmt.Sprintf("onesided: rank %d/%d %son GPU %d, NCCL %s: %d bytes put into rank %d's window at offset %d, every byte checked (%d from rank %d)\n",
		r, n, where, dev, lib.Version(), size, next, offset, size, prev), nil
}

// fill writes the bytes rank r puts: seeded by r, so the peer regenerates them.
func fill(p []byte, r int) {
	rng := rand.New(rand.NewPCG(2029, uint64(r)))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
}

// free frees b, keeping the first error in *err.
func free(b nccl.Buffer, err *error) {
	if ferr := b.Free(); ferr != nil && *err == nil {
		*err = fmt.Errorf("free: %w", ferr)
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
