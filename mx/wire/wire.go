// Package wire encodes and decodes the Open-MX frame headers that the mx
// message layer puts on the wire. It is pure: no I/O, no state, no
// allocation on the encode and decode paths, and every decoder validates
// lengths before it reads, so a malformed frame from the network yields a
// typed error, never a panic.
//
// # Frame layout
//
// A frame's Data (see package transport) is what follows the Ethernet
// header of an Open-MX frame:
//
//	peer index (2) | packet header (type-specific) | payload [| CRC-32C (4)]
//
// The 2-byte peer index is the sender's index in the receiver's peer table
// ([NoPeerIndex] when unknown). The packet header starts with a 1-byte packet
// type ([Type]) and follows the layouts of Open-MX's common/omx_wire.h in its
// native (not MX-wire-compatible) mode, field for field; every header type's
// doc comment gives its byte offsets. Every header carries, directly or
// through a length field, the exact length of what follows it, so a receiver
// never trusts the frame length (Ethernet pads short frames): [FrameLen]
// computes it. RAW frames are the exception: they are opaque and run to the
// end of the frame.
//
// # Byte order
//
// Open-MX writes header integers big-endian by default and in host order
// when built with --disable-endian, which on the machines it runs on means
// little-endian. Every Put and Decode takes the [Order]; both boards of a
// wire must use the same one (mx.BoardOptions.LittleEndian).
//
// # Padding
//
// Open-MX neither writes nor clears the padding bytes of its headers (its
// packet buffers are not zeroed), so the decoders here never read a pad of
// an Open-MX peer's frame and the encoders write zeros there. One pad byte
// carries a gomx extension between gomx boards, the NOTIFY's pull status
// (ExtPullStatus): [DecodeNotify] takes the extension flags the two boards
// negotiated and reads that byte only when both announced it.
//
// # Extensions
//
// What gomx needs beyond Open-MX is named as an extension and is only used
// once both sides have announced it:
//
//   - [ConnectExt]: a gomx CONNECT carries 8 more data bytes after Open-MX's
//     16 (its data length field says 24, where Open-MX always says 16 and
//     reads only 16). They hold a magic, the sender's largest frame and its
//     flags. An Open-MX peer ignores them; a gomx peer learns from them that
//     the other side is gomx and what it can do.
//   - The CRC-32C trailer ([Seal], [Verify]): 4 bytes, big-endian, after the
//     frame's header and payload, covering the peer index and everything up
//     to the trailer. Open-MX relies on the Ethernet CRC; software wires do
//     not check one. The trailer is on between two gomx boards whose connect
//     extensions both set [ExtChecksum], and off otherwise, in particular
//     always off with an Open-MX peer (which ignores bytes after a header's
//     stated length, so a trailer sent before the negotiation is harmless).
//   - The selective ack ([Sack]): a TRUC between two gomx boards whose
//     connect extensions both set [ExtSack] may carry, after Open-MX's 28
//     bytes, what the receiver holds past its cumulative ack. Its data
//     length field says 16+8+6n (Open-MX always says 16), then, field by
//     field: a magic "gmsk" (4 bytes); the block count n, 1 to 16 (1 byte);
//     3 reserved bytes, written as zero and never read; then n blocks of 6
//     bytes, each a sequence number (2 bytes, session bits included, always
//     past the TRUC's ack-up-to) and a 32-bit map of the fragments of that
//     message the receiver holds (bit i: fragment i; all ones: the whole
//     message, whatever its kind). A sequence number past the ack point
//     and absent from the blocks is one the receiver holds nothing of. A
//     board never sends the extension to a peer that did not announce it,
//     so an Open-MX peer sees exactly Open-MX's TRUC.
//   - The pull status ([Notify].Failed): byte 14 of a NOTIFY, the first of
//     Open-MX's pad, says that the puller gave the pull up. It is written
//     non-zero, and read, only between boards that both set
//     [ExtPullStatus]; from any other peer the byte is a pad.
//   - The reply pad ([Pull].ReplyPad): byte 17 of a PULL, the first of
//     Open-MX's pad, asks the region owner to put that many zero bytes
//     between each PULL_REPLY's header and its payload and to cut the
//     block's frames that much shorter, so that the payload begins where
//     the puller's NIC splits the frame (header split into a buffer of
//     fixed size). It is written non-zero, and read, only between boards
//     that both set [ExtReplyPad]; from any other peer the byte is a pad.
//   - The reply lane ([Pull].Lane): byte 18 of a PULL, the next pad byte,
//     names the receive lane of the puller's transport the block's
//     replies go to (a NIC queue that receives only them). It is written
//     non-zero, and read, only between boards that both set
//     [ExtPlaceLane], a flag of the connect extension's second block
//     ([ConnectExt].More, sent only when one of its flags is set).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/internal/crc32c"
)

