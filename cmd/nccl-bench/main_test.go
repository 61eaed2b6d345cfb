package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	os.Setenv("FAKECUDA_DELAY_US", "0")
	code := m.Run()
	fakes.Cleanup()
	os.Exit(code)
}

func openFake(t *testing.T, variant string) *nccl.Library {
	t.Helper()
	lib, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, variant)), nccl.WithCUDARuntime(fakes.CUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	return lib
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
		lib := openFake(t, variant)
		for _, job := range jobs {
			var devs []int
			for _, p := range job {
				devs = append(devs, p...)
			}
			comms, err := lib.InitAll(context.Background(), devs, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range operations {
				op := &operations[i]
				for _, grouped := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%v/%s/grouped=%v", variant, job, op.name, grouped), func(t *testing.T) {
						runJob(t, lib, comms, job, op, grouped)
					})
				}
			}
			if err := closeComms(comms); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// runJob runs one operation on every process of the job at once.
func runJob(t *testing.T, lib *nccl.Library, comms []*nccl.Comm, job [][]int, op *operation, grouped bool) {
	const count = 1024
	n := len(comms)
	benches := make([]*bench, len(job))
	errs := make([]error, len(job))
	first := 0
	var made sync.WaitGroup // at once: registering symmetric windows is collective
	for p, devs := range job {
		made.Add(1)
		go func(c []*nccl.Comm) {
			defer made.Done()
			benches[p], errs[p] = newBench(lib, c, settings{op: op, dt: nccl.Uint8, red: nccl.Sum, root: n - 1,
				grouped: grouped, maxBytes: n * count * 3, perIter: !grouped}) // -I on half the runs
		}(comms[first : first+len(devs)])
		first += len(devs)
	}
	made.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() { // together: freeing symmetric windows is collective
		var wg sync.WaitGroup
		for p, b := range benches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[p] = b.close()
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	}()
	if op.path != "" {
		path := comms[0].PathOf(op.path)
		if grouped && path != nccl.Grouped {
			t.Errorf("-grouped: the library routes %s %v", op.path, path)
		}
		if want := op.symmetric && path == nccl.Native; benches[0].symmetric != want {
			t.Errorf("symmetric buffers %v, want %v (path %v)", benches[0].symmetric, want, path)
		}
	}
	for _, inPlace := range []bool{false, true} {
		res := make([]result, len(job))
		var wg sync.WaitGroup
		for p, b := range benches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.warmUp(count, count, 1)
				res[p] = b.run(b.count(count), inPlace, 4, true)
			}()
		}
		wg.Wait()
		if skip := inPlace && !op.inPlace; res[0].skipped != skip {
			t.Fatalf("in-place=%v: skipped %v, want %v", inPlace, res[0].skipped, skip)
		}
		if res[0].skipped {
			continue
		}
		for p, r := range res {
			if r.wrong != res[0].wrong || r.us != res[0].us {
				t.Errorf("in-place=%v: process %d got %v wrong and %v µs, process 0 %v and %v: not the job's sums",
					inPlace, p, r.wrong, r.us, res[0].wrong, res[0].us)
			}
			st := r.iter
			switch {
			case grouped && st != nil:
				t.Errorf("per-iteration times without -I")
			case !grouped && (st == nil || len(st.TimesUs) != 4):
				t.Errorf("process %d: per-iteration times %+v, want 4", p, st)
			case !grouped && !slices.Equal(st.TimesUs, res[0].iter.TimesUs):
				t.Errorf("process %d: per-iteration times %v, process 0 %v: not the job's maxima", p, st.TimesUs, res[0].iter.TimesUs)
			case !grouped && (st.MinUs <= 0 || st.MaxUs < st.MinUs):
				t.Errorf("process %d: per-iteration times %+v", p, st)
			}
		}
		if res[0].wrong > 0 {
			t.Errorf("in-place=%v: %d wrong", inPlace, res[0].wrong)
		}
		if res[0].wrong < 0 && (!inPlace || op.checkInPlace) {
			t.Errorf("in-place=%v: not checked", inPlace)
		}
		if res[0].us <= 0 {
			t.Errorf("in-place=%v: time %v", inPlace, res[0].us)
		}
	}
	// The timed loop's launches allocate nothing; VCCL's native ncclAlltoAllv
	// excepted (gonccl pins its matrices for every call). -I's event records
	// are left out: Event.Record allocates in gonccl (CUDA.OnDevice).
	if b := benches[0]; len(job) == 1 && !b.symmetric {
		c := b.count(count)
		b.prepare(c)
		allocs := testing.AllocsPerRun(20, func() { must(b.launch(c, false, 1)) })
		if allocs != 0 {
			t.Errorf("%v allocations per timed iteration", allocs)
		}
		b.sync()
	}
}

