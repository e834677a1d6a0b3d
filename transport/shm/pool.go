package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/sentinel"
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// A Pool is memory the library allocates for message buffers, in memfd
// segments that the transport passes to the boards it sends to, so that a
// receiver can copy a message straight out of the sender's buffer, mapped
// in its own address space: one copy, no system call, no CMA permission.
//
// # Segments and their passing
//
// Each allocation is one segment of its own (rounded up to a power of two
// from 4 KiB, or to whole 2 MiB hugepages from 1 MiB on, on hugepages when
// there are free ones); a freed segment is kept for reuse by the next
// allocation of its size (PoolOptions.Keep per size) and released
// otherwise. Segment 0 is a table of 64-bit words (PoolOptions.TableWords)
// that the user of the pool writes with StoreWord and receivers read with
// Transport.PeerWords: mx keeps there, per endpoint and send region, which
// segment and offset a large send lies at.
//
// Transport.ShareSegments hands every segment a peer has not seen yet to
// it over the unix connection of the ring to that peer (SCM_RIGHTS; both
// ends were checked with SO_PEERCRED to run as this user when the ring was
// set up) and waits until the peer has mapped them (it answers each with
// an acknowledgement), so the first message that names a segment never
// races its mapping. The receiver closes each descriptor once mapped. A
// released segment is announced to the peers that have it, which unmap it;
// a peer that goes away (its connection closes) or closes has every segment
// it received from us unmapped, and every segment we received from it
// unmapped on our side. Before a receiver unmaps a segment it calls the
// hook set by Transport.OnSegmentUnmap, so a copy engine can drop the
// DMA mappings it cached over that memory (the address range may later
// be reused by another mapping).
type Pool struct {
	t    *Transport
	o    PoolOptions
	mu   sync.Mutex
	segs map[uint32]*poolSeg // live segments by id
	byAt map[uintptr]*poolSeg
	free map[int][]*poolSeg // by size: segments kept for reuse
	next uint32
	gen  atomic.Uint64 // segments ever made: a ring that has shared up to it has them all
	tab  *poolSeg
	done bool
}

// PoolOptions configure a Pool.
type PoolOptions struct {
	// TableWords is the length in 64-bit words of segment 0, the table
	// receivers read with Transport.PeerWords (at least 1).
	TableWords int
	// Keep is how many freed segments of each size are kept for reuse
	// (default 4; negative: none, every Free releases its segment).
	Keep int
	// NoHugepages keeps every segment on ordinary pages.
	NoHugepages bool
}

type poolSeg struct {
	id    uint32
	seg   segment
	fd    int
	size  int
	inUse bool
}

// Control messages on a ring's connection after the handshake (all
// ctlLen bytes): magic u32, kind u32, segment id u32, status u32, size u64.
const (
	ctlMagic   = 0x676D7863 // "gmxc"
	ctlLen     = 24
	ctlShare   = 1 // producer → consumer, with the segment's memfd
	ctlRelease = 2 // producer → consumer: unmap the segment
	ctlAck     = 3 // consumer → producer: the segment is mapped (status 0) or refused
	maxSegment = 1 << 34
)

// ErrNotPool is returned by Free for memory the pool did not allocate. It
// is the value every gomx pool uses for this meaning (hugepage.ErrNotPooled,
// nicdrv.ErrNotPooled); Free's error says "shm:" and the fix.
var ErrNotPool = sentinel.ErrNotPooled

// NewPool creates the transport's pool (one per transport) and its table
// segment.
func (t *Transport) NewPool(o PoolOptions) (*Pool, error) {
	if o.TableWords < 1 || o.TableWords > maxSegment/8 {
		return nil, fmt.Errorf("shm: pool table of %d words: want 1..%d", o.TableWords, maxSegment/8)
	}
	if o.Keep == 0 {
		o.Keep = 4
	}
	p := &Pool{t: t, o: o, segs: make(map[uint32]*poolSeg), byAt: make(map[uintptr]*poolSeg),
		free: make(map[int][]*poolSeg)}
	tab, err := p.newSeg(roundPage(o.TableWords * 8))
	if err != nil {
		return nil, err
	}
	p.tab = tab
	t.outMu.Lock()
	defer t.outMu.Unlock()
	if t.closed.Load() {
		p.closeSeg(tab)
		return nil, errClosed
	}
	if t.pool != nil {
		p.closeSeg(tab)
		return nil, errors.New("shm: the transport has a pool already: use it")
	}
	t.pool = p
	return p, nil
}

