// Command split makes several communicators over subsets of the ranks (pynccl's
// multi-comms): Split by parity of the rank where the library has
// ncclCommSplit, else a new unique id per subset, which the parent's rank 0
// creates and broadcasts over the parent communicator. Each subset all-reduces
// its rank numbers. The ranks are goroutines, one per GPU.
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
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	useIDs := flag.Bool("ids", false, "use new ids even where ncclCommSplit exists")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the other ranks to join every communicator and finish the all-reduce, and again to close")
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
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	how := "ncclCommSplit"
	if *useIDs || !lib.Has("ncclCommSplit") {
		how = "new ids"
	}
	results := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rank(lib, id, n, r, how, *timeout, &results[r]); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r)
	}
	fmt.Printf("split: %d ranks into 2 communicators by %s, NCCL %s: correct\n", n, how, lib.Version())
}

func rank(lib *nccl.Library, id nccl.UniqueID, n, r int, how string, timeout time.Duration, out *string) (err error) {
	cu := lib.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	parent, err := lib.InitRank(ctx, r, id, n, r, nil)
	if err != nil {
		return err
	}
	defer closeComm(parent, timeout, &err)
	color := r % 2
	var sub *nccl.Comm
	if how == "ncclCommSplit" {
		sub, err = parent.Split(ctx, color, r, nil)
	} else {
		var ids []nccl.UniqueID
		if ids, err = shareIDs(ctx, parent, 2); err == nil {
			size := (n + 1 - color) / 2 // ranks of this parity
			sub, err = lib.InitRank(ctx, r, ids[color], size, r/2, nil)
		}
	}
	if err != nil {
		return err
	}
	defer closeComm(sub, timeout, &err) // before the parent's: deferred calls run last first
	s, err := cu.NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	buf, err := cu.Alloc(r, nccl.Int64, 1)
	if err != nil {
		return err
	}
	defer buf.Free()
	if err := nccl.CopyIn(buf, []int64{int64(r)}); err != nil {
		return err
	}
	if err := sub.AllReduce(buf, buf, nccl.Sum, s); err != nil {
		return err
	}
	if err := sub.Wait(ctx, s); err != nil {
		return err
	}
	got := make([]int64, 1)
	if err := nccl.CopyOut(got, buf); err != nil {
		return err
	}
	var want int64
	for p := color; p < n; p += 2 {
		want += int64(p)
	}
	if got[0] != want {
		return fmt.Errorf("color %d sum of ranks = %d, want %d", color, got[0], want)
	}
	*out = fmt.Sprintf("rank %d: color %d, rank %d of %d in its communicator, sum of parent ranks %d", r, color, sub.Rank(), sub.Size(), got[0])
	return nil
}

// idBytes is the size of a unique id's binary form (UniqueID.MarshalBinary).
const idBytes = 128

// shareIDs has the parent's rank 0 create k ids and broadcasts them over the
// parent communicator: every rank returns the same k ids.
func shareIDs(ctx context.Context, parent *nccl.Comm, k int) ([]nccl.UniqueID, error) {
	lib := parent.Library()
	cu, dev := lib.CUDA(), parent.Device()
	host := make([]uint8, k*idBytes)
	ids := make([]nccl.UniqueID, k)
	if parent.Rank() == 0 {
		for i := range ids {
			id, err := lib.GetUniqueID()
			if err != nil {
				return nil, err
			}
			b, err := id.MarshalBinary()
			if err != nil {
				return nil, err
			}
			copy(host[i*idBytes:], b)
		}
	}
	buf, err := cu.Alloc(dev, nccl.Uint8, len(host))
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	s, err := cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	defer s.Destroy()
	if err := nccl.CopyIn(buf, host); err != nil {
		return nil, err
	}
	if err := parent.Broadcast(buf, buf, 0, s); err != nil {
		return nil, err
	}
	if err := parent.Wait(ctx, s); err != nil {
		return nil, err
	}
	if err := nccl.CopyOut(host, buf); err != nil {
		return nil, err
	}
	for i := range ids {
		if err := ids[i].UnmarshalBinary(host[i*idBytes : (i+1)*idBytes]); err != nil {
			return nil, err
		}
	}
	return ids, nil
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
