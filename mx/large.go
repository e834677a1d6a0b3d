package mx

import (
	"math/rand/v2"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// Large messages: the sender registers its segments as a region and sends
// a sequenced RNDV; the receiver, once it matched the RNDV, pulls the data
// with PULL requests, each asking for a block of PULL_REPLY frames, and keeps
// several blocks in flight; the region owner's board answers them alone.
// When every frame is in, the receiver completes its receive and sends a
// sequenced NOTIFY; the sender completes on the NOTIFY.

const (
	maxPulls     = 1024 // pull handles per endpoint (10-bit slot)
	pullMagicXor = 0x5A // the magic's low byte is the endpoint id XOR this
	// maxBlockFrames bounds the replies one PULL may ask for (the block
	// bitmap is 64 bits).
	maxBlockFrames = 64
)

// region is a large send's registered buffer.
type region struct {
	used bool
	seq  uint8
	r    *Request
}

func (e *Endpoint) allocRegion(r *Request) (int, bool) {
	for k := 0; k < len(e.regions); k++ {
		i := (e.regionHint + k) % len(e.regions)
		if reg := &e.regions[i]; !reg.used {
			reg.used = true
			reg.seq++
			reg.r = r
			e.regionHint = i + 1
			return i, true
		}
	}
	return -1, false
}

func (e *Endpoint) freeRegion(i int) {
	e.regions[i].used = false
	e.regions[i].r = nil
}

// gotNotify completes the large send whose region the receiver pulled.
func (e *Endpoint) gotNotify(p *partner, h *wire.Notify) {
	reg := &e.regions[h.RegionID]
	if !reg.used || reg.seq != h.RegionSeq || reg.r.p != p {
		e.cnt[DropBadHeader]++
		return
	}
	r := reg.r
	if r.qlist == &p.unacked { // the NOTIFY also proves the RNDV arrived
		p.unacked.remove(r)
	}
	e.freeRegion(int(h.RegionID))
	r.region = -1
	r.status.XferLength = min(h.PulledLength, r.length)
	r.protoHeld = false
	e.complete(r, nil)
	e.b.maybeFree(r)
}

// pull is the receiving side of one large message.
type pull struct {
	slot          int
	handle, magic uint32
	e             *Endpoint
	p             *partner
	r             *Request
	match         uint64
	msgLen, total uint32
	frame         int // PULL_REPLY payload length
	nframes       int
	regionID      uint8
	regionSeq     uint8
	blocks        []pblock // outstanding blocks in frame order
	nextFrame     int      // first frame not yet requested
	lastProgress  int64
	lastRerequest int64
}

type pblock struct {
	first, n int
	got      uint64
	ngot     int
	lastReq  int64
}

func (e *Endpoint) allocPull() (int, bool) {
	if n := len(e.pullFree); n > 0 {
		s := e.pullFree[n-1]
		e.pullFree = e.pullFree[:n-1]
		return s, true
	}
	if len(e.pulls) < maxPulls {
		e.pulls = append(e.pulls, nil)
		return len(e.pulls) - 1, true
	}
	return 0, false
}

// startPull begins pulling a matched large message into r.
func (e *Endpoint) startPull(r *Request, p *partner, match uint64, msgLen uint32, regionID, regionSeq uint8) {
	b := e.b
	total := uint32(min(int(msgLen), totalLen(r.segs)))
	r.status.Source = p.addr()
	r.status.Match = match
	r.status.MsgLength = msgLen
	if total == 0 {
		p.sendNotify(0, regionID, regionSeq)
		e.finishRecv(r, p, match, msgLen, 0)
		return
	}
	slot, ok := e.allocPull()
	if !ok {
		// Out of handles: tell the sender nothing was taken.
		p.sendNotify(0, regionID, regionSeq)
		e.complete(r, ErrNoResources)
		return
	}
	frame := b.replyMax(min(b.mtu, p.maxFrame))
	pl := &pull{
		slot: slot, e: e, p: p, r: r, match: match, msgLen: msgLen, total: total,
		frame: frame, nframes: (int(total) + frame - 1) / frame,
		regionID: regionID, regionSeq: regionSeq, lastProgress: b.now,
	}
	pl.handle = uint32(slot) | (rand.Uint32() << 10)
	pl.magic = rand.Uint32()&^0xFF | uint32(e.id^pullMagicXor)
	e.pulls[slot] = pl
	r.pl = pl
	pl.fill()
}

// fill requests blocks until the window is full.
func (pl *pull) fill() {
	o := &pl.e.b.opts
	for len(pl.blocks) < o.PullBlocks && pl.nextFrame < pl.nframes {
		n := min(o.PullBlockFrames, pl.nframes-pl.nextFrame)
		pl.blocks = append(pl.blocks, pblock{first: pl.nextFrame, n: n})
		pl.nextFrame += n
		pl.request(&pl.blocks[len(pl.blocks)-1], false)
	}
}

// request asks for the missing frames of a block (all of them the first
// time).
func (pl *pull) request(bl *pblock, again bool) {
	e := pl.e
	b := e.b
	lo, hi := 0, bl.n-1
	if again {
		for lo < bl.n && bl.got&(1<<lo) != 0 {
			lo++
		}
		for hi >= 0 && bl.got&(1<<hi) != 0 {
			hi--
		}
		if lo > hi {
			return
		}
		e.cnt[PullRerequests]++
	}
	bl.lastReq = b.now
	start := (bl.first + lo) * pl.frame
	end := min((bl.first+hi+1)*pl.frame, int(pl.total))
	p := pl.p
	h := wire.Pull{DstEP: p.epID, SrcEP: e.id, Session: p.rsession, TotalLength: pl.total,
		RegionID: uint32(pl.regionID), RegionSeq: pl.regionSeq, FrameLength: uint16(pl.frame),
		Handle: pl.handle, Magic: pl.magic, BlockLength: uint32(end - start), FirstFrame: uint32(bl.first + lo)}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx)
	h.Put(buf[wire.HeadLen:])
	e.cnt[SendPull]++
	b.sendFrame(p.nic, buf, wire.HeadLen+wire.PullLen)
}

