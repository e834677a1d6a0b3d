package shm

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"golang.org/x/sys/unix"
)

// Queue and lanes: how a pair's frames travel.
//
// A producer's first frames to a peer go through the peer's receive queue
// (queue.go), which every producer maps and the consumer polls with one
// load, however many peers it has. A pair that keeps sending gets a lane:
// after Options.LaneAfter frames through the queue, the producer has a
// goroutine create a ring of its own (ring.go) and pass it over the
// pair's connection (ctlLane); the consumer maps it if it reads fewer
// than Options.Lanes lanes, and answers. The producer waits neither for
// the ring (makeLane) nor for the answer, which would be a round trip
// under the caller's lock (mx's board lock, which its own receive loop
// needs): the pair's frames go on through the queue,
// and the producer takes the lane at its first frame after the answer
// came with no backlog left (laneReady). Only a frame sent in place, which
// no queue carries, and the first frame of a pair that is to have a lane
// at once (LaneAfter < 0, a round trip like the connection's own) wait for
// it. A producer writes at most Options.Lanes lanes, so a process maps at
// most that many rings each way, and the queues of the peers it sends to:
// memory that grows with the number of peers by one queue each, not by
// two rings. A refused pair stays on the queue, and asks again after
// another LaneAfter frames through it (a consumer that reads as many
// lanes as it takes says so in its queue's header, so asking it costs a
// load, not a round trip).
//
// Order across the hand-over. When the producer takes the lane, it writes
// the gate, the queue cursor just past its last queue record, into the
// lane's header, then the pair's frames into the lane and no more into
// the queue. Its frames in the queue all lie below the gate, so the
// consumer, which reads the gate once it finds the lane's first record
// (whose word's load acquires it), reads the lane only once its queue
// cursor has reached the gate (a lane whose gate is ahead is skipped, its
// summary bit kept pending): every frame of the pair from the queue has
// been returned by then, and the pair's frames come out in the order they
// were sent.
//
// Retiring a lane: the hand-over the other way. A lane on which its
// producer wrote nothing for Options.LaneIdle is retired by RetireIdle
// (mx calls it from its board's timers): the producer writes a closing
// record as the lane's last record (retireLane: never with a backlog
// left, whose frames go into the lane first), unmaps its side and sends
// the pair's next frames through the queue. Its first queue record after
// the closing record is published after it, so the consumer, whose load
// of that record's word acquires the closing record, finds the lane
// holding records when it meets a queue record of a producer whose lane
// it still reads with its queue cursor at or past the lane's gate (a
// queue record below the gate is one from before the lane: laneFirst),
// and reads the lane to its closing record before it returns that queue
// record. Having read the closing record, it unmaps the lane at its next
// commit, when no frame it returned points into it any more
// (freeRetired), and answers over the pair's connection (ctlLaneFree);
// until that answer, the producer asks for no lane (the consumer reads
// one lane per producer), after it, the pair asks again once it is busy
// again: after LaneAfter frames through the queue within one LaneIdle
// (RetireIdle starts every pair's count again once per LaneIdle, so a
// pair that sends a frame now and then does not pass LaneAfter in the
// end). So a pair's frames keep their order across both hand-overs,
// however often they alternate, and the lanes go to the pairs busy now.
// A producer that writes as many lanes as it may, with a pair that asks
// for one, retires the lane idle longest once it has been idle for an
// eighth of LaneIdle: the busier pair gets it at its next ask. A consumer
// at its bound with a busy pair on its queue asks the producer of its
// lane used least recently to retire it (ctlLaneRetire), and keeps the
// lane freed for the busy pair (askback.go).

const (
	ctlLane     = 4 // producer → consumer: a lane's ring (memfd); id: its size, size: the gate
	ctlLaneAns  = 5 // consumer → producer: status 0 the lane is read, 1 refused (no lane to spare), 2 refused (a bad ring)
	ctlLaneFree = 6 // consumer → producer: the lane was read to its closing record and unmapped

	defaultLaneAfter = 64
	defaultLanes     = 8
	maxQueueSize     = 64 << 20
)

// DefaultLaneIdle is Options.LaneIdle's default: a lane costs a few
// milliseconds to make (its segment's pages are populated), so a pair
// that gets it back within this long pays a few percent of its time for
// it at most, and a process that stops talking to a peer gives the
// lane's memory back within a tenth of a second or so (at the next run of
// the timers that call RetireIdle).
const DefaultLaneIdle = 100 * time.Millisecond

// newProducerID gives r the lowest free producer id of the receive queue
// (inMu held), or reports that all are taken.
func (t *Transport) newProducerID(r *inRing) bool {
	for range qMaxID {
		id := t.qNextID
		if t.qNextID++; t.qNextID > qMaxID {
			t.qNextID = 1
		}
		if _, used := t.qProd[id]; !used {
			r.qid = id
			t.qProd[id] = r
			if id > t.qHigh.Load() {
				t.qHigh.Store(id)
			}
			return true
		}
	}
	return false
}

// ---- producer side ----

// wantLane reports whether the frame about to go through o's queue is the
// one after which the pair asks for a lane. o's writers are serialized.
func (t *Transport) wantLane(o *outRing) bool {
	if o.noLane {
		return false
	}
	if e := t.epoch.Load(); o.epoch != e {
		o.epoch, o.viaQueue = e, 0 // a new LaneIdle: busy now, not once
	}
	o.viaQueue++
	return o.viaQueue > t.opts.LaneAfter
}

// noteLanesIn tells producers, in the queue's header, whether we take
// another lane, so that they do not ask (each question costs a round trip
// over the pair's connection, which a sender waits for). inMu held.
func (t *Transport) noteLanesIn() {
	full := uint32(0)
	if t.lanesIn >= t.opts.Lanes || t.reserved != nil && t.lanesIn+1 >= t.opts.Lanes {
		full = 1 // a lane kept for a busier pair (askback.go) is taken
	}
	if t.q.lanesFull.Load() != full {
		t.q.lanesFull.Store(full)
	}
}

