package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The documents whose marked blocks are rendered, and the data folder.
var (
	documents  = []string{"docs/performance.md", "docs/call-cost.md"}
	resultsDir = "docs/results"
)

// block renders one marked block of a document from the data.
type block struct {
	name string
	make func(res Results, bench BenchSets) string
}

var blocks = []block{
	{"datasets", datasetsBlock},
	{"standing", standingBlock},
	{"thread-per-gpu", threadPerGPUBlock},
	{"one-thread", oneThreadBlock},
	{"threads", threadsBlock},
	{"nodes", nodesBlock},
	{"layouts", layoutsBlock},
	{"np-graph", npGraphBlock},
	{"operations", operationsBlock},
	{"operations-8m", operations8MBlock},
	{"nonblocking", nonblockingBlock},
	{"alltoallv", alltoallvBlock},
	{"call-cost", callCostBlock},
	{"call-account", callAccountBlock},
	{"group-cost", groupCostBlock},
}

var marker = regexp.MustCompile(`(?m)^<!-- results: ([a-z0-9-]+) -->\n`)

const endMarker = "<!-- end -->\n"

// render makes every block and chart from the data under root and compares
// them with the files; with write it rewrites the files that differ. It
// returns what differs.
func render(root string, write bool) (diffs []string, err error) {
	defer func() { // Get panics where a filter finds no run
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	res, err := Load(filepath.Join(root, resultsDir))
	if err != nil {
		return nil, err
	}
	bench, err := LoadBench(filepath.Join(root, resultsDir))
	if err != nil {
		return nil, err
	}
	made := map[string]string{}
	for _, b := range blocks {
		made[b.name] = b.make(res, bench)
	}
	used := map[string]int{}
	for _, doc := range documents {
		path := filepath.Join(root, doc)
		old, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		text, err := fill(string(old), made, used)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", doc, err)
		}
		if text != string(old) {
			diffs = append(diffs, doc+": the marked tables differ from what docs/results renders")
			if write {
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, b := range blocks {
		if used[b.name] != 1 {
			return nil, fmt.Errorf("block %q is marked %d times in %v, want once", b.name, used[b.name], documents)
		}
	}
	for name, svg := range charts(res) {
		path := filepath.Join(root, resultsDir, name)
		old, _ := os.ReadFile(path)
		if string(old) != svg {
			diffs = append(diffs, filepath.Join(resultsDir, name)+": differs from what the data draws")
			if write {
				if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
					return nil, err
				}
			}
		}
	}
	return diffs, nil
}

// fill replaces the text between each marker and the next end marker.
func fill(text string, made map[string]string, used map[string]int) (string, error) {
	var out strings.Builder
	for {
		loc := marker.FindStringSubmatchIndex(text)
		if loc == nil {
			out.WriteString(text)
			return out.String(), nil
		}
		name := text[loc[2]:loc[3]]
		body, ok := made[name]
		if !ok {
			return "", fmt.Errorf("no block %q", name)
		}
		end := strings.Index(text[loc[1]:], endMarker)
		if end < 0 {
			return "", fmt.Errorf("block %q has no %q", name, strings.TrimSpace(endMarker))
		}
		used[name]++
		out.WriteString(text[:loc[1]])
		out.WriteString(body)
		out.WriteString(endMarker)
		text = text[loc[1]+end+len(endMarker):]
	}
}

// The files of each series.
const (
	t4g1Bench   = "h200x4-nccl2.28.3-t4g1-nccl-bench.json"
	t4g1Tests   = "h200x4-nccl2.28.3-t4g1-nccl-tests.json"
	gBench      = "h200x4-nccl2.28.3-g-nccl-bench.json"
	gTests      = "h200x4-nccl2.28.3-g-nccl-tests.json"
	t2g1Bench   = "h200x2-nccl2.28.3-t2g1-nccl-bench.json"
	t2g1Tests   = "h200x2-nccl2.28.3-t2g1-nccl-tests.json"
	g2Bench     = "h200x2-nccl2.28.3-g2-nccl-bench.json"
	g2Tests     = "h200x2-nccl2.28.3-g2-nccl-tests.json"
	thBench     = "h200x2-nccl2.28.3-threads-nccl-bench.json"
	thTests     = "h200x2-nccl2.28.3-threads-nccl-tests.json"
	th4Bench    = "h200x4-nccl2.28.3-threads-nccl-bench.json"
	th4Tests    = "h200x4-nccl2.28.3-threads-nccl-tests.json"
	nodesBench  = "h200x2-nccl2.28.3-nodes-nccl-bench.json"
	nodesTests  = "h200x2-nccl2.28.3-nodes-nccl-tests.json"
	bw2Bench    = "h200x2-nccl2.28.3-bw-nccl-bench.json"
	bw2Tests    = "h200x2-nccl2.28.3-bw-nccl-tests.json"
	modesBench  = "h100x4-nccl2.28.3-modes-nccl-bench.json"
	modesTests  = "h100x4-nccl2.28.3-modes-nccl-tests.json"
	npBench     = "h100x4-nccl2.28.3-np-symgraph-nccl-bench.json"
	npTests     = "h100x4-nccl2.28.3-np-symgraph-nccl-tests.json"
	opsBench    = "h100x4-nccl2.28.3-np4-ops-nccl-bench.json"
	opsTests    = "h100x4-nccl2.28.3-np4-ops-nccl-tests.json"
	ops8MBench  = "h200x4-nccl2.28.3-np4-8m-nccl-bench.json"
	ops8MTests  = "h200x4-nccl2.28.3-np4-8m-nccl-tests.json"
	nonblocking = "h200x4-nccl2.28.3-nonblocking.json"
	vccl        = "h100x4-vccl2.29.2-alltoallv-nccl-bench.json"
)

const mib = 1 << 20

// us is a row's out-of-place time (or cputime).
func us(r *Run, size int) float64 {
	w := r.row(size)
	if w == nil {
		return math.NaN()
	}
	if r.ReportCPUTime {
		return w.OutCPUUs
	}
	return w.OutTimeUs
}

// paired is the runs of both programs that ran in the same round on the
// same host, and their times at a size.
type paired struct {
	tests, bench, diff []float64
}

func pair(tests, bench []Run, size int) paired {
	var p paired
	for _, b := range bench {
		for _, t := range tests {
			if t.Host == b.Host && t.Round == b.Round {
				tt, bb := us(&t, size), us(&b, size)
				p.tests, p.bench, p.diff = append(p.tests, tt), append(p.bench, bb), append(p.diff, bb-tt)
			}
		}
	}
	return p
}

// groupBy groups runs by a key, in the order the keys first appear.
func groupBy(runs []Run, key func(*Run) string) (keys []string, by map[string][]Run) {
	by = map[string][]Run{}
	for _, r := range runs {
		k := key(&r)
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	return keys, by
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// code is a mode or layout as the reader types it: plain, or in code font.
func code(m string) string {
	if m == "plain" {
		return m
	}
	return "`" + m + "`"
}
func sgn(v float64) string   { return fmt.Sprintf("%+.2f", v) }
func ratio(v float64) string { return fmt.Sprintf("%.3f", v) }

// spanOf is "lo to hi" (or the one value), formatted by f.
func spanOf(v []float64, f func(float64) string) string {
	lo, hi := minmax(v)
	if f(lo) == f(hi) {
		return f(lo)
	}
	return f(lo) + " to " + f(hi)
}

// diffCell is a paired difference: mean (standard error), median.
func diffCell(d []float64) string {
	return fmt.Sprintf("%s (%.2f) | %s", sgn(mean(d)), stderr(d), sgn(median(d)))
}

// threadPerGPUBlock: -t N -g 1, each machine, mode and host, 8 B.
func threadPerGPUBlock(res Results, _ BenchSets) string {
	var b strings.Builder
	b.WriteString("| GPUs | mode | host | `-n` | rounds | nccl-tests µs | nccl-bench µs | nccl-bench − nccl-tests: mean (se) | median |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range [][2]string{{t4g1Bench, t4g1Tests}, {t2g1Bench, t2g1Tests}} {
		bench, tests := res.Get(f[0]), res.Get(f[1])
		key := func(r *Run) string { return fmt.Sprintf("%s|%s|%d", r.Mode(), r.Host, r.Iters) }
		keys, by := groupBy(bench, key)
		_, tby := groupBy(tests, key)
		for _, k := range keys {
			r := by[k][0]
			p := pair(tby[k], by[k], 8)
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s |\n", r.Machine, code(r.Mode()), r.Host, r.Iters, len(p.diff), f2(median(p.tests)), f2(median(p.bench)), diffCell(p.diff))
		}
	}
	return b.String()
}

// oneThreadBlock: -g N from one thread, each host, 8 B, and the hosts'
// differences pooled (weighted by 1/se²) per layout: -R 2 -G 10 on 4 × H200,
// every mode on 2 × H200.
func oneThreadBlock(res Results, _ BenchSets) string {
	bench := append(res.Get(gBench), res.Get(g2Bench)...)
	tests := append(res.Get(gTests), res.Get(g2Tests)...)
	key := func(r *Run) string { return r.Layout() + "|" + r.Mode() + "|" + r.Host + "|" + r.Variant }
	keys, by := groupBy(bench, key)
	_, tby := groupBy(tests, key)
	var b strings.Builder
	b.WriteString("| layout | host | rounds | nccl-tests µs | nccl-bench µs | nccl-bench − nccl-tests: mean (se) | median |\n|---|---|---:|---:|---:|---:|---:|\n")
	type est struct{ m, se float64 }
	pooled := map[string][]est{}
	var layouts []string
	for _, k := range keys {
		r := by[k][0]
		p := pair(tby[k], by[k], 8)
		h := r.Host
		if r.Variant != "" {
			h += " (" + r.Variant + ")"
		}
		fmt.Fprintf(&b, "| `%s %s` | %s | %d | %s | %s | %s |\n", r.Layout(), r.Mode(), h, len(p.diff), f2(median(p.tests)), f2(median(p.bench)), diffCell(p.diff))
		lm := r.Layout() + " " + r.Mode()
		if _, ok := pooled[lm]; !ok {
			layouts = append(layouts, lm)
		}
		pooled[lm] = append(pooled[lm], est{mean(p.diff), stderr(p.diff)})
	}
	for _, l := range layouts {
		if len(pooled[l]) < 2 {
			continue
		}
		var sw, swm float64
		for _, e := range pooled[l] {
			w := 1 / (e.se * e.se)
			sw, swm = sw+w, swm+w*e.m
		}
		fmt.Fprintf(&b, "| `%s`, %d hosts | weighted by 1/se² | | | | %s (%.2f) | |\n", l, len(pooled[l]), sgn(swm/sw), 1/math.Sqrt(sw))
	}
	return b.String()
}

// threadsBlock: one goroutine driving every GPU through nccl.Threads
// (nccl-bench -g N -threads) beside nccl-tests' -t N -g 1 and -g N and
// nccl-bench's -g N, per mode: each run's mean time over its sizes, and the
// per-round difference to nccl-tests -t N -g 1 (scripts/bench-threads.sh).
func threadsBlock(res Results, _ BenchSets) string {
	var b strings.Builder
	b.WriteString("| machine | mode | program | layout | rounds | mean µs | − nccl-tests `-t N -g 1`: mean (se) |\n|---|---|---|---|---:|---:|---:|\n")
	meanOf := func(r *Run) float64 {
		var v []float64
		for _, w := range r.Rows {
			v = append(v, us(r, w.Size))
		}
		return mean(v)
	}
	for _, set := range threadSets {
		modes, byMode := groupBy(append(append([]Run{}, res.Get(set.tests)...), res.Get(set.bench)...), func(r *Run) string { return r.Mode() })
		for _, m := range modes {
			ref := map[int]float64{}
			for _, r := range byMode[m] {
				if r.Program == "nccl-tests" && r.Threads > 1 {
					ref[r.Round] = meanOf(&r)
				}
			}
			layouts, byLayout := groupBy(byMode[m], func(r *Run) string { return r.Program + " " + r.Layout() })
			for _, l := range layouts {
				runs := byLayout[l]
				var t, d []float64
				for _, r := range runs {
					t = append(t, meanOf(&r))
					if x, ok := ref[r.Round]; ok {
						d = append(d, meanOf(&r)-x)
					}
				}
				fmt.Fprintf(&b, "| %s | %s | %s | `%s` | %d | %s | %s (%.2f) |\n", runs[0].Machine, code(m), runs[0].Program, runs[0].Layout(), len(runs), f2(mean(t)), sgn(mean(d)), stderr(d))
			}
		}
	}
	return b.String()
}

// threadSets are the measurements of nccl.Threads (scripts/bench-threads.sh),
// one pair of files per machine.
var threadSets = []struct{ bench, tests string }{{thBench, thTests}, {th4Bench, th4Tests}}

// nodesBlock: busbw across two emulated nodes (scripts/bench-nodes.sh), per
// operation and size: each program's median over the rounds and their ratio.
func nodesBlock(res Results, _ BenchSets) string {
	var b strings.Builder
	b.WriteString("| operation | size | rounds | nccl-tests busbw GB/s | nccl-bench busbw GB/s | ratio |\n|---|---:|---:|---:|---:|---:|\n")
	bench, tests := res.Get(nodesBench), res.Get(nodesTests)
	ops, byOp := groupBy(bench, func(r *Run) string { return r.Op })
	for _, op := range ops {
		var tOp []Run
		for _, t := range tests {
			if t.Op == op {
				tOp = append(tOp, t)
			}
		}
		for _, size := range sizes(byOp[op]) {
			var tb, bb []float64
			for _, r := range tOp {
				if w := r.row(size); w != nil {
					tb = append(tb, w.OutBusBW)
				}
			}
			for _, r := range byOp[op] {
				if w := r.row(size); w != nil {
					bb = append(bb, w.OutBusBW)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", op, sizeName(size), len(bb), f2(median(tb)), f2(median(bb)), ratio(median(bb)/median(tb)))
		}
	}
	return b.String()
}

// compare is nccl-bench's median run against nccl-tests' of the same
// layout, mode and operation: per size, the difference of times and the
// ratio of busbw.
type compare struct {
	tests, bench Run
}

func comparisons(res Results, benchFile, testsFile string) []compare {
	tests := res.Get(testsFile)
	var out []compare
	for _, b := range res.Get(benchFile) {
		for _, t := range tests {
			if t.Op == b.Op && t.Layout() == b.Layout() && t.Mode() == b.Mode() {
				out = append(out, compare{t, b})
			}
		}
	}
	return out
}

// small is nccl-bench − nccl-tests at every size below 1 MiB; large the
// busbw ratio (nccl-bench over nccl-tests) from 1 MiB up.
func (c compare) small() (d []float64) {
	for _, w := range c.bench.Rows {
		if w.Size < mib && c.tests.row(w.Size) != nil {
			d = append(d, us(&c.bench, w.Size)-us(&c.tests, w.Size))
		}
	}
	return d
}

func (c compare) large() (r []float64) {
	for _, w := range c.bench.Rows {
		if w.Size >= mib && c.tests.row(w.Size) != nil {
			r = append(r, us(&c.tests, w.Size)/us(&c.bench, w.Size))
		}
	}
	return r
}

// layoutsBlock: all_reduce in every layout and mode, 4 × H100.
func layoutsBlock(res Results, _ BenchSets) string {
	var b strings.Builder
	b.WriteString("| layout | mode | 8 B: nccl-tests µs | nccl-bench µs | below 1 MiB: nccl-bench − nccl-tests µs | from 1 MiB: busbw ratio |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range comparisons(res, modesBench, modesTests) {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", c.bench.Layout(), code(c.bench.Mode()), f2(us(&c.tests, 8)), f2(us(&c.bench, 8)),
			spanOf(c.small(), sgn), spanOf(c.large(), ratio))
	}
	return b.String()
}

// npGraphBlock: one process per GPU, -R 2 -G 10, the smallest sizes.
func npGraphBlock(res Results, _ BenchSets) string {
	cs := comparisons(res, npBench, npTests)
	var b strings.Builder
	b.WriteString("| size (B) |")
	for _, c := range cs {
		fmt.Fprintf(&b, " `%s`: nccl-tests µs | nccl-bench µs |", c.bench.Layout())
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|---:|", len(cs)) + "\n")
	for _, s := range sizes(res.Get(npBench)) {
		fmt.Fprintf(&b, "| %d |", s)
		for _, c := range cs {
			fmt.Fprintf(&b, " %s | %s |", f2(us(&c.tests, s)), f2(us(&c.bench, s)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// operationsBlock: every other operation, one process per GPU, plain and -G.
func operationsBlock(res Results, _ BenchSets) string {
	cs := comparisons(res, opsBench, opsTests)
	var modes []string
	byOp := map[string]map[string]compare{}
	var order []string
	for _, c := range cs {
		if byOp[c.bench.Op] == nil {
			byOp[c.bench.Op] = map[string]compare{}
			order = append(order, c.bench.Op)
		}
		if !contains(modes, c.bench.Mode()) {
			modes = append(modes, c.bench.Mode())
		}
		byOp[c.bench.Op][c.bench.Mode()] = c
	}
	var b strings.Builder
	b.WriteString("| operation |")
	for _, m := range modes {
		fmt.Fprintf(&b, " %s: below 1 MiB, µs | %s: from 1 MiB, busbw ratio |", code(m), code(m))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|---:|", len(modes)) + "\n")
	for _, op := range order {
		fmt.Fprintf(&b, "| %s |", op)
		for _, m := range modes {
			c := byOp[op][m]
			fmt.Fprintf(&b, " %s | %s |", spanOf(c.small(), sgn), spanOf(c.large(), ratio))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// operations8MBlock: the 8 MiB rows measured again with more runs.
func operations8MBlock(res Results, _ BenchSets) string {
	var b strings.Builder
	b.WriteString("| operation | size (B) | runs | nccl-tests µs | nccl-bench µs | busbw ratio |\n|---|---:|---:|---:|---:|---:|\n")
	for _, c := range comparisons(res, ops8MBench, ops8MTests) {
		for _, w := range c.bench.Rows {
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s |\n", c.bench.Op, w.Size, c.bench.OfRuns, f2(us(&c.tests, w.Size)), f2(us(&c.bench, w.Size)),
				ratio(us(&c.tests, w.Size)/us(&c.bench, w.Size)))
		}
	}
	return b.String()
}

// nonblockingBlock: blocking and non-blocking communicators from C and Go.
func nonblockingBlock(res Results, _ BenchSets) string {
	runs := res.Get(nonblocking)
	cols := []struct {
		label, prog string
		block       bool
	}{
		{"C, blocking", "nonblocking-ref.c", true}, {"gonccl, blocking", "nonblocking-go", true},
		{"C, non-blocking", "nonblocking-ref.c", false}, {"gonccl, non-blocking", "nonblocking-go", false},
		{"nccl-bench, non-blocking", "nccl-bench", false},
	}
	keys, by := groupBy(runs, func(r *Run) string { return fmt.Sprintf("%d|%d", r.Ranks, r.Rows[0].Size) })
	var b strings.Builder
	b.WriteString("| ranks | size (B) |")
	for _, c := range cols {
		b.WriteString(" " + c.label + " |")
	}
	b.WriteString("\n|---:|---:|" + strings.Repeat("---:|", len(cols)) + "\n")
	for _, k := range keys {
		r := by[k][0]
		fmt.Fprintf(&b, "| %d | %d |", r.Ranks, r.Rows[0].Size)
		for _, c := range cols {
			var v []float64
			for _, x := range by[k] {
				if x.Program == c.prog && blocking(c.block)(&x) {
					v = append(v, x.Rows[0].OutTimeUs)
				}
			}
			if len(v) == 0 {
				b.WriteString(" |")
				continue
			}
			lo, hi := minmax(v)
			fmt.Fprintf(&b, " %.1f (%.1f–%.1f) |", median(v), lo, hi)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// alltoallvBlock: VCCL's native ncclAlltoAllv against grouped send/recv.
func alltoallvBlock(res Results, _ BenchSets) string {
	runs := res.Get(vccl)
	var b strings.Builder
	b.WriteString("| size (B) |")
	for _, r := range runs {
		fmt.Fprintf(&b, " `%s` %s µs |", r.Layout(), r.Path)
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(runs)) + "\n")
	for _, s := range sizes(runs) {
		fmt.Fprintf(&b, "| %d |", s)
		for _, r := range runs {
			fmt.Fprintf(&b, " %s |", f2(us(&r, s)))
		}
		b.WriteString("\n")
	}
	b.WriteString("| average busbw, GB/s |")
	for _, r := range runs {
		fmt.Fprintf(&b, " %.1f |", r.AvgBusBW)
	}
	b.WriteString("\n")
	return b.String()
}

// datasetsBlock: one line per series of files: machine, date, libraries, programs.
func datasetsBlock(res Results, bench BenchSets) string {
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	groups := map[string][]string{}
	var order []string
	for _, n := range names {
		g := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, ".json"), "-nccl-bench"), "-nccl-tests")
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], n)
	}
	var b strings.Builder
	for _, g := range order {
		var runs []Run
		for _, n := range groups[g] {
			runs = append(runs, res[n]...)
		}
		r := runs[0]
		lib := "NCCL " + r.NCCL
		if strings.Contains(r.NCCLPath, "vccl") {
			lib = "VCCL " + r.NCCL
		}
		var progs []string
		versions := map[string][]string{}
		for _, x := range runs {
			if !contains(progs, x.Program) {
				progs = append(progs, x.Program)
			}
			if v := strings.TrimPrefix(x.ProgramVersion, "gonccl "); v != "" && !contains(versions[x.Program], v) {
				versions[x.Program] = append(versions[x.Program], v)
			}
		}
		for i, p := range progs {
			switch v := strings.Join(versions[p], " and "); {
			case v != "" && p == "nccl-bench":
				progs[i] = "nccl-bench of gonccl " + v
			case v != "":
				progs[i] = p + " " + v
			}
		}
		how := fmt.Sprintf("%d runs", len(runs))
		if r.Statistic == "median" {
			how = fmt.Sprintf("each row the median of %d runs", r.OfRuns)
		}
		fmt.Fprintf(&b, "- `%s`: %s, measured %s; %s; %s; %s.\n", g+"*.json", r.Machine, r.Measured, lib, strings.Join(progs, ", "), how)
	}
	for i, s := range bench {
		if i > 0 && bench[i-1].File == s.File {
			continue
		}
		fmt.Fprintf(&b, "- `%s`: %s, measured %s; gonccl %s; Go's benchmark format, %d rounds.\n", s.File, s.Config["machine"], s.Config["measured"], s.Config["commit"], s.rounds())
	}
	return b.String()
}

// standingBlock: where gonccl stands, in a few lines, from the same data.
func standingBlock(res Results, bench BenchSets) string {
	var b strings.Builder
	t4 := func(m string) paired {
		return pair(res.Get(t4g1Tests, mode(m), host("D")), res.Get(t4g1Bench, mode(m), host("D")), 8)
	}
	sg := t4("-R 2 -G 10")
	fmt.Fprintf(&b, "- **A thread per GPU** (`-t 4 -g 1`, 4 × H200), 8-byte all-reduce from a CUDA graph over symmetric buffers: nccl-bench %s µs, nccl-tests %s µs (medians of %d rounds); from a graph over plain buffers and launched plainly they agree within the rounds' noise too.\n",
		f2(median(sg.bench)), f2(median(sg.tests)), len(sg.diff))
	var d, tm, bm, times []float64
	for _, h := range hosts(res.Get(gBench, layout("-g 4"))) {
		p := pair(res.Get(gTests, layout("-g 4"), host(h)), res.Get(gBench, layout("-g 4"), host(h)), 8)
		d, tm, bm = append(d, mean(p.diff)), append(tm, median(p.tests)), append(bm, median(p.bench))
		times = append(times, median(p.tests)/median(sg.tests), median(p.bench)/median(sg.bench))
	}
	fmt.Fprintf(&b, "- **One thread driving 4 GPUs** (`-g 4 -R 2 -G 10`, 4 × H200): nccl-bench %s µs over nccl-tests per host (mean of the rounds), at %s µs per operation against nccl-tests' %s; both programs take %s times as long as with a thread per GPU. From one goroutine, `nccl.Threads` closes that gap (below).\n",
		spanOf(d, sgn), spanOf(bm, f2), spanOf(tm, f2), spanOf(times, func(v float64) string { return fmt.Sprintf("%.1f", v) }))
	if g2 := pair(res.Get(g2Tests, mode("-R 2 -G 10")), res.Get(g2Bench, mode("-R 2 -G 10")), 8); len(g2.diff) > 0 {
		fmt.Fprintf(&b, "- **One thread driving 2 GPUs** (`-g 2 -R 2 -G 10`, 2 × H200): nccl-bench %s µs, nccl-tests %s µs (medians of %d rounds; difference %s, se %.2f).\n",
			f2(median(g2.bench)), f2(median(g2.tests)), len(g2.diff), sgn(mean(g2.diff)), stderr(g2.diff))
	}
	for _, set := range threadSets {
		var t, d []float64
		ref := map[int]float64{}
		for _, r := range res.Get(set.tests, mode("-R 2 -G 20")) {
			if r.Threads > 1 {
				ref[r.Round] = us(&r, 8)
			}
		}
		var machine string
		var gpus int
		for _, r := range res.Get(set.bench, mode("-R 2 -G 20")) {
			if r.GPUThreads {
				t = append(t, us(&r, 8))
				d = append(d, us(&r, 8)-ref[r.Round])
				machine, gpus = r.Machine, r.Ranks
			}
		}
		if len(t) == 0 {
			continue
		}
		fmt.Fprintf(&b, "- **One goroutine driving %d GPUs through `nccl.Threads`** (`-g %d -threads -R 2 -G 20`, %s), 8-byte all-reduce: nccl-bench %s µs, %s µs against nccl-tests with a thread per GPU (mean of %d rounds, se %.2f), ahead of nccl-tests from one thread ([below](#one-goroutine-driving-several-gpus--g-n--threads)).\n",
			gpus, gpus, machine, f2(median(t)), sgn(mean(d)), len(d), stderr(d))
	}
	np := comparisons(res, npBench, npTests)
	fmt.Fprintf(&b, "- **One process per GPU** (`-np 2`, `-np 4`, 4 × H100), 8 B from a graph over symmetric buffers: nccl-bench %s and %s µs, nccl-tests %s and %s µs.\n",
		f2(us(&np[0].bench, 8)), f2(us(&np[1].bench, 8)), f2(us(&np[0].tests, 8)), f2(us(&np[1].tests, 8)))
	var large []float64
	for _, c := range comparisons(res, modesBench, modesTests) {
		large = append(large, c.large()...)
	}
	fmt.Fprintf(&b, "- **Bus bandwidth from 1 MiB up**, all_reduce in every layout and mode (4 × H100): %s of nccl-tests'.\n", spanOf(large, ratio))
	if bw := res.Get(bw2Bench); len(bw) > 0 {
		var large2 []float64
		for _, size := range sizes(bw) {
			p := pair(res.Get(bw2Tests), bw, size)
			large2 = append(large2, median(p.tests)/median(p.bench))
		}
		fmt.Fprintf(&b, "- **Bus bandwidth, 1 to 64 MiB** (`-t 2 -g 1`, 2 × H200, plain all_reduce): %s of nccl-tests' (medians of %d rounds per size).\n", spanOf(large2, ratio), len(bw))
	}
	if s := bench.Get("cpu-callcost.txt"); s != nil {
		fmt.Fprintf(&b, "- **One call** (`Comm.AllReduce`, CPU only): %s × the same call through cgo, 0 allocations ([call-cost.md](call-cost.md)).\n",
			f2(median(s.ratios("AllReduceGonccl", "AllReduceCgo"))))
	}
	return b.String()
}
