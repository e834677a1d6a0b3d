package nicdrv

import (
	"encoding/binary"

	"github.com/gomx-dev/gomx/internal/csum"
)

// FillChecksums computes in software the checksums a frame's transmit
// flags ask for (FlagTxIPChecksum, FlagTxL4Checksum), for a driver whose
// NIC cannot: the IPv4 header checksum, and the TCP or UDP checksum of an
// unfragmented IPv4 datagram. A frame that is not IPv4, or whose lengths do
// not fit the frame, is left as it is.
func FillChecksums(fr []byte, f Flags) {
	want := f & (FlagTxIPChecksum | FlagTxL4Checksum)
	if want == 0 || len(fr) < 34 || fr[12] != 0x08 || fr[13] != 0 || fr[14]>>4 != 4 {
		return
	}
	ihl := int(fr[14]&0xF) * 4
	tot := int(binary.BigEndian.Uint16(fr[16:]))
	if ihl < 20 || tot < ihl || 14+tot > len(fr) {
		return
	}
	if want&FlagTxIPChecksum != 0 {
		binary.BigEndian.PutUint16(fr[24:], 0)
		binary.BigEndian.PutUint16(fr[24:], csum.Checksum(fr[14:14+ihl]))
	}
	if want&FlagTxL4Checksum == 0 {
		return
	}
	proto, l4 := fr[23], 14+ihl
	at := -1
	switch {
	case proto == 6 && tot-ihl >= 20:
		at = l4 + 16
	case proto == 17 && tot-ihl >= 8:
		at = l4 + 6
	}
	if at < 0 {
		return
	}
	binary.BigEndian.PutUint16(fr[at:], 0)
	c := ^csum.Fold(csum.Add(csum.Pseudo(fr[26:34], proto, tot-ihl), fr[l4:14+tot]))
	if c == 0 && proto == 17 {
		c = 0xFFFF // UDP sends a computed zero as all ones
	}
	binary.BigEndian.PutUint16(fr[at:], c)
}
