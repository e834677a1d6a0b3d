package wire

import "encoding/binary"

// The packet headers, one type per packet: the eager messages (TINY, SMALL,
// MEDIUM) here, large messages in large.go, connection and acknowledgement
// control in control.go, host discovery in host.go.
//
// All Put methods write a header at the start of p, which is the frame Data
// after the 2-byte peer index, in byte order o, with zeros in every pad,
// and panic only if p is shorter than the header (a programming error on
// the sending side). All Decode functions take the same p, validate it,
// never read a pad and never panic. Offsets in the comments are from the
// packet type byte, as in omx_wire.h.

// Msg is the 24-byte message header of TINY and SMALL packets
// (struct omx_pkt_msg); the payload of Length bytes follows it.
//
//	0 type | 1 dst endpoint | 2 src endpoint | 3 src generation
//	4 length (2) | 6 checksum (2, Open-MX debug only: written 0, ignored)
//	8 lib seqnum (2) | 10 piggybacked ack (2)
//	12 match high (4) | 16 match low (4) | 20 destination session (4)
type Msg struct {
	Type    Type // TypeTiny or TypeSmall
	DstEP   uint8
	SrcEP   uint8
	Gen     uint8
	Length  uint16 // payload length: at most TinyMax or SmallMax
	Seq     uint16 // library sequence number with session bits
	Ack     uint16 // piggybacked ack: everything below this seq was received
	Match   uint64
	Session uint32 // session id of the destination endpoint
}

// Put writes the header. It is written on every small message, so the
// byte order is chosen once for the whole header, not per field.
func (h *Msg) Put(p []byte, o Order) {
	p = p[:MsgLen]
	p[0], p[1], p[2], p[3] = byte(h.Type), h.DstEP, h.SrcEP, h.Gen
	if o == LittleEndian {
		le := binary.LittleEndian
		le.PutUint16(p[4:], h.Length)
		le.PutUint16(p[6:], 0)
		le.PutUint16(p[8:], h.Seq)
		le.PutUint16(p[10:], h.Ack)
		le.PutUint32(p[12:], uint32(h.Match>>32))
		le.PutUint32(p[16:], uint32(h.Match))
		le.PutUint32(p[20:], h.Session)
		return
	}
	be := binary.BigEndian
	be.PutUint16(p[4:], h.Length)
	be.PutUint16(p[6:], 0)
	be.PutUint16(p[8:], h.Seq)
	be.PutUint16(p[10:], h.Ack)
	be.PutUint64(p[12:], h.Match) // match high, then low
	be.PutUint32(p[20:], h.Session)
}

// DecodeMsg decodes a TINY or SMALL header and returns it with its payload.
func DecodeMsg(p []byte, o Order) (Msg, []byte, error) {
	var h Msg
	payload, err := h.Decode(p, o)
	return h, payload, err
}

// Decode is DecodeMsg into h, for receive paths that keep the header in a
// variable of their own: it decodes a TINY or SMALL header into h and
// returns its payload. On an error h may be partly written.
func (h *Msg) Decode(p []byte, o Order) ([]byte, error) {
	if len(p) < MsgLen {
		return nil, derr(TypeTiny, "header", ErrShort)
	}
	h.Type = Type(p[0])
	if h.Type != TypeTiny && h.Type != TypeSmall {
		return nil, derr(h.Type, "type", ErrUnknownType)
	}
	// The byte order chosen once for the whole header (see Put).
	q := p[:MsgLen]
	h.DstEP, h.SrcEP, h.Gen = q[1], q[2], q[3]
	if o == LittleEndian {
		le := binary.LittleEndian
		h.Length, h.Seq, h.Ack = le.Uint16(q[4:]), le.Uint16(q[8:]), le.Uint16(q[10:])
		h.Match = uint64(le.Uint32(q[12:]))<<32 | uint64(le.Uint32(q[16:]))
		h.Session = le.Uint32(q[20:])
	} else {
		be := binary.BigEndian
		h.Length, h.Seq, h.Ack = be.Uint16(q[4:]), be.Uint16(q[8:]), be.Uint16(q[10:])
		h.Match = be.Uint64(q[12:]) // match high, then low
		h.Session = be.Uint32(q[20:])
	}
	max := uint16(TinyMax)
	if h.Type == TypeSmall {
		max = SmallMax
	}
	if h.Length > max {
		return nil, derr(h.Type, "length", ErrBadLength)
	}
	if len(p) < MsgLen+int(h.Length) {
		return nil, derr(h.Type, "payload", ErrShort)
	}
	return p[MsgLen : MsgLen+int(h.Length)], nil
}

