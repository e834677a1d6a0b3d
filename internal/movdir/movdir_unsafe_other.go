//go:build !amd64

package movdir

import "unsafe"

const hasMOVDIR64B = false

func store64B(dst unsafe.Pointer, src *[64]byte) { storeWords(dst, src) }
