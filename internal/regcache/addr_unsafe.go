package regcache

import "unsafe"

// addrOf is the virtual address of b's first byte, for range arithmetic
// (never turned back into a pointer).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
