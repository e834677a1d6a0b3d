package framing_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/transport/framing"
)

// The IPv4 header PutUDPHeaders writes is the one RFC 791 and RFC 768
// describe, checked field by field here rather than with ParseUDP.
func TestPutUDPHeadersFields(t *testing.T) {
	h := framing.UDPHeader{Eth: framing.EthHeader{Dst: [6]byte{1, 2, 3, 4, 5, 6}, Src: [6]byte{7, 8, 9, 10, 11, 12}},
		SrcIP: [4]byte{192, 168, 1, 1}, DstIP: [4]byte{192, 168, 1, 2}, SrcPort: 40000, DstPort: 40001}
	b := make([]byte, framing.UDPHeadersLen)
	framing.PutUDPHeaders(b, h, 100)
	ip := b[14:34]
	if b[12] != 8 || b[13] != 0 || ip[0] != 0x45 || binary.BigEndian.Uint16(ip[2:]) != 128 || ip[9] != 17 {
		t.Fatalf("IPv4 header % x", ip)
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	if sum = sum&0xffff + sum>>16; sum&0xffff+sum>>16 != 0xffff {
		t.Errorf("header checksum does not sum to 0xffff: % x", ip)
	}
	udp := b[34:42]
	if binary.BigEndian.Uint16(udp[0:]) != 40000 || binary.BigEndian.Uint16(udp[2:]) != 40001 || binary.BigEndian.Uint16(udp[4:]) != 108 {
		t.Errorf("UDP header % x", udp)
	}
	got, data, err := framing.ParseUDP(append(b, bytes.Repeat([]byte{7}, 100)...))
	h.Eth.EtherType = framing.EtherTypeIPv4
	if err != nil || got != h || len(data) != 100 {
		t.Errorf("ParseUDP = %+v, %d bytes, %v", got, len(data), err)
	}
}

// UDPChecksumOK sums over the UDP length, not the IP payload: checked on a
// datagram whose checksum (0x85f5, an odd 3-byte payload) was computed by
// hand from RFC 768, with the IP payload carrying extra bytes after it.
func TestUDPChecksumOK(t *testing.T) {
	h := framing.UDPHeader{SrcIP: [4]byte{192, 168, 1, 2}, DstIP: [4]byte{192, 168, 1, 3}, SrcPort: 4000, DstPort: 5000}
	frame := func(csum uint16, extra int) []byte {
		b := make([]byte, framing.UDPHeadersLen+3+extra)
		framing.PutUDPHeaders(b, h, 3+extra)
		copy(b[framing.UDPHeadersLen:], "odd")
		for i := range extra {
			b[framing.UDPHeadersLen+3+i] = 0xa5
		}
		binary.BigEndian.PutUint16(b[38:], 8+3) // UDP length: the extra bytes are outside
		binary.BigEndian.PutUint16(b[40:], csum)
		if _, data, err := framing.ParseUDP(b); err != nil || string(data) != "odd" {
			t.Fatalf("ParseUDP: %q, %v", data, err)
		}
		return b
	}
	for _, c := range []struct {
		csum  uint16
		extra int
		ok    bool
	}{
		{0x85f5, 0, true},
		{0x85f5, 7, true},
		{0x85f4, 0, false},
		{0x85f4, 7, false},
		{0, 7, true}, // none sent
	} {
		if got := framing.UDPChecksumOK(frame(c.csum, c.extra)); got != c.ok {
			t.Errorf("checksum %#x with %d bytes after the datagram: ok %v, want %v", c.csum, c.extra, got, c.ok)
		}
	}
}
