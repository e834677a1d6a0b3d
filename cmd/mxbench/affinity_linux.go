package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setAffinity binds the calling thread to one CPU; failure (a restricted
// cpuset) leaves it unpinned, which only makes figures noisier.
func setAffinity(cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	_ = unix.SchedSetaffinity(0, &set)
}

// allowedCPUs returns the CPUs the calling thread may run on, in order.
func allowedCPUs() ([]int, error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, err
	}
	return cpuList(all), nil
}

// oversubscribes reports whether a job of n ranks on this host has more
// ranks than the CPUs this process may run on (its ranks' too: --procs
// starts them before it binds itself).
func oversubscribes(n int) bool {
	cpus, err := allowedCPUs()
	return err == nil && oversubscribed(n, len(cpus))
}

// cpuList lists the CPUs of a set, in order.
func cpuList(set unix.CPUSet) []int {
	var l []int
	for c := 0; c < 1024 && len(l) < set.Count(); c++ {
		if set.IsSet(c) {
			l = append(l, c)
		}
	}
	return l
}

// threads returns the thread ids of this process.
func threads() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// bindProcess binds every thread of this process to the n-th CPU it may
// run on (n modulo their count), as mpirun --bind-to core binds a rank;
// threads the runtime starts later inherit the binding from the thread
// that starts them. It reports the CPU, or -1 when there is one CPU only
// or the kernel refused (a restricted cpuset), which leaves the process
// unbound: the figures only get noisier.
func bindProcess(n int) int {
	cpus, err := allowedCPUs()
	if err != nil || len(cpus) < 2 {
		return -1
	}
	cpu := cpus[n%len(cpus)]
	var set unix.CPUSet
	set.Set(cpu)
	tids, err := threads()
	if err != nil {
		return -1
	}
	for _, tid := range tids {
		if unix.SchedSetaffinity(tid, &set) != nil {
			return -1
		}
	}
	return cpu
}

// confinePasses bounds confineOthers' passes over the process's threads,
// and its undo's: a pass that meets no new thread ends the loop, and only
// a thread started during the last pass makes another.
const confinePasses = 8

// confineOthers binds every other thread of this process that may run
// exactly where the calling thread may (the rank's CPU, under --bind) to
// cpu, and returns a function that binds them back. The calling goroutine
// must be locked to its thread (runtime.LockOSThread) until it has called
// that function: its thread is the one left where it was. The threads
// moved are the Go runtime's, which run every other goroutine: mx's
// receive loops, its engine copies, its timers, the runtime's poller and
// monitor. Threads the runtime starts meanwhile inherit cpu from the
// thread that starts them (a locked thread has the runtime's template
// thread start them, and it is moved too), and the undo binds them to the
// caller's CPUs as well. Threads bound elsewhere on purpose (an emulated
// engine's channel on --engine-cpu) keep their binding throughout.
func confineOthers(cpu int) (undo func() error, err error) {
	var home, to unix.CPUSet
	if err := unix.SchedGetaffinity(0, &home); err != nil {
		return nil, fmt.Errorf("--progress-cpu %d: reading this thread's CPUs: %w", cpu, err)
	}
	to.Set(cpu)
	me := unix.Gettid()
	seen := map[int]bool{me: true} // every thread met, moved or not
	var moved []int
	undo = func() error {
		var errs []error
		back := func(tid int) {
			if err := unix.SchedSetaffinity(tid, &home); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("binding thread %d back: %w", tid, err))
			}
		}
		for _, tid := range moved {
			back(tid)
		}
		// Threads started meanwhile inherited cpu: bring them back too,
		// pass after pass, as one of them may start another before it
		// is moved.
		for range confinePasses {
			tids, err := threads()
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			fresh := false
			for _, tid := range tids {
				var set unix.CPUSet
				if !seen[tid] && unix.SchedGetaffinity(tid, &set) == nil && set == to {
					back(tid)
					fresh = true
				}
				seen[tid] = true
			}
			if !fresh {
				break
			}
		}
		return errors.Join(errs...)
	}
	for pass := range confinePasses {
		tids, err := threads()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("--progress-cpu %d: listing this process's threads: %w", cpu, err), undo())
		}
		fresh := false
		for _, tid := range tids {
			if seen[tid] {
				continue
			}
			seen[tid], fresh = true, true
			var had unix.CPUSet
			if unix.SchedGetaffinity(tid, &had) != nil {
				continue // gone
			}
			if pass > 0 && had == to {
				// Started by a thread already moved: it inherited cpu,
				// and the undo must bring it back.
				moved = append(moved, tid)
				continue
			}
			if had != home {
				continue // bound elsewhere on purpose
			}
			if err := unix.SchedSetaffinity(tid, &to); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return nil, errors.Join(fmt.Errorf("--progress-cpu %d: binding thread %d: %w (taskset -p %d shows the CPUs this process may use)", cpu, tid, err, os.Getpid()), undo())
			}
			moved = append(moved, tid)
		}
		if !fresh {
			break
		}
	}
	return undo, nil
}

