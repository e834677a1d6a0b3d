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

// Offset is for transport implementations: where b, a slice inside the
// region's memory (Check passed), starts in it. An empty b gives 0.
func (r *Region) Offset(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))))
}
