//go:build amd64 || arm64

package shm

import "unsafe"

// copyLine copies b into line at k, which it fits (k+len(b) <= ringAlign:
// putLine checks it), 8 bytes at a time and then byte by byte, and
// returns the offset past it. Not copy: a call of memmove for a few bytes
// costs more than the copy (the caller's registers are saved around it),
// and its wider loads of a header just written with 8-byte stores would
// stall (see copyWords). Not a loop of binary.LittleEndian's loads and
// stores on slices either: each 8 bytes cost 18 instructions there (the
// bounds checks, and the masking of each resliced pointer), against 5
// here, and these stores come before the record word's, on the path of
// every small message. Unaligned 8-byte loads and stores are what these
// CPUs do anyway (copyline_other.go has the rest).
func copyLine(line *[ringAlign]byte, k int, b []byte) int {
	if k < 0 || len(b) > ringAlign-k {
		panic("shm: copyLine past its line")
	}
	d := unsafe.Add(unsafe.Pointer(line), k)
	s := unsafe.Pointer(unsafe.SliceData(b))
	n := len(b)
	for ; n >= 8; n -= 8 {
		*(*uint64)(d) = *(*uint64)(s)
		d, s = unsafe.Add(d, 8), unsafe.Add(s, 8)
	}
	for ; n > 0; n-- {
		*(*byte)(d) = *(*byte)(s)
		d, s = unsafe.Add(d, 1), unsafe.Add(s, 1)
	}
	return k + len(b)
}
