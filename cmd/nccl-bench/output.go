package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

// row is one size of the table, and of -json's rows.
type row struct {
	Size      int        `json:"size"`
	Count     int        `json:"count"`
	Type      string     `json:"type"`
	Op        string     `json:"redop"`
	Root      int        `json:"root"`
	OutTimeUs float64    `json:"out_of_place_time_us"`
	OutCPUUs  float64    `json:"out_of_place_cpu_time_us"`
	OutAlgBW  float64    `json:"out_of_place_algbw"`
	OutBusBW  float64    `json:"out_of_place_busbw"`
	OutWrong  int        `json:"out_of_place_wrong"`
	OutIter   *iterStats `json:"out_of_place_per_iter,omitempty"`
	InTimeUs  float64    `json:"in_place_time_us"`
	InCPUUs   float64    `json:"in_place_cpu_time_us"`
	InAlgBW   float64    `json:"in_place_algbw"`
	InBusBW   float64    `json:"in_place_busbw"`
	InWrong   int        `json:"in_place_wrong"`
	InIter    *iterStats `json:"in_place_per_iter,omitempty"`
	InSkipped bool       `json:"in_place_skipped,omitempty"` // the operation does not run in place
}

// set fills the out-of-place or in-place half of the row from a result.
func (r *row) set(inPlace bool, res result, busFactor float64) {
	alg, bus := 0.0, 0.0
	if !res.skipped {
		alg = float64(r.Size) / res.us / 1e3 // bytes / µs → GB/s
		bus = alg * busFactor
	}
	if inPlace {
		r.InTimeUs, r.InCPUUs, r.InAlgBW, r.InBusBW, r.InWrong, r.InIter, r.InSkipped = res.us, res.cpu, alg, bus, res.wrong, res.iter, res.skipped
	} else {
		r.OutTimeUs, r.OutCPUUs, r.OutAlgBW, r.OutBusBW, r.OutWrong, r.OutIter = res.us, res.cpu, alg, bus, res.wrong, res.iter
	}
}

// busBW is the row's busbw as nccl-tests averages it: out of place and in
// place (out of place alone where in place did not run).
func (r *row) busBW() float64 {
	if r.InSkipped {
		return r.OutBusBW
	}
	return (r.OutBusBW + r.InBusBW) / 2
}

// report prints what rank 0 shows: nccl-tests' table, or JSON at the end.
type report struct {
	w          io.Writer
	op         string
	lib        *nccl.Library
	path       string // native or grouped, for an operation that has both
	ranks      int
	job        launch.Job
	threads    int  // per process (-t)
	gpus       int  // per thread
	gpuThreads bool // -threads
	iters      int
	warm       int
	check      int
	perIter    bool
	cpuTime    bool   // -C 1: the time columns show the host's time of the launches
	graphs     int    // -G
	register   int    // -R
	alloc      string // what allocated the buffers
	json       bool
	show       bool // rank 0 prints

	rows   []row
	failed int // checked runs (a size out of place or in place) with a wrong element
}

func (p *report) header() {
	if !p.show || p.json {
		return
	}
	fmt.Fprintf(p.w, "# nccl-bench (gonccl) %s, NCCL %s from %s (%s)\n", p.op, p.lib.Version(), p.lib.Path, p.lib.Via)
	cu := p.lib.CUDA()
	fmt.Fprintf(p.w, "# CUDA runtime %s from %s (%s)\n", cudaRuntime(cu), cu.Path, cu.Via)
	// The parameters as nccl-tests' parameter line words them, so that one
	// pattern finds them in either program's output.
	threads := ""
	if p.threads > 1 {
		threads = fmt.Sprintf(" × %d thread(s)", p.threads)
	}
	fmt.Fprintf(p.w, "# nranks %d: %d process(es)%s × %d GPU(s), launcher %s; warmup iters: %d iters: %d validation: %d graph: %d local_register: %d\n",
		p.ranks, p.job.Size, threads, p.gpus, p.job.Launcher, p.warm, p.iters, p.check, p.graphs, p.register)
	if p.gpuThreads {
		fmt.Fprintf(p.w, "# -threads: each GPU's launches from a thread of its own (nccl.Threads), one call for all; GOMAXPROCS %d\n", runtime.GOMAXPROCS(0))
	}
	if p.graphs > 0 {
		fmt.Fprintf(p.w, "# CUDA Graph mode: the %d iterations of each size captured into a graph per GPU, launched %d times\n", p.iters, p.graphs)
	}
	fmt.Fprintf(p.w, "# Buffers: %s, registration %s (-R %d)\n", p.alloc, registerNames[p.register], p.register)
	it, itu := "", ""
	if p.perIter {
		it, itu = fmt.Sprintf("  %7s  %7s  %7s  %7s", "min", "max", "p99", "cv"), fmt.Sprintf("  %7s  %7s  %7s  %7s", "(us)", "(us)", "(us)", "(%)")
	}
	tm := "time"
	if p.cpuTime {
		tm = "cputime"
	}
	fmt.Fprintf(p.w, "#\n#%12s %12s %8s %6s %6s   %9s %8s %8s %6s%s   %9s %8s %8s %6s%s\n", "size", "count", "type", "redop", "root",
		tm, "algbw", "busbw", "#wrong", it, tm, "algbw", "busbw", "#wrong", it)
	fmt.Fprintf(p.w, "#%12s %12s %8s %6s %6s   %9s %8s %8s %6s%s   %9s %8s %8s %6s%s\n", "(B)", "(elements)", "", "", "",
		"(us)", "(GB/s)", "(GB/s)", "", itu, "(us)", "(GB/s)", "(GB/s)", "", itu)
}

