package main

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsMatchData renders every marked table and chart from docs/results
// and fails where docs/performance.md, docs/call-cost.md or a chart differs:
// the documents cannot drift from the data.
func TestDocsMatchData(t *testing.T) {
	diffs, err := render("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
	if len(diffs) > 0 {
		t.Log("run `go run ./cmd/nccl-results` from the repository's root and commit what it writes")
	}
}

const testsSample = `# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 4(factor) warmup iters: 10 iters: 40 agg iters: 1 validation: 0 graph: 10 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid  11889 on         vm device  0 [0000:00:06] NVIDIA H200
#  Rank  1 Group  0 Pid  11890 on         vm device  1 [0000:00:07] NVIDIA H200
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
           8             2     float     sum      -1     3.63    0.00    0.00    N/A     3.57    0.00    0.00    N/A
        1024           256     float     sum      -1     4.10    0.25    0.25      0     4.20    0.24    0.24      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.12345 
#
# Collective test concluded: all_reduce_perf
`

func TestParseNCCLTests(t *testing.T) {
	runs, err := Parse(testsSample)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	r := runs[0]
	if r.Program != "nccl-tests" || r.ProgramVersion != "2.19.6" || r.NCCL != "2.28.3" || r.Op != "all_reduce" {
		t.Errorf("header: %+v", r)
	}
	if r.Ranks != 2 || r.Processes != 2 || r.Threads != 1 || r.GPUsPerThread != 1 || r.Layout() != "-np 2" {
		t.Errorf("layout: ranks %d processes %d threads %d gpus %d (%s)", r.Ranks, r.Processes, r.Threads, r.GPUsPerThread, r.Layout())
	}
	if r.Iters != 40 || r.Warmup != 10 || r.Graph != 10 || r.Mode() != "-G 10" {
		t.Errorf("parameters: iters %d warmup %d graph %d", r.Iters, r.Warmup, r.Graph)
	}
	if r.AvgBusBW != 0.12345 || r.OutOfBounds == nil || !r.OutOfBounds.Okay {
		t.Errorf("footer: %v %+v", r.AvgBusBW, r.OutOfBounds)
	}
	want := []Row{
		{Size: 8, Count: 2, Type: "float", Op: "sum", Root: -1, OutTimeUs: 3.63, OutWrong: -1, InTimeUs: 3.57, InWrong: -1},
		{Size: 1024, Count: 256, Type: "float", Op: "sum", Root: -1, OutTimeUs: 4.10, OutAlgBW: 0.25, OutBusBW: 0.25, InTimeUs: 4.20, InAlgBW: 0.24, InBusBW: 0.24},
	}
	if len(r.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(r.Rows), len(want))
	}
	for i := range want {
		if !rowEqual(r.Rows[i], want[i]) {
			t.Errorf("row %d: %+v, want %+v", i, r.Rows[i], want[i])
		}
	}
}

const benchSample = `# nccl-bench (gonccl) alltoallv, NCCL 2.29.2 from /tmp/vccl/build/lib/libnccl.so.2.29.2 (GONCCL_NCCL_LIB)
# CUDA runtime 13.0 from /usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.96 (system loader)
# nranks 8: 2 process(es) × 2 thread(s) × 2 GPU(s), launcher self; warmup iters: 5 iters: 40 validation: 1 graph: 0 local_register: 2
# Buffers: ncclMemAlloc+ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), registration symmetric (-R 2)
#
#        size        count     type  redop   root        time    algbw    busbw #wrong        time    algbw    busbw #wrong
#         (B)   (elements)                               (us)   (GB/s)   (GB/s)               (us)   (GB/s)   (GB/s)       
GLT false 0 226.985
1024           64    float   none     -1       51.83     0.02     0.01      0         N/A      N/A      N/A    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.01 
#
# nccl-bench (gonccl) all_reduce, NCCL 2.28.3 from /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3
# nranks 4: 1 process(es) × 4 GPU(s), launcher none; warmup iters: 10 iters: 40 validation: 0 graph: 10 local_register: 0
#
            8            2    float    sum     -1        3.85     0.00     0.00    N/A        3.97     0.00     0.00    N/A
# Out of bounds values : 0 OK
`

