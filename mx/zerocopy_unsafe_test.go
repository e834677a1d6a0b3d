package mx

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// within reports whether b lies inside mem, by address.
func within(mem, b []byte) bool {
	if len(b) == 0 || len(mem) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(mem))
}

// mapAnon maps n bytes of anonymous memory.
func mapAnon(n int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// unmapAnon unmaps memory mapAnon or mapAnonAt mapped.
func unmapAnon(b []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}

// mapAnonAt maps n bytes of anonymous memory at addr exactly (the address
// of memory just unmapped).
func mapAnonAt(addr *byte, n int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, unsafe.Pointer(addr), uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}