// threadSched is what the kernel's scheduler did to the calling thread so
// far: how many times it preempted it (getrusage's ru_nivcsw for the
// thread) and how long the thread waited on a run queue, runnable but not
// running (the second field of /proc/thread-self/schedstat); -1 when the
// kernel does not say.
func threadSched() (preempted int64, runQueue time.Duration) {
	preempted, runQueue = -1, -1
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) == nil {
		preempted = ru.Nivcsw
	}
	var buf [128]byte
	fd, err := unix.Open("/proc/thread-self/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return preempted, runQueue
	}
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if f := strings.Fields(string(buf[:max(n, 0)])); err == nil && len(f) >= 2 {
		if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			runQueue = time.Duration(ns)
		}
	}
	return preempted, runQueue
}

// pinnedThread is a busy-polling goroutine's pinning (pinThread): the
// CPU its thread is bound to, and the CPUs the thread might run on before.
type pinnedThread struct {
	// cpu is the CPU the thread is bound to, -1 when it is only locked
	// (the thread may run on one CPU only, or its CPUs could not be read).
	cpu  int
	orig unix.CPUSet
	// unlocks: orig was read, so reschedule may hand the thread back to
	// the runtime as it was.
	unlocks bool
	// passes counts reschedule's passes through the scheduler.
	passes int
}

// pinThread does pin's work and keeps the thread's CPUs as they were, so
// that reschedule can unlock it. The CPU is the n-th of those the thread
// may run on (n modulo their count, as bindProcess picks one), so that a
// process confined to some CPUs (taskset, a cpuset) pins inside them.
func pinThread(n int) *pinnedThread {
	runtime.LockOSThread()
	t := &pinnedThread{cpu: -1}
	t.unlocks = unix.SchedGetaffinity(0, &t.orig) == nil
	if cpus := cpuList(t.orig); t.unlocks && len(cpus) > 1 {
		t.cpu = cpus[n%len(cpus)]
		setAffinity(t.cpu)
	}
	return t
}

// rescheduleEvery is how many messages a pinned busy-poller handles
// between two passes through the Go scheduler (reschedule): at 1-10 µs a
// round trip, every 0.25-2.5 ms, inside sysmon's 10 ms.
const rescheduleEvery = 256

// reschedule passes the goroutine through the Go scheduler every
// rescheduleEvery-th message n, on its own thread. The runtime preempts a
// goroutine that ran 10 ms without a pass (sysmon), and a goroutine locked
// to its thread, as a pinned spinner is, is then rescheduled by handing
// its P to another thread and back: two futex wake-ups, each waiting for
// a CPU the spinners and the host's other processes hold, milliseconds on
// a loaded host while the peer spins in vain. Unlocked for the pass, the
// goroutine is a runnable goroutine like any other: its thread picks it
// up again at once (or after a runnable receive loop, whose stay-away
// timer fired), no other thread involved. The thread is unlocked with
// the CPUs it had before pinThread bound it, so that whatever the runtime
// runs on it next, and any thread it starts meanwhile, is not bound to
// the spinner's CPU; the thread the goroutine is locked to again, the
// same or another, is bound to it again. It reports whether it passed. A
// nil pinnedThread does nothing, and so does one whose CPUs could not be
// read or restored: it stays locked.
func (t *pinnedThread) reschedule(n int) bool {
	if t == nil || n%rescheduleEvery != 0 || !t.unlocks {
		return false
	}
	if unix.SchedSetaffinity(0, &t.orig) != nil {
		return false
	}
	runtime.UnlockOSThread()
	runtime.Gosched()
	runtime.LockOSThread()
	if t.cpu >= 0 {
		setAffinity(t.cpu)
	}
	t.passes++
	return true
}

// processCPUs is how many CPUs process pid may run on, 0 when it cannot
// be read.
func processCPUs(pid int) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return 0
	}
	return set.Count()
}
