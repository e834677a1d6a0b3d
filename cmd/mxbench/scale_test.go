package main

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport/shm"
)

// TestChooseSchedule: auto takes MPICH's choice by size and ranks (Open
// MPI's for small blocks among blocking ranks), and an asked schedule is
// kept.
func TestChooseSchedule(t *testing.T) {
	for _, c := range []struct {
		asked    string
		size, n  int
		blocking bool
		want     string
	}{
		{schedAuto, 8, 8, false, schedBruck},
		{schedAuto, 8, 8, true, schedLinear},
		{schedAuto, 256, 15, true, schedLinear},
		{schedAuto, 8, 16, true, schedBruck},
		{schedAuto, 256, 128, true, schedBruck},
		{schedAuto, 8, 4, false, schedLinear},
		{schedAuto, 257, 16, false, schedLinear},
		{"", 32 << 10, 16, false, schedLinear},
		{schedAuto, 32<<10 + 1, 16, false, schedPairwise},
		{schedAuto, 32<<10 + 1, 16, true, schedLinear},
		{schedAuto, 1 << 20, 2, false, schedPairwise},
		{schedAuto, 1 << 20, 2, true, schedLinear},
		{schedBruck, 1 << 20, 2, true, schedBruck},
		{schedLinear, 8, 64, false, schedLinear},
	} {
		if got := chooseSchedule(c.asked, c.size, c.n, c.blocking); got != c.want {
			t.Errorf("chooseSchedule(%q, %d, %d, blocking %v) = %s, want %s", c.asked, c.size, c.n, c.blocking, got, c.want)
		}
	}
}

// TestAlltoallSchedules: each schedule moves every block byte-exact
// (--verify gives every destination its own bytes) among a number of ranks
// that is not a power of two, and the rows say which schedule ran; auto
// changes schedule with the size.
func TestAlltoallSchedules(t *testing.T) {
	for _, s := range []string{schedLinear, schedPairwise, schedBruck} {
		rows := jsonRows(t, runJob(t, "alltoall", "--procs", "5", "--sizes", "0,8,1K,40K", "--iterations", "4", "--warmup", "1",
			"--wait", "block", "--verify", "--json", "--schedule", s))
		if len(rows) != 4 {
			t.Fatalf("--schedule %s: %d rows, want 4", s, len(rows))
		}
		for _, r := range rows {
			if r.Schedule != s || r.Procs != 5 {
				t.Errorf("--schedule %s: row %+v", s, r)
			}
		}
	}
	rows := jsonRows(t, runJob(t, "alltoall", "--procs", "16", "--sizes", "8,1K,64K", "--iterations", "2", "--warmup", "1",
		"--wait", "block", "--verify", "--json"))
	var got []string
	for _, r := range rows {
		got = append(got, r.Schedule)
	}
	if want := []string{schedBruck, schedLinear, schedLinear}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("auto among 16 blocking ranks at 8 B, 1 KiB, 64 KiB ran %v, want %v", got, want)
	}
}

