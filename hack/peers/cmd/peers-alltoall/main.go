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

func run(stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("peers-alltoall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sizes, ranks units.List
	fs.Var(&sizes, "sizes", "message sizes (default 8,4K,64K,1M)")
	fs.Var(&ranks, "ranks", "job sizes, in processes of this host (default 4,8,16,32)")
	plot := fs.String("plot", "peers-alltoall.svg", "the chart of time per round against ranks (`FILE`.svg or .png)")
	wait := fs.String("wait", "auto", "mxbench's waits: spin (busy-poll, as Open MPI does), block, or auto: mxbench's own choice (spin when the host has a core per rank, block when the job oversubscribes it)")
	install := fs.Bool("install", true, "as root, apt-get install Open MPI and its compiler wrapper when missing")
	warmup := fs.Int("warmup", -1, fmt.Sprintf("untimed rounds before every size's timed ones, on both sides alike; -1: as many as the size's timed rounds, at least %d (alltoall.Warmup)", alltoall.MinWarmup))
	rounds := fs.Int("rounds", 1, "measure every point this many times, interleaved (Open MPI, then mx, per job), and keep each point's best")
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
	if *warmup < -1 {
		return fmt.Errorf("-warmup %d: give 0 or more rounds, or -1 for the rounds by size", *warmup)
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
			w := *wait // auto: mxbench's own choice, which its JSON reports
			fmt.Fprintf(stderr, "peers-alltoall: round %d of %d: %d ranks, each job by Open MPI, then by mxbench with --wait %s\n", k, *rounds, n, w)
			// Each job runs on both sides back to back, so a change of
			// the host's load between jobs falls on both alike.
			for _, j := range plan(sz, n, *warmup) {
				pts, err := retryOnce(stderr, func() ([]alltoall.Point, error) { return ompi(ctx, dir, prog, n, j) })
				if err != nil {
					return err
				}
				o = append(o, pts...)
				pts, err = retryOnce(stderr, func() ([]alltoall.Point, error) { return mxAlltoall(ctx, mxbench, n, j, w) })
				if err != nil {
					return err
				}
				m = append(m, pts...)
				// The wait mxbench ran: its own choice under
				// auto, whose rule is mxbench's --wait auto.
				for _, p := range pts {
					waits[n] = p.Wait
				}
			}
		}
		ompiRounds, mxRounds = append(ompiRounds, o), append(mxRounds, m)
	}
	bo, bm := alltoall.Best(ompiRounds...), alltoall.Best(mxRounds...)
	var wl []string
	for _, n := range nr {
		wl = append(wl, fmt.Sprintf("%d:%s", n, waits[n]))
	}
	warm := fmt.Sprintf("as many untimed rounds as timed (at least %d)", alltoall.MinWarmup)
	if *warmup >= 0 {
		warm = fmt.Sprintf("%d untimed rounds", *warmup)
	}
	fmt.Fprintf(stdout, "# alltoall among the processes of one host of %d cores, %s; t_avg per round (IMB's mean over ranks), best of %d round(s), each after %s on both sides; Open MPI %s with its defaults (--oversubscribe); mx waits by ranks: %s\n",
		cores, time.Now().UTC().Format(time.RFC3339), *rounds, warm, ompiVersion(ctx), strings.Join(wl, " "))
	alltoall.WriteTable(stdout, bo, bm)
	if err := alltoall.Plot(bo, bm, cores, warm, *plot); err != nil {
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

// plan is the jobs each library runs among n ranks: the sizes with
// alltoall.Warmup's rounds, or with warmup rounds every one when it is 0
// or more (-warmup).
func plan(sizes []int, n, warmup int) []alltoall.Job {
	if warmup >= 0 {
		return alltoall.Jobs(sizes, func(int) int { return warmup })
	}
	return alltoall.Jobs(sizes, func(size int) int { return alltoall.Warmup(size, n) })
}

// ompiArgs is mpirun's command line for job j of the MPI program prog
// among n processes: the program takes the warm-up, then the sizes.
func ompiArgs(prog string, n int, j alltoall.Job) []string {
	args := []string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(n), prog, strconv.Itoa(j.Warmup)}
	for _, s := range j.Sizes {
		args = append(args, strconv.Itoa(s))
	}
	return args
}

// mxArgs is mxbench's command line for job j among n processes it
// starts, with wait's waits. mxbench's default --timeout bounds its
// connecting, each size's warm-up and then its timed rounds, so a stuck
// job fails in minutes and retryOnce can run it again.
func mxArgs(n int, j alltoall.Job, wait string) []string {
	var list []string
	for _, s := range j.Sizes {
		list = append(list, strconv.Itoa(s))
	}
	return []string{"alltoall", "--procs", strconv.Itoa(n), "--sizes", strings.Join(list, ","),
		"--wait", wait, "--warmup", strconv.Itoa(j.Warmup), "--json"}
}

// ompi runs job j of the MPI program among n processes of this host.
func ompi(ctx context.Context, dir, prog string, n int, j alltoall.Job) ([]alltoall.Point, error) {
	sizes := j.Sizes
	c := exec.CommandContext(ctx, "mpirun.openmpi", ompiArgs(prog, n, j)...)
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
	for i := range pts {
		pts[i].Warmup = j.Warmup
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
	Wait       string  `json:"wait"`
	Warmup     *int    `json:"warmup"`
}

// mxAlltoall runs job j of mxbench alltoall among n processes it starts.
func mxAlltoall(ctx context.Context, mxbench string, n int, j alltoall.Job, wait string) ([]alltoall.Point, error) {
	sizes := j.Sizes
	c := exec.CommandContext(ctx, mxbench, mxArgs(n, j, wait)...)
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
		// An mxbench that reports another warm-up than it was given
		// would compare unlike rounds.
		if r.Warmup == nil || *r.Warmup != j.Warmup {
			got := "none"
			if r.Warmup != nil {
				got = strconv.Itoa(*r.Warmup)
			}
			return nil, fmt.Errorf("%s: the row of %d B reports warm-up %s, not the %d rounds asked", strings.Join(c.Args, " "), r.Size, got, j.Warmup)
		}
		pts = append(pts, alltoall.Point{Ranks: n, Size: r.Size, Iters: r.Iterations, Warmup: *r.Warmup, TMinUS: r.TMinUS, TAvgUS: r.TAvgUS, TMaxUS: r.TMaxUS, Schedule: r.Schedule, Wait: r.Wait})
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