// TestCheckFindsCorruption makes sure the byte check can fail: a receive
// buffer overwritten after the operation must be counted wrong.
func TestCheckFindsCorruption(t *testing.T) {
	lib := openFake(t, "default")
	comms, err := lib.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeComms(comms)
	// Each operation, then another one run instead of it.
	for name, other := range map[string]string{"all_reduce": "broadcast", "alltoallv": "all_reduce", "all_gather": "all_reduce"} {
		op, _ := lookup(name)
		b, err := newBench(lib, comms, settings{op: op, dt: nccl.Uint8, red: nccl.Sum, maxBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if w := b.check(512, false); w != 0 {
			t.Fatalf("%s: %d wrong before corruption", name, w)
		}
		b.op, _ = lookup(other)
		must(b.launch(512, false, 0))
		b.sync()
		b.op = op
		got := make([]byte, 1024)
		must(b.ranks[1].recv.ReadBytes(got))
		diff := 0
		for k, w := range op.want(inputs(2, 1024), 1, 512, 0, false) {
			if w >= 0 && int(got[k]) != w {
				diff++
			}
		}
		if diff == 0 {
			t.Fatalf("%s: the corrupted buffer matches the reference", name)
		}
		must(b.close())
	}
}

// TestTableColumns: a row keeps nccl-tests' columns whatever ran, so that
// scripts find the times, busbw and wrong counts at fixed fields (size $1,
// out-of-place time $6 and busbw $8, wrong counts $9 and $13).
func TestTableColumns(t *testing.T) {
	for _, perIter := range []bool{false, true} {
		var out bytes.Buffer
		p := &report{w: &out, show: true, perIter: perIter}
		st := stats([]float64{1, 2})
		r := row{Size: 1024, Count: 256, Type: "float", Op: "none", Root: -1}
		if !perIter {
			st = nil
		}
		r.set(false, result{us: 2, wrong: 0, iter: st}, 1)
		r.set(true, result{us: 3, wrong: -1, iter: st}, 1)
		p.add(r)
		r.set(true, result{wrong: -1, skipped: true}, 1)
		p.add(r)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		for _, l := range lines {
			f := strings.Fields(l)
			want := 13
			if perIter {
				want = 21
			}
			if len(f) != want || f[0] != "1024" || f[5] != "2.00" || f[7] != "0.51" || f[8] != "0" {
				t.Errorf("-I %v: %d fields in %q, want %d", perIter, len(f), l, want)
			}
		}
		if !strings.Contains(lines[1], "N/A") || p.avgBusBW() != ((0.512+1.024/3)/2+0.512)/2 {
			t.Errorf("skipped in place: %q, avg busbw %v", lines[1], p.avgBusBW())
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
	// The layout in elements of 4 bytes: senders' and receivers' counts agree,
	// displacements follow the counts.
	m := alltoallvLayout(4, 100, 4)
	for i := range 4 {
		var so uint64
		for j := range 4 {
			if m.SendCounts[i*4+j] != m.RecvCounts[j*4+i] || m.SendDispls[i*4+j] != so {
				t.Fatalf("layout %+v", m)
			}
			so += m.SendCounts[i*4+j]
		}
		if so > 400 {
			t.Errorf("rank %d sends %d of 400 elements", i, so)
		}
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