// TestAlltoallUsage: a schedule that does not exist, a job larger than
// the collectives' matches carry, and one with more ranks on a host than
// the shared-memory receive queue takes (transport/shm MaxProducers, one
// process more than its producers: the receiver itself), are refused
// with a message naming the limit and the fix, before any process
// starts. The host's limit holds for pingpong's idle ranks, and under a
// launcher for the ranks it says share a node, on one node or several,
// each launcher's message naming its own option. So is a job whose ranks
// on a host would hold more descriptors than RLIMIT_NOFILE allows (in a
// child whose limit is lowered), the message naming `ulimit -n` and the
// count, and how many ranks fit.
func TestAlltoallUsage(t *testing.T) {
	const host = shm.MaxProducers + 1
	hostFix := fmt.Sprintf("at most %d processes a host reach each other through shared memory", host)
	over, size := fmt.Sprint(host+1), fmt.Sprint(4*host)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"alltoall", "--procs", "4", "--schedule", "ring"}, want: "want auto, linear, pairwise or bruck"},
		{args: []string{"alltoall", "--procs", "70000"}, want: "at most 65536"},
		{args: []string{"alltoall", "--procs", "64", "--sizes", "64M"}, want: "give smaller --sizes or --end, or fewer ranks"},
		{args: []string{"alltoall", "--procs", over}, want: hostFix},
		{args: []string{"pingpong", "--procs", over}, want: fmt.Sprintf("--procs %s: %s", over, hostFix)},
		{args: []string{"pingpong", "--procs", over}, want: fmt.Sprintf("MaxProducers): run %d or fewer (run `mxbench", host)},
		{args: []string{"alltoall"}, want: fmt.Sprintf("%s ranks on one host (openmpi): %s", over, hostFix), env: map[string]string{"OMPI_COMM_WORLD_RANK": "0",
			"OMPI_COMM_WORLD_SIZE": over, "OMPI_COMM_WORLD_LOCAL_SIZE": over}},
		// Several nodes, one of them running too many.
		{args: []string{"alltoall"}, want: fmt.Sprintf("%s of the %s ranks on one host (openmpi): %s", over, size, hostFix), env: map[string]string{"OMPI_COMM_WORLD_RANK": "0",
			"OMPI_COMM_WORLD_SIZE": size, "OMPI_COMM_WORLD_LOCAL_SIZE": over}},
		{args: []string{"alltoall"}, want: fmt.Sprintf("(mpirun --npernode %d)", host), env: map[string]string{"OMPI_COMM_WORLD_RANK": "0",
			"OMPI_COMM_WORLD_SIZE": size, "OMPI_COMM_WORLD_LOCAL_SIZE": over}},
		{args: []string{"alltoall"}, want: fmt.Sprintf("(srun --ntasks-per-node %d)", host), env: map[string]string{"SLURM_PROCID": "0",
			"SLURM_NTASKS": size, "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_TASKS_PER_NODE": fmt.Sprintf("%d(x2),%s", host-1, over)}},
		{args: []string{"alltoall"}, want: fmt.Sprintf("(mpiexec -ppn %d)", host), env: map[string]string{"PMI_RANK": "0",
			"PMI_SIZE": size, "MPI_LOCALNRANKS": over}},
	} {
		jobEnv = func(k string) string { return c.env[k] }
		var out, errb bytes.Buffer
		err := run(&out, &errb, c.args)
		jobEnv = os.Getenv
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mxbench %s (env %v): %v, want an error saying %q", strings.Join(c.args, " "), c.env, err, c.want)
		}
	}
	// More descriptors than RLIMIT_NOFILE's hard limit allows, in a
	// child whose limits are lowered: rank 0 of --procs holds 7 a rank
	// on one board, 4 more a rank on each board --strategy adds and 1
	// more for each pool --verify fills; a launcher's rank 4 a rank of
	// its host.
	const limit = 256
	all, err := jobStrategies("all")
	if err != nil {
		t.Fatal(err)
	}
	allNeed, allPer, _ := fdsNeed("alltoall", launch.Job{Launcher: procsLauncher, NodeRanks: 16}, all, true)
	for _, c := range []struct {
		args, env []string
		want      []string
	}{
		{args: []string{"alltoall", "--procs", "64"}, want: []string{fmt.Sprintf("`ulimit -n %d`", fdsBase+7*63), fmt.Sprintf("run %d or fewer", (limit-fdsBase)/7+1),
			fmt.Sprintf("the hard limit of RLIMIT_NOFILE, %d,", limit)}},
		{args: []string{"alltoall", "--procs", "16", "--strategy", "all", "--verify"}, want: []string{fmt.Sprintf("`ulimit -n %d`", allNeed),
			fmt.Sprintf("on each of its %d boards", len(all)), fmt.Sprintf("run %d or fewer", (limit-(allNeed-allPer*15))/allPer+1)}},
		{args: []string{"alltoall"}, env: []string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=128", "OMPI_COMM_WORLD_LOCAL_SIZE=64"},
			want: []string{fmt.Sprintf("`ulimit -n %d`", fdsBase+4*63), fmt.Sprintf("(mpirun --npernode %d)", (limit-fdsBase)/4+1)}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), append(c.env, asMainEnv+"=1", fmt.Sprintf("%s=%d", fdLimitEnv, limit))...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		cancel()
		if err == nil {
			t.Errorf("mxbench %s (env %v) under a limit of %d descriptors ran", strings.Join(c.args, " "), c.env, limit)
		}
		for _, w := range c.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("mxbench %s (env %v) under a limit of %d descriptors: want an error saying %q, stderr:\n%s", strings.Join(c.args, " "), c.env, limit, w, errb.String())
			}
		}
	}
}

