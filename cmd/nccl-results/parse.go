package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Parse reads the runs of a log. It knows four forms, told apart by their
// lines:
//   - nccl-bench's -json documents, one after the other;
//   - the tables of nccl-bench and nccl-tests (the same columns), with their
//     header lines; a log may hold several, one after the other;
//   - the summary of scripts/bench-modes.sh: a table per mode and operation
//     of each program's median over its runs, which becomes one run per
//     program with "statistic": "median";
//   - the lines of scripts/bench-nonblocking.sh: one run per line.
func Parse(text string) ([]Run, error) {
	switch {
	case strings.HasPrefix(strings.TrimSpace(text), "{"):
		return parseJSON(text)
	case strings.Contains(text, "| nccl-tests min / median us |"):
		return parseModes(text)
	case nonblockingLine.MatchString(text) || benchBlockingLine.MatchString(text):
		return parseNonblocking(text)
	}
	return parseTables(text)
}

var (
	benchTitle  = regexp.MustCompile(`^# nccl-bench \(gonccl\) (\S+), NCCL (\S+) from (\S+)`)
	benchRanks  = regexp.MustCompile(`^# nranks (\d+): (\d+) process\(es\)(?: × (\d+) thread\(s\))? × (\d+) GPU\(s\)`)
	benchBufs   = regexp.MustCompile(`^# Buffers: (.*), registration (\S+) \(-R (\d+)\)`)
	cudaLine    = regexp.MustCompile(`^# CUDA runtime (\S+) from (\S+)`)
	testsTitle  = regexp.MustCompile(`^# nccl-tests version (\S+) nccl-headers=\d+ nccl-library=(\d+)`)
	testsOp     = regexp.MustCompile(`^# Collective test starting: (\w+)_perf`)
	testsThread = regexp.MustCompile(`^# nThread (\d+) nGpus (\d+)`)
	testsRank   = regexp.MustCompile(`^#\s+Rank\s+\d+ Group\s+\d+ Pid\s+(\d+) on\s+\S+ device\s+\d+ \[[^\]]*\] (.+?)\s*$`)
	params      = regexp.MustCompile(`(agg iters|warmup iters|iters|validation|graph|local_register): (\d+)`)
	avgBusBW    = regexp.MustCompile(`^# Avg bus bandwidth\s*: (\S+)`)
	outOfBounds = regexp.MustCompile(`^# Out of bounds values : (\d+) (OK|FAILED)`)
)

