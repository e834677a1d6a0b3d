//go:build amd64 || arm64

package shm

import "unsafe"

// copyLine copies b into line at k, which it fits (k+len(b) <= ringAlign:
// its caller, putLine, checked that, and nothing here does), 8 bytes at a time and then byte by byte, and
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
	d := unsafe.Pointer(line)
	s := unsafe.Pointer(unsafe.SliceData(b))
	// Offsets from the starts, never a pointer past an end (the race
	// detector's checkptr refuses one).
	i := 0
	for ; i+8 <= len(b); i += 8 {
		*(*uint64)(unsafe.Add(d, k+i)) = *(*uint64)(unsafe.Add(s, i))
	}
	for ; i < len(b); i++ {
		*(*byte)(unsafe.Add(d, k+i)) = *(*byte)(unsafe.Add(s, i))
	}
	return k + len(b)
}
