package ixgbe

import (
	"sync/atomic"
	"unsafe"
)

// load64 reads 8 bytes of a descriptor with one atomic load: the NIC writes
// its write-back with one bus write while the driver polls. b must be
// 8-byte aligned (descriptor rings are 128-byte aligned).
func load64(b []byte) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(b))))
}
