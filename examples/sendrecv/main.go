// Command sendrecv passes a buffer around a ring with explicit stream ordering,
// the way rnccl composes raw NCCL calls: a compute stream produces the data, the
// communication stream waits for it on the GPU (an event, no host sync), the
// ring exchange runs in one group, and the compute stream waits for the exchange
// before consuming the result. One goroutine per GPU.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
)

func main() {
	n := flag.Int("n", 1<<20, "int32 elements passed around the ring")
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	steps := flag.Int("steps", 3, "trips around the ring")
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
			errs[r] = ring(lib, id, *ngpu, r, *n, *steps)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sendrecv: %d ranks, %d steps around the ring of %d int32, NCCL %s: correct\n", *ngpu, *steps, *n, lib.Version())
}

func ring(lib *nccl.Library, id nccl.UniqueID, size, r, n, steps int) error {
	cu := lib.CUDA()
	comm, err := lib.InitRank(r, id, size, r)
	if err != nil {
		return err
	}
	defer comm.Destroy()
	compute, err := cu.StreamCreate(r, abi.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer cu.StreamDestroy(compute)
	commStream, err := cu.StreamCreate(r, abi.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer cu.StreamDestroy(commStream)
	a, err := collectives.Alloc[int32](cu, r, n)
	if err != nil {
		return err
	}
	defer a.Free(cu)
	b, err := collectives.Alloc[int32](cu, r, n)
	if err != nil {
		return err
	}
	defer b.Free(cu)

	// "Compute": each rank's bytes are its rank+1 (memset on the compute stream).
	if err := cu.MemsetAsync(a.Ptr(), byte(r+1), a.Bytes(), compute); err != nil {
		return err
	}
	next, prev := (r+1)%size, (r+size-1)%size
	for range steps {
		if err := collectives.StreamWait(cu, r, commStream, compute); err != nil {
			return err
		}
		err := lib.Group(func() error {
			if err := collectives.Send(comm, a, next, commStream); err != nil {
				return err
			}
			return collectives.Recv(comm, b, prev, commStream)
		})
		if err != nil {
			return err
		}
		if err := collectives.StreamWait(cu, r, compute, commStream); err != nil {
			return err
		}
		a, b = b, a
	}
	if err := cu.StreamSynchronize(compute); err != nil {
		return err
	}
	host := make([]int32, n)
	if err := a.CopyOut(cu, host); err != nil {
		return err
	}
	from := ((r-steps)%size+size)%size + 1
	want := int32(from) * 0x01010101
	for i, v := range host {
		if v != want {
			return fmt.Errorf("rank %d element %d = %#x, want %#x", r, i, v, want)
		}
	}
	return nil
}
