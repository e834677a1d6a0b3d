package xdp

import (
	"bytes"
	"testing"
)

func TestUDPRoundTrip(t *testing.T) {
	h := UDPHeader{Eth: EthHeader{Dst: [6]byte{1, 2, 3, 4, 5, 6}, Src: [6]byte{7, 8, 9, 10, 11, 12}},
		SrcIP: [4]byte{10, 0, 0, 1}, DstIP: [4]byte{10, 0, 0, 2}, SrcPort: 1234, DstPort: 7000}
	payload := []byte("gomx payload")
	b := make([]byte, UDPHeadersLen+len(payload)+20) // Ethernet padding after
	PutUDPHeaders(b, h, len(payload))
	copy(b[UDPHeadersLen:], payload)
	got, data, err := ParseUDP(b)
	h.Eth.EtherType = 0x0800
	if err != nil || got != h || !bytes.Equal(data, payload) {
		t.Fatalf("ParseUDP = %+v, %q, %v; want %+v, %q", got, data, err, h, payload)
	}
	b[24]++ // TTL: the header checksum no longer matches
	if _, _, err := ParseUDP(b); err == nil {
		t.Error("ParseUDP accepted a bad IPv4 header checksum")
	}
}

// FuzzParseUDP: any bytes either fail to parse or give a payload inside the
// frame whose headers, written again, parse the same.
func FuzzParseUDP(f *testing.F) {
	b := make([]byte, UDPHeadersLen+8)
	PutUDPHeaders(b, UDPHeader{SrcIP: [4]byte{10, 0, 0, 1}, DstIP: [4]byte{10, 0, 0, 2}, SrcPort: 1, DstPort: 2}, 8)
	f.Add(b)
	f.Add(b[:30])
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, data, err := ParseUDP(frame)
		if err != nil {
			return
		}
		if len(data) > len(frame)-UDPHeadersLen {
			t.Fatalf("payload of %d bytes from a %d-byte frame", len(data), len(frame))
		}
		again := make([]byte, UDPHeadersLen+len(data))
		PutUDPHeaders(again, h, len(data))
		copy(again[UDPHeadersLen:], data)
		h2, data2, err := ParseUDP(again)
		if err != nil || h2 != h || !bytes.Equal(data2, data) {
			t.Fatalf("re-encoded frame parses as %+v, %v; want %+v", h2, err, h)
		}
	})
}

// FuzzParseEthHeader: any bytes either are too short or give the header
// and the rest, which written again are the same bytes.
func FuzzParseEthHeader(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x86, 0xdf, 0, 1})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, rest, err := ParseEthHeader(frame)
		if err != nil {
			if len(frame) >= EthHeaderLen {
				t.Fatalf("%d bytes rejected: %v", len(frame), err)
			}
			return
		}
		again := make([]byte, EthHeaderLen)
		PutEthHeader(again, h)
		if !bytes.Equal(append(again, rest...), frame) {
			t.Fatalf("header %+v and rest do not give the frame back", h)
		}
	})
}

// FuzzNetlinkNeighbours: the rtnetlink decoders never read outside their
// input, whatever the lengths in it say.
func FuzzNetlinkNeighbours(f *testing.F) {
	// One RTM_NEWNEIGH: nlmsghdr, ndmsg (AF_INET, state PERMANENT), NDA_DST
	// 10.0.0.2, NDA_LLADDR 02:00:00:00:00:02.
	msg := []byte{
		48, 0, 0, 0, 28, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0, 0, 0, 1, 0, 0, 0, 0x80, 0, 0, 1,
		8, 0, 1, 0, 10, 0, 0, 2,
		10, 0, 2, 0, 2, 0, 0, 0, 0, 2, 0, 0,
	}
	f.Add(msg)
	f.Add(msg[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, _ := syscallParseNetlink(b)
		for _, m := range msgs {
			parseNeighbour(m.data)
		}
	})
}

func TestNetlinkNeighbour(t *testing.T) {
	msg := []byte{
		48, 0, 0, 0, 28, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0, 0, 0, 1, 0, 0, 0, 0x80, 0, 0, 1,
		8, 0, 1, 0, 10, 0, 0, 2,
		10, 0, 2, 0, 2, 0, 0, 0, 0, 2, 0, 0,
	}
	msgs, err := syscallParseNetlink(msg)
	if err != nil || len(msgs) != 1 || msgs[0].typ != 28 {
		t.Fatalf("parse: %+v, %v", msgs, err)
	}
	ip, mac, ok := parseNeighbour(msgs[0].data)
	if !ok || ip != [4]byte{10, 0, 0, 2} || mac != [6]byte{2, 0, 0, 0, 0, 2} {
		t.Errorf("neighbour %v %v %v", ip, mac, ok)
	}
}
