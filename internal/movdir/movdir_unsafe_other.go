//go:build !amd64

package movdir

import "unsafe"

const (
	hasMOVDIR64B = false
	hasENQCMD    = false
)

func store64B(dst unsafe.Pointer, src *[64]byte) { storeWords(dst, src) }

func enqcmd(dst unsafe.Pointer, src *[64]byte) bool {
	panic("movdir: ENQCMD on an architecture without it")
}
