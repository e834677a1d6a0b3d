package shm

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The only unsafe code of the package: typed atomics over the shared
// mapping, and the futex calls on the doorbell word.

// u64At returns the atomic uint64 at off in mem (8-byte aligned: offsets are
// constants and mappings are page aligned).
func u64At(mem []byte, off int) *atomic.Uint64 {
	_ = mem[off+7]
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

// u32At returns the atomic uint32 at off in mem.
func u32At(mem []byte, off int) *atomic.Uint32 {
	_ = mem[off+3]
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

// Futex operations (analogous to FUTEX_WAIT and FUTEX_WAKE in
// linux/futex.h), without FUTEX_PRIVATE_FLAG: the word is shared between
// processes.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps while *w == val, at most d (d <= 0: no bound). The futex
// is shared (no FUTEX_PRIVATE_FLAG): the word lives in memory mapped by
// several processes. EAGAIN (the word changed), EINTR and ETIMEDOUT all
// just return: the caller re-checks its condition.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	var ts *unix.Timespec
	if d > 0 {
		t := unix.NsecToTimespec(int64(d))
		ts = &t
	}
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(ts)), 0, 0)
}

// schedYield gives the CPU to another runnable thread, if any
// (sched_yield(2)).
func schedYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// futexWake wakes up to n sleepers on w.
func futexWake(w *atomic.Uint32, n int) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, uintptr(n), 0, 0, 0)
}

// addrOf returns the address of b's first byte (of its backing array when
// b is empty).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
