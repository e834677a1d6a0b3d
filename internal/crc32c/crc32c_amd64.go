package crc32c

import "golang.org/x/sys/cpu"

// haveSSE42: the CPU has the CRC32 instruction.
var haveSSE42 = cpu.X86.HasSSE42

// update returns the CRC-32C of p continued from crc (crc32c_amd64.s).
//
//go:noescape
func update(crc uint32, p []byte) uint32
