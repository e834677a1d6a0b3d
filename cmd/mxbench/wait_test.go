package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
)

// TestAutoWait: --wait auto blocks when a job's polling ranks outnumber
// the host's CPUs and spins when each has one, and says which.
func TestAutoWait(t *testing.T) {
	for _, tc := range []struct {
		ranks, cpus int
		want        string
	}{
		{16, 2, waitBlock}, {3, 2, waitBlock}, {2, 2, waitSpin}, {2, 1, waitBlock},
		{4, 64, waitSpin}, {64, 64, waitSpin}, {65, 64, waitBlock}, {8, 0, waitSpin},
	} {
		got, why := autoWait(tc.ranks, tc.cpus)
		if got != tc.want {
			t.Errorf("%d ranks on %d CPUs: %s (%s), want %s", tc.ranks, tc.cpus, got, why, tc.want)
		}
		if !strings.HasPrefix(why, "auto: ") || !strings.Contains(why, strconv.Itoa(tc.ranks)+" polling ranks") {
			t.Errorf("%d ranks on %d CPUs: why %q does not say auto and the ranks", tc.ranks, tc.cpus, why)
		}
	}
}

// TestDecideWait: --wait auto's choice from this host's facts: the
// CPUs allowed capped by the quota, the ranks on this host or, when the
// launcher does not say, the job's (and why says so), and an outside
// launcher's binding to one CPU of the several it gave.
func TestDecideWait(t *testing.T) {
	for _, tc := range []struct {
		name      string
		h         waitHost
		want, why string
	}{
		{"procs oversubscribed", waitHost{launcher: procsLauncher, size: 16, local: 16, allowed: 2, quota: 2}, waitBlock, "auto: 16 polling ranks on 2 CPUs"},
		{"procs a CPU each", waitHost{launcher: procsLauncher, size: 4, local: 4, allowed: 8, quota: 8}, waitSpin, "auto: 4 polling ranks, a CPU each of 8"},
		{"quota caps the mask", waitHost{launcher: procsLauncher, size: 4, local: 4, allowed: 8, quota: 2}, waitBlock, "auto: 4 polling ranks on 2 CPUs"},
		{"mask caps the quota", waitHost{launcher: procsLauncher, size: 4, local: 4, allowed: 2, quota: 8}, waitBlock, "auto: 4 polling ranks on 2 CPUs"},
		{"quota unknown", waitHost{launcher: procsLauncher, size: 2, local: 2, allowed: 2}, waitSpin, "auto: 2 polling ranks, a CPU each of 2"},
		{"nothing known", waitHost{launcher: procsLauncher, size: 8, local: 8}, waitSpin, "auto: 8 polling ranks, the CPUs unknown"},
		{"outside, bound to one of several", waitHost{launcher: "openmpi", outside: true, size: 8, local: 8, allowed: 1, quota: 1, given: 8}, waitSpin, "auto: openmpi bound this rank to one CPU of the 8 it gave"},
		{"outside, the job given one CPU", waitHost{launcher: "openmpi", outside: true, size: 8, local: 8, allowed: 1, quota: 1, given: 1}, waitBlock, "auto: 8 polling ranks on 1 CPUs"},
		{"outside, what it gave unknown", waitHost{launcher: "slurm", outside: true, size: 4, local: 4, allowed: 1, quota: 1}, waitBlock, "auto: 4 polling ranks on 1 CPUs"},
		{"outside, one rank", waitHost{launcher: "slurm", outside: true, size: 1, local: 1, allowed: 1, given: 4}, waitSpin, "auto: 1 polling ranks, a CPU each of 1"},
		{"outside, unbound", waitHost{launcher: "slurm", outside: true, size: 4, local: 4, allowed: 4, quota: 4, given: 4}, waitSpin, "auto: 4 polling ranks, a CPU each of 4"},
		{"outside, local ranks unknown, block", waitHost{launcher: "pmi", outside: true, size: 16, allowed: 4, quota: 4, given: 4}, waitBlock, "auto: local ranks unknown, the job's 16 polling ranks on 4 CPUs"},
		{"outside, local ranks unknown, spin", waitHost{launcher: "pmi", outside: true, size: 4, allowed: 8, quota: 8, given: 8}, waitSpin, "auto: local ranks unknown, the job's 4 polling ranks, a CPU each of 8"},
	} {
		wait, why := decideWait(tc.h)
		if wait != tc.want || why != tc.why {
			t.Errorf("%s: %s (%q), want %s (%q)", tc.name, wait, why, tc.want, tc.why)
		}
	}
}

// fakeHost makes hostFacts report allowed CPUs, as many of quota, for
// the rest of t.
func fakeHost(t *testing.T, allowed int) {
	real := hostFacts
	t.Cleanup(func() { hostFacts = real })
	hostFacts = func(cmd string, job launch.Job) waitHost {
		h := real(cmd, job)
		h.allowed, h.quota = allowed, allowed
		return h
	}
}

