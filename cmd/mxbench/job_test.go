package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// asMainEnv makes the test binary run mxbench's main: --procs starts the
// running program again, which in a test is the test binary, and the
// launcher tests start it as the ranks.
const asMainEnv = "GOMX_MXBENCH_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		failAsAsked()
		limitFDsAsAsked()
		os.Exit(code(run(os.Stdout, os.Stderr, os.Args[1:])))
	}
	os.Exit(m.Run())
}

// runJob runs mxbench in this process as rank 0 of --procs, the other
// ranks being copies of the test binary, and returns stdout; stderr must
// stay empty (the other ranks print nothing when all goes well).
//
// GOTRACEBACK=all makes a job that hangs explain itself: rank 0 prints its
// goroutines when its wait times out or a rank fails, and the ranks still
// running print theirs when rank 0 stops them (tracebackAll).
func runJob(t *testing.T, args ...string) string {
	t.Helper()
	t.Setenv("GOTRACEBACK", "all")
	out, errb, err := runRank0(t, args...)
	if err != nil {
		t.Fatalf("mxbench %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errb)
	}
	if errb != "" {
		t.Errorf("mxbench %s: stderr not empty:\n%s", strings.Join(args, " "), errb)
	}
	return out
}

// runRank0 runs mxbench with args in this process, as rank 0 of the
// processes it starts, and returns what it printed and its error.
func runRank0(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	keepBinding(t)
	t.Setenv(asMainEnv, "1")
	// Rank 0 writes its own lines (a failed job's counters, say) while
	// the goroutines copying its ranks' output write theirs: both reach
	// the buffers through one lock.
	var out, errb bytes.Buffer
	o, e := &lockedWriter{w: &out}, &lockedWriter{w: &errb}
	err = run(o, e, args)
	os.Unsetenv(asMainEnv)
	o.mu.Lock()
	defer o.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	return out.String(), errb.String(), err
}

// keepBinding gives this process back, when the test ends, the CPUs and
// GOMAXPROCS it has now: rank 0 of a job run in this process binds every
// thread of it to one CPU, and the next job's ranks, started by this
// process, would inherit that one CPU and all run on it.
func keepBinding(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(procs)
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				// A thread that exited meanwhile is no error.
				if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
					t.Errorf("give thread %d its CPUs back: %v", tid, err)
				}
			}
		}
	})
}

// TestJobProcs: pingpong and stream between 2 processes mxbench starts
// itself reach each other through shared memory and say which strategy
// moved each size: eager for small messages, the forced strategy for
// large ones; every byte is verified.
func TestJobProcs(t *testing.T) {
	for _, c := range []struct {
		cmd, strategy string
		want          []string // per size: 8 B, 64 KiB
	}{
		{"pingpong", "", []string{"eager", "cma"}},
		{"pingpong", "rings", []string{"eager", "rings"}},
		{"stream", "cma", []string{"eager", "cma"}},
	} {
		args := []string{c.cmd, "--procs", "2", "--sizes", "8,64K", "--iterations", "20", "--warmup", "2", "--wait", "block", "--verify", "--json"}
		if c.strategy != "" {
			args = append(args, "--strategy", c.strategy)
		}
		rows := jsonRows(t, runJob(t, args...))
		if len(rows) != 2 {
			t.Fatalf("%v: %d rows, want 2", args, len(rows))
		}
		for i, r := range rows {
			if r.Procs != 2 || r.Errors != 0 || r.Iterations != 20 || r.MBPerS <= 0 || r.StrategyAsked != c.strategy {
				t.Errorf("%v: row %+v", args, r)
			}
			refused := r.Fallbacks > 0 && (r.Strategy == "rings" || r.Strategy == "cma+rings")
			if r.Strategy != c.want[i] && !(c.want[i] == "cma" && refused) { // a kernel that refuses CMA (Yama) falls back
				t.Errorf("%v: %s moved by %q, want %q", args, fmt.Sprint(r.Size), r.Strategy, c.want[i])
			}
		}
	}
}

