// Command peers-intranode measures mx between two processes of this host
// beside NetPIPE over Open MPI (vader, CMA on and off) and over MPICH, in
// one go, and prints one table with mx's ratios to them and one plot
// (package github.com/gomx-dev/gomx/hack/peers/intranode explains what is
// measured). `make peers-intranode` runs it; as root it installs what it
// lacks from Debian (netpipe-openmpi, netpipe-mpich2, openmpi-bin, mpich).
//
//	go run ./hack/peers/cmd/peers-intranode -plot peers.svg
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/hack/peers"
	"github.com/gomx-dev/gomx/hack/peers/intranode"
	"github.com/gomx-dev/gomx/internal/units"
)

func main() {
	if err := run(os.Stdout, os.Stderr, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "peers-intranode:", err)
		}
		os.Exit(1)
	}
}

// ompiCMA is the name of Open MPI's default path. As a prefix it also names
// the CMA-off path: the faster of the two is the latency reference.
const ompiCMA = "NetPIPE, Open MPI vader, CMA"

func run(stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("peers-intranode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sizes units.List
	fs.Var(&sizes, "sizes", "message sizes (default 8,4K,64K,1M,4M)")
	plot := fs.String("plot", "peers-intranode.svg", "the chart of bandwidth against size (`FILE`.svg or .png); latency goes beside it with -latency")
	wait := fs.String("wait", "spin", "mxbench's waits: spin (busy-poll, as MPI libraries do) or block")
	bind := fs.Bool("bind", true, "bind each process to a CPU of its own (mpirun --bind-to core, mpiexec -bind-to core, mxbench --bind); -bind=false lets the kernel place them all")
	install := fs.Bool("install", true, "as root, apt-get install the peers when missing")
	rounds := fs.Int("rounds", 3, "measure every path this many times, interleaved (all peers, then mx, then again), and report each figure's best")
	timeout := fs.Duration("timeout", 20*time.Minute, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: give 1 or more", *rounds)
	}
	sz := []int{8, 4 << 10, 64 << 10, 1 << 20, 4 << 20}
	if sizes.IsSet {
		sz = sz[:0]
		for _, s := range sizes.V {
			sz = append(sz, int(s))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := ensurePeers(ctx, stderr, *install); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "peers-intranode")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	mxbench := filepath.Join(dir, "mxbench")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", mxbench, "./cmd/mxbench").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/mxbench (run from the repository's root): %v\n%s", err, out)
	}
	var all [][]intranode.Path
	for k := 1; k <= *rounds; k++ {
		paths, err := measure(ctx, stderr, dir, mxbench, sz, *wait, *bind, fmt.Sprintf("round %d of %d", k, *rounds))
		if err != nil {
			return err
		}
		all = append(all, paths)
	}
	paths := intranode.Best(all)
	placement := "each bound to a CPU of its own"
	if !*bind {
		placement = "unbound"
	}
	fmt.Fprintf(stdout, "# two processes of one host (%s), %s; mx waits: %s. Latency: one-way us; bandwidth: ping-pong size / one-way time; stream 4M: mxbench stream MB/s\n",
		placement, time.Now().UTC().Format(time.RFC3339), *wait)
	if len(all) > 1 {
		fmt.Fprintf(stdout, "# each figure: the best of %d rounds, every path measured once per round, interleaved (the host moves this machine's CPUs between runs: a path's figure can double from one run to the next)\n", len(all))
		for k, paths := range all {
			if r := intranode.Compute(paths, ompiCMA); r.Latency8 > 0 {
				fmt.Fprintf(stdout, "# round %d: 8 B mx %.3f us / %.3f us = %.2fx\n", k+1, r.MX8, r.OMPI8, r.Latency8)
			}
		}
	}
	intranode.WriteTable(stdout, paths, sz, ompiCMA)
	lat := strings.TrimSuffix(*plot, filepath.Ext(*plot)) + "-latency" + filepath.Ext(*plot)
	if err := intranode.Plot(paths, *plot, lat); err != nil {
		return fmt.Errorf("-plot %s: %w", *plot, err)
	}
	fmt.Fprintf(stdout, "# plots: %s (bandwidth), %s (latency)\n", *plot, lat)
	return nil
}

