package nicdrv

import (
	"encoding/binary"
	"testing"
)

// onesSum is the plain RFC 1071 sum, written apart from FillChecksums.
func onesSum(parts ...[]byte) uint16 {
	var s uint64
	for _, p := range parts {
		for i := 0; i < len(p); i += 2 {
			w := uint64(p[i]) << 8
			if i+1 < len(p) {
				w |= uint64(p[i+1])
			}
			s += w
		}
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

func TestFillChecksums(t *testing.T) {
	for _, proto := range []byte{6, 17} {
		for _, size := range []int{60, 61, 100, 1514} {
			fr := make([]byte, size)
			binary.BigEndian.PutUint16(fr[12:], 0x0800)
			ip := fr[14:]
			ip[0], ip[8], ip[9] = 0x45, 64, proto
			binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
			copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
			for i := 34; i < size; i++ {
				fr[i] = byte(i * 7)
			}
			FillChecksums(fr, FlagTxIPChecksum|FlagTxL4Checksum)
			if got := onesSum(ip[:20]); got != 0xFFFF {
				t.Errorf("proto %d size %d: IP header sums to %#x, want 0xffff", proto, size, got)
			}
			l4 := ip[20 : size-14]
			pseudo := []byte{10, 0, 0, 1, 10, 0, 0, 2, 0, proto, byte(len(l4) >> 8), byte(len(l4))}
			if got := onesSum(pseudo, l4); got != 0xFFFF {
				t.Errorf("proto %d size %d: TCP/UDP sums to %#x, want 0xffff", proto, size, got)
			}
		}
	}
	// Not IPv4: untouched.
	fr := make([]byte, 60)
	binary.BigEndian.PutUint16(fr[12:], 0x86DF)
	FillChecksums(fr, FlagTxIPChecksum|FlagTxL4Checksum)
	for _, b := range fr[14:] {
		if b != 0 {
			t.Fatal("a non-IP frame was changed")
		}
	}
}
