package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// ---- producer side ----

// ErrRingFull is SendStrict's error for a frame it dropped: the peer's
// ring stayed full while its consumer made no progress for
// Options.FullWait (it is stuck or gone).
var ErrRingFull = errors.New("shm: ring full, frame dropped")

// Send writes frames into the rings of their peers, connecting to a peer
// on its first frame. A full ring is waited on for at most Options.FullWait,
// then the frame is dropped and counted (the layer above resends, as over
// any lossy transport). A peer with no socket in the directory fails with
// transport.ErrUnreachable.
func (t *Transport) Send(frames []transport.Frame) (int, error) {
	return t.send(frames, false)
}

// SendStrict is Send for a caller that keeps no copy of what it sends
// (mx's lean path): a frame dropped for a full ring fails it with
// ErrRingFull, counted as Send counts it. The frames before it are in the
// ring; it and the rest of the batch are not.
func (t *Transport) SendStrict(frames []transport.Frame) (int, error) {
	return t.send(frames, true)
}

// send is Send; strict: SendStrict.
func (t *Transport) send(frames []transport.Frame, strict bool) (int, error) {
	if t.closed.Load() {
		return 0, transport.ErrClosed
	}
	for i := 0; i < len(frames); {
		peer := frames[i].Peer
		j := i + 1
		for j < len(frames) && frames[j].Peer == peer {
			j++
		}
		o, err := t.ringTo(peer)
		if err != nil {
			return i, err
		}
		// Frames in place name pool segments: the peer must have them
		// (a no-op once it has them all); failing that, they are copied.
		refs := inPlace(frames[i:j]) && t.ShareSegments(peer) == nil
		k, err := t.write(o, frames[i:j], refs, strict)
		i += k
		if err != nil {
			return i, err
		}
	}
	return len(frames), nil
}

// write appends frames (all to o's peer) to o's ring. Each record is
// published as it is written (producer.put stores its record word last);
// the consumer's doorbell is rung, if it may sleep, once for the batch.
// With refs, frames of in-place regions go as reference records
// (inplace.go). A frame dropped for a full ring is skipped, or with strict
// ends the write with ErrRingFull.
func (t *Transport) write(o *outRing, frames []transport.Frame, refs, strict bool) (int, error) {
	o.mu.Lock()
	n, err := t.writeLocked(o, frames, refs, strict)
	o.mu.Unlock()
	return n, err
}

// writeLocked is write with o.mu held.
func (t *Transport) writeLocked(o *outRing, frames []transport.Frame, refs, strict bool) (int, error) {
	if o.dead.Load() || o.data == nil {
		return 0, fmt.Errorf("%w: board %v went away", transport.ErrUnreachable, o.peer)
	}
	o.reapRefs()
	var rec [refLen]byte
	size := len(o.data)
	start := o.cur
	for i, f := range frames {
		if len(f.Data) > o.mtu {
			o.publish(start)
			return i, fmt.Errorf("%w: %d bytes, MTU %d", transport.ErrTooBig, len(f.Data), o.mtu)
		}
		data, word, ref := f.Data, uint32(len(f.Data)), false
		if r := f.Region; r != nil {
			if err := r.Check(t, &frames[i]); err != nil {
				o.publish(start)
				return i, fmt.Errorf("shm: frame %d: %w", i, err)
			}
			if ref = refs && t.refRecord(&frames[i], &rec); ref {
				data, word = rec[:], refMark
			} else {
				r.Copied() // records are written into the ring
			}
		}
		at, ok := t.room(o, recordLen(len(data)), &start)
		if !ok {
			t.cnt.dropFull.Add(1)
			if strict {
				return i, t.dropErr(o)
			}
			continue
		}
		o.putRecord(at, word, data)
		o.countSent()
		if ref {
			f.Region.Begin()
			o.refs = append(o.refs, refPending{end: o.cur, r: f.Region})
			t.cnt.inPlace.Add(1)
		}
	}
	o.publish(start)
	o.clearAhead(o.headSeen + uint64(size))
	return len(frames), nil
}

