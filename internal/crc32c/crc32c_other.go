//go:build !amd64

package crc32c

import "hash/crc32"

const haveSSE42 = false

func update(crc uint32, p []byte) uint32 { return crc32.Update(crc, table, p) }
