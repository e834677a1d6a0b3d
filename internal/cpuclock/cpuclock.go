// Package cpuclock reads the kernel's per-thread CPU clocks: how long a
// thread has run, user and system, to the nanosecond the scheduler
// accounts (CLOCK_THREAD_CPUTIME_ID), the same clock whether a thread reads
// its own or another thread of the process reads it by thread id. A
// benchmark that wants the CPU one piece of work took, not the wall time
// others' work stretched it to, locks that work to a thread and reads that
// thread's clock before and after.
package cpuclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread is the calling thread's CPU time; 0 when the kernel does not say.
// A goroutine reads its own work's time only while locked to its thread
// (runtime.LockOSThread).
func Thread() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// OfThread is the CPU time of this process's thread tid (gettid(2)), read
// from any thread: clock_getcpuclockid's clock for the thread's id, the
// kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED); 0 when the thread has
// ended or the kernel does not say.
func OfThread(tid int32) time.Duration {
	const perThread, sched = 4, 2
	var ts unix.Timespec
	if unix.ClockGettime(^tid<<3|perThread|sched, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
