package alltoall

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	pts, err := Parse([]byte("8 1000 1.5 2.25 3\n\n65536 409 100 200.5 300\n"), 16)
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{{Ranks: 16, Size: 8, Iters: 1000, TMinUS: 1.5, TAvgUS: 2.25, TMaxUS: 3},
		{Ranks: 16, Size: 65536, Iters: 409, TMinUS: 100, TAvgUS: 200.5, TMaxUS: 300}}
	if len(pts) != len(want) {
		t.Fatalf("got %v, want %v", pts, want)
	}
	for i := range want {
		if pts[i] != want[i] {
			t.Errorf("point %d: %+v, want %+v", i, pts[i], want[i])
		}
	}
	for _, bad := range []string{"8 1000 1 2", "8 0 1 2 3", "-8 10 1 2 3", "8 10 3 2 1", "8 10 1 2 NaN", "x 10 1 2 3", "8 10 1 2 +Inf"} {
		if _, err := Parse([]byte(bad+"\n"), 4); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("Parse(%q) = %v, want an error naming line 1", bad, err)
		}
	}
}

// TestTable: each point is held to its size's target, only points both
// libraries measured are compared, and the best round is the one kept.
func TestTable(t *testing.T) {
	ompi := Best([]Point{{Ranks: 4, Size: 8, TAvgUS: 10, Warmup: 1000}, {Ranks: 4, Size: 1 << 20, TAvgUS: 1000, Warmup: 85}, {Ranks: 8, Size: 8, TAvgUS: 20}})
	mx := Best(
		[]Point{{Ranks: 4, Size: 8, TAvgUS: 12, Schedule: "linear", Warmup: 1000}, {Ranks: 4, Size: 1 << 20, TAvgUS: 400, Schedule: "pairwise", Warmup: 10}},
		[]Point{{Ranks: 4, Size: 8, TAvgUS: 9, Schedule: "bruck", Warmup: 1000}, {Ranks: 16, Size: 8, TAvgUS: 1}},
	)
	var b bytes.Buffer
	v := WriteTable(&b, ompi, mx)
	if v != (Verdict{Points: 2, Met: 2}) {
		t.Errorf("verdict %+v, want 2 of 2 met:\n%s", v, b.String())
	}
	out := b.String()
	for _, want := range []string{"bruck", "0.90x", "0.40x", "<=0.5x", "targets met at 2 of 2 points", "   1000 ", " 85/10 "} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "   16 ") {
		t.Errorf("a point Open MPI did not measure is in the table:\n%s", out)
	}
	mx[Key{4, 1 << 20}] = Point{Ranks: 4, Size: 1 << 20, TAvgUS: 600}
	b.Reset()
	if v := WriteTable(&b, ompi, mx); v.Met != 1 || !strings.Contains(b.String(), "NOT met") {
		t.Errorf("0.6x at 1 MiB passed its 0.5x target: %+v\n%s", v, b.String())
	}
	path := filepath.Join(t.TempDir(), "a2a.svg")
	if err := Plot(ompi, mx, 2, "as many untimed rounds as timed", path); err != nil {
		t.Fatal(err)
	}
	svg, _ := os.ReadFile(path)
	if !bytes.Contains(svg, []byte("2 cores")) {
		t.Error("the plot's title does not name the core count")
	}
	if !bytes.Contains(svg, []byte("as many untimed rounds as timed")) {
		t.Error("the plot's title does not name the warm-up")
	}
}

// TestJobs: small sizes warm up for as many rounds as they are timed and
// large ones for fewer, never under MinWarmup; sizes that share a warm-up
// share a job, and the sizes keep their order.
func TestJobs(t *testing.T) {
	for _, c := range []struct{ size, ranks, want int }{
		{8, 4, 1000}, {4 << 10, 16, 1000}, {64 << 10, 4, 1000}, {64 << 10, 16, 273}, {1 << 20, 4, 85}, {1 << 20, 32, MinWarmup},
	} {
		if got := Warmup(c.size, c.ranks); got != c.want {
			t.Errorf("Warmup(%d, %d ranks) = %d, want %d", c.size, c.ranks, got, c.want)
		}
	}
	w := func(size int) int { return Warmup(size, 16) }
	jobs := Jobs([]int{8, 4 << 10, 64 << 10, 1 << 20, 16}, w)
	want := []Job{{1000, []int{8, 4 << 10}}, {273, []int{64 << 10}}, {MinWarmup, []int{1 << 20}}, {1000, []int{16}}}
	if len(jobs) != len(want) {
		t.Fatalf("Jobs = %+v, want %+v", jobs, want)
	}
	for i := range want {
		if jobs[i].Warmup != want[i].Warmup || !slices.Equal(jobs[i].Sizes, want[i].Sizes) {
			t.Errorf("job %d: %+v, want %+v", i, jobs[i], want[i])
		}
	}
	if one := Jobs([]int{8, 1 << 20}, func(int) int { return 10 }); len(one) != 1 || one[0].Warmup != 10 {
		t.Errorf("one warm-up for every size gave %+v, want one job of 10 rounds", one)
	}
}

// lineRE is the oracle's grammar for a line: five fields, two integers and
// three decimal numbers, written independently of Parse.
var lineRE = regexp.MustCompile(`^[ \t]*(\d+)[ \t]+(\d+)[ \t]+(\d+(?:\.\d*)?)[ \t]+(\d+(?:\.\d*)?)[ \t]+(\d+(?:\.\d*)?)[ \t]*$`)

// FuzzParse checks Parse against that oracle on plain decimal input: what
// the oracle accepts with ordered times and at least one round Parse must
// accept with the same numbers; what Parse accepts must hold its
// invariants.
func FuzzParse(f *testing.F) {
	f.Add([]byte("8 1000 1.5 2.25 3\n"))
	f.Add([]byte("1048576 10 100 200 300\n65536 409 1 1 1\n"))
	f.Add([]byte("8 1000 3 2 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pts, err := Parse(b, 4)
		if err == nil {
			for _, p := range pts {
				if p.Iters < 1 || p.Size < 0 || !(p.TMinUS <= p.TAvgUS && p.TAvgUS <= p.TMaxUS) || p.Ranks != 4 {
					t.Fatalf("Parse accepted %+v", p)
				}
			}
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) != 1 || len(b) > 200 {
			return
		}
		m := lineRE.FindStringSubmatch(lines[0])
		if m == nil {
			return
		}
		size, e1 := strconv.Atoi(m[1])
		iters, e2 := strconv.Atoi(m[2])
		lo, _ := strconv.ParseFloat(m[3], 64)
		avg, _ := strconv.ParseFloat(m[4], 64)
		hi, _ := strconv.ParseFloat(m[5], 64)
		if e1 != nil || e2 != nil || iters < 1 || !(lo <= avg && avg <= hi) {
			return
		}
		if err != nil {
			t.Fatalf("Parse(%q) = %v; the oracle reads size %d, %d rounds, %v <= %v <= %v", b, err, size, iters, lo, avg, hi)
		}
		if len(pts) != 1 || pts[0].Size != size || pts[0].Iters != iters || pts[0].TAvgUS != avg {
			t.Fatalf("Parse(%q) = %+v, the oracle reads size %d, %d rounds, t_avg %v", b, pts, size, iters, avg)
		}
	})
}
