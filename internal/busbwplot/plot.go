// Package busbwplot draws bus bandwidth against message size as an SVG, for
// cmd/nccl-bench's -plot and cmd/nccl-results' charts.
package busbwplot

import (
	"fmt"
	"math"
	"strings"
)

// Series is one line of a chart: (size in bytes, busbw in GB/s) points.
type Series struct {
	Name, Color string
	Dashed      bool
	Points      [][2]float64
}

// SVG draws the series on a log2 size axis and a linear busbw axis; points
// of size 0 are left out (a log axis has no room for them).
func SVG(title string, all []Series) string {
	const w, h, left, right, top, bottom = 760.0, 420.0, 70.0, 20.0, 40.0, 60.0
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 1.0
	for i := range all { // a log axis has no room for empty messages
		kept := all[i].Points[:0]
		for _, p := range all[i].Points {
			if p[0] > 0 {
				kept = append(kept, p)
			}
		}
		all[i].Points = kept
	}
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

// Palette colours the lines of a chart, one per label.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"}