func TestParseNCCLBench(t *testing.T) {
	runs, err := Parse(benchSample)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	a, b := runs[0], runs[1]
	if a.Program != "nccl-bench" || a.Op != "alltoallv" || a.NCCL != "2.29.2" || a.NCCLPath != "/tmp/vccl/build/lib/libnccl.so.2.29.2" || a.CUDART != "13.0" {
		t.Errorf("header: %+v", a)
	}
	if a.Ranks != 8 || a.Processes != 2 || a.Threads != 2 || a.GPUsPerThread != 2 || a.GPUsPerProcess != 4 || a.Layout() != "-np 2 -t 2 -g 2" {
		t.Errorf("layout: %+v (%s)", a, a.Layout())
	}
	if a.LocalRegister != 2 || a.Register != "symmetric" || a.Validation != 1 || a.Mode() != "-R 2" {
		t.Errorf("mode: %+v", a)
	}
	if len(a.Rows) != 1 || a.Rows[0].OutTimeUs != 51.83 || a.Rows[0].OutWrong != 0 || !a.Rows[0].InSkipped {
		t.Errorf("rows: %+v", a.Rows)
	}
	if b.Op != "all_reduce" || b.Layout() != "-g 4" || b.Mode() != "-G 10" || len(b.Rows) != 1 || b.Rows[0].InTimeUs != 3.97 {
		t.Errorf("second run: %+v", b)
	}
}

// nccl-bench -threads says so in its header: the layout carries it.
func TestParseThreads(t *testing.T) {
	text := `# nccl-bench (gonccl) all_reduce, NCCL 2.28.3 from /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 (system loader)
# nranks 2: 1 process(es) × 2 GPU(s), launcher none; warmup iters: 20 iters: 100 validation: 0 graph: 20 local_register: 2
# -threads: each GPU's launches from a thread of its own (nccl.Threads), one call for all; GOMAXPROCS 32
#
#        size        count     type  redop   root        time    algbw    busbw #wrong        time    algbw    busbw #wrong
            8            2    float    sum     -1        3.41     0.00     0.00    N/A        3.38     0.00     0.00    N/A
# Out of bounds values : 0 OK
`
	runs, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || !runs[0].GPUThreads || runs[0].Layout() != "-g 2 -threads" || runs[0].Mode() != "-R 2 -G 20" {
		t.Fatalf("runs: %+v", runs)
	}
	runs, _ = Parse(strings.Replace(text, "# -threads:", "# other:", 1))
	if len(runs) != 1 || runs[0].GPUThreads || runs[0].Layout() != "-g 2" {
		t.Fatalf("without -threads: %+v", runs)
	}
}

func TestParseJSON(t *testing.T) {
	doc := `{"program":"nccl-bench","op":"all_reduce","nccl":"2.28.3","ranks":2,"processes":2,"threads_per_process":1,"gpus_per_thread":1,"gpus_per_process":1,` +
		`"rows":[{"size":8,"count":2,"type":"float","redop":"sum","root":-1,"out_of_place_time_us":3.7,"out_of_place_cpu_time_us":2.1,"out_of_place_algbw":0,` +
		`"out_of_place_busbw":0,"out_of_place_wrong":0,"out_of_place_per_iter":{"min_us":3.5},"in_place_time_us":3.6,"in_place_cpu_time_us":2,"in_place_algbw":0,` +
		`"in_place_busbw":0,"in_place_wrong":0}],"avg_busbw":0,"warmup_iters":1,"iterations":20,"validation":1,"graph":5,"local_register":2,"report_cputime":false}`
	runs, err := Parse(doc + "\n" + doc + "\n")
	if err != nil || len(runs) != 2 {
		t.Fatalf("%v, %d runs", err, len(runs))
	}
	r := runs[1]
	if r.Program != "nccl-bench" || r.Layout() != "-np 2" || r.Mode() != "-R 2 -G 5" || r.Rows[0].OutCPUUs != 2.1 || string(r.Rows[0].OutIter) != `{"min_us":3.5}` {
		t.Errorf("%+v", r)
	}
}

