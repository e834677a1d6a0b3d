package movdir

import "unsafe"

// cpuid7ECX returns ECX of CPUID leaf 7, sub-leaf 0, or 0 when the CPU's
// highest standard leaf is below 7.
func cpuid7ECX() uint32

// store64B is SFENCE then MOVDIR64B: 64 bytes from src to dst.
//
//go:noescape
func store64B(dst unsafe.Pointer, src *[64]byte)

var hasMOVDIR64B = cpuid7ECX()&(1<<28) != 0