func roundPage(n int) int { return (n + 4095) &^ 4095 }

// sizeClass is the segment size an n-byte allocation gets.
func sizeClass(n int) int {
	if n > 1<<20 {
		return (n + hugePage - 1) &^ (hugePage - 1)
	}
	c := 4096
	for c < n {
		c <<= 1
	}
	return c
}

// newSeg creates a segment of size bytes with the next id (p.mu held or
// p not yet shared).
func (p *Pool) newSeg(size int) (*poolSeg, error) {
	huge := !p.o.NoHugepages && size%hugePage == 0
	seg, fd, err := newSegment("gomx-pool", size, huge)
	if err != nil {
		return nil, err
	}
	s := &poolSeg{id: p.next, seg: seg, fd: fd, size: size}
	p.next++
	p.gen.Add(1)
	p.segs[s.id] = s
	p.byAt[addrOf(seg.mem)] = s
	return s, nil
}

// closeSeg unmaps and forgets a segment no peer has seen.
func (p *Pool) closeSeg(s *poolSeg) {
	p.forget(s)
	s.seg.unmap()
	unix.Close(s.fd)
}

// Alloc returns n bytes of shared memory (n > 0), zeroed when new, kept
// until Free.
func (p *Pool) Alloc(n int) ([]byte, error) {
	if n <= 0 || n > maxSegment {
		return nil, fmt.Errorf("shm: pool allocation of %d bytes: want 1..%d", n, maxSegment)
	}
	size := sizeClass(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil, fmt.Errorf("shm: pool: %w", transport.ErrClosed)
	}
	var s *poolSeg
	if l := p.free[size]; len(l) > 0 {
		s = l[len(l)-1]
		p.free[size] = l[:len(l)-1]
	} else {
		var err error
		if s, err = p.newSeg(size); err != nil {
			return nil, err
		}
	}
	s.inUse = true
	return s.seg.mem[:n:n], nil
}

// Free gives back a buffer Alloc returned. Its segment is kept for reuse or
// released (see PoolOptions.Keep); a released segment is unmapped by every
// peer that had it. The buffer must not be in use by a send.
func (p *Pool) Free(b []byte) error {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return nil // Close released everything
	}
	s := p.byAt[addrOf(b)]
	if s == nil || s == p.tab || !s.inUse || len(b) == 0 {
		p.mu.Unlock()
		return fmt.Errorf("shm: %w: free only what Alloc returned, once", ErrNotPool)
	}
	s.inUse = false
	if l := p.free[s.size]; p.o.Keep > 0 && len(l) < p.o.Keep {
		p.free[s.size] = append(l, s)
		p.mu.Unlock()
		return nil
	}
	p.forget(s)
	p.mu.Unlock()
	p.release(s)
	return nil
}

// forget takes a segment out of the pool (p.mu held): nobody shares it
// any more.
func (p *Pool) forget(s *poolSeg) {
	delete(p.segs, s.id)
	delete(p.byAt, addrOf(s.seg.mem))
}

// release tells the peers that have segment s to unmap it, then unmaps it
// and closes its descriptor (p.mu not held: the announcement takes the
// rings' locks, which ShareSegments holds while it takes p.mu).
func (p *Pool) release(s *poolSeg) {
	p.t.announceRelease(s.id)
	s.seg.unmap()
	unix.Close(s.fd)
}

// Locate reports the segment and offset of b if it lies wholly in one
// segment the pool allocated and has not freed.
func (p *Pool) Locate(b []byte) (seg uint32, off int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	a := addrOf(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.byAt[a]; s != nil && s.inUse && len(b) <= len(s.seg.mem) {
		return s.id, 0, true
	}
	for _, s := range p.segs {
		base := addrOf(s.seg.mem)
		if s.inUse && a > base && a+uintptr(len(b)) <= base+uintptr(len(s.seg.mem)) {
			return s.id, int(a - base), true
		}
	}
	return 0, 0, false
}

// StoreWord stores v in word i of the table (atomically: a receiver may be
// reading it).
func (p *Pool) StoreWord(i int, v uint64) { u64At(p.tab.seg.mem, 8*i).Store(v) }

// Segments reports how many segments the pool holds (the table included).
func (p *Pool) Segments() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.segs)
}

