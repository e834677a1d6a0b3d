package shm

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// TestPoolShare: buffers of a pool reach a peer as its own mappings of the
// same memory (what one side writes, the other reads), the table words
// too; a freed buffer is reused, a released one is unmapped by the peer,
// and everything the peer mapped goes (with the unmap hook called for each
// segment) when the owner closes. No mapping or descriptor is left.
func TestPoolShare(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	defer a.Close()
	var unmapped atomic.Int32
	b.OnSegmentUnmap(func(mem []byte) { unmapped.Add(1) })
	p, err := a.NewPool(PoolOptions{TableWords: 16, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.NewPool(PoolOptions{TableWords: 16}); err == nil {
		t.Fatal("a second pool on one transport was accepted")
	}
	buf, err := p.Alloc(100000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	p.StoreWord(3, 42)
	if err := a.ShareSegments(b.Addr()); err != nil {
		t.Fatal(err)
	}
	id, off, ok := p.Locate(buf[10:20])
	if !ok || off != 10 {
		t.Fatalf("Locate = %d, %d, %v; want offset 10", id, off, ok)
	}
	if _, _, ok := p.Locate(make([]byte, 8)); ok {
		t.Fatal("Locate found a heap buffer in the pool")
	}
	if !b.PeerSegment(a.Addr(), id, func(mem []byte) {
		if !bytes.Equal(mem[:len(buf)], buf) {
			t.Error("the peer's mapping differs from the buffer")
		}
		mem[0] = 0xEE // the owner sees the peer's writes: one memory
	}) {
		t.Fatal("the peer has no mapping of the segment")
	}
	if buf[0] != 0xEE {
		t.Fatal("the two mappings are not of the same memory")
	}
	var w [1]uint64
	if !b.PeerWords(a.Addr(), 3, w[:]) || w[0] != 42 {
		t.Fatalf("PeerWords = %v", w)
	}
	if b.PeerWords(a.Addr(), 4096/8, w[:]) { // the table is one page
		t.Fatal("PeerWords read past the table")
	}
	if err := p.Free(make([]byte, 8)); !errors.Is(err, ErrNotPool) {
		t.Fatalf("Free of a heap buffer: %v", err)
	}
	if _, err := p.Alloc(0); err == nil {
		t.Fatal("Alloc(0) accepted")
	}

	// Reuse: the freed segment comes back for the same size.
	if err := p.Free(buf); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(buf); !errors.Is(err, ErrNotPool) {
		t.Fatalf("double Free: %v", err)
	}
	buf2, _ := p.Alloc(100000)
	if id2, _, _ := p.Locate(buf2); id2 != id {
		t.Fatalf("reuse took segment %d, want %d", id2, id)
	}
	// Release: with one kept per size, the second Free releases.
	buf3, _ := p.Alloc(100000)
	if err := a.ShareSegments(b.Addr()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the peer maps 3 segments", func() bool { return b.PeerSegments() == 3 })
	p.Free(buf2)
	p.Free(buf3)
	waitFor(t, "the peer unmaps the released segment", func() bool { return b.PeerSegments() == 2 })
	if unmapped.Load() != 1 {
		t.Fatalf("unmap hook ran %d times, want 1", unmapped.Load())
	}
	// The owner goes away: the peer unmaps the rest.
	a.Close()
	waitFor(t, "the peer drops every segment", func() bool { return b.PeerSegments() == 0 })
	if unmapped.Load() != 3 {
		t.Fatalf("unmap hook ran %d times, want 3", unmapped.Load())
	}
}

// TestShareSegmentsEndsAtClose: a ShareSegments waiting for a peer that
// does not acknowledge (its segment table is held: it cannot map) returns
// transport.ErrClosed as the transport closes, instead of waiting out
// the handshake time.
func TestShareSegmentsEndsAtClose(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	closed := false
	defer func() {
		if !closed {
			a.Close()
		}
	}()
	p, err := a.NewPool(PoolOptions{TableWords: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ShareSegments(b.Addr()); err != nil {
		t.Fatal(err)
	}
	_, release, ok := b.HoldPeerSegment(a.Addr(), 0)
	if !ok {
		t.Fatal("the peer has no mapping of the pool's table")
	}
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	if _, err := p.Alloc(100000); err != nil {
		t.Fatal(err)
	}
	shared := make(chan error, 1)
	go func() { shared <- a.ShareSegments(b.Addr()) }()
	o := ringTo(a, b)
	waitFor(t, "the share waits for the peer", func() bool {
		if o.shareWait.TryLock() { // held by the share past its fast path, until it returns
			o.shareWait.Unlock()
			return false
		}
		return true
	})
	a.Close()
	closed = true
	if err := <-shared; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("ShareSegments as its transport closed: %v, want transport.ErrClosed", err)
	}
	release()
	released = true
}

// FuzzControl checks the decoder of control messages from a peer against a
// byte-by-byte decoding: only ctlLen bytes with the magic are accepted, and
// every field is where the layout says.
func FuzzControl(f *testing.F) {
	var m [ctlLen]byte
	putCtl(m[:], ctlShare, 3, 0, 1<<21)
	f.Add(m[:])
	putCtl(m[:], ctlAck, 7, 2, 0)
	f.Add(m[:])
	putCtl(m[:], ctlLaneRetire, 0, 0, 0) // askback.go; FuzzProducerControl acts on them
	f.Add(m[:])
	putCtl(m[:], ctlLaneOffer, 0, 0, 0)
	f.Add(m[:])
	f.Add([]byte("gmxc"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeCtl(b)
		u := func(i, n int) uint64 {
			v := uint64(0)
			for k := n - 1; k >= 0; k-- {
				v = v<<8 | uint64(b[i+k])
			}
			return v
		}
		want := len(b) == 24 && b[0] == 'c' && b[1] == 'x' && b[2] == 'm' && b[3] == 'g'
		if ok != want {
			t.Fatalf("decodeCtl(%x) ok = %v, want %v", b, ok, want)
		}
		if ok && (uint64(got.kind) != u(4, 4) || uint64(got.id) != u(8, 4) || uint64(got.status) != u(12, 4) || got.size != u(16, 8)) {
			t.Fatalf("decodeCtl(%x) = %+v", b, got)
		}
	})
}

// TestShareWhileReleasing: ShareSegments to a peer in a loop while
// another goroutine allocates and frees segments that are released at
// once (Keep < 0), each release announced to the peers, neither waits for
// the other for ever, and the transport closes after.
func TestShareWhileReleasing(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	p, err := a.NewPool(PoolOptions{TableWords: 16, Keep: -1})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 20000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shared := make(chan error, 1)
	freed := make(chan error, 1)
	go func() {
		for range rounds {
			if err := a.ShareSegments(b.Addr()); err != nil {
				shared <- err
				return
			}
		}
		shared <- nil
	}()
	go func() {
		for range rounds {
			buf, err := p.Alloc(4096)
			if err == nil {
				err = p.Free(buf)
			}
			if err != nil {
				freed <- err
				return
			}
		}
		freed <- nil
	}()
	for _, c := range []chan error{shared, freed} {
		select {
		case err := <-c:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			// Deadlocked: Close would wait for ever too.
			t.Fatalf("ShareSegments and Free still running after %d rounds' time: deadlocked", rounds)
		}
	}
	closed := make(chan struct{})
	go func() {
		a.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close still running: deadlocked")
	}
}

// TestReleaseLeavesRingTable: a release (Free of a segment the pool does
// not keep) that waits for a ring's share lock, held by a ShareSegments
// passing segments to that ring (sends that may block), does not hold the
// table of rings meanwhile: every look-up of a ring (outFor, each send's)
// would wait behind that share.
func TestReleaseLeavesRingTable(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	defer a.Close()
	p, buf := sharedReleasingPool(t, a, b)
	o := ringTo(a, b)
	o.shareMu.Lock() // as a ShareSegments to b holds it
	freed := make(chan error, 1)
	go func() { freed <- p.Free(buf) }()
	waitFor(t, "the release to wait for the ring's share lock", func() bool {
		st := make([]byte, 1<<20)
		for _, g := range strings.Split(string(st[:runtime.Stack(st, true)]), "\n\n") {
			if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "announceRelease(") {
				return true
			}
		}
		return false
	})
	free := a.outMu.TryLock() // what every look-up of a ring takes
	if free {
		a.outMu.Unlock()
	}
	o.shareMu.Unlock()
	if err := <-freed; err != nil {
		t.Fatal(err)
	}
	if !free {
		t.Fatal("a release waiting for a ring's share lock holds the table of rings: every look-up of a ring waits behind that ring's share")
	}
}

// TestReleaseWhileShareWaits: while a ShareSegments waits for a peer that
// does not acknowledge (its segment table is held: it cannot map), a Free
// that releases a segment the peer has, and a look-up of the ring to the
// peer, return at once; the share ends well once the peer maps.
func TestReleaseWhileShareWaits(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	defer a.Close()
	p, old := sharedReleasingPool(t, a, b)
	_, release, ok := b.HoldPeerSegment(a.Addr(), 0)
	if !ok {
		t.Fatal("the peer has no mapping of the pool's table")
	}
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	fresh, err := p.Alloc(100000)
	if err != nil {
		t.Fatal(err)
	}
	newID, _, _ := p.Locate(fresh)
	shared := make(chan error, 1)
	go func() { shared <- a.ShareSegments(b.Addr()) }()
	o := ringTo(a, b)
	waitFor(t, "the share to pass the new segment", func() bool {
		o.shareMu.Lock()
		defer o.shareMu.Unlock()
		return o.shared[newID]
	})
	if err := p.Free(old); err != nil {
		t.Fatal(err)
	}
	if _, err := a.outFor(b.Addr()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-shared:
		t.Fatalf("the share ended (%v) before the peer could map: Free waited for it", err)
	default:
	}
	release()
	released = true
	if err := <-shared; err != nil {
		t.Fatalf("ShareSegments once the peer mapped: %v", err)
	}
}

// TestShareManySegments: a pool of 40 segments made before the first
// share reaches the peer in one ShareSegments, every segment acknowledged.
func TestShareManySegments(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	defer a.Close()
	p, err := a.NewPool(PoolOptions{TableWords: 16})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for range n - 1 { // and the table
		if _, err := p.Alloc(4096); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Segments(); got != n {
		t.Fatalf("the pool holds %d segments, want %d", got, n)
	}
	if err := a.ShareSegments(b.Addr()); err != nil {
		t.Fatalf("ShareSegments of %d segments: %v", n, err)
	}
	if got := b.PeerSegments(); got != n {
		t.Fatalf("the peer maps %d segments after the share, want %d", got, n)
	}
}

// TestShareAfterShareGaveUp: a share that gave up on a peer that could
// not map (its segment table is held) leaves its segment x unanswered; a
// later share that passes segment y does not take x's answer for y's: it
// returns only once the peer mapped y, though x's answer came before.
// The peer is held between the two (by its unmap hook, in the release of
// a third segment z passed between x and y).
func TestShareAfterShareGaveUp(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer b.Close()
	defer a.Close()
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	opened, released := false, false
	var release func()
	defer func() {
		if !released && release != nil {
			release()
		}
		if !opened {
			close(gate)
		}
	}()
	p, z := sharedReleasingPool(t, a, b)
	b.OnSegmentUnmap(func([]byte) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	})
	_, release, ok := b.HoldPeerSegment(a.Addr(), 0)
	if !ok {
		t.Fatal("the peer has no mapping of the pool's table")
	}
	x, err := p.Alloc(100000)
	if err != nil {
		t.Fatal(err)
	}
	xID, _, _ := p.Locate(x)
	a.shareTTL = time.Millisecond // the share of x gives up
	if err := a.ShareSegments(b.Addr()); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("ShareSegments to a peer that cannot map: %v, want transport.ErrUnreachable", err)
	}
	a.shareTTL = handshakeTTL
	if err := p.Free(z); err != nil { // its release goes after x's pass
		t.Fatal(err)
	}
	y, err := p.Alloc(200000)
	if err != nil {
		t.Fatal(err)
	}
	yID, _, _ := p.Locate(y)
	o := ringTo(a, b)
	shared := make(chan error, 1)
	go func() { shared <- a.ShareSegments(b.Addr()) }()
	waitFor(t, "the second share to pass y", func() bool {
		o.shareMu.Lock()
		defer o.shareMu.Unlock()
		return o.shared[yID]
	})
	release() // the peer maps x, answers, and stops in z's release
	released = true
	waitFor(t, "the peer to answer x and stop before y", func() bool { return len(entered) > 0 })
	waitFor(t, "x's answer to come", func() bool { return !o.answers.owed(xID) })
	waitFor(t, "the second share to look at x's answer and wait on, or return", func() bool {
		if len(shared) > 0 {
			return true
		}
		if len(o.answers.came) > 0 {
			return false
		}
		st := make([]byte, 1<<20)
		for _, g := range strings.Split(string(st[:runtime.Stack(st, true)]), "\n\n") {
			if strings.Contains(g, "[select") && strings.Contains(g, ").ShareSegments(") {
				return true
			}
		}
		return false
	})
	select {
	case err := <-shared:
		t.Fatalf("the second share returned (%v) with the peer's answer to x, before the peer could map y", err)
	default:
	}
	close(gate)
	opened = true
	if err := <-shared; err != nil {
		t.Fatalf("the second share once the peer mapped y: %v", err)
	}
	if !b.PeerSegment(a.Addr(), yID, func([]byte) {}) {
		t.Fatal("the second share returned and the peer has no mapping of y")
	}
}

// TestShareAnswers: the answers to the passes of one segment count in
// the order of the passes (only the last pass's answer says whether the
// segment is mapped), an answer to no pass is dropped, and a refused
// segment is forgotten as passed, so the next share passes it again.
func TestShareAnswers(t *testing.T) {
	o := &outRing{shared: map[uint32]bool{}, answers: newShareAnswers()}
	o.answers.answer(7, 0) // no pass: dropped
	if len(o.answers.came) != 0 || o.answers.owed(7) {
		t.Fatal("an answer to no pass was counted")
	}
	o.shared[7] = true
	o.answers.expect(7)
	o.answers.expect(7)
	o.answers.answer(7, 2) // the first pass's: refused, but a pass follows
	if rest, id, st := o.answers.take([]uint32{7}); len(rest) != 1 || st != 0 {
		t.Fatalf("after the first of two answers: waiting for %v, refused %d (status %d); want 7, none", rest, id, st)
	}
	o.answers.answer(7, 3)
	if _, id, st := o.answers.take([]uint32{7}); id != 7 || st != 3 {
		t.Fatalf("after the last answer, refused: segment %d, status %d; want 7, 3", id, st)
	}
	o.forgetRefused()
	if o.shared[7] {
		t.Fatal("a refused segment stays passed: no share passes it again")
	}
	o.answers.expect(8)
	o.answers.answer(8, 0)
	if rest, _, st := o.answers.take([]uint32{8}); len(rest) != 0 || st != 0 {
		t.Fatalf("after a good answer: waiting for %v, status %d", rest, st)
	}
}

// sharedReleasingPool opens on a a pool that releases a freed segment at
// once (Keep < 0), allocates a 4 KiB buffer in it, and shares the pool's
// segments with b.
func sharedReleasingPool(t *testing.T, a, b *Transport) (*Pool, []byte) {
	t.Helper()
	p, err := a.NewPool(PoolOptions{TableWords: 16, Keep: -1})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ShareSegments(b.Addr()); err != nil {
		t.Fatal(err)
	}
	return p, buf
}

// ringTo is a's ring to b.
func ringTo(a, b *Transport) *outRing {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	return a.out[b.Addr()]
}