// laneReady reports whether o's pair writes its lane from this frame on.
// After Options.LaneAfter frames through the queue (at once with now: a
// frame sent in place, which only a lane carries), the producer asks for
// a lane (askLane) and goes on through the queue without waiting for the
// answer; it takes the lane at the first frame after the consumer
// accepted it with no backlog left (takeLane), since frames in the
// backlog are to come out before the lane's. o's writers are serialized
// (o.mu held: a pair without a lane always takes it).
func (t *Transport) laneReady(o *outRing, now bool) bool {
	if o.data != nil {
		return true
	}
	if o.noLane {
		return false
	}
	if o.retiring {
		// The consumer reads its lane to the closing record first.
		if !o.laneFreed.Load() {
			return false
		}
		o.laneFreed.Store(false)
		o.retiring = false
	}
	if !o.laneAsked {
		// A consumer that keeps a lane for the pair offered it
		// (askback.go): asked for at once.
		if !t.wantLane(o) && !now && !o.offered.Load() {
			return false
		}
		t.askLane(o, now || t.opts.LaneAfter < 0 && o.q.end == 0)
		if o.noLane || !o.laneAsked {
			return false // none to be had now (askLane)
		}
	}
	if o.laneOK == 0 {
		// A frame in place, and the first frame of a pair that is to
		// have a lane at once (LaneAfter < 0, as when it connected),
		// wait for the answer: only a lane carries a reference record,
		// and such a pair has its lane from its first frame.
		// A lane still being made (makeLane, which needs o.mu) is not
		// waited for: the frame goes through the queue, copied.
		wait := (now || t.opts.LaneAfter < 0 && o.q.end == 0) && !o.making
		if !t.laneAnswer(o, wait) {
			return false
		}
	}
	return t.answered(o)
}

// answered acts on the consumer's answer in o.laneOK: a lane refused is
// given back, one accepted is taken if no backlog waits. It reports
// whether the pair writes its lane now. o.mu held.
func (t *Transport) answered(o *outRing) bool {
	if o.laneOK >= 2 {
		t.refused(o)
		return false
	}
	if len(o.backlog) > 0 {
		return false
	}
	t.takeLane(o)
	return true
}

// refused gives back o's lane, which the consumer refused: the pair stays
// on the queue, and asks again after another LaneAfter frames; for good
// if the lane could not be made or passed (laneOK 3). o.mu held.
func (t *Transport) refused(o *outRing) {
	o.seg.unmap()
	if o.laneBytes.Swap(0) != 0 {
		t.lanesOut.Add(-1)
	}
	if o.laneOK == 3 {
		o.noLane = true
	}
	o.laneAsked, o.laneOK, o.viaQueue = false, 0, 0
}

// settleLane, for a pair that asked for a lane and has not taken it,
// takes the consumer's answer if it came: a lane refused is given back,
// and one accepted is taken if no backlog waits, as the pair's next frame
// would (laneReady). A pair that went idle right after it asked sends no
// next frame, and its lane, mapped on both sides, would stay until the
// pair's connection closed: taken here, it is retired once idle, as any
// lane. It reports whether the pair writes its lane now. o.mu held.
func (t *Transport) settleLane(o *outRing) bool {
	if o.data != nil {
		return true
	}
	if !o.laneAsked || o.making || o.retiring || o.laneOK == 0 && !t.laneAnswer(o, false) {
		return false
	}
	return t.answered(o)
}

// laneAnswer takes the consumer's answer to o's lane into o.laneOK, if it
// came, or with wait, waiting for it at most handshakeTTL. It reports
// whether o.laneOK holds an answer: 1 accepted, 2 refused for now (no
// lane to spare), 3 for good (the lane could not be made, passed or
// mapped, or no answer came in time: an answer that came later could be
// taken for the answer to a later ask, so the pair never asks again).
// o.mu held.
func (t *Transport) laneAnswer(o *outRing, wait bool) bool {
	st := uint32(1)
	select {
	case st = <-o.laneAns:
	default:
		if !wait {
			return false
		}
		st = 2 // no answer in time, or the peer gone: for good
		timer := time.NewTimer(handshakeTTL)
		select {
		case st = <-o.laneAns:
		case <-o.gone:
		case <-timer.C:
		}
		timer.Stop()
	}
	switch st {
	case 0:
		o.laneOK = 1
	case 1:
		o.laneOK = 2
	default:
		o.laneOK = 3
	}
	return true
}

// askLane asks for a lane to o's peer without waiting. With a spare
// segment made ahead (spare.go) it passes that at once; with wait, as a
// frame in place and a pair that has its lane from its first frame do,
// it makes the lane itself. Otherwise the lane is made by a goroutine
// (makeLane): its segment is mapped with every page populated, which on
// hugepages zeroes some 4 MiB in the kernel (0.6 ms on an idle core,
// milliseconds on a loaded one), and the pair's frames go on through the
// queue meanwhile instead of waiting for that under the caller's lock.
// The consumer answers from its connection's watcher, and laneReady looks
// for the answer at the pair's next frames. On any failure the pair stays
// on the queue for good. o.mu held.
func (t *Transport) askLane(o *outRing, wait bool) {
	o.laneAsked = true
	if o.q.lanesFull.Load() != 0 && !o.offered.Load() {
		// The consumer reads as many lanes as it takes: it says no
		// without being asked. The pair asks again after another
		// LaneAfter frames (a lane of the consumer's may retire
		// meanwhile); counted once until it has a lane.
		o.laneAsked, o.viaQueue = false, 0
		if !o.refusedNoted.Swap(true) {
			t.cnt.lanesRefused.Add(1)
		}
		return
	}
	// A spare (spare.go) comes with its place among the lanes written.
	seg, fd, spare := t.takeSpare()
	// Not under outMu: o's writers hold o.mu, and Close and outFor take
	// outMu before o.mu.
	for !spare {
		n := t.lanesOut.Load()
		if t.closed.Load() {
			o.noLane = true
			return
		}
		if int(n) >= t.opts.Lanes {
			// We write as many lanes as we may: RetireIdle retires
			// the idlest for this pair, which asks again after
			// another LaneAfter frames.
			o.laneAsked, o.viaQueue = false, 0
			t.laneWanted.Store(true)
			return
		}
		if t.lanesOut.CompareAndSwap(n, n+1) {
			break
		}
	}
	o.offered.Store(false) // asked: the offer is answered
	for len(o.laneAns) > 0 {
		<-o.laneAns
	}
	if spare || wait {
		if !spare {
			var err error
			if seg, fd, err = t.newLane(); err != nil {
				o.noLane = true
				t.lanesOut.Add(-1)
				return
			}
		}
		// Mapped from here: Footprint counts it, close unmaps it.
		o.seg = seg
		o.laneBytes.Store(int64(len(seg.mem)))
		err := o.sendCtl(ctlLane, binary.LittleEndian.Uint32(seg.mem[sizeOff:]), 0, fd)
		unix.Close(fd)
		if err != nil {
			o.laneOK = 3 // laneReady gives it back
		}
		return
	}
	// Close takes blMu after it sets closed: a goroutine started here is
	// in the wait group before Close waits for it (as listBacklog's).
	t.blMu.Lock()
	if t.closed.Load() {
		t.blMu.Unlock()
		o.noLane = true
		t.lanesOut.Add(-1)
		return
	}
	t.wg.Add(1)
	t.blMu.Unlock()
	o.making = true
	go t.makeLane(o)
}

