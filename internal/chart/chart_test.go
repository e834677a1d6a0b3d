package chart

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sample() Chart {
	return Chart{Title: "pingpong", XLabel: "message size (bytes)", YLabel: "MB/s", LogX: true,
		Series: []Series{
			{Name: "mx", X: []float64{0, 8, 1024, 65536}, Y: []float64{0, 1.5, 150, 900}},
			{Name: "udp baseline", X: []float64{0, 8, 1024, 65536}, Y: []float64{0, 2, 180, 1100}},
		}}
}

// Both formats are written; the SVG names both series in its legend, and
// the PNG decodes to an image with more than the background in it.
func TestSave(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "c.svg")
	if err := sample().Save(svg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "udp baseline", "pingpong", "1K", "64K"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	pngPath := filepath.Join(dir, "c.PNG")
	if err := sample().Save(pngPath); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	colors := map[[4]uint32]bool{}
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 3 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 3 {
			r, g, b, a := img.At(x, y).RGBA()
			colors[[4]uint32{r, g, b, a}] = true
		}
	}
	if len(colors) < 4 {
		t.Errorf("the PNG has %d colours: blank?", len(colors))
	}
}

func TestBadInput(t *testing.T) {
	for _, p := range []string{"x.pdf", "x", "plot.svg.txt"} {
		if err := CheckPath(p); err == nil || !strings.Contains(err.Error(), ".svg or .png") {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
	}
	empty := Chart{LogX: true, Series: []Series{{Name: "a", X: []float64{0}, Y: []float64{1}}}}
	if err := empty.Save(filepath.Join(t.TempDir(), "e.svg")); err == nil {
		t.Error("a chart with nothing to draw was saved")
	}
}

func TestTicks(t *testing.T) {
	ticks := sizeTicks{}.Ticks(8, 4<<20)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if len(labels) < 3 || len(labels) > 12 || labels[0] != "16" {
		t.Errorf("labels %v", labels)
	}
}

// TestLogY: a chart whose series span six decades is drawn on a log y
// axis labelled in powers of ten, a zero point left out rather than
// refusing the chart.
func TestLogY(t *testing.T) {
	c := Chart{Title: "alltoall", XLabel: "ranks", YLabel: "us per round", LogX: true, LogY: true,
		Series: []Series{
			{Name: "8 B", X: []float64{4, 8, 16}, Y: []float64{0, 3, 9}},
			{Name: "1 MiB", X: []float64{4, 8, 16}, Y: []float64{2e5, 9e5, 4e6}},
		}}
	path := filepath.Join(t.TempDir(), "log.svg")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 MiB", "1e+06", "10"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}
