package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// The producer side of the data path: Send and SendParts write frames into
// the ring we own in each peer, connecting (dial) on a peer's first frame,
// wait a bounded time for room in a full ring, and publish what they wrote.

// errClosed is what calls on a closed transport return: transport.ErrClosed
// (which is also every other gomx package's ErrClosed), saying which
// transport.
var errClosed = fmt.Errorf("shm: transport %w", transport.ErrClosed)

// ErrRingFull is SendStrict's error for a frame it dropped: the
// transport's backlogs were at their bound, and the peer's consumer made
// no progress for Options.FullWait while the sender waited for room (it
// is stuck or gone).
var ErrRingFull = errors.New("shm: ring full, frame dropped")

// Send writes frames into the rings of their peers, connecting to a peer
// on its first frame. A frame that finds its peer's receive queue (or
// lane) full waits in the pair's backlog (lane.go), and Send goes on.
// Once the backlogs are at their bound, Send waits for room, and drops
// the frame (counted; the layer above resends, as over any lossy
// transport) only after the consumer made no progress for
// Options.FullWait of that wait. A peer with no socket in the directory
// fails with transport.ErrUnreachable.
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
		return 0, errClosed
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
	if o.dead.Load() || o.shut {
		return 0, fmt.Errorf("%w: board %v went away", transport.ErrUnreachable, o.peer)
	}
	if o.retireAsk.Load() {
		t.retireAsked(o) // askback.go
	}
	if o.data == nil {
		return t.writeQueue(o, frames, refs, strict)
	}
	o.reapRefs()
	t.flushBacklog(o)
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
			if ref = refs && len(o.backlog) == 0 && t.refRecord(&frames[i], &rec); ref {
				data, word = rec[:], refMark
			}
		}
		at, ok := uint64(0), false
		if len(o.backlog) == 0 {
			at, ok = t.room(o, recordLen(len(data)))
		}
		if !ok {
			// Full, or frames wait already: the frame waits in the
			// backlog, copied (a frame in place too).
			o.publish(start)
			if f.Region != nil {
				f.Region.Copied()
			}
			err := t.backlogFrame(o, len(f.Data), f.Data, nil)
			start = o.cur
			if err != nil && strict {
				return i, err
			}
			continue
		}
		if f.Region != nil && !ref {
			f.Region.Copied() // records are written into the ring
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
// (o.mu held, or the caller serializes o's writers), or reports that the
// ring is full: the frame then waits in the pair's backlog (lane.go),
// since the caller may hold a lock its own receive loop needs.
func (t *Transport) room(o *outRing, rl int) (uint64, bool) {
	at, ok := o.reserve(o.headSeen, rl)
	if ok {
		return at, true
	}
	// Load the consumer's cursor only now: most records find room with
	// the cached one. The load acquires: the consumer is done with every
	// byte below it.
	o.headSeen = o.head.Load()
	return o.reserve(o.headSeen, rl)
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
		return errClosed
	}
	if t.serial.Load() {
		// The caller serializes every send and Close (SerialSends).
		o, err := t.serialRingTo(peer)
		if err != nil {
			return err
		}
		return t.sendParts(o, head, parts, false)
	}
	o, err := t.ringTo(peer)
	if err != nil {
		return err
	}
	o.mu.Lock()
	err = t.sendParts(o, head, parts, true)
	o.mu.Unlock()
	return err
}

// SerialSends tells t that its caller serializes every SendParts with
// every other send (Send, SendStrict, SendParts) and with Close, under a
// lock of its own (mx does: every send holds its board's lock, and no
// SendParts comes after its endpoints are closed, before the transport
// is): SendParts then takes no lock of the lane it writes, a locked
// instruction less before the record's word, on the path of every
// message. (A pair without a lane still takes the ring's lock: its
// frames go through the receive queue, whose claims are locked
// instructions anyway, and its backlog is shared with the flusher.)
// Everything else is unchanged: Send and SendStrict still lock
// the ring, and the transport's own work on a ring (reaping reference
// records, Region.Pending) touches nothing SendParts writes. A caller
// that breaks the promise corrupts the ring: the race detector reports
// it (SendParts's writes to the ring's cursor race with the other
// sender's). Call it before any send.
func (t *Transport) SerialSends() { t.serial.Store(true) }