// reply stores one PULL_REPLY frame.
func (pl *pull) reply(h *wire.PullReply, payload []byte) {
	e := pl.e
	off := int(h.Offset)
	if off%pl.frame != 0 || off >= int(pl.total) {
		e.cnt[DropBadPullReply]++
		return
	}
	i := off / pl.frame
	if len(payload) != min(pl.frame, int(pl.total)-off) || h.FrameSeq != uint8(i) {
		e.cnt[DropBadPullReply]++
		return
	}
	k := -1
	for j := range pl.blocks {
		if bl := &pl.blocks[j]; i >= bl.first && i < bl.first+bl.n {
			k = j
			break
		}
	}
	if k < 0 {
		e.cnt[DupPullReplies]++ // a block already done
		return
	}
	bl := &pl.blocks[k]
	bit := uint64(1) << (i - bl.first)
	if bl.got&bit != 0 {
		e.cnt[DupPullReplies]++
		return
	}
	bl.got |= bit
	bl.ngot++
	scatterAt(pl.r.segs, off, payload) // the one pull-reply copy
	now := e.b.now
	pl.lastProgress = now
	if bl.ngot < bl.n {
		return
	}
	if k > 0 {
		// A later block finished before an earlier one: re-request what the
		// earlier ones miss now rather than after a timeout (no bubble).
		gap := int64(e.b.opts.PullTimeout) / 8
		for j := 0; j < k; j++ {
			if ob := &pl.blocks[j]; ob.ngot < ob.n && now-ob.lastReq >= gap {
				pl.request(ob, true)
			}
		}
		return
	}
	// Slide the window past every finished block.
	n := 0
	for n < len(pl.blocks) && pl.blocks[n].ngot == pl.blocks[n].n {
		n++
	}
	pl.blocks = append(pl.blocks[:0], pl.blocks[n:]...)
	pl.fill()
	if len(pl.blocks) == 0 {
		pl.p.sendNotify(pl.total, pl.regionID, pl.regionSeq)
		r := pl.r
		e.endPull(pl, nil)
		e.finishRecv(r, pl.p, pl.match, pl.msgLen, pl.total)
	}
}

// timer re-requests outstanding blocks after silence and gives up after
// ResendDelay*ResendMax without progress.
func (pl *pull) timer(now int64) {
	o := &pl.e.b.opts
	if now-pl.lastProgress >= int64(o.ResendDelay)*int64(o.ResendMax) {
		pl.e.cnt[Unreachable]++
		pl.e.endPull(pl, ErrUnreachable)
		return
	}
	if now-pl.lastProgress >= int64(o.PullTimeout) && now-pl.lastRerequest >= int64(o.PullTimeout) {
		pl.lastRerequest = now
		pl.e.cnt[PullTimeouts]++
		for j := range pl.blocks {
			pl.request(&pl.blocks[j], true)
		}
	}
}

// endPull releases a pull; a non-nil code fails its receive.
func (e *Endpoint) endPull(pl *pull, code error) {
	if e.pulls[pl.slot] != pl {
		return
	}
	e.pulls[pl.slot] = nil
	e.pullFree = append(e.pullFree, pl.slot)
	pl.r.pl = nil
	if code != nil {
		e.complete(pl.r, code)
	}
}

// ---- the region owner's side ----

