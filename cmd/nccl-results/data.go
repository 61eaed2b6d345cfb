package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Run is one run of a benchmark in nccl-bench's -json schema (cmd/nccl-bench,
// output.go): the header fields and the rows. The fields after Path are what
// a text log or the importer adds: which program produced the run, on which
// machine and when, and, for a summary of several runs, which statistic the
// rows hold.
type Run struct {
	Op             string       `json:"op"`
	NCCL           string       `json:"nccl"`
	Ranks          int          `json:"ranks"`
	Processes      int          `json:"processes"`
	Threads        int          `json:"threads_per_process"`
	GPUsPerThread  int          `json:"gpus_per_thread"`
	GPUsPerProcess int          `json:"gpus_per_process"`
	GPUThreads     bool         `json:"gpu_threads,omitempty"` // nccl-bench -threads
	Rows           []Row        `json:"rows"`
	AvgBusBW       float64      `json:"avg_busbw"`
	Warmup         int          `json:"warmup_iters"`
	Iters          int          `json:"iterations"`
	Validation     int          `json:"validation"`
	Graph          int          `json:"graph"`
	LocalRegister  int          `json:"local_register"`
	ReportCPUTime  bool         `json:"report_cputime"`
	Register       string       `json:"register,omitempty"`
	Allocator      string       `json:"allocator,omitempty"`
	OutOfBounds    *OutOfBounds `json:"out_of_bounds,omitempty"`
	NCCLPath       string       `json:"nccl_path,omitempty"`
	CUDART         string       `json:"cudart,omitempty"`
	CUDARTPath     string       `json:"cudart_path,omitempty"`
	Path           string       `json:"path,omitempty"`

	Program        string `json:"program"`                   // nccl-bench, nccl-tests, nonblocking-ref.c, nonblocking-go
	ProgramVersion string `json:"program_version,omitempty"` // nccl-tests' version, or the gonccl commit of the binary
	Machine        string `json:"machine,omitempty"`         // e.g. "4 × H200"
	Host           string `json:"host,omitempty"`            // which machine of that kind, where runs spread over several
	Measured       string `json:"measured,omitempty"`        // date
	Round          int    `json:"round,omitempty"`           // runs of one round ran back to back, the programs in turn
	Variant        string `json:"variant,omitempty"`         // anything run differently from the plain command
	Blocking       *bool  `json:"blocking,omitempty"`        // communicators; absent: blocking (the default)
	Statistic      string `json:"statistic,omitempty"`       // absent: one run; "median": each row the median of of_runs runs
	OfRuns         int    `json:"of_runs,omitempty"`
	Source         string `json:"source,omitempty"` // commit:folder/file of the text log it was read from
}

// OutOfBounds is nccl-tests' footer: checked runs with a wrong element.
type OutOfBounds struct {
	Count int  `json:"count"`
	Okay  bool `json:"okay"`
}

// Row is one size, as nccl-bench's -json writes it. Text logs give one of
// time and cputime, and summaries the out-of-place half alone: what a source
// does not give is left out.
type Row struct {
	Size      int             `json:"size"`
	Count     int             `json:"count"`
	Type      string          `json:"type"`
	Op        string          `json:"redop"`
	Root      int             `json:"root"`
	OutTimeUs float64         `json:"out_of_place_time_us,omitempty"`
	OutCPUUs  float64         `json:"out_of_place_cpu_time_us,omitempty"`
	OutAlgBW  float64         `json:"out_of_place_algbw"`
	OutBusBW  float64         `json:"out_of_place_busbw"`
	OutWrong  int             `json:"out_of_place_wrong"`
	OutIter   json.RawMessage `json:"out_of_place_per_iter,omitempty"`
	InTimeUs  float64         `json:"in_place_time_us,omitempty"`
	InCPUUs   float64         `json:"in_place_cpu_time_us,omitempty"`
	InAlgBW   float64         `json:"in_place_algbw,omitempty"`
	InBusBW   float64         `json:"in_place_busbw,omitempty"`
	InWrong   int             `json:"in_place_wrong,omitempty"`
	InIter    json.RawMessage `json:"in_place_per_iter,omitempty"`
	InSkipped bool            `json:"in_place_skipped,omitempty"`
}

