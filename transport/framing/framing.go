// Package framing writes and reads the link headers gomx's NIC-level
// transports put around a frame's Data (see package transport): raw
// Open-MX Ethernet framing (a 14-byte header with EtherType 0x86DF) and
// Open-MX-over-UDP framing (Ethernet, a 20-byte IPv4 header without options
// and an 8-byte UDP header, the Data being the UDP payload exactly as the
// kernel UDP transport sends it). The AF_XDP transport and the user-space
// NIC transport both frame with it, so their bytes on the wire are the same.
//
// The writers fill caller-provided buffers and never allocate; the readers
// return subslices of the frame and never trust a length field beyond the
// bytes present: a frame from the wire that fails them is dropped and
// counted by the caller, never delivered cut short.
package framing

import (
	"encoding/binary"
	"errors"

	"github.com/gomx-dev/gomx/internal/csum"
)

// Frame layout constants.
const (
	// EthHeaderLen is the length of an Ethernet header without VLAN tag.
	EthHeaderLen = 14
	// UDPHeadersLen is the length of the Ethernet, IPv4 (no options) and
	// UDP headers that UDP framing puts before the Data.
	UDPHeadersLen = EthHeaderLen + 20 + 8
	// EtherTypeOpenMX is the Open-MX EtherType.
	EtherTypeOpenMX = 0x86DF
	// EtherTypeIPv4 is the EtherType of IPv4.
	EtherTypeIPv4 = 0x0800
	// MinFrame is the shortest Ethernet frame without FCS: shorter frames
	// are padded on the wire.
	MinFrame = 60
)

// Errors of the frame decoders: frames from the wire that fail them are
// dropped and counted, never trusted.
var (
	// ErrShort: the frame ends before its headers do, or its lengths
	// say more than it holds.
	ErrShort = errors.New("framing: frame shorter than its headers")
	// ErrNotUDP: not an unfragmented IPv4/UDP datagram without IP
	// options and with a valid header checksum.
	ErrNotUDP = errors.New("framing: not an IPv4/UDP frame for us")
)

// EthHeader is the part of an Ethernet header a transport uses.
type EthHeader struct {
	Dst, Src  [6]byte // destination and source MAC addresses
	EtherType uint16  // in host order
}

// PutEthHeader writes h into the first EthHeaderLen bytes of b.
func PutEthHeader(b []byte, h EthHeader) {
	copy(b[0:6], h.Dst[:])
	copy(b[6:12], h.Src[:])
	binary.BigEndian.PutUint16(b[12:14], h.EtherType)
}

// ParseEthHeader decodes the Ethernet header of frame and returns it with
// the bytes after it. It fails for frames shorter than the header.
func ParseEthHeader(frame []byte) (EthHeader, []byte, error) {
	if len(frame) < EthHeaderLen {
		return EthHeader{}, nil, ErrShort
	}
	var h EthHeader
	copy(h.Dst[:], frame[0:6])
	copy(h.Src[:], frame[6:12])
	h.EtherType = binary.BigEndian.Uint16(frame[12:14])
	return h, frame[EthHeaderLen:], nil
}

// UDPHeader is what UDP framing puts around the Data: Ethernet, IPv4 and
// UDP addressing.
type UDPHeader struct {
	Eth              EthHeader // EtherType is IPv4
	SrcIP, DstIP     [4]byte   // IPv4 addresses
	SrcPort, DstPort uint16    // UDP ports, in host order
}

// PutUDPHeaders writes the Ethernet, IPv4 and UDP headers for a payload of
// n bytes into the first UDPHeadersLen bytes of b, with a correct IPv4
// header checksum and no UDP checksum (0, allowed over IPv4).
func PutUDPHeaders(b []byte, h UDPHeader, n int) {
	h.Eth.EtherType = EtherTypeIPv4
	PutEthHeader(b, h.Eth)
	ip := b[EthHeaderLen : EthHeaderLen+20]
	ip[0] = 0x45 // version 4, 5 words
	ip[1] = 0
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+8+n))
	binary.BigEndian.PutUint16(ip[4:6], 0)      // id
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // don't fragment
	ip[8] = 64                                  // TTL
	ip[9] = 17                                  // UDP
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], h.SrcIP[:])
	copy(ip[16:20], h.DstIP[:])
	binary.BigEndian.PutUint16(ip[10:12], IPChecksum(ip))
	udp := b[EthHeaderLen+20 : UDPHeadersLen]
	binary.BigEndian.PutUint16(udp[0:2], h.SrcPort)
	binary.BigEndian.PutUint16(udp[2:4], h.DstPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(8+n))
	binary.BigEndian.PutUint16(udp[6:8], 0)
}

// IPChecksum is the Internet checksum (RFC 1071) of an IPv4 header.
func IPChecksum(h []byte) uint16 { return csum.Checksum(h) }

// UDPChecksumOK reports whether the UDP checksum of a frame ParseUDP
// accepted is right by RFC 768: summed over the pseudo-header and the UDP
// datagram as the UDP length bounds it, not the IP payload, which may be
// longer. A zero checksum (none sent) is right.
func UDPChecksumOK(frame []byte) bool {
	ip := frame[EthHeaderLen : EthHeaderLen+20]
	ulen := int(binary.BigEndian.Uint16(frame[EthHeaderLen+24:]))
	udp := frame[EthHeaderLen+20 : EthHeaderLen+20+ulen]
	if udp[6] == 0 && udp[7] == 0 {
		return true
	}
	return csum.Fold(csum.Add(csum.Pseudo(ip[12:20], 17, ulen), udp)) == 0xffff
}

// ParseUDP decodes an IPv4/UDP frame as UDP framing sends it: IPv4 without
// options, not fragmented, UDP, with consistent lengths and a valid header
// checksum. It returns the headers and the UDP payload, trimmed to the UDP
// length (Ethernet padding removed).
func ParseUDP(frame []byte) (UDPHeader, []byte, error) {
	eth, rest, err := ParseEthHeader(frame)
	if err != nil {
		return UDPHeader{}, nil, err
	}
	if eth.EtherType != EtherTypeIPv4 {
		return UDPHeader{}, nil, ErrNotUDP
	}
	if len(rest) < 28 {
		return UDPHeader{}, nil, ErrShort
	}
	ip := rest[:20]
	if ip[0] != 0x45 || ip[9] != 17 || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 || IPChecksum(ip) != 0 {
		return UDPHeader{}, nil, ErrNotUDP
	}
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	udp := rest[20:28]
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if total > len(rest) || ulen < 8 || 20+ulen > total {
		return UDPHeader{}, nil, ErrShort
	}
	h := UDPHeader{Eth: eth}
	copy(h.SrcIP[:], ip[12:16])
	copy(h.DstIP[:], ip[16:20])
	h.SrcPort = binary.BigEndian.Uint16(udp[0:2])
	h.DstPort = binary.BigEndian.Uint16(udp[2:4])
	return h, rest[28 : 20+ulen], nil
}
