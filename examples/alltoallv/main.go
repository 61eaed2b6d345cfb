// Command alltoallv exchanges uneven blocks between all ranks (VCCL's seed):
// rank i sends (i+j)%3+1 blocks of -k elements to rank j. On a library with
// ncclAlltoAllv (a VCCL build) it runs the native call on symmetric windows; on
// NCCL, grouped Send/Recv. Both print the same checksum. One goroutine per GPU.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"
	"sync/atomic"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
)

func main() {
	k := flag.Int("k", 4096, "elements per block")
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	grouped := flag.Bool("grouped", false, "use grouped Send/Recv even where ncclAlltoAllv exists")
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
	m := layout(n, *k)
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	var sum atomic.Uint64
	paths := make([]collectives.Path, n)
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cs uint64
			paths[r], cs, errs[r] = rank(lib, id, n, r, m, *grouped)
			sum.Add(cs)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("alltoallv: %d ranks, path %s, NCCL %s (%s): checksum %d\n", n, paths[0], lib.Version(), lib.Path, sum.Load())
}

// layout builds the full matrices: rank i sends ((i+j)%3+1)·k elements to rank j,
// packed in rank order on both sides.
func layout(n, k int) collectives.Layout {
	m := collectives.Layout{
		SendCounts: make([]uint64, n*n), SendDispls: make([]uint64, n*n),
		RecvCounts: make([]uint64, n*n), RecvDispls: make([]uint64, n*n),
	}
	for i := range n {
		var off uint64
		for j := range n {
			m.SendCounts[i*n+j] = uint64(((i+j)%3 + 1) * k)
			m.SendDispls[i*n+j] = off
			off += m.SendCounts[i*n+j]
		}
	}
	for j := range n {
		var off uint64
		for i := range n {
			m.RecvCounts[j*n+i] = m.SendCounts[i*n+j]
			m.RecvDispls[j*n+i] = off
			off += m.RecvCounts[j*n+i]
		}
	}
	return m
}

func total(v []uint64) int {
	var t uint64
	for _, x := range v {
		t += x
	}
	return int(t)
}

func rank(lib *nccl.Library, id nccl.UniqueID, n, r int, m collectives.Layout, grouped bool) (collectives.Path, uint64, error) {
	cu := lib.CUDA()
	comm, err := lib.InitRank(r, id, n, r)
	if err != nil {
		return 0, 0, err
	}
	defer comm.Destroy()
	s, err := cu.StreamCreate(r, abi.StreamNonBlocking)
	if err != nil {
		return 0, 0, err
	}
	defer cu.StreamDestroy(s)
	sendLen, recvLen := total(m.SendCounts[r*n:(r+1)*n]), total(m.RecvCounts[r*n:(r+1)*n])
	alloc := func(elems int) (collectives.Buffer[int32], func(), error) {
		if lib.Has("ncclAlltoAllv") && !grouped {
			b, err := collectives.AllocSymmetric[int32](comm, elems)
			return b, func() { collectives.FreeSymmetric(comm, b) }, err
		}
		b, err := collectives.Alloc[int32](cu, r, elems)
		return b, func() { b.Free(cu) }, err
	}
	send, freeSend, err := alloc(sendLen)
	if err != nil {
		return 0, 0, err
	}
	defer freeSend()
	recv, freeRecv, err := alloc(recvLen)
	if err != nil {
		return 0, 0, err
	}
	defer freeRecv()
	// Element e of the block for rank j encodes (sender, receiver, e).
	host := make([]int32, sendLen)
	for j := range n {
		d, c := int(m.SendDispls[r*n+j]), int(m.SendCounts[r*n+j])
		for e := range c {
			host[d+e] = int32(r<<24 | j<<16 | e%65536)
		}
	}
	if err := send.CopyIn(cu, host); err != nil {
		return 0, 0, err
	}
	var path collectives.Path
	if grouped {
		path, err = collectives.Grouped, collectives.AlltoAllvGrouped(comm, send, recv, m, s)
	} else {
		path, err = collectives.AlltoAllv(comm, send, recv, m, s)
	}
	if err != nil {
		return path, 0, err
	}
	if err := cu.StreamSynchronize(s); err != nil {
		return path, 0, err
	}
	out := make([]int32, recvLen)
	if err := recv.CopyOut(cu, out); err != nil {
		return path, 0, err
	}
	var sum uint64
	for i := range n {
		d, c := int(m.RecvDispls[r*n+i]), int(m.RecvCounts[r*n+i])
		for e := range c {
			want := int32(i<<24 | r<<16 | e%65536)
			if out[d+e] != want {
				return path, 0, fmt.Errorf("rank %d: element %d from rank %d = %#x, want %#x", r, e, i, out[d+e], want)
			}
			sum += uint64(uint32(out[d+e]))
		}
	}
	return path, sum, nil
}
