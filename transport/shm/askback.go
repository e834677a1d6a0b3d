package shm

// Lanes asked back: the consumer's side of retiring a lane.
//
// A consumer reads at most Options.Lanes lanes. Once they are all taken, a
// pair that gets busy later stays on the queue until one of them is
// retired, and only a lane's producer retires it (the closing record,
// lane.go): on its own, when the lane was idle for LaneIdle, which a pair
// that still trickles never is. So the consumer asks for one back.
//
// What it measures. The Recv side counts each producer's frames and bytes
// through the queue (pollQueue, Take: two adds on a pointer it holds
// anyway), and once per look of RetireIdle (every eighth of LaneIdle:
// RetireIdle counts its looks in tick, and the Recv side's next commit
// acts on a new one, lookAtLanes) turns them into loads: a decaying sum,
// load = load - load/8 + what came since the last look, so about the
// traffic of the last LaneIdle: the pair's frames through the queue, and
// its bytes, through the queue and its lane alike (a pair's load goes on
// across the hand-overs). The look that last found a lane's cursor moved
// is when the lane was last used.
//
// When it asks. At the look, if the consumer reads as many lanes as it
// takes, a producer without a lane whose queue load passed LaneAfter
// frames (the producer's own measure of a pair that wants a lane) is busy;
// the busiest is the one that moved most bytes. The victim is the lane
// used least recently (of those equal, the lightest), of a producer whose
// lane's gate is open (it writes the lane: a lane mapped but not yet
// taken is never asked back), and only if the busy pair moves more than
// twice its bytes, so two busy pairs never trade a lane back and forth.
// The consumer sends ctlLaneRetire over the victim's connection, and
// notes the busy pair (grantTo). One ask is out at a time; one that was
// not answered within LaneIdle of looks lapses (its producer keeps lanes
// for good, LaneIdle negative, or cannot retire it yet).
//
// The producer retires it as it retires an idle lane (retireLane: the
// closing record, then the queue): at the pair's next send (the
// connection's watcher sets retireAsk, which sends check beside blOn, and
// which takes a lane writer after SerialSends through the ring's lock,
// where a retirement may run), or at the next RetireIdle, at once rather
// than at its next look (the transport's asked flag). A lane with a
// backlog, a reference record not yet passed or no room for the closing
// record waits, as for an idle one. An ask that finds the pair without a
// lane is dropped: the pair retired it on its own already, and the
// consumer's ctlLaneFree, which comes after the ask on the connection,
// answers it.
//
// The consumer reads the lane to its closing record and frees it as
// always (freeRetired); the slot goes to the busy pair before producers
// can see it free (keepLane, under inMu, before noteLanesIn): the lane is
// kept for it (reserved: the queue's header still says no lane is to
// spare, and mapLane refuses another pair's), and the consumer offers it
// (ctlLaneOffer). The pair's next frame asks for a lane whatever the
// header says and however few frames it sent (offered), and from there on
// it is the hand-over of a lane on demand, its gate keeping the pair's
// order. A kept lane not asked for within LaneIdle of looks lapses (the
// producer writes as many lanes as it may, say), and that pair is not
// offered one again for eight LaneIdles. A lane freed for any other reason
// (an idle one retired, a producer gone) while an ask is out serves the
// busy pair the same way.
//
// Order is kept by the hand-overs both ways as before: nothing here
// writes a record. The races: an ask and the producer's own idle
// retirement (both run under the ring's lock, and the second finds no
// lane); an ask and sends (the retirement runs in a send or under the
// caller's lock, SerialSends); the victim or the busy pair gone
// (forgetAsks); a consumer whose lane the producer retired before the
// ask arrived (dropped, above).

const (
	ctlLaneRetire = 7 // consumer → producer: retire the lane (a busier pair waits for it)
	ctlLaneOffer  = 8 // consumer → producer: a lane is kept for the pair: ask for it now

	// askLooks is how many looks of RetireIdle (eighths of LaneIdle) an
	// ask and a kept lane wait before they lapse.
	askLooks = 8
)

// decay is a load after one more look: about the last eight looks'
// traffic (the +7 lets a load that stopped fall to 0).
func decay(load, d uint64) uint64 { return load - (load+7)/8 + d }