// parseTables reads the tables of nccl-bench and nccl-tests.
func parseTables(text string) ([]Run, error) {
	var runs []Run
	var r *Run
	pids := map[string]bool{}
	start := func(program string) {
		runs = append(runs, Run{Program: program, Threads: 1, GPUsPerThread: 1, Processes: 1})
		r = &runs[len(runs)-1]
		pids = map[string]bool{}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := benchTitle.FindStringSubmatch(line); m != nil {
			start("nccl-bench")
			r.Op, r.NCCL, r.NCCLPath = m[1], m[2], m[3]
			continue
		}
		if m := testsTitle.FindStringSubmatch(line); m != nil {
			start("nccl-tests")
			r.ProgramVersion, r.NCCL = m[1], ncclVersion(m[2])
			continue
		}
		if m := testsOp.FindStringSubmatch(line); m != nil {
			if r == nil || r.Program != "nccl-tests" || len(r.Rows) > 0 {
				start("nccl-tests")
			}
			r.Op = m[1]
			continue
		}
		if r == nil {
			continue
		}
		if m := benchRanks.FindStringSubmatch(line); m != nil {
			r.Ranks, r.Processes, r.GPUsPerThread = atoi(m[1]), atoi(m[2]), atoi(m[4])
			if m[3] != "" {
				r.Threads = atoi(m[3])
			}
		}
		if strings.HasPrefix(line, "# -threads:") {
			r.GPUThreads = true
		}
		if m := testsThread.FindStringSubmatch(line); m != nil {
			r.Threads, r.GPUsPerThread = atoi(m[1]), atoi(m[2])
		}
		if strings.HasPrefix(line, "# nranks") || strings.HasPrefix(line, "# nThread") {
			for _, m := range params.FindAllStringSubmatch(line, -1) {
				v := atoi(m[2])
				switch m[1] {
				case "warmup iters":
					r.Warmup = v
				case "iters":
					r.Iters = v
				case "validation":
					r.Validation = v
				case "graph":
					r.Graph = v
				case "local_register":
					r.LocalRegister = v
				}
			}
			continue
		}
		if m := benchBufs.FindStringSubmatch(line); m != nil {
			r.Allocator, r.Register, r.LocalRegister = m[1], m[2], atoi(m[3])
			continue
		}
		if m := cudaLine.FindStringSubmatch(line); m != nil {
			r.CUDART, r.CUDARTPath = m[1], m[2]
			continue
		}
		if m := testsRank.FindStringSubmatch(line); m != nil {
			r.Ranks++
			pids[m[1]] = true
			r.Processes = len(pids)
			continue
		}
		if strings.HasPrefix(line, "#") && strings.Contains(line, "cputime") && strings.Contains(line, "algbw") {
			r.ReportCPUTime = true
			continue
		}
		if m := avgBusBW.FindStringSubmatch(line); m != nil {
			r.AvgBusBW, _ = strconv.ParseFloat(m[1], 64)
			continue
		}
		if m := outOfBounds.FindStringSubmatch(line); m != nil {
			r.OutOfBounds = &OutOfBounds{Count: atoi(m[1]), Okay: m[2] == "OK"}
			continue
		}
		if row, ok := parseRow(line, r.ReportCPUTime); ok {
			r.Rows = append(r.Rows, row)
		}
	}
	var kept []Run
	for _, r := range runs {
		if len(r.Rows) == 0 {
			continue
		}
		r.GPUsPerProcess = r.Threads * r.GPUsPerThread
		if r.Ranks == 0 {
			r.Ranks = r.Processes * r.GPUsPerProcess
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("no nccl-bench or nccl-tests table")
	}
	return kept, sc.Err()
}

// parseRow reads a row of the table: size, count, type, redop, root, then
// time, algbw, busbw and #wrong out of place and in place (nccl-bench's -I 1
// adds four columns to each half).
func parseRow(line string, cpu bool) (Row, bool) {
	f := strings.Fields(line)
	if len(f) != 13 && len(f) != 21 {
		return Row{}, false
	}
	size, err1 := strconv.Atoi(f[0])
	count, err2 := strconv.Atoi(f[1])
	root, err3 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || err3 != nil {
		return Row{}, false
	}
	w := Row{Size: size, Count: count, Type: f[2], Op: f[3], Root: root}
	in := 9
	if len(f) == 21 {
		in = 13
	}
	t, ok := num(f[5])
	if !ok {
		return Row{}, false
	}
	if cpu {
		w.OutCPUUs = t
	} else {
		w.OutTimeUs = t
	}
	w.OutAlgBW, _ = num(f[6])
	w.OutBusBW, _ = num(f[7])
	w.OutWrong = wrong(f[8])
	if t, ok := num(f[in]); ok {
		if cpu {
			w.InCPUUs = t
		} else {
			w.InTimeUs = t
		}
		w.InAlgBW, _ = num(f[in+1])
		w.InBusBW, _ = num(f[in+2])
		w.InWrong = wrong(f[in+3])
	} else {
		w.InSkipped = true
	}
	return w, true
}

var (
	modesHeading = regexp.MustCompile(`^## (\w+) \(([^)]*)\) (\w+), (.+), (\d+) alternating runs each`)
	modesRow     = regexp.MustCompile(`^\| (\d+) \| \S+ / (\S+) \| \S+ / (\S+) \|`)
	npLayout     = regexp.MustCompile(`^(\d+) processes under mpirun$`)
	gLayout      = regexp.MustCompile(`^(?:-t (\d+) )?-g (\d+)$`)
	flagValue    = regexp.MustCompile(`-([GRC]) (\d+)`)
)

// parseModes reads the summary of scripts/bench-modes.sh: per table, a run of
// each program whose rows are the medians of its runs' out-of-place times.
func parseModes(text string) ([]Run, error) {
	var runs []Run
	var t, b *Run
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if m := modesHeading.FindStringSubmatch(line); m != nil {
			base := Run{Op: m[3], Threads: 1, GPUsPerThread: 1, Processes: 1, Statistic: "median", OfRuns: atoi(m[5]), Validation: 0}
			for _, f := range flagValue.FindAllStringSubmatch(m[2], -1) {
				switch f[1] {
				case "G":
					base.Graph = atoi(f[2])
				case "R":
					base.LocalRegister = atoi(f[2])
				case "C":
					base.ReportCPUTime = f[2] == "1"
				}
			}
			if l := npLayout.FindStringSubmatch(m[4]); l != nil {
				base.Processes = atoi(l[1])
			} else if l := gLayout.FindStringSubmatch(m[4]); l != nil {
				base.GPUsPerThread = atoi(l[2])
				if l[1] != "" {
					base.Threads = atoi(l[1])
				}
			} else {
				return nil, fmt.Errorf("layout %q", m[4])
			}
			base.GPUsPerProcess = base.Threads * base.GPUsPerThread
			base.Ranks = base.Processes * base.GPUsPerProcess
			tt, bb := base, base
			tt.Program, bb.Program = "nccl-tests", "nccl-bench"
			runs = append(runs, tt, bb)
			t, b = &runs[len(runs)-2], &runs[len(runs)-1]
			continue
		}
		m := modesRow.FindStringSubmatch(line)
		if m == nil || t == nil {
			continue
		}
		size := atoi(m[1])
		for i, r := range []*Run{t, b} {
			us, ok := num(m[2+i])
			if !ok {
				return nil, fmt.Errorf("row %q", line)
			}
			r.Rows = append(r.Rows, derivedRow(r, size, us))
		}
	}
	for i := range runs {
		runs[i].AvgBusBW = avgBus(runs[i].Rows)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no bench-modes.sh table")
	}
	return runs, sc.Err()
}