// room finds the cursor at which a record of rl bytes goes into o's ring
// (o.mu held), waiting for the consumer when the ring is full (waitRoom);
// false: it stayed full, and the record is to be dropped. *start is the
// cursor of the batch's first record not yet announced: a wait publishes
// what came before it first.
func (t *Transport) room(o *outRing, rl int, start *uint64) (uint64, bool) {
	at, ok := o.reserve(o.headSeen, rl)
	if ok {
		return at, true
	}
	// Load the consumer's cursor only now: most records find room with
	// the cached one. The load acquires: the consumer is done with every
	// byte below it.
	o.headSeen = o.head.Load()
	if at, ok = o.reserve(o.headSeen, rl); ok {
		return at, true
	}
	o.publish(*start) // wake the consumer to drain what we have
	*start = o.cur
	if !t.waitRoom(o, rl) {
		return 0, false
	}
	at, _ = o.reserve(o.headSeen, rl)
	return at, true
}

// SendParts writes one frame, head followed by the bytes of parts, into
// peer's ring, as SendStrict writes a batch of one: for a caller that
// would otherwise gather them into a buffer of its own first (mx's lane:
// a short header and the application's segments), the bytes go straight
// into the record, and no transport.Frame is built. A frame dropped for a
// full ring fails with ErrRingFull; one longer than the ring's MTU with
// transport.ErrTooBig. After SerialSends it takes no lock of its own.
func (t *Transport) SendParts(peer transport.NICID, head []byte, parts [][]byte) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	o, err := t.ringTo(peer)
	if err != nil {
		return err
	}
	if t.serial.Load() {
		// The caller serializes every send and Close (SerialSends).
		return t.sendParts(o, head, parts)
	}
	o.mu.Lock()
	err = t.sendParts(o, head, parts)
	o.mu.Unlock()
	return err
}

// SerialSends tells t that its caller serializes every SendParts with
// every other send (Send, SendStrict, SendParts) and with Close, under a
// lock of its own (mx does: every send holds its board's lock, and no
// SendParts comes after its endpoints are closed, before the transport
// is): SendParts then takes no lock of the ring it writes, a locked
// instruction less before the record's word, on the path of every
// message. Everything else is unchanged: Send and SendStrict still lock
// the ring, and the transport's own work on a ring (reaping reference
// records, Region.Pending) touches nothing SendParts writes. A caller
// that breaks the promise corrupts the ring: the race detector reports
// it (SendParts's writes to the ring's cursor race with the other
// sender's). Call it before any send.
func (t *Transport) SerialSends() { t.serial.Store(true) }

// sendParts is SendParts into ring o, its writers serialized (o.mu or
// SerialSends).
func (t *Transport) sendParts(o *outRing, head []byte, parts [][]byte) error {
	if o.dead.Load() || o.data == nil {
		return fmt.Errorf("%w: board %v went away", transport.ErrUnreachable, o.peer)
	}
	n := len(head)
	for _, p := range parts {
		n += len(p)
	}
	if n > o.mtu {
		return fmt.Errorf("%w: %d bytes, MTU %d", transport.ErrTooBig, n, o.mtu)
	}
	start := o.cur
	at, ok := t.room(o, recordLen(n), &start)
	if !ok {
		t.cnt.dropFull.Add(1)
		return t.dropErr(o)
	}
	o.putParts(at, uint32(n), n, head, parts)
	o.countSent()
	o.publish(start)
	o.clearAhead(o.headSeen + uint64(len(o.data)))
	return nil
}

// countSent counts a frame written into o's ring. Its writers are
// serialized (o.mu, or SerialSends' caller): an owned count, without a
// locked instruction on every send.
func (o *outRing) countSent() { o.sent.Inc() }