// measure runs every peer at every size, then mxbench with every
// strategy, once, and returns a path each; what names the round in the
// progress lines on stderr.
func measure(ctx context.Context, stderr io.Writer, dir, mxbench string, sz []int, wait string, bind bool, what string) ([]intranode.Path, error) {
	var paths []intranode.Path
	ompiBind, mpichBind := []string{"--bind-to", "core"}, []string{"-bind-to", "core"}
	if !bind {
		ompiBind, mpichBind = []string{"--bind-to", "none"}, []string{"-bind-to", "none"}
	}
	ompi := append([]string{"mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "pml", "ob1", "--mca", "btl", "self,vader"}, ompiBind...)
	for _, peer := range []struct {
		name string
		cmd  []string
	}{
		{ompiCMA, append(append([]string(nil), ompi...), "--mca", "btl_vader_single_copy_mechanism", "cma", "NPopenmpi")},
		{"NetPIPE, Open MPI vader, CMA off", append(append([]string(nil), ompi...), "--mca", "btl_vader_single_copy_mechanism", "none", "NPopenmpi")},
		{"NetPIPE, MPICH", append(append([]string{"mpiexec.mpich", "-n", "2"}, mpichBind...), "NPmpich2")},
	} {
		p := intranode.Path{Name: peer.name, Points: map[int]intranode.Point{}}
		for _, s := range sz {
			fmt.Fprintf(stderr, "peers-intranode: %s: %s, %s\n", what, peer.name, units.Format(int64(s)))
			pt, err := netpipe(ctx, dir, peer.cmd, s)
			if err != nil {
				return nil, fmt.Errorf("%s at %s: %w", peer.name, units.Format(int64(s)), err)
			}
			p.Points[s] = pt
		}
		paths = append(paths, p)
	}
	fmt.Fprintf(stderr, "peers-intranode: %s: mxbench pingpong and stream, every strategy\n", what)
	mx, err := mxPaths(ctx, mxbench, sz, wait, bind)
	if err != nil {
		return nil, err
	}
	return append(paths, mx...), nil
}

// ensurePeers installs the peers' packages when a program is missing.
func ensurePeers(ctx context.Context, stderr io.Writer, install bool) error {
	return peers.Install(ctx, stderr, "peers-intranode", install,
		[]string{"NPopenmpi", "NPmpich2", "mpirun.openmpi", "mpiexec.mpich"}, nil,
		[]string{"netpipe-openmpi", "netpipe-mpich2", "openmpi-bin", "mpich"})
}

// repeats is NetPIPE's -n for a size: enough round trips for a stable
// mean, few enough that 4 MiB ends in seconds.
func repeats(size int) int {
	switch {
	case size <= 64<<10:
		return 2000
	case size <= 1<<20:
		return 200
	}
	return 50
}

// netpipe runs one size of NetPIPE through launcher command cmd.
func netpipe(ctx context.Context, dir string, cmd []string, size int) (intranode.Point, error) {
	out := filepath.Join(dir, "np.out")
	os.Remove(out)
	s := strconv.Itoa(size)
	args := append(append([]string(nil), cmd[1:]...), "-l", s, "-u", s, "-p", "0", "-n", strconv.Itoa(repeats(size)), "-o", out)
	c := exec.CommandContext(ctx, cmd[0], args...)
	c.Dir = dir
	if log, err := c.CombinedOutput(); err != nil {
		return intranode.Point{}, fmt.Errorf("%s: %v\n%s", strings.Join(c.Args, " "), err, log)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return intranode.Point{}, err
	}
	pts, err := intranode.ParseNetPIPE(b)
	if err != nil {
		return intranode.Point{}, err
	}
	for _, p := range pts {
		if p.Size == size {
			return p, nil
		}
	}
	return intranode.Point{}, fmt.Errorf("NetPIPE's output has no line for %d bytes:\n%s", size, b)
}

// netpipeTrials is how many trials of its round trips NetPIPE times per
// size, reporting the fastest: 3 in Debian's build (NetPIPE 3.7.2 without
// FINAL; a run of n round trips takes three trials' time). mxbench's
// pingpong gets the same --trials, so each side of the table reports the
// same statistic.
const netpipeTrials = 3

// mxRow is the part of an mxbench JSON row the table needs.
type mxRow struct {
	Size          int     `json:"size"`
	LatencyUS     float64 `json:"latency_us"`
	MBPerS        float64 `json:"mb_per_s"`
	Strategy      string  `json:"strategy"`
	StrategyAsked string  `json:"strategy_asked"`
}

// mxPaths runs mxbench pingpong and stream between 2 processes it starts,
// once per strategy mx knows (`mxbench strategies`: a strategy mx adds
// needs no change here), and returns a path per strategy. Each strategy
// runs on its own, so each gets the copy engine it would by default (the
// engine strategy the emulated model or bound CBDMA functions; the others
// none), and every process is bound when bind is set: mx's waits leave
// the CPU to an emulated engine's threads while it copies.
func mxPaths(ctx context.Context, mxbench string, sizes []int, wait string, bind bool) ([]intranode.Path, error) {
	var list []string
	for _, s := range sizes {
		list = append(list, strconv.Itoa(s))
	}
	out, err := exec.CommandContext(ctx, mxbench, "strategies").Output()
	if err != nil {
		return nil, fmt.Errorf("mxbench strategies: %v", err)
	}
	strategies := strings.Fields(string(out))
	if len(strategies) == 0 {
		return nil, fmt.Errorf("mxbench strategies listed none")
	}
	run := func(cmd, strategy string) ([]mxRow, error) {
		args := []string{cmd, "--procs", "2", "--strategy", strategy, "--sizes", strings.Join(list, ","),
			"--wait", wait, "--json", fmt.Sprintf("--bind=%v", bind)}
		if cmd == "pingpong" {
			args = append(args, "--trials", strconv.Itoa(netpipeTrials))
		}
		c := exec.CommandContext(ctx, mxbench, args...)
		var errb bytes.Buffer
		c.Stderr = &errb
		out, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("mxbench %s --strategy %s: %v\n%s", cmd, strategy, err, errb.String())
		}
		var rs []mxRow
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var r mxRow
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return nil, fmt.Errorf("mxbench %s: %v in %q", cmd, err, sc.Text())
			}
			rs = append(rs, r)
		}
		return rs, sc.Err()
	}
	rows := func(cmd string) ([]mxRow, error) {
		var all []mxRow
		for _, s := range strategies {
			rs, err := run(cmd, s)
			if err != nil {
				return nil, err
			}
			all = append(all, rs...)
		}
		return all, nil
	}
	name := func(r mxRow) string { return "mxbench, large messages: " + r.StrategyAsked }
	pp, err := rows("pingpong")
	if err != nil {
		return nil, err
	}
	st, err := rows("stream")
	if err != nil {
		return nil, err
	}
	var paths []intranode.Path
	byName := map[string]*intranode.Path{}
	for _, r := range pp {
		name := name(r)
		p := byName[name]
		if p == nil {
			paths = append(paths, intranode.Path{Name: name, IsMX: true, Points: map[int]intranode.Point{}})
			p = &paths[len(paths)-1]
			byName[name] = p
		}
		p.Points[r.Size] = intranode.Point{Size: r.Size, OneWayUS: r.LatencyUS, MBPerS: r.MBPerS, Strategy: r.Strategy}
	}
	// byName's pointers go stale as paths grows: rebuild before the stream.
	for i := range paths {
		byName[paths[i].Name] = &paths[i]
	}
	for _, r := range st {
		if p := byName[name(r)]; p != nil {
			pt := p.Points[r.Size]
			pt.StreamMBs = r.MBPerS
			p.Points[r.Size] = pt
		}
	}
	return paths, nil
}
