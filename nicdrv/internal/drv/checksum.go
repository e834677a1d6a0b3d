package drv

import "github.com/gomx-dev/gomx/internal/csum"

// PseudoSum is the folded (not complemented) sum of an IPv4 pseudo-header:
// the source and destination addresses (addrs, 8 bytes), the protocol and
// the L4 length, which a NIC's checksum offload expects seeded in the L4
// checksum field. It is small enough to inline into the drivers' TX path.
func PseudoSum(addrs []byte, proto byte, l4len int) uint16 {
	return csum.Fold(csum.Pseudo(addrs, proto, l4len))
}