// newLane makes a lane's segment, its header written, and returns it with
// its memfd.
func (t *Transport) newLane() (segment, int, error) {
	size := t.ringSize()
	mk := t.laneSeg
	if mk == nil {
		mk = newSegment
	}
	seg, fd, err := mk("gomx-ring", ringSegLen(size), !t.opts.NoHugepages && ringSegLen(size)%hugePage == 0)
	if err != nil {
		return segment{}, -1, err
	}
	le := binary.LittleEndian
	le.PutUint32(seg.mem[magicOff:], ringMagic)
	le.PutUint32(seg.mem[sizeOff:], uint32(size))
	return seg, fd, nil
}

// makeLane is askLane's goroutine: it makes o's lane, hands its segment
// to o (under o.mu, which o's writers hold) and passes it to the consumer.
// A failure is answered as a refusal (status 2 in laneAns, which
// laneReady reads at the pair's next frame); a ring closed meanwhile gets
// no lane.
func (t *Transport) makeLane(o *outRing) {
	defer t.wg.Done()
	seg, fd, err := t.newLane()
	o.mu.Lock()
	o.making = false
	if err != nil || o.shut || t.closed.Load() {
		o.mu.Unlock()
		if err == nil {
			seg.unmap()
			unix.Close(fd)
		}
		t.lanesOut.Add(-1)
		o.refuse()
		return
	}
	// Mapped from here: Footprint counts it, close unmaps it.
	o.seg = seg
	o.laneBytes.Store(int64(len(seg.mem)))
	o.mu.Unlock()
	err = o.sendCtl(ctlLane, binary.LittleEndian.Uint32(seg.mem[sizeOff:]), 0, fd)
	unix.Close(fd)
	if err != nil {
		// laneReady gives the segment back (the ring's close does, if
		// it comes first).
		o.refuse()
	}
}

// refuse answers o's lane as refused, as a consumer's refusal would.
func (o *outRing) refuse() {
	select {
	case o.laneAns <- 2:
	default:
	}
}

// takeLane makes o's accepted lane the pair's way from now on: it stores
// the gate, the queue cursor just past the pair's last queue record, into
// the lane's header before the lane's first record, so the consumer, which
// loads the gate only after it found a record (whose word's load acquires
// the gate), reads the lane only once its queue cursor has passed the
// gate. o.mu held, and no backlog.
func (t *Transport) takeLane(o *outRing) {
	size := int(binary.LittleEndian.Uint32(o.seg.mem[sizeOff:])) // ours: askLane wrote it
	u64At(o.seg.mem, ringGateOff).Store(o.q.end + 1)
	o.producer = newProducer(o.seg.mem[dataOff:dataOff+size], 0)
	o.head = u64At(o.seg.mem, headOff)
	o.wait = u32At(o.seg.mem, ringWaitOff)
	o.notifyWords.notify = u32At(o.seg.mem, ringNotifyOff)
	o.headSeen, o.idleMark = 0, false
	o.refusedNoted.Store(false)
	o.offered.Store(false)
}

// retireLane ends o's lane (see "Retiring a lane" above): it writes the
// closing record, unmaps our side of the lane and sends the pair's next
// frames through the queue, unless the lane is not done with: a backlog
// or a reference record the consumer has not passed waits for it, and a
// lane too full for the closing record is not idle. It reports whether
// the lane was retired. o.mu held (and, after SerialSends, the caller's
// lock, which SendParts to o's lane takes instead).
func (t *Transport) retireLane(o *outRing) bool {
	if o.data == nil || o.shut || o.dead.Load() || len(o.backlog) != 0 {
		return false
	}
	if o.reapRefs(); len(o.refs) != 0 {
		return false
	}
	start := o.cur
	at, ok := t.room(o, recordLen(0))
	if !ok {
		return false
	}
	o.putRecord(at, closeMark, nil)
	o.publish(start)
	// The consumer keeps its own mapping until it has read the lane.
	o.seg.unmap()
	o.producer = producer{}
	o.head, o.wait, o.notifyWords.notify = nil, nil, nil
	o.laneBytes.Store(0)
	t.lanesOut.Add(-1)
	o.retiring, o.idleMark = true, false
	o.laneAsked, o.laneOK, o.viaQueue = false, 0, 0
	t.cnt.lanesRetired.Add(1)
	return true
}

// LanesOut reports how many lanes t writes now, spares left out: the
// lanes RetireIdle has to time. A caller whose timers have nothing else
// to do may call RetireIdle seldom while there are none (mx's idle board:
// it then only drops spare lanes, which cost memory and no frame), and
// every LaneIdle while there are: a lane retires at the first call
// LaneIdle after the call that found it idle.
func (t *Transport) LanesOut() int {
	t.spareMu.Lock()
	spares := len(t.spares) // each holds a place in lanesOut (spare.go)
	t.spareMu.Unlock()
	return max(int(t.lanesOut.Load())-spares, 0)
}

