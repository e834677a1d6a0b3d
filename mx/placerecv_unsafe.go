package mx

import "unsafe"

// sameStart reports whether a and b start at the same byte (either may
// be empty, as long as it was sliced from memory at that byte).
func sameStart(a, b []byte) bool {
	return unsafe.SliceData(a) == unsafe.SliceData(b)
}
