// Package movdir issues the two 64-byte writes that submit a descriptor
// to a DSA work queue portal: MOVDIR64B for a dedicated WQ (on CPUs that
// have it, CPUID.(EAX=7,ECX=0):ECX bit 28, every Xeon that carries DSA; a
// sequence of eight 8-byte stores elsewhere), and ENQCMD for a shared WQ
// (ECX bit 29), which has no fallback.
//
// MOVDIR64B reads 64 bytes from memory and writes them to a 64-byte
// aligned destination as one non-combined write: a device sees the whole
// descriptor arrive at once or not at all, which is what a DSA portal
// requires (it drops writes of any other size). The instruction is weakly
// ordered, like a write-combining store, so Store fences the stores before
// it (SFENCE), as Linux's and DPDK's submission paths do, so descriptors and
// batch lists written to memory earlier are visible to the device first.
//
// The fallback exists for memory that is not a portal: the emulated
// models, which take the record as one method call anyway, and ordinary
// memory in tests. A real portal written by it would drop the pieces.
//
// ENQCMD is a non-posted write: the device answers whether the shared WQ
// took the command, and the CPU stamps it with the process's PASID (the
// kernel assigns one when the process opens a WQ with shared virtual
// memory). No sequence of ordinary stores can do either, so a shared WQ
// is out of reach of a CPU without ENQCMD: use a dedicated WQ there.
//
// The assembly is confined to movdir_amd64.s; unsafe pointers to the files named *_unsafe*.go.
package movdir

import "unsafe"

// Supported reports whether this CPU has MOVDIR64B.
func Supported() bool { return hasMOVDIR64B }

// EnqueueSupported reports whether this CPU has ENQCMD.
func EnqueueSupported() bool { return hasENQCMD }

// Enqueue submits the 64-byte command at src to the shared WQ portal dst
// (64-byte aligned) with ENQCMD and reports whether the WQ accepted it;
// false means retry (the WQ was full). It panics on a misaligned dst, and
// on a CPU without ENQCMD (check EnqueueSupported first: there is no
// software substitute).
func Enqueue(dst unsafe.Pointer, src *[64]byte) bool {
	if uintptr(dst)&63 != 0 {
		panic("movdir: ENQCMD to a misaligned destination")
	}
	if !hasENQCMD {
		panic("movdir: ENQCMD on a CPU without it (CPUID.7.0:ECX bit 29); shared WQs need it, use a dedicated WQ")
	}
	return enqcmd(dst, src)
}

// Store writes the 64 bytes at src to dst, which must be 64-byte aligned,
// as one 64-byte write where the CPU has MOVDIR64B. It panics on a
// misaligned dst: that is a driver bug, not a condition to handle.
func Store(dst unsafe.Pointer, src *[64]byte) {
	if uintptr(dst)&63 != 0 {
		panic("movdir: 64-byte write to a misaligned destination")
	}
	if hasMOVDIR64B {
		store64B(dst, src)
		return
	}
	storeWords(dst, src)
}

// storeWords is the fallback: eight 8-byte stores in order, never inlined
// so the compiler keeps them as written.
//
//go:noinline
func storeWords(dst unsafe.Pointer, src *[64]byte) {
	d := (*[8]uint64)(dst)
	s := (*[8]uint64)(unsafe.Pointer(src))
	for i := range d {
		d[i] = s[i]
	}
}