// Close releases every segment (peers unmap them) and closes their
// descriptors. Buffers from the pool must not be used after it.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return nil
	}
	p.done = true
	var all []*poolSeg
	for _, s := range p.segs {
		all = append(all, s)
		p.forget(s)
	}
	p.free = nil
	p.mu.Unlock()
	for _, s := range all {
		p.release(s)
	}
	p.t.outMu.Lock()
	if p.t.pool == p {
		p.t.pool = nil
	}
	p.t.outMu.Unlock()
	return nil
}

// ---- producer side ----

// ShareSegments makes sure the board peer has mapped every segment of the
// transport's pool: segments it has not received yet are passed over the
// ring's connection (connecting first if needed), and ShareSegments waits
// for the peer's acknowledgements of every segment not yet acknowledged,
// at most handshakeTTL, and no longer than until the transport closes
// (transport.ErrClosed).
//
// Shares to one ring take turns (its shareWait). Each waits for the
// acknowledgements of the segments it passed and of those a share that
// gave up passed and the peer has not answered yet (they are not passed
// twice); the answers are kept per ring and per segment (shareAnswers),
// so an answer to another share is never counted, nor lost, and a
// segment the peer could not map is passed again by the next share. The
// ring's shareMu, which a release (Free, Close) and the fast path take,
// guards only what the ring was passed and is not held across the wait.
// A share that finds every segment acknowledged returns at once, without
// waiting for one that passes newer segments.
func (t *Transport) ShareSegments(peer transport.NICID) error {
	o, err := t.outFor(peer)
	if err != nil {
		return err
	}
	t.outMu.Lock()
	p := t.pool
	t.outMu.Unlock()
	if p == nil {
		return errors.New("shm: no pool to share: NewPool first")
	}
	if o.sharedAll(p.gen.Load()) {
		return nil // the fast path: no segment made since the last share
	}
	o.shareWait.Lock()
	defer o.shareWait.Unlock()
	gen := p.gen.Load()
	o.shareMu.Lock()
	if o.sharedGen == gen {
		o.shareMu.Unlock()
		return nil // the share before this one passed them
	}
	o.forgetRefused()
	p.mu.Lock()
	var wait []uint32
	for id, s := range p.segs {
		if o.shared[id] {
			if o.answers.owed(id) {
				wait = append(wait, id) // passed by a share that gave up
			}
			continue
		}
		o.answers.expect(id) // before the send: the answer may come first
		if err = o.sendCtl(ctlShare, id, uint64(s.size), s.fd); err != nil {
			o.answers.unexpect(id)
			break
		}
		o.shared[id] = true
		wait = append(wait, id)
	}
	p.mu.Unlock()
	o.shareMu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: board %v: pass a pool segment: %v", transport.ErrUnreachable, peer, err)
	}
	timer := time.NewTimer(t.shareTTL)
	defer timer.Stop()
	for {
		var id, status uint32
		wait, id, status = o.answers.take(wait)
		if status != 0 {
			o.shareMu.Lock()
			o.forgetRefused()
			o.shareMu.Unlock()
			return fmt.Errorf("shm: board %v could not map pool segment %d (status %d)", peer, id, status)
		}
		if len(wait) == 0 {
			break
		}
		select {
		case <-o.answers.came:
		case <-o.gone:
			return fmt.Errorf("%w: board %v went away while mapping pool segments", transport.ErrUnreachable, peer)
		case <-t.closing:
			return fmt.Errorf("shm: pass pool segments to board %v: %w", peer, transport.ErrClosed)
		case <-timer.C:
			return fmt.Errorf("%w: board %v did not acknowledge pool segments within %v", transport.ErrUnreachable, peer, t.shareTTL)
		}
	}
	o.shareMu.Lock()
	o.sharedGen = gen
	o.shareMu.Unlock()
	return nil
}

