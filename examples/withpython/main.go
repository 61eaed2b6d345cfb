// Command withpython puts a Go process and a Python process in one NCCL
// communicator: they meet through a PyTorch TCPStore (torch.distributed.TCPStore
// on the Python side, launch.Store here), rank 0 publishes NCCL's unique id
// there as its 128 raw bytes, and both all-reduce a vector and check every
// element. The Python side is peer.py, beside this file (PyTorch for the store,
// CuPy for NCCL):
//
//	python3 peer.py --master --rank 1 --dev 1 &   # hosts the store, Python is rank 1
//	./withpython -rank 0 -dev 0                   # Go is rank 0
//
// Either side can be rank 0; the store can be any TCPStore both reach (a
// torchrun job's, for one). Every wait has the -timeout deadline.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

func main() {
	store := flag.String("store", "127.0.0.1:29555", "host:port of the TCPStore")
	key := flag.String("key", "gonccl/withpython/unique_id", "the store key of the unique id")
	rank := flag.Int("rank", 0, "this process's rank")
	size := flag.Int("size", 2, "the number of ranks (Go and Python together)")
	dev := flag.Int("dev", 0, "this process's GPU")
	n := flag.Int("n", 1<<20, "float32 elements to all-reduce")
	timeout := flag.Duration("timeout", time.Minute, "deadline for the store, the other ranks and the work")
	flag.Parse()
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if err := run(lib, *store, *key, *rank, *size, *dev, *n, *timeout); err != nil {
		log.Fatalf("rank %d: %v", *rank, err)
	}
}

func run(lib *nccl.Library, addr, key string, rank, size, dev, n int, timeout time.Duration) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := launch.DialStore(ctx, addr)
	if err != nil {
		return err
	}
	defer st.Close()
	var id nccl.UniqueID
	if rank == 0 { // make the id and publish its raw bytes, as CuPy and PyTorch hold them
		if id, err = lib.GetUniqueID(); err != nil {
			return err
		}
		if err := st.Set(ctx, key, id.Internal[:]); err != nil {
			return err
		}
	} else { // wait for rank 0's
		b, err := st.Get(ctx, key)
		if err != nil {
			return err
		}
		if err := id.UnmarshalBinary(b); err != nil {
			return fmt.Errorf("the id under %q: %w", key, err)
		}
	}
	comm, err := lib.InitRank(ctx, dev, id, size, rank, nil)
	if err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), timeout)
		defer ccancel()
		if cerr := comm.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	stop := context.AfterFunc(ctx, func() { comm.Abort() }) // a peer that never comes cannot hang the first call
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
	// Rank r contributes (r+1)·(i%100), as peer.py does: the sum is known.
	host := make([]float32, n)
	for i := range host {
		host[i] = float32((rank + 1) * (i % 100))
	}
	if err := nccl.CopyIn(buf, host); err != nil {
		return err
	}
	if err := comm.AllReduce(buf, buf, nccl.Sum, s); err != nil {
		return err
	}
	if err := comm.Wait(ctx, s); err != nil {
		return err
	}
	if err := nccl.CopyOut(host, buf); err != nil {
		return err
	}
	scale := float32(size * (size + 1) / 2)
	for i, v := range host {
		if want := scale * float32(i%100); v != want {
			return fmt.Errorf("element %d = %v, want %v", i, v, want)
		}
	}
	fmt.Printf("withpython: Go rank %d of %d on GPU %d, NCCL %s, store %s: %d floats correct\n",
		rank, size, dev, lib.Version(), addr, n)
	return nil
}
