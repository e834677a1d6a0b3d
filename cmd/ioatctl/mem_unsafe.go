package main

import "unsafe"

// pageAligned returns n zero bytes starting on a 4 KiB boundary and
// already faulted in, as hugepage memory would be (MAP_POPULATE): a
// measured copy must not pay for the first touch of its destination.
func pageAligned(n int) []byte {
	const page = 4096
	b := make([]byte, n+page)
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % page)
	if off != 0 {
		off = page - off
	}
	b = b[off : off+n : off+n]
	for i := 0; i < len(b); i += page {
		b[i] = 0 // a write fault maps the page
	}
	return b
}
