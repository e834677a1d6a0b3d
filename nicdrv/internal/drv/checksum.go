package drv

// PseudoSum is the folded (not complemented) sum of an IPv4 pseudo-header:
// the source and destination addresses (addrs, 8 bytes), the protocol and
// the L4 length, which a NIC's checksum offload expects seeded in the L4
// checksum field. It is small enough to inline into the drivers' TX path.
func PseudoSum(addrs []byte, proto byte, l4len int) uint16 {
	s := uint32(proto) + uint32(l4len)
	for i := 0; i+1 < len(addrs); i += 2 {
		s += uint32(addrs[i])<<8 | uint32(addrs[i+1])
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}
