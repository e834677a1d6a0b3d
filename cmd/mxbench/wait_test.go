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

// TestChooseWait: a job that --procs starts gets a blocking wait when it
// has more ranks than this host's CPUs and busy-polls when it has no more;
// a pingpong's waiting ranks do not count; a --wait given is kept.
func TestChooseWait(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	c := len(cpus)
	fits := waitSpin // two ranks, each a CPU
	if c < 2 {
		fits = waitBlock
	}
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
		{"alltoall", waitAuto, job(max(c, 2)), true, fits},
		{"overlap", waitAuto, job(c + 1), true, waitBlock},
		{"pingpong", waitAuto, job(c + 1), true, fits},
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
	for _, n := range []int{2, 8, 12, 15, 16, 64} {
		for _, size := range []int{8, 256, 4 << 10, 64 << 10, 1 << 20} {
			a := chooseSchedule(schedAuto, size, n, agreedBlocking(false, waitSpin))
			b := chooseSchedule(schedAuto, size, n, agreedBlocking(false, waitBlock))
			if a != b {
				t.Errorf("%d ranks, %d B: a spinning rank runs %s, a blocking one %s", n, size, a, b)
			}
		}
	}

	var parent benchFlags
	parent.wait = waitAuto
	parent.chooseWait("alltoall", launch.Job{Size: 2, Launcher: procsLauncher, OneNode: true, NodeRanks: 2}, true)
	parent.wait, parent.waitWhy = waitSpin, "auto: 2 polling ranks, a CPU each of 2" // as on a host of 2 CPUs or more
	for _, kv := range parent.procsWaitEnviron() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("MXBENCH_PROCS_CHILD", "1")
	var child benchFlags
	child.wait = waitAuto
	child.chooseWait("alltoall", launch.Job{Size: 4096, Launcher: "pmi", NodeRanks: 4096}, true) // its own CPUs would make it block
	if child.wait != waitSpin || child.waitWhy != parent.waitWhy || child.schedBlocking {
		t.Errorf("a started rank waits %s (%q, schedule by blocking %v), want rank 0's %s (%q)", child.wait, child.waitWhy, child.schedBlocking, parent.wait, parent.waitWhy)
	}
}

// TestAlltoallWaitAuto: an alltoall of more ranks than this host's CPUs,
// run without --wait, blocks and says so in its JSON and its header; with
// --wait spin it spins.
func TestAlltoallWaitAuto(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	n := len(cpus) + 1
	if n > 9 {
		t.Skipf("%d CPUs: a job of %d ranks would take long here; TestChooseWait covers the rule", len(cpus), n)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, waitBlock}, {[]string{"--wait", "spin"}, waitSpin},
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
		if rec.Wait != tc.want || !strings.Contains(rec.Setup, rec.WaitWhy) {
			t.Errorf("%v: wait %q (%q), header %q; want %s, the reason in the header", args, rec.Wait, rec.WaitWhy, rec.Setup, tc.want)
		}
		if tc.args == nil && rec.WaitWhy != "auto: "+strconv.Itoa(n)+" polling ranks on "+strconv.Itoa(len(cpus))+" CPUs" {
			t.Errorf("%v: wait_why %q, want the ranks and the CPUs", args, rec.WaitWhy)
		}
	}
}

// TestCountCPUList: the kernel's CPU lists count as many CPUs as they
// name, and what is not one counts none.
func TestCountCPUList(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8-11": 8, "0,2,4-5": 4, "": 0, "3-1": 0, "x": 0} {
		if got := countCPUList(s); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", s, got, want)
		}
	}
	if n := onlineCPUs(); n < 1 {
		t.Errorf("onlineCPUs() = %d on a running host", n)
	}
}
