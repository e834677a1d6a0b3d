package movdir

import "unsafe"

// cpuid7ECX returns ECX of CPUID leaf 7, sub-leaf 0, or 0 when the CPU's
// highest standard leaf is below 7.
func cpuid7ECX() uint32

// store64B is SFENCE then MOVDIR64B: 64 bytes from src to dst.
//
//go:noescape
func store64B(dst unsafe.Pointer, src *[64]byte)

// enqcmd is SFENCE then ENQCMD: it reports whether the WQ accepted the
// command (ZF clear).
//
//go:noescape
func enqcmd(dst unsafe.Pointer, src *[64]byte) bool

var (
	cpuid7       = cpuid7ECX()
	hasMOVDIR64B = cpuid7&(1<<28) != 0
	hasENQCMD    = cpuid7&(1<<29) != 0
)
