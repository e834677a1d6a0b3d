package wire

// The headers of large messages (the rendezvous protocol): the RNDV that
// announces a message, the PULL requests the receiver sends, the frames each
// PULL_REPLY carries (PullFrames) and the NOTIFY that ends the exchange.
// The conventions of Put and Decode are those of headers.go.

// Rndv is the 32-byte RNDV header announcing a large message the receiver
// pulls from the sender's region (struct omx_pkt_rndv).
//
//	0..23 a message header (Msg) whose length field is 8 (at least 8 on receipt)
//	24 message length (4) | 28 region id | 29 region seqnum | 30 region offset (2)
type Rndv struct {
	DstEP, SrcEP, Gen uint8
	Seq, Ack          uint16
	Match             uint64
	Session           uint32
	MsgLength         uint32
	RegionID          uint8
	RegionSeq         uint8
	RegionOffset      uint16
}

// Put writes the header.
func (h *Rndv) Put(p []byte, o Order) {
	_ = p[RndvLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeRndv), h.DstEP, h.SrcEP, h.Gen
	o.put16(p[4:], rndvPayload)
	o.put16(p[6:], 0)
	o.put16(p[8:], h.Seq)
	o.put16(p[10:], h.Ack)
	putMatch(p[12:], h.Match, o)
	o.put32(p[20:], h.Session)
	o.put32(p[24:], h.MsgLength)
	p[28], p[29] = h.RegionID, h.RegionSeq
	o.put16(p[30:], h.RegionOffset)
}

