package shm

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"golang.org/x/sys/unix"
)

// The consumer side of the data path: Recv polls every ring written to us and
// sleeps on the doorbell when they are empty, Peek and Take look at one frame
// at a time, Hold and Release keep a received frame past the next Recv, and
// commit hands the space read back to the producers.

// Recv returns frames from every ring written to us, oldest first per ring
// and round robin across rings. Their Data points into the rings (or, for
// a frame sent in place, into our mapping of the producer's pool segment)
// and stays valid until the next Recv: only then may the space go back to
// the producers (see commit), which completes their in-place sends. Recv
// polls for Options.Spin (or the timeout, if shorter), then sleeps on the
// doorbell's eventfd, its goroutine parked in the runtime's poller (see
// sleep); producers wake it only while it sleeps.
func (t *Transport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	t.rmu.Lock()
	n, err := t.recv(frames, timeout)
	t.rmu.Unlock()
	return n, err
}

// SetSpin sets how long Recv polls the rings before it sleeps (d <= 0:
// it sleeps at once), in place of Options.Spin, from the next Recv on. A
// receive loop that learns its frames come too late for a spin to find
// them (mx's host path) spins less: every spin that ends in a sleep anyway
// is CPU taken from the application for nothing.
func (t *Transport) SetSpin(d time.Duration) { t.spin.Store(int64(d)) }

// Spin returns how long Recv polls the rings before it sleeps (<= 0: not
// at all).
func (t *Transport) Spin() time.Duration { return time.Duration(t.spin.Load()) }

// recv is Recv with t.rmu held.
func (t *Transport) recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	if t.closed.Load() {
		return 0, errClosed
	}
	t.peeked, t.peekedQ = nil, false // not taken: poll returns it
	if t.toCommit {
		t.commit()
	}
	t.lends.Recv()
	if len(frames) == 0 {
		return 0, nil
	}
	// Look once before reading the clock: a frame that is there costs no
	// clock read, and a poll (timeout 0) no spin.
	if n := t.poll(frames); n > 0 || timeout == 0 {
		return n, nil
	}
	// The clock is read first after 64 looks, and every 64 looks from
	// then (a look costs some 10 ns, a clock read twice that): a frame
	// that comes within a microsecond or so costs no clock read. The
	// spin, the yield point and the deadline count from that first read.
	var now, deadline, spinUntil, yieldAt time.Time
	clock, yield := false, false
	spin := time.Duration(t.spin.Load())
	for i := 0; ; i++ {
		if n := t.poll(frames); n > 0 {
			return n, nil
		}
		if t.anyRetired {
			// A lane's closing record, and no frame of this call points
			// into the lane: unmap it now rather than at the next Recv,
			// which a receive loop that waits without a timeout may not
			// make for long (lane.go).
			t.commit()
		}
		if t.closed.Load() {
			return 0, errClosed
		}
		// Load first: a look that finds no request costs no locked
		// instruction.
		if t.wakeReq.Load() && t.wakeReq.Swap(false) {
			return 0, nil
		}
		if t.blBytes.Load() != 0 {
			t.pollBacklogs()
		}
		if i&63 == 63 || !clock && spin <= 0 {
			now = time.Now()
			if !clock {
				clock = true
				spinUntil, yieldAt = now.Add(spin), now.Add(yieldAfter)
				if timeout > 0 {
					// A spin longer than the timeout ends with it.
					deadline = now.Add(timeout)
					if deadline.Before(spinUntil) {
						spinUntil = deadline
					}
				}
			}
			yield = !now.Before(yieldAt)
		}
		if spin > 0 && (i&63 != 63 || now.Before(spinUntil)) {
			// A frame on time costs no system call. A late one: give
			// the CPU to another process (the producer, perhaps)
			// between looks. Not runtime.Gosched: it wakes another
			// thread to run this goroutine.
			if yield {
				t.cnt.yields.Add(1)
				schedYield()
			}
			continue
		}
		// Going to sleep: announce it, then look once more. A producer
		// that published after our look sees sleeping == 1 and writes the
		// eventfd, whose count stays up until read, so the sleep below
		// returns at once (or is woken).
		// The sleep is counted from before it is announced, as ArmSleep
		// counts it: a look that saw the flag saw a sleep already counting.
		from, held := time.Now(), t.blocked.Load() != 0
		t.announceSleep(held)
		if n := t.poll(frames); n > 0 {
			t.awake(0, false)
			return n, nil
		}
		if t.closed.Load() {
			t.awake(0, false)
			return 0, errClosed
		}
		if t.wakeReq.Swap(false) { // see Wake
			t.awake(0, false)
			return 0, nil
		}
		if timeout > 0 && !time.Now().Before(deadline) {
			t.awake(0, false)
			return 0, nil
		}
		t.cnt.sleeps.Add(1)
		t.sleep(deadline)
		t.awake(time.Since(from), held)
		if t.wakeReq.Swap(false) {
			return t.poll(frames), nil
		}
		t.commitDead()
		if timeout > 0 && !time.Now().Before(deadline) {
			if n := t.poll(frames); n > 0 {
				return n, nil
			}
			return 0, nil
		}
	}
}