// derivedRow is the out-of-place half of a row from its size and time, with
// algbw, busbw (to 2 decimals, as both programs print them) and the count as
// nccl-bench works them out (float32, sum, root 0: nccl-tests' defaults,
// which bench-modes.sh keeps).
func derivedRow(r *Run, size int, us float64) Row {
	o := ops[r.Op]
	w := Row{Size: size, Count: size / 4, Type: "float", Op: "none", Root: -1, OutWrong: -1}
	if o.timesN {
		w.Count /= r.Ranks
	}
	if r.Op == "alltoallv" {
		w.Count &^= 3
	}
	if o.reduce {
		w.Op = "sum"
	}
	if o.rooted {
		w.Root = 0
	}
	if r.ReportCPUTime {
		w.OutCPUUs = us
		return w
	}
	w.OutTimeUs = us
	alg := float64(size) / us / 1e3
	w.OutAlgBW, w.OutBusBW = round2(alg), round2(alg*o.factor(float64(r.Ranks)))
	return w
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func avgBus(rows []Row) float64 {
	if len(rows) == 0 {
		return 0
	}
	var s float64
	for _, w := range rows {
		s += w.OutBusBW
	}
	return round2(s / float64(len(rows)))
}

// ops is what the tables need of each operation: nccl-tests' busbw factor,
// and its row's defaults (cmd/nccl-bench/ops.go).
var ops = map[string]struct {
	factor                 func(n float64) float64
	timesN, reduce, rooted bool
}{
	"all_reduce":     {factor: func(n float64) float64 { return 2 * (n - 1) / n }, reduce: true},
	"all_gather":     {factor: ring, timesN: true},
	"reduce_scatter": {factor: ring, timesN: true, reduce: true},
	"alltoall":       {factor: ring, timesN: true},
	"gather":         {factor: ring, timesN: true, rooted: true},
	"scatter":        {factor: ring, timesN: true, rooted: true},
	"broadcast":      {factor: one, rooted: true},
	"reduce":         {factor: one, reduce: true, rooted: true},
	"sendrecv":       {factor: one},
	"alltoallv":      {factor: ring, timesN: true},
}

func ring(n float64) float64 { return (n - 1) / n }
func one(float64) float64    { return 1 }

var (
	nonblockingLine   = regexp.MustCompile(`(?m)^(\S+) np (\d+) n (\d+) (blocking|-nonblocking): ([0-9.]+) us(?: per all-reduce launched plainly| \(mean of|$|,)`)
	benchBlockingLine = regexp.MustCompile(`(?m)^nccl-bench np (\d+) (\d+) B NCCL_COMM_BLOCKING=([01]): ([0-9.]+) us`)
	roundLine         = regexp.MustCompile(`^round (\d+)`)
	runSuffix         = regexp.MustCompile(`, run (\d+)$`)
	nonblockingNames  = map[string]string{"C": "nonblocking-ref.c", "Go": "nonblocking-go", "bench": "nccl-bench"}
)

// parseNonblocking reads scripts/bench-nonblocking.sh's lines: the C
// reference (C), the same program on gonccl (Go) and nccl-bench, each the
// mean of the ranks' times of a plainly launched all-reduce of n float32 on a
// blocking or a non-blocking communicator.
func parseNonblocking(text string) ([]Run, error) {
	var runs []Run
	round := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if m := roundLine.FindStringSubmatch(line); m != nil {
			round = atoi(m[1])
			continue
		}
		rnd := round
		if m := runSuffix.FindStringSubmatch(line); m != nil {
			rnd = atoi(m[1])
		}
		var prog string
		var np, size int
		var block bool
		var us float64
		if m := nonblockingLine.FindStringSubmatch(line); m != nil {
			prog, np, size, block = m[1], atoi(m[2]), 4*atoi(m[3]), m[4] == "blocking"
			us, _ = num(m[5])
			if p, ok := nonblockingNames[prog]; ok {
				prog = p
			}
		} else if m := benchBlockingLine.FindStringSubmatch(line); m != nil {
			prog, np, size, block = "nccl-bench", atoi(m[1]), atoi(m[2]), m[3] == "1"
			us, _ = num(m[4])
		} else {
			continue
		}
		r := Run{Op: "all_reduce", Program: prog, Ranks: np, Processes: np, Threads: 1, GPUsPerThread: 1, GPUsPerProcess: 1,
			Round: rnd, Blocking: &block}
		r.Rows = []Row{derivedRow(&r, size, us)}
		r.AvgBusBW = r.Rows[0].OutBusBW
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no bench-nonblocking.sh lines")
	}
	return runs, sc.Err()
}

// ncclVersion turns NCCL's version code (22803) into 2.28.3.
func ncclVersion(code string) string {
	c := atoi(code)
	if c >= 10000 {
		return fmt.Sprintf("%d.%d.%d", c/10000, c/100%100, c%100)
	}
	return fmt.Sprintf("%d.%d.%d", c/1000, c/100%10, c%100)
}

func atoi(s string) int { v, _ := strconv.Atoi(s); return v }

func num(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

func wrong(s string) int {
	if v, err := strconv.Atoi(s); err == nil {
		return v
	}
	return -1 // N/A: not checked
}

// parseJSON reads nccl-bench's -json documents, one after the other.
func parseJSON(text string) ([]Run, error) {
	var runs []Run
	dec := json.NewDecoder(strings.NewReader(text))
	for dec.More() {
		var r Run
		if err := dec.Decode(&r); err != nil {
			return nil, err
		}
		if r.Program == "" {
			r.Program = "nccl-bench"
		}
		runs = append(runs, r)
	}
	return runs, nil
}
