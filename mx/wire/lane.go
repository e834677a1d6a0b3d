package wire

import "encoding/binary"

// The lane record: gomx's own frame for an eager message of one frame (a
// tiny, a small, or a medium of one fragment) between two gomx boards of one
// host, written straight into the receiver's
// shared-memory ring (mx's lane, see mx/lane.go). It never crosses a wire,
// so it carries no Open-MX header: a peer index slot (written as zero,
// never read) and a type byte where a wire frame has its own, so one
// look at the type tells the two apart, then a compact header, always
// little-endian (both ends are processes of one host):
//
//	offset  size  field
//	0       2     zero (the wire frame's peer index slot)
//	2       1     TypeLane
//	3       1     zero
//	4       1     destination endpoint
//	5       1     source endpoint
//	6       2     sequence number (session bits included), as a TINY's
//	8       2     piggybacked ack, as a TINY's
//	10      2     payload length, at most LaneMediumMax
//	12      4     destination endpoint's session
//	16      8     match information
//	24      n     payload
//
// A board sends it only to a peer that announced ExtRingLane in its gomx
// CONNECT extension, with a payload of at most LaneMax (a small message's)
// unless the peer also announced ExtRingLaneMedium, and accepts it only from
// shared-memory rings.
const (
	// TypeLane is the lane record's type byte: no Open-MX packet type, so
	// a board that does not know it drops it as an unknown type.
	TypeLane Type = 0x67 // 'g'
	// LaneLen is the lane record's header length, the slot and type byte
	// included.
	LaneLen = 24
	// LaneMax is the largest payload of a lane record to a peer that did
	// not announce ExtRingLaneMedium: a small message's.
	LaneMax = SmallMax
	// LaneMediumMax is the largest payload of any lane record: the widest
	// medium fragment (8 KiB), the most a medium of one fragment holds.
	LaneMediumMax = 8192
)

// Lane is a lane record's header.
type Lane struct {
	DstEP, SrcEP uint8
	Seq, Ack     uint16
	Length       uint16
	Session      uint32
	Match        uint64
}

// PutLane writes h as a lane record header into p[:LaneLen]
// (PutLaneHeader).
func PutLane(p []byte, h *Lane) {
	PutLaneHeader(p, h.DstEP, h.SrcEP, h.Seq, h.Ack, h.Length, h.Session, h.Match)
}

// PutLaneHeader writes a lane record header of those fields into
// p[:LaneLen], as three 8-byte stores of words composed in registers. A
// sender's header is copied on at once (into a ring record, 8 bytes at a
// time: shm.Transport.SendParts), and a load the CPU can forward from the
// one store that wrote its bytes costs nothing, while one that spans
// several narrower stores (a header built field by field in memory, or a
// Lane built on the stack and read back with combined loads) waits until
// they reach the cache: a stall on the path of every lane message.
func PutLaneHeader(p []byte, dst, src uint8, seq, ack, length uint16, session uint32, match uint64) {
	_ = p[LaneLen-1]
	le := binary.LittleEndian
	le.PutUint64(p, uint64(TypeLane)<<16|uint64(dst)<<32|uint64(src)<<40|uint64(seq)<<48)
	le.PutUint64(p[8:], uint64(ack)|uint64(length)<<16|uint64(session)<<32)
	le.PutUint64(p[16:], match)
}

// DecodeLane decodes the lane record that is all of data (a ring record
// holds exactly one) into h, and returns its payload, which points into
// data. The record comes from another process, so every field is checked:
// the type byte, the reserved bytes, a length of at most LaneMediumMax
// that accounts for every byte after the header. (h is the caller's, not a
// result: a header built on the callee's stack and returned was copied
// with wide loads from its narrow stores, a store-forwarding stall per
// field group, a tenth of a lane message's cost.)
func DecodeLane(data []byte, h *Lane) ([]byte, error) {
	if len(data) < LaneLen {
		return nil, derr(TypeLane, "header", ErrShort)
	}
	if data[0]|data[1]|data[3] != 0 || Type(data[2]) != TypeLane {
		return nil, derr(TypeLane, "type", ErrUnknownType)
	}
	le := binary.LittleEndian
	h.DstEP, h.SrcEP = data[4], data[5]
	h.Seq, h.Ack, h.Length = le.Uint16(data[6:]), le.Uint16(data[8:]), le.Uint16(data[10:])
	h.Session, h.Match = le.Uint32(data[12:]), le.Uint64(data[16:])
	if h.Length > LaneMediumMax || int(h.Length) != len(data)-LaneLen {
		return nil, derr(TypeLane, "length", ErrBadLength)
	}
	return data[LaneLen:], nil
}
