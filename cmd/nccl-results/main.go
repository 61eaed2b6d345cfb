// Command nccl-results keeps the project's measurements as data and renders
// the documents' tables and charts from them.
//
// The data live in docs/results: one JSON file per machine, library and
// series of runs, each a JSON array of runs in nccl-bench's -json schema
// (cmd/nccl-bench/output.go: the header fields and the rows), with a field
// "program" saying which program produced the run (nccl-bench, nccl-tests,
// or the C and Go programs of scripts/bench-nonblocking.sh), and the
// machine, date, host and round it ran on; and Go benchmark output (*.txt,
// Go's benchmark format) for the cost of one call against cgo.
//
//	go run ./cmd/nccl-results                 # rewrite the marked tables and the SVGs
//	go run ./cmd/nccl-results -check          # exit 1 where a document differs from the data
//	go run ./cmd/nccl-results import -o docs/results/NAME.json [-set key=value]... [-program P] [-modes M,...] LOG...
//
// Rendering replaces, in docs/performance.md and docs/call-cost.md, what
// stands between a line "<!-- results: NAME -->" and the next "<!-- end -->"
// with the table NAME made from the data (render.go), and writes
// docs/results/*.svg: busbw against size, nccl-bench against nccl-tests.
// Every number of those tables comes from the files; TestDocsMatchData fails
// where a document and its data part.
//
// import reads logs (parse.go): nccl-bench's -json documents, the tables of
// nccl-bench and nccl-tests with their header lines, the summaries of
// scripts/bench-modes.sh and the lines of scripts/bench-nonblocking.sh, and
// appends their runs to the file -o names. -set key=value sets a field of every run read (the value as JSON
// where it parses, else as a string): machine, measured, host, variant,
// local_register (nccl-tests' header does not print -R), and so on. The
// run files of scripts/bench-modes.sh (OUT/runs/MODE-OP-PROG-REP.txt) give
// their mode's -R and their round from the name.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "import" {
		if err := importCmd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "nccl-results import:", err)
			os.Exit(1)
		}
		return
	}
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "write nothing: exit 1 where a document or chart differs from what the data renders")
	flag.Parse()
	diffs, err := render(*root, !*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nccl-results:", err)
		os.Exit(1)
	}
	for _, d := range diffs {
		fmt.Println(d)
	}
	if *check && len(diffs) > 0 {
		os.Exit(1)
	}
}

type sets []string

func (s *sets) String() string     { return strings.Join(*s, ",") }
func (s *sets) Set(v string) error { *s = append(*s, v); return nil }

func importCmd(args []string) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	out := fs.String("o", "", "the results file to append to (made if missing)")
	var set sets
	fs.Var(&set, "set", "key=value: set a field of every run read (repeatable)")
	only := fs.String("modes", "", "keep the runs of these modes (plain, -G 10, -R 2, -R 2 -G 10, ...; comma-separated)")
	prog := fs.String("program", "", "keep the runs of this program (a bench-modes.sh summary holds both)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("usage: import -o FILE [-set key=value]... LOG...")
	}
	var runs []Run
	if _, err := os.Stat(*out); err == nil {
		if runs, err = ReadRuns(*out); err != nil {
			return err
		}
	}
	for _, path := range fs.Args() {
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got, err := Parse(string(text))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, r := range got {
			fromName(filepath.Base(path), &r)
			if err := setFields(&r, set); err != nil {
				return err
			}
			if *only != "" && !contains(strings.Split(*only, ","), r.Mode()) || *prog != "" && r.Program != *prog {
				continue
			}
			runs = append(runs, r)
		}
	}
	return WriteRuns(*out, runs)
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if strings.TrimSpace(l) == s {
			return true
		}
	}
	return false
}

// modesRunFile is the name of a run's file under scripts/bench-modes.sh's OUT/runs.
var modesRunFile = regexp.MustCompile(`^(plain|graph|sym|symgraph|cpu)-\w+-(tests|bench)-(\d+)\.txt$`)

// fromName takes from a bench-modes.sh run file's name what nccl-tests'
// header leaves out: -R 2 for the modes over symmetric windows, and the round.
func fromName(name string, r *Run) {
	m := modesRunFile.FindStringSubmatch(name)
	if m == nil {
		return
	}
	if m[1] == "sym" || m[1] == "symgraph" {
		r.LocalRegister = 2
	}
	if m[1] == "cpu" {
		r.ReportCPUTime = true
	}
	r.Round = atoi(m[3])
}

// setFields sets "key=value" fields of a run through its JSON form.
func setFields(r *Run, set []string) error {
	if len(set) == 0 {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("-set %q: want key=value", kv)
		}
		var val any = v
		if json.Valid([]byte(v)) {
			_ = json.Unmarshal([]byte(v), &val)
		}
		m[k] = val
	}
	if b, err = json.Marshal(m); err != nil {
		return err
	}
	*r = Run{}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		return fmt.Errorf("-set: %w", err)
	}
	return nil
}
