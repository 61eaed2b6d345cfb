// Command multigpu drives every local GPU from one process: InitAll creates one
// communicator per device, and one group all-reduces a buffer on each (the
// multi-GPU all-reduce of PyTorch's NCCL2 notes).
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
	n := flag.Int("n", 1<<20, "elements per GPU")
	ngpu := flag.Int("gpus", 0, "GPUs to use (default: all)")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for creating the communicators and finishing the all-reduce, and again for closing them")
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
	devs := make([]int, *ngpu)
	for i := range devs {
		devs[i] = i
	}
	if err := run(lib, devs, *n, *timeout); err != nil {
		log.Fatal(err)
	}
}

func run(lib *nccl.Library, devs []int, n int, timeout time.Duration) (err error) {
	cu := lib.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	comms, err := lib.InitAll(ctx, devs, nil)
	if err != nil {
		return err
	}
	defer closeAll(comms, timeout, &err)

	streams := make([]nccl.Stream, len(devs))
	bufs := make([]nccl.Buffer, len(devs))
	defer func() {
		for i := range devs {
			if bufs[i].Device() >= 0 { // not the zero Buffer: allocated
				bufs[i].Free()
			}
			if streams[i].Handle() != 0 { // created
				streams[i].Destroy()
			}
		}
	}()
	for i, d := range devs {
		if streams[i], err = cu.NewStream(d, nccl.StreamNonBlocking); err != nil {
			return err
		}
		if bufs[i], err = cu.Alloc(d, nccl.Float64, n); err != nil {
			return err
		}
		host := make([]float64, n)
		for j := range host {
			host[j] = float64(i + 1)
		}
		if err := nccl.CopyIn(bufs[i], host); err != nil {
			return err
		}
	}
	// One goroutine issues the operation of every communicator: they must be in
	// one group, or the first would wait forever for the others.
	err = lib.Group(func() error {
		for i, c := range comms {
			if err := c.AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	want := float64(len(devs) * (len(devs) + 1) / 2)
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = check(ctx, c, streams[i], bufs[i], want)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("multigpu: %d GPUs in one process, NCCL %s: every element = %v, checksum %.0f\n",
		len(devs), lib.Version(), want, want*float64(n*len(devs)))
	return nil
}

// check waits for the all-reduce on GPU c.Device() and compares every element.
func check(ctx context.Context, c *nccl.Comm, s nccl.Stream, buf nccl.Buffer, want float64) error {
	if err := c.Wait(ctx, s); err != nil {
		return err
	}
	host := make([]float64, buf.Len())
	if err := nccl.CopyOut(host, buf); err != nil {
		return err
	}
	for j, v := range host {
		if v != want {
			return fmt.Errorf("GPU %d element %d = %v, want %v", c.Device(), j, v, want)
		}
	}
	return nil
}

// closeAll closes every communicator within timeout. They close at once, one
// goroutine each: a rank's close may wait for the others', and each Close
// waits for its own. A failure lands in *err unless an earlier error is there.
func closeAll(comms []*nccl.Comm, timeout time.Duration, err *error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cerr := c.Close(ctx); cerr != nil {
				errs[i] = fmt.Errorf("close GPU %d: %w", c.Device(), cerr)
			}
		}()
	}
	wg.Wait()
	if cerr := errors.Join(errs...); cerr != nil && *err == nil {
		*err = cerr
	}
}
