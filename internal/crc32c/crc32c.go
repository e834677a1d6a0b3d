// Package crc32c is the CRC-32C (Castagnoli) checksum of gomx's frame
// trailer (mx/wire's Seal and Verify), for the short frames a small
// message makes.
//
// hash/crc32 computes the same sum, but a call for a frame of a few
// dozen bytes passes through three layers before the loop of SSE 4.2
// CRC32 instructions (Checksum, update's table switch, and
// archUpdateCastagnoli's checks for the long-buffer algorithm): about 110
// instructions of the 200 that sealing or verifying an 8-byte message's
// frame took. On amd64 with SSE 4.2 Checksum runs that loop directly
// (crc32c_amd64.s: 8 bytes at a time, then 4, 2 and 1); elsewhere, and
// for buffers long enough for hash/crc32's three-way interleaved loop to
// win (longCut), it calls hash/crc32.
package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// longCut is the length from which hash/crc32 computes the sum: it
// processes three interleaved streams at a time from 3 x 168 bytes
// (castagnoliK1), about three times the speed of one CRC32 chain.
const longCut = 3 * 168

// Checksum returns the CRC-32C of p, as crc32.Checksum(p,
// crc32.MakeTable(crc32.Castagnoli)) does.
func Checksum(p []byte) uint32 {
	if haveSSE42 && len(p) < longCut {
		return update(0, p)
	}
	return crc32.Checksum(p, table)
}
