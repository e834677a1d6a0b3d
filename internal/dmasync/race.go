//go:build race

package dmasync

import (
	"runtime"
	"unsafe"
)

// key is one process-wide synchronisation object: coarse, but device
// progress is rare compared with the accesses it orders.
var key uint64

// Publish marks a device write-back: everything the device did before is
// visible to whoever Observes afterwards.
func Publish() { runtime.RaceReleaseMerge(unsafe.Pointer(&key)) }

// Observe marks that a driver saw a device write-back.
func Observe() { runtime.RaceAcquire(unsafe.Pointer(&key)) }
