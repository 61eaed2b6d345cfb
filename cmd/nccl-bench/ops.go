package main

import (
	"strings"

	"github.com/gonccl/nccl"
)

// The operations nccl-bench measures: one row of operations each, with all it
// knows of the operation. The bench itself never switches on a name.

// args is what one rank's call of an operation takes.
type args struct {
	send, recv nccl.Buffer
	red        nccl.RedOp
	root       int
	layout     nccl.Layout // alltoallv's counts and displacements
	s          nccl.Stream
}

type operation struct {
	name string
	// busFactor turns algbw into busbw for n ranks, as nccl-tests does.
	busFactor func(n float64) float64
	// timesN: the operation's larger buffer holds count·n elements, and
	// nccl-tests counts those bytes for algbw (all_gather, reduce_scatter,
	// alltoall, gather, scatter, alltoallv).
	timesN bool
	reduce bool // takes -o
	rooted bool // takes -r
	// group: an iteration is sends and receives that meet in one group even
	// on one GPU (operations with a grouped path group themselves).
	group bool
	// inPlace: the API runs it in place; AlltoAll and AlltoAllv refuse
	// overlapping buffers (the in-place columns print N/A).
	inPlace bool
	// checkInPlace: the in-place result is defined (not so for sendrecv,
	// whose peer reads the buffer while it is overwritten).
	checkInPlace bool
	// path is the name Comm.PathOf knows, for an operation that runs native or
	// grouped; symmetric: its native call wants buffers in symmetric windows.
	path      string
	symmetric bool
	// buffers cuts rank me's (of n) send and receive buffers for count
	// elements out of send and recv (whole buffers from the iteration's
	// shift); in place, inside recv as nccl-tests lays the operation out.
	buffers func(send, recv nccl.Buffer, count, n, me int, inPlace bool) (nccl.Buffer, nccl.Buffer)
	// layout is the counts and displacements for count elements per rank of
	// type size sz (alltoallv only).
	layout func(n, count, sz int) nccl.Layout
	// call enqueues the operation of one rank through the public API.
	call func(c *nccl.Comm, a args) error
	// fill writes rank me's expected receive buffer for one-byte data into
	// out, leaving -1 where the result is undefined.
	fill func(out []int, in [][]uint8, me, count, root int, inPlace bool)
}

func ringFactor(n float64) float64 { return (n - 1) / n }
func one(float64) float64          { return 1 }

var operations = []operation{
	{name: "all_reduce", busFactor: func(n float64) float64 { return 2 * (n - 1) / n }, reduce: true, inPlace: true, checkInPlace: true,
		buffers: sameBuffers, fill: fillAllReduce,
		call: func(c *nccl.Comm, a args) error { return c.AllReduce(a.send, a.recv, a.red, a.s) }},
	{name: "all_gather", busFactor: ringFactor, timesN: true, inPlace: true, checkInPlace: true,
		buffers: gatherBuffers, fill: fillAllGather,
		call: func(c *nccl.Comm, a args) error { return c.AllGather(a.send, a.recv, a.s) }},
	{name: "reduce_scatter", busFactor: ringFactor, timesN: true, reduce: true, inPlace: true, checkInPlace: true,
		buffers: scatterBuffers, fill: fillReduceScatter,
		call: func(c *nccl.Comm, a args) error { return c.ReduceScatter(a.send, a.recv, a.red, a.s) }},
	{name: "alltoall", busFactor: ringFactor, timesN: true, path: "AlltoAll",
		buffers: exchangeBuffers, fill: fillAlltoAll,
		call: func(c *nccl.Comm, a args) error { return c.AlltoAll(a.send, a.recv, a.s) }},
	{name: "gather", busFactor: ringFactor, timesN: true, rooted: true, inPlace: true, checkInPlace: true, path: "Gather",
		buffers: gatherBuffers, fill: fillGather,
		call: func(c *nccl.Comm, a args) error { return c.Gather(a.send, a.recv, a.root, a.s) }},
	{name: "scatter", busFactor: ringFactor, timesN: true, rooted: true, inPlace: true, checkInPlace: true, path: "Scatter",
		buffers: scatterBuffers, fill: fillScatter,
		call: func(c *nccl.Comm, a args) error { return c.Scatter(a.send, a.recv, a.root, a.s) }},
	{name: "broadcast", busFactor: one, rooted: true, inPlace: true, checkInPlace: true,
		buffers: sameBuffers, fill: fillBroadcast,
		call: func(c *nccl.Comm, a args) error { return c.Broadcast(a.send, a.recv, a.root, a.s) }},
	{name: "reduce", busFactor: one, reduce: true, rooted: true, inPlace: true, checkInPlace: true,
		buffers: sameBuffers, fill: fillReduce,
		call: func(c *nccl.Comm, a args) error { return c.Reduce(a.send, a.recv, a.red, a.root, a.s) }},
	{name: "sendrecv", busFactor: one, group: true, inPlace: true,
		buffers: sameBuffers, fill: fillSendRecv, call: sendRecv},
	{name: "alltoallv", busFactor: ringFactor, timesN: true, path: "AlltoAllv", symmetric: true,
		buffers: exchangeBuffers, layout: alltoallvLayout, fill: fillAlltoAllv,
		call: func(c *nccl.Comm, a args) error { return c.AlltoAllv(a.send, a.recv, a.layout, a.s) }},
}

// lookup finds an operation by its nccl-tests name.
func lookup(name string) (*operation, bool) {
	for i := range operations {
		if operations[i].name == name {
			return &operations[i], true
		}
	}
	return nil, false
}

func operationNames() string {
	var names []string
	for _, o := range operations {
		names = append(names, o.name)
	}
	return strings.Join(names, ", ")
}

