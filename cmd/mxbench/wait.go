package main

import (
	"fmt"
	"os"
	"runtime"
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

// startProcs is the runtime's GOMAXPROCS when this process started,
// before mxbench sets it: the CPUs of its affinity mask capped by the
// cgroup's CPU quota (cpu.max, or cpu.cfs_quota_us of cgroup v1), as Go
// 1.25 and later choose it, or $GOMAXPROCS. The runtime rounds a quota up
// and reads one under 2 CPUs as 2 (Go 1.26.8: quotas of 0.5, 1 and 1.5
// CPUs gave 2 on a host of 2), so it caps only quotas of 2 CPUs or more.
var startProcs = runtime.GOMAXPROCS(0)

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
		f.wait, f.waitWhy = decideWait(hostFacts(cmd, job))
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

// waitHost is what --wait auto goes by on this host.
type waitHost struct {
	// launcher is the job's launcher, outside whether it is not
	// mxbench --procs.
	launcher string
	outside  bool
	// size is the job's ranks that poll (pingpong and stream: 2), and
	// local how many of them are on this host, 0 when the launcher does
	// not say.
	size, local int
	// allowed is the CPUs this process may run on (sched_getaffinity),
	// 0 when unknown; quota the CPUs the cgroup's quota gives it
	// (startProcs), 0 when unknown.
	allowed, quota int
	// given is the CPUs the launcher gave the job on this host (its own
	// affinity, the parent process's), 0 when unknown.
	given int
}

// hostFacts gathers this host's waitHost for cmd in job.
var hostFacts = func(cmd string, job launch.Job) waitHost {
	h := waitHost{launcher: job.Launcher, size: job.Size, local: job.NodeRanks, quota: startProcs}
	h.outside = job.Launcher != procsLauncher && os.Getenv("MXBENCH_PROCS_CHILD") == ""
	if cmd == "pingpong" || cmd == "stream" {
		h.size = min(h.size, 2)
		if h.local > 0 {
			h.local = min(h.local, 2)
		}
	}
	if cpus, err := allowedCPUs(); err == nil {
		h.allowed = len(cpus)
	}
	if h.outside {
		h.given = processCPUs(os.Getppid())
	}
	return h
}

// decideWait is --wait auto's wait on host h, and why: block when the
// ranks of this host that poll outnumber the CPUs they may run on (the
// affinity mask capped by the quota), since a busy-polling rank then
// holds a CPU that the rank it waits for needs (16 ranks on 2 CPUs, 64
// KiB alltoall at load 58-68: 9-221 ms a round busy-polling, 6.7 ms
// blocking; docs/alltoall.md), spin when each may have a CPU of its
// own, as Open MPI's ranks then poll. A rank that an outside launcher
// bound to one CPU of the several it gave the job has a core of its own
// (mpirun binds ranks only when they do not oversubscribe the host, srun
// gives each task CPUs of its own), and spins. With no count of the
// ranks on this host, the job's ranks stand for them, and why says so.
// peers-alltoall's -wait auto leaves the choice to this rule.
func decideWait(h waitHost) (wait, why string) {
	cpus := h.allowed
	if h.quota > 0 && (cpus <= 0 || h.quota < cpus) {
		cpus = h.quota
	}
	if h.outside && h.allowed == 1 && h.given > 1 && h.size > 1 {
		return waitSpin, fmt.Sprintf("auto: %s bound this rank to one CPU of the %d it gave", h.launcher, h.given)
	}
	ranks, who := h.local, ""
	if ranks <= 0 {
		ranks, who = h.size, fmt.Sprintf("local ranks unknown, the job's %d", h.size)
	}
	wait, why = autoWait(ranks, cpus)
	if who != "" {
		why = strings.Replace(why, "auto: "+strconv.Itoa(ranks), "auto: "+who, 1)
	}
	return wait, why
}

// autoWait is the wait of ranks polling ranks on cpus CPUs (0: unknown),
// and why (decideWait).
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
