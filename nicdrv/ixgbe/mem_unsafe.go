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

// descs views a ring as its 16-byte descriptors, so that the fast path
// indexes a descriptor with one bounds check and reads or writes its
// fields at constant offsets with none.
func descs(ring []byte) []desc {
	if len(ring) < 16 {
		return nil
	}
	return unsafe.Slice((*desc)(unsafe.Pointer(unsafe.SliceData(ring))), len(ring)/16)
}

// desc is one descriptor.
type desc [16]byte

// hi is the descriptor's second 8 bytes, read with one atomic load (the
// half the NIC's write-back status is in).
func (d *desc) hi() uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&d[8]))) }