// sendParts is SendParts into ring o, its writers serialized (o.mu or
// SerialSends). A pair without a lane takes o.mu for its queue and
// backlog all the same (locked: the caller holds it already), which the
// backlog's flusher shares.
func (t *Transport) sendParts(o *outRing, head []byte, parts [][]byte, locked bool) error {
	if o.dead.Load() || o.shut {
		return fmt.Errorf("%w: board %v went away", transport.ErrUnreachable, o.peer)
	}
	n := len(head)
	for _, p := range parts {
		n += len(p)
	}
	if n > o.mtu {
		return fmt.Errorf("%w: %d bytes, MTU %d", transport.ErrTooBig, n, o.mtu)
	}
	if o.data == nil || o.blOn.Load() || o.retireAsk.Load() {
		// No lane yet, or frames wait in the lane's backlog, which the
		// flusher shares, or the consumer asked for the lane back: o.mu.
		if !locked {
			o.mu.Lock()
			defer o.mu.Unlock()
			locked = true
		}
		if o.retireAsk.Load() {
			t.retireAsked(o) // askback.go
		}
		if !t.laneReady(o, false) {
			return t.queueFrame(o, n, head, parts)
		}
		if t.flushBacklog(o); len(o.backlog) > 0 {
			return t.backlogFrame(o, n, head, parts)
		}
	}
	start := o.cur
	if len(parts) == 1 && o.putLine(o.headSeen, n, head, parts[0]) {
		o.countSent()
		o.publish(start)
		o.clearAhead(o.headSeen + uint64(len(o.data)))
		return nil
	}
	at, ok := t.room(o, recordLen(n))
	if !ok {
		if !locked {
			o.mu.Lock()
			defer o.mu.Unlock()
		}
		return t.backlogFrame(o, n, head, parts)
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

// serialRingTo is ringTo for a sender serialized by its caller
// (SerialSends): it looks in a small direct-mapped cache of the rings it
// sent to before (sendTo), which only such a sender reads and writes, so
// its stores share no line with another sender. A collective's sender,
// which sends to each of its peers in turn, found the ring in ringTo's
// table (a map) at nearly every send.
func (t *Transport) serialRingTo(peer transport.NICID) (*outRing, error) {
	i := sendToSlot(peer)
	if o := t.sendTo[i]; o != nil && o.peer == peer && !o.dead.Load() {
		return o, nil
	}
	o, err := t.ringTo(peer)
	if err == nil {
		t.sendTo[i] = o
	}
	return o, err
}

// sendToLen is the number of slots of serialRingTo's cache: a power of
// two.
const sendToLen = 32

// sendToSlot is peer's slot in serialRingTo's cache: a multiplicative
// hash, so that NIC ids that differ in a few low bits spread.
func sendToSlot(peer transport.NICID) uint {
	return uint(uint64(peer)*0x9E3779B97F4A7C15>>59) & (sendToLen - 1)
}

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

// dropErr says why a frame to o's peer was dropped: its consumer took
// nothing for FullWait while the sender waited for room in the full
// backlogs (lane.go), or it or we went away.
func (t *Transport) dropErr(o *outRing) error {
	switch {
	case t.closed.Load():
		return errClosed
	case o.dead.Load():
		return fmt.Errorf("%w: board %v went away", transport.ErrUnreachable, o.peer)
	}
	return fmt.Errorf("%w: board %v took nothing from its ring for %v (it is stuck or gone; Options.FullWait sets how long to wait)",
		ErrRingFull, o.peer, t.opts.FullWait)
}

// outFor returns the ring to peer, connecting on first use and again after
// the peer went away (a new process may have taken its board).
func (t *Transport) outFor(peer transport.NICID) (*outRing, error) {
	o, peers, err := t.outForLocked(peer)
	if peers > 0 {
		t.makeSpare(peers) // spare.go, outMu released
	}
	return o, err
}

// outForLocked is outFor under outMu. After a dial it also returns the
// peers in the table, for the spare outFor makes then (0 otherwise).
func (t *Transport) outForLocked(peer transport.NICID) (*outRing, int, error) {
	t.outMu.Lock()
	defer t.outMu.Unlock()
	if t.closed.Load() {
		return nil, 0, errClosed
	}
	if o := t.out[peer]; o != nil {
		if !o.dead.Load() {
			return o, 0, nil
		}
		delete(t.out, peer)
		t.snapOut()
		if o.close() {
			t.lanesOut.Add(-1)
		}
		t.cnt.sent.Add(o.sent.Load()) // its count outlives it
	}
	o, err := t.dial(peer)
	if err != nil {
		return nil, 0, err
	}
	t.out[peer] = o
	t.snapOut()
	t.lastOut.Store(o)
	peers := len(t.out)
	t.wg.Add(1)
	go t.watch(o.conn, &o.dead, peer, o.pid, func(msg []byte, fds []int) {
		if msg == nil {
			close(o.gone)
			return
		}
		o.control(msg, fds)
	})
	return o, peers, nil
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
	if err != nil && isFDLimit(err) {
		t.tellFDLimit(peer) // fdlimit.go
		return nil, fmt.Errorf("%w: board %v: %w", transport.ErrUnreachable, peer, ownFDLimit(err))
	}
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
	le := binary.LittleEndian
	hello := make([]byte, helloLen)
	le.PutUint32(hello, helloMagic)
	le.PutUint32(hello[4:], version)
	le.PutUint64(hello[8:], uint64(t.nic))
	le.PutUint64(hello[16:], t.word.Load())
	// Our room bell goes with the hello: the consumer writes it when it
	// frees room a backlog of ours waits for (lane.go).
	if err := sendFD(c, hello, t.roomBell.fd); err != nil {
		return fail(fmt.Errorf("%w: board %v: handshake: %v", transport.ErrUnreachable, peer, err))
	}
	w, fds, err := recvFD(c, welcomeLen, 2)
	if reason, ok := refuseReason(w); ok && reason == refuseFDLimit {
		return fail(fmt.Errorf("%w: %w", transport.ErrUnreachable, peerFDLimit(peer, pid, "refused the connection"))) // fdlimit.go
	}
	if errors.Is(err, ErrFDLimit) {
		t.tellFDLimit(peer)
		return fail(fmt.Errorf("%w: board %v: %w", transport.ErrUnreachable, peer, err))
	}
	if err != nil {
		return fail(fmt.Errorf("%w: board %v refused the connection: %v", transport.ErrUnreachable, peer, err))
	}
	bfd, ev := fds[0], fds[1]
	mtu, qid, qsize := min(t.opts.MTU, int(le.Uint32(w[8:]))), le.Uint32(w[12:]), int(le.Uint32(w[16:]))
	if le.Uint32(w) != welcomeMagic || le.Uint32(w[4:]) != version {
		unix.Close(bfd)
		unix.Close(ev)
		return fail(fmt.Errorf("%w: board %v: bad welcome (a gomx of another version?)", transport.ErrUnreachable, peer))
	}
	if qid == 0 || qid > qMaxID || qsize > maxQueueSize || qsize&(qsize-1) != 0 || qsize < minFrames*cellsFor(mtu)*cellLen {
		unix.Close(bfd)
		unix.Close(ev)
		return fail(fmt.Errorf("%w: board %v: a receive queue of %d bytes for producer %d (MTU %d) breaks the layout", transport.ErrUnreachable, peer, qsize, qid, mtu))
	}
	if err := checkBellEvent(ev); err != nil {
		unix.Close(bfd)
		return fail(fmt.Errorf("%w: board %v: %v", transport.ErrUnreachable, peer, err))
	}
	bell, err := mapPeerFD(bfd, queueSegLen(qsize), queueSegLen(qsize))
	if err != nil {
		unix.Close(ev)
		return fail(err)
	}
	c.SetDeadline(time.Time{})
	o := &outRing{peer: peer, pid: pid, bell: bell, conn: c,
		slp: u32At(bell.mem, bellSleepOff), blocked: u32At(bell.mem, bellBlockOff),
		slept: u64At(bell.mem, bellSleptOff), ev: ev,
		notifyWords: notifyWords{sum: u64At(bell.mem, bellSumOff)},
		q:           qProducer{queue: newQueue(bell.mem), id: qid},
		mtu:         mtu, wakes: &t.cnt.wakes, blBytes: &t.blBytes, dropped: &t.cnt.dropFull,
		lanesCnt: &t.cnt.lanes, refusedCnt: &t.cnt.lanesRefused, asked: &t.asked, epochOf: &t.epoch,
		shared: make(map[uint32]bool), answers: newShareAnswers(), laneAns: make(chan uint32, 1), gone: make(chan struct{}),
		fdRefused: &t.fdRefused,
		noLane:    t.opts.Lanes == 0}
	return o, nil
}

// close unmaps the ring and the peer's doorbell and closes the connection
// (the consumer then drops its side). It reports whether the pair had a
// lane (or had asked for one), which no longer counts against Lanes.
func (o *outRing) close() (lane bool) {
	o.mu.Lock()
	o.completeRefs()
	o.dropBacklog()
	o.conn.Close()
	o.seg.unmap()
	o.bell.unmap()
	unix.Close(o.ev)
	o.data, o.shut = nil, true
	lane = o.laneBytes.Swap(0) != 0
	o.mu.Unlock()
	return lane
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
