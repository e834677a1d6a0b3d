//go:build !amd64

package vfio

import (
	"sync/atomic"
	"unsafe"
)

// store32 is one aligned 32-bit store to a register, with release
// ordering: what the driver wrote before it (descriptors) is visible to
// the device first.
func store32(p unsafe.Pointer, v uint32) { atomic.StoreUint32((*uint32)(p), v) }

// store64 is one aligned 64-bit store to a register (see store32).
func store64(p unsafe.Pointer, v uint64) { atomic.StoreUint64((*uint64)(p), v) }
