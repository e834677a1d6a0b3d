package mx

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stageWord returns word i of a staging buffer's header, for atomic
// access: the header lies in shared memory that the peer process reads
// and writes too (stage.go). Pool allocations are page-aligned, so every
// word is 8-byte aligned.
func stageWord(mem []byte, i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[8*i]))
}

// addrOf returns the address of b's first byte, as the peer's
// process_vm_readv names it.
func addrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// iovecsAt fills dst with the n bytes from byte off of the concatenation
// of segs and returns how many vectors it took.
func iovecsAt(dst []unix.Iovec, segs [][]byte, off, n int) int {
	k := 0
	for _, s := range segs {
		if n == 0 || k == len(dst) {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		l := min(len(s)-off, n)
		dst[k] = unix.Iovec{Base: &s[off]}
		dst[k].SetLen(l)
		k++
		off, n = 0, n-l
	}
	return k
}
