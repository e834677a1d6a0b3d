package ioat

// crc32cCombine returns the CRC-32C (reflected Castagnoli, with
// crc32.Update's pre- and post-inversion) of A followed by B, given
// crcA = crc32.Update(s, tab, A), crcB = crc32.Update(0, tab, B) and
// lenB = len(B): crcA times x^(8 lenB) modulo the polynomial, plus crcB.
// The powers of x come from squaring, so the cost grows with log lenB.
// It lets a CRC that spans several descriptors be computed by all of
// them at once.
func crc32cCombine(crcA, crcB uint32, lenB uint64) uint32 {
	return gfMul(xPow8n(lenB), crcA) ^ crcB
}

// crc32cPoly is the Castagnoli polynomial, bit-reversed (crc32.Castagnoli).
const crc32cPoly = 0x82f63b78

// gfMul multiplies a and b modulo the polynomial, both in the reflected
// representation (bit 31 is x^0).
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crc32cPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8n returns x^(8n) modulo the polynomial (reflected).
func xPow8n(n uint64) uint32 {
	p := uint32(1) << 31  // x^0
	sq := uint32(1) << 23 // x^8
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			p = gfMul(sq, p)
		}
		sq = gfMul(sq, sq)
	}
	return p
}