// forgetRefused forgets, as passed, the segments the consumer answered
// it could not map, so the next share passes them again (o.shareMu held).
func (o *outRing) forgetRefused() {
	o.answers.mu.Lock()
	for id := range o.answers.refused {
		delete(o.shared, id)
		delete(o.answers.refused, id)
	}
	o.answers.mu.Unlock()
}

// shareAnswers is what a ring's consumer answered to the pool segments
// passed to it. The consumer answers every pass of a segment, in the
// order of the passes, so a segment whose passes all have their answer
// is mapped, unless the last answer said it could not be (refused). The
// connection's watcher records the answers (control) under mu, a leaf
// lock it never waits long for: it is held only to read or write these
// maps, never across a send, so the watcher never waits for a share that
// writes to the connection (which the consumer, answering, may not read
// meanwhile).
type shareAnswers struct {
	mu      sync.Mutex
	passes  map[uint32]int    // passes of a segment not answered yet
	refused map[uint32]uint32 // the status of a segment whose last pass failed
	// came holds a signal when an answer came since the share that
	// waits (one at a time: shareWait) last looked.
	came chan struct{}
}

func newShareAnswers() shareAnswers {
	return shareAnswers{passes: make(map[uint32]int), refused: make(map[uint32]uint32), came: make(chan struct{}, 1)}
}

// owed reports whether a pass of segment id has no answer yet.
func (a *shareAnswers) owed(id uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.passes[id] > 0
}

// expect notes a pass of segment id about to be sent; unexpect takes it
// back when the send failed.
func (a *shareAnswers) expect(id uint32) {
	a.mu.Lock()
	a.passes[id]++
	delete(a.refused, id)
	a.mu.Unlock()
}

func (a *shareAnswers) unexpect(id uint32) {
	a.mu.Lock()
	if a.passes[id]--; a.passes[id] <= 0 {
		delete(a.passes, id)
	}
	a.mu.Unlock()
}

// answer records the consumer's answer to the oldest unanswered pass of
// segment id; an answer to no pass (a confused peer) is dropped.
func (a *shareAnswers) answer(id, status uint32) {
	a.mu.Lock()
	n, ok := a.passes[id]
	if ok {
		if n > 1 {
			a.passes[id] = n - 1 // an earlier pass's answer: the last one counts
		} else {
			delete(a.passes, id)
			if status != 0 {
				a.refused[id] = status
			}
		}
	}
	a.mu.Unlock()
	if ok {
		select {
		case a.came <- struct{}{}:
		default: // a signal is there already
		}
	}
}

// take removes from wait the segments whose passes all have their answer
// and returns the rest, or a segment the consumer refused and the status
// it answered.
func (a *shareAnswers) take(wait []uint32) (rest []uint32, id, status uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rest = wait[:0]
	for _, id := range wait {
		if st, ok := a.refused[id]; ok {
			return rest, id, st
		}
		if a.passes[id] > 0 {
			rest = append(rest, id)
		}
	}
	return rest, 0, 0
}

// sharedAll reports whether the peer acknowledged every segment of the
// pool's first gen.
func (o *outRing) sharedAll(gen uint64) bool {
	o.shareMu.Lock()
	defer o.shareMu.Unlock()
	return o.sharedGen == gen
}

// announceRelease tells every peer that received segment id to unmap it.
// It takes each ring's shareMu after releasing outMu: a release waiting
// for a ring whose share is passing segments (a send that may block) does
// not keep every sender from looking up its ring (outFor). A ring the copy of the table misses,
// connected meanwhile, cannot have the segment: the pool forgot it before
// its release, and ShareSegments passes only the segments the pool holds.
func (t *Transport) announceRelease(id uint32) {
	t.outMu.Lock()
	rings := make([]*outRing, 0, len(t.out))
	for _, o := range t.out {
		rings = append(rings, o)
	}
	t.outMu.Unlock()
	for _, o := range rings {
		o.shareMu.Lock()
		if o.shared[id] {
			delete(o.shared, id)
			_ = o.sendCtl(ctlRelease, id, 0, -1) // a dead peer unmaps everything anyway
		}
		o.shareMu.Unlock()
	}
}

