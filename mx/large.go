package mx

import (
	"math/bits"
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
//
// Frames follow Open-MX's geometry (wire.PullFrames): PULL_REPLY frames are
// aligned on multiples of the pull reply length in the sender's region, so a
// message at a region offset has a shorter first frame. The puller magic is
// Open-MX's: the endpoint index XOR wire.PullMagicXor.
//
// Resources never lose a message: a large send that finds no free region
// waits in the endpoint's resource queue (and every later send waits behind
// it, so per-peer order holds), and a matched large receive that finds no
// free pull handle waits in the pull queue; both start as soon as a region
// or handle is released.

const (
	maxPulls = 1024 // pull handles per endpoint (10-bit slot)
	// maxBlockFrames bounds the replies one PULL may ask for (the block
	// bitmap is 64 bits).
	maxBlockFrames = 64
)

// rndvRef is what an RNDV says about the region to pull from.
type rndvRef struct {
	id, seq uint8
	off     uint16 // the message's offset in the region
}

// region is a large send's registered buffer.
type region struct {
	used bool
	seq  uint8
	r    *Request
	// lastPull is when the receiver last pulled from the region (0:
	// never): the notify timeout counts from it (largefail.go). Only a
	// pull that is served sets it: a refused one (outside the region)
	// says nothing of a receiver that is pulling, and would start the
	// timeout of a send whose receive was not even posted yet.
	lastPull int64
	// zc is what the send registered to be sent from in place
	// (zerocopy.go), nil when none of it was.
	zc *zcSend
	// st is the send's staged copy (stage.go), nil when it is not staged.
	st *stageSend
}

func (e *Endpoint) allocRegion(r *Request) (int, bool) {
	n := e.b.opts.Regions
	for k := 0; k < n; k++ {
		i := (e.regionHint + k) % n
		if reg := &e.regions[i]; !reg.used {
			reg.used = true
			e.regionsUsed++
			reg.seq++
			reg.r = r
			reg.lastPull = 0
			e.regionHint = i + 1
			e.publishRegion(i, r) // cma.go
			return i, true
		}
	}
	return -1, false
}

// freeRegion frees region i and returns what its send registered to be
// sent from in place (zerocopy.go), for zcHold, and its staged message
// when copiers are still at work on it (stage.go), for stageHold.
func (e *Endpoint) freeRegion(i int) (*zcSend, *stageSend) {
	reg := &e.regions[i]
	zs := reg.zc
	if reg.used {
		e.regionsUsed--
	}
	var st *stageSend
	if reg.st != nil {
		st = e.b.stageEnd(reg.st) // stage.go
	}
	reg.used, reg.r, reg.zc, reg.st = false, nil, nil, nil
	return zs, st
}

// queueSend makes a send wait for resources: a region for a large send, or
// its turn behind sends that already wait.
func (e *Endpoint) queueSend(r *Request) {
	e.cnt[SendsQueued]++
	e.resq.push(r)
	e.b.wakeTicks() // progress.go
}

// kickSends starts the sends waiting in the resource queue, in order,
// until one still finds no region.
func (e *Endpoint) kickSends() {
	for r := e.resq.Front(); r != nil && !e.closed; r = e.resq.Front() {
		if r.class == classLarge {
			rid, ok := e.allocRegion(r)
			if !ok {
				return
			}
			r.region = rid
		}
		e.resq.remove(r)
		r.p.enqueue(r)
	}
}

// gotNotify completes the large send whose region the receiver pulled.
func (e *Endpoint) gotNotify(p *partner, h *wire.Notify) {
	if int(h.RegionID) >= e.b.opts.Regions {
		e.cnt[DropBadHeader]++
		return
	}
	reg := &e.regions[h.RegionID]
	if !reg.used || reg.seq != h.RegionSeq || reg.r.p != p {
		e.cnt[DropBadHeader]++
		return
	}
	r := reg.r
	p.pulledAck(r) // the NOTIFY also proves the RNDV arrived (reliability.go)
	zs, st := e.freeRegion(int(h.RegionID))
	r.region = -1
	r.status.XferLength = min(h.PulledLength, r.length)
	code := e.pullOutcome(h) // largefail.go
	// stage.go: else it completes once its copiers left the staging
	// buffer; zerocopy.go: once the NIC is done with its memory.
	if !e.b.stageHold(st, r, zs, code) && !e.b.zcHold(e, r, zs, code) {
		r.protoHeld = false
		e.complete(r, code)
		e.b.maybeFree(r)
	}
	e.kickSends()
}

// pull is the receiving side of one large message.
type pull struct {
	bulk          bool // counted in Board.pulling: its replies come over the transport
	slot          int
	handle, magic uint32
	e             *Endpoint
	p             *partner
	r             *Request
	match         uint64
	msgLen, total uint32
	geo           wire.PullFrames
	nframes       int
	ref           rndvRef
	blocks        []pblock // outstanding blocks in frame order
	nextFrame     int      // first frame not yet requested
	reqs          uint32   // PULLs sent: the number of the last one
	lastProgress  int64
	// copying counts the engine copies of its replies in flight
	// (pulloffload.go); drained says every frame is in, so the last copy
	// reaped completes the pull; ending says endPull is waiting for them.
	copying         int
	drained, ending bool
	// pp is the pull's spans posted for the NIC to place replies in
	// (placerecv.go), nil when it posts none; expect counts its frames
	// asked for and not yet in.
	pp     *pullPlace
	expect int
	// pad is the zero bytes each reply carries between its header and
	// its payload (wire.Pull.ReplyPad), asked for by a pull that places
	// its replies; geo's reply length is the peer's less pad. alignEnd
	// says its PULLs ask for frames cut from its end (wire.Pull.AlignEnd;
	// geo's skew then wire.AlignEnd's), so that its last is full.
	pad      int
	alignEnd bool
	// Questions to the region's owner about late replies (ask.go):
	// whether one is outstanding, its number (partner.asked), the
	// number of the last PULL sent before it (askReq), when the last one
	// went out, and how many went out since one was last answered (the
	// backoff exponent).
	asking bool
	askNum uint64
	askReq uint32
	askAt  int64
	asks   int
	// answered says the answer to a placed pull's question came and is
	// acted on once the receive sources were drained by a drain numbered
	// after answerGen, the board's drainGen when it came (pull.timer).
	answered  bool
	answerGen uint64
	// recent is where the last pullReorder replies that came to a pull on
	// lane 0 were asked for, newest first (lossEvidence, settled); a
	// reply acted on by early retransmit is not recorded. nrecent is how
	// many there are; lastAsked is the frame the last PULL (number reqs)
	// asked for last.
	recent    [pullReorder]askedAt
	nrecent   int
	lastAsked int
	// blockSeq is the number of the newest PULL that asked for a block
	// the first time (fill), blockLast the last frame it asked for: that
	// frame's arrival shows the holes before it lost (lossEvidence).
	blockSeq  uint32
	blockLast int
	// top is where the newest reply to come was asked for: the PULL
	// that last asked for it and its frame (askedAt.x the pull's frame
	// index); zero before any came. The question's wait (ask.go,
	// expectsSeveral) counts the replies still due after it.
	top askedAt
}

// askedAt is where a reply stands in the order the PULLs asked for the
// frames: the number of the PULL it answers and its frame in its block.
type askedAt struct {
	te uint32
	x  int
}

func (a askedAt) before(b askedAt) bool { return a.te < b.te || a.te == b.te && a.x < b.x }

type pblock struct {
	first, n int
	got      uint64
	ngot     int
	// arrived marks the frames that came at least once, kept or not
	// (placerecv.go counts each once as no longer expected).
	arrived uint64
	lastReq int64 // when the block was last asked for whole or by its timer
	// seq is the number (pull.reqs) of the PULL that asked for the
	// block's frames not in fast.
	seq uint32
	// fast marks the frames asked for again since (on evidence or by the
	// timer), each in the PULL numbered fseq[i]: a frame's PULL number is
	// what orders it against the others (holes).
	fast uint64
	fseq [maxBlockFrames]uint32
	// amb marks the fast frames last asked for by the timer, or by a
	// question's answer, whose earlier copy may only be late (a
	// responder descheduled, a sender's queue, a wire that reorders the
	// question and a PULL, or the answer and a reply): a copy of one
	// that arrives may answer the block's first PULL (seq), so it reveals
	// only what that one would.
	amb uint64
	// tries counts the block's timer re-requests (the backoff exponent).
	tries int
}

func (e *Endpoint) allocPull() (int, bool) {
	if n := len(e.pullFree); n > 0 {
		s := e.pullFree[n-1]
		e.pullFree = e.pullFree[:n-1]
		return s, true
	}
	if len(e.pulls) < e.b.opts.PullHandles {
		e.pulls = append(e.pulls, nil)
		return len(e.pulls) - 1, true
	}
	return 0, false
}

// pullMagic is the puller magic of endpoint id (Open-MX's).
func pullMagic(id uint8) uint32 { return uint32(id) ^ wire.PullMagicXor }

// startPull begins pulling a matched large message into r, or queues it
// until a pull handle is free.
func (e *Endpoint) startPull(r *Request, p *partner, match uint64, msgLen uint32, ref rndvRef) {
	total := uint32(min(int(msgLen), totalLen(r.segs)))
	r.status.Source = p.addr()
	r.status.Match = match
	r.status.MsgLength = msgLen
	if total == 0 {
		p.sendNotify(0, ref.id, ref.seq)
		e.finishRecv(r, p, match, msgLen, 0)
		return
	}
	if p.dead {
		// Declared unreachable (its process is gone, say) after its RNDV
		// was queued: nobody will answer a pull.
		e.complete(r, ErrUnreachable)
		return
	}
	if e.pullCMA(r, p, match, msgLen, total, ref) { // cma.go: one copy from a process of this host
		return
	}
	e.ringPull(r, p, match, msgLen, total, ref)
}

// ringPull pulls total bytes of a matched large receive through the
// transport: PULL requests answered by PULL_REPLY frames.
func (e *Endpoint) ringPull(r *Request, p *partner, match uint64, msgLen, total uint32, ref rndvRef) {
	b := e.b
	bulk := p.rings() == nil
	ok := !bulk || b.pullRoom()
	var slot int
	if ok {
		slot, ok = e.allocPull()
	}
	if !ok {
		// Out of handles, or the board's pulls over the transport asked
		// for all the replies its NIC can hold: wait, as Open-MX waits
		// for a handle.
		r.p = p
		r.rref = ref
		e.cnt[PullsQueued]++
		e.pullq.push(r)
		return
	}
	L := p.replyLen
	geo := wire.PullFrames{Total: int(total), L: L, Skew: int(ref.off) % L}
	pl := &pull{
		slot: slot, e: e, p: p, r: r, match: match, msgLen: msgLen, total: total,
		geo: geo, nframes: geo.Count(), ref: ref, lastProgress: b.now(),
	}
	pl.handle = uint32(slot) | (rand.Uint32() << 10)
	pl.magic = pullMagic(e.id)
	e.pulls[slot] = pl
	b.wakeTicks() // progress.go
	if pl.bulk = bulk; pl.bulk {
		b.pulling.Add(1) // its replies come over the transport (sleep.go)
	}
	r.pl = pl
	b.placeStart(pl) // placerecv.go
	pl.fill()
}

// pullRoom reports whether another pull over the transport may start
// within BoardOptions.PullFrames (b.mu held).
func (b *Board) pullRoom() bool {
	n := int(b.pulling.Load())
	return b.opts.PullFrames < 0 || n == 0 || (n+1)*b.opts.PullBlocks*b.opts.PullBlockFrames <= b.opts.PullFrames
}

// kickPulls starts queued pulls while handles are free and the board's
// pulls leave room (queued pulls start in order).
func (e *Endpoint) kickPulls() {
	for r := e.pullq.Front(); r != nil && !e.closed; r = e.pullq.Front() {
		if len(e.pullFree) == 0 && len(e.pulls) >= e.b.opts.PullHandles || !e.b.pullRoom() {
			return
		}
		e.pullq.remove(r)
		e.startPull(r, r.p, r.status.Match, r.status.MsgLength, r.rref)
	}
}

// fill requests blocks until the window is full.
func (pl *pull) fill() {
	o := &pl.e.b.opts
	for len(pl.blocks) < o.PullBlocks && pl.nextFrame < pl.nframes {
		n := min(o.PullBlockFrames, pl.nframes-pl.nextFrame)
		pl.blocks = append(pl.blocks, pblock{first: pl.nextFrame, n: n})
		pl.nextFrame += n
		bl := &pl.blocks[len(pl.blocks)-1]
		pl.placeBlock(bl.first, n) // placerecv.go: spans before the PULL
		bl.lastReq = pl.e.b.now()
		bl.seq = pl.requestSpan(bl, 0, n-1, false, 0)
		pl.blockSeq, pl.blockLast = bl.seq, bl.first+n-1
	}
}

// rerequest asks again for the frames of block bl in mask, each run of
// them in one PULL (so no frame the puller holds is sent again); why says
// which counter the retransmission goes to (FastRetransmits or
// TimerRetransmits).
func (pl *pull) rerequest(bl *pblock, mask uint64, why Counter) {
	// What a question's answer asks again for whose original was asked
	// for once may still come, late: on a wire that reorders, the
	// question may have overtaken its PULL, or the answer its replies;
	// and a pull placing on a lane, which asks again on lane 0, may
	// still have it come on the lane (placerecv.go, laneOwed).
	lost := bl.fast &^ bl.amb
	for lo := 0; mask>>lo != 0; {
		if mask&(1<<lo) == 0 {
			lo++
			continue
		}
		hi := lo
		for hi+1 < bl.n && mask&(1<<(hi+1)) != 0 {
			hi++
		}
		seq := pl.requestSpan(bl, lo, hi, true, why)
		for x := lo; x <= hi; x++ {
			bl.fast |= 1 << x
			bl.fseq[x] = seq
		}
		run := (uint64(1)<<(hi-lo+1) - 1) << lo
		switch {
		case why == TimerRetransmits:
			bl.amb |= run
		case why == AskRetransmits:
			bl.amb = bl.amb&^run | run&^lost
		default:
			bl.amb &^= run
		}
		lo = hi + 1
	}
}

// requestSpan sends one PULL for frames lo..hi of block bl and returns its
// number (pull.reqs).
func (pl *pull) requestSpan(bl *pblock, lo, hi int, again bool, why Counter) uint32 {
	e := pl.e
	b := e.b
	if again {
		e.cnt[PullRerequests]++
		e.cnt[why]++
		e.cnt[PullFramesRerequested] += uint64(hi - lo + 1)
	}
	pl.reqs++
	pl.lastAsked = bl.first + hi
	first := bl.first + lo
	start, end := pl.geo.Start(first), pl.geo.End(bl.first+hi)
	ffo := 0
	if first == 0 {
		ffo = pl.geo.Skew
	}
	p := pl.p
	h := wire.Pull{DstEP: p.epID, SrcEP: e.id, Session: p.rsession, TotalLength: pl.total,
		RegionID: uint32(pl.ref.id), RegionSeq: pl.ref.seq, RegionOffset: uint32(pl.ref.off),
		Handle: pl.handle, Magic: pl.magic, FirstFrameOffset: uint32(ffo),
		BlockLength: uint32(end - start), FirstFrame: uint32(first), ReplyPad: uint8(pl.pad), AlignEnd: pl.alignEnd}
	if !again {
		h.Lane = uint8(pl.lane()) // placerecv.go: a frame asked again comes on lane 0
	}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	h.Put(buf[wire.HeadLen:], b.ord)
	e.cnt[SendPull]++
	b.sendFrame(p.nic, buf, wire.HeadLen+wire.PullLen, p.crc)
	p.pulled = true // ack.go's ackPull
	return pl.reqs
}

// reply stores one PULL_REPLY frame: its payload, or, for a reply the
// NIC placed (placerecv.go), the payload's first bytes with the rest in
// placed: in place when own, else in a span not its own. A spoiled reply
// took a span a copy has since been written over (placerecv.go,
// Checking): it counts as arrived, and is asked for again as a lost one.
func (pl *pull) reply(h *wire.PullReply, payload, placed []byte, own, spoiled bool) {
	e := pl.e
	off := int(h.Offset)
	i := pl.geo.Index(off)
	if i < 0 || len(payload)+len(placed) != pl.geo.End(i)-off || h.FrameSeq != uint8(i) {
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
		e.cnt[DupReceived]++
		return
	}
	bl := &pl.blocks[k]
	bit := uint64(1) << (i - bl.first)
	if bl.got&bit != 0 {
		e.cnt[DupPullReplies]++
		e.cnt[DupReceived]++
		return
	}
	if bl.arrived&bit == 0 {
		bl.arrived |= bit
		pl.placeGot() // it took a descriptor, whether kept or asked for again
	}
	a := askedAt{pl.frameSeq(bl, i-bl.first), i}
	streamed := pl.top.te == a.te // the newest reply before it came for its PULL
	if pl.top.before(a) {
		pl.top = a
	}
	if spoiled {
		e.cnt[PlaceSpoiled]++
		return // its bytes are not sure: asked for again (placerecv.go)
	}
	// A reply whose place the NIC may still write, or a held reply
	// still lies in (placerecv.go, Checking, Holding), is held until
	// it may be written, on a lane, and asked for again on lane 0.
	hold := !own && !pl.placeWritable(i, placed)
	if hold && !pl.placeHold(i, payload, placed) {
		return
	}
	// Which queue it came on, for a pull placing on a lane: a frame
	// that took a span, or came on a lane in a buffer of the transport's.
	onLane := placed != nil || e.b.curFrame != nil && e.b.curFrame.Lane > 0
	now := e.b.now()
	if bl.ngot == 0 && bl.tries == 0 && bl.fast == 0 && bl.got == 0 {
		// The first reply to a block asked for once: a round trip of the
		// pull path (Karn's rule as for sends).
		pl.p.prtt.sample(now - bl.lastReq)
	}
	bl.got |= bit
	if !hold {
		bl.ngot++
	}
	t0 := pl.e.b.copyClock()
	switch {
	case hold: // copied into the receive buffer by placeFlush
	case own: // in place but for the bytes of the header buffer
		pl.placeOwn(i)
		e.copies.scatter.Add(uint64(copy(pl.pp.seg[off:], payload)))
		e.copies.placed.Add(uint64(len(placed)))
	case placed != nil: // in a span not its own: moved to its place
		n := scatterAt(pl.r.segs, off+len(payload), placed) // a memmove where the spans overlap
		e.copies.scatter.Add(uint64(scatterAt(pl.r.segs, off, payload) + n))
	case !pl.offloadReply(off, payload): // pulloffload.go: the engine's copy
		e.copies.scatter.Add(uint64(scatterAt(pl.r.segs, off, payload))) // the one pull-reply copy
	}
	pl.e.b.copyClocked(t0)
	if d := now - pl.lastProgress; d >= int64(schedFloor) && streamed && bl.fast&bit == 0 && pl.askable() {
		// A silence the owner ended amid one PULL's replies, with
		// nothing lost (ask.go, askDue). The first reply to a PULL
		// ends a round trip, its wake-up included, and is not counted.
		pl.p.plate.rotate()
		pl.p.plate.observe(d)
	}
	pl.lastProgress = now
	pl.lossEvidence(k, i-bl.first, onLane)
	pl.placeFlush(false) // placerecv.go: held replies whose place is safe now
	pl.advance()
}

// advance slides the window past every finished block (each of its frames
// in the receive buffer), asks for the next blocks, and finishes the pull
// when every frame is in.
func (pl *pull) advance() {
	n := 0
	for n < len(pl.blocks) && pl.blocks[n].ngot == pl.blocks[n].n {
		n++
	}
	if n == 0 {
		return
	}
	pl.blocks = append(pl.blocks[:0], pl.blocks[n:]...)
	pl.fill()
	if len(pl.blocks) == 0 {
		if pl.copying > 0 {
			pl.drained = true // the last copy reaped finishes it
			return
		}
		pl.finish()
	}
}

// finish completes a pull whose every frame is in its receive buffer: the
// NOTIFY, then the receive, unless spans of it are still posted (a lane
// whose postings the transport could not take back, placerecv.go): it
// then completes once the NIC consumed them. On lane 0 none is left: a
// reply kept outside its own span waited for that span to be done
// (placeWritable), so every span of a pull whose frames are all in was
// consumed (TestPlaceLane0FinishedPullHasNoSpanPosted).
func (pl *pull) finish() {
	e := pl.e
	pl.p.sendNotify(pl.total, pl.ref.id, pl.ref.seq)
	r := pl.r
	code := r.status.setRecv(pl.p, pl.match, pl.msgLen, pl.total)
	e.copies.recv.Add(uint64(pl.total))
	if !e.endPull(pl, code) && code == nil {
		e.complete(r, nil)
	}
}

// lossEvidence asks again for the frames that frame x of block k shows
// lost. A responder (gomx's or Open-MX's) answers the PULLs in the order
// they come and sends each one's frames in order, so on a wire that keeps
// one sender's frames in order a frame that arrives says that every frame
// asked for by an earlier PULL, and every earlier frame of its own PULL,
// has arrived or is lost. Each frame knows the number of the PULL that
// last asked for it (pblock.seq, pblock.fseq): its evidence. A wire may
// also reorder frames (UDP read by two CPUs, a NIC's several queues, the
// fault model's swaps), and a frame taken for lost that was only late
// costs a duplicate, and worse, its late original is then taken for the
// re-request's answer, evidence against every frame asked for before the
// re-request: the rest of the window. So on lane 0 a hole is taken for
// lost, as TCP takes a segment after three duplicate acks, only once
// pullReorder replies asked for after it have come: the evidence acted on
// is the earliest (in the order asked for) of the last pullReorder
// replies to come (recent). A reply overtaken by up to pullReorder-1
// others then costs nothing, a loss is asked for again pullReorder
// replies later (or at once by early retransmit, below), and a late
// original taken for a copy is evidence only together with the replies
// that follow it. A block none of whose frames came is taken for lost
// only on evidence from a PULL two after its own (lostBefore), early
// retransmit included: its PULL may have been overtaken by the next one,
// whose replies then all come first. The last frame a PULL asked for can
// be overtaken by no frame that PULL or an earlier one asked for, so its
// arrival shows every other hole asked for before it lost at once (TCP's
// early retransmit), when that PULL is the newest that asked for a block
// the first time (blockSeq, blockLast: re-requests sent after it do not
// turn this off), or is the last PULL and the frame is not amb; an amb
// frame's arrival may be its late original, so it proves nothing. A
// hole is asked for again each time evidence asked for after that
// request arrives while it is still missing: once per round trip of the
// pull path, and never on a wire that loses nothing. A frame asked for
// again on evidence was overtaken by pullReorder replies, so its earlier
// copy is taken for lost and a copy that arrives answers the re-request; one
// the timer asked for again may answer either PULL, and counts as an
// answer to the first (amb). A pull placing on a lane has its frames come
// on two queues, which the board reads in turn, not in the order the wire
// brought them: those asked for once on the lane, those asked for again
// on lane 0 (placerecv.go). A frame there is evidence only for the frames
// that come on its own queue; one asked for again may come on either (its
// original may only have been late), and the queue it came on says which
// (onLane); one asked for on the lane only is its original wherever it
// came (a fault wrapper delivers the copies it makes on lane 0). On the
// lane a reordered frame costs nothing either (laneEvidence).
func (pl *pull) lossEvidence(k, x int, onLane bool) {
	ev := &pl.blocks[k]
	te := ev.seq
	on := evidenceAll
	switch bit := uint64(1) << x; {
	case pl.lane() > 0 && (onLane || ev.fast&bit == 0):
		pl.laneEvidence(k, ev.first+x)
		return
	case pl.lane() > 0 && ev.amb&bit != 0:
		// A copy of one whose original may come too: an answer to
		// seq or later.
		on = evidenceAgain
	case (ev.fast&^ev.amb)&bit != 0:
		te = ev.fseq[x]
		if pl.lane() > 0 {
			on = evidenceAgain
		}
	}
	if pl.lane() == 0 {
		if te == ev.seq && te == pl.blockSeq && ev.first+x == pl.blockLast ||
			te == pl.reqs && ev.first+x == pl.lastAsked && ev.amb&(1<<x) == 0 {
			x++ // the last frame asked for: every hole before it is lost
		} else if te, x = pl.settled(askedAt{te, x}); x < 0 {
			return
		}
	}
	pl.lostBefore(te, x, FastRetransmits, on)
}

// pullReorder is how many replies may overtake a reply on its way before
// it is taken for lost (TCP's duplicate threshold): on lane 0
// (lossEvidence), and on a placing lane (laneEvidence).
const pullReorder = 3

// settled records ev, the evidence of the reply that just came to a pull
// on lane 0, and returns the earliest of the last pullReorder replies'
// (x -1 while fewer came): what pullReorder replies in a row show.
func (pl *pull) settled(ev askedAt) (uint32, int) {
	copy(pl.recent[1:], pl.recent[:pullReorder-1])
	pl.recent[0] = ev
	if pl.nrecent < pullReorder {
		pl.nrecent++
		if pl.nrecent < pullReorder {
			return 0, -1
		}
	}
	for _, r := range pl.recent[1:] {
		if r.before(ev) {
			ev = r
		}
	}
	return ev.te, ev.x
}

// laneEvidence asks again, at once, for the frames asked for once on pl's
// lane that the arrival there of frame i, in block k, shows lost. The
// lane delivers only the pull's replies, in the order its PULLs asked for
// them (blocks in order, each block's frames in order), so a wire that
// loses nothing but reorders them puts a reply at most a few frames
// late, and the spans hold it whole (Holding in placerecv.go: a reordered
// reply is held where it landed and copied into place, not asked for
// again). A hole is taken for lost only once a frame pullReorder frames
// after it has come; a block none of whose frames came, once a frame two
// blocks after it has: its PULL may have been overtaken by the next one,
// whose replies then all come first. A loss so costs its frame asked for
// again a few frames later, and a block's PULL lost one block later. The
// last frame asked for can be overtaken by nothing, so its arrival shows
// every hole before it lost (TCP's early retransmit): a loss among the
// last frames, or of the last blocks' PULLs, and any loss when the window
// is too short for the thresholds (PullBlocks below 3), is asked for
// again when the last reply comes, not only after the question's answer
// (ask.go), which still shows a loss of the last reply itself.
func (pl *pull) laneEvidence(k, i int) {
	cut := i - pullReorder + 1 // the frames before it are lost
	last := i+1 == pl.nextFrame
	if last {
		cut = i
	}
	for j := 0; j <= k && pl.blocks[j].first < cut; j++ {
		bl := &pl.blocks[j]
		if bl.arrived == 0 && (j == k || j+1 == k && !last) {
			continue
		}
		missing := ^(bl.got | bl.fast) & (uint64(1)<<bl.n - 1)
		if c := cut - bl.first; c < bl.n {
			missing &= uint64(1)<<c - 1
		}
		if missing != 0 {
			pl.rerequest(bl, missing, FastRetransmits)
		}
	}
}

// Which frames a reply is evidence for (lostBefore).
const (
	evidenceAll   = iota
	evidenceOnce  // those asked for once only (a placing pull's lane)
	evidenceAgain // those asked for again (lane 0, for a placing pull)
)

// lostBefore asks again for every missing frame last asked for by a PULL
// numbered before te, or by PULL te itself before its frame x, among the
// frames on says: the frames that evidence arriving after them shows
// lost. why is the counter the re-requests go to. Evidence from a reply
// (FastRetransmits) shows a block none of whose frames came lost only
// from a PULL two after the block's own (lossEvidence: its PULL may have
// been overtaken; taking it for lost at once cost whole blocks asked for
// twice on a wire that reorders). The cost: a lost PULL of the
// second-to-last block (or of the last, which nothing follows), or any
// lost PULL while PullBlocks <= 2 (the window moves on only once the
// block completes), waits for a question's answer, or toward a peer that
// answers none for the pull timer.
func (pl *pull) lostBefore(te uint32, x int, why Counter, on int) {
	for j := range pl.blocks {
		bl := &pl.blocks[j]
		if why == FastRetransmits && bl.arrived|bl.fast == 0 && te <= bl.seq+1 {
			continue
		}
		missing := ^bl.got & (uint64(1)<<bl.n - 1)
		switch on {
		case evidenceOnce:
			missing &^= bl.fast
		case evidenceAgain:
			missing &= bl.fast
		}
		if missing == 0 {
			continue
		}
		var lost uint64
		if plain := missing &^ bl.fast; plain != 0 {
			switch {
			case bl.seq < te:
				lost = plain
			case bl.seq == te: // the evidence's own PULL: its earlier frames
				lost = plain & (uint64(1)<<x - 1)
			}
		}
		for f := missing & bl.fast; f != 0; f &= f - 1 {
			i := bits.TrailingZeros64(f)
			if s := bl.fseq[i]; s < te || s == te && i < x {
				lost |= 1 << i
			}
		}
		if lost != 0 {
			pl.rerequest(bl, lost, why)
		}
	}
}

// timer re-requests, when the whole pull (not only one block: blocks are
// served one after the other) was silent for the pull path's RTO
// (PullTimeout until a round trip was measured), the missing frames of the
// oldest unfinished block only, its RTO doubled for each earlier timer
// re-request of it. The replies are evidence for the later blocks
// (lossEvidence), and a silence that was only a slow peer costs one block
// of duplicates, not the window. A timer re-request is needed only where
// no later reply comes to reveal a hole (lossEvidence, lostBefore): the
// last frame of a pull and the holes only it would reveal, a lost PULL of
// one of the last two blocks or of any block while PullBlocks <= 2, or a
// re-request sent after the last block's PULL and lost, with fewer than
// pullReorder replies asked for after it to come. Toward a peer
// that answers questions (ExtAsk) the timer never re-requests: it asks
// the region's owner instead, and only the answer re-requests what it
// shows lost (ask.go); a pull placing on a lane acts on its answer here,
// once the sources were drained. A pull placing on lane 0 (placerecv.go)
// does not ask: each answer would take a descriptor ahead of its spans.
// Its timer re-request, as one toward a peer that is not asked, asks for
// a whole block again, so it waits, as a verdict does, for the frames
// already received (verdict.go): the replies it would ask for may be in
// the transport's rings, unread because the goroutine that owns the
// receive source was descheduled while this one ran the timers. The re-request goes out
// only if the pull is still silent once the sources were drained, and a
// tick or so later while their owner holds them. A pull fails after
// ResendDelay*ResendMax without progress.
func (pl *pull) timer(now int64) {
	o := &pl.e.b.opts
	if pl.e.b.overdue(now, pl.lastProgress, int64(o.ResendDelay)*int64(o.ResendMax)) { // liveness.go
		if !pl.e.b.mayDeclare() { // verdict.go
			return
		}
		pl.e.cnt[Unreachable]++
		pl.abandon(ErrUnreachable) // largefail.go
		return
	}
	if pp := pl.pp; pp != nil && len(pp.held) > 0 {
		// Held replies (placerecv.go) wait for the frames that took the
		// postings of their places to be handled. One dropped after the
		// NIC placed it never is: once the sources were drained, a
		// posting consumed two timer runs ago is done.
		settled := now-pl.lastProgress >= pl.p.pullRTO(0) && pl.e.b.mayDeclare()
		pl.placeFlush(settled)
		if pl.advance(); pl.e.pulls[pl.slot] != pl || pl.ending {
			return // finished
		}
	}
	if pl.answered {
		if !pl.e.b.mayActSince(pl.answerGen) { // verdict.go: replies ahead of the answer may wait on the lane
			return
		}
		pl.answered = false
		pl.onAnswer(now) // ask.go
		return
	}
	for j := range pl.blocks {
		bl := &pl.blocks[j]
		if bl.got == uint64(1)<<bl.n-1 {
			continue // every frame in, or held (placerecv.go)
		}
		if pl.askable() {
			pl.askDue(now, bl) // ask.go
			return
		}
		if now-max(bl.lastReq, pl.lastProgress) >= pl.p.pullRTO(bl.tries) && !pl.e.b.held(now) { // finetimer.go
			if !pl.e.b.mayDeclare() { // verdict.go: the replies may wait unread
				return
			}
			bl.tries++
			bl.lastReq = now
			pl.e.cnt[PullTimeouts]++
			pl.rerequest(bl, ^bl.got&(uint64(1)<<bl.n-1), TimerRetransmits)
		}
		return
	}
}

// endPull releases a pull (and starts a queued one); a non-nil code fails
// its receive. It reports whether the receive waits in the drain list
// instead, to complete with code once the NIC consumed its spans.
func (e *Endpoint) endPull(pl *pull, code error) bool {
	if e.pulls[pl.slot] != pl || pl.ending {
		return false
	}
	pl.ending = true
	e.b.waitPullCopies(pl) // the engine must be done writing into r first
	e.pulls[pl.slot] = nil
	if pl.bulk {
		e.b.pulling.Add(-1)
	}
	e.pullFree = append(e.pullFree, pl.slot)
	pl.r.pl = nil
	held := e.b.placeEnd(pl, code) // placerecv.go: spans still posted
	if code != nil && !held {
		e.complete(pl.r, code)
	}
	if !pl.bulk {
		e.kickPulls()
		return held
	}
	// Room for a pull over the transport, of any endpoint of the board.
	for _, o := range e.b.epl {
		o.kickPulls()
	}
	return held
}

// ---- the region owner's side ----

func (b *Board) sendNackMCP(nic transport.NICID, from, kind uint8, handle, magic uint32, cnt *Counters) {
	h := wire.NackMCP{SrcEP: from, Kind: kind, Handle: handle, Magic: magic}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, b.headTo(nic), b.ord)
	h.Put(buf[wire.HeadLen:], b.ord)
	cnt[SendNackMCP]++
	b.sendFrame(nic, buf, wire.HeadLen+wire.NackMCPLen, b.sealControl(nic))
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
		b.sendNackMCP(nic, h.SrcEP, kind, h.Handle, h.Magic, &b.cnt)
		return
	}
	e.cnt[RecvPull]++
	nack := func(kind uint8, c Counter) {
		e.cnt[c]++
		b.sendNackMCP(nic, h.SrcEP, kind, h.Handle, h.Magic, &e.cnt)
	}
	if h.Session != e.session {
		nack(wire.NackBadSession, DropBadSession)
		return
	}
	if h.RegionID >= uint32(b.opts.Regions) {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	reg := &e.regions[h.RegionID]
	if !reg.used || reg.seq != h.RegionSeq || reg.r.p.nic != nic || reg.r.p.epID != h.SrcEP {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	r := reg.r
	p := r.p
	// The block, in Open-MX's frame geometry for this peer: it starts at
	// FirstFrame*L - RegionOffset%L + FirstFrameOffset in the message and
	// must lie in the pull, which must lie in the region; one PULL never
	// makes more than 64 replies. A PULL that asks for padded replies
	// (wire.Pull.ReplyPad) has them cut with L less the pad, each frame
	// its header, the pad's zero bytes and its payload.
	pad := int(h.ReplyPad)
	if pad >= p.replyLen {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	L := uint64(p.replyLen - pad)
	skew := uint64(h.RegionOffset) % L
	if h.AlignEnd {
		// Cut from the pull's end (wire.ExtPullAlign, read only when
		// both boards announced it): the last frame full.
		skew = uint64(wire.AlignEnd(int(h.TotalLength), int(L)))
	}
	ffo, bl := uint64(h.FirstFrameOffset), uint64(h.BlockLength)
	start := uint64(h.FirstFrame)*L + ffo
	if ffo >= L || start < skew || (ffo+bl+L-1)/L > maxBlockFrames {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	start -= skew
	if start+bl > uint64(h.TotalLength) || uint64(h.RegionOffset)+uint64(h.TotalLength) > uint64(r.length) {
		nack(wire.NackBadRDMAWindow, DropBadPull)
		return
	}
	reg.lastPull = b.now()
	p.lastPulled = reg.lastPull // no question about the stream meanwhile (ask.go)
	b.wakeTicks()               // progress.go: the NOTIFY is timed (largefail.go)
	off, end := int(start), int(start+bl)
	roff := int(h.RegionOffset)
	// In place where the transport can (zerocopy.go): the header in the
	// batch buffer, the payload read by the NIC from r's segments.
	zc := b.zcTo(nic, p.crc)
	// The lane of the puller's transport the replies go to (placerecv.go),
	// when it announced them; in place only (a copying sender's replies
	// come on the puller's lane 0, and the puller cancels its lane).
	var lane uint8
	if p.replyLane && int(h.Lane) <= transport.MaxLanes {
		lane = h.Lane
	}
	send := func(lens []int) {
		e.cnt[SendPullReply] += uint64(len(lens))
		if zc {
			b.sendReplies(e, nic, lens, b.zc.out, lane)
			clear(b.zc.out)
			b.zc.out = b.zc.out[:0]
			return
		}
		b.sendBatch(nic, lens, p.crc)
	}
	lens := b.lens[:0]
	for i := 0; off < end; i++ {
		n := int(L)
		if i == 0 {
			n -= int(ffo)
		}
		n = min(n, end-off)
		fb := b.batchBuf(len(lens))
		wire.PutPeerIndex(fb, p.peerIdx, b.ord)
		rh := wire.PullReply{FrameSeq: uint8(int(h.FirstFrame) + i), FrameLength: uint16(n), Offset: uint32(off),
			Handle: h.Handle, Magic: h.Magic}
		rh.Put(fb[wire.HeadLen:], b.ord)
		hl := replyHeadLen + pad
		clear(fb[replyHeadLen:hl])
		if zc {
			f, ok := b.zcFrame(reg, r, nic, roff+off, n, fb[:hl])
			b.zc.out = append(b.zc.out, f)
			if !ok {
				gatherAt(fb[hl:hl+n], r.segs, roff+off)
				e.copies.framed(n)
			}
		} else {
			gatherAt(fb[hl:hl+n], r.segs, roff+off)
			e.copies.framed(n)
		}
		lens = append(lens, hl+n)
		off += n
		if len(lens) == rxBatch {
			send(lens)
			lens = lens[:0]
		}
	}
	send(lens)
	b.lens = lens[:0]
	// The PULL proves the receiver holds the RNDV (reliability.go): no
	// question or resend about it, however late its ack.
	p.pulledAck(r)
}

// pullFor finds the live pull a PULL_REPLY or NACK_MCP is for: the magic
// names the endpoint (Open-MX's XOR), the handle the pull.
func (b *Board) pullFor(nic transport.NICID, handle, magic uint32) (*Endpoint, *pull) {
	id := magic ^ wire.PullMagicXor
	if id >= MaxEndpoints {
		return nil, nil
	}
	e := b.eps[id]
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

// handlePullReply takes a PULL_REPLY whose header h was decoded from
// frame (the whole frame after the peer index): its payload follows the
// header and the pad its pull asked for.
func (b *Board) handlePullReply(nic transport.NICID, h *wire.PullReply, frame []byte) {
	e, pl := b.pullFor(nic, h.Handle, h.Magic)
	if e == nil {
		b.cnt[DropBadPullReply]++
		return
	}
	e.cnt[RecvPullReply]++
	if pl == nil || len(frame) < wire.PullReplyLen+pl.pad+int(h.FrameLength) {
		e.cnt[DropBadPullReply]++
		return
	}
	at := wire.PullReplyLen + pl.pad
	pl.reply(h, frame[at:at+int(h.FrameLength)], nil, false, false)
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
	pl.abandon(nackErr(h.Kind)) // largefail.go
}
