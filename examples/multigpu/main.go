// Command multigpu drives every local GPU from one process: ncclCommInitAll
// creates one communicator per device, and one group all-reduces a buffer on each
// (the multi-GPU all-reduce of PyTorch's NCCL2 notes).
package main

import (
	"flag"
	"fmt"
	"log"
	"sync"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
)

func main() {
	n := flag.Int("n", 1<<20, "elements per GPU")
	ngpu := flag.Int("gpus", 0, "GPUs to use (default: all)")
	flag.Parse()
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	cu := lib.CUDA()
	if *ngpu == 0 {
		if *ngpu, err = cu.DeviceCount(); err != nil {
			log.Fatal(err)
		}
	}
	devs := make([]int, *ngpu)
	for i := range devs {
		devs[i] = i
	}
	comms, err := lib.InitAll(devs)
	if err != nil {
		log.Fatal(err)
	}
	streams := make([]nccl.Stream, len(devs))
	bufs := make([]collectives.Buffer[float64], len(devs))
	for i, d := range devs {
		if streams[i], err = cu.StreamCreate(d, abi.StreamNonBlocking); err != nil {
			log.Fatal(err)
		}
		if bufs[i], err = collectives.Alloc[float64](cu, d, *n); err != nil {
			log.Fatal(err)
		}
		host := make([]float64, *n)
		for j := range host {
			host[j] = float64(i + 1)
		}
		if err := bufs[i].CopyIn(cu, host); err != nil {
			log.Fatal(err)
		}
	}
	// One thread issues the operation of every communicator: they must be in one
	// group, or the first would wait forever for the others.
	err = lib.Group(func() error {
		for i, c := range comms {
			if err := collectives.AllReduce(c, bufs[i], bufs[i], abi.Sum, streams[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	want := float64(len(devs) * (len(devs) + 1) / 2)
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cu.StreamSynchronize(streams[i]); err != nil {
				log.Fatal(err)
			}
			host := make([]float64, *n)
			if err := bufs[i].CopyOut(cu, host); err != nil {
				log.Fatal(err)
			}
			for j, v := range host {
				if v != want {
					log.Fatalf("GPU %d element %d = %v, want %v", i, j, v, want)
				}
			}
		}()
	}
	wg.Wait()
	for i, c := range comms {
		c.Destroy()
		bufs[i].Free(cu)
		cu.StreamDestroy(streams[i])
	}
	fmt.Printf("multigpu: %d GPUs in one process, NCCL %s: every element = %v, checksum %.0f\n",
		len(devs), lib.Version(), want, want*float64(*n*len(devs)))
}