// LaneIdle is Options.LaneIdle as t took it: how long a lane may go
// without a frame before RetireIdle retires it (negative: never).
func (t *Transport) LaneIdle() time.Duration { return t.opts.LaneIdle }

// RetireIdle retires the lanes t writes on which nothing was sent for
// Options.LaneIdle up to now (see "Retiring a lane" above), and, when t
// writes as many lanes as it may and a pair without one asked for one,
// the lane idle longest if it was idle for an eighth of LaneIdle. It
// reports how many it retired. It is for the timers of the layer above
// (mx calls it at its board's timer runs), which give it their clock's
// reading (a test, its own); it looks at the lanes at most once per eighth
// of LaneIdle, so a caller may call it often, and it costs a look at each
// pair then. A lane is idle from the first call that finds its count of
// frames sent unchanged. After SerialSends, the caller serializes it with
// its sends, as it does them with each other.
func (t *Transport) RetireIdle(now time.Time) int {
	idle := t.opts.LaneIdle
	if idle < 0 || t.closed.Load() {
		return 0
	}
	t.idleMu.Lock()
	defer t.idleMu.Unlock()
	n := 0
	if t.asked.Load() && t.asked.Swap(false) {
		n = t.retireAllAsked() // askback.go: at once, not once per look
	}
	if now.Sub(t.lastSweep) < idle/8 {
		return n
	}
	t.lastSweep = now
	t.tick.Add(1)        // the Recv side's look at its lanes (askback.go)
	t.dropOldSpares(now) // spare.go
	if now.Sub(t.epochAt) >= idle {
		t.epochAt = now
		t.epoch.Add(1)
	}
	m := t.outSnap.Load()
	if m == nil || t.lanesOut.Load() == 0 {
		return n
	}
	var victim *outRing
	for _, o := range *m {
		if o.laneBytes.Load() == 0 {
			continue
		}
		o.mu.Lock()
		switch sent := o.sent.Load(); {
		case !t.settleLane(o): // asked for, not answered, or a backlog waits
		case !o.idleMark || sent != o.idleSent:
			o.idleMark, o.idleSent, o.idleSince = true, sent, now
		case now.Sub(o.idleSince) >= idle:
			if t.retireLane(o) {
				n++
			}
		case now.Sub(o.idleSince) >= idle/8 && (victim == nil || o.idleSince.Before(victim.idleSince)):
			victim = o
		}
		o.mu.Unlock()
	}
	if n > 0 {
		t.laneWanted.Store(false) // the pair that asked gets one of these
	} else if victim != nil && t.laneWanted.Swap(false) {
		victim.mu.Lock()
		if victim.idleMark && victim.sent.Load() == victim.idleSent && t.retireLane(victim) {
			n++
		}
		victim.mu.Unlock()
	}
	return n
}

// The backlog. A producer that finds its peer's queue (or its lane) full
// does not wait for room: the caller may hold a lock its own receive loop
// needs (mx's board lock, under which every send runs), and the peer it
// waits for may be waiting for room in our queue under its own: a cycle
// that only a timeout would break. Instead the frame is copied into the
// pair's backlog, in private memory, and the send returns; the pair's
// later frames join the backlog behind it, so the pair's order holds, and
// the backlog goes into the queue or lane, in order, as room appears: by
// the pair's next send, and by the transport's flusher goroutine, which
// runs while any backlog is left and holds no lock but the ring's. A pair
// takes no lane while it has a backlog in the queue (its frames there
// would otherwise come out after the lane's); a lane writer after
// SerialSends, which takes no lock, takes the ring's while a backlog
// waits (blOn), since the flusher writes the lane then.
//
// Waking the flusher. A producer whose backlog finds no room says so (the
// queue's bitmap of waiting producers and its wait flag, or the lane's
// wait word) and then looks for room once more; the consumer, once it
// has published its head, looks at the flag (sequentially consistent on
// both sides: either the producer sees the room or the consumer sees the
// flag) and writes the room bell of every producer whose bit is set, an
// eventfd the producer passed with its hello. The flusher sleeps on its
// room bell between passes that moved nothing, so a backlog moves as soon
// as the consumer frees room, with no polling. Its sleep is bounded
// (FullWait) only as a safety net: nothing is dropped for the time a
// backlog waits, so a wake-up that came late would cost time, not frames.
//
// Bounds. The backlogs of a transport hold at most maxBacklog bytes. A
// frame within that bound is never dropped, however long its consumer
// takes: the consumer may be alive but without a CPU for a while (a
// loaded machine, or the sender itself in the same process taking the
// CPU while it fills the backlog), and nothing is gained by dropping a
// frame that costs the sender no wait. A frame that would pass the bound
// waits, as for room in a full ring, until its pair's backlog has gone
// into the queue and the frame's cells are free, or the backlogs have
// room; the sender gives the CPU away meanwhile, and gives up only once
// the pair's consumer took nothing for FullWait of that wait (it is stuck
// or gone): the frame is dropped and counted as for a full ring
// (SendStrict and SendParts fail with ErrRingFull). So memory stays
// bounded, a stuck consumer holds a sender at most FullWait a frame, and
// a consumer that moves at all within FullWait loses nothing. A peer that
// goes away takes its backlog with it (dropped, counted).

// maxBacklog bounds the bytes waiting in a transport's backlogs.
const maxBacklog = 16 << 20

// queueFrame writes one frame, head followed by parts (l bytes in all),
// into o's peer's receive queue and rings its doorbell if it sleeps, or,
// when the queue is full or frames of the pair wait already, appends it to
// the pair's backlog (backlogFrame). o.mu held.
func (t *Transport) queueFrame(o *outRing, l int, head []byte, parts [][]byte) error {
	t.flushBacklog(o)
	if len(o.backlog) == 0 {
		if c, ok := o.q.claim(uint64(cellsFor(l))); ok {
			t.putQueue(o, c, l, head, parts)
			return nil
		}
	}
	return t.backlogFrame(o, l, head, parts)
}