// sendCtl writes a control message, with fd attached when fd >= 0.
func (o *outRing) sendCtl(kind, id uint32, size uint64, fd int) error {
	var m [ctlLen]byte
	putCtl(m[:], kind, id, 0, size)
	if fd >= 0 {
		return sendFD(o.conn, m[:], fd)
	}
	_, err := o.conn.Write(m[:])
	return err
}

// ctlMsg is a decoded control message.
type ctlMsg struct {
	kind, id, status uint32
	size             uint64
}

// decodeCtl decodes a control message a peer sent; it reports false for
// anything but ctlLen bytes starting with ctlMagic.
func decodeCtl(msg []byte) (ctlMsg, bool) {
	le := binary.LittleEndian
	if len(msg) != ctlLen || le.Uint32(msg) != ctlMagic {
		return ctlMsg{}, false
	}
	return ctlMsg{kind: le.Uint32(msg[4:]), id: le.Uint32(msg[8:]), status: le.Uint32(msg[12:]), size: le.Uint64(msg[16:])}, true
}

func putCtl(m []byte, kind, id, status uint32, size uint64) {
	le := binary.LittleEndian
	le.PutUint32(m, ctlMagic)
	le.PutUint32(m[4:], kind)
	le.PutUint32(m[8:], id)
	le.PutUint32(m[12:], status)
	le.PutUint64(m[16:], size)
}

// control handles a message the consumer sent on the ring's connection: an
// acknowledgement of a shared segment, the answer to a lane, word that a
// retired lane is unmapped (lane.go), an ask to retire the lane or the
// offer of one (askback.go). Descriptors are never expected.
func (o *outRing) control(msg []byte, fds []int) {
	closeAll(fds)
	m, ok := decodeCtl(msg)
	if ok && m.kind == ctlLaneAns {
		// Counted here, not when the sender takes the lane (laneReady):
		// the lane is mapped on both sides from now on either way.
		// A pair refused is counted once until it has a lane: it asks
		// again after another LaneAfter frames (lane.go).
		if m.status == 0 {
			o.lanesCnt.Add(1)
		} else if !o.refusedNoted.Swap(true) {
			o.refusedCnt.Add(1)
		}
		select {
		case o.laneAns <- m.status:
		default:
		}
		return
	}
	if ok && m.kind == ctlLaneFree {
		// An ask for the lane came before this answer, if at all: it
		// is answered (askback.go).
		o.retireAsk.Store(false)
		o.laneFreed.Store(true) // laneReady reads it (lane.go)
		return
	}
	if ok && m.kind == ctlLaneRetire {
		// Retired at the pair's next send or RetireIdle (askback.go).
		if o.epochOf != nil {
			o.askEpoch.Store(o.epochOf.Load())
		}
		o.retireAsk.Store(true)
		o.asked.Store(true)
		return
	}
	if ok && m.kind == ctlLaneOffer {
		o.offered.Store(true) // the pair's next frame asks (laneReady)
		return
	}
	if ok && m.kind == ctlFDLimit && o.fdRefused != nil {
		// The consumer cannot dial us back (fdlimit.go).
		o.fdRefused.note(o.peer, fmt.Errorf("%w: %w", transport.ErrUnreachable, peerFDLimit(o.peer, o.pid, "cannot connect back to answer")))
		return
	}
	if !ok || m.kind != ctlAck {
		return
	}
	o.answers.answer(m.id, m.status)
}

// parseRights returns the descriptors an SCM_RIGHTS message carried.
func parseRights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, f := range fds {
		unix.Close(f)
	}
}

// ---- consumer side ----

// control handles a message the producer sent on the ring's connection:
// a segment to map (answered with an acknowledgement) or to unmap.
func (t *Transport) inControl(r *inRing, c *net.UnixConn, msg []byte, fds []int) {
	m, ok := decodeCtl(msg)
	if !ok {
		closeAll(fds)
		return
	}
	id := m.id
	switch m.kind {
	case ctlShare:
		status := uint32(0)
		size := m.size
		if len(fds) != 1 || size == 0 || size > maxSegment {
			closeAll(fds)
			status = 1
		} else if seg, err := mapPeerFD(fds[0], int(size), int(size)); err != nil {
			status = 2
		} else {
			r.segMu.Lock()
			if r.segs == nil {
				r.segs = make(map[uint32]segment)
			}
			if old, ok := r.segs[id]; ok {
				t.unmapPeerSeg(&old)
			}
			r.segs[id] = seg
			r.segMu.Unlock()
		}
		var a [ctlLen]byte
		putCtl(a[:], ctlAck, id, status, 0)
		_, _ = c.Write(a[:])
	case ctlLane:
		t.inLane(r, c, m, fds)
	case ctlRelease:
		closeAll(fds)
		r.segMu.Lock()
		if s, ok := r.segs[id]; ok {
			delete(r.segs, id)
			t.unmapPeerSeg(&s)
		}
		r.segMu.Unlock()
	default:
		closeAll(fds)
	}
}

