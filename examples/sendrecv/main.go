// Command sendrecv passes a buffer around a ring with explicit stream ordering,
// the way rnccl composes raw NCCL calls: a compute stream produces the data, the
// communication stream waits for it on the GPU (an event, no host sync), the
// ring exchange runs in one group, and the compute stream waits for the exchange
// before consuming the result. One goroutine per GPU.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/gonccl/nccl"
)

func main() {
	n := flag.Int("n", 1<<20, "int32 elements passed around the ring")
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	steps := flag.Int("steps", 3, "trips around the ring")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the other ranks to join and finish the exchange, and again to close")
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
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, *ngpu)
	for r := range *ngpu {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ring(lib, id, *ngpu, r, *n, *steps, *timeout); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sendrecv: %d ranks, %d steps around the ring of %d int32, NCCL %s: correct\n", *ngpu, *steps, *n, lib.Version())
}

func ring(lib *nccl.Library, id nccl.UniqueID, size, r, n, steps int, timeout time.Duration) (err error) {
	cu := lib.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	comm, err := lib.InitRank(ctx, r, id, size, r, nil)
	if err != nil {
		return err
	}
	defer closeComm(comm, timeout, &err)
	compute, err := cu.NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer compute.Destroy()
	commStream, err := cu.NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer commStream.Destroy()
	// produced marks the end of the compute stream's work, exchanged the end
	// of the communication stream's: each stream waits for the other's event
	// on the GPU, and the host goes on.
	produced, err := cu.NewEvent(r, nccl.EventDisableTiming)
	if err != nil {
		return err
	}
	defer produced.Destroy()
	exchanged, err := cu.NewEvent(r, nccl.EventDisableTiming)
	if err != nil {
		return err
	}
	defer exchanged.Destroy()
	a, err := cu.Alloc(r, nccl.Int32, n)
	if err != nil {
		return err
	}
	defer a.Free()
	b, err := cu.Alloc(r, nccl.Int32, n)
	if err != nil {
		return err
	}
	defer b.Free()

	// "Compute": each rank's bytes are its rank+1 (memset on the compute stream).
	if err := a.MemsetAsync(byte(r+1), compute); err != nil {
		return err
	}
	next, prev := (r+1)%size, (r+size-1)%size
	for range steps {
		if err := produced.Record(compute); err != nil {
			return err
		}
		if err := commStream.Wait(produced); err != nil {
			return err
		}
		// Every rank sends and receives: both in one group, or each rank's
		// Send would wait for a Recv its neighbour has not posted yet.
		err := lib.Group(func() error {
			if err := comm.Send(a, next, commStream); err != nil {
				return err
			}
			return comm.Recv(b, prev, commStream)
		})
		if err != nil {
			return err
		}
		if err := exchanged.Record(commStream); err != nil {
			return err
		}
		if err := compute.Wait(exchanged); err != nil {
			return err
		}
		a, b = b, a
	}
	// The compute stream now holds all the work; Wait gives up at the deadline.
	if err := comm.Wait(ctx, compute); err != nil {
		return err
	}
	host := make([]int32, n)
	if err := nccl.CopyOut(host, a); err != nil {
		return err
	}
	from := ((r-steps)%size+size)%size + 1
	want := int32(from) * 0x01010101
	for i, v := range host {
		if v != want {
			return fmt.Errorf("element %d = %#x, want %#x", i, v, want)
		}
	}
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
