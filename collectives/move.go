package collectives

import (
	"fmt"

	"github.com/gonccl/nccl"
)

// Blocks splits b into n blocks of equal size: rank r's part of a
// ReduceScatter result or of Scatter's send buffer is block r. It panics if
// the bytes do not divide evenly.
func Blocks(b []byte, n int) [][]byte {
	if n <= 0 || len(b)%n != 0 {
		panic(fmt.Sprintf("collectives: %d bytes into %d equal blocks", len(b), n))
	}
	k := len(b) / n
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[i*k : (i+1)*k : (i+1)*k]
	}
	return out
}

// AllGather is every rank's buffer in rank order: what AllGather leaves on
// every rank and Gather on the root.
func AllGather(inputs [][]byte) []byte {
	var out []byte
	for _, in := range inputs {
		out = append(out, in...)
	}
	return out
}

// AlltoAll is what AlltoAll leaves on each rank: rank r receives block r of
// every rank's buffer (split in len(inputs) blocks), in rank order.
func AlltoAll(inputs [][]byte) [][]byte {
	n := len(inputs)
	out := make([][]byte, n)
	for _, in := range inputs {
		for r, blk := range Blocks(in, n) {
			out[r] = append(out[r], blk...)
		}
	}
	return out
}

// AlltoAllv is what an all-to-all-v with layout m (the matrix form of
// nccl.Layout, counts and displacements in elements of dt) leaves in the
// receive buffers whose contents before were recvs: every block received
// overwrites its place, the rest keeps its bytes. The inputs are not changed.
// It panics on a layout that NCCL would refuse (sizes, counts that disagree,
// blocks outside the buffers).
func AlltoAllv(dt nccl.DataType, m nccl.Layout, sends, recvs [][]byte) [][]byte {
	sz := size(dt)
	n := len(sends)
	if len(recvs) != n {
		panic(fmt.Sprintf("collectives: %d send buffers, %d receive buffers", n, len(recvs)))
	}
	for _, v := range [][]uint64{m.SendCounts, m.SendDispls, m.RecvCounts, m.RecvDispls} {
		if len(v) != n*n {
			panic(fmt.Sprintf("collectives: layout of %d entries for %d ranks: want the matrix form (%d)", len(v), n, n*n))
		}
	}
	out := make([][]byte, n)
	for j := range out {
		out[j] = append([]byte(nil), recvs[j]...)
	}
	for i := range n {
		for j := range n {
			cnt := m.SendCounts[i*n+j]
			if m.RecvCounts[j*n+i] != cnt {
				panic(fmt.Sprintf("collectives: rank %d sends %d elements to rank %d, which expects %d", i, cnt, j, m.RecvCounts[j*n+i]))
			}
			src := span(sends[i], m.SendDispls[i*n+j], cnt, sz, "send", i)
			dst := span(out[j], m.RecvDispls[j*n+i], cnt, sz, "receive", j)
			copy(dst, src)
		}
	}
	return out
}

// span is count elements of size sz from element displ of b.
func span(b []byte, displ, count uint64, sz int, what string, r int) []byte {
	elems := uint64(len(b) / sz)
	if displ > elems || count > elems-displ {
		panic(fmt.Sprintf("collectives: block at %d of %d elements overruns rank %d's %s buffer of %d", displ, count, r, what, elems))
	}
	return b[int(displ)*sz : int(displ+count)*sz]
}
