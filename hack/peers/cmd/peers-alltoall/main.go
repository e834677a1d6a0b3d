// Command peers-alltoall measures `mxbench alltoall` beside MPI_Alltoall of
// Debian's Open MPI among the processes of this host, for several job sizes
// and message sizes, interleaved, and prints one table with mx's ratios and
// their targets and one plot (package
// github.com/gomx-dev/gomx/hack/peers/alltoall explains what is measured).
// `make peers-alltoall` runs it; as root it installs what it lacks from
// Debian (openmpi-bin, libopenmpi-dev).
//
//	go run ./hack/peers/cmd/peers-alltoall -ranks 4,8,16,32 -plot a2a.svg
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
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/hack/peers"
	"github.com/gomx-dev/gomx/hack/peers/alltoall"
	"github.com/gomx-dev/gomx/internal/chart"
	"github.com/gomx-dev/gomx/internal/units"
)

func main() {
	if err := run(os.Stdout, os.Stderr, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "peers-alltoall:", err)
		}
		os.Exit(1)
	}
}

// warmup is both sides' untimed rounds per size (mxbench's default).
const warmup = 10

func run(stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("peers-alltoall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sizes, ranks units.List
	fs.Var(&sizes, "sizes", "message sizes (default 8,4K,64K,1M)")
	fs.Var(&ranks, "ranks", "job sizes, in processes of this host (default 4,8,16,32)")
	plot := fs.String("plot", "peers-alltoall.svg", "the chart of time per round against ranks (`FILE`.svg or .png)")
	wait := fs.String("wait", "auto", "mxbench's waits: spin (busy-poll, as Open MPI does), block, or auto: spin when the host has a core per rank, block when the job oversubscribes it")
	install := fs.Bool("install", true, "as root, apt-get install Open MPI and its compiler wrapper when missing")
	rounds := fs.Int("rounds", 1, "measure every point this many times, interleaved (Open MPI, then mx, per job size), and keep each point's best")
	timeout := fs.Duration("timeout", time.Hour, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every setting is a flag (-h lists them)", fs.Args())
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: give 1 or more", *rounds)
	}
	switch *wait {
	case "spin", "block", "auto":
	default:
		return fmt.Errorf("-wait %q: want spin, block or auto", *wait)
	}
	sz := []int{8, 4 << 10, 64 << 10, 1 << 20}
	if sizes.IsSet {
		sz = sz[:0]
		for _, s := range sizes.V {
			sz = append(sz, int(s))
		}
	}
	nr := []int{4, 8, 16, 32}
	if ranks.IsSet {
		nr = nr[:0]
		for _, n := range ranks.V {
			if n < 2 {
				return fmt.Errorf("-ranks %d: an alltoall needs 2 ranks or more", n)
			}
			nr = append(nr, int(n))
		}
	}
	if err := chart.CheckPath(*plot); err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := ensurePeer(ctx, stderr, *install); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "peers-alltoall")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	prog, mxbench, err := build(ctx, dir)
	if err != nil {
		return err
	}
	cores := runtime.NumCPU()
	var ompiRounds, mxRounds [][]alltoall.Point
	waits := map[int]string{}
	for k := 1; k <= *rounds; k++ {
		var o, m []alltoall.Point
		for _, n := range nr {
			w := *wait
			if w == "auto" {
				w = "block"
				if n <= cores {
					w = "spin"
				}
			}
			waits[n] = w
			fmt.Fprintf(stderr, "peers-alltoall: round %d of %d: Open MPI, %d ranks\n", k, *rounds, n)
			pts, err := retryOnce(stderr, func() ([]alltoall.Point, error) { return ompi(ctx, dir, prog, n, sz) })
			if err != nil {
				return err
			}
			o = append(o, pts...)
			fmt.Fprintf(stderr, "peers-alltoall: round %d of %d: mxbench, %d ranks, %s waits\n", k, *rounds, n, w)
			if pts, err = retryOnce(stderr, func() ([]alltoall.Point, error) { return mxAlltoall(ctx, mxbench, n, sz, w) }); err != nil {
				return err
			}
			m = append(m, pts...)
		}
		ompiRounds, mxRounds = append(ompiRounds, o), append(mxRounds, m)
	}
	bo, bm := alltoall.Best(ompiRounds...), alltoall.Best(mxRounds...)
	var wl []string
	for _, n := range nr {
		wl = append(wl, fmt.Sprintf("%d:%s", n, waits[n]))
	}
	fmt.Fprintf(stdout, "# alltoall among the processes of one host of %d cores, %s; t_avg per round (IMB's mean over ranks), best of %d round(s); Open MPI %s with its defaults (--oversubscribe); mx waits by ranks: %s\n",
		cores, time.Now().UTC().Format(time.RFC3339), *rounds, ompiVersion(ctx), strings.Join(wl, " "))
	alltoall.WriteTable(stdout, bo, bm)
	if err := alltoall.Plot(bo, bm, cores, *plot); err != nil {
		return fmt.Errorf("-plot %s: %w", *plot, err)
	}
	fmt.Fprintf(stdout, "# plot: %s\n", *plot)
	return nil
}