// ringTo returns the ring to peer: the newest peer's, else another live
// one's, without a lock and without a store (senders to different peers
// share no line they write); outFor connects the rest.
func (t *Transport) ringTo(peer transport.NICID) (*outRing, error) {
	o := t.lastOut.Load()
	if o != nil && o.peer == peer && !o.dead.Load() {
		return o, nil
	}
	if m := t.outSnap.Load(); m != nil {
		o = (*m)[peer]
	} else {
		o = nil
	}
	if o == nil || o.dead.Load() {
		return t.outFor(peer)
	}
	return o, nil
}

// publish rings the consumer's doorbell if records were written since
// start and the consumer may be asleep.
func (o *outRing) publish(start uint64) {
	if o.cur == start {
		return
	}
	// A cold ring's news goes through the consumer's summary word first
	// (notify.go).
	o.note()
	// Sequentially consistent with the consumer's store of sleeping and
	// its re-check of the record word at its cursor, or of the summary
	// (Dekker): the record words put stored come before this load, so
	// either the consumer sees the records, or we see sleeping == 1 here
	// and wake it.
	if o.slp.Load() != 0 {
		kick(o.ev)
		o.wakes.Add(1)
	}
}

// dropErr says why waitRoom gave up on o's ring.
func (t *Transport) dropErr(o *outRing) error {
	switch {
	case t.closed.Load():
		return transport.ErrClosed
	case o.dead.Load():
		return fmt.Errorf("%w: board %v went away", transport.ErrUnreachable, o.peer)
	}
	return fmt.Errorf("%w: board %v took nothing from its ring for %v (it is stuck or gone; Options.FullWait sets how long to wait)",
		ErrRingFull, o.peer, t.opts.FullWait)
}

