package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
)

// The waits --wait names.
const (
	// waitSpin busy-polls the transport (mx.BoardOptions.BusyPoll).
	waitSpin = "spin"
	// waitBlock sleeps until woken.
	waitBlock = "block"
	// waitAuto, the default, is chooseWait's choice.
	waitAuto = "auto"
)

// The environment through which rank 0 of a job that --procs starts
// hands its --wait auto choice to the ranks it starts, so that every
// rank waits alike and runs the same schedule (chooseSchedule).
const (
	procsWaitEnv    = "MXBENCH_PROCS_WAIT"
	procsWaitWhyEnv = "MXBENCH_PROCS_WAIT_WHY"
)

// chooseWait resolves --wait auto into the wait that runs, and notes why
// in f.waitWhy; a wait given on the command line is kept. The ranks that
// --procs starts take rank 0's choice ($MXBENCH_PROCS_WAIT). Otherwise,
// in a job (isJob) the choice is decideWait's from this host's facts.
// Both sides of a pair in this process, and a client of mxbench serve,
// spin. It also sets f.schedBlocking, the wait alltoall's schedule goes
// by, which every rank of the job must see alike (agreedBlocking).
func (f *benchFlags) chooseWait(cmd string, job launch.Job, isJob bool) {
	given := f.wait != waitAuto
	shared := job.Launcher == procsLauncher
	switch {
	case given:
		f.waitWhy = "--wait " + f.wait
	case !isJob:
		f.wait, f.waitWhy = waitSpin, "auto: both sides in one process"
		if f.peer != "" {
			f.waitWhy = "auto: one side, against mxbench serve"
		}
	case os.Getenv("MXBENCH_PROCS_CHILD") != "" && os.Getenv(procsWaitEnv) != "":
		f.wait, f.waitWhy = os.Getenv(procsWaitEnv), os.Getenv(procsWaitWhyEnv)
		shared = true
	default:
		f.wait, f.waitWhy = hostWait(cmd, job)
	}
	f.schedBlocking = agreedBlocking(given || shared, f.wait)
}

// agreedBlocking is whether alltoall's schedule follows the rule of
// blocking ranks (chooseSchedule). Ranks that disagree on the schedule
// wait for messages that never come, so it follows the wait only when
// every rank has the same one (shared): given by a flag every rank gets,
// or rank 0's choice under --procs. Ranks that an outside launcher
// started choose their waits alone, on CPU sets that may differ, and all
// go by the blocking rule, Open MPI's.
func agreedBlocking(shared bool, wait string) bool {
	return !shared || wait == waitBlock
}

// procsWaitEnviron is the environment through which rank 0 of a --procs
// job gives the ranks it starts its wait.
func (f *benchFlags) procsWaitEnviron() []string {
	return []string{procsWaitEnv + "=" + f.wait, procsWaitWhyEnv + "=" + f.waitWhy}
}

// hostWait is --wait auto's wait in job, and why: autoWait's for the
// ranks of this host that poll (every rank of an alltoall or an overlap,
// ranks 0 and 1 of a pingpong or a stream: the others block whatever
// --wait says, runJobCommand), against the CPUs this process may run on.
// A rank that an outside launcher bound to one CPU of a host of several
// was given a core of its own: mpirun binds ranks only when they do not
// oversubscribe the host, and srun gives each task CPUs of its own.
func hostWait(cmd string, job launch.Job) (wait, why string) {
	ranks := job.NodeRanks
	if ranks <= 0 {
		ranks = job.Size // the launcher does not say: as if on one host
	}
	if cmd == "pingpong" || cmd == "stream" {
		ranks = min(ranks, 2)
	}
	cpus, err := allowedCPUs()
	n := len(cpus)
	if err != nil {
		n = 0
	}
	outside := job.Launcher != procsLauncher && os.Getenv("MXBENCH_PROCS_CHILD") == ""
	if outside && n == 1 && ranks > 1 && onlineCPUs() > 1 {
		return waitSpin, fmt.Sprintf("auto: %s bound this rank to one CPU of its own", job.Launcher)
	}
	return autoWait(ranks, n)
}

// autoWait is the wait of a job whose ranks on this host that poll for
// messages are ranks, on a host (or a share of one) of cpus CPUs, and why:
// block when the ranks outnumber the CPUs, since a busy-polling rank then
// holds a CPU that the rank it waits for needs (16 ranks on 2 CPUs, 64 KiB
// alltoall at load 58-68: 9-221 ms a round busy-polling, 6.7 ms blocking;
// docs/alltoall.md), spin when each may have a CPU of its own, as Open
// MPI's ranks then poll. peers-alltoall's -wait auto leaves the choice to
// this rule.
func autoWait(ranks, cpus int) (wait, why string) {
	if oversubscribed(ranks, cpus) {
		return waitBlock, fmt.Sprintf("auto: %d polling ranks on %d CPUs", ranks, cpus)
	}
	if cpus <= 0 {
		return waitSpin, fmt.Sprintf("auto: %d polling ranks, the CPUs unknown", ranks)
	}
	return waitSpin, fmt.Sprintf("auto: %d polling ranks, a CPU each of %d", ranks, cpus)
}

// oversubscribed reports whether ranks processes on this host outnumber
// the cpus they may run on (none known: not).
func oversubscribed(ranks, cpus int) bool { return cpus > 0 && ranks > cpus }

// onlineCPUs is how many CPUs this host has online
// (/sys/devices/system/cpu/online, a list of ranges such as 0-3,8-11),
// whatever this process may run on; 0 when it cannot be read.
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	return countCPUList(strings.TrimSpace(string(b)))
}

// countCPUList counts the CPUs of a kernel CPU list (0-3,8,10-11); 0 for
// one it cannot read.
func countCPUList(s string) int {
	n := 0
	for _, r := range strings.Split(s, ",") {
		lo, hi, ok := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := a, err1
		if ok {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a {
			return 0
		}
		n += b - a + 1
	}
	return n
}