// retryOnce runs one job, and once more if it fails: on a machine shared
// with other work a job of 32 oversubscribed ranks now and then loses a
// rank to the launcher's own timeouts (Open MPI's mpirun reported a rank
// that exited without finalizing), and one such job should not cost the
// whole table. A job that fails twice stops the run with its error.
func retryOnce(stderr io.Writer, job func() ([]alltoall.Point, error)) ([]alltoall.Point, error) {
	pts, err := job()
	if err == nil {
		return pts, nil
	}
	fmt.Fprintf(stderr, "peers-alltoall: %v\npeers-alltoall: running that job again\n", err)
	return job()
}

// ensurePeer installs Open MPI's launcher and compiler wrapper when one is
// missing.
func ensurePeer(ctx context.Context, stderr io.Writer, install bool) error {
	var files []string
	if runtime.GOARCH == "amd64" {
		files = append(files, "/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h")
	}
	return peers.Install(ctx, stderr, "peers-alltoall", install, []string{"mpicc.openmpi", "mpirun.openmpi"}, files,
		[]string{"openmpi-bin", "libopenmpi-dev"})
}

// build compiles the MPI program and mxbench into dir.
func build(ctx context.Context, dir string) (prog, mxbench string, err error) {
	src := filepath.Join(dir, "alltoall.c")
	if err := os.WriteFile(src, alltoall.Source, 0o644); err != nil {
		return "", "", err
	}
	prog = filepath.Join(dir, "alltoall")
	if out, err := exec.CommandContext(ctx, "mpicc.openmpi", "-O2", "-o", prog, src).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("mpicc.openmpi -O2 -o %s %s: %v\n%s", prog, src, err, out)
	}
	mxbench = filepath.Join(dir, "mxbench")
	// Without cgo the binary links no C library: glibc registers every
	// thread for restartable sequences (rseq), and the kernel then updates
	// that area on each return to a thread that was switched out or moved,
	// some 3% of the CPU of an oversubscribed 8-rank 8 B alltoall, whose
	// ranks hand the CPUs around with sched_yield (docs/intranode-scale.md).
	build := exec.CommandContext(ctx, "go", "build", "-o", mxbench, "./cmd/mxbench")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("CGO_ENABLED=0 go build ./cmd/mxbench (run from the repository's root): %v\n%s", err, out)
	}
	return prog, mxbench, nil
}

// ompi runs the MPI program among n processes of this host.
func ompi(ctx context.Context, dir, prog string, n int, sizes []int) ([]alltoall.Point, error) {
	args := []string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(n), prog, strconv.Itoa(warmup)}
	for _, s := range sizes {
		args = append(args, strconv.Itoa(s))
	}
	c := exec.CommandContext(ctx, "mpirun.openmpi", args...)
	c.Dir = dir
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(c.Args, " "), err, errb.String())
	}
	pts, err := alltoall.Parse(out, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(c.Args, " "), err)
	}
	if len(pts) != len(sizes) {
		return nil, fmt.Errorf("%s printed %d sizes of %d:\n%s", strings.Join(c.Args, " "), len(pts), len(sizes), out)
	}
	return pts, nil
}

// mxRow is the part of an mxbench alltoall JSON row the table needs.
type mxRow struct {
	Size       int     `json:"size"`
	Iterations int     `json:"iterations"`
	TMinUS     float64 `json:"t_min_us"`
	TAvgUS     float64 `json:"t_avg_us"`
	TMaxUS     float64 `json:"t_max_us"`
	Schedule   string  `json:"schedule"`
}

// mxAlltoall runs mxbench alltoall among n processes it starts.
func mxAlltoall(ctx context.Context, mxbench string, n int, sizes []int, wait string) ([]alltoall.Point, error) {
	var list []string
	for _, s := range sizes {
		list = append(list, strconv.Itoa(s))
	}
	c := exec.CommandContext(ctx, mxbench, "alltoall", "--procs", strconv.Itoa(n), "--sizes", strings.Join(list, ","),
		"--wait", wait, "--warmup", strconv.Itoa(warmup), "--json")
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(c.Args, " "), err, errb.String())
	}
	var pts []alltoall.Point
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r mxRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("mxbench alltoall: %v in %q", err, sc.Text())
		}
		pts = append(pts, alltoall.Point{Ranks: n, Size: r.Size, Iters: r.Iterations, TMinUS: r.TMinUS, TAvgUS: r.TAvgUS, TMaxUS: r.TMaxUS, Schedule: r.Schedule})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pts) != len(sizes) {
		return nil, fmt.Errorf("%s printed %d sizes of %d:\n%s", strings.Join(c.Args, " "), len(pts), len(sizes), out)
	}
	return pts, nil
}

// ompiVersion is what `mpirun.openmpi --version` says, for the header.
func ompiVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "mpirun.openmpi", "--version").Output()
	if err != nil {
		return "(version unknown)"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if f := strings.Fields(line); len(f) > 0 {
		return f[len(f)-1]
	}
	return "(version unknown)"
}
