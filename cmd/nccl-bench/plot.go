package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gonccl/nccl/internal/busbwplot"
)

// series is one line of the chart (see busbwplot).
type series = busbwplot.Series

var (
	svg     = busbwplot.SVG
	palette = busbwplot.Palette
)

// readNCCLTests takes size and out-of-place busbw from nccl-tests' table (or
// nccl-bench's, whose columns are the same).
func readNCCLTests(path string) ([][2]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pts [][2]float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		size, err1 := strconv.ParseFloat(fs[0], 64)
		bus, err2 := strconv.ParseFloat(fs[7], 64)
		if err1 == nil && err2 == nil && size > 0 {
			pts = append(pts, [2]float64{size, bus})
		}
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("%s: no nccl-tests rows", path)
	}
	return pts, sc.Err()
}

// replot draws saved outputs of nccl-bench or nccl-tests into an SVG file
// without a GPU: spec is "label=file,label=file,..."; a label that starts
// with "nccl-tests" is drawn dashed, and labels that differ only in a leading
// "nccl-bench" or "nccl-tests" share a colour (so "nccl-bench -G=a,nccl-tests
// -G=b" pairs the two).
func replot(file, title, spec string) error {
	var lines []series
	colors := map[string]string{}
	for _, item := range strings.Split(spec, ",") {
		label, path, ok := strings.Cut(item, "=")
		if !ok || label == "" || path == "" {
			return fmt.Errorf("-replot %q: want label=file", item)
		}
		pts, err := readNCCLTests(path)
		if err != nil {
			return err
		}
		dashed := strings.HasPrefix(label, "nccl-tests")
		mode := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(label, "nccl-tests"), "nccl-bench"))
		color, seen := colors[mode]
		if !seen {
			color = palette[len(colors)%len(palette)]
			colors[mode] = color
		}
		lines = append(lines, series{Name: label, Color: color, Dashed: dashed, Points: pts})
	}
	return os.WriteFile(file, []byte(svg(title, lines)), 0o644)
}