// TestJobIdleRanks: pingpong and stream in a job of more than two
// processes run between ranks 0 and 1 while the others wait, every byte
// verified, and each row says how many CPUs the waiting ranks used
// meanwhile: some (they wake for the barriers around the size), and at
// most one each (every rank is bound to one CPU); a job of two has none
// to report; with --wait spin too, where the waiting ranks' boards still
// block. Every row, a job of two's too, says what a message cost the
// pair in CPU time: some, and less than the whole row's wall time on
// both CPUs. The rows match their schema in docs/json.md, idle fields
// included.
func TestJobIdleRanks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cmd, wait string }{{"pingpong", "block"}, {"stream", "block"}, {"pingpong", "spin"}} {
		cmd := c.cmd
		args := []string{cmd, "--procs", "4", "--sizes", "8,4K", "--iterations", "200", "--warmup", "2", "--wait", c.wait, "--verify", "--json"}
		out := runJob(t, args...)
		if _, errs := cli.CheckJSONLines(doc, []byte(out)); len(errs) > 0 {
			t.Errorf("%v: docs/json.md: %v", args, errs)
		}
		rows := jsonRows(t, out)
		if len(rows) != 2 {
			t.Fatalf("%v: %d rows, want 2", args, len(rows))
		}
		for _, r := range rows {
			if r.Procs != 4 || r.Errors != 0 || r.IdleCPU <= 0 || r.IdleCPU > 2 {
				t.Errorf("%v: row %+v: want 4 procs, no errors, and the 2 idle ranks' CPUs in (0, 2]", args, r)
			}
			checkPairCost(t, args, r)
		}
	}
	args := []string{"pingpong", "--procs", "2", "--sizes", "8", "--iterations", "20", "--wait", "block", "--json"}
	rows := jsonRows(t, runJob(t, args...))
	if len(rows) != 1 || rows[0].IdleCPU != 0 {
		t.Fatalf("a job of two reports idle ranks: %+v", rows)
	}
	checkPairCost(t, args, rows[0])
}

// checkPairCost checks a row's CPU time per message of ranks 0 and 1:
// more than none, and at most two CPUs busy for every message of the
// row's mean latency (a pingpong's one-way time, a stream's time per
// message), with a millisecond's slack a message for a loaded host.
func checkPairCost(t *testing.T, args []string, r result) {
	t.Helper()
	if r.PairCPUUS <= 0 || r.PairCPUUS > 2*r.LatencyUS+1000 || r.PairSwitches < 0 {
		t.Errorf("%v: row %+v: want the pair's CPU per message in (0, 2 x latency]", args, r)
	}
}

// TestBindSlot: --bind gives ranks 0 and 1 the first two CPUs at every
// job size, and the waiting ranks of a pingpong or stream the others when
// there are more; an alltoall's ranks go round robin.
func TestBindSlot(t *testing.T) {
	for _, c := range []struct {
		cmd               string
		rank, size, ncpus int
		want              int
	}{
		{"pingpong", 0, 16, 2, 0},
		{"pingpong", 1, 16, 2, 1},
		{"pingpong", 5, 16, 2, 5}, // two CPUs: shared, round robin
		{"pingpong", 2, 64, 8, 2},
		{"pingpong", 7, 64, 8, 7},
		{"pingpong", 8, 64, 8, 2}, // never CPU 0 or 1
		{"stream", 9, 64, 8, 3},
		{"pingpong", 1, 2, 8, 1},
		{"alltoall", 8, 64, 8, 8},
	} {
		got := bindSlot(c.cmd, c.rank, c.size, c.ncpus)
		if got != c.want {
			t.Errorf("bindSlot(%s, rank %d, %d ranks, %d CPUs) = %d, want %d", c.cmd, c.rank, c.size, c.ncpus, got, c.want)
		}
		if c.size > 2 && c.ncpus > 2 && c.rank >= 2 && (c.cmd == "pingpong" || c.cmd == "stream") && got%c.ncpus < 2 {
			t.Errorf("bindSlot(%s, rank %d, %d ranks, %d CPUs) = %d: a waiting rank on the pair's CPU", c.cmd, c.rank, c.size, c.ncpus, got)
		}
	}
}

