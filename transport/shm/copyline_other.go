//go:build !amd64 && !arm64

package shm

import "encoding/binary"

// copyLine copies b into line at k, which it fits, 8 bytes at a time and
// then byte by byte, and returns the offset past it (see
// copyline_unsafe.go, for the CPUs whose unaligned loads and stores it
// relies on).
func copyLine(line *[ringAlign]byte, k int, b []byte) int {
	le := binary.LittleEndian
	for len(b) >= 8 {
		le.PutUint64(line[k:], le.Uint64(b))
		b, k = b[8:], k+8
	}
	for _, c := range b {
		line[k] = c
		k++
	}
	return k
}
