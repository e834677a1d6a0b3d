package shm

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The package's unsafe code: typed atomics over the shared mapping here,
// and a small record's copy into its ring line (copyline_unsafe.go).

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

// schedYield gives the CPU to another runnable thread, if any
// (sched_yield(2)).
func schedYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// addrOf returns the address of b's first byte (of its backing array when
// b is empty).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
