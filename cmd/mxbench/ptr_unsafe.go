package main

import "unsafe"

// uintptrOf returns the address of b's first byte, to align buffers.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