// TestAlltoallWithinDescriptorLimit: a job the descriptor check lets
// through runs at that limit: with RLIMIT_NOFILE, soft and hard, just
// what rank 0 needs by the check's count (fdsNeed), for one board and for
// one a strategy, with and without the pool segments of --verify, every
// rank connects to every other (linear: each pair both ways), 64 KiB
// blocks take lanes, every block is verified and the job succeeds. With
// the soft limit below the count and the hard one above, mxbench raises
// the soft one and the job succeeds too.
func TestAlltoallWithinDescriptorLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 8 processes a job: run without -short")
	}
	shmDir(t)
	const n = 8
	job := launch.Job{Size: n, Launcher: procsLauncher, OneNode: true, NodeRanks: n}
	for _, c := range []struct {
		strategy string
		verify   bool
		soft     int // 0: the count
	}{
		{verify: true},
		{strategy: "rings,cma,shared"},
		{strategy: "shared", verify: true},
		{strategy: "all"},
		{strategy: "all", verify: true},
		{strategy: "shared", verify: true, soft: 32},
	} {
		strategies, err := jobStrategies(c.strategy)
		if err != nil {
			t.Fatal(err)
		}
		need, _, _ := fdsNeed("alltoall", job, strategies, c.verify)
		limit := fmt.Sprint(need)
		if c.soft != 0 {
			limit = fmt.Sprintf("%d:%d", c.soft, need+64)
		}
		args := []string{"alltoall", "--procs", fmt.Sprint(n), "--sizes", "8,64K", "--iterations", "3", "--warmup", "1",
			"--wait", "block", "--schedule", "linear", "--timeout", "2m"}
		if c.strategy != "" {
			args = append(args, "--strategy", c.strategy)
		}
		if c.verify {
			args = append(args, "--verify")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), asMainEnv+"=1", fdLimitEnv+"="+limit)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err = cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("mxbench %s with RLIMIT_NOFILE %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), limit, err, out.String(), errb.String())
		}
	}
}

// fdLimitEnv asks the test binary run as mxbench to set its RLIMIT_NOFILE
// first (limitFDsAsAsked): to its value, soft and hard, as `ulimit -n`
// would for a shell's children, or, given as soft:hard, to each.
const fdLimitEnv = "GOMX_TEST_NOFILE"

// limitFDsAsAsked sets RLIMIT_NOFILE as fdLimitEnv asks; it exits when
// it cannot, or the test would run with a limit it did not ask for. The
// ranks --procs starts inherit rank 0's limit, as they would from a
// shell's `ulimit -n`, so they leave it.
func limitFDsAsAsked() {
	v := os.Getenv(fdLimitEnv)
	if v == "" || os.Getenv("MXBENCH_PROCS_CHILD") != "" {
		return
	}
	soft, hard, two := strings.Cut(v, ":")
	if !two {
		hard = soft
	}
	cur, err := strconv.ParseUint(soft, 10, 64)
	var hi uint64
	if err == nil {
		hi, err = strconv.ParseUint(hard, 10, 64)
	}
	if err == nil {
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: cur, Max: hi})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%s: %v\n", fdLimitEnv, v, err)
		os.Exit(2)
	}
}

