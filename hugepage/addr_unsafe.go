package hugepage

import "unsafe"

// addrOf is the virtual address of the first byte of b's backing array (of
// b[:cap(b)][0]), or 0 when cap(b) is 0. Memory from this package is mapped
// outside the Go heap and never moves, so the address stays meaningful; for
// heap memory it is only as stable as the caller keeps it.
func addrOf(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
