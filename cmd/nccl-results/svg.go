package main

import (
	"fmt"

	"github.com/gonccl/nccl/internal/busbwplot"
)

type series = busbwplot.Series

var (
	svg     = busbwplot.SVG
	palette = busbwplot.Palette
)

// charts draws busbw against size for every operation of the one-process-
// per-GPU series, nccl-bench solid and nccl-tests dashed in the colour of
// the mode: name → SVG.
func charts(res Results) map[string]string {
	out := map[string]string{}
	var cs []compare
	for _, c := range comparisons(res, modesBench, modesTests) {
		if c.bench.Layout() == "-np 4" {
			cs = append(cs, c)
		}
	}
	cs = append(cs, comparisons(res, opsBench, opsTests)...)
	byOp := map[string][]compare{}
	var order []string
	for _, c := range cs {
		if byOp[c.bench.Op] == nil {
			order = append(order, c.bench.Op)
		}
		byOp[c.bench.Op] = append(byOp[c.bench.Op], c)
	}
	for _, op := range order {
		var lines []series
		for i, c := range byOp[op] {
			for _, r := range []Run{c.bench, c.tests} {
				s := series{Name: r.Program + " " + r.Mode(), Color: palette[i%len(palette)], Dashed: r.Program == "nccl-tests"}
				for _, w := range r.Rows {
					t := us(&r, w.Size)
					s.Points = append(s.Points, [2]float64{float64(w.Size), float64(w.Size) / t / 1e3 * ops[op].factor(float64(r.Ranks))})
				}
				lines = append(lines, s)
			}
		}
		r := byOp[op][0].bench
		title := fmt.Sprintf("%s, %s, %s, NCCL %s: busbw (out of place, medians)", op, r.Layout(), r.Machine, r.NCCL)
		out[fmt.Sprintf("h100x4-np4-%s.svg", op)] = svg(title, lines)
	}
	return out
}