// sleep waits until the doorbell's eventfd is written (by a producer that
// saw the sleeping flag, by Wake, or by a watcher whose peer went away) or
// until deadline (zero: no bound), and resets its count. The read parks
// the goroutine in the runtime's poller and gives its P back: a futex wait
// here would hold the P in a system call, and with the application's
// goroutines on every other P, sysmon would keep retaking it (and waking
// every 20 µs meanwhile), preempting the application each time. A count
// left by a wake-up that came after the receiver had already looked makes
// the next sleep return at once: the caller just looks again.
func (t *Transport) sleep(deadline time.Time) { t.ev.wait(deadline) }

// Pending reports whether a Recv would find anything to do now: a record
// at a ring's cursor, a ring whose producer went away, ring space to give
// back (see commit), or the transport closed. It is for a caller that
// serializes its own Recv calls under a lock of its own and holds it here
// (mx's receive sources): the look costs a load or two per hot ring and
// one for the cold ones (notify.go), without Recv's lock, its
// bookkeeping or any locked instruction, and a caller
// that polls an empty ring in a tight loop then waits less for the frame
// that comes, as each look is shorter.
func (t *Transport) Pending() bool {
	if t.blBytes.Load() != 0 {
		t.pollBacklogs()
	}
	if t.toCommit || t.closed.Load() || t.pend != 0 || t.sum.Load() != 0 || t.fullScan.Load() || t.queuePending() {
		return true
	}
	for _, h := range t.hot {
		if r := h.r; r.dead.Load() || r.wordAt.Load() != 0 {
			return true
		}
	}
	return false
}