const modesSample = `## symgraph (-R 2 -G 10) all_reduce, 4 processes under mpirun, 5 alternating runs each, out of place
| size (B) | nccl-tests min / median us | nccl-bench min / median us | diff of medians | diff of minima | busbw ratio (medians) | spread tests / bench |
|---:|---:|---:|---:|---:|---:|---:|
| 8 | 3.72 / 3.78 | 3.70 / 3.82 | +0.04 | -0.02 | 0.990 | 2.48 / 4.51 |
| 2097152 | 30.61 / 30.68 | 30.36 / 30.50 | -0.18 | -0.25 | 1.006 | 0.12 / 0.25 |
Each run at the first size, in run order: nccl-tests 3.76 3.65 3.79 3.74 3.77; nccl-bench 3.80 3.68 3.93 3.69 3.85

## plain () gather, -g 4, 2 alternating runs each, out of place
| size (B) | nccl-tests min / median us | nccl-bench min / median us | diff of medians | diff of minima | busbw ratio (medians) | spread tests / bench |
|---:|---:|---:|---:|---:|---:|---:|
| 8388608 | 40.00 / 40.00 | 41.00 / 42.00 | +2.00 | +1.00 | 0.952 | 0.00 / 2.00 |
`

func TestParseModes(t *testing.T) {
	runs, err := Parse(modesSample)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4 (two tables, two programs)", len(runs))
	}
	tests, bench, gather := runs[0], runs[1], runs[3]
	if tests.Program != "nccl-tests" || bench.Program != "nccl-bench" || bench.Statistic != "median" || bench.OfRuns != 5 {
		t.Errorf("programs: %+v %+v", tests, bench)
	}
	if bench.Layout() != "-np 4" || bench.Mode() != "-R 2 -G 10" || bench.Ranks != 4 {
		t.Errorf("layout %s mode %s ranks %d", bench.Layout(), bench.Mode(), bench.Ranks)
	}
	if us(&tests, 8) != 3.78 || us(&bench, 8) != 3.82 || us(&bench, 2097152) != 30.50 {
		t.Errorf("medians: %v %v %v", us(&tests, 8), us(&bench, 8), us(&bench, 2097152))
	}
	// busbw as nccl-bench works it out: size / time, times 2(n-1)/n for all_reduce.
	if w := bench.row(2097152); w.Count != 524288 || w.OutBusBW != round2(2097152/30.50/1e3*1.5) {
		t.Errorf("derived row: %+v", w)
	}
	if gather.Layout() != "-g 4" || gather.Mode() != "plain" || gather.Op != "gather" {
		t.Errorf("second table: %s %s %s", gather.Op, gather.Layout(), gather.Mode())
	}
	if w := gather.Rows[0]; w.Count != 8388608/4/4 || w.Root != 0 || w.Op != "none" || w.OutBusBW != round2(8388608/42.0/1e3*0.75) {
		t.Errorf("gather row: %+v", w)
	}
}

const nonblockingSample = `round 1 np 4
C np 4 n 2 blocking: 9.6 us per all-reduce launched plainly (mean of ranks, 2400 iters)
Go np 4 n 16384 -nonblocking: 72.1 us (mean of 4 ranks)
bench np 4 n 2 -nonblocking: 86.83 us
C nccl version 22803, run 2
Go np 2 n 2 -nonblocking: 63.1 us per all-reduce launched plainly (mean of 2 ranks), run 2
nccl-bench np 2 65536 B NCCL_COMM_BLOCKING=1: 10.62 us per all-reduce (mean of ranks, out of place)
nccl-bench np 2 8 B NCCL_COMM_BLOCKING=0: X us per all-reduce (mean of ranks, out of place)
Go np 4 n 2 blocking: 8.5 µs per all-reduce from the graph, 30.6 µs launched plainly
`

func TestParseNonblocking(t *testing.T) {
	runs, err := Parse(nonblockingSample)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		prog             string
		ranks, size, rnd int
		blocking         bool
		us               float64
	}
	wants := []want{
		{"nonblocking-ref.c", 4, 8, 1, true, 9.6},
		{"nonblocking-go", 4, 65536, 1, false, 72.1},
		{"nccl-bench", 4, 8, 1, false, 86.83},
		{"nonblocking-go", 2, 8, 2, false, 63.1},
		{"nccl-bench", 2, 65536, 1, true, 10.62}, // the round of the last "round" line
	}
	if len(runs) != len(wants) {
		t.Fatalf("%d runs, want %d: %+v", len(runs), len(wants), runs)
	}
	for i, w := range wants {
		r := runs[i]
		got := want{r.Program, r.Ranks, r.Rows[0].Size, r.Round, *r.Blocking, r.Rows[0].OutTimeUs}
		if got != w {
			t.Errorf("run %d: %+v, want %+v", i, got, w)
		}
	}
}