// DecodeRndv decodes an RNDV header.
func DecodeRndv(p []byte, o Order) (Rndv, error) {
	var h Rndv
	if err := checkType(p, TypeRndv, RndvLen); err != nil {
		return h, err
	}
	if o.u16(p[4:]) < rndvPayload {
		return h, derr(TypeRndv, "length", ErrBadLength)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Seq = o.u16(p[8:])
	h.Ack = o.u16(p[10:])
	h.Match = getMatch(p[12:], o)
	h.Session = o.u32(p[20:])
	h.MsgLength = o.u32(p[24:])
	h.RegionID, h.RegionSeq = p[28], p[29]
	h.RegionOffset = o.u16(p[30:])
	return h, nil
}

// Pull is the 44-byte native-mode PULL request (struct
// omx_pkt_pull_request): the puller asks the owner of a region for one block
// of frames.
//
//	0 type | 1 dst endpoint | 2 src endpoint | 3 src generation
//	4 session of the region owner (4) | 8 total pull length (4)
//	12 region id (4) | 16 region seqnum | 17 reply pad (gomx) | 18 reply lane (gomx) | 19 flags (gomx)
//	20 region offset (4) | 24 puller handle (4) | 28 puller magic (4)
//	32 offset in the first frame (4) | 36 block length (4) | 40 first frame index (4)
//
// The frame geometry (see [PullFrames]) depends on the pull reply length,
// which the header does not carry: both sides derive it from the MTU, less
// ReplyPad. Byte 17 is padding in Open-MX, which neither writes nor reads
// it: it is ReplyPad only between boards that both announced
// [ExtReplyPad] (see DecodePull), byte 18 is Lane only between boards
// that both announced [ExtPlaceLane], and bit 0 of byte 19 (PullAlignEnd)
// is AlignEnd only between boards that both announced [ExtPullAlign].
type Pull struct {
	DstEP, SrcEP, Gen uint8
	Session           uint32
	TotalLength       uint32 // bytes the whole pull covers
	RegionID          uint32
	RegionSeq         uint8
	RegionOffset      uint32
	Handle            uint32 // puller handle id
	Magic             uint32 // puller magic
	FirstFrameOffset  uint32
	BlockLength       uint32 // bytes this block covers
	FirstFrame        uint32 // index of the block's first frame
	// ReplyPad is how many zero bytes each PULL_REPLY of the block carries
	// between its header and its payload, so that the payload begins
	// where the puller's NIC splits the frame (its header buffer ends
	// there); the reply length of the geometry is then the MTU's less
	// ReplyPad. 0 asks for Open-MX's replies.
	ReplyPad uint8
	// Lane is the receive lane of the puller's transport the block's
	// replies go to (transport.Frame.Lane), so that its NIC steers them
	// to a queue of their own; 0 for none.
	Lane uint8
	// AlignEnd asks for the pull's frames cut from its end
	// ([AlignEnd]: the geometry's skew is (L - TotalLength%L) % L,
	// 0 for a multiple of L, not RegionOffset%L), so that its last frame is full; the puller
	// sets it in every PULL of the pull, or in none. The bytes still
	// come from RegionOffset on.
	AlignEnd bool
}

// PullAlignEnd is the bit of a PULL's byte 19 that says Pull.AlignEnd.
const PullAlignEnd = 1 << 0

// Put writes the header.
func (h *Pull) Put(p []byte, o Order) {
	_ = p[PullLen-1]
	p[0], p[1], p[2], p[3] = byte(TypePull), h.DstEP, h.SrcEP, h.Gen
	o.put32(p[4:], h.Session)
	o.put32(p[8:], h.TotalLength)
	o.put32(p[12:], h.RegionID)
	p[16], p[17], p[18], p[19] = h.RegionSeq, h.ReplyPad, h.Lane, 0
	if h.AlignEnd {
		p[19] = PullAlignEnd
	}
	o.put32(p[20:], h.RegionOffset)
	o.put32(p[24:], h.Handle)
	o.put32(p[28:], h.Magic)
	o.put32(p[32:], h.FirstFrameOffset)
	o.put32(p[36:], h.BlockLength)
	o.put32(p[40:], h.FirstFrame)
}

// DecodePull decodes a PULL request from a peer with which ext (the
// connect extension flags both boards announced, 0 for an Open-MX peer or
// one not connected yet) was negotiated: byte 17 is read as ReplyPad only
// when ext has ExtReplyPad; otherwise it is Open-MX's pad, whatever it
// holds, and ReplyPad is 0. Byte 18 is read as Lane only when more (the
// negotiated ConnectExt.More flags) has ExtPlaceLane, and bit 0 of byte 19
// as AlignEnd only when more has ExtPullAlign (its other bits are
// ignored). It checks only that
// the block is not empty;
// the region owner checks the rest against its region and the frame
// geometry.
func DecodePull(p []byte, o Order, ext, more uint8) (Pull, error) {
	var h Pull
	if err := checkType(p, TypePull, PullLen); err != nil {
		return h, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = o.u32(p[4:])
	h.TotalLength = o.u32(p[8:])
	h.RegionID = o.u32(p[12:])
	h.RegionSeq = p[16]
	if ext&ExtReplyPad != 0 {
		h.ReplyPad = p[17]
	}
	if more&ExtPlaceLane != 0 {
		h.Lane = p[18]
	}
	if more&ExtPullAlign != 0 {
		h.AlignEnd = p[19]&PullAlignEnd != 0
	}
	h.RegionOffset = o.u32(p[20:])
	h.Handle = o.u32(p[24:])
	h.Magic = o.u32(p[28:])
	h.FirstFrameOffset = o.u32(p[32:])
	h.BlockLength = o.u32(p[36:])
	h.FirstFrame = o.u32(p[40:])
	if h.BlockLength == 0 {
		return h, derr(TypePull, "block length", ErrBadLength)
	}
	return h, nil
}

// PullFrames is how Open-MX cuts a pulled message into PULL_REPLY frames
// (omx_wire.h, "Pull Protocol"): frames are aligned on multiples of the
// reply length L in the sender's region, so with the message at region
// offset r, frame 0 holds the L - r%L bytes up to the first boundary and
// frame k > 0 starts at k*L - r%L in the message. Both the puller and the
// region owner compute the same geometry.
type PullFrames struct {
	Total int // bytes pulled
	L     int // pull reply payload length
	Skew  int // region offset modulo L, or [AlignEnd]'s for a pull cut from its end
}

// Count returns the number of frames.
func (g PullFrames) Count() int {
	if g.Total <= 0 || g.L <= 0 {
		return 0
	}
	return (g.Total + g.Skew + g.L - 1) / g.L
}

// Start returns where frame k starts in the message.
func (g PullFrames) Start(k int) int {
	if k == 0 {
		return 0
	}
	return k*g.L - g.Skew
}

// End returns where frame k ends in the message.
func (g PullFrames) End(k int) int { return min((k+1)*g.L-g.Skew, g.Total) }

// AlignEnd returns the skew that cuts total bytes into frames of L from
// their end: the first frame holds total%L bytes (all L when total is a
// multiple of L) and every later one L, so the last frame is full.
func AlignEnd(total, L int) int {
	if L <= 0 {
		return 0
	}
	return (L - total%L) % L
}

// Index returns the frame that starts at message offset off, or -1.
func (g PullFrames) Index(off int) int {
	k := (off + g.Skew) / g.L
	if off < 0 || off >= g.Total || g.Start(k) != off {
		return -1
	}
	return k
}

// PullReply is the 16-byte header of one PULL_REPLY frame (struct
// omx_pkt_pull_reply); FrameLength bytes of the region follow it.
//
//	0 type | 1 frame seqnum (frame index mod 256) | 2 frame length (2)
//	4 offset in the message (4) | 8 puller handle (4) | 12 puller magic (4)
type PullReply struct {
	FrameSeq    uint8
	FrameLength uint16
	Offset      uint32
	Handle      uint32
	Magic       uint32
}

// Put writes the header.
func (h *PullReply) Put(p []byte, o Order) {
	_ = p[PullReplyLen-1]
	p[0], p[1] = byte(TypePullReply), h.FrameSeq
	o.put16(p[2:], h.FrameLength)
	o.put32(p[4:], h.Offset)
	o.put32(p[8:], h.Handle)
	o.put32(p[12:], h.Magic)
}

// DecodePullReply decodes a PULL_REPLY header and returns it with its payload.
func DecodePullReply(p []byte, o Order) (PullReply, []byte, error) {
	h, err := DecodePullReplyHeader(p, o)
	if err != nil {
		return h, nil, err
	}
	if len(p) < PullReplyLen+int(h.FrameLength) {
		return h, nil, derr(TypePullReply, "payload", ErrShort)
	}
	return h, p[PullReplyLen : PullReplyLen+int(h.FrameLength)], nil
}

// DecodePullReplyHeader decodes the header of a PULL_REPLY whose payload
// does not follow it in p (a NIC wrote it elsewhere): p need hold only
// the header.
func DecodePullReplyHeader(p []byte, o Order) (PullReply, error) {
	var h PullReply
	if err := checkType(p, TypePullReply, PullReplyLen); err != nil {
		return h, err
	}
	h.FrameSeq = p[1]
	h.FrameLength = o.u16(p[2:])
	h.Offset = o.u32(p[4:])
	h.Handle = o.u32(p[8:])
	h.Magic = o.u32(p[12:])
	if h.FrameLength == 0 {
		return h, derr(TypePullReply, "frame length", ErrBadLength)
	}
	return h, nil
}

// Notify is the 24-byte NOTIFY the puller sends, sequenced, when a pull is
// done (struct omx_pkt_notify): the region owner may release the region and
// complete the send.
//
//	0 type | 1 dst endpoint | 2 src endpoint | 3 src generation
//	4 destination session (4) | 8 pulled length (4)
//	12 region id | 13 region seqnum | 14 pull failed (gomx) | 15 pad (3)
//	18 lib seqnum (2) | 20 piggybacked ack (2) | 22 pad (2)
//
// Byte 14 is a gomx extension in Open-MX's padding: a puller whose pull
// failed still sends the NOTIFY (as Open-MX does, with length 0) so the
// region is released, and towards a board that announced ExtPullStatus it
// sets Failed, so the send completes with an error rather than as a
// message of length 0. Open-MX does not clear its pads, so the byte is a
// field only between boards that both announced ExtPullStatus: DecodeNotify
// reads it only when told so, and leaves Failed 0 otherwise.
type Notify struct {
	DstEP, SrcEP, Gen uint8
	Session           uint32
	PulledLength      uint32
	RegionID          uint8
	RegionSeq         uint8
	Failed            uint8 // NotifyPullFailed or 0 (gomx)
	Seq, Ack          uint16
}

// NotifyPullFailed in Notify.Failed says the puller gave up: its pull
// timed out or the region owner refused it.
const NotifyPullFailed = 1

// Put writes the header.
func (h *Notify) Put(p []byte, o Order) {
	_ = p[NotifyLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeNotify), h.DstEP, h.SrcEP, h.Gen
	o.put32(p[4:], h.Session)
	o.put32(p[8:], h.PulledLength)
	p[12], p[13], p[14] = h.RegionID, h.RegionSeq, h.Failed
	p[15], p[16], p[17] = 0, 0, 0
	o.put16(p[18:], h.Seq)
	o.put16(p[20:], h.Ack)
	o.put16(p[22:], 0)
}

// DecodeNotify decodes a NOTIFY from a peer with which ext (the connect
// extension flags both boards announced, 0 for an Open-MX peer or one not
// connected yet) was negotiated. Byte 14 is read as Failed only when ext
// has ExtPullStatus; otherwise it is Open-MX's pad, whatever it holds, and
// Failed is 0.
func DecodeNotify(p []byte, o Order, ext uint8) (Notify, error) {
	var h Notify
	if err := checkType(p, TypeNotify, NotifyLen); err != nil {
		return h, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = o.u32(p[4:])
	h.PulledLength = o.u32(p[8:])
	h.RegionID, h.RegionSeq = p[12], p[13]
	if ext&ExtPullStatus != 0 {
		h.Failed = p[14]
	}
	h.Seq = o.u16(p[18:])
	h.Ack = o.u16(p[20:])
	return h, nil
}