// sendRecv sends to the next rank and receives from the previous one
// (nccl-tests' sendrecv_perf); the bench puts it in a group.
func sendRecv(c *nccl.Comm, a args) error {
	me, n := c.Rank(), c.Size()
	if err := c.Send(a.send, (me+1)%n, a.s); err != nil {
		return err
	}
	return c.Recv(a.recv, (me+n-1)%n, a.s)
}

// sameBuffers: count elements each; in place, both are recv.
func sameBuffers(send, recv nccl.Buffer, count, n, me int, inPlace bool) (nccl.Buffer, nccl.Buffer) {
	if inPlace {
		send = recv
	}
	return send.Slice(0, count), recv.Slice(0, count)
}

// gatherBuffers: count to send, n·count to receive; in place, the send
// buffer is the rank's block of recv.
func gatherBuffers(send, recv nccl.Buffer, count, n, me int, inPlace bool) (nccl.Buffer, nccl.Buffer) {
	if inPlace {
		return recv.Slice(me*count, (me+1)*count), recv.Slice(0, n*count)
	}
	return send.Slice(0, count), recv.Slice(0, n*count)
}

// scatterBuffers: n·count to send, count to receive; in place, the receive
// buffer is the rank's block of the send buffer, which lies in recv.
func scatterBuffers(send, recv nccl.Buffer, count, n, me int, inPlace bool) (nccl.Buffer, nccl.Buffer) {
	if inPlace {
		return recv.Slice(0, n*count), recv.Slice(me*count, (me+1)*count)
	}
	return send.Slice(0, n*count), recv.Slice(0, count)
}

// exchangeBuffers: n·count each, never in place.
func exchangeBuffers(send, recv nccl.Buffer, count, n, me int, inPlace bool) (nccl.Buffer, nccl.Buffer) {
	return send.Slice(0, n*count), recv.Slice(0, n*count)
}

// peerBytes is nccl-tests' generated alltoallv pattern (alltoallv.cu, the
// default spread 1.0): rank i sends to j bytes in proportion to their distance.
func peerBytes(i, j, n, total int) int {
	if n == 1 {
		return total &^ 15
	}
	dist := (j - i + n) % n
	sum := n * (n - 1) / 2
	return int(float64(dist)*float64(total)/float64(sum)) &^ 15
}

// alltoallvLayout is the pattern for count·n elements per rank in the matrix
// form, which both VCCL's native call and the grouped path take.
func alltoallvLayout(n, count, sz int) nccl.Layout {
	total := count * n * sz
	m := nccl.Layout{SendCounts: make([]uint64, n*n), SendDispls: make([]uint64, n*n),
		RecvCounts: make([]uint64, n*n), RecvDispls: make([]uint64, n*n)}
	for i := range n {
		var so, ro uint64
		for j := range n {
			k := i*n + j
			m.SendCounts[k], m.SendDispls[k] = uint64(peerBytes(i, j, n, total)/sz), so
			so += m.SendCounts[k]
			m.RecvCounts[k], m.RecvDispls[k] = uint64(peerBytes(j, i, n, total)/sz), ro
			ro += m.RecvCounts[k]
		}
	}
	return m
}

// want is rank me's expected receive buffer for byte data, -1 where undefined.
func (o *operation) want(in [][]uint8, me, count, root int, inPlace bool) []int {
	out := make([]int, len(in[me]))
	for k := range out {
		out[k] = -1
	}
	o.fill(out, in, me, count, root, inPlace)
	return out
}

// sum is element idx summed over the ranks' inputs, modulo 256.
func sum(in [][]uint8, idx int) int {
	s := 0
	for r := range in {
		s += int(in[r][idx])
	}
	return s & 0xff
}

func fillAllReduce(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	for k := range count {
		out[k] = sum(in, k)
	}
}

func fillReduce(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	if me == root {
		fillAllReduce(out, in, me, count, root, inPlace)
	}
}

// fillReduceScatter: the rank's block of the sums; in place, at its place in
// the buffer.
func fillReduceScatter(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	base := 0
	if inPlace {
		base = me * count
	}
	for k := range count {
		out[base+k] = sum(in, me*count+k)
	}
}

// fillAllGather: every rank's input at its block; in place, each rank's
// input is its own block of its buffer.
func fillAllGather(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	for r := range in {
		for k := range count {
			src := k
			if inPlace {
				src = r*count + k
			}
			out[r*count+k] = int(in[r][src])
		}
	}
}

func fillGather(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	if me == root {
		fillAllGather(out, in, me, count, root, inPlace)
	}
}

func fillBroadcast(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	for k := range count {
		out[k] = int(in[root][k])
	}
}

func fillAlltoAll(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	for r := range in {
		for k := range count {
			out[r*count+k] = int(in[r][me*count+k])
		}
	}
}

func fillScatter(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	base := 0
	if inPlace {
		base = me * count
	}
	for k := range count {
		out[base+k] = int(in[root][me*count+k])
	}
}

func fillSendRecv(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	prev := (me + len(in) - 1) % len(in)
	for k := range count {
		out[k] = int(in[prev][k])
	}
}

// fillAlltoAllv is nccl-tests' pattern in bytes (one-byte elements).
func fillAlltoAllv(out []int, in [][]uint8, me, count, root int, inPlace bool) {
	n, total := len(in), len(in[me])
	ro := 0
	for p := range n {
		so := 0
		for q := range me {
			so += peerBytes(p, q, n, total)
		}
		for k := range peerBytes(p, me, n, total) {
			out[ro+k] = int(in[p][so+k])
		}
		ro += peerBytes(p, me, n, total)
	}
}