// backlogFrame appends a frame (head followed by parts, l bytes) to o's
// backlog: its queue (no lane) or its lane was full, or frames wait
// already. A frame that fits in the backlogs' bound is never dropped,
// however long the consumer takes: it costs the sender no wait. Past the
// bound the sender waits (waitBacklog), and the frame is dropped (counted,
// ErrRingFull) only once o's consumer took nothing for FullWait of that
// wait. o.mu held.
func (t *Transport) backlogFrame(o *outRing, l int, head []byte, parts [][]byte) error {
	if t.blBytes.Load()+int64(l) > maxBacklog {
		ok, fits := t.waitBacklog(o, l, head, parts)
		if !ok {
			t.cnt.dropFull.Add(1)
			return t.dropErr(o)
		}
		if !fits {
			return nil // written
		}
	}
	b := make([]byte, 0, l)
	b = append(b, head...)
	for _, p := range parts {
		b = append(b, p...)
	}
	o.backlog = append(o.backlog, b)
	t.blBytes.Add(int64(l))
	t.cnt.backlogged.Add(1)
	if len(o.backlog) == 1 {
		o.blOn.Store(true)
		t.listBacklog(o)
		// Say that we wait and look once more (flushBacklog): room
		// freed after that rings our room bell, and the flusher moves
		// the backlog.
		t.flushBacklog(o)
	}
	return nil
}

// consumerHead is the head o's consumer published last: its lane's, or,
// without one, its queue's.
func (o *outRing) consumerHead() uint64 {
	if o.data != nil {
		return o.head.Load()
	}
	return o.q.head.Load()
}

