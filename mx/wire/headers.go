package wire

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

// Put writes the header.
func (h *Msg) Put(p []byte, o Order) {
	_ = p[MsgLen-1]
	p[0], p[1], p[2], p[3] = byte(h.Type), h.DstEP, h.SrcEP, h.Gen
	o.put16(p[4:], h.Length)
	o.put16(p[6:], 0)
	o.put16(p[8:], h.Seq)
	o.put16(p[10:], h.Ack)
	putMatch(p[12:], h.Match, o)
	o.put32(p[20:], h.Session)
}

// DecodeMsg decodes a TINY or SMALL header and returns it with its payload.
func DecodeMsg(p []byte, o Order) (Msg, []byte, error) {
	var h Msg
	if len(p) < MsgLen {
		return h, nil, derr(TypeTiny, "header", ErrShort)
	}
	h.Type = Type(p[0])
	if h.Type != TypeTiny && h.Type != TypeSmall {
		return h, nil, derr(h.Type, "type", ErrUnknownType)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Length = o.u16(p[4:])
	h.Seq = o.u16(p[8:])
	h.Ack = o.u16(p[10:])
	h.Match = getMatch(p[12:], o)
	h.Session = o.u32(p[20:])
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
//	12 region id (4) | 16 region seqnum | 17 pad (3) | 20 region offset (4)
//	24 puller handle (4) | 28 puller magic (4)
//	32 offset in the first frame (4) | 36 block length (4) | 40 first frame index (4)
//
// The frame geometry (see [PullFrames]) depends on the pull reply length,
// which the header does not carry: both sides derive it from the MTU.
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
}

// Put writes the header.
func (h *Pull) Put(p []byte, o Order) {
	_ = p[PullLen-1]
	p[0], p[1], p[2], p[3] = byte(TypePull), h.DstEP, h.SrcEP, h.Gen
	o.put32(p[4:], h.Session)
	o.put32(p[8:], h.TotalLength)
	o.put32(p[12:], h.RegionID)
	p[16], p[17], p[18], p[19] = h.RegionSeq, 0, 0, 0
	o.put32(p[20:], h.RegionOffset)
	o.put32(p[24:], h.Handle)
	o.put32(p[28:], h.Magic)
	o.put32(p[32:], h.FirstFrameOffset)
	o.put32(p[36:], h.BlockLength)
	o.put32(p[40:], h.FirstFrame)
}

// DecodePull decodes a PULL request. It checks only that the block is not
// empty; the region owner checks the rest against its region and the frame
// geometry.
func DecodePull(p []byte, o Order) (Pull, error) {
	var h Pull
	if err := checkType(p, TypePull, PullLen); err != nil {
		return h, err
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = o.u32(p[4:])
	h.TotalLength = o.u32(p[8:])
	h.RegionID = o.u32(p[12:])
	h.RegionSeq = p[16]
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
	Skew  int // region offset modulo L
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
	var h PullReply
	if err := checkType(p, TypePullReply, PullReplyLen); err != nil {
		return h, nil, err
	}
	h.FrameSeq = p[1]
	h.FrameLength = o.u16(p[2:])
	h.Offset = o.u32(p[4:])
	h.Handle = o.u32(p[8:])
	h.Magic = o.u32(p[12:])
	if h.FrameLength == 0 {
		return h, nil, derr(TypePullReply, "frame length", ErrBadLength)
	}
	if len(p) < PullReplyLen+int(h.FrameLength) {
		return h, nil, derr(TypePullReply, "payload", ErrShort)
	}
	return h, p[PullReplyLen : PullReplyLen+int(h.FrameLength)], nil
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

// Connect is a 32-byte CONNECT request or reply (struct omx_pkt_connect),
// optionally followed by the gomx extension.
//
//	0 type | 1 dst endpoint | 2 src endpoint | 3 src generation
//	4 data length (16 from Open-MX, 24 from gomx) | 5 pad (3)
//	8 lib seqnum (2, written 0) | 10 "your index in my peer table" (2) | 12 pad (4)
//	request: 16 requester session (4) | 20 application key (4)
//	         24 requester's next expected seqnum (2) | 26 is_reply = 0 | 27 attempt | 28 pad (4)
//	reply:   16 echoed requester session (4) | 20 replier session (4)
//	         24 replier's next expected seqnum (2) | 26 is_reply = 1 | 27 attempt
//	         28 status | 29 pad (3)
//	gomx extension (data length 24): 32 magic "gomx" (4) | 36 version | 37 flags | 38 largest frame (2)
type Connect struct {
	DstEP, SrcEP, Gen uint8
	// YourIndex is the receiver's index in the sender's peer table: the
	// receiver puts it in the head of the frames it sends back.
	YourIndex uint16
	IsReply   bool
	Attempt   uint8
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
	// Ext is the gomx extension; HasExt says whether it is present.
	Ext    ConnectExt
	HasExt bool
}

// ConnectExt is the gomx extension of CONNECT: 8 data bytes after Open-MX's
// 16, announced by the data length field (24 instead of 16). Open-MX reads
// only its 16 bytes and never sends a data length of 24.
type ConnectExt struct {
	Version  uint8  // ConnectExtVersion
	Flags    uint8  // ExtChecksum, ...
	MaxFrame uint16 // the sender's largest frame Data (its transport MTU)
}

// The gomx connect extension's magic, version and flags.
const (
	ConnectExtMagic   = 0x676F6D78 // "gomx"
	ConnectExtVersion = 1
	// ExtChecksum: the sender wants the CRC-32C trailer; it is on when both
	// sides set it.
	ExtChecksum = 1 << 0
	// ExtSack: the sender reads and sends the TRUC selective-ack
	// extension ([Sack]); it is used when both sides set it.
	ExtSack = 1 << 1
	// ExtPullStatus: the sender writes and reads Notify.Failed; a NOTIFY
	// carries it only between boards that both set it.
	ExtPullStatus = 1 << 2
	// ExtRingLean: the sender takes the lean path for eager messages of
	// one frame (TINY, SMALL, a MEDIUM of one fragment) through
	// shared-memory rings: it completes them as soon as
	// they are in the ring and never resends them, and as a receiver it
	// never drops such a message it cannot take at once (it holds it
	// until it can). Used when both sides set it.
	ExtRingLean = 1 << 3
	// ExtRingLane: the sender writes its tiny and small messages on the
	// lean path as lane records ([Lane], TypeLane) instead of TINY and
	// SMALL frames, and as a receiver it reads them. Used when both sides
	// set it (and ExtRingLean).
	ExtRingLane = 1 << 4
	// ExtRingLaneMedium: the sender writes its medium messages of one
	// fragment on the lean path as lane records too (up to LaneMediumMax
	// bytes), and as a receiver it reads them. Used when both sides set it
	// (and ExtRingLane).
	ExtRingLaneMedium = 1 << 5
)

func hasConnectExt(p []byte, o Order) bool {
	return p[4] >= connectData+ConnectExtLen && len(p) >= ConnectLen+ConnectExtLen &&
		o.u32(p[ConnectLen:]) == ConnectExtMagic
}

// Len returns the encoded length: ConnectLen, plus ConnectExtLen with the
// extension.
func (h *Connect) Len() int {
	if h.HasExt {
		return ConnectLen + ConnectExtLen
	}
	return ConnectLen
}

// Put writes the header (and the extension when HasExt).
func (h *Connect) Put(p []byte, o Order) {
	_ = p[h.Len()-1]
	p[0], p[1], p[2], p[3] = byte(TypeConnect), h.DstEP, h.SrcEP, h.Gen
	p[4], p[5], p[6], p[7] = connectData, 0, 0, 0
	o.put16(p[8:], 0)
	o.put16(p[10:], h.YourIndex)
	o.put32(p[12:], 0)
	d := p[16:32]
	o.put32(d[0:], h.SrcSession)
	if !h.IsReply {
		o.put32(d[4:], h.Key)
		o.put16(d[8:], h.NextRecvSeq)
		d[10], d[11] = 0, h.Attempt
		o.put32(d[12:], 0)
	} else {
		o.put32(d[4:], h.DstSession)
		o.put16(d[8:], h.NextRecvSeq)
		d[10], d[11], d[12] = 1, h.Attempt, h.Status
		d[13], d[14], d[15] = 0, 0, 0
	}
	if h.HasExt {
		p[4] = connectData + ConnectExtLen
		x := p[ConnectLen : ConnectLen+ConnectExtLen]
		o.put32(x, ConnectExtMagic)
		x[4], x[5] = h.Ext.Version, h.Ext.Flags
		o.put16(x[6:], h.Ext.MaxFrame)
	}
}

// DecodeConnect decodes a CONNECT request or reply. A data length of at
// least 16 is accepted (Open-MX's check); is_reply is true when non-zero.
func DecodeConnect(p []byte, o Order) (Connect, error) {
	var h Connect
	if err := checkType(p, TypeConnect, ConnectLen); err != nil {
		return h, err
	}
	if p[4] < connectData {
		return h, derr(TypeConnect, "data length", ErrBadLength)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.YourIndex = o.u16(p[10:])
	d := p[16:32]
	h.SrcSession = o.u32(d[0:])
	h.NextRecvSeq = o.u16(d[8:])
	h.Attempt = d[11]
	if d[10] == 0 {
		h.Key = o.u32(d[4:])
	} else {
		h.IsReply = true
		h.DstSession = o.u32(d[4:])
		h.Status = d[12]
	}
	if hasConnectExt(p, o) {
		x := p[ConnectLen:]
		h.HasExt = true
		h.Ext = ConnectExt{Version: x[4], Flags: x[5], MaxFrame: o.u16(x[6:])}
	}
	return h, nil
}

// Truc is the 28-byte TRUC packet carrying an explicit library ack (struct
// omx_pkt_truc with its liback data), optionally followed by the gomx
// selective-ack extension ([Sack]) when HasSack is set.
//
//	0 type | 1 dst endpoint | 2 src endpoint | 3 src generation
//	4 data length (16; 16+8+6n with a SACK of n blocks) | 5 pad (3)
//	8 destination session (4)
//	12 data type (0x55 = ack) | 13 pad | 14 ack up to (2) | 16 session again (4)
//	20 ack number (4) | 24 sender's next send seq (2) | 26 resent | 27 pad
//	gomx SACK extension: 28 magic "gmsk" (4) | 32 block count n (1..16)
//	33 reserved, zero (3) | 36 n blocks of: seq (2) | fragments held (4)
type Truc struct {
	DstEP, SrcEP, Gen uint8
	Session           uint32 // session id of the destination endpoint
	AckUpTo           uint16 // every seq below this one was received
	AckNum            uint32 // monotonic per partner: stale acks are dropped
	SendSeq           uint16 // the sender's next send seq (informational)
	Resent            bool
	// Sack says what the receiver holds past AckUpTo; HasSack says
	// whether the extension is present (only between gomx boards that
	// both announced ExtSack at connect).
	Sack    Sack
	HasSack bool
}

// Sack is the gomx selective-ack extension of TRUC: which sequenced
// messages past the ack point the receiver holds, whole or in part. It
// follows Open-MX's 28 TRUC bytes, announced by the data length field
// (16+8+6n instead of 16); Open-MX never sends more than 16 and reads only
// 16, and a board sends the extension only to a peer whose CONNECT set
// [ExtSack].
type Sack struct {
	N      int // blocks in use, 1..SackMaxBlocks
	Blocks [SackMaxBlocks]SackBlock
}

// SackBlock is one message the receiver holds something of.
type SackBlock struct {
	Seq uint16 // its sequence number (session bits included)
	// Held has bit i set when fragment i of the message is held; a message
	// held whole (every fragment, or the only frame of a non-medium
	// message) says SackWhole.
	Held uint32
}

// Sizes and constants of the SACK extension.
const (
	SackMagic     = 0x676D736B // "gmsk"
	SackHeadLen   = 8          // magic, count, reserved
	SackBlockLen  = 6          // seq, fragments held
	SackMaxBlocks = 16
	SackWhole     = 0xFFFFFFFF // Held of a message held whole
)

// Len returns the encoded length: TrucLen, plus the SACK extension when
// HasSack.
func (h *Truc) Len() int {
	if h.HasSack {
		return TrucLen + SackHeadLen + SackBlockLen*h.Sack.N
	}
	return TrucLen
}

// sackLen returns the length of a well-formed SACK extension after the 28
// TRUC bytes at p, 0 when there is none (an Open-MX TRUC), or an error
// when the magic is there but the count or data length is wrong.
func sackLen(p []byte, o Order) (int, error) {
	if p[4] <= trucData || len(p) < TrucLen+SackHeadLen || o.u32(p[TrucLen:]) != SackMagic {
		return 0, nil
	}
	n := int(p[TrucLen+4])
	if n < 1 || n > SackMaxBlocks || int(p[4]) != trucData+SackHeadLen+SackBlockLen*n {
		return 0, derr(TypeTruc, "sack length", ErrBadLength)
	}
	l := SackHeadLen + SackBlockLen*n
	if len(p) < TrucLen+l {
		return 0, derr(TypeTruc, "sack", ErrShort)
	}
	return l, nil
}

// Put writes the header.
func (h *Truc) Put(p []byte, o Order) {
	_ = p[TrucLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeTruc), h.DstEP, h.SrcEP, h.Gen
	p[4], p[5], p[6], p[7] = trucData, 0, 0, 0
	o.put32(p[8:], h.Session)
	p[12], p[13] = TrucAck, 0
	o.put16(p[14:], h.AckUpTo)
	o.put32(p[16:], h.Session)
	o.put32(p[20:], h.AckNum)
	o.put16(p[24:], h.SendSeq)
	p[26], p[27] = 0, 0
	if h.Resent {
		p[26] = 1
	}
	if h.HasSack {
		n := h.Sack.N
		_ = p[h.Len()-1]
		p[4] = byte(trucData + SackHeadLen + SackBlockLen*n)
		x := p[TrucLen:]
		o.put32(x, SackMagic)
		x[4], x[5], x[6], x[7] = byte(n), 0, 0, 0
		for i, bl := range h.Sack.Blocks[:n] {
			b := x[SackHeadLen+SackBlockLen*i:]
			o.put16(b, bl.Seq)
			o.put32(b[2:], bl.Held)
		}
	}
}

// DecodeTruc decodes a TRUC ack. Like Open-MX it requires at least 16 data
// bytes, the ack data type and the same session in both places.
func DecodeTruc(p []byte, o Order) (Truc, error) {
	var h Truc
	if err := checkType(p, TypeTruc, TrucLen); err != nil {
		return h, err
	}
	if p[4] < trucData {
		return h, derr(TypeTruc, "data length", ErrBadLength)
	}
	if p[12] != TrucAck {
		return h, derr(TypeTruc, "data type", ErrUnknownType)
	}
	h.DstEP, h.SrcEP, h.Gen = p[1], p[2], p[3]
	h.Session = o.u32(p[8:])
	if o.u32(p[16:]) != h.Session {
		return h, derr(TypeTruc, "session", ErrBadLength)
	}
	h.AckUpTo = o.u16(p[14:])
	h.AckNum = o.u32(p[20:])
	h.SendSeq = o.u16(p[24:])
	h.Resent = p[26] != 0
	l, err := sackLen(p, o)
	if err != nil || l == 0 {
		return h, err
	}
	h.HasSack = true
	h.Sack.N = int(p[TrucLen+4])
	for i := range h.Sack.N {
		b := p[TrucLen+SackHeadLen+SackBlockLen*i:]
		h.Sack.Blocks[i] = SackBlock{Seq: o.u16(b), Held: o.u32(b[2:])}
	}
	return h, nil
}

// NackLib is the 16-byte NACK_LIB a receiving board sends for a message or
// connect it cannot deliver (struct omx_pkt_nack_lib). It carries no
// session: a receiver must let it fail only the one request it names.
//
//	0 type | 1 src endpoint (the one the nacked packet was for) | 2 src generation
//	3 nack type | 4 pad (5) | 9 dst endpoint (the one that sent the nacked packet)
//	10 peer index (2) | 12 nacked lib seqnum (2, 0 for a connect) | 14 pad (2)
type NackLib struct {
	SrcEP     uint8
	Gen       uint8
	Kind      uint8 // NackBadEndpoint, NackEndpointClosed or NackBadSession
	DstEP     uint8
	PeerIndex uint16
	Seq       uint16
}

// Put writes the header.
func (h *NackLib) Put(p []byte, o Order) {
	_ = p[NackLibLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeNackLib), h.SrcEP, h.Gen, h.Kind
	o.put32(p[4:], 0)
	p[8], p[9] = 0, h.DstEP
	o.put16(p[10:], h.PeerIndex)
	o.put16(p[12:], h.Seq)
	p[14], p[15] = 0, 0
}

// DecodeNackLib decodes a NACK_LIB.
func DecodeNackLib(p []byte, o Order) (NackLib, error) {
	var h NackLib
	if err := checkType(p, TypeNackLib, NackLibLen); err != nil {
		return h, err
	}
	h.SrcEP, h.Gen, h.Kind = p[1], p[2], p[3]
	if h.Kind < NackBadEndpoint || h.Kind > NackBadSession {
		return h, derr(TypeNackLib, "nack type", ErrBadLength)
	}
	h.DstEP = p[9]
	h.PeerIndex = o.u16(p[10:])
	h.Seq = o.u16(p[12:])
	return h, nil
}

// NackMCP is the 16-byte NACK_MCP a region owner sends for a PULL it refuses
// (struct omx_pkt_nack_mcp).
//
//	0 type | 1 src endpoint | 2 src generation | 3 nack type | 4 pad (4)
//	8 puller handle (4) | 12 puller magic (4)
type NackMCP struct {
	SrcEP  uint8
	Gen    uint8
	Kind   uint8 // NackBadEndpoint .. NackBadRDMAWindow
	Handle uint32
	Magic  uint32
}

// Put writes the header.
func (h *NackMCP) Put(p []byte, o Order) {
	_ = p[NackMCPLen-1]
	p[0], p[1], p[2], p[3] = byte(TypeNackMCP), h.SrcEP, h.Gen, h.Kind
	o.put32(p[4:], 0)
	o.put32(p[8:], h.Handle)
	o.put32(p[12:], h.Magic)
}

// DecodeNackMCP decodes a NACK_MCP.
func DecodeNackMCP(p []byte, o Order) (NackMCP, error) {
	var h NackMCP
	if err := checkType(p, TypeNackMCP, NackMCPLen); err != nil {
		return h, err
	}
	h.SrcEP, h.Gen, h.Kind = p[1], p[2], p[3]
	if h.Kind < NackBadEndpoint || h.Kind > NackBadRDMAWindow {
		return h, derr(TypeNackMCP, "nack type", ErrBadLength)
	}
	h.Handle = o.u32(p[8:])
	h.Magic = o.u32(p[12:])
	return h, nil
}

// HostQuery is the 16-byte HOST_QUERY a board sends to learn a peer's
// hostname (struct omx_pkt_host_query).
//
//	0 type | 1 pad | 2 the receiver's index in the sender's peer table (2)
//	4 pad (4) | 8 magic (4) | 12 pad (4)
type HostQuery struct {
	YourIndex uint16
	Magic     uint32
}

// Put writes the header.
func (h *HostQuery) Put(p []byte, o Order) {
	_ = p[HostQueryLen-1]
	p[0], p[1] = byte(TypeHostQuery), 0
	o.put16(p[2:], h.YourIndex)
	o.put32(p[4:], 0)
	o.put32(p[8:], h.Magic)
	o.put32(p[12:], 0)
}

// DecodeHostQuery decodes a HOST_QUERY.
func DecodeHostQuery(p []byte, o Order) (HostQuery, error) {
	var h HostQuery
	if err := checkType(p, TypeHostQuery, HostQueryLen); err != nil {
		return h, err
	}
	h.YourIndex = o.u16(p[2:])
	h.Magic = o.u32(p[8:])
	return h, nil
}

// HostReply is the HOST_REPLY answering a HOST_QUERY (struct
// omx_pkt_host_reply): a 16-byte header, then the hostname and a NUL.
//
//	0 type | 1 hostname length, NUL included | 2 the receiver's index in the
//	sender's peer table (2) | 4 pad (4) | 8 magic echoed from the query (4) | 12 pad (4)
type HostReply struct {
	YourIndex uint16
	Magic     uint32
	Hostname  string // without the NUL; at most MaxHostname bytes
}

// MaxHostname is the longest hostname a HOST_REPLY carries (its length byte
// counts the NUL).
const MaxHostname = 254

// Len returns the encoded length.
func (h *HostReply) Len() int { return HostReplyLen + len(h.Hostname) + 1 }

// Put writes the header and the hostname; a hostname longer than
// MaxHostname is cut.
func (h *HostReply) Put(p []byte, o Order) {
	name := h.Hostname
	if len(name) > MaxHostname {
		name = name[:MaxHostname]
	}
	_ = p[HostReplyLen+len(name)]
	p[0], p[1] = byte(TypeHostReply), byte(len(name)+1)
	o.put16(p[2:], h.YourIndex)
	o.put32(p[4:], 0)
	o.put32(p[8:], h.Magic)
	o.put32(p[12:], 0)
	copy(p[HostReplyLen:], name)
	p[HostReplyLen+len(name)] = 0
}

// DecodeHostReply decodes a HOST_REPLY. Like Open-MX it takes the hostname
// up to the first NUL within the stated length.
func DecodeHostReply(p []byte, o Order) (HostReply, error) {
	var h HostReply
	if err := checkType(p, TypeHostReply, HostReplyLen); err != nil {
		return h, err
	}
	n := int(p[1])
	if n == 0 {
		return h, derr(TypeHostReply, "length", ErrBadLength)
	}
	if len(p) < HostReplyLen+n {
		return h, derr(TypeHostReply, "hostname", ErrShort)
	}
	h.YourIndex = o.u16(p[2:])
	h.Magic = o.u32(p[8:])
	name := p[HostReplyLen : HostReplyLen+n-1]
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	h.Hostname = string(name)
	return h, nil
}
