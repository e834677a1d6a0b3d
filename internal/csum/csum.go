// Package csum is the Internet checksum (RFC 1071) that the IPv4, UDP and
// TCP headers carry, in the one place every layer that computes or checks
// it takes it from: the UDP framing of the transports
// (transport/framing), the drivers' software checksums and offload seeds
// (nicdrv, nicdrv/internal/drv) and the NIC models' checksum offload
// (emulated). Tests that check what these wrote sum on their own (as
// nicdrv/nictest does), so that a mistake here cannot hide behind itself.
//
// A sum is kept unfolded in a uint32 while bytes are added (Add), so a run
// of parts (a pseudo-header, then the datagram) costs one fold at the end
// (Fold). A frame of up to 64 KiB cannot carry the uint32 over: 32 768
// words of at most 0xFFFF each. The checksum a header carries is the
// complement of the folded sum over it with the field zero
// (Checksum); a header with a right checksum folds to 0xFFFF.
package csum

// Add adds b to the one's-complement sum s as big-endian 16-bit words,
// an odd last byte padded with zero on the right.
func Add(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// Fold folds a sum's carries back into its low 16 bits.
func Fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// Checksum is the checksum field's value for b (the field zero in b): the
// complement of its folded sum.
func Checksum(b []byte) uint16 { return ^Fold(Add(0, b)) }

// Pseudo is the unfolded sum of an IPv4 pseudo-header: the source and
// destination addresses (addrs, the 8 bytes at offset 12 of the IPv4
// header), the protocol and the TCP or UDP length. Adding the TCP or UDP
// header and data to it and folding gives the sum their checksum covers.
func Pseudo(addrs []byte, proto byte, l4len int) uint32 {
	return Add(uint32(proto)+uint32(l4len), addrs)
}
