package main

import (
	"fmt"
	"strings"
)

// The calls of internal/cgobench, each against the same C work through cgo
// (or made from C).
var calls = []struct{ label, gonccl, cgo string }{
	{"a no-op C function (`ncclGetErrorString`)", "NoopGonccl", "NoopCgo"},
	{"`Comm.AllReduce` of 0 elements, device 0", "AllReduceGonccl", "AllReduceCgo"},
	{"`Comm.AllReduce` of 0 elements, device 1 (the thread-device guard)", "AllReduceGoncclDevice1", "AllReduceCgo"},
	{"`Group` around two `Comm.AllReduce` (one `-g 2` iteration), against the four calls from C", "GroupIterationGonccl", "GroupIterationCgo"},
	{"`nccl.Open` against `dlopen` + `dlsym` of the same symbols in C", "OpenGonccl", "OpenC"},
}

// callCostBlock: per benchmark set, each call's median ns/op, the cgo
// side's, and the ratio run by run.
func callCostBlock(_ Results, bench BenchSets) string {
	var b strings.Builder
	b.WriteString("| machine | call | gonccl ns/op | cgo or C ns/op | ratio: median of the rounds (range) | gonccl allocs/op |\n|---|---|---:|---:|---:|---:|\n")
	for _, s := range bench {
		label := s.label()
		for _, c := range calls {
			g, o := s.NsOp[c.gonccl], s.NsOp[c.cgo]
			if len(g) == 0 || len(o) == 0 {
				continue
			}
			r := s.ratios(c.gonccl, c.cgo)
			lo, hi := minmax(r)
			fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.2f (%.2f–%.2f) | %.0f |\n", label, c.label, median(g), median(o), median(r), lo, hi, median(s.Allocs[c.gonccl]))
			label = ""
		}
		if c := s.NsOp["NoopC"]; len(c) > 0 {
			fmt.Fprintf(&b, "| | the no-op from a loop in C | | %.1f | | |\n", median(c))
		}
	}
	return b.String()
}

// callAccountBlock: where Comm.AllReduce's time over cgo goes, from the
// benchmarks that add one part of the hot path at a time to the same C call
// (internal/cgobench): the crossing (gonccl's call path against cgo's), the
// two atomic adds that count the call in and out of the communicator, then
// the argument and capture checks and Go's calls between them, and the
// thread-device guard. Each part is the difference of two medians; what the
// asymmetric scheme (plain marks, membarrier on Abort's side) would save
// stands beside them.
func callAccountBlock(_ Results, bench BenchSets) string {
	var b strings.Builder
	b.WriteString("| machine | cgo ns/op | the crossing | counting in and out | checks and Go calls | `Comm.AllReduce` ns/op | over cgo | the guard (device 1) | plain marks instead of the adds |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range bench {
		m := func(name string) float64 { return median(s.NsOp[name]) }
		if len(s.NsOp["AllReduceCcall"]) == 0 || len(s.NsOp["AllReduceCcallLifecycle"]) == 0 {
			continue
		}
		cgo, bare, life, full := m("AllReduceCgo"), m("AllReduceCcall"), m("AllReduceCcallLifecycle"), m("AllReduceGonccl")
		fmt.Fprintf(&b, "| %s | %.1f | %+.1f | %+.1f | %+.1f | %.1f | %+.1f | %+.1f | %+.1f |\n", s.label(), cgo, bare-cgo, life-bare, full-life, full, full-cgo,
			m("AllReduceGoncclDevice1")-full, m("AllReduceCcallAsymmetric")-life)
	}
	return b.String()
}

// groupCostBlock: a Group around one Comm.AllReduce per GPU against the same
// calls made from C, by GPUs: medians, and minima, which move least.
func groupCostBlock(_ Results, bench BenchSets) string {
	var b strings.Builder
	b.WriteString("| machine | GPUs | C ns/op | gonccl ns/op | over C | over C per GPU | minima: over C per GPU |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range bench {
		label := s.label()
		for _, n := range []int{1, 2, 4, 8} {
			g, c := s.NsOp[fmt.Sprintf("GroupScalingGonccl/gpus=%d", n)], s.NsOp[fmt.Sprintf("GroupScalingCgo/gpus=%d", n)]
			if len(g) == 0 || len(c) == 0 {
				continue
			}
			over := median(g) - median(c)
			glo, _ := minmax(g)
			clo, _ := minmax(c)
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %+.0f | %+.0f | %+.0f |\n", label, n, median(c), median(g), over, over/float64(n), (glo-clo)/float64(n))
			label = ""
		}
	}
	return b.String()
}