// Type is the 1-byte Open-MX packet type.
type Type uint8

// Packet types (omx_wire.h enum omx_pkt_type).
const (
	TypeNone      Type = 0
	TypeRaw       Type = 1  // opaque frame for a raw (discovery) user
	TypeHostQuery Type = 3  // "what is your hostname?"
	TypeHostReply Type = 4  // the answer
	TypeTruc      Type = 35 // library-level ack carrier
	TypeConnect   Type = 36 // connect request and reply
	TypeTiny      Type = 37
	TypeSmall     Type = 38
	TypeMedium    Type = 39 // one fragment of a medium message
	TypeRndv      Type = 40
	TypePull      Type = 41 // pull request
	TypePullReply Type = 42
	TypeNotify    Type = 43
	TypeNackLib   Type = 44
	TypeNackMCP   Type = 45
)

var typeNames = map[Type]string{
	TypeNone: "NONE", TypeRaw: "RAW", TypeHostQuery: "HOST_QUERY", TypeHostReply: "HOST_REPLY",
	TypeTruc: "TRUC", TypeConnect: "CONNECT", TypeTiny: "TINY", TypeSmall: "SMALL",
	TypeMedium: "MEDIUM", TypeRndv: "RNDV", TypePull: "PULL", TypePullReply: "PULL_REPLY",
	TypeNotify: "NOTIFY", TypeNackLib: "NACK_LIB", TypeNackMCP: "NACK_MCP", TypeLane: "LANE",
}

// String returns the Open-MX name of the packet type.
func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("TYPE(%d)", uint8(t))
}

// Sizes of the fixed parts of a frame.
const (
	HeadLen       = 2  // peer index
	MsgLen        = 24 // TINY and SMALL header
	MediumLen     = 32 // MEDIUM fragment header
	RndvLen       = 32 // RNDV header (message header + 8 bytes)
	PullLen       = 44 // PULL request, native mode
	PullReplyLen  = 16 // PULL_REPLY header
	NotifyLen     = 24 // NOTIFY
	ConnectLen    = 32 // CONNECT request or reply, Open-MX's 16 data bytes included
	ConnectExtLen = 8  // the gomx connect extension after ConnectLen
	// ConnectExtMoreLen is the gomx connect extension's second block,
	// after the first, when its data length says 32 (ConnectExt.More).
	ConnectExtMoreLen = 8
	TrucLen           = 28 // TRUC ack
	NackLibLen        = 16 // NACK_LIB
	NackMCPLen        = 16 // NACK_MCP
	HostQueryLen      = 16 // HOST_QUERY
	HostReplyLen      = 16 // HOST_REPLY header; the hostname follows
	ChecksumLen       = 4  // CRC-32C trailer
	rndvPayload       = 8  // the RNDV message header's payload length field
	connectData       = 16 // Open-MX's CONNECT data length
	trucData          = 16 // TRUC data length (offsets 12..27)
	TinyMax           = 32
	SmallMax          = 128
	MaxMediumFrag     = 32 // fragments per medium message (a 32-bit bitmap)
)

// NoPeerIndex is the peer index a sender uses before the receiver has told it
// its index: the receiver then finds the peer by NIC id.
const NoPeerIndex = 0xFFFF

// TrucAck is the TRUC data type of a library ack.
const TrucAck = 0x55

// NACK_LIB and NACK_MCP reasons.
const (
	NackBadEndpoint    = 1
	NackEndpointClosed = 2
	NackBadSession     = 3
	NackBadRDMAWindow  = 4
)