// Peek returns the frame of the record at the cursor of the first ring, in
// Recv's round-robin order, that has one there, without taking it. It is
// for a caller that serializes its Recv calls under a lock of its own and
// holds it from here until Take or its next Recv (mx's receive sources),
// and handles some frames itself (mx's lane): such a frame costs no batch,
// and no lending. data stays valid until then. As Recv, Peek first
// gives back the space of the frames the previous Recv returned (commit):
// the caller is done with them. It reports ok false when the transport is
// closed or the first record it finds is not a frame (a pad, a reference
// record, a broken record): Recv handles those. A frame the caller does
// not Take is the next one Recv returns. When ok is false, empty reports
// what Pending would have reported false: no ring has a record at its
// cursor nor lost its producer, and the transport is open, so a Recv now
// would find nothing to do. A caller that polls with Peek alone thus
// looks at each hot ring and at the summary of the cold ones once per
// poll, found or not (notify.go).
func (t *Transport) Peek() (peer transport.NICID, data []byte, ok, empty bool) {
	t.peekedQ = false
	if t.closed.Load() {
		return 0, nil, false, false
	}
	if t.toCommit {
		t.lends.Recv() // the previous Recv's frames can no longer be held
		t.commit()
	}
	hot := t.hot
	first := t.rr
	if first >= len(hot) {
		first = 0
	}
	empty = true
	var r *inRing
	at := -1
	for k := range hot {
		i := first + k
		if i >= len(hot) {
			i -= len(hot)
		}
		h := hot[i].r
		if h.gone {
			continue
		}
		if h.wordAt.Load() == 0 {
			if h.dead.Load() {
				empty = false
			}
			continue
		}
		r, at = h, i
		break
	}
	if r == nil {
		if p, f, ok, e := t.peekQueue(); ok {
			return p, f, true, false
		} else if !e {
			empty = false
		}
		var e bool
		if r, e = t.peekCold(); r == nil {
			return 0, nil, false, empty && e
		}
	}
	// The record word's load acquires the record (parseRecord).
	f, rl, kind, err := parseRecord(r.data, r.cur, r.pos, t.mtu)
	if err != nil || kind != recFrame {
		return 0, nil, false, false
	}
	t.peeked, t.peekedAt, t.peekedLen = r, at, rl
	return r.peer, f, true, false
}

// HotStill reports whether every hot ring's record word is 0 and none of
// them lost its producer: the first of Peek's checks alone, without the
// queue and the cold rings' summary. It is for a poller that spins on the
// rings between its Peeks, under the same lock as Peek: a hot ring's record
// is then seen within a few loads of landing rather than within a whole
// Peek (a pair with a lane keeps every record on it). A false answer says
// only that a Peek now finds something to report.
func (t *Transport) HotStill() bool {
	for _, h := range t.hot {
		r := h.r
		if r.gone {
			continue
		}
		if r.wordAt.Load() != 0 || r.dead.Load() {
			return false
		}
	}
	return true
}

// Take consumes the frame Peek returned, as a Recv that returned it would
// have, and gives its space back to the producer as commit does (the head
// is published once pubEvery bytes were consumed). Called under the same
// lock as Peek, before any Recv.
func (t *Transport) Take() {
	if t.peekedQ {
		t.peekedQ = false
		t.q.advance(t.peekedLen)
		t.toCommit = true
		t.recvd.Inc()
		if r := t.peekedQR; r != nil {
			r.qFrames++ // the pair's traffic (askback.go)
			r.qBytes += uint64(t.peekedQN)
			t.peekedQR = nil
		}
		return
	}
	r := t.peeked
	if r == nil {
		return
	}
	t.peeked = nil
	r.cur += t.peekedLen
	if r.pos += t.peekedLen; r.pos == uint64(len(r.data)) {
		r.pos = 0
	}
	r.wordAt = u32At(r.data, int(r.pos)+recWordOff)
	if r.cur-r.pubHead >= r.pubEvery {
		// The store releases: we no longer read below it.
		r.head.Store(r.cur)
		r.pubHead = r.cur
	}
	if at := t.peekedAt; at >= 0 {
		t.rr = at + 1
		t.hot[at].hits++
	} else {
		t.rrBit = r.bit + 1
		t.promote(r)
	}
	// Only the Recv side writes recvd, and it is serialized (the
	// caller's lock here, rmu or that lock in Recv): an owned count,
	// without a locked instruction (an atomic store is an XCHG).
	t.recvd.Inc()
}

// poll reads up to len(frames) records: from the hot rings, round robin,
// then from the cold rings whose summary bits came up (notify.go).
func (t *Transport) poll(frames []transport.Frame) int {
	n := t.pollHot(frames, 0)
	if n < len(frames) {
		n = t.pollQueue(frames, n)
	}
	if n < len(frames) {
		n = t.pollCold(frames, n)
	}
	if n > 0 {
		t.recvd.Add(uint64(n))
		t.lends.Got(n)
	}
	return n
}

