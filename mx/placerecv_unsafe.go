package mx

import "unsafe"

// sameStart reports whether a and b start at the same byte (either may
// be empty, as long as it was sliced from memory at that byte).
func sameStart(a, b []byte) bool {
	return unsafe.SliceData(a) == unsafe.SliceData(b)
}

// offsetIn returns where b starts in mem, and whether it lies there.
func offsetIn(mem, b []byte) (int, bool) {
	if len(mem) == 0 {
		return 0, false
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if d > uintptr(len(mem)) || int(d)+len(b) > len(mem) {
		return 0, false
	}
	return int(d), true
}
