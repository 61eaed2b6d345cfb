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
	b.prepare(count)
	total := b.elems(count) // bytes: one-byte elements
	// Every rank's input, so that each process can work out its own ranks'
	// answers; it writes only its own.
	in := inputs(b.n, total)
	for _, r := range b.ranks {
		dst := r.send
		if inPlace { // the in-place input sits in recv (the operation's buffers say where)
			dst = r.recv
		}
		must(dst.WriteBytes(in[r.comm.Rank()]))
	}
	must(b.launch(count, inPlace, 0))
	b.sync()
	wrong := 0
	got := make([]byte, total)
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