// Medium is the 32-byte header of one MEDIUM fragment
// (struct omx_pkt_medium_frag, native mode); FragLength bytes of payload
// follow it. Every fragment repeats the match information and the message's
// sequence number, so any fragment may arrive first.
//
//	0 type | 1 dst endpoint | 2 src endpoint | 3 src generation
//	4 message length (4) | 8 lib seqnum (2) | 10 piggybacked ack (2)
//	12 match high (4) | 16 match low (4) | 20 destination session (4)
//	24 fragment length (2) | 26 fragment index | 27 pad
//	28 checksum (2, debug only: written 0, ignored) | 30 pad (2)
//
// Fragment i starts at i times the fragment stride, which the header does
// not carry: Open-MX fixes it at build time from its MTU (8192 bytes at MTU
// 9000), and mx derives it from what the two boards announced at connect.
type Medium struct {
	DstEP, SrcEP, Gen uint8
	MsgLength         uint32 // total message length
	Seq, Ack          uint16
	Match             uint64
	Session           uint32
	FragLength        uint16 // this fragment's payload length
	FragIndex         uint8
}

// Put writes the header.
func (h *Medium) Put(p []byte, o Order) {
	_ = p[MediumLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeMedium), h.DstEP, h.SrcEP, h.Gen
	o.put32(p[4:], h.MsgLength)
	o.put16(p[8:], h.Seq)
	o.put16(p[10:], h.Ack)
	putMatch(p[12:], h.Match, o)
	o.put32(p[20:], h.Session)
	o.put16(p[24:], h.FragLength)
	p[26], p[27] = h.FragIndex, 0
	o.put16(p[28:], 0)
	o.put16(p[30:], 0)
}

// Offset returns where the fragment starts in the message for a stride.
func (h *Medium) Offset(stride int) int { return int(h.FragIndex) * stride }

// Frags returns how many fragments of stride bytes the message has.
func (h *Medium) Frags(stride int) int {
	if stride <= 0 {
		return 0
	}
	return (int(h.MsgLength) + stride - 1) / stride
}

// Check validates the fragment against a stride: it lies inside the
// message, has exactly the length its index implies, and the message has at
// most MaxMediumFrag fragments.
func (h *Medium) Check(stride int) error {
	if stride <= 0 {
		return derr(TypeMedium, "fragment stride", ErrBadLength)
	}
	nf := h.Frags(stride)
	if nf > MaxMediumFrag || int(h.FragIndex) >= nf {
		return derr(TypeMedium, "fragment index", ErrBadLength)
	}
	want := min(int(h.MsgLength)-h.Offset(stride), stride)
	if int(h.FragLength) != want {
		return derr(TypeMedium, "fragment length", ErrBadLength)
	}
	return nil
}

// DecodeMedium decodes a MEDIUM fragment header and returns it with its
// payload. Without the stride it checks what the header alone can say: a
// non-empty message, a fragment no longer than the message and an index
// below MaxMediumFrag; [Medium.Check] does the rest.
func DecodeMedium(p []byte, o Order) (Medium, []byte, error) {
	var h Medium
	if err := checkType(p, TypeMedium, MediumLen); err != nil {
		return h, nil, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.MsgLength = o.u32(p[4:])
	h.Seq = o.u16(p[8:])
	h.Ack = o.u16(p[10:])
	h.Match = getMatch(p[12:], o)
	h.Session = o.u32(p[20:])
	h.FragLength = o.u16(p[24:])
	h.FragIndex = p[26]
	if h.MsgLength == 0 || h.FragLength == 0 || uint32(h.FragLength) > h.MsgLength {
		return h, nil, derr(TypeMedium, "fragment length", ErrBadLength)
	}
	if h.FragIndex >= MaxMediumFrag {
		return h, nil, derr(TypeMedium, "fragment index", ErrBadLength)
	}
	if len(p) < MediumLen+int(h.FragLength) {
		return h, nil, derr(TypeMedium, "payload", ErrShort)
	}
	return h, p[MediumLen : MediumLen+int(h.FragLength)], nil
}