// waitRoom waits until rl bytes fit. It gives up only when the consumer
// made no progress for FullWait (it is stuck or gone), so a slow but live
// receiver delays its senders rather than losing frames; after that, frames
// to it are dropped at once until its cursor moves again.
func (t *Transport) waitRoom(o *outRing, rl int) bool {
	if o.stalled && o.head.Load() == o.stalledAt {
		return false // it already timed out and has not moved since
	}
	o.stalled = false
	deadline := time.Now().Add(t.opts.FullWait)
	for i := 0; ; i++ {
		h := o.head.Load()
		if h != o.headSeen {
			o.headSeen = h
			deadline = time.Now().Add(t.opts.FullWait)
		}
		if _, ok := o.reserve(o.headSeen, rl); ok {
			return true
		}
		if o.dead.Load() || t.closed.Load() {
			return false
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				// Stuck: drop frames at once until it moves again.
				o.stalled, o.stalledAt = true, h
				return false
			}
			time.Sleep(10 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// outFor returns the ring to peer, connecting on first use and again after
// the peer went away (a new process may have taken its board).
func (t *Transport) outFor(peer transport.NICID) (*outRing, error) {
	t.outMu.Lock()
	defer t.outMu.Unlock()
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	if o := t.out[peer]; o != nil {
		if !o.dead.Load() {
			return o, nil
		}
		delete(t.out, peer)
		t.snapOut()
		o.close()
		t.cnt.sent.Add(o.sent.Load()) // its count outlives it
	}
	o, err := t.dial(peer)
	if err != nil {
		return nil, err
	}
	t.out[peer] = o
	t.snapOut()
	t.lastOut.Store(o)
	t.wg.Add(1)
	go t.watch(o.conn, &o.dead, peer, o.pid, func(msg []byte, fds []int) {
		if msg == nil {
			close(o.gone)
			return
		}
		o.control(msg, fds)
	})
	return o, nil
}

// snapOut publishes a copy of the table of rings for Send to read without
// outMu (held). Rings come and go with peers, seldom.
func (t *Transport) snapOut() {
	m := maps.Clone(t.out)
	t.outSnap.Store(&m)
}

// dial connects to peer's socket, checks it runs as our user, creates the
// ring and hands it over, and maps the doorbell it gets back.
func (t *Transport) dial(peer transport.NICID) (*outRing, error) {
	path := t.peerPath(peer)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("%w: board %v: %v", transport.ErrUnreachable, peer, err)
	}
	fail := func(err error) (*outRing, error) {
		c.Close()
		return nil, err
	}
	uid, pid, err := peerCred(c)
	if err != nil || uid != os.Getuid() {
		return fail(fmt.Errorf("%w: board %v is not run by uid %d (%v)", transport.ErrUnreachable, peer, os.Getuid(), err))
	}
	t.connected(peer, pid)
	c.SetDeadline(time.Now().Add(handshakeTTL))
	size := t.ringSize()
	// Hugepages only for a ring that fills them: a smaller one would
	// take a whole 2 MiB page.
	seg, fd, err := newSegment("gomx-ring", ringSegLen(size), !t.opts.NoHugepages && ringSegLen(size)%hugePage == 0)
	if err != nil {
		return fail(err)
	}
	le := binary.LittleEndian
	le.PutUint32(seg.mem[magicOff:], ringMagic)
	le.PutUint32(seg.mem[sizeOff:], uint32(size))
	hello := make([]byte, helloLen)
	le.PutUint32(hello, helloMagic)
	le.PutUint32(hello[4:], version)
	le.PutUint64(hello[8:], uint64(t.nic))
	le.PutUint32(hello[16:], uint32(t.opts.MTU))
	le.PutUint32(hello[20:], uint32(size))
	le.PutUint64(hello[24:], t.word.Load())
	err = sendFD(c, hello, fd)
	unix.Close(fd) // the peer holds its own descriptor now
	if err != nil {
		seg.unmap()
		return fail(fmt.Errorf("%w: board %v: handshake: %v", transport.ErrUnreachable, peer, err))
	}
	w, fds, err := recvFD(c, welcomeLen, 2)
	if err != nil {
		seg.unmap()
		return fail(fmt.Errorf("%w: board %v refused the connection: %v", transport.ErrUnreachable, peer, err))
	}
	bfd, ev := fds[0], fds[1]
	if le.Uint32(w) != welcomeMagic || le.Uint32(w[4:]) != version {
		unix.Close(bfd)
		unix.Close(ev)
		seg.unmap()
		return fail(fmt.Errorf("%w: board %v: bad welcome (a gomx of another version?)", transport.ErrUnreachable, peer))
	}
	if err := checkBellEvent(ev); err != nil {
		unix.Close(bfd)
		seg.unmap()
		return fail(fmt.Errorf("%w: board %v: %v", transport.ErrUnreachable, peer, err))
	}
	bell, err := mapPeerFD(bfd, bellLen, bellLen)
	if err != nil {
		unix.Close(ev)
		seg.unmap()
		return fail(err)
	}
	c.SetDeadline(time.Time{})
	o := &outRing{peer: peer, pid: pid, seg: seg, bell: bell, producer: newProducer(seg.mem[dataOff:dataOff+size], 0), conn: c,
		head: u64At(seg.mem, headOff),
		slp:  u32At(bell.mem, bellSleepOff), ev: ev,
		notifyWords: notifyWords{notify: u32At(seg.mem, ringNotifyOff), sum: u64At(bell.mem, bellSumOff)},
		mtu:         min(t.opts.MTU, int(le.Uint32(w[8:]))), wakes: &t.cnt.wakes,
		shared: make(map[uint32]bool), acks: make(chan ctlAnswer, 16), gone: make(chan struct{})}
	return o, nil
}

// close unmaps the ring and the peer's doorbell and closes the connection
// (the consumer then drops its side).
func (o *outRing) close() {
	o.mu.Lock()
	o.completeRefs()
	o.conn.Close()
	o.seg.unmap()
	o.bell.unmap()
	unix.Close(o.ev)
	o.data = nil
	o.mu.Unlock()
}

// Reaches reports whether a board with NIC id peer listens in the endpoint
// directory: a process of this user on this host, reachable through shared
// memory. It costs a stat of the socket file.
func (t *Transport) Reaches(peer transport.NICID) bool {
	if t.closed.Load() {
		return false
	}
	t.outMu.Lock()
	o := t.out[peer]
	t.outMu.Unlock()
	if o != nil && !o.dead.Load() {
		return true
	}
	st, err := os.Stat(t.peerPath(peer))
	return err == nil && st.Mode()&os.ModeSocket != 0
}

// ---- consumer side ----

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
		return 0, transport.ErrClosed
	}
	t.peeked = nil // not taken: poll returns it
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
		if t.closed.Load() {
			return 0, transport.ErrClosed
		}
		// Load first: a look that finds no request costs no locked
		// instruction.
		if t.wakeReq.Load() && t.wakeReq.Swap(false) {
			return 0, nil
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
		t.slp.Store(1)
		if n := t.poll(frames); n > 0 {
			t.slp.Store(0)
			return n, nil
		}
		if t.closed.Load() {
			t.slp.Store(0)
			return 0, transport.ErrClosed
		}
		if t.wakeReq.Swap(false) { // see Wake
			t.slp.Store(0)
			return 0, nil
		}
		if timeout > 0 && !time.Now().Before(deadline) {
			t.slp.Store(0)
			return 0, nil
		}
		t.cnt.sleeps.Add(1)
		t.sleep(deadline)
		t.slp.Store(0)
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
func (t *Transport) sleep(deadline time.Time) {
	if !deadline.IsZero() || t.evDeadline {
		_ = t.ev.SetReadDeadline(deadline)
		t.evDeadline = !deadline.IsZero()
	}
	// Any outcome returns: a count read, the deadline passed (the caller
	// checks its clock), or an error (the caller re-checks closed).
	_ = t.evRaw.Read(t.evRead)
}

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
	if t.toCommit || t.closed.Load() || t.pend != 0 || t.sum.Load() != 0 || t.fullScan.Load() {
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
		var e bool
		if r, e = t.peekCold(); r == nil {
			return 0, nil, false, empty && e
		}
	}
	// The record word's load acquires the record (parseRecord).
	f, rl, kind, err := parseRecord(r.data, r.cur, r.pos, t.opts.MTU)
	if err != nil || kind != recFrame {
		return 0, nil, false, false
	}
	t.peeked, t.peekedAt, t.peekedLen = r, at, rl
	return r.peer, f, true, false
}

// Take consumes the frame Peek returned, as a Recv that returned it would
// have, and gives its space back to the producer as commit does (the head
// is published once pubEvery bytes were consumed). Called under the same
// lock as Peek, before any Recv.
func (t *Transport) Take() {
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
	t.cnt.recvd.Inc()
}

// poll reads up to len(frames) records: from the hot rings, round robin,
// then from the cold rings whose summary bits came up (notify.go).
func (t *Transport) poll(frames []transport.Frame) int {
	n := t.pollHot(frames, 0)
	if n < len(frames) {
		n = t.pollCold(frames, n)
	}
	if n > 0 {
		t.cnt.recvd.Add(uint64(n))
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
		f, rl, kind, err := parseRecord(r.data, r.cur, r.pos, t.opts.MTU)
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
		return nil, transport.ErrClosed
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
		if r.cur-r.pubHead >= r.pubEvery || r.refsIn && r.cur != r.pubHead {
			// The store releases: we no longer read below it, so the
			// producer may overwrite it.
			r.head.Store(r.cur)
			r.pubHead, r.refsIn = r.cur, false
		}
	}
	// Not cleared: the pointers left are overwritten by the next batch's
	// (a clear of pointers costs a bulk write barrier per commit), and a
	// ring they keep from the collector is unmapped already.
	t.touched = t.touched[:0]
	if t.anyGone {
		t.commitDead()
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
		if r.gone {
			r.conn.Close()
			t.dropSegments(r)
			r.seg.unmap()
			r.data = nil
			continue
		}
		keep = append(keep, r)
	}
	t.setIn(keep)
	t.inMu.Unlock()
}

// ---- life cycle ----

// Close stops accepting producers, closes every connection (the peers then
// drop their rings), waits for a running Recv to leave, and unmaps every
// ring and the doorbell. The socket file is removed.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.ring() // a sleeping Recv returns ErrClosed
	err := t.ln.Close()
	t.outMu.Lock()
	p := t.pool
	t.outMu.Unlock()
	if p != nil {
		p.Close()
	}
	t.outMu.Lock()
	t.lastOut.Store(nil)
	t.outSnap.Store(nil)
	for p, o := range t.out {
		o.close()
		t.cnt.sent.Add(o.sent.Load())
		delete(t.out, p)
	}
	t.outMu.Unlock()
	t.inMu.Lock()
	for _, r := range *t.in.Load() {
		r.conn.Close()
	}
	t.inMu.Unlock()
	t.wg.Wait()
	t.rmu.Lock()
	t.inMu.Lock()
	for _, r := range *t.in.Load() {
		t.dropSegments(r)
		r.seg.unmap()
		r.data = nil
	}
	t.setIn(nil)
	t.inMu.Unlock()
	t.hot, t.touched = nil, nil
	t.bell.unmap()
	unix.Close(t.bellFd)
	t.ev.Close()
	t.lends.Close()
	t.rmu.Unlock()
	return err
}