// TestJobYield: the ranks of an alltoall yield their CPUs from their
// first empty look when the job's processes outnumber the CPUs they may
// run on (--yield auto: four ranks here, on the CPUs this process may
// use), always with --yield always, and never with
// --yield never; every byte is verified either way.
func TestJobYield(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	auto := 0
	if len(cpus) < n {
		auto = n
	}
	for _, c := range []struct {
		yield string
		want  int
	}{{"auto", auto}, {"always", n}, {"never", 0}} {
		args := []string{"alltoall", "--procs", fmt.Sprint(n), "--sizes", "8,4K", "--iterations", "200", "--warmup", "2",
			"--wait", "block", "--yield", c.yield, "--verify", "--json"}
		rows := jsonRows(t, runJob(t, args...))
		if len(rows) != 2 {
			t.Fatalf("%v: %d rows, want 2", args, len(rows))
		}
		for _, r := range rows {
			if r.Procs != n || r.Errors != 0 || r.YieldingRanks != c.want {
				t.Errorf("--yield %s on %d CPUs: %d of %d ranks yielded, want %d (row %+v)", c.yield, len(cpus), r.YieldingRanks, r.Procs, c.want, r)
			}
		}
	}
}

// TestJobBind: --procs binds its ranks one to a CPU, round robin, when
// the job has no more ranks than the CPUs this process may use, and leaves
// an oversubscribed job unbound with one processor a rank, as mpirun
// binds by default; --bind and --bind=false override the choice. The rows
// say how many ranks were bound, and every byte is verified.
func TestJobBind(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skip("one CPU: --procs binds no rank (bindProcess); run on a host with two or more")
	}
	fits, over := len(cpus), len(cpus)+2
	for _, c := range []struct {
		n    int
		bind []string
		want int
	}{
		{fits, nil, fits},
		{over, nil, 0},
		{over, []string{"--bind"}, over},
		{fits, []string{"--bind=false"}, 0},
	} {
		args := append([]string{"alltoall", "--procs", fmt.Sprint(c.n), "--sizes", "8", "--iterations", "50", "--warmup", "2",
			"--wait", "block", "--verify", "--json"}, c.bind...)
		// A subtest each: rank 0 runs in this process, and its binding
		// is undone when its (sub)test ends (keepBinding).
		t.Run(fmt.Sprintf("%d ranks %s", c.n, strings.Join(c.bind, " ")), func(t *testing.T) {
			var rec struct {
				Run struct {
					GOMAXPROCS int `json:"gomaxprocs"`
				} `json:"run"`
			}
			out := runJob(t, args...)
			rows := jsonRows(t, out)
			if len(rows) != 1 {
				t.Fatalf("%v: %d rows, want 1", args, len(rows))
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
				t.Fatal(err)
			}
			if r := rows[0]; r.Procs != c.n || r.Errors != 0 || r.BoundRanks != c.want {
				t.Errorf("%v on %d CPUs: %d of %d ranks bound, want %d (row %+v)", args, len(cpus), r.BoundRanks, r.Procs, c.want, r)
			}
			if c.n > len(cpus) && rec.Run.GOMAXPROCS != 1 {
				t.Errorf("%v on %d CPUs: rank 0 ran with GOMAXPROCS %d, want 1", args, len(cpus), rec.Run.GOMAXPROCS)
			}
		})
	}
}