// lookAtLanes is the Recv side's look at its lanes and its producers'
// queue traffic, once per look of RetireIdle (tick): it notes each lane's
// use and each pair's load, lets an ask or a kept lane that waited too
// long lapse, and asks a lane back for a busy pair (see above). Recv side
// (commit).
func (t *Transport) lookAtLanes(tick uint32) {
	t.inTick = tick
	if t.opts.Lanes == 0 {
		return
	}
	after := uint64(max(t.opts.LaneAfter, 1))
	var busy, victim *inRing
	for _, r := range *t.in.Load() {
		df, d := r.qFrames-r.qfMark, r.qBytes-r.qbMark
		r.qfMark, r.qbMark = r.qFrames, r.qBytes
		lane := r.lane.Load() && !r.closed // closed: freed at this commit
		if lane {
			if !r.laneSeen {
				r.laneSeen, r.useCur, r.usedAt = true, 0, tick // its cursor starts at 0
			}
			if r.cur != r.useCur {
				d += r.cur - r.useCur
				r.useCur, r.usedAt = r.cur, tick
			}
		}
		r.qfLoad, r.load = decay(r.qfLoad, df), decay(r.load, d)
		if r.gone || r.dead.Load() {
			continue
		}
		if lane {
			if r.gate == 0 && (victim == nil || int32(r.usedAt-victim.usedAt) < 0 ||
				r.usedAt == victim.usedAt && r.load < victim.load) {
				victim = r
			}
			continue
		}
		if r.qfLoad >= after && int32(tick-r.snubUntil) >= 0 && (busy == nil || r.load > busy.load) {
			busy = r
		}
	}
	if t.askV != nil && int32(tick-t.askAt) >= askLooks {
		t.askV, t.grantTo = nil, nil
		t.cnt.askLapsed.Add(1)
	}
	t.inMu.Lock()
	if g := t.reserved; g != nil && int32(tick-t.offerAt) >= askLooks {
		t.reserved = nil
		g.snubUntil = tick + 8*askLooks
		t.noteLanesIn()
		t.cnt.askLapsed.Add(1)
	}
	full := t.lanesIn >= t.opts.Lanes && t.reserved == nil
	t.inMu.Unlock()
	if !full || t.askV != nil || busy == nil || victim == nil || busy.load <= 2*victim.load {
		return
	}
	var m [ctlLen]byte
	putCtl(m[:], ctlLaneRetire, 0, 0, 0)
	if _, err := victim.conn.Write(m[:]); err != nil {
		return // the producer is gone: its lane is freed with it
	}
	t.askV, t.askAt, t.grantTo = victim, tick, busy
	t.cnt.askedBack.Add(1)
}

// keepLane keeps a lane to spare for the busy pair an ask is out for, if
// there is one to spare now, and returns that pair, for offer (nil: none).
// Recv side, inMu held; the caller notes the queue's header after.
func (t *Transport) keepLane() *inRing {
	g := t.grantTo
	if g == nil || t.reserved != nil || t.lanesIn >= t.opts.Lanes {
		return nil
	}
	t.grantTo, t.askV = nil, nil
	if g.dead.Load() || g.lane.Load() || t.closed.Load() {
		return nil
	}
	t.reserved, t.offerAt = g, t.inTick
	return g
}

// offer tells producer g that a lane is kept for its pair (keepLane).
// Recv side, inMu not held.
func (t *Transport) offer(g *inRing) {
	if g == nil {
		return
	}
	var m [ctlLen]byte
	putCtl(m[:], ctlLaneOffer, 0, 0, 0)
	_, _ = g.conn.Write(m[:]) // a producer gone meanwhile: commitDead frees the lane kept
}

// forgetAsks drops what the consumer asked or kept for producer r, which
// went away. Recv side, inMu held.
func (t *Transport) forgetAsks(r *inRing) {
	if t.askV == r {
		t.askV = nil
	}
	if t.grantTo == r {
		t.grantTo = nil
	}
	if t.reserved == r {
		t.reserved = nil
	}
	r.laneSeen = false
}

// retireAsked retires o's lane, which its consumer asked back (see
// above), and reports whether it did. An ask that finds no lane is
// dropped (the pair retired it already), as is one to a transport whose
// lanes are kept for good (LaneIdle negative); a lane that cannot be
// retired yet (a backlog, a reference record not passed, no room for the
// closing record) is tried again at the next send and RetireIdle, until
// the epoch after the ask's is over (the consumer's ask has lapsed by
// then), so RetireIdle does not look at such a lane for good. o.mu held
// (and, after SerialSends, the caller's lock).
func (t *Transport) retireAsked(o *outRing) bool {
	if o.data == nil || o.shut || o.dead.Load() || t.opts.LaneIdle < 0 {
		o.retireAsk.Store(false)
		return false
	}
	if !t.retireLane(o) {
		if t.epoch.Load()-o.askEpoch.Load() > 1 {
			o.retireAsk.Store(false) // lapsed
			return false
		}
		t.asked.Store(true)
		return false
	}
	o.retireAsk.Store(false)
	t.cnt.retiredAsked.Add(1)
	return true
}

// retireAllAsked retires the lanes whose consumers asked for them back
// (RetireIdle, idleMu held), and returns how many it retired.
func (t *Transport) retireAllAsked() int {
	m := t.outSnap.Load()
	if m == nil {
		return 0
	}
	n := 0
	for _, o := range *m {
		if !o.retireAsk.Load() {
			continue
		}
		o.mu.Lock()
		if t.retireAsked(o) {
			n++
		}
		o.mu.Unlock()
	}
	return n
}