// Connect reply statuses.
const (
	ConnectOK     = 0
	ConnectBadKey = 11
)

// PullMagicXor is what Open-MX XORs an endpoint index with to make the
// puller magic of its pulls (omx_pull.c); a PULL_REPLY names its endpoint
// only through the magic, so both sides must use this constant.
const PullMagicXor = 0x21071980

// HostQueryMagic is the magic Open-MX puts in its host queries; a reply
// echoes the query's magic.
const HostQueryMagic = 0x13052008

// Errors returned by the decoders, wrapped in a *DecodeError.
var (
	// ErrShort means the frame ends before the header or payload does.
	ErrShort = errors.New("wire: frame too short")
	// ErrBadLength means a length field is out of range for its packet type.
	ErrBadLength = errors.New("wire: bad length field")
	// ErrUnknownType means the packet type is not one mx handles.
	ErrUnknownType = errors.New("wire: unknown packet type")
	// ErrChecksum means the CRC-32C trailer does not match.
	ErrChecksum = errors.New("wire: checksum mismatch")
)

// DecodeError says which packet type and field failed to decode.
type DecodeError struct {
	Type  Type
	Field string
	Err   error
}

// Error formats the packet type, field and cause.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("wire: %v %s: %v", e.Type, e.Field, e.Err)
}

// Unwrap returns the sentinel error.
func (e *DecodeError) Unwrap() error { return e.Err }

func derr(t Type, field string, err error) error {
	return &DecodeError{Type: t, Field: field, Err: err}
}

// Order is the byte order of header integers.
type Order uint8

// Byte orders Open-MX supports.
const (
	// BigEndian is Open-MX's default wire order.
	BigEndian Order = iota
	// LittleEndian is the host order of an Open-MX built with
	// --disable-endian on a little-endian machine.
	LittleEndian
)

// String names the order.
func (o Order) String() string {
	if o == LittleEndian {
		return "little-endian"
	}
	return "big-endian"
}

func (o Order) u16(p []byte) uint16 {
	if o == LittleEndian {
		return binary.LittleEndian.Uint16(p)
	}
	return binary.BigEndian.Uint16(p)
}

func (o Order) u32(p []byte) uint32 {
	if o == LittleEndian {
		return binary.LittleEndian.Uint32(p)
	}
	return binary.BigEndian.Uint32(p)
}

func (o Order) put16(p []byte, v uint16) {
	if o == LittleEndian {
		binary.LittleEndian.PutUint16(p, v)
		return
	}
	binary.BigEndian.PutUint16(p, v)
}

func (o Order) put32(p []byte, v uint32) {
	if o == LittleEndian {
		binary.LittleEndian.PutUint32(p, v)
		return
	}
	binary.BigEndian.PutUint32(p, v)
}

// PeerIndex returns the peer index at the start of data.
func PeerIndex(data []byte, o Order) (uint16, error) {
	if len(data) < HeadLen {
		return 0, derr(TypeNone, "peer index", ErrShort)
	}
	return o.u16(data), nil
}

// PutPeerIndex writes the peer index at the start of data.
func PutPeerIndex(data []byte, idx uint16, o Order) { o.put16(data, idx) }

// PacketType returns the packet type of data (which starts with the peer index).
func PacketType(data []byte) (Type, error) {
	if len(data) < HeadLen+1 {
		return TypeNone, derr(TypeNone, "type", ErrShort)
	}
	return Type(data[HeadLen]), nil
}

