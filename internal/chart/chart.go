// Package chart draws the curves gomx's tools measure — throughput and
// latency against message or copy size — into an SVG or PNG file with
// gonum.org/v1/plot, one line per series: the gomx figure and its baselines
// on the same axes, as the papers behind the tools compare them.
//
// Sizes span several orders of magnitude, so the x axis is logarithmic
// (base 2) when every size is positive; a size of 0 (an empty message)
// cannot sit on a log axis and is left out of the curve, which the chart's
// caller says in its output.
package chart

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one curve: Y against X, named in the legend.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is one plot.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	// LogX draws the x axis in powers of two; points with X <= 0 are left
	// out.
	LogX bool
	// LogY draws the y axis in powers of ten, for figures that span
	// several orders of magnitude (a time per round from 8 B to 1 MiB);
	// points with Y <= 0 are left out.
	LogY   bool
	Series []Series
}

// CheckPath reports whether path names a file format Save can write:
// .svg or .png. It is meant for flag validation, before a run.
func CheckPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("%q: want a file name ending in .svg or .png", path)
}

// Save draws c into path (its extension picks SVG or PNG), 16 x 10 cm.
func (c Chart) Save(path string) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks{}
	}
	p.Y.Tick.Marker = plainTicks{}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	drawn, top, bottom := 0, 0.0, math.Inf(1)
	for i, s := range c.Series {
		pts := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			if j >= len(s.Y) || (c.LogX && s.X[j] <= 0) || (c.LogY && s.Y[j] <= 0) || math.IsNaN(s.Y[j]) || math.IsInf(s.Y[j], 0) {
				continue
			}
			pts = append(pts, plotter.XY{X: s.X[j], Y: s.Y[j]})
			top, bottom = max(top, s.Y[j]), min(bottom, s.Y[j])
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("chart %s: %w", s.Name, err)
		}
		col := plotutil.Color(i)
		line.Color, points.Color = col, col
		line.Width = vg.Points(1.5)
		points.Shape = plotutil.Shape(i)
		if i > 0 {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		drawn++
	}
	if drawn == 0 {
		return errors.New("chart: no point to draw (every size was 0, or no series)")
	}
	p.Y.Min = 0
	// Headroom above the highest point for the legend, one line per series.
	p.Y.Max = top * (1.1 + 0.08*float64(drawn))
	if c.LogY {
		// The same headroom in decades: the legend takes the top of the
		// chart whatever the axis.
		p.Y.Min = bottom / 2
		p.Y.Max = top * math.Pow(10, 0.15*float64(drawn)+0.3)
	}
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
		return fmt.Errorf("write the plot: %w", err)
	}
	return nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros:
// 25000, not 25000.00.
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 6, 64)
		}
	}
	return ts
}

// sizeTicks labels a log-2 axis of byte sizes at powers of two: 1, 4, 16,
// ... as 1, 4, 16, 64, 256, 1K, 4K, ...
type sizeTicks struct{}

// Ticks implements plot.Ticker.
func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	if lo <= 0 {
		lo = 1
	}
	e0 := int(math.Floor(math.Log2(lo)))
	e1 := int(math.Ceil(math.Log2(hi)))
	step := 1
	for (e1-e0)/step > 10 {
		step *= 2
	}
	for e := e0; e <= e1; e++ {
		v := math.Exp2(float64(e))
		if v < lo || v > hi {
			continue
		}
		t := plot.Tick{Value: v}
		if e%step == 0 {
			t.Label = sizeLabel(v)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// sizeLabel writes a power of two with a binary suffix: 512, 1K, 4M.
func sizeLabel(v float64) string {
	n := int64(v)
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprintf("%d", n)
}
