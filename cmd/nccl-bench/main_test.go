package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	if os.Getenv("NCCL_BENCH_AS_MAIN") == "1" { // the test binary as nccl-bench (benchCommand)
		main()
		os.Exit(0)
	}
	os.Setenv("FAKECUDA_DELAY_US", "0")
	os.Exit(m.Run())
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
						runJob(t, lib, comms, job, settings{op: op, dt: nccl.Uint8, grouped: grouped, perIter: !grouped}) // -I on half the runs
					})
				}
			}
			if err := closeComms(comms); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestGraphAndRegisterModes runs every operation in nccl-tests' launch modes,
// -G (the timed iterations captured into a CUDA graph per GPU and launched
// from it) and -R 1 / -R 2 (buffers registered, or in symmetric windows),
// alone and together, in every job layout, in and out of place, on byte data
// whose every result is checked (in -G mode from a graph, as nccl-tests
// checks there), and on wider types that are timed but not checked.
func TestGraphAndRegisterModes(t *testing.T) {
	modes := []struct{ graphs, register int }{{3, 0}, {0, 1}, {0, 2}, {2, 1}, {3, 2}}
	for _, variant := range []string{"default", "v230", "vccl11"} {
		lib := openFake(t, variant)
		for j, job := range jobs {
			if variant == "v230" && j > 0 { // one layout is enough for the newer release
				break
			}
			var devs []int
			for _, p := range job {
				devs = append(devs, p...)
			}
			comms, err := lib.InitAll(context.Background(), devs, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, m := range modes {
				for i := range operations {
					op := &operations[i]
					dt := []nccl.DataType{nccl.Int8, nccl.Uint8}[(i+k)%2]
					if (i+k)%5 == 0 { // now and then a type -c does not check
						dt = []nccl.DataType{nccl.Float32, nccl.Bfloat16, nccl.Float64}[(i+k)%3]
					}
					grouped := (i+k)%3 == 0
					t.Run(fmt.Sprintf("%s/%v/G%d-R%d/%s/%v/grouped=%v", variant, job, m.graphs, m.register, op.name, dt, grouped), func(t *testing.T) {
						runJob(t, lib, comms, job, settings{op: op, dt: dt, grouped: grouped, perIter: true, graphs: m.graphs, register: m.register})
					})
				}
			}
			if err := closeComms(comms); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestThreadsFlag runs every operation with -threads (each local GPU's
// launches from a thread of nccl.Threads), plain and from graphs, with and
// without symmetric windows, in the layouts with several GPUs per process:
// every byte checked, as without the flag.
func TestThreadsFlag(t *testing.T) {
	for _, variant := range []string{"default", "vccl11"} {
		lib := openFake(t, variant)
		for _, job := range [][][]int{{{0, 1, 2}}, {{0, 1}, {2, 3}}} {
			var devs []int
			for _, p := range job {
				devs = append(devs, p...)
			}
			comms, err := lib.InitAll(context.Background(), devs, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, m := range []struct{ graphs, register int }{{0, 0}, {3, 0}, {2, 2}} {
				for i := range operations {
					op := &operations[i]
					grouped := (i+k)%2 == 0
					t.Run(fmt.Sprintf("%s/%v/G%d-R%d/%s/grouped=%v", variant, job, m.graphs, m.register, op.name, grouped), func(t *testing.T) {
						runJob(t, lib, comms, job, settings{op: op, dt: nccl.Uint8, grouped: grouped, graphs: m.graphs, register: m.register, threads: true})
					})
				}
			}
			if err := closeComms(comms); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// runJob runs one operation on every process of the job at once, with the
// settings s (op, dt, grouped, perIter, graphs, register; the rest is set
// here).
func runJob(t *testing.T, lib *nccl.Library, comms []*nccl.Comm, job [][]int, s settings) {
	const count = 1024
	n := len(comms)
	op, grouped := s.op, s.grouped
	s.red, s.root, s.maxBytes = nccl.Sum, n-1, n*count*3*s.dt.Size()
	perIter := s.perIter && s.graphs == 0 // -G turns -I off, as in nccl-tests
	checked := func(inPlace bool) bool {  // -c checks byte data only
		return (s.dt == nccl.Uint8 || s.dt == nccl.Int8) && (!inPlace || op.checkInPlace)
	}
	benches := make([]*bench, len(job))
	errs := make([]error, len(job))
	first := 0
	var made sync.WaitGroup // at once: registering symmetric windows is collective
	for p, devs := range job {
		made.Add(1)
		go func(c []*nccl.Comm) {
			defer made.Done()
			benches[p], errs[p] = newBench(lib, c, s)
		}(comms[first : first+len(devs)])
		first += len(devs)
	}
	made.Wait()
	for p, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if s.threads && len(job[p]) > 1 && benches[p].th == nil {
			t.Fatal("-threads: no nccl.Threads")
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
		if want := op.symmetric && path == nccl.Native || s.register == registerSymmetric; benches[0].symmetric != want {
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
			case !perIter && st != nil:
				t.Errorf("per-iteration times without -I (or with -G)")
			case perIter && (st == nil || len(st.TimesUs) != 4):
				t.Errorf("process %d: per-iteration times %+v, want 4", p, st)
			case perIter && !slices.Equal(st.TimesUs, res[0].iter.TimesUs):
				t.Errorf("process %d: per-iteration times %v, process 0 %v: not the job's maxima", p, st.TimesUs, res[0].iter.TimesUs)
			case perIter && (st.MinUs <= 0 || st.MaxUs < st.MinUs):
				t.Errorf("process %d: per-iteration times %+v", p, st)
			}
		}
		if res[0].wrong > 0 {
			t.Errorf("in-place=%v: %d wrong", inPlace, res[0].wrong)
		}
		if (res[0].wrong >= 0) != checked(inPlace) {
			t.Errorf("in-place=%v: checked %v (%d wrong), want %v", inPlace, res[0].wrong >= 0, res[0].wrong, checked(inPlace))
		}
		if res[0].us <= 0 {
			t.Errorf("in-place=%v: time %v", inPlace, res[0].us)
		}
	}
	for _, b := range benches {
		for _, r := range b.ranks {
			if r.graph != nil {
				t.Errorf("a graph outlived its run")
			}
			if r.registered != (s.register == registerLocal) {
				t.Errorf("registered %v with -R %d", r.registered, s.register)
			}
		}
	}
	// With -G, the timed loop is graph launches: they allocate nothing.
	if b := benches[0]; len(job) == 1 && s.graphs > 0 {
		c := b.count(count)
		b.prepare(c)
		must(b.capture(func() error { return b.launch(c, false, 1) }))
		allocs := testing.AllocsPerRun(20, func() { must(b.launchGraphs(1)) })
		if allocs != 0 {
			t.Errorf("%v allocations per graph launch", allocs)
		}
		b.sync()
		must(b.destroyGraphs())
		return
	}
	// The timed loop's launches allocate nothing; VCCL's native ncclAlltoAllv
	// excepted (gonccl pins its matrices for every call). -I's event records
	// are left out: Event.Record allocates in gonccl (CUDA.OnDevice).
	if b := benches[0]; len(job) == 1 && !(op.symmetric && b.symmetric) {
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

// TestGraphCheckRunsTheGraph: in -G mode the check's run is recorded by the
// capture, not run, and runs when the graphs launch; so the check cannot pass
// on a graph that does nothing.
func TestGraphCheckRunsTheGraph(t *testing.T) {
	lib := openFake(t, "default")
	comms, err := lib.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeComms(comms)
	for _, name := range []string{"all_reduce", "all_gather", "sendrecv", "alltoall"} {
		op, _ := lookup(name)
		b, err := newBench(lib, comms, settings{op: op, dt: nccl.Uint8, red: nccl.Sum, maxBytes: 4096, graphs: 1, register: registerSymmetric})
		if err != nil {
			t.Fatal(err)
		}
		const count = 256
		in := b.writeInputs(count, false)
		must(b.capture(func() error { return b.launch(count, false, 0) }))
		if w := b.compare(in, count, false); w == 0 {
			t.Errorf("%s: right before the graph ran", name)
		}
		must(b.launchGraphs(1))
		b.sync()
		if w := b.compare(in, count, false); w != 0 {
			t.Errorf("%s: %d wrong after the graph ran", name, w)
		}
		if err := comms[0].Close(context.Background()); !errors.Is(err, nccl.ErrGraphsAlive) {
			t.Errorf("%s: Close with graphs alive: %v", name, err)
		}
		must(b.destroyGraphs())
		if w := b.checkGraph(count, false); w != 0 {
			t.Errorf("%s: checkGraph: %d wrong", name, w)
		}
		must(b.close())
	}
}

// TestGraphDot: with -graph-dot, a size's run writes each local GPU's graph
// as captured, one file per rank and placement, with its nodes' parameters.
func TestGraphDot(t *testing.T) {
	lib := openFake(t, "default")
	comms, err := lib.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeComms(comms)
	op, _ := lookup("all_reduce")
	dir := t.TempDir()
	b, err := newBench(lib, comms, settings{op: op, dt: nccl.Float32, red: nccl.Sum, maxBytes: 4096, graphs: 2, graphDot: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	for _, inPlace := range []bool{false, true} {
		if r := b.run(256, inPlace, 3, false); r.us <= 0 {
			t.Fatalf("in place %v: %v µs", inPlace, r.us)
		}
	}
	for _, place := range []string{"out-of-place", "in-place"} {
		for rank := range 2 {
			name := filepath.Join(dir, fmt.Sprintf("all_reduce-count256-%s-rank%d.dot", place, rank))
			text, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			// three captured iterations, each one of the fake NCCL's launches
			if n := strings.Count(string(text), "KERNEL"); n != 3 {
				t.Errorf("%s: %d kernel nodes, want 3:\n%s", name, n, text)
			}
			if !strings.Contains(string(text), "fakenccl launch") {
				t.Errorf("%s: no node parameters:\n%s", name, text)
			}
		}
	}
}

// TestSyncRounds: sync returns once every local stream is done, whichever
// finishes first, and allocates nothing.
func TestSyncRounds(t *testing.T) {
	lib := openFake(t, "default")
	comms, err := lib.InitAll(context.Background(), []int{0, 1, 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeComms(comms)
	op, _ := lookup("all_reduce")
	b, err := newBench(lib, comms, settings{op: op, dt: nccl.Float32, red: nccl.Sum, maxBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	// Only the last stream has work: the rounds skip the done ones.
	if err := b.ranks[2].recv.MemsetAsync(1, b.ranks[2].stream); err != nil {
		t.Fatal(err)
	}
	b.sync()
	for i, r := range b.ranks {
		if ok, err := r.stream.Query(); !ok || err != nil {
			t.Errorf("stream %d after sync: done %v, %v", i, ok, err)
		}
	}
	if n := testing.AllocsPerRun(20, func() {
		must(b.launch(256, false, 0))
		b.sync()
	}); n != 0 {
		t.Errorf("a launch and sync allocate %v times", n)
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

// benchCommand runs nccl-bench (this test binary, as main) with args on
// variant's fake NCCL and FAKECUDA_DEVICES=4; -np's processes meet at a free
// loopback port. It returns stdout, stderr and the exit code.
func benchCommand(t *testing.T, variant string, args ...string) (string, string, int) {
	t.Helper()
	return benchCommandEnv(t, nil, variant, args...)
}

// benchCommandEnv is benchCommand with env added to the process's
// environment.
func benchCommandEnv(t *testing.T, env []string, variant string, args ...string) (string, string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if os.Getenv("GONCCL_TEST_EMULATOR") != "" && slices.Contains(args, "-np") {
		// -np starts the ranks with os.Executable, which an emulated binary
		// cannot exec (exec format error): the native run covers it.
		t.Skip("-np under an emulator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := fakes.SelfCommand(ctx, args...) // through GONCCL_TEST_EMULATOR when set
	cmd.Env = append(os.Environ(), "NCCL_BENCH_AS_MAIN=1", "GONCCL_NCCL_LIB="+fakes.NCCL(t, variant),
		"GONCCL_CUDART_LIB="+fakes.CUDART(t), "FAKECUDA_DEVICES=4", "NCCL_COMM_ID="+addr)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("nccl-bench %v: timed out\n%s%s", args, &stdout, &stderr)
	}
	return stdout.String(), stderr.String(), code
}

// tableRows are the rows of a table: every field.
func tableRows(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 13 && !strings.HasPrefix(l, "#") {
			rows = append(rows, f)
		}
	}
	return rows
}

// TestCommandModes runs nccl-bench itself with -G and -R, alone with -g GPUs
// and as -np processes (captured graphs launched across processes): every
// checked result must be right, the header must name the mode as nccl-tests'
// parameter line does ("graph: N"), and -json must carry it.
func TestCommandModes(t *testing.T) {
	for _, tc := range []struct {
		variant string
		args    []string
	}{
		{"default", []string{"-op", "all_reduce", "-g", "2", "-G", "3", "-R", "2"}},
		{"v230", []string{"-op", "reduce_scatter", "-g", "3", "-G", "2", "-R", "1", "-d", "uint8"}},
		{"default", []string{"-np", "2", "-op", "all_reduce", "-G", "3", "-R", "2"}},
		{"default", []string{"-np", "2", "-op", "sendrecv", "-G", "2", "-R", "1"}},
		{"default", []string{"-np", "2", "-g", "2", "-op", "all_gather", "-G", "2"}},
		{"vccl11", []string{"-np", "2", "-op", "alltoallv", "-G", "2", "-R", "2"}},
		{"default", []string{"-np", "2", "-op", "broadcast", "-R", "2", "-r", "1"}},
		// -t: a thread per GPU, or per two, alone and in a job.
		{"default", []string{"-op", "all_reduce", "-t", "2", "-G", "3", "-R", "2"}},
		{"v230", []string{"-op", "reduce_scatter", "-t", "3", "-R", "1", "-d", "uint8"}},
		{"default", []string{"-op", "all_reduce", "-t", "2", "-g", "2"}},
		{"default", []string{"-np", "2", "-t", "2", "-op", "all_gather", "-G", "2"}},
	} {
		args := append([]string{"-d", "int8", "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "-c", "1"}, tc.args...)
		t.Run(tc.variant+"/"+strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := benchCommand(t, tc.variant, args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
			g, r, threads, gpus, procs := "0", "0", 1, 1, 1
			for i, a := range args {
				switch a {
				case "-G":
					g = args[i+1]
				case "-R":
					r = args[i+1]
				case "-t":
					threads, _ = strconv.Atoi(args[i+1])
				case "-g":
					gpus, _ = strconv.Atoi(args[i+1])
				case "-np":
					procs, _ = strconv.Atoi(args[i+1])
				}
			}
			if want := "graph: " + g + " local_register: " + r; !strings.Contains(out, want) {
				t.Errorf("the header does not say %q:\n%s", want, out)
			}
			want := fmt.Sprintf("# nranks %d: %d process(es) × %d GPU(s)", procs*gpus, procs, gpus)
			if threads > 1 {
				want = fmt.Sprintf("# nranks %d: %d process(es) × %d thread(s) × %d GPU(s)", procs*threads*gpus, procs, threads, gpus)
			}
			if !strings.Contains(out, want) {
				t.Errorf("the header does not say %q:\n%s", want, out)
			}
			rows := tableRows(out)
			if len(rows) < 4 { // alltoallv has no 8-byte row (16-byte blocks)
				t.Fatalf("%d rows:\n%s", len(rows), out)
			}
			for _, f := range rows {
				for _, i := range []int{8, 12} {
					if f[i] != "0" && f[i] != "N/A" || i == 8 && f[i] != "0" {
						t.Errorf("wrong results: %v", f)
					}
				}
			}
			jout, errOut, code := benchCommand(t, tc.variant, append(args, "-json")...)
			var doc struct {
				Graph    *int   `json:"graph"`
				Register int    `json:"local_register"`
				Path     string `json:"path"`
				Ranks    int    `json:"ranks"`
				Threads  int    `json:"threads_per_process"`
				PerProc  int    `json:"gpus_per_process"`
				Rows     []row
			}
			if code != 0 || json.Unmarshal([]byte(jout), &doc) != nil {
				t.Fatalf("-json: exit %d\n%s%s", code, jout, errOut)
			}
			if doc.Ranks != procs*threads*gpus || doc.Threads != threads || doc.PerProc != threads*gpus {
				t.Errorf("-json: ranks %d, threads_per_process %d, gpus_per_process %d; want %d, %d, %d",
					doc.Ranks, doc.Threads, doc.PerProc, procs*threads*gpus, threads, threads*gpus)
			}
			if doc.Graph == nil || strconv.Itoa(*doc.Graph) != g || strconv.Itoa(doc.Register) != r || len(doc.Rows) != len(rows) {
				t.Errorf("-json: graph %v, local_register %d, %d rows:\n%s", doc.Graph, doc.Register, len(doc.Rows), jout)
			}
			for _, row := range doc.Rows {
				if row.OutWrong != 0 || row.InWrong > 0 {
					t.Errorf("-json: wrong results %+v", row)
				}
			}
			// VCCL's native ncclAlltoAllv aborts the process when captured:
			// under -G the exchange runs grouped, and the report says so.
			if slices.Contains(args, "alltoallv") && g != "0" && doc.Path != "grouped" {
				t.Errorf("-json: path %q for a captured alltoallv, want grouped", doc.Path)
			}
		})
	}
}

// TestCommandCPUTime: -C 1 prints nccl-tests' cputime, the host's time of the
// launches, in the time columns under a "cputime" heading; -json carries both
// times. With every stream item taking 2 ms on the fake GPU, the launches
// return long before the streams drain: cputime far below time, and busbw
// still from the full time.
func TestCommandCPUTime(t *testing.T) {
	for _, extra := range [][]string{{"-g", "2"}, {"-np", "2"}} {
		args := append([]string{"-op", "all_reduce", "-b", "1M", "-e", "4M", "-f", "4", "-n", "5", "-w", "1", "-c", "0"}, extra...)
		t.Run(strings.Join(extra, " "), func(t *testing.T) {
			env := []string{"FAKECUDA_DELAY_US=2000"}
			jout, errOut, code := benchCommandEnv(t, env, "default", append(args, "-json")...)
			var doc struct {
				Rows []row
			}
			if code != 0 || json.Unmarshal([]byte(jout), &doc) != nil || len(doc.Rows) != 2 {
				t.Fatalf("-json: exit %d\n%s%s", code, jout, errOut)
			}
			for _, r := range doc.Rows {
				if r.OutTimeUs < 2000 || r.OutCPUUs <= 0 || r.OutCPUUs > r.OutTimeUs/4 || r.InCPUUs <= 0 || r.InCPUUs > r.InTimeUs/4 {
					t.Errorf("size %d: time %.1f / %.1f us, cputime %.1f / %.1f us: want times of 2 ms or more and cputimes far below",
						r.Size, r.OutTimeUs, r.InTimeUs, r.OutCPUUs, r.InCPUUs)
				}
			}
			out, errOut, code := benchCommandEnv(t, env, "default", append(args, "-C", "1")...)
			if code != 0 || !strings.Contains(out, "cputime") {
				t.Fatalf("-C 1: exit %d, no cputime heading\n%s%s", code, out, errOut)
			}
			rows := tableRows(out)
			if len(rows) != 2 {
				t.Fatalf("-C 1: %d rows\n%s", len(rows), out)
			}
			for _, f := range rows {
				us, _ := strconv.ParseFloat(f[5], 64)
				busbw, _ := strconv.ParseFloat(f[7], 64)
				size, _ := strconv.ParseFloat(f[0], 64)
				// busbw of a 2-rank all-reduce is size/time; from a 2 ms time, at most size/2000 B/µs.
				if us <= 0 || us > 500 || busbw <= 0 || busbw > size/2000/1e3*1.01 {
					t.Errorf("-C 1 row %v: cputime %.2f us, busbw %.4f GB/s: want the host's time and busbw from the full time", f, us, busbw)
				}
			}
		})
	}
}

// TestCommandFindsWrongResults: a library returning wrong results (the fake
// flipping a byte of every collective of 4 KiB or more) makes nccl-bench count
// the wrong elements in those rows only, say FAILED in nccl-tests' footer with
// the number of such runs, and exit 1 in every process; without it the
// footer says 0 OK. The footer was once printed as "0 OK" whatever the check
// found.
func TestCommandFindsWrongResults(t *testing.T) {
	for _, args := range [][]string{
		{"-g", "2"},
		{"-np", "2"},
		{"-g", "2", "-G", "2"},
	} {
		args := append([]string{"-op", "all_reduce", "-d", "uint8", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-c", "1"}, args...)
		t.Run(strings.Join(args[16:], " "), func(t *testing.T) {
			out, errOut, code := benchCommandEnv(t, []string{"FAKENCCL_CORRUPT_BYTES=4096"}, "default", args...)
			if code != 1 || !strings.Contains(errOut, "checked runs found wrong elements") {
				t.Fatalf("exit %d, want 1 and the reason\n%s%s", code, out, errOut)
			}
			rows := tableRows(out)
			failed := 0
			for _, f := range rows {
				size, _ := strconv.Atoi(f[0])
				for _, i := range []int{8, 12} {
					w, _ := strconv.Atoi(f[i])
					if size >= 4096 && w == 0 || size < 4096 && w != 0 {
						t.Errorf("size %d: %d wrong in column %d", size, w, i)
					}
					if w > 0 {
						failed++
					}
				}
			}
			if failed == 0 || !strings.Contains(out, fmt.Sprintf("# Out of bounds values : %d FAILED", failed)) {
				t.Errorf("want the footer to count %d failed runs:\n%s", failed, out)
			}
			out, errOut, code = benchCommand(t, "default", args...)
			if code != 0 || !strings.Contains(out, "# Out of bounds values : 0 OK") {
				t.Errorf("unharmed run: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestWrongAwk checks scripts/bench-wrong.awk, the GPU scripts' verdict on a
// log of nccl-bench: rows found where a library's own output precedes them on
// their line (VCCL prints debug dumps to stdout, flushed in blocks), every
// wrong element counted, no row a failure.
func TestWrongAwk(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Skip("no awk")
	}
	verdict := func(log string) (string, bool) {
		f := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(f, []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(awk, "-f", "../../scripts/bench-wrong.awk", f).Output()
		if _, failed := err.(*exec.ExitError); err != nil && !failed {
			t.Fatal(err)
		}
		return string(out), err == nil
	}
	// glue puts junk before every other row, with no newline between.
	glue := func(out string) string {
		lines := strings.Split(out, "\n")
		for i, l := range lines {
			if f := strings.Fields(l); len(f) >= 13 && !strings.HasPrefix(l, "#") && i%2 == 0 {
				lines[i] = "      srcBuff=0x7f69b9900000 srcWinOffset=12272" + l
			}
		}
		return strings.Join(lines, "\n")
	}
	args := []string{"-op", "all_reduce", "-d", "uint8", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "-g", "2"}
	good, _, _ := benchCommand(t, "default", args...)
	n := len(tableRows(good))
	if got, ok := verdict(glue(good)); !ok || got != fmt.Sprintf("%d sizes, 0 wrong", n) {
		t.Errorf("right results: %q, ok %v; want %d sizes, 0 wrong", got, ok, n)
	}
	bad, _, _ := benchCommandEnv(t, []string{"FAKENCCL_CORRUPT_BYTES=4096"}, "default", args...)
	if got, ok := verdict(glue(bad)); ok || !strings.HasPrefix(got, fmt.Sprintf("%d sizes, ", n)) || strings.HasSuffix(got, " 0 wrong") {
		t.Errorf("wrong results: %q, ok %v", got, ok)
	}
	header := good[:strings.Index(good, "# Out of bounds")]
	if got, ok := verdict(header[:strings.LastIndex(header, "#")]); ok {
		t.Errorf("a log with no rows passed: %q", got)
	}
}

// TestCommandRefusals: a mode the library or the flags cannot give stops
// nccl-bench with exit 1 and an error naming what is missing (the library's
// *UnsupportedError), not a crash; -I with -G is turned off with nccl-tests'
// warning.
func TestCommandRefusals(t *testing.T) {
	for _, tc := range []struct {
		variant, want string
		args          []string
	}{
		{"old", "-R 2: ncclCommWindowRegister not supported by ", []string{"-R", "2"}},
		{"old", "(2.14.3; requires >= 2.27)", []string{"-R", "2", "-G", "2"}},
		{"old", "-R 1: ncclCommRegister not supported by ", []string{"-R", "1"}},
		{"old", "(2.14.3; requires >= 2.19)", []string{"-np", "2", "-R", "1"}},
		{"default", "bad -R 3", []string{"-R", "3"}},
		{"default", "bad -G", []string{"-G", "-1"}},
	} {
		t.Run(tc.variant+"/"+strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := benchCommand(t, tc.variant, append([]string{"-b", "8", "-e", "1K", "-n", "2", "-g", "2"}, tc.args...)...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, want 1 with %q:\n%s%s", code, tc.want, out, errOut)
			}
		})
	}
	out, errOut, code := benchCommand(t, "default", "-b", "8", "-e", "1K", "-n", "2", "-G", "2", "-I", "1", "-d", "int8")
	if code != 0 || !strings.Contains(errOut, "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.") ||
		len(tableRows(out)) != 8 || len(tableRows(out)[0]) != 13 {
		t.Errorf("-G 2 -I 1: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestCommandReplot: -plot with -replot draws saved outputs of both programs
// without a library: one line per file, nccl-tests' dashed in the colour of
// the nccl-bench line of the same mode, each point where the table puts it;
// a spec without label=file is refused.
func TestCommandReplot(t *testing.T) {
	dir := t.TempDir()
	save := func(name string, rows ...string) string {
		p := filepath.Join(dir, name)
		text := "# nccl-tests version 2.19.6\n#       size  count type redop root time algbw busbw #wrong\n" + strings.Join(rows, "\n") + "\n"
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bench := save("bench.txt", "  1024  256  float  sum  -1  10.0  0.10  0.15  0", "  1048576  262144  float  sum  -1  30.0  34.9  52.4  0")
	tests := save("tests.txt", "  1024  256  float  sum  -1  10.5  0.09  0.14  0", "  1048576  262144  float  sum  -1  31.0  33.8  50.7  0")
	svgFile := filepath.Join(dir, "chart.svg")
	out, errOut, code := benchCommand(t, "default", "-plot", svgFile, "-title", "replot test",
		"-replot", "nccl-bench -G="+bench+",nccl-tests -G="+tests)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	b, err := os.ReadFile(svgFile)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	lines := regexp.MustCompile(`<polyline fill="none" stroke="([^"]+)" stroke-width="2"( stroke-dasharray="6,4")? points="([^"]+)"/>`).FindAllStringSubmatch(svg, -1)
	if len(lines) != 2 || !strings.Contains(svg, "replot test") || !strings.Contains(svg, "nccl-bench -G") || !strings.Contains(svg, "nccl-tests -G") {
		t.Fatalf("want two labelled lines under the title:\n%s", svg)
	}
	if lines[0][1] != lines[1][1] || lines[0][2] != "" || lines[1][2] == "" {
		t.Errorf("want one colour, nccl-tests dashed: %q %q / %q %q", lines[0][1], lines[0][2], lines[1][1], lines[1][2])
	}
	// 2 points each, the higher busbw of nccl-bench at 1 MiB drawn higher (a smaller y).
	y := func(pts string) []float64 {
		var ys []float64
		for _, p := range strings.Fields(pts) {
			_, yv, _ := strings.Cut(p, ",")
			v, err := strconv.ParseFloat(yv, 64)
			if err != nil {
				t.Fatal(err)
			}
			ys = append(ys, v)
		}
		return ys
	}
	yb, yt := y(lines[0][3]), y(lines[1][3])
	if len(yb) != 2 || len(yt) != 2 || !(yb[1] < yt[1]) || !(yb[1] < yb[0]) {
		t.Errorf("points: nccl-bench %v, nccl-tests %v", yb, yt)
	}
	if _, errOut, code := benchCommand(t, "default", "-plot", svgFile, "-replot", bench); code == 0 || !strings.Contains(errOut, "label=file") {
		t.Errorf("-replot without a label: exit %d, %s", code, errOut)
	}
}

// TestCommandBarrierBeforeWarmUp: with one process per GPU, nccl-bench's
// barrier (an NCCL all-reduce of one float64) runs once before the warm-up,
// where nccl-tests calls MPI_Barrier. The first all-reduce of that kind
// connects NCCL's paths for it; made at the first size's barrier instead, it
// leaves that size slower than nccl-tests' (docs/performance.md, "The first
// size of a sweep"). NCCL's COLL lines (NCCL_DEBUG=INFO,
// NCCL_DEBUG_SUBSYS=COLL), which the fake writes as NCCL does, give each
// process's operations in order; other subsystem lists write none.
func TestCommandBarrierBeforeWarmUp(t *testing.T) {
	first := regexp.MustCompile(`^\S+:\d+:\d+ \[\d\] NCCL INFO AllReduce: opCount 0 sendbuff 0x[0-9a-f]+ recvbuff 0x[0-9a-f]+ count 1 datatype 8 op 0 root 0 comm 0x[0-9a-f]+ \[nranks=2\] stream 0x[0-9a-f]+$`)
	for _, c := range []struct{ op, subsys, warm string }{
		{"all_reduce", "COLL", "AllReduce"},
		{"alltoall", "^INIT,ENV", "AlltoAll"},
		{"all_reduce", "INIT,ENV", ""},
	} {
		t.Run(c.op+"/"+c.subsys, func(t *testing.T) { barrierFirst(t, first, c.op, c.subsys, c.warm) })
	}
}

// barrierFirst runs one case of TestCommandBarrierBeforeWarmUp (a subtest:
// -np is skipped under an emulator, as in TestCommandModes).
func barrierFirst(t *testing.T, first *regexp.Regexp, op, subsys, warm string) {
	dir := t.TempDir()
	env := []string{"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=" + subsys, "NCCL_DEBUG_FILE=" + filepath.Join(dir, "nccl.%h.%p")}
	out, stderr, code := benchCommandEnv(t, env, "default", "-np", "2", "-op", op, "-R", "2", "-G", "2",
		"-b", "8", "-e", "64", "-f", "2", "-n", "2", "-w", "1", "-c", "0")
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s%s", op, code, out, stderr)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "nccl.*"))
	if warm == "" {
		if len(logs) != 0 {
			t.Errorf("NCCL_DEBUG_SUBSYS=%s: %d COLL logs written, want none", subsys, len(logs))
		}
		return
	}
	if len(logs) != 2 {
		t.Fatalf("%s: %d COLL logs, want one per process: %v", op, len(logs), logs)
	}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if !first.MatchString(lines[0]) {
			t.Errorf("%s, %s: the first operation is not the barrier's all-reduce of one float64:\n%s", op, filepath.Base(p), lines[0])
		}
		if len(lines) < 2 || first.MatchString(lines[1]) || !strings.Contains(lines[1], " NCCL INFO "+warm+": opCount 0 ") {
			t.Errorf("%s, %s: the second operation is not the warm-up's %s:\n%s", op, filepath.Base(p), warm, strings.Join(lines[:min(3, len(lines))], "\n"))
		}
	}
}

// TestCommandRanksCallOnTheirDevice: each process of -np 2 calls NCCL from
// threads whose current CUDA device is its own GPU. NCCL's COLL line carries
// the calling thread's device; without the thread-device guard
// (internal/capi/threaddevice.go) the process of GPU 1 shows [0] on every
// line, and NCCL's restore of that device leaves a context on GPU 0 per
// process (TestGPUNoContextOnDeviceZero measures it). A subtest: -np is
// skipped under an emulator.
func TestCommandRanksCallOnTheirDevice(t *testing.T) {
	t.Run("np2", func(t *testing.T) {
		dir := t.TempDir()
		env := []string{"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=COLL", "NCCL_DEBUG_FILE=" + filepath.Join(dir, "nccl.%h.%p")}
		out, stderr, code := benchCommandEnv(t, env, "default", "-np", "2", "-op", "all_reduce",
			"-b", "8", "-e", "64", "-f", "2", "-n", "4", "-w", "2", "-c", "1")
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, stderr)
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "nccl.*"))
		dev := regexp.MustCompile(`^\S+:\d+:\d+ \[(\d+)\] NCCL INFO `)
		seen := map[string]bool{}
		for _, p := range logs {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			devs := map[string]int{}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if m := dev.FindStringSubmatch(line); m != nil {
					devs[m[1]]++
				}
			}
			if len(devs) != 1 {
				t.Errorf("%s: operations called from threads on devices %v, want one device", filepath.Base(p), devs)
			}
			for d := range devs {
				seen[d] = true
			}
		}
		if len(logs) != 2 || !seen["0"] || !seen["1"] {
			t.Errorf("%d logs, calling devices %v: want one process on device 0 and one on device 1", len(logs), seen)
		}
	})
}

// TestHeaderNamesLibraries: the header says which NCCL and which CUDA runtime
// were loaded, from which file and found how, and -json carries the files and
// the runtime's version (the fake runtime says 12.4).
func TestHeaderNamesLibraries(t *testing.T) {
	args := []string{"-op", "all_reduce", "-g", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "1", "-c", "0"}
	out, errOut, code := benchCommand(t, "default", args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// The variables name the fakes' folders; the header names the files.
	lib, rt := fakes.NCCL(t, "default")+"/libnccl.so.2", fakes.CUDART(t)+"/libcudart.so.12"
	for _, want := range []string{
		"# nccl-bench (gonccl) all_reduce, NCCL 2.28.3 from " + lib + " (GONCCL_NCCL_LIB)\n",
		"# CUDA runtime 12.4 from " + rt + " (GONCCL_CUDART_LIB)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the header does not say %q:\n%s", want, out)
		}
	}
	jout, errOut, code := benchCommand(t, "default", append(args, "-json")...)
	if code != 0 {
		t.Fatalf("-json: exit %d\n%s%s", code, jout, errOut)
	}
	var doc struct {
		NCCLPath   string `json:"nccl_path"`
		CUDART     string `json:"cudart"`
		CUDARTPath string `json:"cudart_path"`
	}
	if err := json.Unmarshal([]byte(jout), &doc); err != nil {
		t.Fatalf("-json: %v\n%s", err, jout)
	}
	if doc.NCCLPath != lib || doc.CUDART != "12.4" || doc.CUDARTPath != rt {
		t.Errorf("-json: nccl_path %q, cudart %q, cudart_path %q; want %q, 12.4, %q", doc.NCCLPath, doc.CUDART, doc.CUDARTPath, lib, rt)
	}
}
