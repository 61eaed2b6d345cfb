package main

import (
	"fmt"
	"math"
	"strings"
)

// series is one line of a chart: (size in bytes, busbw in GB/s) points.
type series struct {
	Name, Color string
	Dashed      bool
	Points      [][2]float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"}

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

// svg draws the series on a log2 size axis and a linear busbw axis (as
// cmd/nccl-bench's -plot).
func svg(title string, all []series) string {
	const w, h, left, right, top, bottom = 760.0, 420.0, 70.0, 20.0, 40.0, 60.0
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 1.0
	for _, s := range all {
		for _, p := range s.Points {
			minX, maxX, maxY = math.Min(minX, math.Log2(p[0])), math.Max(maxX, math.Log2(p[0])), math.Max(maxY, p[1])
		}
	}
	if math.IsInf(minX, 0) || maxX <= minX {
		minX, maxX = 0, 1
	}
	maxY = math.Ceil(maxY/50) * 50
	x := func(size float64) float64 { return left + (math.Log2(size)-minX)/(maxX-minX)*(w-left-right) }
	y := func(bw float64) float64 { return h - bottom - bw/maxY*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="22" font-size="14">%s</text>`+"\n", left, title)
	for v := 0.0; v <= maxY; v += maxY / 5 {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, y(v), w-right, y(v), left-6, y(v)+4, v)
	}
	for e := math.Ceil(minX); e <= maxX; e += 2 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n",
			x(math.Exp2(e)), top, x(math.Exp2(e)), h-bottom, x(math.Exp2(e)), h-bottom+16, human(math.Exp2(e)))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">message size (bytes)</text>`+"\n", (left+w-right)/2, h-18)
	fmt.Fprintf(&b, `<text transform="translate(18,%g) rotate(-90)" text-anchor="middle">busbw (GB/s)</text>`+"\n", (top+h-bottom)/2)
	for i, s := range all {
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6,4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.Color, dash, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/><text x="%g" y="%g">%s</text>`+"\n",
			left+10, top+12+float64(i)*16, left+34, top+12+float64(i)*16, s.Color, dash, left+40, top+16+float64(i)*16, s.Name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func human(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%gG", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%gM", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%gK", v/(1<<10))
	}
	return fmt.Sprintf("%g", v)
}