// FrameLen returns the length of the frame that starts data, peer index,
// header and payload included and checksum trailer excluded, as its own
// header says. It validates the header's length fields but not the
// checksum. Bytes after the returned length are padding or the trailer. A
// RAW frame runs to the end of data.
func FrameLen(data []byte, o Order) (int, error) {
	t, err := PacketType(data)
	if err != nil {
		return 0, err
	}
	p := data[HeadLen:]
	need := func(n int) error {
		if len(p) < n {
			return derr(t, "header", ErrShort)
		}
		return nil
	}
	var n int
	switch t {
	case TypeRaw:
		return len(data), nil
	case TypeTiny, TypeSmall:
		if err := need(MsgLen); err != nil {
			return 0, err
		}
		l := int(o.u16(p[4:]))
		if (t == TypeTiny && l > TinyMax) || (t == TypeSmall && l > SmallMax) {
			return 0, derr(t, "length", ErrBadLength)
		}
		n = MsgLen + l
	case TypeMedium:
		if err := need(MediumLen); err != nil {
			return 0, err
		}
		n = MediumLen + int(o.u16(p[24:]))
	case TypeRndv:
		n = RndvLen
	case TypePull:
		n = PullLen
	case TypePullReply:
		if err := need(PullReplyLen); err != nil {
			return 0, err
		}
		n = PullReplyLen + int(o.u16(p[2:]))
	case TypeNotify:
		n = NotifyLen
	case TypeConnect:
		if err := need(ConnectLen); err != nil {
			return 0, err
		}
		n = ConnectLen
		if hasConnectExt(p, o) {
			n += ConnectExtLen
			if hasConnectExtMore(p) {
				n += ConnectExtMoreLen
			}
		}
	case TypeTruc:
		if err := need(TrucLen); err != nil {
			return 0, err
		}
		l, err := sackLen(p, o)
		if err != nil {
			return 0, err
		}
		n = TrucLen + l
	case TypeNackLib:
		n = NackLibLen
	case TypeNackMCP:
		n = NackMCPLen
	case TypeHostQuery:
		n = HostQueryLen
	case TypeHostReply:
		if err := need(HostReplyLen); err != nil {
			return 0, err
		}
		n = HostReplyLen + int(p[1])
	default:
		return 0, derr(t, "type", ErrUnknownType)
	}
	if err := need(n); err != nil {
		return 0, derr(t, "payload", ErrShort)
	}
	return HeadLen + n, nil
}

// Seal appends the CRC-32C of frame to frame and returns the result; frame
// must have ChecksumLen bytes of spare capacity to avoid an allocation.
func Seal(frame []byte) []byte {
	return binary.BigEndian.AppendUint32(frame, crc32c.Checksum(frame))
}

// SealInPlace writes the CRC-32C of buf[:n] to buf[n:n+4] and returns n+4.
// buf must be at least n+ChecksumLen long.
func SealInPlace(buf []byte, n int) int {
	binary.BigEndian.PutUint32(buf[n:], crc32c.Checksum(buf[:n]))
	return n + ChecksumLen
}

// Verify finds the frame's length from its header and, when checksum is
// true, checks the CRC-32C trailer. It returns the frame without trailer or
// padding.
func Verify(data []byte, o Order, checksum bool) ([]byte, error) {
	n, err := FrameLen(data, o)
	if err != nil {
		return nil, err
	}
	if !checksum {
		return data[:n], nil
	}
	return VerifyLen(data, n)
}

// VerifyLen checks the CRC-32C trailer of a frame whose length (trailer
// excluded) FrameLen gave as n, and returns data[:n].
func VerifyLen(data []byte, n int) ([]byte, error) {
	if len(data) < n+ChecksumLen {
		return nil, derr(Type(data[HeadLen]), "checksum", ErrShort)
	}
	if binary.BigEndian.Uint32(data[n:]) != crc32c.Checksum(data[:n]) {
		return nil, derr(Type(data[HeadLen]), "checksum", ErrChecksum)
	}
	return data[:n], nil
}

// putMatch and getMatch split and join the 64-bit match information into
// the two 32-bit halves the headers carry (match_a high, match_b low).
func putMatch(p []byte, m uint64, o Order) {
	o.put32(p, uint32(m>>32))
	o.put32(p[4:], uint32(m))
}

func getMatch(p []byte, o Order) uint64 { return uint64(o.u32(p))<<32 | uint64(o.u32(p[4:])) }

// checkType validates the length and type byte of a header at p.
func checkType(p []byte, want Type, n int) error {
	if len(p) < n {
		return derr(want, "header", ErrShort)
	}
	if Type(p[0]) != want {
		return derr(Type(p[0]), "type", ErrUnknownType)
	}
	return nil
}
