// Package intranode measures gomx's messaging between two processes of one
// host beside the MPI libraries users would otherwise run there, in one go,
// so the ratios compare figures taken minutes apart on the same (shared,
// noisy) machine. `make peers-intranode` runs it through
// hack/peers/cmd/peers-intranode.
//
// # The peers
//
// NetPIPE (Debian's netpipe-openmpi and netpipe-mpich2) measures ping-pong
// latency and bandwidth over Open MPI's vader shared-memory transport with
// its single copy by process_vm_readv (CMA) on and off, and over MPICH
// (ch4, whatever shared memory and single copy it picks). mxbench measures
// mx between two processes it starts itself (`mxbench pingpong --procs 2
// --strategy all`, then stream), once per large-message strategy mx knows;
// mx takes the shared-memory path by itself. Each NetPIPE run measures one
// size with a fixed repeat count (-l S -u S -p 0 -n N), since NetPIPE's own
// sweep takes minutes on a loaded machine. The command measures every path
// several times, interleaved, and Best keeps each figure's best round.
//
// # The table
//
// One row per path (a peer, or mx with one strategy), one-way latency for
// the small sizes and ping-pong bandwidth (size / one-way time) for the
// large ones, then the target ratios: mx's best 8-byte one-way latency over
// Open MPI's (target at most 1.5), and mx's best 4 MiB ping-pong bandwidth
// over the better of Open MPI and MPICH (target at least 1.5). The plot
// draws bandwidth against size for every path on one chart.
package intranode

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/internal/chart"
	"github.com/gomx-dev/gomx/internal/units"
)

// Point is one size's ping-pong figure of one path.
type Point struct {
	Size      int
	OneWayUS  float64
	MBPerS    float64
	StreamMBs float64 // mx only: stream throughput of the same size, 0 when not measured
	Strategy  string  // mx only: what moved this size (eager, cma, rings, ...)
}

// Path is one peer or one mx strategy and its points, by size.
type Path struct {
	Name   string
	IsMX   bool
	Points map[int]Point
}

// ParseNetPIPE reads NetPIPE's output file (-o): lines of "bytes Mbps
// seconds", the seconds being half the round trip. It refuses anything
// else, naming the line. NetPIPE prints the seconds to 8 decimals (0.01
// us: 0.13 stands for anything from 0.125 to 0.135 us, 4% either way at
// 8 bytes) and the Mbps, which it computes from the same time as
// bits / (t * 1024 * 1024), to 6: when the two agree to the seconds'
// rounding, the time is taken from the Mbps.
func ParseNetPIPE(b []byte) ([]Point, error) {
	var out []Point
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("NetPIPE output line %d: %d fields, want bytes, Mbps and seconds", n, len(f))
		}
		size, err1 := strconv.Atoi(f[0])
		mbps, err2 := strconv.ParseFloat(f[1], 64)
		sec, err3 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || err3 != nil || size < 0 || !(sec > 0) || math.IsInf(sec, 0) || !(mbps >= 0) || math.IsInf(mbps, 0) {
			return nil, fmt.Errorf("NetPIPE output line %d: %q is not bytes, Mbps and seconds", n, sc.Text())
		}
		if size > 0 && mbps > 0 {
			if t := float64(size) * 8 / (mbps * 1024 * 1024); math.Abs(t-sec) <= netpipeRounding {
				sec = t
			}
		}
		pt := Point{Size: size, OneWayUS: sec * 1e6, MBPerS: float64(size) / sec / 1e6}
		if math.IsInf(pt.MBPerS, 0) || math.IsInf(pt.OneWayUS, 0) {
			return nil, fmt.Errorf("NetPIPE output line %d: %q gives no finite bandwidth", n, sc.Text())
		}
		out = append(out, pt)
	}
	return out, sc.Err()
}

// netpipeRounding is how far NetPIPE's printed seconds (%12.8lf) can be
// from the time it measured, with a margin for the Mbps' own rounding.
const netpipeRounding = 0.5e-8 * (1 + 1e-6)

// Ratios are mx's figures over its peers', computed from paths.
type Ratios struct {
	// Latency8 is mx's best 8-byte one-way latency over Open MPI's best
	// (the fastest of its paths: vader with CMA on and off, so that one
	// slow NetPIPE row cannot flatter mx); want at most 1.5.
	Latency8, MX8, OMPI8 float64
	MX8Path, OMPI8Path   string
	// BW4M is mx's best 4 MiB ping-pong bandwidth over the better of Open
	// MPI's and MPICH's; want at least 1.5.
	BW4M, MX4M, Peer4M float64
	MX4MPath, Peer4MAt string
}

// Best merges the paths of several rounds of the same measurements into
// one path each, in the first round's order: a point's latency is the
// lowest of its rounds, its bandwidths the highest, and its strategy that
// of the round with the lowest latency. A path or size missing from some
// rounds keeps what the others measured. Each round samples the machine as
// it was then (on a virtual machine, the host may place its CPUs closer or
// farther apart from one run to the next), and every path gets the same
// number of tries, as NetPIPE keeps the best of its trials.
func Best(rounds [][]Path) []Path {
	var out []Path
	at := map[string]int{}
	for _, paths := range rounds {
		for _, p := range paths {
			i, ok := at[p.Name]
			if !ok {
				i = len(out)
				at[p.Name] = i
				out = append(out, Path{Name: p.Name, IsMX: p.IsMX, Points: map[int]Point{}})
			}
			for size, pt := range p.Points {
				b, ok := out[i].Points[size]
				if !ok {
					out[i].Points[size] = pt
					continue
				}
				if pt.OneWayUS > 0 && (b.OneWayUS <= 0 || pt.OneWayUS < b.OneWayUS) {
					b.OneWayUS, b.Strategy = pt.OneWayUS, pt.Strategy
				}
				b.MBPerS = max(b.MBPerS, pt.MBPerS)
				b.StreamMBs = max(b.StreamMBs, pt.StreamMBs)
				out[i].Points[size] = b
			}
		}
	}
	return out
}

