package transport

import "unsafe"

// within reports whether b lies inside mem.
func within(mem, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	if len(mem) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(mem))
}