func (b *Board) sendNackMCP(nic transport.NICID, from, kind uint8, handle, magic uint32) {
	h := wire.NackMCP{SrcEP: from, Kind: kind, Handle: handle, Magic: magic}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, wire.NoPeerIndex)
	h.Put(buf[wire.HeadLen:])
	b.sendFrame(nic, buf, wire.HeadLen+wire.NackMCPLen)
}

// handlePull validates a PULL against the region it names and streams the
// block. Nothing outside the region registered for that message, sent to
// that peer, can ever be read.
func (b *Board) handlePull(nic transport.NICID, h *wire.Pull) {
	e := b.eps[h.DstEP]
	if e == nil {
		kind := uint8(wire.NackBadEndpoint)
		if b.wasOpen[h.DstEP] {
			kind = wire.NackEndpointClosed
		}
		b.cnt[DropBadEndpoint]++
		b.cnt[SendNackMCP]++
		b.sendNackMCP(nic, h.DstEP, kind, h.Handle, h.Magic)
		return
	}
	e.cnt[RecvPull]++
	nack := func(kind uint8, c Counter) {
		e.cnt[c]++
		e.cnt[SendNackMCP]++
		b.sendNackMCP(nic, e.id, kind, h.Handle, h.Magic)
	}
	if h.Session != e.session {
		nack(wire.NackBadSession, DropBadSession)
		return
	}
	if h.RegionID >= uint32(len(e.regions)) {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	reg := &e.regions[h.RegionID]
	if !reg.used || reg.seq != h.RegionSeq {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	r := reg.r
	// Frames may not be shorter than the smallest MTU allows, nor blocks
	// longer than 64 frames: one PULL never makes more than 64 replies.
	if r.p.nic != nic || r.p.epID != h.SrcEP || h.RegionOffset != 0 || h.FirstFrameOffset != 0 ||
		h.TotalLength > r.length || int(h.FrameLength) > b.replyMax(b.mtu) ||
		int(h.FrameLength) < b.replyMax(minMTU) || int(h.BlockLength) > maxBlockFrames*int(h.FrameLength) {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	// The decoder checked that the block lies inside TotalLength, which lies
	// inside the region.
	F := int(h.FrameLength)
	off := int(h.FirstFrame) * F
	end := off + int(h.BlockLength)
	lens := b.lens[:0]
	for i := int(h.FirstFrame); off < end; i++ {
		n := min(F, end-off)
		if len(lens) == rxBatch {
			b.sendBatch(nic, lens)
			lens = lens[:0]
		}
		fb := b.batchBuf(len(lens))
		wire.PutPeerIndex(fb, r.p.peerIdx)
		rh := wire.PullReply{FrameSeq: uint8(i), FrameLength: uint16(n), Offset: uint32(off), Handle: h.Handle, Magic: h.Magic}
		rh.Put(fb[wire.HeadLen:])
		gatherAt(fb[wire.HeadLen+wire.PullReplyLen:wire.HeadLen+wire.PullReplyLen+n], r.segs, off)
		lens = append(lens, wire.HeadLen+wire.PullReplyLen+n)
		off += n
	}
	e.cnt[SendPullReply] += uint64(len(lens))
	b.sendBatch(nic, lens)
	b.lens = lens[:0]
}

// pullFor finds the live pull a PULL_REPLY or NACK_MCP is for.
func (b *Board) pullFor(nic transport.NICID, handle, magic uint32) (*Endpoint, *pull) {
	e := b.eps[uint8(magic)^pullMagicXor]
	if e == nil {
		return nil, nil
	}
	slot := int(handle & (maxPulls - 1))
	if slot >= len(e.pulls) {
		return e, nil
	}
	pl := e.pulls[slot]
	if pl == nil || pl.handle != handle || pl.magic != magic || pl.p.nic != nic {
		return e, nil
	}
	return e, pl
}

func (b *Board) handlePullReply(nic transport.NICID, h *wire.PullReply, payload []byte) {
	e, pl := b.pullFor(nic, h.Handle, h.Magic)
	if e == nil {
		b.cnt[DropBadPullReply]++
		return
	}
	e.cnt[RecvPullReply]++
	if pl == nil {
		e.cnt[DropBadPullReply]++
		return
	}
	pl.reply(h, payload)
}

func (b *Board) handleNackMCP(nic transport.NICID, h *wire.NackMCP) {
	e, pl := b.pullFor(nic, h.Handle, h.Magic)
	if e == nil {
		b.cnt[DropBadNack]++
		return
	}
	e.cnt[RecvNackMCP]++
	if pl == nil {
		e.cnt[DropBadNack]++
		return
	}
	e.endPull(pl, nackErr(h.Kind))
}
