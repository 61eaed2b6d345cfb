// Command alltoallv exchanges uneven blocks between all ranks (VCCL's seed):
// rank i sends (i+j)%3+1 blocks of -k elements to rank j. On a library with
// ncclAlltoAllv (a VCCL build) it runs the native call on symmetric windows; on
// NCCL, grouped Send/Recv. Both print the same checksum. One goroutine per GPU.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl"
)

func main() {
	k := flag.Int("k", 4096, "elements per block")
	ngpu := flag.Int("gpus", 0, "ranks, one goroutine and GPU each (default: all GPUs)")
	grouped := flag.Bool("grouped", false, "use grouped Send/Recv even where ncclAlltoAllv exists")
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
	n := *ngpu
	m := layout(n, *k)
	id, err := lib.GetUniqueID()
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	var sum atomic.Uint64
	paths := make([]nccl.Path, n)
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cs uint64
			var err error
			paths[r], cs, err = rank(lib, id, n, r, m, *grouped, *timeout)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			}
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
func layout(n, k int) nccl.Layout {
	m := nccl.Layout{
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

func rank(lib *nccl.Library, id nccl.UniqueID, n, r int, m nccl.Layout, grouped bool, timeout time.Duration) (path nccl.Path, sum uint64, err error) {
	cu := lib.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	comm, err := lib.InitRank(ctx, r, id, n, r, nil)
	if err != nil {
		return 0, 0, err
	}
	defer closeComm(comm, timeout, &err)
	if grouped {
		if err := comm.SetPath(nccl.Grouped); err != nil {
			return 0, 0, err
		}
	}
	// The native ncclAlltoAllv needs buffers in symmetric windows; grouped
	// Send/Recv takes any device memory.
	path = comm.PathOf("AlltoAllv")
	s, err := cu.NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		return path, 0, err
	}
	defer s.Destroy()
	alloc := func(elems int) (nccl.Buffer, error) {
		if path == nccl.Native {
			return comm.AllocSymmetric(nccl.Int32, elems) // collective: every rank, same sizes, same order
		}
		return cu.Alloc(r, nccl.Int32, elems)
	}
	// Every rank allocates the largest block any rank needs: symmetric windows
	// are the same size on every rank.
	sendLen, recvLen := 0, 0
	for i := range n {
		sendLen = max(sendLen, total(m.SendCounts[i*n:(i+1)*n]))
		recvLen = max(recvLen, total(m.RecvCounts[i*n:(i+1)*n]))
	}
	send, err := alloc(sendLen)
	if err != nil {
		return path, 0, err
	}
	defer send.Free() // for a symmetric buffer, collective too
	recv, err := alloc(recvLen)
	if err != nil {
		return path, 0, err
	}
	defer recv.Free()
	// Element e of the block for rank j encodes (sender, receiver, e).
	host := make([]int32, sendLen)
	for j := range n {
		d, c := int(m.SendDispls[r*n+j]), int(m.SendCounts[r*n+j])
		for e := range c {
			host[d+e] = int32(r<<24 | j<<16 | e%65536)
		}
	}
	if err := nccl.CopyIn(send, host); err != nil {
		return path, 0, err
	}
	if err := comm.AlltoAllv(send, recv, m, s); err != nil {
		return path, 0, err
	}
	if err := comm.Wait(ctx, s); err != nil {
		return path, 0, err
	}
	out := make([]int32, recvLen)
	if err := nccl.CopyOut(out, recv); err != nil {
		return path, 0, err
	}
	for i := range n {
		d, c := int(m.RecvDispls[r*n+i]), int(m.RecvCounts[r*n+i])
		for e := range c {
			want := int32(i<<24 | r<<16 | e%65536)
			if out[d+e] != want {
				return path, 0, fmt.Errorf("element %d from rank %d = %#x, want %#x", e, i, out[d+e], want)
			}
			sum += uint64(uint32(out[d+e]))
		}
	}
	return path, sum, nil
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