// sent is the count of frames sent: those of the rings gone and those of
// the live ones.
func (t *Transport) sent() uint64 {
	t.outMu.Lock()
	n := t.cnt.sent.Load()
	for _, o := range t.out {
		n += o.sent.Load()
	}
	t.outMu.Unlock()
	return n
}

// Counters reports frames moved, what went wrong, and the shared memory
// the transport maps now (see Footprint).
func (t *Transport) Counters() []transport.Counter {
	fp := t.Footprint()
	return []transport.Counter{
		{Name: "shm frames sent", Value: t.sent()},
		{Name: "shm frames received", Value: t.cnt.recvd.Load()},
		{Name: "shm frames dropped (ring full)", Value: t.cnt.dropFull.Load()},
		{Name: "shm corrupt rings dropped", Value: t.cnt.corrupt.Load()},
		{Name: "shm peers gone", Value: t.cnt.peersGone.Load()},
		{Name: "shm connections refused", Value: t.cnt.refused.Load()},
		{Name: "shm receiver sleeps", Value: t.cnt.sleeps.Load()},
		{Name: "shm receiver wake-ups sent", Value: t.cnt.wakes.Load()},
		{Name: "shm receiver yields", Value: t.cnt.yields.Load()},
		{Name: "shm stale sockets removed at open", Value: t.cnt.stale.Load()},
		{Name: "shm frames sent in place", Value: t.cnt.inPlace.Load()},
		{Name: "shm in-place frames dropped (memory not shared)", Value: t.cnt.refBad.Load()},
		{Name: "shm cold rings made hot", Value: t.cnt.promotions.Load()},
		{Name: CounterMappedBytes, Value: uint64(fp.MappedBytes)},
		{Name: CounterOwnedBytes, Value: uint64(fp.OwnedBytes)},
		{Name: "shm ring bytes mapped", Value: uint64(fp.RingBytes)},
		{Name: "shm pool bytes mapped", Value: uint64(fp.PoolBytes)},
		{Name: CounterRingsWritten, Value: uint64(fp.RingsOut)},
		{Name: CounterRingsRead, Value: uint64(fp.RingsIn)},
		{Name: "shm peers with rings", Value: uint64(fp.Peers)},
	}
}

// ArmSleep prepares a sleep on the doorbell's eventfd outside Recv (see
// [transport.Sleeper]): it announces the sleep to producers, as Recv does
// before it sleeps, then looks once more (Pending). The caller serializes
// it with its own Recv calls, as for Pending.
func (t *Transport) ArmSleep() (fd int, sleep bool) {
	t.slp.Store(1)
	if t.Pending() || t.wakeReq.Load() {
		return t.evFd, false
	}
	return t.evFd, true
}

// EndSleep ends a sleep ArmSleep prepared, and reads the eventfd's count
// when the caller's poll found it readable, so the next sleep sleeps.
func (t *Transport) EndSleep(readable bool) {
	t.slp.Store(0)
	if readable {
		var b [8]byte
		_, _ = unix.Read(t.evFd, b[:])
	}
}
