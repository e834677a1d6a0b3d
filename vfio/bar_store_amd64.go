package vfio

import "unsafe"

// store32 is one aligned 32-bit MOV to a register. x86 keeps stores in
// program order, so the descriptors a driver wrote before it reach memory
// first; the call boundary (never inlined) keeps the compiler from moving,
// merging or dropping it.
//
//go:noinline
func store32(p unsafe.Pointer, v uint32) { *(*uint32)(p) = v }

// store64 is one aligned 64-bit MOV to a register (see store32).
//
//go:noinline
func store64(p unsafe.Pointer, v uint64) { *(*uint64)(p) = v }
