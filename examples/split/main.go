// Command split makes several communicators over subsets of the ranks (pynccl's
// multi-comms): ncclCommSplit by parity of the rank where the library has it,
// else a new unique id per subset, which the parent's rank 0 creates and
// broadcasts over the parent communicator. Each subset all-reduces its rank
// numbers. The ranks are goroutines, one per GPU.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
)

func main() {
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	useIDs := flag.Bool("ids", false, "use new ids even where ncclCommSplit exists")
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
	var wg sync.WaitGroup
	fail := make(chan error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rank(lib, id, n, r, how, &results[r]); err != nil {
				fail <- fmt.Errorf("rank %d: %w", r, err)
			}
		}()
	}
	wg.Wait()
	close(fail)
	var errs []error
	for err := range fail {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r)
	}
	fmt.Fprintf(os.Stdout, "split: %d ranks into 2 communicators by %s, NCCL %s: correct\n", n, how, lib.Version())
}

func rank(lib *nccl.Library, id nccl.UniqueID, n, r int, how string, out *string) error {
	cu := lib.CUDA()
	parent, err := lib.InitRank(r, id, n, r)
	if err != nil {
		return err
	}
	defer parent.Destroy()
	color := r % 2
	var sub *nccl.Comm
	if how == "ncclCommSplit" {
		sub, err = parent.Split(color, r, nil)
	} else {
		var ids []nccl.UniqueID
		if ids, err = shareIDs(parent, 2); err == nil {
			size := (n + 1 - color) / 2 // ranks of this parity
			sub, err = lib.InitRank(r, ids[color], size, r/2)
		}
	}
	if err != nil {
		return err
	}
	defer sub.Destroy()
	s, err := cu.StreamCreate(r, abi.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer cu.StreamDestroy(s)
	buf, err := collectives.Alloc[int64](cu, r, 1)
	if err != nil {
		return err
	}
	defer buf.Free(cu)
	if err := buf.CopyIn(cu, []int64{int64(r)}); err != nil {
		return err
	}
	if err := collectives.AllReduce(sub, buf, buf, abi.Sum, s); err != nil {
		return err
	}
	if err := cu.StreamSynchronize(s); err != nil {
		return err
	}
	got := make([]int64, 1)
	if err := buf.CopyOut(cu, got); err != nil {
		return err
	}
	var want int64
	for p := color; p < n; p += 2 {
		want += int64(p)
	}
	if got[0] != want {
		return fmt.Errorf("color %d sum of ranks = %d, want %d", color, got[0], want)
	}
	*out = fmt.Sprintf("rank %d: color %d, rank %d of %d in its communicator, sum of parent ranks %d", r, color, sub.Rank(), sub.Count(), got[0])
	return nil
}

// shareIDs has the parent's rank 0 create k ids and broadcasts them over the
// parent communicator: every rank returns the same k ids.
func shareIDs(parent *nccl.Comm, k int) ([]nccl.UniqueID, error) {
	lib, cu, dev := parent.Library(), parent.Library().CUDA(), parent.Device()
	host := make([]uint8, k*abi.UniqueIDBytes)
	ids := make([]nccl.UniqueID, k)
	if parent.Rank() == 0 {
		for i := range ids {
			id, err := lib.GetUniqueID()
			if err != nil {
				return nil, err
			}
			copy(host[i*abi.UniqueIDBytes:], id.Internal[:])
		}
	}
	buf, err := collectives.Alloc[uint8](cu, dev, len(host))
	if err != nil {
		return nil, err
	}
	defer buf.Free(cu)
	s, err := cu.StreamCreate(dev, abi.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	defer cu.StreamDestroy(s)
	if err := buf.CopyIn(cu, host); err != nil {
		return nil, err
	}
	if err := collectives.Broadcast(parent, buf, buf, 0, s); err != nil {
		return nil, err
	}
	if err := cu.StreamSynchronize(s); err != nil {
		return nil, err
	}
	if err := buf.CopyOut(cu, host); err != nil {
		return nil, err
	}
	for i := range ids {
		copy(ids[i].Internal[:], host[i*abi.UniqueIDBytes:])
	}
	return ids, nil
}
