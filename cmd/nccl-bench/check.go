package main

import "github.com/gonccl/nccl"

// checkable says whether -c checks a run: int8/uint8 data (-d uint8) with sum
// or no reduction, bit for bit; other cases print N/A, as does an in-place
// run whose result is undefined (timed all the same, as nccl-tests does).
func (b *bench) checkable(inPlace bool) bool {
	return (b.dt == nccl.Uint8 || b.dt == nccl.Int8) && (!b.op.reduce || b.red == nccl.Sum) &&
		(!inPlace || b.op.checkInPlace)
}

// check runs the operation once on known bytes and counts the elements that
// differ from the CPU's answer (the operation's fill), summed over the job's
// ranks.
func (b *bench) check(count int, inPlace bool) int {
	in := b.writeInputs(count, inPlace)
	b.barrier()
	must(b.launch(count, inPlace, 0))
	b.sync()
	return b.compare(in, count, inPlace)
}

// checkGraph is check in -G mode, as nccl-tests checks there: the one
// operation captured into a graph on every local stream and the graphs
// launched once.
func (b *bench) checkGraph(count int, inPlace bool) int {
	in := b.writeInputs(count, inPlace)
	b.barrier()
	must(b.capture(func() error { return b.launch(count, inPlace, 0) }))
	must(b.launchGraphs(1))
	b.sync()
	must(b.destroyGraphs())
	return b.compare(in, count, inPlace)
}

// writeInputs writes the check's input into every local rank's buffer (out
// of place, the receive buffer is filled with 0xa5 first, so that a run that
// did not happen cannot pass for one that did) and returns every rank's
// input, so that each process can work out its own ranks' answers; it writes
// only its own. The caller then waits for the job's other processes
// (barrier) before launching: VCCL's native ncclAlltoAllv puts into the
// peers' receive buffers without waiting for them (see Comm.AlltoAllv), so
// a process still writing its 0xa5 would wipe what a faster peer put there
// (whole blocks wrong under -np 4 without the barrier).
func (b *bench) writeInputs(count int, inPlace bool) [][]uint8 {
	b.prepare(count)
	total := b.elems(count)
	in := inputs(b.n, total) // bytes: one-byte elements
	for _, r := range b.ranks {
		dst := r.send
		if inPlace { // the in-place input sits in recv (the operation's buffers say where)
			dst = r.recv
		} else {
			must(r.recv.Slice(0, total).Memset(0xa5))
		}
		must(dst.WriteBytes(in[r.comm.Rank()]))
	}
	return in
}

// compare counts the elements of the local ranks' receive buffers that differ
// from the answer to inputs in, summed over the job's ranks.
func (b *bench) compare(in [][]uint8, count int, inPlace bool) int {
	wrong := 0
	got := make([]byte, b.elems(count))
	for _, r := range b.ranks {
		must(r.recv.ReadBytes(got))
		for k, w := range b.op.want(in, r.comm.Rank(), count, b.root, inPlace) {
			if w >= 0 && int(got[k]) != w {
				wrong++
			}
		}
	}
	return int(b.jobReduce([]float64{float64(wrong)}, nccl.Sum)[0])
}

// inputs are the check's data: n ranks' bytes, total each.
func inputs(n, total int) [][]uint8 {
	in := make([][]uint8, n)
	for r := range in {
		in[r] = make([]uint8, total)
		for k := range in[r] {
			in[r][k] = uint8(r*7 + k%13)
		}
	}
	return in
}