// Compute finds the ratios; Open MPI's paths are those whose name starts
// with ompi.
func Compute(paths []Path, ompi string) Ratios {
	var r Ratios
	r.MX8, r.OMPI8 = math.Inf(1), math.Inf(1)
	for _, p := range paths {
		p8, ok8 := p.Points[8]
		p4, ok4 := p.Points[4<<20]
		switch {
		case p.IsMX:
			if ok8 && p8.OneWayUS < r.MX8 {
				r.MX8, r.MX8Path = p8.OneWayUS, p.Name
			}
			if ok4 && p4.MBPerS > r.MX4M {
				r.MX4M, r.MX4MPath = p4.MBPerS, p.Name
			}
		default:
			if strings.HasPrefix(p.Name, ompi) && ok8 && p8.OneWayUS > 0 && p8.OneWayUS < r.OMPI8 {
				r.OMPI8, r.OMPI8Path = p8.OneWayUS, p.Name
			}
			if ok4 && p4.MBPerS > r.Peer4M {
				r.Peer4M, r.Peer4MAt = p4.MBPerS, p.Name
			}
		}
	}
	if !math.IsInf(r.OMPI8, 1) && !math.IsInf(r.MX8, 1) {
		r.Latency8 = r.MX8 / r.OMPI8
	}
	if r.Peer4M > 0 {
		r.BW4M = r.MX4M / r.Peer4M
	}
	return r
}

// WriteTable prints the one table: a row per path, latency up to 4 KiB and
// bandwidth above, then the ratios against their targets.
func WriteTable(w io.Writer, paths []Path, sizes []int, ompi string) Ratios {
	fmt.Fprintf(w, "%-44s", "path")
	for _, s := range sizes {
		if s <= 4096 {
			fmt.Fprintf(w, " %10s", units.Format(int64(s))+" us")
		} else {
			fmt.Fprintf(w, " %11s", units.Format(int64(s))+" MB/s")
		}
	}
	fmt.Fprintf(w, " %12s\n", "stream 4M")
	for _, p := range paths {
		fmt.Fprintf(w, "%-44s", p.Name)
		for _, s := range sizes {
			pt, ok := p.Points[s]
			switch {
			case !ok:
				fmt.Fprintf(w, " %10s", "-")
			case s <= 4096:
				fmt.Fprintf(w, " %10.3f", pt.OneWayUS)
			default:
				fmt.Fprintf(w, " %11.0f", pt.MBPerS)
			}
		}
		if pt, ok := p.Points[4<<20]; ok && pt.StreamMBs > 0 {
			fmt.Fprintf(w, " %12.0f", pt.StreamMBs)
		} else {
			fmt.Fprintf(w, " %12s", "-")
		}
		fmt.Fprintln(w)
	}
	r := Compute(paths, ompi)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	if r.Latency8 > 0 {
		fmt.Fprintf(w, "8 B one-way: mx %.3f us (%s) / %s %.3f us = %.2fx (target <= 1.5x: %s)\n",
			r.MX8, r.MX8Path, r.OMPI8Path, r.OMPI8, r.Latency8, verdict(r.Latency8 <= 1.5))
	}
	if r.BW4M > 0 {
		fmt.Fprintf(w, "4 MiB ping-pong: mx %.0f MB/s (%s) / %s %.0f MB/s = %.2fx (target >= 1.5x: %s)\n",
			r.MX4M, r.MX4MPath, r.Peer4MAt, r.Peer4M, r.BW4M, verdict(r.BW4M >= 1.5))
	}
	return r
}

// Plot draws ping-pong bandwidth against size for every path on one chart
// into path, and one-way latency beside it (latencyPath).
func Plot(paths []Path, path, latencyPath string) error {
	var bw, lat []chart.Series
	for _, p := range paths {
		var sizes []int
		for s := range p.Points {
			if s > 0 {
				sizes = append(sizes, s)
			}
		}
		sort.Ints(sizes)
		if len(sizes) < 2 {
			continue
		}
		var x, y, l []float64
		for _, s := range sizes {
			x = append(x, float64(s))
			y = append(y, p.Points[s].MBPerS)
			l = append(l, p.Points[s].OneWayUS)
		}
		bw = append(bw, chart.Series{Name: p.Name, X: x, Y: y})
		lat = append(lat, chart.Series{Name: p.Name, X: x, Y: l})
	}
	if err := (chart.Chart{Title: "two processes of one host: ping-pong bandwidth", XLabel: "message size (bytes)",
		YLabel: "MB/s (size / one-way time)", LogX: true, Series: bw}).Save(path); err != nil {
		return err
	}
	return chart.Chart{Title: "two processes of one host: one-way latency", XLabel: "message size (bytes)",
		YLabel: "one-way latency (us)", LogX: true, Series: lat}.Save(latencyPath)
}
