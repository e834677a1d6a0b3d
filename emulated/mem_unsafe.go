package emulated

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// addrOff is the virtual address of b[0] (used only for page arithmetic,
// never turned back into a pointer).
func addrOff(b []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// store64 writes an 8-byte-aligned little-endian word with one atomic store,
// as a device's completion write-back is one 64-bit bus write. b must hold 8
// bytes at an 8-byte-aligned address (the caller checks).
func store64(b []byte, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), v)
}

// store32 writes the first word of b (4-byte aligned) with one atomic
// store: a DSA completion record's status word, which the driver polls.
func store32(b []byte, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), v)
}

// load32 reads the first word of b with one atomic load.
func load32(b []byte) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(b))))
}

// Futex operations on a word private to this process (analogous to
// FUTEX_WAIT_PRIVATE and FUTEX_WAKE_PRIVATE in linux/futex.h).
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// futexWait sleeps while *w == val, at most d. EAGAIN (the word changed),
// EINTR and ETIMEDOUT all just return: the caller re-checks its condition.
//
// It is a raw system call: the caller keeps its P while it sleeps, as a
// pinned channel keeps its P for as long as it runs (CBDMAOptions.CPUs).
// As a blocking system call the P would pass to the runtime, whose sysmon
// takes back a P blocked longer than 10 ms and, each time it does, polls
// every 20 µs again for a while, on the CPU of the application that drives
// the model: an idle channel's 10 ms parks alone preempted a computing
// thread thousands of times a second. The runtime's preemption signal
// interrupts the sleep (EINTR), so a stop-the-world still stops it at once.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the thread sleeping on w in futexWait, if any.
func futexWake(w *atomic.Uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, 1, 0, 0, 0)
}

// osYield lets another runnable thread of this CPU run (sched_yield(2)),
// as a raw system call: the Go runtime keeps the caller's P, since the
// thread goes on at once when nothing else wants the CPU.
func osYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// threadCPUNanos is the CPU time of the calling thread
// (CLOCK_THREAD_CPUTIME_ID), in nanoseconds; 0 if the clock fails.
func threadCPUNanos() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