// add keeps a row and prints it in the table.
func (p *report) add(r row) {
	p.rows = append(p.rows, r)
	for _, w := range []int{r.OutWrong, r.InWrong} {
		if w > 0 {
			p.failed++
		}
	}
	if !p.show || p.json {
		return
	}
	out, in := r.OutTimeUs, r.InTimeUs
	if p.cpuTime {
		out, in = r.OutCPUUs, r.InCPUUs
	}
	fmt.Fprintf(p.w, " %12d %12d %8s %6s %6d   %s   %s\n", r.Size, r.Count, r.Type, r.Op, r.Root,
		p.half(out, r.OutAlgBW, r.OutBusBW, r.OutWrong, r.OutIter, false),
		p.half(in, r.InAlgBW, r.InBusBW, r.InWrong, r.InIter, r.InSkipped))
}

// half is the columns of one of out of place and in place; N/A in each
// where the run did not happen.
func (p *report) half(us, alg, bus float64, wrong int, st *iterStats, skipped bool) string {
	if skipped {
		s := fmt.Sprintf("%9s %8s %8s %6s", "N/A", "N/A", "N/A", "N/A")
		if p.perIter {
			s += fmt.Sprintf("  %7s  %7s  %7s  %7s", "N/A", "N/A", "N/A", "N/A")
		}
		return s
	}
	return fmt.Sprintf("%9.2f %8.2f %8.2f %6s%s", us, alg, bus, wrongText(wrong), iterText(st))
}

// iterText is -I's columns: min, max, p99 and cv% of the iterations.
func iterText(st *iterStats) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("  %7.2f  %7.2f  %7.2f  %7.2f", st.MinUs, st.MaxUs, st.P99Us, st.CVPct)
}

func wrongText(w int) string {
	if w < 0 {
		return "N/A"
	}
	return strconv.Itoa(w)
}

func (p *report) avgBusBW() float64 {
	var sum float64
	for _, r := range p.rows {
		sum += r.busBW()
	}
	return sum / math.Max(1, float64(len(p.rows)))
}

// end prints the summary, or the JSON document: as nccl-tests' footer, the
// count of checked runs that found a wrong element, OK or FAILED.
func (p *report) end() error {
	if !p.show {
		return nil
	}
	avg := p.avgBusBW()
	verdict := "OK"
	if p.failed > 0 {
		verdict = "FAILED"
	}
	if !p.json {
		_, err := fmt.Fprintf(p.w, "# Out of bounds values : %d %s\n# Avg bus bandwidth    : %g \n#\n", p.failed, verdict, avg)
		return err
	}
	doc := map[string]any{"program": "nccl-bench", "op": p.op, "nccl": p.lib.Version().String(), "ranks": p.ranks,
		"processes": p.job.Size, "threads_per_process": p.threads, "gpus_per_thread": p.gpus, "gpus_per_process": p.threads * p.gpus, "rows": p.rows, "avg_busbw": avg,
		"warmup_iters": p.warm, "iterations": p.iters, "validation": p.check,
		"graph": p.graphs, "local_register": p.register, "report_cputime": p.cpuTime, "register": registerNames[p.register], "allocator": p.alloc}
	doc["out_of_bounds"] = map[string]any{"count": p.failed, "okay": p.failed == 0}
	cu := p.lib.CUDA()
	doc["nccl_path"], doc["cudart"], doc["cudart_path"] = p.lib.Path, cudaRuntime(cu), cu.Path
	if p.path != "" {
		doc["path"] = p.path
	}
	if p.gpuThreads {
		doc["gpu_threads"] = true
	}
	return json.NewEncoder(p.w).Encode(doc)
}

// plot draws the out-of-place busbw into an SVG file, beside a saved
// nccl-tests output if overlay names one.
func (p *report) plot(file, overlay string) error {
	if !p.show {
		return nil
	}
	lines := []series{{Name: "nccl-bench (gonccl)", Color: "#1f77b4"}}
	for _, r := range p.rows {
		lines[0].Points = append(lines[0].Points, [2]float64{float64(r.Size), r.OutBusBW})
	}
	if overlay != "" {
		pts, err := readNCCLTests(overlay)
		if err != nil {
			return err
		}
		lines = append(lines, series{Name: "nccl-tests", Color: "#d62728", Dashed: true, Points: pts})
	}
	title := fmt.Sprintf("%s, %d GPUs, NCCL %s: bus bandwidth (out of place)", p.op, p.ranks, p.lib.Version())
	return os.WriteFile(file, []byte(svg(title, lines)), 0o644)
}

// cudaRuntime is the CUDA runtime's version as "13.0", or "unknown".
func cudaRuntime(cu *nccl.CUDA) string {
	v, err := cu.RuntimeVersion()
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}