func TestImportFields(t *testing.T) {
	r := Run{Program: "nccl-tests", Graph: 10}
	fromName("symgraph-all_reduce-tests-3.txt", &r)
	if r.LocalRegister != 2 || r.Round != 3 || r.Mode() != "-R 2 -G 10" {
		t.Errorf("from the name: %+v", r)
	}
	if err := setFields(&r, []string{"machine=4 × H200", "host=A", "round=7", "measured=2026-11-27"}); err != nil {
		t.Fatal(err)
	}
	if r.Machine != "4 × H200" || r.Host != "A" || r.Round != 7 || r.Measured != "2026-11-27" || r.Graph != 10 {
		t.Errorf("set: %+v", r)
	}
	if err := setFields(&r, []string{"hots=A"}); err == nil {
		t.Error("an unknown field was set")
	}
	path := filepath.Join(t.TempDir(), "x.json")
	if err := WriteRuns(path, []Run{r, r}); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRuns(path)
	if err != nil || len(back) != 2 || back[1].Host != "A" {
		t.Errorf("read back: %v %+v", err, back)
	}
}

func TestFill(t *testing.T) {
	made := map[string]string{"a": "| x |\n"}
	used := map[string]int{}
	got, err := fill("intro\n<!-- results: a -->\nold\nlines\n<!-- end -->\nafter\n", made, used)
	if err != nil || got != "intro\n<!-- results: a -->\n| x |\n<!-- end -->\nafter\n" || used["a"] != 1 {
		t.Errorf("fill: %q %v", got, err)
	}
	if _, err := fill("<!-- results: b -->\n<!-- end -->\n", made, used); err == nil {
		t.Error("an unknown block was filled")
	}
	if _, err := fill("<!-- results: a -->\nno end\n", made, used); err == nil {
		t.Error("a block without its end was filled")
	}
}

const benchText = `machine: a VM
commit: abc1234
goos: linux
pkg: github.com/gonccl/nccl/internal/cgobench
BenchmarkNoopGonccl-2      	22554256	        50.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkNoopCgo-2         	20631783	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkNoopGonccl-2      	22554256	        60.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkNoopCgo-2         	20631783	        50.00 ns/op	       0 B/op	       0 allocs/op
host: 2
BenchmarkGroupScalingGonccl/gpus=2-2 	 1614513	       739.3 ns/op
`

func TestParseBench(t *testing.T) {
	sets, err := parseBench("x.txt", bufio.NewScanner(strings.NewReader(benchText)))
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 {
		t.Fatalf("%d sets, want 2", len(sets))
	}
	s := sets[0]
	if s.Config["machine"] != "a VM" || s.Config["commit"] != "abc1234" || s.rounds() != 2 {
		t.Errorf("config %v, %d rounds", s.Config, s.rounds())
	}
	if r := s.ratios("NoopGonccl", "NoopCgo"); len(r) != 2 || r[0] != 1.25 || r[1] != 1.2 {
		t.Errorf("ratios %v", r)
	}
	if sets[1].label() != "a VM, host 2" || sets[1].NsOp["GroupScalingGonccl/gpus=2"][0] != 739.3 {
		t.Errorf("second set: %s %v", sets[1].label(), sets[1].NsOp)
	}
}

// TestNoLogsUnderDocs: docs/ holds documents and data, no logs, archives or
// patches.
func TestNoLogsUnderDocs(t *testing.T) {
	err := filepath.Walk("../../docs", func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".md", ".json", ".svg", ".png":
		case ".txt":
			if filepath.Base(filepath.Dir(path)) != "results" {
				t.Errorf("%s: a text file outside docs/results", path)
			}
		default:
			t.Errorf("%s: docs/ holds documents and data only", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func rowEqual(a, b Row) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return a.Size == b.Size && a.Count == b.Count && a.Type == b.Type && a.Op == b.Op && a.Root == b.Root &&
		eq(a.OutTimeUs, b.OutTimeUs) && eq(a.OutAlgBW, b.OutAlgBW) && eq(a.OutBusBW, b.OutBusBW) && a.OutWrong == b.OutWrong &&
		eq(a.InTimeUs, b.InTimeUs) && eq(a.InAlgBW, b.InAlgBW) && eq(a.InBusBW, b.InBusBW) && a.InWrong == b.InWrong && a.InSkipped == b.InSkipped
}