// TestJobEngine: with --strategy shared the ranks send from their boards'
// shared pools and the receiver copies out of them with the CPU; with
// --strategy engine (the emulated engine by default on a machine with no
// CBDMA function bound to vfio-pci) the copy engine does. Every byte is
// verified, and the rows say what moved the messages and which engine the
// boards had. alltoall and overlap run on the engine too.
func TestJobEngine(t *testing.T) {
	t.Setenv("GOMX_SYSFS_ROOT", t.TempDir()) // no CBDMA function: the model
	rows := jsonRows(t, runJob(t, "pingpong", "--procs", "2", "--strategy", "shared,engine", "--sizes", "8,256K",
		"--iterations", "10", "--warmup", "2", "--wait", "block", "--verify", "--json"))
	want := []struct{ asked, strategy, engine string }{
		{"shared", "eager", "emulated"}, {"shared", "shared", "emulated"},
		{"engine", "eager", "emulated"}, {"engine", "engine", "emulated"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if r.StrategyAsked != want[i].asked || r.Strategy != want[i].strategy || r.Engine != want[i].engine ||
			r.Errors != 0 || r.Fallbacks != 0 || r.Iterations != 10 {
			t.Errorf("row %d: %+v, want asked %s, moved by %s, engine %s, no errors", i, r, want[i].asked, want[i].strategy, want[i].engine)
		}
	}
	out := runJob(t, "stream", "--procs", "2", "--strategy", "engine", "--engine", "emulated", "--sizes", "1M",
		"--iterations", "8", "--warmup", "1", "--wait", "block", "--verify")
	if !strings.Contains(out, "copy engine: emulated CBDMA") || !strings.Contains(out, " engine ") {
		t.Errorf("stream with --engine emulated:\n%s", out)
	}
	rows = jsonRows(t, runJob(t, "alltoall", "--procs", "3", "--strategy", "engine", "--sizes", "128K",
		"--iterations", "5", "--warmup", "1", "--wait", "block", "--verify", "--json"))
	if len(rows) != 1 || rows[0].Strategy != "engine" || rows[0].Engine != "emulated" {
		t.Errorf("alltoall on the engine: %+v", rows)
	}
	rows = jsonRows(t, runJob(t, "overlap", "--strategy", "engine", "--sizes", "1M", "--iterations", "5", "--wait", "block", "--json"))
	if len(rows) != 2 || rows[1].Kind != "availability" || rows[1].Strategy != "engine" || rows[1].Availability <= 0 || rows[1].EngineCPU != nil {
		t.Errorf("overlap on the engine: %+v", rows)
	}
	// --engine-cpu: the engine's threads on a CPU of their own, said in
	// the header and in every row.
	cpu := usableCPU(t)
	out = runJob(t, "overlap", "--strategy", "engine", "--engine", "emulated", "--engine-cpu", strconv.Itoa(cpu), "--sizes", "1M", "--iterations", "5", "--wait", "block")
	if !strings.Contains(out, fmt.Sprintf("its threads on CPU %d", cpu)) {
		t.Errorf("overlap with --engine-cpu %d: the header does not say where the engine ran:\n%s", cpu, out)
	}
	if strings.Contains(out, "--progress-cpu") {
		t.Errorf("overlap with --engine-cpu %d alone: the header says rank 0's other threads were moved:\n%s", cpu, out)
	}
	rows = jsonRows(t, runJob(t, "overlap", "--strategy", "engine", "--engine", "emulated", "--engine-cpu", strconv.Itoa(cpu), "--sizes", "1M", "--iterations", "5", "--wait", "block", "--json"))
	if len(rows) != 2 || rows[1].Strategy != "engine" || rows[1].Availability <= 0 {
		t.Fatalf("overlap with --engine-cpu: %+v", rows)
	}
	for i, r := range rows {
		if r.EngineCPU == nil || *r.EngineCPU != cpu {
			t.Errorf("row %d: engine_cpu %v, want %d", i, r.EngineCPU, cpu)
		}
	}
	if r := rows[1]; r.ProgressCPU != nil {
		t.Errorf("availability row: progress_cpu %v without --progress-cpu", *r.ProgressCPU)
	}
}

// TestJobBoundRankOneP: a rank bound to one CPU runs with one P from its
// first message, as one that mpirun starts bound does, and its report
// says so; with two, a yielding goroutine (the emulated engine polling
// for its doorbell) kept the CPU from the thread holding the goroutine it
// yielded to for a kernel time slice, and the engine rows measured those.
func TestJobBoundRankOneP(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() < 2 {
		t.Skip("one CPU allowed: mxbench leaves the ranks unbound (run on a machine or cpuset with two CPUs or more)")
	}
	t.Setenv("GOMX_SYSFS_ROOT", t.TempDir()) // no CBDMA function: the model
	out := runJob(t, "pingpong", "--procs", "2", "--strategy", "engine", "--sizes", "8,64K", "--iterations", "5",
		"--warmup", "1", "--wait", "block", "--verify", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		var rec struct {
			Run struct {
				GOMAXPROCS int `json:"gomaxprocs"`
			} `json:"run"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("bad JSON line %q: %v", l, err)
		}
		if rec.Run.GOMAXPROCS != 1 {
			t.Errorf("a rank bound to one CPU reports GOMAXPROCS %d, want 1: %s", rec.Run.GOMAXPROCS, l)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(lines), out)
	}
}

// TestJobOverlapProgressCPU: with rank 0's other threads on a CPU of their
// own, every message of the availability runs arrives intact (rank 1
// checks each, rank 0 the last answer), under both strategies that copy
// with the CPU in the progress goroutine and with the engine.
func TestJobOverlapProgressCPU(t *testing.T) {
	cpu := usableCPU(t)
	rows := jsonRows(t, runJob(t, "overlap", "--strategy", "cma,engine", "--engine", "emulated", "--progress-cpu", strconv.Itoa(cpu),
		"--sizes", "64K,1M", "--iterations", "10", "--wait", "block", "--verify", "--json"))
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.Kind != "availability" {
			continue
		}
		if r.Availability <= 0 || r.ProgressCPU == nil || *r.ProgressCPU != cpu || r.Strategy != r.StrategyAsked {
			t.Errorf("availability row %+v (progress_cpu %v), want progress_cpu %d and the strategy asked", r, r.ProgressCPU, cpu)
		}
	}
}

// usableCPU returns a CPU this process may run on: the last of its
// affinity mask.
func usableCPU(t *testing.T) int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			cpu = c
		}
	}
	return cpu
}

// TestJobAlltoallOverlap: alltoall among 3 processes reports the fastest,
// mean and slowest rank in order; overlap reports EMP's timings and an
// availability per size.
func TestJobAlltoallOverlap(t *testing.T) {
	rows := jsonRows(t, runJob(t, "alltoall", "--procs", "3", "--sizes", "0,4K,64K", "--iterations", "10", "--warmup", "1",
		"--wait", "block", "--verify", "--json"))
	if len(rows) != 3 {
		t.Fatalf("alltoall: %d rows, want 3", len(rows))
	}
	for _, r := range rows {
		if r.Procs != 3 || !(r.TMinUS > 0 && r.TMinUS <= r.TAvgUS && r.TAvgUS <= r.TMaxUS) || r.Strategy == "" {
			t.Errorf("alltoall row %+v", r)
		}
		if r.Warmup == nil || *r.Warmup != 1 {
			t.Errorf("alltoall row of %d B: warmup %s, want --warmup's 1", r.Size, intOrNone(r.Warmup))
		}
	}
	rows = jsonRows(t, runJob(t, "overlap", "--sizes", "8,64K", "--iterations", "10", "--wait", "block", "--json"))
	if len(rows) != 3 || rows[0].Kind != "timings" || rows[1].Kind != "availability" || rows[2].Kind != "availability" {
		t.Fatalf("overlap rows: %+v", rows)
	}
	if r := rows[0]; r.Size != empSize || r.PostSendUS <= 0 || r.PostRecvUS <= 0 || r.WaitUS <= 0 {
		t.Errorf("EMP timings %+v", r)
	}
	for _, r := range rows[1:] {
		if r.Availability <= 0 { // no exchange may complete during the computation on a loaded machine
			t.Errorf("availability %+v", r)
		}
	}
}

// TestJobAlltoallWarmupBySize: without --warmup, alltoall warms each size
// up for as many rounds as its default timed rounds, at least 20 (many for
// small blocks, a few for large ones, whatever --iterations says), runs
// them, and reports them in the table and the JSON.
func TestJobAlltoallWarmupBySize(t *testing.T) {
	rows := jsonRows(t, runJob(t, "alltoall", "--procs", "3", "--sizes", "8,4M,8M", "--iterations", "3", "--wait", "block", "--json"))
	// 4 MiB to 2 peers is 8 MiB a round, 32 rounds in 256 MiB; 8 MiB
	// would be 16 rounds, so the floor of 20.
	want := map[int]int{8: 1000, 4 << 20: 32, 8 << 20: alltoallMinWarmup}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for _, r := range rows {
		if r.Warmup == nil || *r.Warmup != want[r.Size] || r.Iterations != 3 {
			t.Errorf("row of %d B: warmup %s and %d timed rounds, want %d and 3", r.Size, intOrNone(r.Warmup), r.Iterations, want[r.Size])
		}
	}
	// The rounds ran: rank 0 of 2 sent its peer one tiny message a
	// round, 1000 untimed and 3 timed.
	args := []string{"alltoall", "--procs", "2", "--sizes", "8", "--iterations", "3", "--wait", "block", "--counters"}
	_, errb, err := runRank0(t, args...)
	if err != nil {
		t.Fatalf("mxbench %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb)
	}
	if !strings.Contains(errb, "send tiny: 1003;") {
		t.Errorf("mxbench %s: rank 0's counters do not show 1003 tiny sends:\n%s", strings.Join(args, " "), errb)
	}
	tab := runJob(t, "alltoall", "--procs", "2", "--sizes", "8", "--iterations", "3", "--warmup", "7", "--wait", "block")
	if !regexp.MustCompile(`(?m)^\s+8 B\s+3\s+7\s`).MatchString(tab) {
		t.Errorf("the table does not show --warmup's 7 rounds:\n%s", tab)
	}
}

// TestJobAlltoallWarmupTimeout: a warm-up that outlasts --timeout fails
// with an error that says how to fit it in.
func TestJobAlltoallWarmupTimeout(t *testing.T) {
	args := []string{"alltoall", "--procs", "2", "--sizes", "8", "--iterations", "3", "--warmup", "1000000000", "--wait", "block", "--timeout", "5s"}
	_, errb, err := runRank0(t, args...)
	if err == nil || !strings.Contains(err.Error(), "give --warmup N or a longer --timeout") {
		t.Errorf("mxbench %s: error %v, want one naming --warmup and --timeout\nstderr:\n%s", strings.Join(args, " "), err, errb)
	}
}

// intOrNone prints an optional count.
func intOrNone(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

// TestJobSlurmEnv: two processes started as srun starts them (SLURM_PROCID,
// SLURM_NTASKS, one node, a job id) find each other without GOMX_BOOTSTRAP;
// rank 0 prints the table, rank 1 nothing.
func TestJobSlurmEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs := make([]*bytes.Buffer, 2)
	errs := make([]*bytes.Buffer, 2)
	var cmds []*exec.Cmd
	for r := range 2 {
		c := exec.CommandContext(ctx, os.Args[0], "pingpong", "--sizes", "8,1K", "--iterations", "20", "--wait", "block", "--verify")
		c.Env = append(os.Environ(), asMainEnv+"=1", "GOMX_BOOTSTRAP=", fmt.Sprintf("SLURM_PROCID=%d", r), "SLURM_NTASKS=2",
			"SLURM_STEP_NUM_NODES=1", fmt.Sprintf("SLURM_JOB_ID=t%d", os.Getpid()), "SLURM_STEP_ID=0")
		outs[r], errs[r] = &bytes.Buffer{}, &bytes.Buffer{}
		c.Stdout, c.Stderr = outs[r], errs[r]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, err, outs[r], errs[r])
		}
	}
	if !strings.Contains(outs[0].String(), "2 processes started by the slurm launcher") || strings.Count(outs[0].String(), " eager ") != 2 {
		t.Errorf("rank 0's table:\n%s", outs[0])
	}
	if outs[1].Len() != 0 || errs[1].Len() != 0 || errs[0].Len() != 0 {
		t.Errorf("rank 1 printed %q and %q; rank 0 on stderr %q", outs[1], errs[1], errs[0])
	}
}

// TestJobRankFailure: ranks started with different arguments refuse the
// job, each in one line on stderr that names the rank.
func TestJobRankFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []*bytes.Buffer
	var cmds []*exec.Cmd
	for r, strategy := range []string{"rings,cma", "rings"} {
		c := exec.CommandContext(ctx, os.Args[0], "pingpong", "--sizes", "8", "--strategy", strategy, "--timeout", "30s")
		c.Env = append(os.Environ(), asMainEnv+"=1", "GOMX_BOOTSTRAP=", fmt.Sprintf("SLURM_PROCID=%d", r), "SLURM_NTASKS=2",
			"SLURM_STEP_NUM_NODES=1", fmt.Sprintf("SLURM_JOB_ID=f%d", os.Getpid()), "SLURM_STEP_ID=0")
		var e bytes.Buffer
		c.Stderr = &e
		errs = append(errs, &e)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for r, c := range cmds {
		err := c.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("rank %d: %v, want exit status 1", r, err)
		}
		msg := errs[r].String()
		want := fmt.Sprintf("mxbench: rank %d of 2: rank %d runs another mxbench", r, 1-r)
		if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, want) {
			t.Errorf("rank %d said %q, want one line starting %q", r, msg, want)
		}
	}
}

// TestJobUsage: the flags of a job are checked before anything starts.
func TestJobUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"alltoall"}, "add --procs N"},
		{[]string{"alltoall", "--procs", "1"}, "needs 2 processes"},
		{[]string{"pingpong", "--strategy", "rings"}, "add --procs 2"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "telepathy"}, "want all, or one or more of"},
		{[]string{"pingpong", "--procs", "2", "--transport", "loopback"}, "drop --transport"},
		{[]string{"pingpong", "--engine", "emulated"}, "add --procs 2 --strategy engine"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "cma", "--engine", "emulated"}, "only the strategies engine and auto use a copy engine"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "engine", "--engine", "none"}, "drop --engine none"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "engine", "--engine", "ioat0"}, "want emulated, none, or PCI addresses"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "engine", "--engine", "0000:00:04.0"}, "names 1 CBDMA functions for 2 processes"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "engine", "--engine", "0000:00:04.0,0000:00:04.0"}, "is given twice"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "cma", "--engine-cpu", "1"}, "add --engine emulated, or drop --engine-cpu"},
		{[]string{"pingpong", "--procs", "2", "--strategy", "engine", "--engine", "emulated", "--engine-cpu", "-2"}, "want a CPU number"},
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestJobPlot: --plot draws one curve per strategy on one chart.
func TestJobPlot(t *testing.T) {
	path := t.TempDir() + "/pp.svg"
	runJob(t, "pingpong", "--procs", "2", "--strategy", "rings,cma", "--sizes", "8,64K", "--iterations", "10", "--wait", "block", "--plot", path)
	for _, p := range []string{path, latencyPath(path)} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"large messages: rings", "large messages: cma"} {
			if !bytes.Contains(b, []byte(s)) {
				t.Errorf("%s lacks the curve %q", p, s)
			}
		}
	}
}

// TestDescribePaths: the setup line names which ranks share a host and
// which pairs disagree about their path.
func TestDescribePaths(t *testing.T) {
	for _, c := range []struct {
		rows []string
		want string
	}{
		{[]string{"ss", "ss"}, "paths: shared memory among all 2 ranks"},
		{[]string{"ssuu", "ssuu", "uuss", "uuss"}, "paths: shared memory within ranks [0 1] [2 3], udp between these 2 hosts"},
		{[]string{"suu", "usu", "uus"}, "paths: shared memory within ranks [0] [1] [2], udp between these 3 hosts"},
		{[]string{"ss", "us"}, "paths: shared memory within ranks [0] [1], udp between these 2 hosts (the two ends disagree on pairs 0-1)"},
	} {
		var rows [][]byte
		for _, r := range c.rows {
			rows = append(rows, []byte(r))
		}
		if got := describePaths(rows); got != c.want {
			t.Errorf("%q: %q, want %q", c.rows, got, c.want)
		}
	}
}

// TestPrintCounters: a failed rank's report of what its boards counted
// names the rank, the board and the counters that moved, the transport's
// among them, on one line per board.
func TestPrintCounters(t *testing.T) {
	nw := loopback.NewNetwork(loopback.Options{})
	defer nw.Close()
	var eps []*mx.Endpoint
	var boards []*mx.Board
	for _, nic := range []transport.NICID{0x02_00_00_00_00_01, 0x02_00_00_00_00_02} {
		port, err := nw.Attach(nic)
		if err != nil {
			t.Fatal(err)
		}
		o := mx.DefaultBoardOptions()
		o.Local.Off = true // through the wire, as between ranks
		b, err := mx.NewBoard(port, o)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ep, err := b.OpenEndpoint(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		boards, eps = append(boards, b), append(eps, ep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dest, err := eps[0].Connect(ctx, boards[1].NICID(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := eps[0].ISend([][]byte{[]byte("hello")}, dest, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := eps[1].IRecv([][]byte{make([]byte, 8)}, 7, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*mx.Request{s, r} {
		if _, err := q.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := &world{job: launch.Job{Rank: 1, Size: 2}, boards: boards[:1], eps: eps[:1]}
	var out bytes.Buffer
	w.printCounters(&out)
	line := out.String()
	if strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "mxbench: rank 1 of 2: board 0 counted: ") ||
		!strings.Contains(line, "send tiny: 1") || !strings.Contains(line, "; sent: ") {
		t.Errorf("printCounters printed %q", line)
	}
}

// TestJobCounters: with --counters rank 0 alone prints what its board
// counted over the job, once it ended: an alltoall among 4 ranks sent
// tiny messages, and it says how many.
func TestJobCounters(t *testing.T) {
	args := []string{"alltoall", "--procs", "4", "--sizes", "8", "--iterations", "50", "--warmup", "2", "--wait", "block", "--verify", "--counters"}
	_, errb, err := runRank0(t, args...)
	if err != nil {
		t.Fatalf("mxbench %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb)
	}
	lines := strings.Split(strings.TrimSpace(errb), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "mxbench: rank 0 of 4: board 0 counted: ") || !strings.Contains(lines[0], "send tiny: ") {
		t.Fatalf("stderr of %s: want one line of rank 0's counters, with its tiny sends; got:\n%s", strings.Join(args, " "), errb)
	}
}
