package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// The lane: tiny and small messages (up to wire.LaneMax, 128 bytes) on the
// lean path, between two gomx boards that both announce it
// (wire.ExtRingLane, unless LocalOptions.NoLane), go as lane records
// instead of Open-MX TINY and SMALL frames.
//
// Between two processes of one host the Open-MX header buys nothing: the
// rings are gomx's own and both ends are the same code. A lane record
// (wire.Lane) is a 24-byte little-endian header, then the payload, and
// the sender writes it straight into the peer's ring from the
// application's segments (shm.Transport.SendParts): no frame is built in
// the board's scratch buffer first and copied again, no transport.Frame,
// no Open-MX encoding; an 8-byte message is one cache line of the ring,
// its record word included. Everything else about the message is the lean
// path's (lean.go): the same conditions to take it (a ring peer on the
// lean path, nothing waiting before it, the window), the same sequence
// number from the partner's stream, so the peer's messages keep one order
// whatever path each took, and the same piggybacked ack and window, so
// acks stay bounded. Lane sends count as sends of their class and as
// LeanSends, and as LaneSends.
//
// The receiver takes a lane record in the common case without the general
// frame path: when the record is the next in its partner's sequence (no
// early frame, no held one, no medium being assembled, no unexpected
// handler running for the partner) and a posted receive matches it (the
// first in post order, as for any message: matchPosted), it copies the
// payload straight into that receive's segments and completes it
// (counted as LaneRecvs, and as a receive of its class). That is exactly
// what the general path does with such a frame, minus decoding an Open-MX
// header and dispatching it. Every other case (no matching receive: the
// unexpected queue or the handler; a record out of sequence; a partner
// with frames held, early or partial; an unknown endpoint or session) is
// handed to the general path as the TINY or SMALL frame the record stands
// for, rebuilt in a board buffer, and behaves as such a frame does: queued,
// held, stored early, nacked or dropped. A record that fails its checks
// (it comes from another process's memory) is dropped and counted as
// DropBadHeader, and one that did not come through the rings as
// DropUnknownType.

// sendLane writes a tiny or small message with match and n bytes in segs
// to p through tr as a lane record (sendLean decided that it takes the
// lean path). Called with b.mu held.
func (e *Endpoint) sendLane(p *partner, tr *shm.Transport, match uint64, segs [][]byte, n int) error {
	b := e.b
	wire.PutLane(b.laneHdr[:], &wire.Lane{DstEP: p.epID, SrcEP: e.id, Seq: p.sendSeq, Ack: p.fullSeq,
		Length: uint16(n), Session: p.rsession, Match: match})
	return tr.SendParts(p.nic, b.laneHdr[:], segs)
}

// recvLane handles lane record data from nic (b.mu held): straight into
// a matching posted receive when nothing of its partner comes first, else
// as the TINY or SMALL frame it stands for.
func (b *Board) recvLane(nic transport.NICID, data []byte) {
	if !b.rxRings {
		b.cnt[DropUnknownType]++ // lane records come only through the rings
		return
	}
	h, payload, err := wire.DecodeLane(data)
	if err != nil {
		b.cnt[DropBadHeader]++
		return
	}
	c := RecvTiny
	if h.Length > wire.TinyMax {
		c = RecvSmall
	}
	if e := b.eps[h.DstEP]; e != nil && e.session == h.Session {
		if p := e.partnerAt(nic, h.SrcEP); p != nil && p.rknown && p.lane && h.Seq == p.recvSeq &&
			p.held == nil && !p.inHandler && len(p.early) == 0 && len(p.partials) == 0 {
			if r := e.matchPosted(h.Match); r != nil {
				e.cnt[c]++
				e.cnt[LaneRecvs]++
				p.applyAck(h.Ack)
				n := scatterAt(r.segs, 0, payload)
				e.finishRecv(r, p, h.Match, uint32(h.Length), uint32(n))
				p.recvSeq = seqNext(p.recvSeq)
				p.updateFull(true)
				return
			}
		}
	}
	m := wire.Msg{Type: wire.TypeTiny, DstEP: h.DstEP, SrcEP: h.SrcEP, Length: h.Length, Seq: h.Seq, Ack: h.Ack,
		Match: h.Match, Session: h.Session}
	if c == RecvSmall {
		m.Type = wire.TypeSmall
	}
	f := b.getBuf()[:wire.HeadLen+wire.MsgLen+len(payload)]
	wire.PutPeerIndex(f, wire.NoPeerIndex, b.ord)
	m.Put(f[wire.HeadLen:], b.ord)
	copy(f[wire.HeadLen+wire.MsgLen:], payload)
	b.sequenced(nic, f, h.DstEP, h.SrcEP, h.Session, h.Seq, c, nil, &m)
	b.putBuf(f)
}
