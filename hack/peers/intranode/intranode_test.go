package intranode

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseNetPIPE(t *testing.T) {
	// Lines as NetPIPE 3.7.2 prints them ("%8d %lf %12.8lf": bytes, Mbps
	// = bits / (t * 1024 * 1024), t). At 8 bytes the time comes from the
	// Mbps (64 / (471.237920 * 2^20) s = 0.129521 us, printed 0.13); a
	// line whose Mbps disagrees with its seconds keeps the seconds.
	pts, err := ParseNetPIPE([]byte("       8 471.237920   0.00000013\n 4194304 4865.425603   0.00657702\n       8 100.000000   0.00000013\n"))
	if err != nil || len(pts) != 3 {
		t.Fatalf("%v %v", pts, err)
	}
	if pts[0].Size != 8 || math.Abs(pts[0].OneWayUS-0.129521) > 1e-6 || math.Abs(pts[1].MBPerS-4194304/0.00657702/1e6) > 1e-2 || math.Abs(pts[2].OneWayUS-0.13) > 1e-9 {
		t.Errorf("points %+v", pts)
	}
	for _, bad := range []string{"8 1.0\n", "x 1 1\n", "8 1 0\n", "8 1 -1\n", "-8 1 1\n", "8 NaN 1\n"} {
		if _, err := ParseNetPIPE([]byte(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v, want an error naming line 1", bad, err)
		}
	}
}

func TestTableRatios(t *testing.T) {
	paths := []Path{
		{Name: "Open MPI, CMA", Points: map[int]Point{8: {Size: 8, OneWayUS: 0.5}, 4 << 20: {Size: 4 << 20, MBPerS: 5000}}},
		{Name: "Open MPI, CMA off", Points: map[int]Point{8: {Size: 8, OneWayUS: 0.2}, 4 << 20: {Size: 4 << 20, MBPerS: 4000}}},
		{Name: "MPICH", Points: map[int]Point{8: {Size: 8, OneWayUS: 0.3}, 4 << 20: {Size: 4 << 20, MBPerS: 6000}}},
		{Name: "mx cma", IsMX: true, Points: map[int]Point{8: {Size: 8, OneWayUS: 0.4}, 4 << 20: {Size: 4 << 20, MBPerS: 9000, StreamMBs: 9500}}},
		{Name: "mx rings", IsMX: true, Points: map[int]Point{8: {Size: 8, OneWayUS: 0.25}, 4 << 20: {Size: 4 << 20, MBPerS: 3000}}},
	}
	var b bytes.Buffer
	r := WriteTable(&b, paths, []int{8, 4 << 20}, "Open MPI")
	if math.Abs(r.Latency8-1.25) > 1e-9 || r.MX8Path != "mx rings" || r.OMPI8Path != "Open MPI, CMA off" || math.Abs(r.BW4M-1.5) > 1e-9 || r.Peer4MAt != "MPICH" {
		t.Errorf("ratios %+v", r)
	}
	for _, want := range []string{"= 1.25x (target <= 1.5x: met)", "= 1.50x (target >= 1.5x: met)", "9500"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	dir := t.TempDir()
	if err := Plot(paths, dir+"/bw.svg", dir+"/lat.svg"); err != nil {
		t.Fatal(err)
	}
}

// TestBestOfRounds: each figure comes from its best round, a strategy from
// the round of the best latency, and the ratios from the merged paths.
func TestBestOfRounds(t *testing.T) {
	round := func(ompi8, mx8, mx4M, stream float64, strategy string) []Path {
		return []Path{
			{Name: "Open MPI, CMA", Points: map[int]Point{8: {Size: 8, OneWayUS: ompi8}, 4 << 20: {Size: 4 << 20, MBPerS: 5000}}},
			{Name: "mx shared", IsMX: true, Points: map[int]Point{8: {Size: 8, OneWayUS: mx8, Strategy: strategy}, 4 << 20: {Size: 4 << 20, MBPerS: mx4M, StreamMBs: stream}}},
		}
	}
	best := Best([][]Path{round(0.36, 0.21, 40000, 9000, "eager"), round(0.13, 0.45, 48000, 8000, "lane"), {{Name: "mx shared", IsMX: true, Points: map[int]Point{64 << 10: {Size: 64 << 10, MBPerS: 7}}}}})
	if len(best) != 2 || best[0].Name != "Open MPI, CMA" || best[1].Name != "mx shared" {
		t.Fatalf("paths %+v", best)
	}
	mx := best[1].Points
	if mx[8].OneWayUS != 0.21 || mx[8].Strategy != "eager" || mx[4<<20].MBPerS != 48000 || mx[4<<20].StreamMBs != 9000 || mx[64<<10].MBPerS != 7 {
		t.Errorf("mx points %+v", mx)
	}
	if r := Compute(best, "Open MPI"); math.Abs(r.Latency8-0.21/0.13) > 1e-9 || math.Abs(r.BW4M-48000.0/5000) > 1e-9 {
		t.Errorf("ratios %+v", r)
	}
}

// FuzzParseNetPIPE: whatever NetPIPE (or a truncated file) wrote, the
// parser refuses it or returns one point per non-empty line whose figures
// reprint to the same numbers (an oracle by formatting, not by parsing).
func FuzzParseNetPIPE(f *testing.F) {
	f.Add([]byte("       8 471.237920   0.00000013\n"))
	f.Add([]byte("1 2 3\n\n4 5 6"))
	f.Add([]byte("8 1e309 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pts, err := ParseNetPIPE(b)
		if err != nil {
			return
		}
		lines := 0
		for _, l := range strings.Split(string(b), "\n") {
			if len(strings.Fields(l)) > 0 {
				lines++
			}
		}
		if len(pts) != lines {
			t.Fatalf("%d points from %d lines", len(pts), lines)
		}
		var secs []float64 // each line's seconds, read apart from the parser
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				sec, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err != nil {
					t.Fatalf("accepted %q: %v", l, err)
				}
				secs = append(secs, sec)
			}
		}
		for i, p := range pts {
			if p.Size < 0 || !(p.OneWayUS > 0) || math.IsInf(p.MBPerS, 0) || math.IsNaN(p.MBPerS) {
				t.Fatalf("bad point %+v", p)
			}
			if d := math.Abs(p.OneWayUS - secs[i]*1e6); d > 0.0051 {
				t.Fatalf("point %+v is %g us from its line's seconds %g", p, d, secs[i])
			}
			if got := fmt.Sprint(p.MBPerS); p.Size == 0 && got != "0" {
				t.Fatalf("size 0 at %s MB/s", got)
			}
		}
	})
}