// TestChooseWait: a job that --procs starts gets a blocking wait when it
// has more ranks than this host's CPUs and busy-polls when it has no more;
// a pingpong's waiting ranks do not count; a --wait given is kept.
func TestChooseWait(t *testing.T) {
	const c = 4
	fakeHost(t, c)
	job := func(n int) launch.Job {
		return launch.Job{Size: n, Launcher: procsLauncher, OneNode: true, NodeRanks: n}
	}
	for _, tc := range []struct {
		cmd, given string
		job        launch.Job
		isJob      bool
		want       string
	}{
		{"alltoall", waitAuto, job(c + 1), true, waitBlock},
		{"alltoall", waitAuto, job(4 * c), true, waitBlock},
		{"alltoall", waitAuto, job(c), true, waitSpin},
		{"overlap", waitAuto, job(c + 1), true, waitBlock},
		{"pingpong", waitAuto, job(c + 1), true, waitSpin},
		{"pingpong", waitAuto, launch.Job{}, false, waitSpin},
		{"alltoall", waitSpin, job(4 * c), true, waitSpin},
		{"alltoall", waitBlock, job(2), true, waitBlock},
	} {
		var f benchFlags
		f.wait = tc.given
		f.chooseWait(tc.cmd, tc.job, tc.isJob)
		if f.wait != tc.want {
			t.Errorf("%s, --wait %s, %d ranks on %d CPUs: %s (%s), want %s", tc.cmd, tc.given, tc.job.Size, c, f.wait, f.waitWhy, tc.want)
		}
		if tc.given != waitAuto && f.waitWhy != "--wait "+tc.given {
			t.Errorf("%s, --wait %s: why %q, want the flag", tc.cmd, tc.given, f.waitWhy)
		}
		if tc.given == waitAuto && !strings.HasPrefix(f.waitWhy, "auto: ") {
			t.Errorf("%s, --wait auto: why %q does not say auto", tc.cmd, f.waitWhy)
		}
		if tc.isJob && f.schedBlocking != (f.wait == waitBlock) {
			t.Errorf("%s, --wait %s: schedule by blocking %v, want by the wait %s every rank has", tc.cmd, tc.given, f.schedBlocking, f.wait)
		}
	}
}

// TestScheduleAgreed: ranks an outside launcher started with --wait auto,
// one that chose to spin and one that chose to block (CPU sets of
// different sizes), run the same alltoall schedule at every size and job
// size; a rank --procs started takes rank 0's wait, whatever its own CPUs
// say, and so its schedule.
func TestScheduleAgreed(t *testing.T) {
	t.Setenv("MXBENCH_PROCS_CHILD", "")
	job := launch.Job{Size: 12, Launcher: "openmpi", NodeRanks: 12}
	var ranks [2]benchFlags
	for i, cpus := range []int{64, 2} {
		fakeHost(t, cpus)
		ranks[i].wait = waitAuto
		ranks[i].chooseWait("alltoall", job, true)
	}
	if ranks[0].wait == ranks[1].wait {
		t.Fatalf("both ranks chose %s: want one spinning, one blocking", ranks[0].wait)
	}
	for _, n := range []int{2, 8, 12, 15, 16, 64} {
		for _, size := range []int{8, 256, 4 << 10, 64 << 10, 1 << 20} {
			a := chooseSchedule(schedAuto, size, n, ranks[0].schedBlocking)
			b := chooseSchedule(schedAuto, size, n, ranks[1].schedBlocking)
			if a != b {
				t.Errorf("%d ranks, %d B: a spinning rank runs %s, a blocking one %s", n, size, a, b)
			}
		}
	}

	var parent benchFlags
	parent.wait = waitAuto
	fakeHost(t, 64)
	procs := launch.Job{Size: 12, Launcher: procsLauncher, OneNode: true, NodeRanks: 12}
	parent.chooseWait("alltoall", procs, true)
	for _, kv := range parent.procsWaitEnviron() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("MXBENCH_PROCS_CHILD", "1")
	fakeHost(t, 1) // the child's own CPUs would make it block
	var child benchFlags
	child.wait = waitAuto
	child.chooseWait("alltoall", launch.Job{Size: 12, Launcher: "pmi", NodeRanks: 12}, true)
	if child.wait != parent.wait || child.waitWhy != parent.waitWhy || child.schedBlocking != parent.schedBlocking {
		t.Errorf("a started rank waits %s (%q, schedule by blocking %v), rank 0 %s (%q, %v)",
			child.wait, child.waitWhy, child.schedBlocking, parent.wait, parent.waitWhy, parent.schedBlocking)
	}
}

// TestAlltoallWaitAuto: an alltoall of more ranks than the CPUs its rank 0
// may run on, run without --wait, blocks and says so in its JSON and its
// header; with --wait spin it spins.
func TestAlltoallWaitAuto(t *testing.T) {
	const cpus, n = 2, 3
	fakeHost(t, cpus)
	for _, tc := range []struct {
		args      []string
		want, why string
	}{
		{nil, waitBlock, "auto: 3 polling ranks on 2 CPUs"},
		{[]string{"--wait", "spin"}, waitSpin, "--wait spin"},
	} {
		args := append([]string{"alltoall", "--procs", strconv.Itoa(n), "--sizes", "8", "--iterations", "10", "--warmup", "10", "--json"}, tc.args...)
		out := runJob(t, args...)
		var rec struct {
			Setup   string `json:"setup"`
			Wait    string `json:"wait"`
			WaitWhy string `json:"wait_why"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
			t.Fatalf("%v: %v in %q", args, err, out)
		}
		if rec.Wait != tc.want || rec.WaitWhy != tc.why || !strings.Contains(rec.Setup, "("+tc.why+")") {
			t.Errorf("%v: wait %q (%q), header %q; want %s (%q), the reason in the header", args, rec.Wait, rec.WaitWhy, rec.Setup, tc.want, tc.why)
		}
	}
}
