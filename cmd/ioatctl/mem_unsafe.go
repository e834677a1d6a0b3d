package main

import "unsafe"

// pageAligned returns n zero bytes starting on a 4 KiB boundary, as
// hugepage memory would.
func pageAligned(n int) []byte {
	const page = 4096
	b := make([]byte, n+page)
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % page)
	if off != 0 {
		off = page - off
	}
	return b[off : off+n : off+n]
}
