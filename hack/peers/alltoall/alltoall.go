// Package alltoall measures `mxbench alltoall` beside MPI_Alltoall of Debian's
// Open MPI on the same host, in one go, so the ratios compare figures taken
// minutes apart on the same (shared, noisy) machine. `make peers-alltoall`
// runs it through hack/peers/cmd/peers-alltoall.
//
// # The peer
//
// mpi/alltoall.c (embedded as Source) is a small MPI program built with mpicc
// from libopenmpi-dev. It times MPI_Alltoall the way mxbench alltoall times
// its rounds: per size, untimed warm-up rounds, a barrier, then a number of
// timed rounds chosen by mxbench's rule (1000, fewer when a rank would send
// more than 256 MiB); every rank divides its own elapsed time by the rounds,
// and rank 0 prints the fastest, mean and slowest rank's time per round. The
// mean over ranks, t_avg, is IMB's figure and the one compared.
//
// # The warm-up
//
// Both libraries run the same untimed rounds before a size's timed ones,
// Warmup's count by default: as many as the timed rounds, at least 20, so
// many for small blocks and a few for large ones, as the OSU
// micro-benchmarks skip many iterations of small messages and a few of
// large ones. A job's first rounds are not its steady state (mx's ranks
// start with the Go runtime's monitor polling every 20 µs, and its first
// large rounds set up lanes and copies; docs/alltoall.md): 10 rounds of
// 8 B left them in mx's figure. One job runs the sizes that share a
// warm-up (Jobs), on either side, so the MPI program's single WARMUP
// argument and mxbench's --warmup carry the same count.
//
// # The table
//
// One row per (ranks, size): Open MPI's t_avg, mx's t_avg and the schedule
// mx ran, their ratio, and the target the ratio is held to: at most 1 at
// every point, at most 0.5 from 64 KiB up. On a host with fewer cores than
// ranks both run oversubscribed (Open MPI with --oversubscribe and its
// defaults, mx with blocking waits); on a host with a core per rank, mx
// busy-polls as Open MPI does. The plot draws t_avg against ranks, one line
// per size and library, on log axes.
package alltoall

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/internal/chart"
	"github.com/gomx-dev/gomx/internal/units"
)

// Source is the MPI program's C source (mpi/alltoall.c: a directory of its
// own, since the go tool refuses C files in a package without cgo), built
// by the command with mpicc.
//
//go:embed mpi/alltoall.c
var Source []byte

// Point is one library's time per round at one job size and message size.
type Point struct {
	// Ranks is the job's processes, Size a block's bytes, Iters the
	// timed rounds.
	Ranks, Size, Iters int
	// Warmup is the untimed rounds run before the Iters timed ones.
	Warmup int
	// TMinUS, TAvgUS and TMaxUS are the fastest, mean and slowest rank's
	// time per round, in µs.
	TMinUS, TAvgUS, TMaxUS float64
	// Schedule is the schedule mxbench ran (linear, pairwise, bruck)
	// and Wait how its ranks waited (spin, block); both empty for Open
	// MPI, which picks its own schedule inside MPI_Alltoall.
	Schedule, Wait string
}

// Key names a point of the table.
type Key struct{ Ranks, Size int }

// MinWarmup is the fewest untimed rounds Warmup gives a size.
const MinWarmup = 20

// Warmup is the untimed rounds both libraries run before the timed rounds
// of blocks of size bytes among ranks processes: as many as the timed
// rounds (mxbench's rule, as in mpi/alltoall.c: 1000, fewer when a rank
// would send more than 256 MiB), at least MinWarmup; mxbench alltoall's
// own default without --warmup is the same. Among 4 ranks on 2 shared
// CPUs mx's first 400-1,000 rounds of 8 B, 100-200 of 4 KiB, 30-40 of
// 64 KiB and some 10 of 1 MiB took longer than the rest; Open MPI's were
// level after 10 (docs/alltoall.md).
func Warmup(size, ranks int) int {
	perRound := size * max(ranks-1, 1)
	if perRound > 0 && perRound*1000 > 256<<20 {
		return max(MinWarmup, (256<<20)/perRound)
	}
	return 1000
}

// Job is one run of a library: its sizes, in order, each timed after the
// same Warmup rounds.
type Job struct {
	Warmup int
	Sizes  []int
}

// Jobs splits sizes, kept in their order, into runs of consecutive sizes
// that warm up for as many rounds, warmup's count for each.
func Jobs(sizes []int, warmup func(size int) int) []Job {
	var out []Job
	for _, s := range sizes {
		w := warmup(s)
		if n := len(out); n > 0 && out[n-1].Warmup == w {
			out[n-1].Sizes = append(out[n-1].Sizes, s)
			continue
		}
		out = append(out, Job{Warmup: w, Sizes: []int{s}})
	}
	return out
}