// waitBacklog waits, as for room in a full ring, until a frame of l
// bytes fits in the backlogs (fits), or o's backlog has gone into the
// queue or lane and the frame too (written: fits false). It gives up (ok
// false) once o's consumer took nothing for FullWait, or the peer or we
// went away. o.mu held.
func (t *Transport) waitBacklog(o *outRing, l int, head []byte, parts [][]byte) (ok, fits bool) {
	h := o.consumerHead()
	deadline := time.Now().Add(t.opts.FullWait)
	for i := 0; ; i++ {
		if t.flushBacklog(o); len(o.backlog) == 0 && t.putNow(o, l, head, parts) {
			return true, false
		}
		if t.blBytes.Load()+int64(l) <= maxBacklog {
			return true, true
		}
		if o.dead.Load() || o.shut || t.closed.Load() {
			return false, false
		}
		if nh := o.consumerHead(); nh != h {
			h = nh
			deadline = time.Now().Add(t.opts.FullWait)
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				return false, false
			}
			time.Sleep(10 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// putNow writes a frame into o's lane or queue if it has room now, and
// publishes it. o.mu held.
func (t *Transport) putNow(o *outRing, l int, head []byte, parts [][]byte) bool {
	if o.data == nil {
		c, ok := o.q.claim(uint64(cellsFor(l)))
		if ok {
			t.putQueue(o, c, l, head, parts)
		}
		return ok
	}
	at, ok := t.room(o, recordLen(l))
	if ok {
		start := o.cur
		o.putParts(at, uint32(l), l, head, parts)
		o.countSent()
		o.publish(start)
	}
	return ok
}

// putQueue writes a frame into the k cells claimed at c of o's peer's
// queue, publishes it and rings the peer's doorbell if it sleeps.
func (t *Transport) putQueue(o *outRing, c uint64, l int, head []byte, parts [][]byte) {
	o.q.put(c, l, head, parts)
	o.countSent()
	// Sequentially consistent with the consumer's store of sleeping and
	// its look at the queue (Dekker, as for a ring: publish).
	if o.slp.Load() != 0 {
		kick(o.ev)
		o.wakes.Add(1)
	}
}

// flushBacklog moves o's backlog into its peer's queue, or its lane, in
// order, as far as there is room, and drops it if the peer or we went
// away. When frames are left, it says that the producer waits (the
// queue's wantRoom, or the lane's wait word: the consumer then writes our
// room bell once it frees room) and looks once more, so room freed at any
// time either moves them here or wakes the flusher. o.mu held.
func (t *Transport) flushBacklog(o *outRing) {
	if len(o.backlog) == 0 {
		return
	}
	if o.dead.Load() || o.shut || t.closed.Load() {
		o.dropBacklog()
		return
	}
	i := 0
	start := o.cur
	for armed := false; ; armed = true {
		for ; i < len(o.backlog); i++ {
			if !t.moveOne(o, o.backlog[i]) {
				break
			}
			t.blBytes.Add(-int64(len(o.backlog[i])))
			o.backlog[i] = nil
		}
		if i == len(o.backlog) || armed {
			break
		}
		if o.data == nil {
			o.q.wantRoom()
		} else {
			// Sequentially consistent with the consumer's store of its
			// head and load of this word (commit), as for the queue.
			o.wait.Store(1)
		}
	}
	if o.data != nil && i > 0 {
		o.publish(start)
		o.clearAhead(o.headSeen + uint64(len(o.data)))
	}
	if i == 0 {
		return
	}
	n := copy(o.backlog, o.backlog[i:])
	clear(o.backlog[n:])
	o.backlog = o.backlog[:n]
	if n == 0 {
		o.blOn.Store(false)
	}
}

// moveOne writes frame b of o's backlog into its queue or lane, if there
// is room; a record in the lane is published by the caller. o.mu held.
func (t *Transport) moveOne(o *outRing, b []byte) bool {
	if o.data == nil {
		c, ok := o.q.claim(uint64(cellsFor(len(b))))
		if ok {
			t.putQueue(o, c, len(b), b, nil)
		}
		return ok
	}
	at, ok := t.room(o, recordLen(len(b)))
	if ok {
		o.putRecord(at, uint32(len(b)), b)
		o.countSent()
	}
	return ok
}

// dropBacklog drops o's backlog (its peer or we went away), counted as
// frames dropped. o.mu held.
func (o *outRing) dropBacklog() {
	for _, b := range o.backlog {
		o.blBytes.Add(-int64(len(b)))
		o.dropped.Add(1)
	}
	clear(o.backlog)
	o.backlog = o.backlog[:0]
	o.blOn.Store(false)
}

// listBacklog lists o, whose backlog just got its first frame, for the
// flusher, and starts the flusher if it does not run. o.mu held.
func (t *Transport) listBacklog(o *outRing) {
	t.blMu.Lock()
	defer t.blMu.Unlock()
	if !o.blListed {
		o.blListed = true
		t.blOuts = append(t.blOuts, o)
	}
	// Close takes blMu after it sets closed: a flusher started here is
	// in the wait group before Close waits for it.
	if !t.flushing && !t.closed.Load() {
		t.flushing = true
		t.wg.Add(1)
		go t.flusher()
	}
}

// flusher moves the backlogs into their queues until none is left or the
// transport closes. A pass that moved nothing has said, for every backlog
// left, that its producer waits (flushBacklog), so the flusher sleeps on
// the room bell, which a consumer writes once it frees room one of them
// waits for (and Close, and a peer that goes away); at most FullWait, a
// safety net: no frame is dropped for the time it sleeps.
func (t *Transport) flusher() {
	defer t.wg.Done()
	var list []*outRing
	for {
		t.blMu.Lock()
		if len(t.blOuts) == 0 || t.closed.Load() {
			t.flushing = false
			t.blMu.Unlock()
			return
		}
		list = append(list[:0], t.blOuts...)
		t.blMu.Unlock()
		moved := t.flushPass(list)
		clear(list)
		if !moved {
			t.roomBell.wait(time.Now().Add(t.opts.FullWait))
		}
	}
}

// pollBacklogs is the receive side's share of the flusher's work, for a
// process whose backlogs wait (blBytes): Pending and Recv's spin call it
// at every look. Where the flusher goroutine shares its P with a receive
// loop that polls (one P, as a rank bound to one CPU has), it would run
// only once that loop sleeps, a spin window later; so the loop reads the
// room bell itself, without blocking, and when a consumer rang it, moves
// the backlogs it can lock at once (TryLock: a sender or the flusher
// holding a ring's lock flushes it anyway, and the receive side never
// waits for a lock a sender holds). A ring it could not lock gets the
// bell rung again, for the flusher.
func (t *Transport) pollBacklogs() {
	if t.closed.Load() {
		return
	}
	var b [8]byte
	if _, err := unix.Read(t.roomBell.fd, b[:]); err != nil {
		return // not rung (EAGAIN)
	}
	t.blMu.Lock()
	list := append(t.pollList[:0], t.blOuts...)
	t.blMu.Unlock()
	busy := false
	for _, o := range list {
		if !o.mu.TryLock() {
			busy = true
			continue
		}
		t.flushBacklog(o)
		t.unlistIfEmpty(o)
		o.mu.Unlock()
	}
	clear(list)
	t.pollList = list[:0]
	if busy {
		t.roomBell.ring()
	}
}

// unlistIfEmpty takes o off the flusher's list once its backlog is
// empty. o.mu held.
func (t *Transport) unlistIfEmpty(o *outRing) {
	if len(o.backlog) != 0 {
		return
	}
	t.blMu.Lock()
	if o.blListed {
		o.blListed = false
		t.blOuts = slices.DeleteFunc(t.blOuts, func(x *outRing) bool { return x == o })
	}
	t.blMu.Unlock()
}

// flushPass moves what it can of the backlogs of list into their queues,
// takes the rings whose backlog is empty off the flusher's list, and
// reports whether any frame moved.
func (t *Transport) flushPass(list []*outRing) bool {
	moved := false
	for _, o := range list {
		o.mu.Lock()
		before := len(o.backlog)
		t.flushBacklog(o)
		if len(o.backlog) != before {
			moved = true
		}
		t.unlistIfEmpty(o)
		o.mu.Unlock()
	}
	return moved
}

// drainBacklogs moves the backlogs into their queues before the transport
// closes: their frames were sent (mx completes a send on the lean path
// once SendParts returns), and they live only in our memory, where a
// frame written into a queue would have outlived us. It waits while
// frames move, and gives up on the rest once none moved for FullWait
// (their receivers are stuck or gone).
func (t *Transport) drainBacklogs() {
	var list []*outRing
	deadline := time.Now().Add(t.opts.FullWait)
	for i := 0; ; i++ {
		t.blMu.Lock()
		list = append(list[:0], t.blOuts...)
		t.blMu.Unlock()
		if len(list) == 0 {
			return
		}
		if t.flushPass(list) {
			deadline = time.Now().Add(t.opts.FullWait)
			continue
		}
		if time.Now().After(deadline) {
			return
		}
		if i&63 == 63 {
			time.Sleep(10 * time.Microsecond)
		} else {
			schedYield()
		}
	}
}

// writeQueue is writeLocked for a pair without a lane: the frames go
// through the peer's receive queue (or its backlog), copied (a frame of an
// in-place region too), until the pair gets a lane; the rest of the batch
// then goes there. A frame dropped past the backlog's bounds is skipped,
// or with strict ends the write with ErrRingFull.
func (t *Transport) writeQueue(o *outRing, frames []transport.Frame, refs, strict bool) (int, error) {
	for i := range frames {
		// A frame sent in place asks for the lane at once: only a lane
		// carries reference records.
		if t.laneReady(o, refs && frames[i].Region != nil && frames[i].Region.InPlace()) {
			n, err := t.writeLocked(o, frames[i:], refs, strict)
			return i + n, err
		}
		f := &frames[i]
		if len(f.Data) > o.mtu {
			return i, fmt.Errorf("%w: %d bytes, MTU %d", transport.ErrTooBig, len(f.Data), o.mtu)
		}
		if r := f.Region; r != nil {
			if err := r.Check(t, f); err != nil {
				return i, fmt.Errorf("shm: frame %d: %w", i, err)
			}
			r.Copied()
		}
		if err := t.queueFrame(o, len(f.Data), f.Data, nil); err != nil && strict {
			return i, err
		}
	}
	return len(frames), nil
}

// ---- consumer side ----

// inLane maps the lane producer r passed (ctlLane: its ring's memfd, size
// and gate), if we read fewer than Options.Lanes lanes and it is sound,
// makes it a cold ring of the receive set, and answers. Called by r's
// connection's watcher.
func (t *Transport) inLane(r *inRing, c interface{ Write([]byte) (int, error) }, m ctlMsg, fds []int) {
	status := t.mapLane(r, m, fds)
	var a [ctlLen]byte
	putCtl(a[:], ctlLaneAns, 0, status, 0)
	_, _ = c.Write(a[:])
}

// mapLane is inLane's work: 0, or why the lane is refused (1: no lane to
// spare, 2: a bad ring).
func (t *Transport) mapLane(r *inRing, m ctlMsg, fds []int) uint32 {
	size := int(m.id)
	if len(fds) != 1 || size%ringAlign != 0 || size < minRingLen || size > 1<<30 {
		closeAll(fds)
		return 2
	}
	t.inMu.Lock()
	// The last lane to spare may be kept for a busier pair (askback.go).
	kept := t.reserved != nil && t.reserved != r && t.lanesIn+1 >= t.opts.Lanes
	if t.lanesIn >= t.opts.Lanes || kept || r.data != nil || t.closed.Load() || r.dead.Load() {
		t.inMu.Unlock()
		closeAll(fds)
		return 1
	}
	if t.reserved == r {
		t.reserved = nil
		t.cnt.granted.Add(1)
	}
	t.lanesIn++ // taken now, given back on failure: a second lane waits for no mapping
	t.noteLanesIn()
	t.inMu.Unlock()
	seg, err := mapPeerFD(fds[0], ringSegLen(size), ringSegLen(size)+hugePage)
	le := binary.LittleEndian
	if err == nil && (le.Uint32(seg.mem[magicOff:]) != ringMagic || int(le.Uint32(seg.mem[sizeOff:])) != size || u64At(seg.mem, headOff).Load() != 0) {
		seg.unmap()
		err = errCorrupt
	}
	t.inMu.Lock()
	defer t.inMu.Unlock()
	if err != nil || t.closed.Load() {
		t.lanesIn--
		t.noteLanesIn()
		seg.unmap()
		return 2
	}
	r.seg, r.data = seg, seg.mem[dataOff:dataOff+size]
	r.head = u64At(seg.mem, headOff)
	r.cur, r.pos, r.pubHead = 0, 0, 0
	r.wordAt = u32At(r.data, recWordOff)
	r.pubEvery = min(uint64(size/8), pubEvery)
	r.notify = u32At(seg.mem, ringNotifyOff)
	// The gate comes with the lane's first record (takeLane).
	r.gate, r.gateW = gatePending, u64At(seg.mem, ringGateOff)
	r.wait = u32At(seg.mem, ringWaitOff)
	// Cold until it delivers (notify.go): set before the producer hears
	// back, so its first record sets the bit.
	r.bit = t.nextBit & 63
	t.nextBit++
	r.notifyCold()
	r.lane.Store(true) // the Recv side looks at r's lane fields after this
	t.setIn(*t.in.Load())
	return 0
}

// laneFirst reports whether producer r's lane holds records to return
// before r's record at the queue's cursor: r retired its lane, and wrote
// its closing record before that queue record, whose word's load
// acquired it (see "Retiring a lane" above). A lane with a record at its
// cursor and its gate open at the queue's cursor is such a lane: a
// queue record below the gate is one from before the lane. Recv side.
func (t *Transport) laneFirst(r *inRing) bool {
	if r == nil || !r.lane.Load() || r.closed || r.gone || r.wordAt.Load() == 0 {
		return false
	}
	return t.gateOpen(r)
}

// freeRetired unmaps the lanes whose closing record the Recv side read
// (pollRing), once no frame it returned points into them (commit), takes
// them out of the receive set, and tells each producer over the pair's
// connection that it may ask for a lane again. Recv side.
func (t *Transport) freeRetired() {
	t.anyRetired = false
	k := 0
	for _, h := range t.hot {
		if h.r.closed {
			h.r.hot = false
			continue
		}
		t.hot[k] = h
		k++
	}
	clear(t.hot[k:])
	t.hot = t.hot[:k]
	var freed []*inRing
	t.inMu.Lock()
	for _, r := range *t.in.Load() {
		if !r.closed {
			continue
		}
		r.closed = false
		if r.data == nil {
			continue // its producer went away meanwhile (commitDead)
		}
		r.seg.unmap()
		r.data, r.head, r.wordAt, r.gateW, r.wait, r.notify = nil, nil, nil, nil, nil, nil
		r.gate, r.coldHits, r.refsIn = 0, 0, false
		r.lane.Store(false)
		r.laneSeen = false
		if r == t.askV {
			t.askV = nil // asked back and freed (askback.go)
		}
		t.lanesIn--
		t.cnt.lanesClosedIn.Add(1)
		freed = append(freed, r)
	}
	// A lane freed goes to the busier pair it was asked back for,
	// before producers can read that we have one to spare.
	// The header is noted whether or not this commit freed one: the
	// slot kept may be one an earlier commit freed.
	g := t.keepLane()
	t.noteLanesIn()
	if len(freed) > 0 {
		t.setIn(*t.in.Load())
	}
	t.inMu.Unlock()
	var a [ctlLen]byte
	putCtl(a[:], ctlLaneFree, 0, 0, 0)
	for _, r := range freed {
		_, _ = r.conn.Write(a[:]) // a connection closed meanwhile: its producer is gone
	}
	t.offer(g)
}

// gatePending is a lane's gate before its producer took it (takeLane).
const gatePending = ^uint64(0)

// gateOpen reports whether lane r, which has a record at its cursor, may
// be read: the queue's cursor has reached its gate (or the queue is broken
// and delivers nothing more), and opens it for good if so. The gate is
// read from the lane's header once a record is there: the load of the
// record's word acquired it. Recv side.
func (t *Transport) gateOpen(r *inRing) bool {
	if r.gate == gatePending {
		g := r.gateW.Load()
		if g == 0 {
			return false // a record before the gate: a broken producer
		}
		r.gate = g - 1
	}
	if t.q.cur < r.gate && !t.q.broken {
		return false
	}
	r.gate = 0
	return true
}

// pollQueue reads records of the receive queue into frames[n:], in queue
// order, and returns the new count. A record claimed by a producer that
// went away is skipped; one claimed by a live producer ends the look (it
// is being written). A frame of several cells is gathered into its batch
// slot's buffer (qConsumer.gatherBuf), valid until the next Recv.
func (t *Transport) pollQueue(frames []transport.Frame, n int) int {
	q := &t.q
	for n < len(frames) && !q.broken {
		w := q.wordAt.Load()
		if uint32(w) != uint32(q.cur) || qState(w) == qEmpty {
			if uint32(w) != uint32(q.cur) && uint32(w) != uint32(q.cur-q.n()) {
				t.breakQueue() // neither this lap's nor the last one's
			}
			return n
		}
		f, k, id, kind, err := q.parse(t.mtu, q.gatherBuf(n))
		if err != nil {
			t.breakQueue()
			return n
		}
		t.toCommit = true
		if kind == recClaimed {
			if !t.claimDead(id) {
				return n
			}
			q.skip(k)
			t.cnt.qSkipped.Add(1)
			continue
		}
		if kind != recFrame {
			return n
		}
		r := t.producerOf(id)
		if t.laneFirst(r) {
			// Its lane to the closing record first, then this record
			// (parsed again: it was gathered into slot n's buffer).
			n = t.pollRing(r, frames, n)
			if !r.closed || n == len(frames) {
				return n
			}
			continue
		}
		q.advance(k)
		var peer transport.NICID
		if r != nil {
			peer = r.peer
			r.qFrames++ // the pair's traffic (askback.go)
			r.qBytes += uint64(len(f))
		}
		fr := &frames[n]
		fr.Peer, fr.Data, fr.Ref = peer, f, t.lends.RecvRef(n)
		if fr.Region != nil {
			fr.Region = nil
		}
		n++
	}
	return n
}

// breakQueue stops the receive queue: a producer wrote a word the protocol
// cannot produce, and nothing after it can be trusted. Its frames are lost
// (the layer above resends or fails as for a lost peer); lanes go on.
func (t *Transport) breakQueue() {
	if !t.q.broken {
		t.q.broken = true
		t.cnt.qBroken.Add(1)
		t.cnt.corrupt.Add(1)
	}
}

// producerOf is the ring of producer id of the receive queue (nil if
// unknown: a frame from a producer whose id is no longer ours, which
// cannot happen while its records lie ahead; its frame goes up from board
// 0). Recv side.
func (t *Transport) producerOf(id uint32) *inRing {
	// A read of the map under inMu would cost a lock per frame: the
	// consumer keeps its own copy of the ids it has seen, indexed by id
	// (ids are small: the lowest free one is given), so a frame of a
	// producer seen before costs no hash.
	if int(id) < len(t.qSeen) {
		if r := t.qSeen[id]; r != nil && r.qid == id {
			return r
		}
	}
	t.inMu.Lock()
	r := t.qProd[id]
	t.inMu.Unlock()
	if r == nil {
		return nil
	}
	if int(id) >= len(t.qSeen) {
		t.qSeen = append(t.qSeen, make([]*inRing, int(id)+1-len(t.qSeen))...)
	}
	t.qSeen[id] = r
	return r
}

// claimDead reports whether the producer with id, whose claimed record is
// at the queue's cursor, went away: it will never publish it.
func (t *Transport) claimDead(id uint32) bool {
	t.inMu.Lock()
	r := t.qProd[id]
	t.inMu.Unlock()
	return r == nil || r.dead.Load()
}

// reapProducers forgets the ids of producers that went away once no claim
// of theirs can lie ahead of the queue's cursor: a claim is made at the
// tail, so every one of theirs is at or below the tail as it was when they
// were found gone. Recv side, inMu held.
func (t *Transport) reapProducers() {
	k := 0
	for _, r := range t.qDead {
		w := t.q.wordAt.Load()
		if t.q.cur >= r.qTail && !(uint32(w) == uint32(t.q.cur) && qState(w) == qClaimed && qID(w) == r.qid) || t.q.broken {
			delete(t.qProd, r.qid)
			if int(r.qid) < len(t.qSeen) {
				t.qSeen[r.qid] = nil
			}
			continue
		}
		t.qDead[k] = r
		k++
	}
	clear(t.qDead[k:])
	t.qDead = t.qDead[:k]
}

// queuePending reports whether the record at the queue's cursor is
// claimed or published.
func (t *Transport) queuePending() bool {
	w := t.q.wordAt.Load()
	return uint32(w) == uint32(t.q.cur) && qState(w) != qEmpty && !t.q.broken
}

// peekQueue is Peek at the receive queue: the frame at its cursor, if
// published (records of producers that went away skipped first). empty
// reports that nothing is claimed there either.
func (t *Transport) peekQueue() (peer transport.NICID, f []byte, ok, empty bool) {
	q := &t.q
	for !q.broken {
		w := q.wordAt.Load()
		if uint32(w) != uint32(q.cur) || qState(w) == qEmpty {
			if uint32(w) != uint32(q.cur) && uint32(w) != uint32(q.cur-q.n()) {
				t.breakQueue()
			}
			return 0, nil, false, true
		}
		f, k, id, kind, err := q.parse(t.mtu, q.gatherBuf(0))
		if err != nil {
			t.breakQueue()
			return 0, nil, false, true
		}
		if kind == recClaimed {
			if !t.claimDead(id) {
				return 0, nil, false, false
			}
			q.skip(k)
			t.toCommit = true
			t.cnt.qSkipped.Add(1)
			continue
		}
		r := t.producerOf(id)
		if kind == recFrame && t.laneFirst(r) {
			// The producer's lane to its closing record first: Recv
			// reads it (pollQueue).
			return 0, nil, false, false
		}
		var peer transport.NICID
		if r != nil {
			peer = r.peer
		}
		t.peekedQ, t.peeked, t.peekedLen = true, nil, k
		t.peekedQR, t.peekedQN = r, len(f)
		return peer, f, true, false
	}
	return 0, nil, false, true
}
