package nicdrv

import "unsafe"

// maxBufferSize bounds a pool's buffer size (NewPool refuses larger).
const maxBufferSize = 16384

// mem is buffer i's memory, the whole buffer. i is a Buffer's idx, set by
// NewPool below the pool's length, so the slice is inside p.bytes; it is
// cut from a pointer to the buffer's first byte, with one comparison in
// place of a slice expression's bounds checks, because Alloc and SetLen
// run it per frame.
func (p *Pool) mem(i uint32) []byte {
	b := (*[maxBufferSize]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(p.bytes)), uintptr(i)*uintptr(p.size)))
	return b[:p.size:p.size]
}
