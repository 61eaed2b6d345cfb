package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// BenchSet is a section of Go benchmark output (*.txt in docs/results, Go's
// benchmark format) under one set of configuration lines ("key: value"):
// each benchmark's ns/op and allocs/op, in the order the runs came.
type BenchSet struct {
	File   string
	Config map[string]string
	NsOp   map[string][]float64
	Allocs map[string][]float64
}

// BenchSets is every section of every benchmark file, files in name order.
type BenchSets []*BenchSet

var (
	benchLine  = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op(?:\s+\d+ B/op\s+(\d+) allocs/op)?`)
	configLine = regexp.MustCompile(`^([a-z][a-z0-9-]*): (.*)$`)
)

// LoadBench reads every *.txt of dir.
func LoadBench(dir string) (BenchSets, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	var all BenchSets
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			return nil, err
		}
		sets, err := parseBench(filepath.Base(n), bufio.NewScanner(f))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		all = append(all, sets...)
	}
	return all, nil
}

func parseBench(file string, sc *bufio.Scanner) (BenchSets, error) {
	var sets BenchSets
	config := map[string]string{}
	var cur *BenchSet
	for sc.Scan() {
		line := sc.Text()
		if m := configLine.FindStringSubmatch(line); m != nil {
			if config[m[1]] != m[2] {
				config = clone(config)
				config[m[1]] = m[2]
				cur = nil
			}
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if cur == nil {
			cur = &BenchSet{File: file, Config: config, NsOp: map[string][]float64{}, Allocs: map[string][]float64{}}
			sets = append(sets, cur)
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		cur.NsOp[m[1]] = append(cur.NsOp[m[1]], v)
		if m[3] != "" {
			a, _ := strconv.ParseFloat(m[3], 64)
			cur.Allocs[m[1]] = append(cur.Allocs[m[1]], a)
		}
	}
	return sets, sc.Err()
}

func clone(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Get is the first section of a file, or nil.
func (bs BenchSets) Get(file string) *BenchSet {
	for _, s := range bs {
		if s.File == file {
			return s
		}
	}
	return nil
}

// rounds is how many times the set ran its benchmarks.
func (s *BenchSet) rounds() int {
	n := 0
	for _, v := range s.NsOp {
		n = max(n, len(v))
	}
	return n
}

// ratios is a's time over b's, run by run (the k-th run of each).
func (s *BenchSet) ratios(a, b string) []float64 {
	x, y := s.NsOp[a], s.NsOp[b]
	var r []float64
	for k := 0; k < len(x) && k < len(y); k++ {
		r = append(r, x[k]/y[k])
	}
	return r
}

// label names the set: its machine and, where a file holds several, its host.
func (s *BenchSet) label() string {
	l := s.Config["machine"]
	if h := s.Config["host"]; h != "" {
		l += ", host " + h
	}
	return strings.TrimSpace(l)
}
