package xdp

import "github.com/gomx-dev/gomx/transport/framing"

// Frame layout constants: the framing package's, under the names this
// package has always offered.
const (
	// EthHeaderLen is the length of an Ethernet header without VLAN tag.
	EthHeaderLen = framing.EthHeaderLen
	// UDPHeadersLen is the length of the Ethernet, IPv4 (no options) and
	// UDP headers that UDP framing puts before the Data.
	UDPHeadersLen = framing.UDPHeadersLen
	// EtherTypeOpenMX is the Open-MX EtherType.
	EtherTypeOpenMX = framing.EtherTypeOpenMX

	minFrame = framing.MinFrame // Ethernet minimum without FCS
)

// EthHeader is the part of an Ethernet header a transport uses (see
// framing.EthHeader).
type EthHeader = framing.EthHeader

// UDPHeader is what UDP framing puts around the Data (see
// framing.UDPHeader).
type UDPHeader = framing.UDPHeader

// PutEthHeader writes h into the first EthHeaderLen bytes of b.
func PutEthHeader(b []byte, h EthHeader) { framing.PutEthHeader(b, h) }

// ParseEthHeader decodes the Ethernet header of frame and returns it with
// the bytes after it. It fails for frames shorter than the header.
func ParseEthHeader(frame []byte) (EthHeader, []byte, error) { return framing.ParseEthHeader(frame) }

// PutUDPHeaders writes the Ethernet, IPv4 and UDP headers for a payload of
// n bytes into the first UDPHeadersLen bytes of b (see
// framing.PutUDPHeaders).
func PutUDPHeaders(b []byte, h UDPHeader, n int) { framing.PutUDPHeaders(b, h, n) }

// ParseUDP decodes an IPv4/UDP frame as UDP framing sends it and returns
// the headers and the UDP payload (see framing.ParseUDP).
func ParseUDP(frame []byte) (UDPHeader, []byte, error) { return framing.ParseUDP(frame) }

// ipChecksum is the Internet checksum of an IPv4 header.
func ipChecksum(h []byte) uint16 { return framing.IPChecksum(h) }
