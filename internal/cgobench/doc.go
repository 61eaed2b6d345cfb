// Package cgobench measures gonccl's call path against cgo and against C itself,
// on the same functions of the fake NCCL, in one run (scripts/bench-overhead.sh).
// Its benchmarks need cgo; gonccl itself never does, and without cgo this
// package is empty.
package cgobench