// pollRing reads records of r into frames[n:] until the ring has no more
// or frames is full, and returns the new count. Called when the word at
// r's cursor is not 0: a record (perhaps a pad, or a reference dropped as
// bad, which yield no frame) or a broken ring, so the next Recv commits.
func (t *Transport) pollRing(r *inRing, frames []transport.Frame, n int) int {
	t.toCommit = true
	if !r.touched {
		r.touched = true
		t.touched = append(t.touched, r)
	}
	size := uint64(len(r.data))
	for n < len(frames) {
		// The record word's load acquires the record (parseRecord).
		f, rl, kind, err := parseRecord(r.data, r.cur, r.pos, t.mtu)
		if err != nil {
			t.cnt.corrupt.Add(1)
			r.dead.Store(true)
			r.gone = true // nothing past a broken record can be trusted
			t.anyGone = true
			return n
		}
		if kind == recNone {
			return n
		}
		r.cur += rl
		if r.pos += rl; r.pos == size {
			r.pos = 0
		}
		r.wordAt = u32At(r.data, int(r.pos)+recWordOff)
		if kind != recFrame {
			if kind == recPad {
				continue
			}
			if kind == recClose {
				// The lane's last record: its producer retired it, and
				// the next commit unmaps it (freeRetired, lane.go).
				r.closed, t.anyRetired = true, true
				return n
			}
			// A reference record: its send completes when our head
			// passes it, at the next Recv (commit).
			r.refsIn = true
			if f = t.resolve(r, f); f == nil {
				continue
			}
		}
		// Field by field: Region is nil already but for a caller that
		// reuses its Send batch, and a store of a pointer costs a write
		// barrier check.
		fr := &frames[n]
		fr.Peer, fr.Data, fr.Ref = r.peer, f, t.lends.RecvRef(n)
		if fr.Region != nil {
			fr.Region = nil
		}
		n++
	}
	return n
}

// Hold implements [transport.Transport.Hold] by copying: a frame lies in
// its producer's ring, whose space goes back to the producer in order, so
// lending it would stop that producer behind the held record. (Large
// messages between processes move through the shared pool instead, without
// this copy.)
func (t *Transport) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	if _, err := t.lends.Index(f.Ref); err != nil {
		return transport.HoldInfo{}, fmt.Errorf("shm: hold: %w", err)
	}
	t.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

// Release implements [transport.Transport.Release].
func (t *Transport) Release(f *transport.Frame) { t.lends.Return(f) }

// Register implements [transport.Transport.Register]. Memory of the
// transport's Pool (NewPool, Pool.Alloc) is sent in place: Send writes a
// reference record naming the segment, and the receiver's Data points into
// its mapping of it (see inplace.go and the package documentation). Other
// memory is copied into the receiver's ring like any frame (Region.InPlace
// is false).
func (t *Transport) Register(mem []byte) (*transport.Region, error) {
	if t.closed.Load() {
		return nil, errClosed
	}
	if r, ok := t.registerRef(mem); ok {
		return r, nil
	}
	return transport.NewRegion(t, mem, false, nil), nil
}

// pubEvery is how many consumed bytes of a ring make commit publish its
// head: at most an eighth of the ring (see commit).
const pubEvery = 64 << 10