// TestAlltoallTagsPastRanks256: alltoall's matches keep every rank apart,
// and every Bruck step of a rank's, up to the largest job mxbench runs
// (maxRanks): no two (rank, step) share a match, none is another job
// message's (collectives), and the rank reads back from its match (a
// rank of 8 bits, as the issue found, made rank 256 rank 0's twin).
func TestAlltoallTagsPastRanks256(t *testing.T) {
	steps := bits.Len(uint(maxRanks - 1)) // Bruck's ceil(log2 n) steps, numbered from 1
	seen := make(map[uint64][2]int, maxRanks*(steps+1))
	for src := range maxRanks {
		for step := 0; step <= steps; step++ {
			tag := a2aTag(src, step)
			if old, dup := seen[tag]; dup {
				t.Fatalf("rank %d step %d and rank %d step %d share match %#x", src, step, old[0], old[1], tag)
			}
			seen[tag] = [2]int{src, step}
			if tag>>48 != tagA2A>>48 || int(uint32(tag)) != src || int(tag>>32&0xffff) != step {
				t.Fatalf("rank %d step %d: match %#x does not read back (or leaves alltoall's tags)", src, step, tag)
			}
		}
	}
}

// TestAlltoallAtScale: jobs of 32, 64 and 128 processes, oversubscribed on
// this host with blocking waits, move every block byte-exact, and each
// rank's shared memory, as its transport counts it, stays within 64 MiB:
// its own receive queue and the queue of each peer it sends to (so at
// least one queue per rank of the job), and no more lanes than the
// transport allows each way (transport/shm Options.Lanes). Once a job has
// ended it has left nothing behind: no file in its endpoint directory, no
// rank unreaped, and rank 0 (this process) holds the mappings and
// descriptors it held before (leaktest.WaitClean: its board, the ranks'
// pipes and pidfds, every peer's connections and eventfds, all closed).
// Under the race detector only the 32-rank job runs (every rank is
// several times slower and larger); make test-scale runs all three
// without it.
func TestAlltoallAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts up to 128 processes: run without -short (make test-scale)")
	}
	const lanes = 8 // transport/shm's default Options.Lanes, each way
	for _, n := range []int{32, 64, 128} {
		t.Run(fmt.Sprintf("procs=%d", n), func(t *testing.T) {
			if raceEnabled && n > 32 {
				t.Skipf("%d processes under the race detector: make test-scale runs it without", n)
			}
			dir := shmDir(t)
			before := leaktest.Now(t)
			rows := jsonRows(t, runJob(t, "alltoall", "--procs", fmt.Sprint(n), "--sizes", "8,4K", "--iterations", "2", "--warmup", "1",
				"--wait", "block", "--verify", "--json", "--timeout", "5m"))
			if len(rows) != 2 {
				t.Fatalf("%d rows, want 2", len(rows))
			}
			for _, r := range rows {
				if r.Procs != n || r.ShmRingsMax > 2*lanes {
					t.Errorf("row %+v: want %d procs with at most %d lanes each (%d each way)", r, n, 2*lanes, lanes)
				}
				if r.StartupMS <= 0 || r.RSSMax <= 0 {
					t.Errorf("row %+v: no start-up time or resident memory reported", r)
				}
				if least := int64(n) * shm.DefaultQueueSize; r.ShmMappedMax < least || r.ShmMappedMax > 64<<20 {
					t.Errorf("a rank maps %d bytes of shared memory, want %d queues (%d bytes) or more and at most 64 MiB", r.ShmMappedMax, n, least)
				}
				if r.ShmNodeBytes < r.ShmMappedMax || r.ShmNodeBytes > int64(n)*(64<<20) {
					t.Errorf("the node holds %d bytes, outside %d..%d", r.ShmNodeBytes, r.ShmMappedMax, int64(n)*(64<<20))
				}
			}
			leaktest.WaitClean(t, before, dir, time.Minute)
		})
	}
}

