package wire

// All Put methods write a header at the start of p, which is the frame Data
// after the 2-byte peer index, and panic only if p is shorter than the
// header (a programming error on the sending side). All Decode functions
// take the same p, validate it and never panic.

// Msg is the 24-byte message header of TINY and SMALL packets; the payload
// of Length bytes follows it.
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

// Put writes the header.
func (h *Msg) Put(p []byte) {
	_ = p[MsgLen-1]
	p[0], p[1], p[2], p[3] = byte(h.Type), h.DstEP, h.SrcEP, h.Gen
	be.PutUint16(p[4:], h.Length)
	be.PutUint16(p[6:], 0) // Open-MX debug checksum: unused, the trailer covers the frame
	be.PutUint16(p[8:], h.Seq)
	be.PutUint16(p[10:], h.Ack)
	putMatch(p[12:], h.Match)
	be.PutUint32(p[20:], h.Session)
}

// DecodeMsg decodes a TINY or SMALL header and returns it with its payload.
func DecodeMsg(p []byte) (Msg, []byte, error) {
	var h Msg
	if len(p) < MsgLen {
		return h, nil, derr(TypeTiny, "header", ErrShort)
	}
	h.Type = Type(p[0])
	if h.Type != TypeTiny && h.Type != TypeSmall {
		return h, nil, derr(h.Type, "type", ErrUnknownType)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Length = be.Uint16(p[4:])
	h.Seq = be.Uint16(p[8:])
	h.Ack = be.Uint16(p[10:])
	h.Match = getMatch(p[12:])
	h.Session = be.Uint32(p[20:])
	max := uint16(TinyMax)
	if h.Type == TypeSmall {
		max = SmallMax
	}
	if h.Length > max {
		return h, nil, derr(h.Type, "length", ErrBadLength)
	}
	if len(p) < MsgLen+int(h.Length) {
		return h, nil, derr(h.Type, "payload", ErrShort)
	}
	return h, p[MsgLen : MsgLen+int(h.Length)], nil
}

// Medium is the 32-byte header of one MEDIUM fragment; FragLength bytes of
// payload follow it. Every fragment repeats the match information and the
// message's sequence number, so any fragment may arrive first.
type Medium struct {
	DstEP, SrcEP, Gen uint8
	MsgLength         uint32 // total message length
	Seq, Ack          uint16
	Match             uint64
	Session           uint32
	FragLength        uint16 // this fragment's payload length
	FragIndex         uint8
	// FragStride is the nominal fragment length: fragment i starts at
	// i*FragStride in the message. Open-MX leaves these bytes as padding and
	// fixes the stride at build time; gomx sends it so boards with different
	// MTUs agree.
	FragStride uint16
}

// Put writes the header.
func (h *Medium) Put(p []byte) {
	_ = p[MediumLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeMedium), h.DstEP, h.SrcEP, h.Gen
	be.PutUint32(p[4:], h.MsgLength)
	be.PutUint16(p[8:], h.Seq)
	be.PutUint16(p[10:], h.Ack)
	putMatch(p[12:], h.Match)
	be.PutUint32(p[20:], h.Session)
	be.PutUint16(p[24:], h.FragLength)
	p[26], p[27] = h.FragIndex, 0
	be.PutUint16(p[28:], 0)
	be.PutUint16(p[30:], h.FragStride)
}

// Offset returns where the fragment starts in the message.
func (h *Medium) Offset() int { return int(h.FragIndex) * int(h.FragStride) }

// Frags returns how many fragments the message has.
func (h *Medium) Frags() int {
	if h.FragStride == 0 {
		return 0
	}
	return (int(h.MsgLength) + int(h.FragStride) - 1) / int(h.FragStride)
}

// DecodeMedium decodes a MEDIUM fragment header and returns it with its
// payload. It checks that the fragment lies inside the message, has exactly
// the length its index implies, and that the message has at most
// MaxMediumFrag fragments.
func DecodeMedium(p []byte) (Medium, []byte, error) {
	var h Medium
	if err := checkType(p, TypeMedium, MediumLen); err != nil {
		return h, nil, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.MsgLength = be.Uint32(p[4:])
	h.Seq = be.Uint16(p[8:])
	h.Ack = be.Uint16(p[10:])
	h.Match = getMatch(p[12:])
	h.Session = be.Uint32(p[20:])
	h.FragLength = be.Uint16(p[24:])
	h.FragIndex = p[26]
	h.FragStride = be.Uint16(p[30:])
	if h.FragStride == 0 || h.MsgLength == 0 {
		return h, nil, derr(TypeMedium, "fragment stride", ErrBadLength)
	}
	nf := h.Frags()
	if nf > MaxMediumFrag || int(h.FragIndex) >= nf {
		return h, nil, derr(TypeMedium, "fragment index", ErrBadLength)
	}
	want := int(h.MsgLength) - h.Offset()
	if want > int(h.FragStride) {
		want = int(h.FragStride)
	}
	if int(h.FragLength) != want {
		return h, nil, derr(TypeMedium, "fragment length", ErrBadLength)
	}
	if len(p) < MediumLen+int(h.FragLength) {
		return h, nil, derr(TypeMedium, "payload", ErrShort)
	}
	return h, p[MediumLen : MediumLen+int(h.FragLength)], nil
}

// Rndv is the 32-byte RNDV header announcing a large message the receiver
// pulls from the sender's region.
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
func (h *Rndv) Put(p []byte) {
	_ = p[RndvLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeRndv), h.DstEP, h.SrcEP, h.Gen
	be.PutUint16(p[4:], rndvPayload)
	be.PutUint16(p[6:], 0)
	be.PutUint16(p[8:], h.Seq)
	be.PutUint16(p[10:], h.Ack)
	putMatch(p[12:], h.Match)
	be.PutUint32(p[20:], h.Session)
	be.PutUint32(p[24:], h.MsgLength)
	p[28], p[29] = h.RegionID, h.RegionSeq
	be.PutUint16(p[30:], h.RegionOffset)
}

// DecodeRndv decodes an RNDV header.
func DecodeRndv(p []byte) (Rndv, error) {
	var h Rndv
	if err := checkType(p, TypeRndv, RndvLen); err != nil {
		return h, err
	}
	if be.Uint16(p[4:]) != rndvPayload {
		return h, derr(TypeRndv, "length", ErrBadLength)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Seq = be.Uint16(p[8:])
	h.Ack = be.Uint16(p[10:])
	h.Match = getMatch(p[12:])
	h.Session = be.Uint32(p[20:])
	h.MsgLength = be.Uint32(p[24:])
	h.RegionID, h.RegionSeq = p[28], p[29]
	h.RegionOffset = be.Uint16(p[30:])
	return h, nil
}

// Pull is the 44-byte native-mode PULL request: the puller asks the owner of
// a region for one block of frames.
type Pull struct {
	DstEP, SrcEP, Gen uint8
	Session           uint32 // session id of the region owner's endpoint
	TotalLength       uint32 // bytes the whole pull covers
	RegionID          uint32
	RegionSeq         uint8
	// FrameLength is the payload length of every PULL_REPLY but the last of
	// the pull; it is carried in Open-MX padding so that boards with
	// different MTUs agree on frame boundaries.
	FrameLength      uint16
	RegionOffset     uint32
	Handle           uint32 // puller handle id
	Magic            uint32 // puller magic
	FirstFrameOffset uint32
	BlockLength      uint32 // bytes this block covers
	FirstFrame       uint32 // index of the block's first frame
}

// Put writes the header.
func (h *Pull) Put(p []byte) {
	_ = p[PullLen-1]
	p[0], p[1], p[2], p[3] = byte(TypePull), h.DstEP, h.SrcEP, h.Gen
	be.PutUint32(p[4:], h.Session)
	be.PutUint32(p[8:], h.TotalLength)
	be.PutUint32(p[12:], h.RegionID)
	p[16], p[17] = h.RegionSeq, 0
	be.PutUint16(p[18:], h.FrameLength)
	be.PutUint32(p[20:], h.RegionOffset)
	be.PutUint32(p[24:], h.Handle)
	be.PutUint32(p[28:], h.Magic)
	be.PutUint32(p[32:], h.FirstFrameOffset)
	be.PutUint32(p[36:], h.BlockLength)
	be.PutUint32(p[40:], h.FirstFrame)
}

// DecodePull decodes a PULL request. It checks only what the header alone
// can say (a non-zero frame length, a block inside the pull); the region
// owner checks the rest against its region.
func DecodePull(p []byte) (Pull, error) {
	var h Pull
	if err := checkType(p, TypePull, PullLen); err != nil {
		return h, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = be.Uint32(p[4:])
	h.TotalLength = be.Uint32(p[8:])
	h.RegionID = be.Uint32(p[12:])
	h.RegionSeq = p[16]
	h.FrameLength = be.Uint16(p[18:])
	h.RegionOffset = be.Uint32(p[20:])
	h.Handle = be.Uint32(p[24:])
	h.Magic = be.Uint32(p[28:])
	h.FirstFrameOffset = be.Uint32(p[32:])
	h.BlockLength = be.Uint32(p[36:])
	h.FirstFrame = be.Uint32(p[40:])
	if h.FrameLength == 0 {
		return h, derr(TypePull, "frame length", ErrBadLength)
	}
	start := uint64(h.FirstFrame)*uint64(h.FrameLength) + uint64(h.FirstFrameOffset)
	if h.FirstFrameOffset >= uint32(h.FrameLength) || start+uint64(h.BlockLength) > uint64(h.TotalLength) {
		return h, derr(TypePull, "block", ErrBadLength)
	}
	return h, nil
}

// PullReply is the 16-byte header of one PULL_REPLY frame; FrameLength bytes
// of the region follow it.
type PullReply struct {
	FrameSeq    uint8 // frame index mod 256
	FrameLength uint16
	Offset      uint32 // offset of the payload in the pulled message
	Handle      uint32
	Magic       uint32
}

// Put writes the header.
func (h *PullReply) Put(p []byte) {
	_ = p[PullReplyLen-1]
	p[0], p[1] = byte(TypePullReply), h.FrameSeq
	be.PutUint16(p[2:], h.FrameLength)
	be.PutUint32(p[4:], h.Offset)
	be.PutUint32(p[8:], h.Handle)
	be.PutUint32(p[12:], h.Magic)
}

// DecodePullReply decodes a PULL_REPLY header and returns it with its payload.
func DecodePullReply(p []byte) (PullReply, []byte, error) {
	var h PullReply
	if err := checkType(p, TypePullReply, PullReplyLen); err != nil {
		return h, nil, err
	}
	h.FrameSeq = p[1]
	h.FrameLength = be.Uint16(p[2:])
	h.Offset = be.Uint32(p[4:])
	h.Handle = be.Uint32(p[8:])
	h.Magic = be.Uint32(p[12:])
	if h.FrameLength == 0 {
		return h, nil, derr(TypePullReply, "frame length", ErrBadLength)
	}
	if len(p) < PullReplyLen+int(h.FrameLength) {
		return h, nil, derr(TypePullReply, "payload", ErrShort)
	}
	return h, p[PullReplyLen : PullReplyLen+int(h.FrameLength)], nil
}

// Notify is the 24-byte NOTIFY the puller sends, sequenced, when a pull is
// done: the region owner may release the region and complete the send.
type Notify struct {
	DstEP, SrcEP, Gen uint8
	Session           uint32
	PulledLength      uint32
	RegionID          uint8
	RegionSeq         uint8
	Seq, Ack          uint16
}

// Put writes the header.
func (h *Notify) Put(p []byte) {
	_ = p[NotifyLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeNotify), h.DstEP, h.SrcEP, h.Gen
	be.PutUint32(p[4:], h.Session)
	be.PutUint32(p[8:], h.PulledLength)
	p[12], p[13] = h.RegionID, h.RegionSeq
	be.PutUint32(p[14:], 0)
	be.PutUint16(p[18:], h.Seq)
	be.PutUint16(p[20:], h.Ack)
	be.PutUint16(p[22:], 0)
}

// DecodeNotify decodes a NOTIFY.
func DecodeNotify(p []byte) (Notify, error) {
	var h Notify
	if err := checkType(p, TypeNotify, NotifyLen); err != nil {
		return h, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = be.Uint32(p[4:])
	h.PulledLength = be.Uint32(p[8:])
	h.RegionID, h.RegionSeq = p[12], p[13]
	h.Seq = be.Uint16(p[18:])
	h.Ack = be.Uint16(p[20:])
	return h, nil
}

// Connect is a 32-byte CONNECT request or reply.
type Connect struct {
	DstEP, SrcEP, Gen uint8
	// YourIndex is the receiver's index in the sender's peer table: the
	// receiver puts it in the head of the frames it sends back.
	YourIndex uint16
	// MaxFrame is the sender's largest frame Data (its MTU); it is carried in
	// Open-MX padding.
	MaxFrame uint16
	IsReply  bool
	Attempt  uint8
	// Request: SrcSession is the requester's session, Key the application
	// key it presents. Reply: SrcSession echoes the requester's session and
	// DstSession is the replier's session.
	SrcSession uint32
	DstSession uint32
	Key        uint32
	// NextRecvSeq is the sequence number the sender of this packet expects
	// next from the receiver; the receiver starts its sends there.
	NextRecvSeq uint16
	Status      uint8 // reply only: ConnectOK or ConnectBadKey
}

// Put writes the header.
func (h *Connect) Put(p []byte) {
	_ = p[ConnectLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeConnect), h.DstEP, h.SrcEP, h.Gen
	p[4], p[5], p[6], p[7] = connectData, 0, 0, 0
	be.PutUint16(p[8:], 0)
	be.PutUint16(p[10:], h.YourIndex)
	be.PutUint16(p[12:], h.MaxFrame)
	be.PutUint16(p[14:], 0)
	d := p[16:32]
	if !h.IsReply {
		be.PutUint32(d[0:], h.SrcSession)
		be.PutUint32(d[4:], h.Key)
		be.PutUint16(d[8:], h.NextRecvSeq)
		d[10], d[11] = 0, h.Attempt
		be.PutUint32(d[12:], 0)
		return
	}
	be.PutUint32(d[0:], h.SrcSession)
	be.PutUint32(d[4:], h.DstSession)
	be.PutUint16(d[8:], h.NextRecvSeq)
	d[10], d[11], d[12] = 1, h.Attempt, h.Status
	d[13], d[14], d[15] = 0, 0, 0
}

// DecodeConnect decodes a CONNECT request or reply.
func DecodeConnect(p []byte) (Connect, error) {
	var h Connect
	if err := checkType(p, TypeConnect, ConnectLen); err != nil {
		return h, err
	}
	if p[4] != connectData {
		return h, derr(TypeConnect, "data length", ErrBadLength)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.YourIndex = be.Uint16(p[10:])
	h.MaxFrame = be.Uint16(p[12:])
	d := p[16:32]
	switch d[10] {
	case 0:
		h.SrcSession = be.Uint32(d[0:])
		h.Key = be.Uint32(d[4:])
		h.NextRecvSeq = be.Uint16(d[8:])
		h.Attempt = d[11]
	case 1:
		h.IsReply = true
		h.SrcSession = be.Uint32(d[0:])
		h.DstSession = be.Uint32(d[4:])
		h.NextRecvSeq = be.Uint16(d[8:])
		h.Attempt = d[11]
		h.Status = d[12]
	default:
		return h, derr(TypeConnect, "is_reply", ErrBadLength)
	}
	return h, nil
}

// Truc is the 28-byte TRUC packet carrying an explicit library ack.
type Truc struct {
	DstEP, SrcEP, Gen uint8
	Session           uint32 // session id of the destination endpoint
	AckUpTo           uint16 // every seq below this one was received
	AckNum            uint32 // monotonic per partner: stale acks are dropped
	SendSeq           uint16 // the sender's next send seq (informational)
	Resent            bool
}

// Put writes the header.
func (h *Truc) Put(p []byte) {
	_ = p[TrucLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeTruc), h.DstEP, h.SrcEP, h.Gen
	p[4], p[5], p[6], p[7] = trucData, 0, 0, 0
	be.PutUint32(p[8:], h.Session)
	p[12], p[13] = TrucAck, 0
	be.PutUint16(p[14:], h.AckUpTo)
	be.PutUint32(p[16:], h.Session)
	be.PutUint32(p[20:], h.AckNum)
	be.PutUint16(p[24:], h.SendSeq)
	p[26], p[27] = 0, 0
	if h.Resent {
		p[26] = 1
	}
}

// DecodeTruc decodes a TRUC ack.
func DecodeTruc(p []byte) (Truc, error) {
	var h Truc
	if err := checkType(p, TypeTruc, TrucLen); err != nil {
		return h, err
	}
	if p[4] != trucData {
		return h, derr(TypeTruc, "data length", ErrBadLength)
	}
	if p[12] != TrucAck {
		return h, derr(TypeTruc, "data type", ErrUnknownType)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = be.Uint32(p[8:])
	if be.Uint32(p[16:]) != h.Session {
		return h, derr(TypeTruc, "session", ErrBadLength)
	}
	h.AckUpTo = be.Uint16(p[14:])
	h.AckNum = be.Uint32(p[20:])
	h.SendSeq = be.Uint16(p[24:])
	h.Resent = p[26] != 0
	return h, nil
}

// NackLib is the 16-byte NACK_LIB a receiving board sends for a message or
// connect it cannot deliver.
type NackLib struct {
	SrcEP uint8 // the endpoint the nacked packet was addressed to
	Gen   uint8
	Kind  uint8 // NackBadEndpoint, NackEndpointClosed or NackBadSession
	// Session echoes the requester session of a nacked CONNECT (zero for
	// other packets); Open-MX leaves these bytes as padding.
	Session   uint32
	DstEP     uint8 // the endpoint that sent the nacked packet
	PeerIndex uint16
	Seq       uint16 // the nacked library seqnum
}

// Put writes the header.
func (h *NackLib) Put(p []byte) {
	_ = p[NackLibLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeNackLib), h.SrcEP, h.Gen, h.Kind
	be.PutUint32(p[4:], h.Session)
	p[8], p[9] = 0, h.DstEP
	be.PutUint16(p[10:], h.PeerIndex)
	be.PutUint16(p[12:], h.Seq)
	p[14], p[15] = 0, 0
}

// DecodeNackLib decodes a NACK_LIB.
func DecodeNackLib(p []byte) (NackLib, error) {
	var h NackLib
	if err := checkType(p, TypeNackLib, NackLibLen); err != nil {
		return h, err
	}
	h.SrcEP, h.Gen, h.Kind = p[1], p[2], p[3]
	if h.Kind < NackBadEndpoint || h.Kind > NackBadSession {
		return h, derr(TypeNackLib, "nack type", ErrBadLength)
	}
	h.Session = be.Uint32(p[4:])
	h.DstEP = p[9]
	h.PeerIndex = be.Uint16(p[10:])
	h.Seq = be.Uint16(p[12:])
	return h, nil
}

// NackMCP is the 16-byte NACK_MCP a region owner sends for a PULL it refuses.
type NackMCP struct {
	SrcEP  uint8
	Gen    uint8
	Kind   uint8 // NackBadEndpoint .. NackBadRDMAWindow
	Handle uint32
	Magic  uint32
}

// Put writes the header.
func (h *NackMCP) Put(p []byte) {
	_ = p[NackMCPLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeNackMCP), h.SrcEP, h.Gen, h.Kind
	be.PutUint32(p[4:], 0)
	be.PutUint32(p[8:], h.Handle)
	be.PutUint32(p[12:], h.Magic)
}

// DecodeNackMCP decodes a NACK_MCP.
func DecodeNackMCP(p []byte) (NackMCP, error) {
	var h NackMCP
	if err := checkType(p, TypeNackMCP, NackMCPLen); err != nil {
		return h, err
	}
	h.SrcEP, h.Gen, h.Kind = p[1], p[2], p[3]
	if h.Kind < NackBadEndpoint || h.Kind > NackBadRDMAWindow {
		return h, derr(TypeNackMCP, "nack type", ErrBadLength)
	}
	h.Handle = be.Uint32(p[8:])
	h.Magic = be.Uint32(p[12:])
	return h, nil
}
