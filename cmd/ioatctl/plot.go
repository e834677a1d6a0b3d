package main

import (
	"fmt"

	"github.com/gomx-dev/gomx/internal/chart"
)

// checkPlot validates --plot before a run: a .svg or .png file, and more
// than one size to draw a curve through.
func checkPlot(cmd, path string, sizes int) error {
	if path == "" {
		return nil
	}
	if err := chart.CheckPath(path); err != nil {
		return usagef(cmd, "--plot %v", err)
	}
	if sizes < 2 {
		return usagef(cmd, "--plot draws throughput against size: add --sweep or --sizes with two sizes or more")
	}
	return nil
}

// plotCopy draws the engine's and the CPU's MB/s against size; cache
// describes the cache pattern for the title.
func plotCopy(path string, r *rig, rows []copyRow, cache string) error {
	var x, eng, cpu []float64
	for _, row := range rows {
		x = append(x, float64(row.Size))
		eng = append(eng, row.MBPerS)
		cpu = append(cpu, row.CPUMBPerS)
	}
	what := "CBDMA " + r.name
	if r.emulated {
		what = "emulated engine (CPU threads)"
	}
	c := chart.Chart{
		Title:  fmt.Sprintf("ioatctl copy: %s, %s", what, cache),
		XLabel: "copy size (bytes)", YLabel: "MB/s (10^6 bytes/s)", LogX: true,
		Series: []chart.Series{
			{Name: "engine (" + r.queueCount() + ")", X: x, Y: eng},
			{Name: "CPU baseline (Go copy, one core)", X: x, Y: cpu},
		},
	}
	if err := c.Save(path); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return nil
}
