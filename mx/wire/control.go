package wire

// The headers that set up and keep a connection: CONNECT (with gomx's
// extension block), TRUC (the explicit ack, with the selective-ack blocks),
// and the two NACKs. The conventions of Put and Decode are those of
// headers.go.

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
//	its second block (data length 32): 40 more flags | 41 zero (7)
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
//
// Flags has no bit left: More holds the flags after them (ExtPlaceLane,
// ...), in a second block of 8 bytes (data length 32) that is written
// only when More is not zero, so a board that sets none sends the 24
// data bytes an older gomx board sends. A decoder reads More only from a
// CONNECT whose data length says 32 or more.
type ConnectExt struct {
	Version  uint8  // ConnectExtVersion
	Flags    uint8  // ExtChecksum, ...
	MaxFrame uint16 // the sender's largest frame Data (its transport MTU)
	More     uint8  // ExtPlaceLane, ...: byte 40, in the second block
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
	// ExtReplyPad: the sender, as the owner of a region, honours
	// Pull.ReplyPad: it puts that many zero bytes between each
	// PULL_REPLY's header and its payload and cuts the block with the
	// reply length less the pad. A puller sets a nonzero ReplyPad only in
	// PULLs to a board that announced it.
	ExtReplyPad = 1 << 6
	// ExtAsk: the sender writes and reads the TRUC's probe flags
	// (Truc.Probe, byte 13, a pad in Open-MX): it asks a peer that is late
	// what it holds, and answers such a question at once. Used when both
	// sides set it.
	ExtAsk = 1 << 7
)

// The flags of ConnectExt.More.
const (
	// ExtPlaceLane: the sender, as the owner of a region, honours
	// Pull.Lane: it sends each PULL_REPLY the PULL asks for to that
	// receive lane of the puller's transport (transport.Frame.Lane), so
	// the puller's NIC steers them to a queue where only its postings
	// wait. A board announces it only when its transport can send to
	// lanes; a puller sets a nonzero Lane only in PULLs to a board that
	// announced it.
	ExtPlaceLane = 1 << 0
	// ExtPullAlign: the sender, as the owner of a region, honours
	// Pull.AlignEnd: it cuts the replies of such a PULL's pull from its
	// end (AlignEnd), so that its last frame is a full one
	// and its first the short one. A puller sets AlignEnd only in PULLs
	// to a board that announced it.
	ExtPullAlign = 1 << 1
)

// The TRUC probe flags (Truc.Probe), between boards that both set
// ExtAsk.
const (
	// TrucAsk asks the receiver to answer at once with its ack (and its
	// SACK): the sender's messages sent before this TRUC are late.
	TrucAsk = 1 << 0
	// TrucAnswer says the TRUC answers a TrucAsk: it was sent once every
	// frame its receiver sent before the ask had arrived, so what it
	// neither acks nor lists as held was lost.
	TrucAnswer = 1 << 1
	// TrucPulls, with TrucAsk, says the question is about the asker's
	// pulls from the receiver: the receiver answers it whatever its ack
	// state, after the PULL_REPLY frames of every PULL that came before
	// the ask, with TrucAnswer, TrucPulls and the ask's tag. An answer
	// without it answers a question about the sequenced stream only.
	TrucPulls = 1 << 2
	// TrucTagMask holds, in a question, a number the asker chose
	// (shifted by TrucTagShift), which the answer carries back so the
	// asker knows which of its questions it answers: with TrucPulls, one
	// of a pull's; without, one about the sequenced stream.
	TrucTagMask = 0xf0
	// TrucTagShift is the position of the tag in the probe flags.
	TrucTagShift = 4
	// trucProbeBits are the probe flags' defined bits.
	trucProbeBits = TrucAsk | TrucAnswer | TrucPulls | TrucTagMask
)

func hasConnectExt(p []byte, o Order) bool {
	return p[4] >= connectData+ConnectExtLen && len(p) >= ConnectLen+ConnectExtLen &&
		o.u32(p[ConnectLen:]) == ConnectExtMagic
}

// hasConnectExtMore reports whether a CONNECT with the extension has its
// second block.
func hasConnectExtMore(p []byte) bool {
	return p[4] >= connectData+ConnectExtLen+ConnectExtMoreLen && len(p) >= ConnectLen+ConnectExtLen+ConnectExtMoreLen
}

// Len returns the encoded length: ConnectLen, plus ConnectExtLen with the
// extension, plus ConnectExtMoreLen when its More flags are set.
func (h *Connect) Len() int {
	switch {
	case h.HasExt && h.Ext.More != 0:
		return ConnectLen + ConnectExtLen + ConnectExtMoreLen
	case h.HasExt:
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
		if h.Ext.More != 0 {
			p[4] += ConnectExtMoreLen
			m := p[ConnectLen+ConnectExtLen : ConnectLen+ConnectExtLen+ConnectExtMoreLen]
			clear(m)
			m[0] = h.Ext.More
		}
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
		if hasConnectExtMore(p) {
			h.Ext.More = x[ConnectExtLen]
		}
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
//	12 data type (0x55 = ack) | 13 pad, or with ExtAsk the probe flags:
//	   bit 0 ask, 1 answer, 2 about pulls, 4-7 the question's tag
//	14 ack up to (2) | 16 session again (4)
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
	// Probe holds TrucAsk, TrucAnswer, TrucPulls and the tag
	// (TrucTagMask): written as byte 13 (zero, as
	// Open-MX's pad, when there are none; a board sets them only toward a
	// peer that announced ExtAsk), read only when the decoder is told the
	// pair negotiated ExtAsk.
	Probe uint8
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
	p[12], p[13] = TrucAck, h.Probe
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
// bytes, the ack data type and the same session in both places. ext is the
// pair's negotiated extension flags: byte 13 is read as Probe (its known
// bits only) when they include ExtAsk, and is a pad otherwise, whatever it
// holds.
func DecodeTruc(p []byte, o Order, ext uint8) (Truc, error) {
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
	if ext&ExtAsk != 0 {
		h.Probe = p[13] & trucProbeBits
	}
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