// commit hands the space of the previous batch back to the producers and
// drops dead rings (none of their frames is in use any more); Recv calls it
// only when poll consumed records or saw a dead ring since. It publishes a
// ring's head only once an eighth of the ring or pubEvery bytes were
// consumed since the last time, or when the batch held a reference record
// (its in-place send completes on it), so a stream of small messages
// stores to the shared head once per thousand messages, not per message.
// Back-pressure stays live: a producer reads the head only when the ring
// looks full to it, and then a third of the ring or more lies past the
// published head (the record it waits to write is at most a third of the
// ring, minFrames, and a pad before it less), of which less than an
// eighth was read: the consumer reads on and publishes before it reaches
// the producer's cursor (TestFullRingKeepsMoving). What a producer cannot
// get is space read but not yet published while the consumer stops
// calling Recv: less than an eighth of the ring. commit looks only at the
// rings the batch took records from (t.touched), so its cost does not
// grow with the number of peers.
func (t *Transport) commit() {
	t.toCommit = false
	for _, r := range t.touched {
		r.touched = false
		if r.gone {
			continue
		}
		if r.cur-r.pubHead >= r.pubEvery || r.cur != r.pubHead && (r.refsIn || r.wait.Load() != 0) {
			// The store releases: we no longer read below it, so the
			// producer may overwrite it.
			r.head.Store(r.cur)
			r.pubHead, r.refsIn = r.cur, false
			// Sequentially consistent with the store above: a producer
			// whose backlog waits stores the word, then loads the head
			// (flushBacklog), so either it sees this head or we see
			// its word and ring its room bell.
			if r.wait.Load() != 0 {
				r.wait.Store(0)
				r.kickRoom(&t.cnt.roomWakes)
			}
		}
	}
	// Not cleared: the pointers left are overwritten by the next batch's
	// (a clear of pointers costs a bulk write barrier per commit), and a
	// ring they keep from the collector is unmapped already.
	t.touched = t.touched[:0]
	// A producer waiting for room (the queue's wait flag) gets the head
	// of cells freed already too.
	if t.q.cur != t.q.freed || t.q.cur != t.q.pubHead && t.q.wait.Load() != 0 {
		if t.q.release(false) {
			t.q.takeWaiters(t.qHigh.Load(), t.wakeProducer)
		}
	}
	if t.anyRetired {
		t.freeRetired() // lane.go
	}
	if t.anyGone {
		t.commitDead()
	}
	if len(t.qDead) > 0 {
		t.inMu.Lock()
		t.reapProducers()
		t.inMu.Unlock()
	}
	if tk := t.tick.Load(); tk != t.inTick {
		t.lookAtLanes(tk) // askback.go, once per look of RetireIdle
	}
}

// commitDead unmaps the rings of producers that went away once every
// record they published was read (poll marks them gone), and the pool
// segments they shared with them. Called by the Recv goroutine, outside
// any batch.
func (t *Transport) commitDead() {
	if !t.anyGone {
		return
	}
	t.anyGone = false
	t.dropHot()
	t.inMu.Lock()
	var keep []*inRing
	for _, r := range *t.in.Load() {
		if r.data == nil && r.dead.Load() {
			r.gone = true // no lane: its queue records need nothing of it
		}
		if r.gone {
			r.conn.Close()
			r.closeRoom()
			t.dropSegments(r)
			if r.data != nil {
				t.lanesIn--
				t.noteLanesIn()
			}
			t.forgetAsks(r) // askback.go
			r.seg.unmap()
			r.data = nil
			// Its id stays until no claim of its can lie ahead in the
			// queue (reapProducers).
			r.qTail = t.q.tail.Load()
			t.qDead = append(t.qDead, r)
			continue
		}
		keep = append(keep, r)
	}
	t.setIn(keep)
	t.reapProducers()
	g := t.keepLane() // a lane of the producers gone, for a busier pair
	t.noteLanesIn()
	t.inMu.Unlock()
	t.offer(g)
}

// wakeProducer writes the room bell of producer id (of the receive
// queue), whose backlog waits for the room just published. Recv side: the
// bell is closed on this side too (closeRoom), so a descriptor number is
// never written after it was closed and perhaps reused.
func (t *Transport) wakeProducer(id uint32) {
	if r := t.producerOf(id); r != nil {
		r.kickRoom(&t.cnt.roomWakes)
	}
}

// kickRoom writes r's producer's room bell, if open, and counts it in n.
// Recv side.
func (r *inRing) kickRoom(n *atomic.Uint64) {
	if r.room >= 0 {
		kick(r.room)
		n.Add(1)
	}
}

// closeRoom closes r's producer's room bell. Recv side, or Close.
func (r *inRing) closeRoom() {
	if r.room >= 0 {
		unix.Close(r.room)
		r.room = -1
	}
}