// unmapPeerSeg calls the unmap hook, then unmaps (r.segMu held).
func (t *Transport) unmapPeerSeg(s *segment) {
	if h := t.unmapHook.Load(); h != nil {
		(*h)(s.mem)
	}
	s.unmap()
}

// dropSegments unmaps every segment a producer passed (its ring is gone or
// the transport closes).
func (t *Transport) dropSegments(r *inRing) {
	r.segMu.Lock()
	for id, s := range r.segs {
		t.unmapPeerSeg(&s)
		delete(r.segs, id)
	}
	r.segMu.Unlock()
}

// OnSegmentUnmap sets a function called with the memory of each segment a
// peer passed just before it is unmapped (from the goroutine that unmaps:
// the connection watcher, Recv or Close). A copy engine's registration
// cache drops its mappings of that memory there.
func (t *Transport) OnSegmentUnmap(fn func(mem []byte)) {
	if fn == nil {
		t.unmapHook.Store(nil)
		return
	}
	t.unmapHook.Store(&fn)
}

// PeerSegment calls fn with segment id of the pool of board peer, as mapped
// here, if peer has a live ring to us and passed that segment; the segment
// stays mapped until fn returns. It reports whether fn ran.
func (t *Transport) PeerSegment(peer transport.NICID, id uint32, fn func(mem []byte)) bool {
	r := t.inFrom(peer)
	if r == nil {
		return false
	}
	r.segMu.RLock()
	defer r.segMu.RUnlock()
	s, ok := r.segs[id]
	if !ok || s.mem == nil {
		return false
	}
	fn(s.mem)
	return true
}

// HoldPeerSegment is PeerSegment for a user that gives the segment back
// later, from any goroutine: it returns segment id of peer's pool as mapped
// here and a release that must be called once, after the last access; the
// segment stays mapped until then (a peer that goes away meanwhile is
// unmapped only after the release). ok is false, and there is nothing to
// release, when peer has no live ring to us or did not pass that segment.
func (t *Transport) HoldPeerSegment(peer transport.NICID, id uint32) (mem []byte, release func(), ok bool) {
	r := t.inFrom(peer)
	if r == nil {
		return nil, nil, false
	}
	r.segMu.RLock() // a sync.RWMutex may be read-unlocked by another goroutine
	s, ok := r.segs[id]
	if !ok || s.mem == nil {
		r.segMu.RUnlock()
		return nil, nil, false
	}
	return s.mem, r.segMu.RUnlock, true
}

// PeerWords loads len(dst) words of peer's pool table from word first
// (atomically, as StoreWord stores them); it reports false when peer
// passed no table or the words lie past its end.
func (t *Transport) PeerWords(peer transport.NICID, first int, dst []uint64) bool {
	ok := false
	t.PeerSegment(peer, 0, func(mem []byte) {
		if first < 0 || (first+len(dst))*8 > len(mem) {
			return
		}
		for i := range dst {
			dst[i] = u64At(mem, 8*(first+i)).Load()
		}
		ok = true
	})
	return ok
}

// PeerSegments reports how many pool segments peers passed are mapped here.
func (t *Transport) PeerSegments() int {
	n := 0
	for _, r := range *t.in.Load() {
		r.segMu.RLock()
		n += len(r.segs)
		r.segMu.RUnlock()
	}
	return n
}

// inFrom returns the live ring peer writes to us, or nil.
func (t *Transport) inFrom(peer transport.NICID) *inRing {
	for _, r := range *t.in.Load() {
		if r.peer == peer && !r.dead.Load() {
			return r
		}
	}
	return nil
}
