package mx

import (
	"math/bits"
	"slices"

	"github.com/gomx-dev/gomx/internal/regcache"
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// Receiving in place: where the transport can have its NIC write a
// received frame's payload into memory mx posts (transport.Placer: the
// 82599's header split into a 64-byte header buffer and the posted
// memory), a pull posts, for each frame of a block it asks for, the span
// of the receive buffer where that frame's payload goes, before it sends
// the PULL. The replies arrive in the order asked, so each takes the span
// posted for it: the NIC writes its payload once, in place.
//
// The NIC splits every frame at a fixed length (the 82599: 64 bytes, of
// which 14 are the Ethernet header), longer than a PULL_REPLY's headers
// (peer index and PULL_REPLY, 18 bytes). A peer that announced
// wire.ExtReplyPad is asked (wire.Pull.ReplyPad) to put the difference
// (32 bytes) as zeros between each reply's header and its payload, and to
// cut the frames that much shorter: the payload then begins exactly at
// the split, and the CPU copies nothing of it. From another peer (Open-MX)
// the replies come unpadded and the CPU copies the payload bytes that come
// in the header buffer (32 of each frame). docs/zero-copy.md tells the
// whole story; the rules that keep every byte right whatever arrives:
//
//   - Which frames. The NIC gives the descriptors it holds to the next
//     frames, whatever they are; PlaceState.Ahead says how many come
//     before a span posted now, the frames received and not yet returned
//     by Recv among them. The board counts the replies it asked for that
//     have not arrived (placeRecv.expect; a reply arrives once, whether
//     it is kept or dropped to be asked for again) and the frames of the
//     batches it is handling that it has not handled yet (Board.rxLeft);
//     a block posts no span for its first Ahead-expect+rxLeft frames,
//     which take the descriptors ahead (on a lane, rxLeft counts only
//     the frames of the batch that came on that lane: no other frame
//     takes its descriptors). The count errs one way only: a
//     frame nobody counted (an ack, a duplicate, a reply asked for again)
//     takes a descriptor, and the replies after it take the spans of
//     later frames, which is safe (their own spans were taken by the
//     frames before them; see Checking). The other way, a reply in the
//     span of an earlier frame must wait for its own span to be consumed,
//     and would be dropped and asked for again, landing early in turn.
//   - Realigning. On lane 0 a frame nobody counted that comes after the
//     spans were posted pushes every reply of those spans one span late,
//     and leaves the blocks posted next a shortfall: more replies owed
//     than descriptors ahead (Ahead-expect+rxLeft below 0). A shortfall
//     alone does not say whether the missing descriptors were taken by
//     frames nobody counted (the last replies owed will take the next
//     block's first spans) or counted frames were lost (they will not
//     take them). A reply that took a span says: a reply asked for once,
//     on its first arrival, tells the posting it took less its own
//     (placeRecv.late). When that word is late, the next block goes
//     behind as many pool descriptors (nil spans), at most the
//     shortfall, for the late replies to take, and its own replies land
//     in their spans again: a stray costs the rest of its window, not
//     the message. Word from before that realignment does not count
//     again (placeRecv.lateFrom). Without late word the block goes
//     unshifted, as the count has it: a spare no late reply takes would
//     make every reply of the block land early.
//   - Answers. The peer answers each question the board asks it
//     (ask.go), at once and in order, so the answers to the questions
//     asked before a pull started come ahead of its replies: the pull
//     counts those not yet received (partner.asked less answered) ahead
//     of its spans, behind spare pool descriptors where fewer are ahead,
//     until its first reply, which shows the rest lost (an
//     answer received and not yet handled is counted both in Ahead or
//     rxLeft and here, which cancel). A question the peer asks arrives
//     when it does; it is realigned as any stray.
//     A span must hold the most the NIC may write (PlaceInfo's Min, or
//     LaneMin on a lane), so the last frames of a receive buffer get
//     none, unless a lane's span is no longer than a full reply's
//     payload (the 82599's lanes strip VLAN tags, and a NIC opened for
//     frames of its MTU writes no more there) and the peer announced
//     wire.ExtPullAlign: the pull then asks for its frames cut from its
//     end (wire.Pull.AlignEnd), the short frame first, where its span
//     has room, and the last one full, its span ending with the buffer,
//     so every frame gets its span. A pull posts only
//     when its receive lies in one segment, zero copy is on and the peer
//     sends no CRC-32C trailer (it would land after the payload).
//   - Checking. A reply that took its own span is done. Anything that
//     took a span not its own (another frame, a reply of another block
//     or pull, a duplicate) is made whole by a copy and handled as any
//     frame; the span's owner is not hurt, since it never took that span.
//     A reply copied into the receive buffer is accepted only once the
//     NIC writes no more into its own span and every earlier span that
//     reaches into its range (the span before it, by a few bytes; with a
//     span longer than several frames, a jumbo NIC's for a peer of a
//     smaller MTU, several: spansOver): otherwise the NIC might later write over it, so it is dropped and
//     asked for again as a lost frame is. Spans are consumed in the order
//     posted, lane by lane, so a posting is done once a frame that took
//     it or a later one was handled (placeRecv.done), once a Cancel took
//     it back, or, for a frame nobody handles (one a fault wrapper lost
//     after the NIC placed it), once it was consumed two timer runs ago
//     (placeRecv.settled).
//     Such a copy overwrites the span, and the frame that took that span
//     may not have been handled yet (still in a batch, or read before a
//     Cancel): its bytes there are no longer its own. So every copy
//     notes the highest posting it relied on (placeRecv.relied), and a
//     frame that took that posting or an earlier one, handled after,
//     is not trusted: its bytes are not used, and it is asked for again
//     as a lost frame is (counter PlaceSpoiled). A reply in its own span
//     whose first bytes came in the header buffer (unpadded) has them
//     written by the CPU where earlier spans may reach: that write relies
//     on them too (placeOwn). That is the invariant
//     that keeps every byte right whatever the timing: a byte of the
//     receive buffer is written from a span only by the handling of the
//     frame that took the span, before any copy that relied on that
//     span being done.
//   - Lanes. Where the transport has lanes (transport.PlaceInfo.Lanes:
//     NIC queues that receive only what their peers send them) and the
//     peer announced wire.ExtPlaceLane, a pull takes a free lane for its
//     life and each PULL asks for its replies on it (wire.Pull.Lane):
//     nothing else arrives there, so no other frame takes its spans,
//     and several pulls place at once, one a lane. A lane takes only
//     what is posted, so every frame of a block gets a posting (the last
//     frames, with no room for a span, a buffer of the transport's), and
//     a frame asked for again comes on lane 0.
//   - Holding. A reply lost before the NIC on a lane leaves its posting
//     to the next reply, and each later reply of the blocks posted lands
//     in the span before its own: whole, but where its own place may
//     still be written by the NIC (its own span, taken by the reply after
//     it) or hold a frame not yet handled. A pull on a lane keeps such a
//     reply where the NIC wrote it (pullPlace.held, counter PlaceHeld;
//     only its header buffer's payload bytes, none when padded, are
//     copied aside) and copies it once into its place when that place is
//     final (placeReady, without the settled count, which would trust a
//     posting whose frame still waits in the lane's ring and spoil it)
//     and free: the held replies of a loss form a chain, each lying in
//     the place of the one before, flushed from its end (placeFlush),
//     rather than dropped and asked for again. Replies swapped before
//     the NIC would lie each in another's place, a cycle no order of
//     moves undoes: the reply that would close one is copied aside
//     instead (heldCycle, counter PlaceAside), and the rest flushes as a
//     chain. Its bytes stay whole
//     there: the NIC writes no more into its span or any before it
//     (consumed in order), none after reaches them (a frame whose bytes
//     pass the range of its span's frame is not trusted, spanTaken), and
//     every CPU write into a frame's range first empties it of held
//     bytes (pullPlace.src). A copy asked for again on lane 0 whose place
//     is final but holds a held reply cannot wait: the chain is flushed
//     at once, its end, whose own place is not final, copied aside
//     (placeVacate, counter PlaceAside: one second copy); a copy whose
//     place is not final is held aside whole. The loss's own frame is
//     asked for again on evidence from a reply of the lane, pullReorder
//     frames after it (laneEvidence: a reply or a PULL the wire only
//     reordered is held so, not asked for again), and the next
//     block posted skips the descriptors the lost replies left
//     (placeBlock counts only the frames still owed on the lane,
//     laneOwed: those a question's answer asked for again, whose
//     originals may still come there, stay owed until a copy comes), so
//     its replies take their own spans again: a loss costs its frame,
//     asked for again, and one copy of each reply of the rest of the
//     window.
//     The two queues are read in turn, not in the order the wire brought
//     their frames, so a reply on one is no evidence of a loss on the
//     other (lossEvidence). When no frame is owed on the lane any more
//     and replies are still held, no reply will take the postings left
//     (the last spans, after a loss): the pull has the transport take
//     its lane's postings back (transport.Placer.Cancel, which stops the
//     queue before it counts them consumed: the NIC writes none of them
//     afterwards, counter PlaceLaneCancels) and copies the held replies
//     in. A Cancel that fails takes nothing back (counter
//     PlaceCancelErrors): the held replies wait, and the pull's timer,
//     once the pull was silent and the sources drained, counts the
//     postings consumed two timer runs ago done and tries the cancel
//     again. A pull that ends with postings left on its lane (a sender
//     that did not use the lane, a buffer of the transport's its last
//     reply did not take) has the transport cancel them too before its
//     receive completes; should that fail, the lane stays the pull's
//     and the receive waits in the drain list, which tries the cancel
//     again on every timer run.
//   - Completion. A receive whose every frame is in has no span left
//     posted (each frame's own was consumed). A pull that ends early
//     (failure, close) with spans still posted waits in the board's drain
//     list until the NIC has consumed them, and only then completes: the
//     application never gets back memory the NIC may still write. The
//     transport's Close consumes every span.

// placeRecv is a board's in-place receive state (b.mu held).
type placeRecv struct {
	tr  transport.Placer
	hd  int // payload bytes an unpadded placed reply brings in its header buffer: the pad asked for
	min int // the least span
	// laneMin is the least span on a lane (transport.PlaceInfo.LaneMin):
	// the 82599's lanes strip VLAN tags, so a NIC opened for frames of
	// its MTU (ixgbe MaxFrame = MTU + 14) writes no more than a full
	// padded reply's payload there.
	laneMin int
	head    int // Data bytes of a placed frame
	// expect counts the frames of pulls over the transport asked for
	// on lane 0 and not yet received: they take the descriptors the NIC
	// holds before a span posted now.
	expect int
	// late is the last word on how lane 0's replies run against their
	// spans: the number of the posting a reply asked for once took,
	// less its own span's (0 in place, positive when frames nobody
	// counted took descriptors before it, negative when frames counted
	// did not come). Only replies that took a posting numbered after
	// lateFrom speak: those before it were posted before the last
	// realignment, which answered them.
	late     int
	lateFrom uint64
	// lanes is how many lanes the transport has; busy[k] is the pull
	// lane k is bound to (index 0 unused).
	lanes int
	busy  [transport.MaxLanes + 1]*pull
	// pulls are the live pulls with spans posted; seen and settled
	// are, by lane, the consumed count at the last two timer runs: a
	// span consumed by then was taken by a frame handled since.
	pulls         []*pull
	seen, settled [transport.MaxLanes + 1]uint64
	// done is, by lane, the posting up to which the NIC writes no more
	// spans: the highest a handled frame took (postings are consumed in
	// order), or the last a Cancel took back. relied is, by lane, the
	// highest posting a copy into the receive buffer relied on being
	// done: a frame that took it or an earlier one and is handled later
	// has had its span written over, and is not trusted (Checking).
	done, relied [transport.MaxLanes + 1]uint64
	drain        []placeDone
	scratch      []byte
	spans        [][]byte
	chain        []int
	// stash is the buffers of held replies given back (pullPlace.held),
	// for the next to reuse; stashLow is the fewest it had since the
	// timers last trimmed it (trimStash).
	stash    [][]byte
	stashLow int
}

// placeDone is a pull that ended with spans still posted; on a lane,
// the lane stays pl's until they were consumed.
type placeDone struct {
	e    *Endpoint
	r    *Request
	code error
	lane int
	last uint64
	ent  *regcache.Entry[*transport.Region]
	pl   *pull
}

// pullPlace is one pull's spans.
type pullPlace struct {
	seg   []byte
	hd    int // payload bytes a reply brings in the header buffer: 0 when padded
	lane  int // the transport's lane its spans are posted on
	min   int // the least span there (placeRecv.min or laneMin)
	ent   *regcache.Entry[*transport.Region]
	post  []uint64 // by frame: the span's number among the transport's postings (1-based), 0 for none
	last  uint64   // the number of its last span
	taken []uint64 // by frame, a bit: the frame that took its span was handled
	// asked is the count of questions to the pull's peer (partner.asked)
	// when it started on lane 0: their answers not yet received come
	// before its replies. 0 once its first reply came.
	asked uint64
	// held is, on a lane, the replies received whole whose place was
	// not safe to write (Holding), kept until it is; src is, by frame,
	// 1 + the held reply whose bytes the NIC wrote in that frame's
	// range, 0 for none.
	held []heldReply
	src  []int32
}

// heldReply is frame i's reply, kept until its place in the receive
// buffer is safe to write: the n bytes the NIC wrote at offset at of
// the receive buffer, in the range of frame from, whose span it took,
// then, copied aside, the payload bytes of its header buffer (head);
// or, with at -1, its whole payload in head.
type heldReply struct {
	i, at, n, from int
	head           []byte
}

// newPlaceRecv returns the board's in-place receive state, nil when the
// transport cannot place or zero copy is off.
func newPlaceRecv(tr transport.Transport, zc *zeroCopy) *placeRecv {
	p, ok := tr.(transport.Placer)
	if !ok || zc == nil {
		return nil
	}
	pi := p.PlaceInfo()
	if pi.Head <= replyHeadLen || pi.Min <= 0 {
		return nil
	}
	laneMin := pi.LaneMin
	if laneMin <= 0 || laneMin > pi.Min {
		laneMin = pi.Min
	}
	return &placeRecv{tr: p, hd: pi.Head - replyHeadLen, min: pi.Min, laneMin: laneMin, head: pi.Head, lanes: min(pi.Lanes, transport.MaxLanes)}
}

// lane is the transport's lane pl's replies come on: 0 when it places on
// none.
func (pl *pull) lane() int {
	if pl.pp == nil {
		return 0
	}
	return pl.pp.lane
}

// freeLane returns a lane no pull holds, 0 for none.
func (pc *placeRecv) freeLane() int {
	for k := 1; k <= pc.lanes; k++ {
		if pc.busy[k] == nil {
			return k
		}
	}
	return 0
}

// placeStart makes pl post spans when it can: its receive in one
// segment, registered with the transport through the board's
// registration cache, and no trailer from its peer.
func (b *Board) placeStart(pl *pull) {
	if b.plc == nil || !pl.bulk || pl.p.crc || b.zc.unable || b.txFor(pl.p.nic) != b.tr {
		return
	}
	segs := pl.r.segs
	if len(segs) != 1 || len(segs[0]) < int(pl.total) {
		return
	}
	lane := 0
	if b.plc.lanes > 0 {
		// Lanes only (lane 0 places nothing): with a peer that sends
		// to none, or no lane free, the pull copies.
		if lane = b.plc.freeLane(); !pl.p.replyLane || lane == 0 {
			return
		}
	}
	seg := segs[0][:pl.total]
	ent, _, err := b.zc.cache.Get(seg)
	if err != nil {
		return
	}
	if !ent.Mapping().InPlace() {
		b.zc.cache.Put(ent)
		return
	}
	hd, span := b.plc.hd, b.plc.min
	if lane > 0 {
		span = b.plc.laneMin
	}
	if p := pl.p; p.replyPad && hd <= 255 && hd < p.replyLen {
		// Replies padded to begin their payload at the split, cut
		// with the reply length less the pad (wire.Pull.ReplyPad).
		pl.pad, hd = hd, 0
		L := p.replyLen - pl.pad
		skew := int(pl.ref.off) % L
		if lane > 0 && p.pullAlign && span <= L {
			// A span of a full reply's payload fits the last frame
			// at the buffer's end: cut from the end (wire.Pull.AlignEnd),
			// the last frame is full and every frame has its span,
			// the first, short one included.
			pl.alignEnd, skew = true, wire.AlignEnd(int(pl.total), L)
		}
		pl.geo = wire.PullFrames{Total: int(pl.total), L: L, Skew: skew}
		pl.nframes = pl.geo.Count()
	}
	pl.pp = &pullPlace{seg: seg, hd: hd, min: span, ent: ent, post: make([]uint64, pl.nframes), taken: make([]uint64, (pl.nframes+63)/64)}
	if lane == 0 {
		pl.pp.asked = pl.p.asked
	}
	if lane > 0 {
		pl.pp.lane = lane
		b.plc.busy[lane] = pl
	}
	b.plc.pulls = append(b.plc.pulls, pl)
}

// placeBlock counts the n frames from first that pl is about to ask for
// and, when pl places, posts their spans.
func (pl *pull) placeBlock(first, n int) {
	b := pl.e.b
	pc := b.plc
	if pc == nil || !pl.bulk {
		return
	}
	lane := pl.lane()
	ahead, owed := 0, 0
	switch {
	case lane > 0:
		// Only the lane's own frames take its postings: those of other
		// queues in the batch being handled come before none of them
		// (a span left unposted on a lane is a frame the NIC drops).
		// The frames owed on the lane take the descriptors ahead: not
		// those asked for again, which come on lane 0 (a lost reply
		// leaves a posting no frame of the blocks posted takes; the
		// first frame of this block takes it, copied, and the others
		// their own spans again).
		ahead = pc.tr.Placement(lane).Ahead - pl.laneOwed(len(pl.blocks)-1) + b.rxLeftLane[lane]
	case pl.pp != nil:
		ahead = pc.tr.Placement(0).Ahead - pc.expect + b.rxLeft
		if p := pl.p; pl.pp.asked > p.answered {
			owed = int(pl.pp.asked - p.answered) // the answers owed come first
			ahead -= owed
		}
	}
	if lane == 0 {
		pc.expect += n
	}
	pl.expect += n
	pp := pl.pp
	if pp == nil {
		return
	}
	spans := pc.spans[:0]
	// Spare descriptors: when the frames counted ahead are fewer than
	// the frames of earlier blocks still to come (ahead < 0), either
	// frames nobody counted took descriptors (the earlier replies run
	// late and the last of them will take this block's first spans) or
	// counted frames were lost (they will not come, or come much later).
	// A reply that ran late says which: as many pool descriptors as it
	// ran late, at most the shortfall, go before the spans, for those
	// replies to take; so do the answers owed, which come for sure
	// (unless lost). Without that word the spans go unshifted (a late
	// reply is copied; an early one, which a wrong spare would make of
	// every reply of the block, could not be kept).
	spare := 0
	if lane == 0 && ahead < 0 && max(0, pc.late)+owed > 0 {
		spare = min(-ahead, max(0, pc.late)+owed)
		for range spare {
			spans = append(spans, nil)
		}
	}
	from := first + max(0, ahead)
	var to int
	for to = from; to < first+n; to++ {
		at := pl.geo.Start(to) + pp.hd
		if pl.geo.End(to)-pl.geo.Start(to) <= pp.hd || at+pp.min > len(pp.seg) {
			if lane == 0 {
				break // the last frames: no room for a span
			}
			spans = append(spans, nil) // a lane's: a buffer of the transport's
			continue
		}
		spans = append(spans, pp.seg[at:at+pp.min])
	}
	if len(spans) == spare {
		clear(spans)
		pc.spans = spans[:0]
		return // no span to realign: the frames take pool buffers
	}
	base := pc.tr.Placement(lane).Posted
	k, _ := pc.tr.Post(lane, pp.ent.Mapping(), spans)
	for j := spare; j < k; j++ {
		if spans[j] != nil {
			pp.post[from+j-spare] = base + uint64(j) + 1
		}
	}
	if k > 0 {
		pp.last = base + uint64(k)
	}
	if spare > 0 && k > 0 {
		pc.late, pc.lateFrom = 0, base+uint64(min(k, spare))
		pl.e.cnt[PlaceRealigns]++
	}
	clear(spans)
	pc.spans = spans[:0]
}

// placeGot notes that a frame of pl arrived (once per frame, whether it
// was kept or dropped to be asked for again).
func (pl *pull) placeGot() {
	if pp := pl.pp; pp != nil && pp.asked > 0 {
		// Its replies come after the answers owed when it started:
		// those not received were lost.
		pl.p.answered = max(pl.p.answered, pp.asked)
		pp.asked = 0
	}
	if pl.e.b.plc != nil && pl.expect > 0 {
		pl.expect--
		if pl.lane() == 0 {
			pl.e.b.plc.expect--
		}
	}
}

// ownSpan reports whether a reply that took a span took frame i's own.
func (pl *pull) ownSpan(i int, placed []byte) bool {
	pp := pl.pp
	if pp == nil || i < 0 || i >= len(pp.post) || pp.post[i] == 0 {
		return false
	}
	return sameStart(placed, pp.seg[pl.geo.Start(i)+pp.hd:])
}

// spansOver returns the first frame whose span, were it posted, would
// hold bytes of frame i's range: the spans of frames from it to i-1
// reach Start(i). A span holds the most the NIC may write (PlaceInfo's
// min), which may cover several frames: a jumbo NIC's spans for a peer
// whose smaller MTU sets the reply length (8958 bytes over six frames
// of 1450) reach past the frames after them, the last frames' unposted
// ones among them.
func (pl *pull) spansOver(i int) int {
	pp, span := pl.pp, pl.pp.min
	j := i
	for j > 0 && pl.geo.Start(j-1)+pp.hd+span > pl.geo.Start(i) {
		j--
	}
	return j
}

// placeSafe reports whether frame i may be copied into the receive
// buffer: the NIC writes no more into its span and any earlier span
// that reaches into its range (Checking, spansOver). When it may, the
// postings it relied on are noted (placeRecv.relied): a frame that took
// one of them and is handled later may have been written where frame i
// goes, and its bytes are not used.
func (pl *pull) placeSafe(i int) bool { return pl.placeReady(i, true) }

// placeReady is placeSafe, counting the postings consumed two timer runs
// ago (placeRecv.settled) as done only when settled is true: a pull that
// can hold its replies (Holding) waits for the frames that took them to
// be handled instead, so that no copy is written over a frame still
// waiting, unhandled, in the lane's ring.
func (pl *pull) placeReady(i int, settled bool) bool {
	top, ok := pl.placeBound(i, settled)
	if ok {
		pl.rely(top)
	}
	return ok
}

// placeBound reports whether frame i's range is final (placeReady), and
// the highest posting that says so, without noting it.
func (pl *pull) placeBound(i int, settled bool) (uint64, bool) {
	pp := pl.pp
	if pp == nil {
		return 0, true
	}
	pc := pl.e.b.plc
	lane := pp.lane
	bound := pc.done[lane]
	if settled {
		bound = max(bound, pc.settled[lane])
	}
	var top uint64
	for j := pl.spansOver(i); j <= i; j++ {
		s := pp.post[j]
		if s != 0 && s > bound && pp.taken[j/64]&(1<<(j%64)) == 0 {
			return 0, false
		}
		top = max(top, s)
	}
	return top, true
}

// rely notes that a copy into the receive buffer relied on the postings
// of pl's lane up to top being done (placeRecv.relied).
func (pl *pull) rely(top uint64) {
	pc := pl.e.b.plc
	pc.relied[pl.pp.lane] = max(pc.relied[pl.pp.lane], top)
}

// placeWritable reports whether frame i's reply may be written into the
// receive buffer now: its range is final (placeReady) and holds no held
// reply's bytes (Holding). A reply that took a span waits, held where it
// landed, for the held reply in its range to move on; any other (a copy
// from lane 0) has that one flushed at once (placeVacate).
func (pl *pull) placeWritable(i int, placed []byte) bool {
	pp := pl.pp
	if pp == nil {
		return true
	}
	top, ok := pl.placeBound(i, pp.lane == 0)
	if !ok {
		return false
	}
	if pp.src != nil && pp.src[i] != 0 {
		if placed != nil {
			return false
		}
		pl.placeVacate(i)
	}
	pl.rely(top)
	return true
}

// laneOwed counts the frames of pl's first n blocks still owed on its
// lane: asked for there and neither received (kept or not) nor asked for
// again on lane 0 (a frame asked for again by the timer may yet come on
// the lane, late, and is still owed).
func (pl *pull) laneOwed(n int) int {
	owed := 0
	for j := range n {
		bl := &pl.blocks[j]
		owed += bits.OnesCount64(^(bl.arrived | bl.fast&^bl.amb) & (uint64(1)<<bl.n - 1))
	}
	return owed
}

// placeHold keeps frame i's reply, received whole (payload, and placed
// when it took a span), until its place in the receive buffer is safe to
// write (Holding), and reports whether it did: only a pull placing on a
// lane holds; on lane 0 the frame is dropped and asked for again. What
// the NIC wrote stays where it is, in the range of the frame whose span
// it took, until it is copied to its place (placeIn); only the bytes of
// its header buffer are copied aside. A frame that took no span of the
// pull's (a copy from lane 0) is copied aside whole (PlaceAside).
func (pl *pull) placeHold(i int, payload, placed []byte) bool {
	pp := pl.pp
	if pp == nil || pp.lane == 0 {
		return false
	}
	pc := pl.e.b.plc
	h := heldReply{i: i, at: -1}
	if off, ok := offsetIn(pp.seg, placed); ok && placed != nil {
		// In the span of frame from, within its range (handlePlaced
		// trusts no frame that reaches past it).
		if f := pl.geo.Index(off - pp.hd); f >= 0 && f < len(pp.post) && pp.post[f] != 0 && off+len(placed) <= pl.geo.End(f) {
			h.at, h.n, h.from = off, len(placed), f
		}
	}
	if h.at >= 0 && pl.heldCycle(i, h.from) {
		// Its place holds, down the chain, the reply whose place it
		// lies in: a cycle (replies swapped before the NIC), which no
		// order of copies from where they landed undoes. It alone is
		// copied aside; the rest of the cycle then flushes as a chain.
		h.at = -1
	}
	switch {
	case h.at < 0:
		h.head = append(append(pc.takeStash(), payload...), placed...)
	case len(payload) > 0:
		h.head = append(pc.takeStash(), payload...)
	}
	pl.e.copies.scatter.Add(uint64(len(h.head)))
	if h.at >= 0 {
		if pp.src == nil {
			pp.src = make([]int32, len(pp.post))
		}
		pp.src[h.from] = int32(i + 1)
	} else {
		pl.e.cnt[PlaceAside]++
	}
	pp.held = append(pp.held, h)
	pl.e.cnt[PlaceHeld]++
	return true
}

// heldCycle reports whether reply i, held in the range of frame from,
// would close a cycle of held replies: its own place holds a held reply,
// whose place holds another, and so on, down to reply from, whose place
// reply i would take. Only a reply held in a frame's range adds a link
// (src), and each that would close a cycle is copied aside instead, so
// the held replies form none: the walk ends at a free place within
// len(held) steps.
func (pl *pull) heldCycle(i, from int) bool {
	pp := pl.pp
	if pp.src == nil {
		return false
	}
	for j, n := i, 0; n <= len(pp.held); n++ {
		s := int(pp.src[j])
		if s == 0 {
			return false
		}
		if j = s - 1; j == from {
			return true
		}
	}
	return false
}

// placeFlush copies into the receive buffer the held replies whose place
// became safe (placeReady) and free (no held reply's bytes in it), and
// counts them in. The held replies of a loss form a chain, each in the
// place of the one before it, flushed from its end: the last, whose own
// place is the first to be final, then the one whose place that freed,
// and so on, each copied once, from where the NIC wrote it. When no frame
// is owed on the lane any more, nothing will take the postings left (the
// spans a lost reply's successors did not reach): the lane's postings are
// taken back, so the replies that wait on them are safe. settled is the
// timer's word that the pull was silent and the sources drained: the
// postings consumed two timer runs ago count as done, and the lane's
// postings are taken back whatever is owed (a frame asked for again on
// the timer may still be on its way there). The caller slides the window
// (pull.advance).
func (pl *pull) placeFlush(settled bool) {
	pp := pl.pp
	if pp == nil || len(pp.held) == 0 {
		return
	}
	e := pl.e
	b := e.b
	if b.plc.busy[pp.lane] == pl && (settled || pl.laneOwed(len(pl.blocks)) == 0) {
		b.placeCancel(e, pp.lane)
	}
	// From the last held: a chain flushes in one pass; a pass that moved
	// one may have freed the place of one before it in the list.
	for moved := true; moved; {
		moved = false
		for k := len(pp.held) - 1; k >= 0; k-- {
			h := &pp.held[k]
			if h.i < 0 || pp.src != nil && pp.src[h.i] != 0 {
				continue
			}
			top, ok := pl.placeBound(h.i, settled)
			if !ok {
				continue
			}
			pl.rely(top)
			pl.placeIn(h)
			moved = true
		}
		pp.dropMoved()
	}
}

// dropMoved removes from pp.held the replies moved into place or aside
// (h.i -1), keeping the order of the rest.
func (pp *pullPlace) dropMoved() {
	kept := pp.held[:0]
	for _, h := range pp.held {
		if h.i >= 0 {
			kept = append(kept, h)
		}
	}
	clear(pp.held[len(kept):])
	pp.held = kept
}

// placeIn copies held reply h into its place, counts it in its block and
// marks it gone (h.i -1); its place is final and free (placeFlush).
func (pl *pull) placeIn(h *heldReply) {
	pp, b := pl.pp, pl.e.b
	at := pl.geo.Start(h.i)
	t0 := b.copyClock()
	n := 0
	if h.at >= 0 {
		// Where it landed lies in frame h.from's range, which is not
		// its place; the bytes of the header buffer go before.
		n = copy(pp.seg[at+len(h.head):], pp.seg[h.at:h.at+h.n])
		pp.src[h.from] = 0
	}
	n += copy(pp.seg[at:], h.head)
	pl.e.copies.scatter.Add(uint64(n))
	b.copyClocked(t0)
	for j := range pl.blocks {
		if bl := &pl.blocks[j]; h.i >= bl.first && h.i < bl.first+bl.n {
			bl.ngot++
			break
		}
	}
	b.plc.putStash(h.head)
	*h = heldReply{i: -1}
}

// placeVacate empties frame f's range of the held reply whose bytes lie
// there, for a write that cannot wait (a copy of frame f from lane 0):
// that reply is copied to its place, once its own place was emptied the
// same way, down the chain; the first of the chain whose place is not
// final yet is copied aside instead (PlaceAside: a second copy of one
// reply, so that the rest of the chain and frame f go in now).
func (pl *pull) placeVacate(f int) {
	pp, pc := pl.pp, pl.e.b.plc
	chain := pc.chain[:0]
	for j := int(pp.src[f]) - 1; j >= 0; j = int(pp.src[j]) - 1 {
		k := slices.IndexFunc(pp.held, func(h heldReply) bool { return h.i == j })
		if k < 0 || slices.Contains(chain, k) {
			break // a chain runs one way (postings and frames in one order): cannot be
		}
		chain = append(chain, k)
		if _, ok := pl.placeBound(j, false); !ok {
			break
		}
	}
	if len(chain) == 0 {
		return
	}
	last := &pp.held[chain[len(chain)-1]]
	if _, ok := pl.placeBound(last.i, false); !ok || pp.src[last.i] != 0 {
		pl.placeAside(last)
		chain = chain[:len(chain)-1]
	}
	for m := len(chain) - 1; m >= 0; m-- {
		h := &pp.held[chain[m]]
		top, _ := pl.placeBound(h.i, false)
		pl.rely(top)
		pl.placeIn(h)
	}
	pp.dropMoved()
	pc.chain = chain[:0]
}

// placeAside copies the bytes held reply h has in the receive buffer
// aside, after those of its header buffer (PlaceAside).
func (pl *pull) placeAside(h *heldReply) {
	pp, pc := pl.pp, pl.e.b.plc
	if h.head == nil {
		h.head = pc.takeStash()
	}
	h.head = append(h.head, pp.seg[h.at:h.at+h.n]...)
	pl.e.copies.scatter.Add(uint64(h.n))
	pp.src[h.from] = 0
	h.at, h.n = -1, 0
	pl.e.cnt[PlaceAside]++
}

// takeStash returns an empty buffer for a held reply's bytes, reused
// when one was given back.
func (pc *placeRecv) takeStash() []byte {
	n := len(pc.stash)
	if n == 0 {
		return nil
	}
	buf := pc.stash[n-1][:0]
	pc.stash[n-1] = nil
	pc.stash = pc.stash[:n-1]
	pc.stashLow = min(pc.stashLow, n-1)
	return buf
}

// putStash gives a held reply's buffer back for reuse.
func (pc *placeRecv) putStash(buf []byte) {
	if buf != nil {
		pc.stash = append(pc.stash, buf)
	}
}

// trimStash frees the buffers given back that no held reply took since
// the last call (the timers'): the stash shrinks to what is in use
// again, and to nothing on an idle board.
func (pc *placeRecv) trimStash() {
	if n := min(pc.stashLow, len(pc.stash)); n > 0 {
		clear(pc.stash[:n])
		pc.stash = append(pc.stash[:0], pc.stash[n:]...)
		if len(pc.stash) == 0 {
			pc.stash = nil
		}
	}
	pc.stashLow = len(pc.stash)
}

// placeStale gives back the buffers of pp's held replies (the pull
// ended).
func (pc *placeRecv) placeStale(pp *pullPlace) {
	for _, h := range pp.held {
		pc.putStash(h.head)
	}
	clear(pp.held)
	pp.held = nil
	pp.src = nil
}

// placeOwn notes, as the CPU writes the first bytes of frame i's reply
// that took its own span (the hd bytes its header buffer brought) at
// Start(i), the postings of the earlier spans those bytes land in
// (placeRecv.relied): where hd and a span are longer than a frame, the
// span before reaches them, and a frame that took it and is handled
// later would have its bytes there written over.
func (pl *pull) placeOwn(i int) {
	pp := pl.pp
	if pp == nil || pp.hd == 0 {
		return
	}
	pc := pl.e.b.plc
	var top uint64
	for j := pl.spansOver(i); j < i; j++ {
		top = max(top, pp.post[j])
	}
	pc.relied[pp.lane] = max(pc.relied[pp.lane], top)
}

// spanTaken notes that a frame that took the span at placed was handled,
// and returns the lane and number of that span's posting (0 for a span
// of no live pull), and whether the frame's bytes there lie within the
// range of the frame the span was posted for: bytes past it lie in the
// next frame's span, which the NIC may have written since, and are not
// trusted (a reply longer than a message's shorter first frame, in its
// span).
func (b *Board) spanTaken(placed []byte) (int, uint64, bool) {
	for _, pl := range b.plc.pulls {
		pp := pl.pp
		off, ok := offsetIn(pp.seg, placed)
		if !ok {
			continue
		}
		if k := pl.geo.Index(off - pp.hd); k >= 0 && k < len(pp.post) && pp.post[k] != 0 {
			pp.taken[k/64] |= 1 << (k % 64)
			return pp.lane, pp.post[k], off+len(placed) <= pl.geo.End(k)
		}
		return pp.lane, 0, true
	}
	return 0, 0, true
}

// placeLate takes the word of frame i's reply, which took posting took
// of lane 0, on how late lane 0's replies run (placeRecv.late): only a
// reply to a frame asked for once, on its first arrival, whose own span
// was posted, speaks.
func (pl *pull) placeLate(i int, took uint64) {
	pc, pp := pl.e.b.plc, pl.pp
	if pp == nil || pp.lane != 0 || took <= pc.lateFrom || i < 0 || i >= len(pp.post) || pp.post[i] == 0 {
		return
	}
	for j := range pl.blocks {
		if bl := &pl.blocks[j]; i >= bl.first && i < bl.first+bl.n {
			if bit := uint64(1) << (i - bl.first); (bl.arrived|bl.fast)&bit == 0 {
				pc.late = int(int64(took) - int64(pp.post[i]))
			}
			return
		}
	}
}

// placeCancel has the transport take back lane's postings, counting the
// cancel in e's counters when there were postings to take back
// (PlaceLaneCancels) and a failure when the transport could not
// (PlaceCancelErrors). Once Cancel returns without error, the NIC writes
// into none of them (it stopped the queue, and counts them consumed), so
// they are done; the frames it placed before and Recv delivered but the
// board has not handled yet are judged as any frame that took a posting
// done (Checking). When Cancel fails nothing is taken as done: the
// postings the transport still holds keep the copies that wait on them
// waiting, the pull asks again on its timer (each time trying the cancel
// again), and should the NIC never consume them the pull ends as its
// peer's unreachable and its receive waits in the drain list until they
// are consumed or the board closes (Completion): slower, never a wrong
// byte.
func (b *Board) placeCancel(e *Endpoint, lane int) {
	if st := b.plc.tr.Placement(lane); st.Consumed >= st.Posted {
		return // nothing posted
	}
	if err := b.plc.tr.Cancel(lane); err != nil {
		e.cnt[PlaceCancelErrors]++
		return
	}
	e.cnt[PlaceLaneCancels]++
	if st := b.plc.tr.Placement(lane); st.Posted > b.plc.done[lane] {
		b.plc.done[lane] = st.Posted
	}
}

// placeTick moves the settled count on and trims the held replies'
// buffers (the board's timers).
func (b *Board) placeTick() {
	pc := b.plc
	if pc == nil {
		return
	}
	pc.trimStash()
	if len(pc.pulls) == 0 {
		return
	}
	for k := 0; k <= pc.lanes; k++ {
		if k == 0 || pc.busy[k] != nil {
			pc.settled[k] = pc.seen[k]
			pc.seen[k] = pc.tr.Placement(k).Consumed
		}
	}
}

// handlePlaced handles a frame that took a span: a reply of a live pull
// in place when the span is its own, copied from where it landed
// otherwise; anything else made whole by a copy and handled as any frame.
func (b *Board) handlePlaced(nic transport.NICID, data, placed []byte) {
	lane, took, whole := b.spanTaken(placed)
	pc := b.plc
	// A frame that took a posting a copy relied on being done was
	// written where that copy now is: its bytes there are not its own
	// (Checking), nor are those past its span's frame. The postings
	// before the one it took are done.
	spoiled := took != 0 && took <= pc.relied[lane] || !whole
	if took > pc.done[lane] {
		pc.done[lane] = took
	}
	if len(data) >= replyHeadLen && wire.Type(data[wire.HeadLen]) == wire.TypePullReply {
		h, err := wire.DecodePullReplyHeader(data[wire.HeadLen:], b.ord)
		if err == nil {
			e, pl := b.pullFor(nic, h.Handle, h.Magic)
			if at := replyHeadLen + pl.padOf(); pl != nil && len(data) >= at && int(h.FrameLength) == len(data)-at+len(placed) {
				e.cnt[RecvPullReply]++
				// The frame's own offset says where its payload goes:
				// in place only when the span it took is the one
				// posted for that offset (ownSpan), else copied there
				// from where it landed (pull.reply).
				i := pl.geo.Index(int(h.Offset))
				if lane == 0 && took != 0 {
					pl.placeLate(i, took)
				}
				pl.reply(&h, data[at:], placed, pl.ownSpan(i, placed), spoiled)
				return
			}
		}
	}
	if spoiled {
		b.cnt[PlaceSpoiled]++
		return // its bytes are not its own: as if lost
	}
	buf := append(append(b.plc.scratch[:0], data...), placed...)
	b.plc.scratch = buf
	b.handleFrame(nic, buf)
}

// padOf is the pad pl's replies carry, 0 for no pull.
func (pl *pull) padOf() int {
	if pl == nil {
		return 0
	}
	return pl.pad
}

// placeEnd is called as pl ends with code: it reports true when spans of
// pl are still posted, the receive then completing from the drain list
// once the NIC consumed them; false when pl's registration is given back
// and the receive may complete now.
func (b *Board) placeEnd(pl *pull, code error) bool {
	if b.plc != nil && pl.expect > 0 {
		if pl.lane() == 0 {
			b.plc.expect -= pl.expect
		}
		pl.expect = 0
	}
	pp := pl.pp
	if pp == nil {
		return false
	}
	if pp.lane > 0 && b.plc.busy[pp.lane] == pl {
		if !b.closed {
			// Postings left (frames lost before the NIC, or a sender
			// that did not use the lane): take them back.
			b.placeCancel(pl.e, pp.lane)
		}
		if st := b.plc.tr.Placement(pp.lane); st.Consumed >= st.Posted || b.closed {
			b.plc.busy[pp.lane] = nil
		} // else the lane stays pl's until they are (placeDrainLocked): another pull's replies would take them
	}
	for k, o := range b.plc.pulls {
		if o == pl {
			b.plc.pulls = append(b.plc.pulls[:k], b.plc.pulls[k+1:]...)
			break
		}
	}
	pl.pp = nil
	b.plc.placeStale(pp)
	if pp.last == 0 || b.plc.tr.Placement(pp.lane).Consumed >= pp.last || b.closed {
		b.zc.cache.Put(pp.ent)
		return false
	}
	b.plc.drain = append(b.plc.drain, placeDone{e: pl.e, r: pl.r, code: code, lane: pp.lane, last: pp.last, ent: pp.ent, pl: pl})
	return true
}

// placeDrainLocked completes the receives of the drain list whose spans
// the NIC consumed, and reports whether some still wait (b.mu held).
func (b *Board) placeDrainLocked() bool {
	if b.plc == nil || len(b.plc.drain) == 0 {
		return false
	}
	kept := b.plc.drain[:0]
	for _, d := range b.plc.drain {
		if d.lane > 0 && b.plc.busy[d.lane] == d.pl && !b.closed {
			// A lane whose postings the transport could not take
			// back (placeEnd): try again; nothing else comes there.
			b.placeCancel(d.e, d.lane)
			if st := b.plc.tr.Placement(d.lane); st.Consumed >= st.Posted {
				b.plc.busy[d.lane] = nil
			}
		}
		if b.plc.tr.Placement(d.lane).Consumed < d.last && !b.closed {
			kept = append(kept, d)
			continue
		}
		if d.lane > 0 && b.plc.busy[d.lane] == d.pl {
			b.plc.busy[d.lane] = nil
		}
		b.zc.cache.Put(d.ent)
		if !d.e.closed {
			d.e.complete(d.r, d.code)
		}
	}
	clear(b.plc.drain[len(kept):])
	b.plc.drain = kept
	return len(kept) > 0
}
