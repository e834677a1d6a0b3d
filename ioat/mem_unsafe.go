package ioat

import (
	"sync/atomic"
	"unsafe"
)

// load64 reads the completion write-back word with one atomic load: the
// engine writes it with one 64-bit bus write while we poll.
func load64(b []byte) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(b))))
}

// store64 writes the completion word with one atomic store.
func store64(b []byte, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), v)
}

// addrOf is the virtual address of b's first byte, for range arithmetic
// in the registration cache (never turned back into a pointer).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// load32 reads a DSA completion record's status word with one atomic
// load: the device writes it last, with one store.
func load32(b []byte) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(b))))
}