// Parse reads the MPI program's output for a job of ranks processes:
// lines of "size iters t_min_us t_avg_us t_max_us". Anything else is
// refused, naming the line; Open MPI's own warnings go to stderr, not
// here.
func Parse(b []byte, ranks int) ([]Point, error) {
	var out []Point
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 5 {
			return nil, fmt.Errorf("alltoall output line %d: %d fields, want size, iterations, t_min, t_avg and t_max", n, len(f))
		}
		size, err1 := strconv.Atoi(f[0])
		iters, err2 := strconv.Atoi(f[1])
		var t [3]float64
		bad := err1 != nil || err2 != nil || size < 0 || iters < 1
		for i := range t {
			v, err := strconv.ParseFloat(f[2+i], 64)
			bad = bad || err != nil || !(v >= 0) || math.IsInf(v, 0)
			t[i] = v
		}
		if bad || !(t[0] <= t[1] && t[1] <= t[2]) {
			return nil, fmt.Errorf("alltoall output line %d: %q is not size, iterations and t_min <= t_avg <= t_max", n, sc.Text())
		}
		out = append(out, Point{Ranks: ranks, Size: size, Iters: iters, TMinUS: t[0], TAvgUS: t[1], TMaxUS: t[2]})
	}
	return out, sc.Err()
}

// Best merges several rounds of one library's points into one per key,
// keeping the lowest t_avg (and that round's schedule), as NetPIPE keeps
// the fastest of its trials; every library gets the same number of rounds.
func Best(rounds ...[]Point) map[Key]Point {
	out := map[Key]Point{}
	for _, pts := range rounds {
		for _, p := range pts {
			k := Key{p.Ranks, p.Size}
			if b, ok := out[k]; !ok || p.TAvgUS < b.TAvgUS {
				out[k] = p
			}
		}
	}
	return out
}

// Target is the most mx's t_avg may be, as a multiple of Open MPI's, at a
// message size: 0.5 from 64 KiB up, 1 below.
func Target(size int) float64 {
	if size >= 64<<10 {
		return 0.5
	}
	return 1
}

// Verdict is the table's summary: how many points were compared and how
// many met their target.
type Verdict struct{ Points, Met int }

// WriteTable prints one row per (ranks, size) that both libraries
// measured, in ascending order, with the warm-up rounds before it (both
// sides', or Open MPI's/mx's when they differ), and the summary line.
func WriteTable(w io.Writer, ompi, mx map[Key]Point) Verdict {
	var keys []Key
	for k := range mx {
		if _, ok := ompi[k]; ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Ranks != keys[j].Ranks {
			return keys[i].Ranks < keys[j].Ranks
		}
		return keys[i].Size < keys[j].Size
	})
	var v Verdict
	fmt.Fprintf(w, "%5s %8s %7s %14s %14s %9s %7s %8s  %s\n", "ranks", "size", "warmup", "Open MPI us", "mx us", "schedule", "mx/OMPI", "target", "")
	for _, k := range keys {
		o, m := ompi[k], mx[k]
		ratio := math.Inf(1)
		if o.TAvgUS > 0 {
			ratio = m.TAvgUS / o.TAvgUS
		}
		ok := ratio <= Target(k.Size)
		v.Points++
		verdict := "NOT met"
		if ok {
			v.Met++
			verdict = "met"
		}
		// Both sides run the same warm-up; a table of points that did
		// not says so in the column.
		warm := strconv.Itoa(o.Warmup)
		if m.Warmup != o.Warmup {
			warm = fmt.Sprintf("%d/%d", o.Warmup, m.Warmup)
		}
		fmt.Fprintf(w, "%5d %8s %7s %14.1f %14.1f %9s %6.2fx %7s  %s\n", k.Ranks, units.Format(int64(k.Size)), warm,
			o.TAvgUS, m.TAvgUS, m.Schedule, ratio, fmt.Sprintf("<=%.1fx", Target(k.Size)), verdict)
	}
	fmt.Fprintf(w, "targets met at %d of %d points\n", v.Met, v.Points)
	return v
}

// Plot draws t_avg against ranks, one line per message size and library,
// into path; the title names the host's CPU count, cores, and the
// warm-up, warmup (e.g. "as many untimed rounds as timed").
func Plot(ompi, mx map[Key]Point, cores int, warmup, path string) error {
	var series []chart.Series
	add := func(lib string, pts map[Key]Point) {
		bySize := map[int][]Point{}
		for k, p := range pts {
			bySize[k.Size] = append(bySize[k.Size], p)
		}
		var sizes []int
		for s := range bySize {
			sizes = append(sizes, s)
		}
		sort.Ints(sizes)
		for _, s := range sizes {
			ps := bySize[s]
			sort.Slice(ps, func(i, j int) bool { return ps[i].Ranks < ps[j].Ranks })
			var x, y []float64
			for _, p := range ps {
				x, y = append(x, float64(p.Ranks)), append(y, p.TAvgUS)
			}
			series = append(series, chart.Series{Name: lib + " " + units.Format(int64(s)), X: x, Y: y})
		}
	}
	add("Open MPI", ompi)
	add("mx", mx)
	return chart.Chart{Title: fmt.Sprintf("alltoall on one host of %d cores: time per round after %s", cores, warmup),
		XLabel: "ranks", YLabel: "t_avg (us)", LogX: true, LogY: true, Series: series}.Save(path)
}