// TestAlltoallKilledPeer: a rank killed (SIGKILL) in the middle of a
// 64-rank alltoall is reported by rank 0, naming the rank and the signal;
// every other rank ends instead of waiting for it (nobody hangs: the job
// ends long before its --timeout, and no rank outlives it); and what the
// killed rank could not remove (its socket in the endpoint directory) is
// swept by the next job's first board, so nothing is left behind.
func TestAlltoallKilledPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 64 processes: run without -short")
	}
	if raceEnabled {
		t.Skip("64 processes under the race detector: make test-scale runs it without")
	}
	dir := shmDir(t)
	const limit = 4 * time.Minute // the job's --timeout: ending near it means a rank waited for the dead one
	ctx, cancel := context.WithTimeout(context.Background(), limit+time.Minute)
	defer cancel()
	// Rounds enough to outlast any machine: the job ends only by the kill.
	cmd := exec.CommandContext(ctx, os.Args[0], "alltoall", "--procs", "64", "--sizes", "8", "--iterations", "100000000",
		"--warmup", "1", "--wait", "block", "--timeout", limit.String())
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Every rank has opened its board once its socket is in the directory.
	for i := 0; boardSockets(dir) < 64; i++ {
		if i == 24000 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%d of 64 boards opened in 4 minutes\nstderr:\n%s", boardSockets(dir), errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	children := leaktest.Children(t, cmd.Process.Pid)
	if len(children) != 63 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("rank 0 has %d children, want 63", len(children))
	}
	victim := children[len(children)/2]
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	took := time.Since(start)
	if ctx.Err() != nil || took >= limit {
		t.Fatalf("the job ended %v after its start, at its --timeout: the ranks waited for the killed one\nstderr:\n%s", took.Round(time.Second), errb.String())
	}
	if err == nil {
		t.Fatalf("the job succeeded although a rank was killed\nstderr:\n%s", errb.String())
	}
	if s := errb.String(); !strings.Contains(s, "of 64") || !strings.Contains(s, "killed") {
		t.Errorf("rank 0's report does not name the rank of 64 and its signal:\n%s", s)
	}
	t.Logf("the job ended %v after its start; rank 0 reported:\n%s", took.Round(time.Second), firstLines(errb.String(), 5))
	for _, pid := range children {
		for i := 0; syscall.Kill(pid, 0) == nil; i++ {
			if i == 3000 {
				t.Fatalf("rank pid %d still runs 30 s after the job ended", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The next job's boards sweep the killed rank's socket.
	runJob(t, "alltoall", "--procs", "2", "--sizes", "8", "--iterations", "2", "--warmup", "1", "--wait", "block")
	if n := boardSockets(dir); n != 0 {
		t.Errorf("%d sockets left in the endpoint directory after the next job", n)
	}
}

// TestProcsDieWithRankZero: rank 0 of --procs killed (SIGKILL: it can
// stop nobody) takes the ranks it started with it, whatever they wait
// for: in a pingpong, rank 1 waits for the next ping and the others at a
// barrier, each for up to the job's --timeout (an hour here) had they not
// been told.
func TestProcsDieWithRankZero(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes: run without -short")
	}
	dir := shmDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "pingpong", "--procs", "4", "--sizes", "8", "--iterations", "100000000",
		"--wait", "block", "--timeout", "1h")
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; boardSockets(dir) < 4; i++ {
		if i == 6000 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%d of 4 boards opened in a minute\nstderr:\n%s", boardSockets(dir), errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	children := leaktest.Children(t, cmd.Process.Pid)
	if len(children) != 3 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("rank 0 has %d children, want 3", len(children))
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, pid := range children {
		for i := 0; syscall.Kill(pid, 0) == nil; i++ {
			if i == 3000 {
				for _, p := range children {
					syscall.Kill(p, syscall.SIGKILL)
				}
				t.Fatalf("rank pid %d still ran 30 s after rank 0 was killed", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// boardSockets counts the boards' sockets under an endpoint directory.
func boardSockets(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(d.Name(), ".sock") {
			n++
		}
		return nil
	})
	return n
}

// firstLines is s's first n lines.
func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

// shmDir gives the test an endpoint directory of its own (GOMX_SHM_DIR,
// for this process and the ranks it starts), removed when it ends.
func shmDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "gomx-"+strings.NewReplacer("/", "-", "=", "-").Replace(t.Name())+"-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("GOMX_SHM_DIR", dir)
	return dir
}
