package emulated

import (
	"sync/atomic"
	"unsafe"
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