// Layout names how the ranks are laid out, in the flags of both programs.
func (r *Run) Layout() string {
	if r.GPUThreads {
		return fmt.Sprintf("-g %d -threads", r.GPUsPerThread)
	}
	switch {
	case r.Processes > 1 && r.Threads <= 1:
		return fmt.Sprintf("-np %d", r.Processes)
	case r.Processes > 1:
		return fmt.Sprintf("-np %d -t %d -g %d", r.Processes, r.Threads, r.GPUsPerThread)
	case r.Threads > 1:
		return fmt.Sprintf("-t %d -g %d", r.Threads, r.GPUsPerThread)
	}
	return fmt.Sprintf("-g %d", r.GPUsPerThread)
}

// Mode is the launch mode in both programs' flags: "plain", "-G 10", "-R 2 -G 10".
func (r *Run) Mode() string {
	var f []string
	if r.LocalRegister > 0 {
		f = append(f, fmt.Sprintf("-R %d", r.LocalRegister))
	}
	if r.Graph > 0 {
		f = append(f, fmt.Sprintf("-G %d", r.Graph))
	}
	if r.ReportCPUTime {
		f = append(f, "-C 1")
	}
	if len(f) == 0 {
		return "plain"
	}
	return strings.Join(f, " ")
}

// row is the run's row of a size, or nil.
func (r *Run) row(size int) *Row {
	for i := range r.Rows {
		if r.Rows[i].Size == size {
			return &r.Rows[i]
		}
	}
	return nil
}

// ReadRuns reads a results file: a JSON array of runs.
func ReadRuns(path string) ([]Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var runs []Run
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return runs, nil
}

// WriteRuns writes runs as a JSON array, one run per line, so that a file
// stays small and a diff shows the runs that changed.
func WriteRuns(path string, runs []Run) error {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, r := range runs {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(line)
		if i < len(runs)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Results is every results file of a folder, by file name.
type Results map[string][]Run

// Load reads every *.json file of dir.
func Load(dir string) (Results, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	res := Results{}
	for _, n := range names {
		runs, err := ReadRuns(n)
		if err != nil {
			return nil, err
		}
		res[filepath.Base(n)] = runs
	}
	return res, nil
}

// Get is the runs of a file that every filter keeps; it fails where none do,
// so that a renamed file or field cannot empty a table quietly.
func (res Results) Get(file string, keep ...func(*Run) bool) []Run {
	var out []Run
next:
	for _, r := range res[file] {
		for _, k := range keep {
			if !k(&r) {
				continue next
			}
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		panic(fmt.Sprintf("no runs in %s match", file))
	}
	return out
}

// Filters for Get.
func layout(l string) func(*Run) bool { return func(r *Run) bool { return r.Layout() == l } }
func mode(m string) func(*Run) bool   { return func(r *Run) bool { return r.Mode() == m } }
func host(h string) func(*Run) bool   { return func(r *Run) bool { return r.Host == h } }
func blocking(b bool) func(*Run) bool {
	return func(r *Run) bool { return (r.Blocking == nil || *r.Blocking) == b }
}

// hosts is the hosts of runs in the order they first appear.
func hosts(runs []Run) []string {
	var hs []string
	seen := map[string]bool{}
	for _, r := range runs {
		if !seen[r.Host] {
			seen[r.Host] = true
			hs = append(hs, r.Host)
		}
	}
	return hs
}

// sizes is every size of the runs, in order.
func sizes(runs []Run) []int {
	seen := map[int]bool{}
	var s []int
	for _, r := range runs {
		for _, w := range r.Rows {
			if !seen[w.Size] {
				seen[w.Size] = true
				s = append(s, w.Size)
			}
		}
	}
	sort.Ints(s)
	return s
}
