package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	os.Setenv("FAKECUDA_DELAY_US", "0")
	code := m.Run()
	fakes.Cleanup()
	os.Exit(code)
}

// jobs are the ways the tests lay a job's ranks over processes: one process
// with every GPU (nccl-tests -g), one GPU per process (under mpirun), two per
// process, and a single rank. A "process" here is a goroutine with its own
// bench over its share of the communicators, so the job's sums, barriers and
// per-rank checks run as they do across real processes.
var jobs = [][][]int{{{0, 1, 2}}, {{0}, {1}, {2}}, {{0, 1}, {2, 3}}, {{0}}}

// TestEveryOperation runs each operation on the fake NCCL in every job layout,
// in and out of place, native and grouped: the bytes of every rank are checked,
// and wrong counts and times are summed over the job.
func TestEveryOperation(t *testing.T) {
	for _, variant := range []string{"default", "old", "vccl11"} {
		lib, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, variant)), nccl.WithCUDARuntime(fakes.CUDART(t)))
		if err != nil {
			t.Fatal(err)
		}
		for _, job := range jobs {
			var devs []int
			for _, p := range job {
				devs = append(devs, p...)
			}
			comms, err := lib.InitAll(devs)
			if err != nil {
				t.Fatal(err)
			}
			for name, spec := range opSpecs {
				for _, grouped := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%v/%s/grouped=%v", variant, job, name, grouped), func(t *testing.T) {
						runJob(t, lib, comms, job, name, spec, grouped)
					})
				}
			}
			for _, c := range comms {
				c.Destroy()
			}
		}
	}
}

// runJob runs one operation on every process of the job at once.
func runJob(t *testing.T, lib *nccl.Library, comms []*nccl.Comm, job [][]int, name string, spec opSpec, grouped bool) {
	const count = 1024
	n := len(comms)
	benches := make([]*bench, len(job))
	first := 0
	var made sync.WaitGroup // at once: registering symmetric windows is collective
	for p, devs := range job {
		made.Add(1)
		go func(c []*nccl.Comm) {
			defer made.Done()
			benches[p] = newBench(lib, c, abi.Uint8, abi.Sum, n-1, spec, name, grouped, n*count*3)
			benches[p].perIter = !grouped // -I on half the runs
		}(comms[first : first+len(devs)])
		first += len(devs)
	}
	made.Wait()
	for _, inPlace := range []bool{false, true} {
		wrong := make([]int, len(job))
		times := make([]float64, len(job))
		iters := make([]*iterStats, len(job))
		var wg sync.WaitGroup
		for p, b := range benches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.warmUp(count, count, 1)
				r := b.run(b.count(count), inPlace, 4, true)
				times[p], wrong[p], iters[p] = r.us, r.wrong, r.iter
			}()
		}
		wg.Wait()
		for p := range job {
			if wrong[p] != wrong[0] || times[p] != times[0] {
				t.Errorf("in-place=%v: process %d got %v wrong and %v µs, process 0 %v and %v: not the job's sums",
					inPlace, p, wrong[p], times[p], wrong[0], times[0])
			}
		}
		for p, st := range iters {
			switch {
			case grouped && st != nil:
				t.Errorf("per-iteration times without -I")
			case !grouped && (st == nil || len(st.TimesUs) != 4):
				t.Errorf("process %d: per-iteration times %+v, want 4", p, st)
			case !grouped && !slices.Equal(st.TimesUs, iters[0].TimesUs):
				t.Errorf("process %d: per-iteration times %v, process 0 %v: not the job's maxima", p, st.TimesUs, iters[0].TimesUs)
			case !grouped && (st.MinUs <= 0 || st.MaxUs < st.MinUs):
				t.Errorf("process %d: per-iteration times %+v", p, st)
			}
		}
		if wrong[0] > 0 {
			t.Errorf("in-place=%v: %d wrong", inPlace, wrong[0])
		}
		if wrong[0] < 0 && !inPlace {
			t.Errorf("out of place not checked")
		}
		if times[0] <= 0 {
			t.Errorf("in-place=%v: time %v", inPlace, times[0])
		}
	}
	if len(job) == 1 && name != "alltoallv" {
		b := benches[0]
		if allocs := testing.AllocsPerRun(20, func() { must(b.launch(count, false, count)) }); allocs != 0 {
			t.Errorf("%v allocations per timed iteration", allocs)
		}
		b.sync()
	}
}

// TestCheckFindsCorruption makes sure the byte check can fail: a receive
// buffer overwritten after the operation must be counted wrong.
func TestCheckFindsCorruption(t *testing.T) {
	lib, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, "default")), nccl.WithCUDARuntime(fakes.CUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	comms, err := lib.InitAll([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Destroy()
		}
	}()
	// Each operation, then another one run instead of it.
	for name, other := range map[string]string{"all_reduce": "broadcast", "alltoallv": "all_reduce", "all_gather": "all_reduce"} {
		b := newBench(lib, comms, abi.Uint8, abi.Sum, 0, opSpecs[name], name, false, 4096)
		if w := b.check(512, false); w != 0 {
			t.Fatalf("%s: %d wrong before corruption", name, w)
		}
		b.op = other
		must(b.launch(512, false, 0))
		b.sync()
		b.op = name
		got := make([]uint8, 1024)
		must(b.recv[1].CopyOut(lib.CUDA(), got))
		want := expected(name, inputs(2, 1024), 1, 512, 0, false)
		diff := 0
		for k, w := range want {
			if w >= 0 && int(got[k]) != w {
				diff++
			}
		}
		if diff == 0 {
			t.Fatalf("%s: the corrupted buffer matches the reference", name)
		}
	}
}

func TestPeerBytesMatchesNCCLTests(t *testing.T) {
	// Two ranks, spread 1.0: nothing to oneself, everything to the other.
	if peerBytes(0, 0, 2, 1024) != 0 || peerBytes(0, 1, 2, 1024) != 1024 {
		t.Error("2 ranks")
	}
	// Four ranks: distance-weighted, 16-byte aligned, summing to the total.
	sum := 0
	for j := range 4 {
		v := peerBytes(1, j, 4, 6000)
		if v%16 != 0 {
			t.Errorf("unaligned %d", v)
		}
		sum += v
	}
	if sum > 6000 || sum < 6000-4*16 {
		t.Errorf("sum %d of 6000", sum)
	}
}

// TestIterStats checks -I's summary against values worked out by hand, with
// nccl-tests' percentile rule (index ceil(n·p/100)-1).
func TestIterStats(t *testing.T) {
	times := []float64{5, 1, 4, 2, 3, 10, 6, 7, 9, 8}
	st := stats(times)
	want := iterStats{MinUs: 1, MaxUs: 10, AvgUs: 5.5, P50Us: 6, P95Us: 10, P99Us: 10, StdevUs: math.Sqrt(8.25)}
	want.CVPct = want.StdevUs / 5.5 * 100
	if st.MinUs != want.MinUs || st.MaxUs != want.MaxUs || st.AvgUs != want.AvgUs || st.P50Us != want.P50Us ||
		st.P95Us != want.P95Us || st.P99Us != want.P99Us || math.Abs(st.StdevUs-want.StdevUs) > 1e-12 || math.Abs(st.CVPct-want.CVPct) > 1e-9 {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
	if !slices.Equal(times, []float64{5, 1, 4, 2, 3, 10, 6, 7, 9, 8}) {
		t.Error("stats reordered the iterations")
	}
	if st := stats(make([]float64, 100)); st.P95Us != 0 || st.CVPct != 0 {
		t.Errorf("all zero: %+v", st)
	}
}
