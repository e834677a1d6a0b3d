package mx

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
)

// laneSizes interleave lane messages (8 B, 128 B) with a medium of one
// fragment (2 KiB, the lean path's Open-MX frame), a medium of several
// fragments (20 KiB, sequenced) and a large one (64 KiB, rendezvous).
var laneSizes = []int{8, 2048, 8, 128, 65536, 0, 20000, 8}

// sendMixed sends n messages of laneSizes from e to to, message i with
// match base+i and pattern(size, i); waitSends waits for them (the large
// ones complete once received).
func sendMixed(t *testing.T, e *Endpoint, to Addr, n int, base uint64) []*Request {
	t.Helper()
	var sends []*Request
	for i := range n {
		size := laneSizes[i%len(laneSizes)]
		s, err := e.ISend([][]byte{pattern(size, uint64(i))}, to, base+uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		sends = append(sends, s)
	}
	return sends
}

func waitSends(t *testing.T, sends []*Request) {
	t.Helper()
	for i, s := range sends {
		if st := mustWait(t, s, 30*time.Second); st.Code != nil {
			t.Fatalf("send %d: %v", i, st.Code)
		}
	}
}

// checkMixed waits for receive r, which must hold message i of
// sendMixed.
func checkMixed(t *testing.T, r *Request, buf []byte, i int) {
	t.Helper()
	size := laneSizes[i%len(laneSizes)]
	st := mustWait(t, r, 30*time.Second)
	if st.Code != nil || int(st.XferLength) != size || string(buf[:size]) != string(pattern(size, uint64(i))) {
		t.Fatalf("message %d (%d B): status %v, %d bytes, match %#x, bytes intact %v", i, size, st.Code,
			st.XferLength, st.Match, string(buf[:size]) == string(pattern(size, uint64(i))))
	}
}

// TestLaneKeepsMatchingOrder: tiny and small messages on the lane,
// interleaved with mediums and large messages of the same peer, match as
// MX says whatever path each took and whether the receive came first:
// wildcard receives posted before, after, and half before and half after
// the messages take them in send order; receives posted for each match
// in reverse order each get their own message. Bytes arrive intact, and
// the lane carried the small ones (LaneSends, LaneRecvs).
func TestLaneKeepsMatchingOrder(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	const n = 3 * 8
	post := func(match, mask uint64) (*Request, []byte) {
		buf := make([]byte, 65536)
		r, err := pr.b.IRecv([][]byte{buf}, match, mask, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r, buf
	}
	for _, before := range []int{n, 0, n / 2} {
		t.Run(fmt.Sprintf("wildcards posted before %d", before), func(t *testing.T) {
			rs, bufs := make([]*Request, n), make([][]byte, n)
			for i := range before {
				rs[i], bufs[i] = post(0, 0)
			}
			sends := sendMixed(t, pr.a, pr.atob, n, 1000)
			if before < n {
				// The last message is in the unexpected queue: every
				// one before it was taken (in order) first.
				waitUntil(t, "the last message unexpected", func() bool {
					_, ok := pr.b.IProbe(1000+n-1, ^uint64(0))
					return ok
				})
			}
			for i := before; i < n; i++ {
				rs[i], bufs[i] = post(0, 0)
			}
			for i := range n {
				checkMixed(t, rs[i], bufs[i], i)
			}
			waitSends(t, sends)
		})
	}
	t.Run("each its own match, posted in reverse", func(t *testing.T) {
		rs, bufs := make([]*Request, n), make([][]byte, n)
		for i := n - 1; i >= 0; i-- {
			rs[i], bufs[i] = post(2000+uint64(i), ^uint64(0))
		}
		sends := sendMixed(t, pr.a, pr.atob, n, 2000)
		for i := range n {
			checkMixed(t, rs[i], bufs[i], i)
		}
		waitSends(t, sends)
	})
	ca, cb := pr.a.Counters(), pr.b.Counters()
	if ca.Get(LaneSends) == 0 || cb.Get(LaneRecvs) == 0 || cb.Get(UnexpectedQueued) == 0 {
		t.Fatalf("%d lane sends, %d lane receives, %d unexpected: want every path taken", ca.Get(LaneSends),
			cb.Get(LaneRecvs), cb.Get(UnexpectedQueued))
	}
	if ca.Get(Resends) != 0 || cb.Get(DropBadHeader) != 0 || cb.Get(DropUnknownType) != 0 {
		t.Fatalf("%d resends, %d bad headers, %d unknown types", ca.Get(Resends), cb.Get(DropBadHeader), cb.Get(DropUnknownType))
	}
}

// TestLaneCancelRace: a posted receive cancelled while its message
// arrives on the lane either gets the message (Cancel returns false) or
// is cancelled, and then the message waits for the next receive: never
// lost, never twice.
func TestLaneCancelRace(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	cancelled, got := 0, 0
	for i := range 300 {
		buf := make([]byte, 8)
		r, err := pr.b.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		// The send from another goroutine, the cancel after a spin of
		// a varying length: the receiving board's loop takes the record
		// at some point between.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pr.a.ISend([][]byte{pattern(8, uint64(i))}, pr.atob, 7, nil); err != nil {
				t.Error(err)
			}
		}()
		if i%2 == 1 {
			wg.Wait()
		}
		for k := 0; k < i*37%2000; k++ {
			spinSink.Add(1)
		}
		ok, err := pr.b.Cancel(r)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if ok {
			cancelled++
			if _, err := r.Wait(testCtx(t, 30*time.Second)); !errors.Is(err, ErrCancelled) {
				t.Fatalf("round %d: cancelled receive ended with %v", i, err)
			}
			if r, err = pr.b.IRecv([][]byte{buf}, 7, ^uint64(0), nil); err != nil {
				t.Fatal(err)
			}
		} else {
			got++
		}
		if st := mustWait(t, r, 30*time.Second); st.Code != nil || string(buf) != string(pattern(8, uint64(i))) {
			t.Fatalf("round %d: %v, bytes intact %v", i, st.Code, string(buf) == string(pattern(8, uint64(i))))
		}
	}
	if _, ok := pr.b.IProbe(0, 0); ok {
		t.Fatal("a message left over: one was delivered twice or out of its round")
	}
	t.Logf("%d receives cancelled first, %d matched first", cancelled, got)
}

// spinSink keeps TestLaneCancelRace's delay loop from being optimized away.
var spinSink atomic.Int64

// TestLaneBadRecords: lane records that fail their checks (written into
// the ring by a broken or hostile process) are dropped and counted, and
// the peer's next message still arrives; a lane record that did not come
// through the rings is an unknown type.
func TestLaneBadRecords(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	tr := pr.w.a.(*shm.Transport)
	good := make([]byte, wire.LaneLen+8)
	wire.PutLane(good, &wire.Lane{DstEP: pr.b.id, SrcEP: pr.a.id, Length: 8, Session: pr.b.session, Match: 1})
	bad := [][]byte{
		good[:wire.LaneLen-1],                      // short
		good[:wire.LaneLen+4],                      // length past the record
		append(append([]byte{}, good...), 0, 0, 0), // bytes after the payload
		func() []byte { r := append([]byte{}, good...); r[3] = 9; return r }(),
	}
	for _, r := range bad {
		// The board owns tr, and serializes its sends under its lock
		// (shm.Transport.SerialSends): so does a send beside it.
		pr.ba.mu.Lock()
		err := tr.SendParts(pr.bb.NICID(), r, nil)
		pr.ba.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the bad records counted", func() bool {
		return pr.bb.Counters().Get(DropBadHeader) == uint64(len(bad))
	})
	buf := make([]byte, 8)
	r, err := pr.b.IRecv([][]byte{buf}, 2, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.a.ISend([][]byte{pattern(8, 2)}, pr.atob, 2, nil); err != nil {
		t.Fatal(err)
	}
	if st := mustWait(t, r, 30*time.Second); st.Code != nil || string(buf) != string(pattern(8, 2)) {
		t.Fatalf("after bad records: %v", st.Code)
	}

	lp := newPair(t, transportFactories[0], DefaultBoardOptions(), loopback.Faults{})
	lp.bb.mu.Lock()
	lp.bb.handleFrame(lp.ba.NICID(), good)
	lp.bb.mu.Unlock()
	if c := lp.bb.Counters(); c.Get(DropUnknownType) != 1 || c.Get(RecvTiny) != 0 {
		t.Fatalf("a lane record off the rings: %d unknown types, %d tiny received; want 1, 0",
			c.Get(DropUnknownType), c.Get(RecvTiny))
	}
}

// TestLaneOffOnOneSide: a board with LocalOptions.NoLane does not
// announce the lane, so neither side uses it, and messages flow both ways
// as lean Open-MX frames.
func TestLaneOffOnOneSide(t *testing.T) {
	o := DefaultBoardOptions()
	off := o
	off.Local.NoLane = true
	pr := newPair(t, shmFactory, o, loopback.Faults{}, off)
	ctx := testCtx(t, 30*time.Second)
	for i := range 10 {
		pingOnce(t, ctx, pr.a, pr.atob, pr.b, 3, ^uint64(0), [][]byte{pattern(8, uint64(i))}, [][]byte{make([]byte, 8)})
		pingOnce(t, ctx, pr.b, pr.btoa, pr.a, 3, ^uint64(0), [][]byte{pattern(8, uint64(i))}, [][]byte{make([]byte, 8)})
	}
	ca, cb := pr.a.Counters(), pr.b.Counters()
	if ca.Get(LaneSends)+cb.Get(LaneSends) != 0 || ca.Get(LeanSends) != 10 || cb.Get(LeanSends) != 10 {
		t.Fatalf("lane sends %d and %d, lean sends %d and %d: want no lane, 10 lean each way",
			ca.Get(LaneSends), cb.Get(LaneSends), ca.Get(LeanSends), cb.Get(LeanSends))
	}
}

// TestLaneStatus: a lane message whose waiter's own poll completes and
// consumes its receive reports the full status (source, match, both
// lengths, ErrTruncated for a short buffer, the context value), the
// request is recycled after it, as after any Wait (at the board's next
// request: the next receive is made from it, and reports its own status),
// and nothing is left for TestAny or IPeek.
func TestLaneStatus(t *testing.T) {
	o := DefaultBoardOptions()
	o.BusyPoll = true // the waiter's poll takes the record
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	var prev *Request
	for i, size := range []int{8, 4, 0, 128} {
		buf := make([]byte, size)
		r, err := pr.b.IRecv([][]byte{buf}, 0, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil && r != prev {
			t.Fatalf("receive %d: a new request, not the one the last Wait consumed (it was not recycled)", i)
		}
		prev = r
		if _, err := pr.a.ISend([][]byte{pattern(8, uint64(i))}, pr.atob, 0x5a00+uint64(i), nil); err != nil {
			t.Fatal(err)
		}
		st, err := r.Wait(testCtx(t, 30*time.Second))
		want := min(size, 8)
		var wantErr error
		if size < 8 {
			wantErr = ErrTruncated
		}
		if !errors.Is(err, wantErr) || !errors.Is(st.Code, wantErr) || st.Source.NIC != pr.ba.NICID() ||
			st.Source.Endpoint != pr.a.id || st.Match != 0x5a00+uint64(i) || st.MsgLength != 8 ||
			int(st.XferLength) != want || string(buf[:want]) != string(pattern(8, uint64(i))[:want]) || st.Context != size {
			t.Fatalf("%d-byte receive: %+v, %v", size, st, err)
		}
		if _, err := r.Wait(testCtx(t, time.Second)); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("a second Wait: %v, want ErrBadRequest", err)
		}
		if st, ok := pr.b.TestAny(0, 0); ok {
			t.Fatalf("TestAny after the Wait: %+v", st)
		}
		if q, ok := pr.b.IPeek(); ok {
			t.Fatalf("IPeek after the Wait: %p", q)
		}
	}
	if got := pr.b.Counters().Get(LaneRecvs); got != 4 {
		t.Fatalf("%d lane receives, want 4", got)
	}
}

// TestLaneMedium: mediums of one fragment go on the lane between boards
// that both announce ExtRingLaneMedium, byte for byte, whether a posted
// receive takes them straight from the ring (LaneRecvs), a short one
// truncates them (ErrTruncated, the full length reported), or none is
// posted yet (the general path's MEDIUM, unexpected queue, then the
// receive); to a peer that did not announce it, they go as MEDIUM frames
// on the lean path, as before, and arrive the same.
func TestLaneMedium(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	ctx := testCtx(t, 30*time.Second)
	sizes := []int{wire.SmallMax + 1, 1000, 2048, 4000, DefaultShmEager}
	send := func(size int, match uint64) {
		t.Helper()
		s, err := pr.a.ISend([][]byte{pattern(size, match)}, pr.atob, match, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st := mustWait(t, s, 30*time.Second); st.Code != nil {
			t.Fatalf("send of %d B: %v", size, st.Code)
		}
	}
	check := func(what string, r *Request, buf []byte, size int, match uint64) {
		t.Helper()
		st, err := r.Wait(ctx)
		want, wantErr := min(size, len(buf)), error(nil)
		if len(buf) < size {
			wantErr = ErrTruncated
		}
		if !errors.Is(err, wantErr) || st.Match != match || int(st.MsgLength) != size || int(st.XferLength) != want ||
			string(buf[:want]) != string(pattern(size, match)[:want]) {
			t.Fatalf("%s, %d B into %d: %+v, %v; want %d bytes intact, error %v", what, size, len(buf), st, err, want, wantErr)
		}
	}
	for i, size := range sizes {
		m := uint64(0x100 + i)
		buf := make([]byte, size+64)
		r, err := pr.b.IRecv([][]byte{buf}, m, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		send(size, m)
		check("posted", r, buf, size, m)

		m += 0x100
		short := make([]byte, size/2)
		r, err = pr.b.IRecv([][]byte{short}, m, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		send(size, m)
		check("posted short", r, short, size, m)

		m += 0x100
		send(size, m)
		waitUntil(t, "the medium unexpected", func() bool { _, ok := pr.b.IProbe(m, ^uint64(0)); return ok })
		r, err = pr.b.IRecv([][]byte{buf}, m, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		check("unexpected", r, buf, size, m)
	}
	ca, cb := pr.a.Counters(), pr.b.Counters()
	n := uint64(3 * len(sizes))
	if ca.Get(LaneSends) != n || ca.Get(SendMediumFrag) != n || cb.Get(RecvMediumFrag) != n ||
		cb.Get(LaneRecvs) < uint64(2*len(sizes)) || cb.Get(UnexpectedQueued) < uint64(len(sizes)) {
		t.Fatalf("lane sends %d, medium fragments sent %d and received %d, lane receives %d, unexpected %d: want %d, %d, %d, >= %d, >= %d",
			ca.Get(LaneSends), ca.Get(SendMediumFrag), cb.Get(RecvMediumFrag), cb.Get(LaneRecvs), cb.Get(UnexpectedQueued),
			n, n, n, 2*len(sizes), len(sizes))
	}
	if cb.Get(DropBadHeader) != 0 || cb.Get(DropUnknownType) != 0 || ca.Get(Resends) != 0 {
		t.Fatalf("%d bad headers, %d unknown types, %d resends", cb.Get(DropBadHeader), cb.Get(DropUnknownType), ca.Get(Resends))
	}

	// A peer that did not announce ExtRingLaneMedium (an older gomx).
	pr.ba.mu.Lock()
	p := pr.a.partnerAt(pr.bb.NICID(), pr.b.id)
	if p == nil || !p.laneMed {
		pr.ba.mu.Unlock()
		t.Fatalf("partner %v: want one on the lane for mediums", p)
	}
	p.laneMed = false
	pr.ba.mu.Unlock()
	lane, lean := ca.Get(LaneSends), ca.Get(LeanSends)
	for i, size := range sizes {
		m := uint64(0x1000 + i)
		buf := make([]byte, size)
		r, err := pr.b.IRecv([][]byte{buf}, m, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		send(size, m)
		check("no lane for mediums", r, buf, size, m)
	}
	if ca = pr.a.Counters(); ca.Get(LaneSends) != lane || ca.Get(LeanSends) != lean+uint64(len(sizes)) {
		t.Fatalf("without ExtRingLaneMedium: %d more lane sends, %d more lean sends; want 0, %d",
			ca.Get(LaneSends)-lane, ca.Get(LeanSends)-lean, len(sizes))
	}
}

// ownSource takes s for the test as a polling waiter does (rxsource.go):
// counted among its pollers, so that its receive loop stays away, which
// is asked out of Recv if inside, until s.mu is free. The caller unlocks
// s.mu.
func ownSource(t testing.TB, s *rxSource) {
	t.Helper()
	s.pollIn.Add(1)
	defer s.pollLeft.Add(1)
	deadline := time.Now().Add(30 * time.Second)
	for !s.mu.TryLock() {
		if time.Now().After(deadline) {
			t.Fatal("the receive loop kept the rings")
		}
		if s.kick != nil {
			s.kick()
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// laneSender is a sender of sendBehindOwnedSource: endpoint e, to the
// receiver at to, message i with match base+i.
type laneSender struct {
	e    *Endpoint
	to   Addr
	base uint64
}

// sendBehindOwnedSource owns board b's ring source (its receive loop
// kept away: ownSource) and sends n messages of 8 bytes from each of
// from into it, interleaved (message i of each sender in turn, then
// message i+1), message i of a sender with match base+i and
// pattern(8, base+i). The caller unlocks the source's mu.
func sendBehindOwnedSource(t *testing.T, b *Board, n int, from ...laneSender) *rxSource {
	t.Helper()
	s := b.spinSrcs[0]
	ownSource(t, s)
	for i := range n {
		for _, f := range from {
			m := f.base + uint64(i)
			if _, err := f.e.ISend([][]byte{pattern(8, m)}, f.to, m, nil); err != nil {
				s.mu.Unlock()
				t.Fatal(err)
			}
		}
	}
	return s
}

// laneLookWires are the two ways lane records reach a look: through the
// receiving transport's queue, which carries a pair's first frames (the
// default options, for the few frames of these tests), or through a lane
// ring of the pair's own, which pairs get at their first frame
// (LaneAfter < 0) and keep (LaneIdle < 0): Peek and Take on a ring, its
// cursor and published head, and the round robin between rings. lanes
// says which.
var laneLookWires = []struct {
	name  string
	tf    transportFactory
	lanes bool
}{
	{"queue", shmFactory, false},
	{"lanes", transportFactory{name: "shm lanes", new: shmWireWith(shm.Options{LaneAfter: -1, LaneIdle: -1})}, true},
}

// checkRingsRead fails the test unless board b reads senders lane rings
// when lanes, and none otherwise: the records came the way the case says.
func checkRingsRead(t *testing.T, b *Board, lanes bool, senders int) {
	t.Helper()
	want := 0
	if lanes {
		want = senders
	}
	for _, c := range b.TransportCounters() {
		if c.Name == shm.CounterRingsRead && c.Value != uint64(want) {
			t.Fatalf("the receiver reads %d lane rings, want %d", c.Value, want)
		}
	}
}

// TestLaneUnexpectedTakenByWaiter: lane records that come before their
// receive is posted (in an oversubscribed alltoall, half the messages)
// are taken by a polling waiter's look itself, into the unexpected queue,
// as those with a posted receive are: no look leaves one to a Recv
// batch. The receives posted afterwards get them from there, in order and
// intact; an endpoint with an unexpected handler still hands them to the
// general path, which calls it.
func TestLaneUnexpectedTakenByWaiter(t *testing.T) {
	for _, handler := range []bool{false, true} {
		t.Run(fmt.Sprintf("handler=%v", handler), func(t *testing.T) {
			pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
			var handled atomic.Int32
			if handler {
				pr.b.SetUnexpectedHandler(func(UnexpectedMessage) HandlerResult {
					handled.Add(1)
					return Continue
				})
			}
			const n = 6
			last := make([]byte, 8)
			rl, err := pr.b.IRecv([][]byte{last}, n-1, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			s := sendBehindOwnedSource(t, pr.bb, n, laneSender{pr.a, pr.atob, 0})
			var looks []laneLook
			for range n + 1 {
				looks = append(looks, pr.bb.takeLane(s, 0, nil))
			}
			s.mu.Unlock()
			if handler {
				if looks[0] != laneOther {
					t.Fatalf("with a handler the first look took %v, want laneOther (the general path calls the handler)", looks[0])
				}
				waitUntil(t, "the handler to see the messages", func() bool { return handled.Load() == n-1 })
			} else {
				// One look takes every record (takeLane's batch).
				if looks[0] != laneTaken {
					t.Fatalf("first look: %v, want laneTaken (looks %v)", looks[0], looks)
				}
				for i, l := range looks[1:] {
					if l != laneEmpty {
						t.Fatalf("look %d after the first: %v, want laneEmpty (looks %v)", i+1, l, looks)
					}
				}
				if got := pr.b.Counters().Get(UnexpectedQueued); got != n-1 {
					t.Fatalf("%d messages queued unexpected, want %d", got, n-1)
				}
			}
			if st := mustWait(t, rl, 30*time.Second); st.Code != nil || string(last) != string(pattern(8, n-1)) {
				t.Fatalf("posted receive: %v, bytes intact %v", st.Code, string(last) == string(pattern(8, n-1)))
			}
			// The handler let them by (Continue): with it or without, they
			// wait in the unexpected queue for their receives.
			for i := range n - 1 {
				buf := make([]byte, 8)
				r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				st := mustWait(t, r, 30*time.Second)
				if st.Code != nil || st.XferLength != 8 || st.Source.NIC != pr.a.b.NICID() || string(buf) != string(pattern(8, uint64(i))) {
					t.Fatalf("message %d: %v, %d bytes from %v, intact %v", i, st.Code, st.XferLength, st.Source.NIC, string(buf) == string(pattern(8, uint64(i))))
				}
			}
			if got := pr.b.Counters().Get(RecvTiny); got != n {
				t.Fatalf("%d tiny receives counted, want %d", got, n)
			}
		})
	}
}

// TestLaneLookTakesTheRecordsBehind: one look of a polling waiter takes
// the lane records waiting for it, one after another under one hold of the
// board's lock, until its own receive is filled (it then returns to the
// application, leaving the rest to the next look), at most laneBatch of
// them; each record goes where it would have gone alone (the unexpected
// queue, or the waiter's receive), in order and intact. So through the
// receive queue and through a lane ring.
func TestLaneLookTakesTheRecordsBehind(t *testing.T) {
	for _, lw := range laneLookWires {
		t.Run(lw.name, func(t *testing.T) {
			pr := newPair(t, lw.tf, DefaultBoardOptions(), loopback.Faults{})
			const n, own = laneBatch + 5, 2
			buf := make([]byte, 8)
			r, err := pr.b.IRecv([][]byte{buf}, own, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			s := sendBehindOwnedSource(t, pr.bb, n, laneSender{pr.a, pr.atob, 0})
			unexp := func() uint64 { return pr.b.Counters().Get(UnexpectedQueued) }
			w := &waiterReq{r: r}
			var looks []laneLook
			var queued []uint64
			looks = append(looks, pr.bb.takeLane(s, 0, w))
			queued = append(queued, unexp())
			for range 3 {
				looks = append(looks, pr.bb.takeLane(s, 0, nil))
				queued = append(queued, unexp())
			}
			s.mu.Unlock()
			checkRingsRead(t, pr.bb, lw.lanes, 1)
			want := []laneLook{laneTaken, laneTaken, laneTaken, laneEmpty}
			wantQueued := []uint64{own, own + laneBatch, n - 1, n - 1}
			if fmt.Sprint(looks) != fmt.Sprint(want) || fmt.Sprint(queued) != fmt.Sprint(wantQueued) {
				t.Fatalf("looks %v with %v unexpected after each, want %v and %v", looks, queued, want, wantQueued)
			}
			if !w.ok || w.st.Code != nil || w.st.Match != own || string(buf) != string(pattern(8, own)) {
				t.Fatalf("the waiter's receive: done %v, %v, match %d, bytes intact %v", w.ok, w.st.Code, w.st.Match, string(buf) == string(pattern(8, own)))
			}
			for i := range n {
				if i == own {
					continue
				}
				b := make([]byte, 8)
				r, err := pr.b.IRecv([][]byte{b}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				if st := mustWait(t, r, 30*time.Second); st.Code != nil || string(b) != string(pattern(8, uint64(i))) {
					t.Fatalf("message %d: %v, bytes intact %v", i, st.Code, string(b) == string(pattern(8, uint64(i))))
				}
			}
		})
	}
}

// TestLaneLookTwoSenders: a look takes the records of two senders, sent
// interleaved, until its own receive, which the second sender's third
// message fills. Through lanes, Peek goes from one sender's ring to the
// other's in an order of its own (round robin among the hot rings, the
// cold ones after): whatever it is, each sender's messages come out in
// the order it sent them, and each goes where it would have gone alone
// (the waiter's receive, a receive posted for it, the unexpected queue),
// intact.
func TestLaneLookTwoSenders(t *testing.T) {
	for _, lw := range laneLookWires {
		t.Run(lw.name, func(t *testing.T) {
			pr := newPair(t, lw.tf, DefaultBoardOptions(), loopback.Faults{})
			o := DefaultBoardOptions()
			o.Local.Off = true // as newPairOn: every message crosses the rings
			bc, err := NewBoard(pr.w.third(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bc.Close() })
			c, err := bc.OpenEndpoint(3, testKey)
			if err != nil {
				t.Fatal(err)
			}
			ctob, err := c.Connect(testCtx(t, 20*time.Second), pr.bb.NICID(), 2, testKey)
			if err != nil {
				t.Fatal(err)
			}
			const n = 6
			senders := []laneSender{{pr.a, pr.atob, 0x100}, {c, ctob, 0x200}}
			nics := []transport.NICID{pr.ba.NICID(), bc.NICID()}
			own, posted := uint64(0x200+2), uint64(0x100+4)
			ownBuf, postedBuf := make([]byte, 8), make([]byte, 8)
			r, err := pr.b.IRecv([][]byte{ownBuf}, own, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			rp, err := pr.b.IRecv([][]byte{postedBuf}, posted, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			s := sendBehindOwnedSource(t, pr.bb, n, senders...)
			unexp := func() uint64 { return pr.b.Counters().Get(UnexpectedQueued) }
			w := &waiterReq{r: r}
			looks := []laneLook{pr.bb.takeLane(s, 0, w)}
			first := unexp()
			for range 2 * n {
				if looks = append(looks, pr.bb.takeLane(s, 0, nil)); looks[len(looks)-1] != laneTaken {
					break
				}
			}
			all := unexp()
			s.mu.Unlock()
			checkRingsRead(t, pr.bb, lw.lanes, 2)
			// The first look took at least the second sender's two
			// messages before its own, and stopped there.
			if last := len(looks) - 1; looks[0] != laneTaken || looks[last] != laneEmpty || first < 2 || first >= all {
				t.Fatalf("looks %v, %d unexpected after the first and %d in all: want laneTaken first, laneEmpty last, 2 or more after the first and more in all",
					looks, first, all)
			}
			for _, l := range looks[1 : len(looks)-1] {
				if l != laneTaken {
					t.Fatalf("looks %v: want laneTaken until laneEmpty", looks)
				}
			}
			if all != 2*n-2 {
				t.Fatalf("%d messages unexpected, want %d (all but the waiter's and the posted one)", all, 2*n-2)
			}
			if !w.ok || w.st.Code != nil || w.st.Match != own || w.st.Source.NIC != bc.NICID() || string(ownBuf) != string(pattern(8, own)) {
				t.Fatalf("the waiter's receive: done %v, %v, match %#x from %v, bytes intact %v", w.ok, w.st.Code, w.st.Match, w.st.Source.NIC,
					string(ownBuf) == string(pattern(8, own)))
			}
			if st := mustWait(t, rp, 30*time.Second); st.Code != nil || st.Match != posted || string(postedBuf) != string(pattern(8, posted)) {
				t.Fatalf("the posted receive: %v, match %#x, bytes intact %v", st.Code, st.Match, string(postedBuf) == string(pattern(8, posted)))
			}
			// Each sender's next unexpected message is its next one sent.
			for k, f := range senders {
				for i := range n {
					m := f.base + uint64(i)
					if m == own || m == posted {
						continue
					}
					b := make([]byte, 8)
					r, err := pr.b.IRecv([][]byte{b}, f.base, ^uint64(0xff), nil)
					if err != nil {
						t.Fatal(err)
					}
					if st := mustWait(t, r, 30*time.Second); st.Code != nil || st.Match != m || st.Source.NIC != nics[k] || string(b) != string(pattern(8, m)) {
						t.Fatalf("sender %d's next message: %v, match %#x from %v (want %#x from %v), bytes intact %v", k, st.Code, st.Match,
							st.Source.NIC, m, nics[k], string(b) == string(pattern(8, st.Match)))
					}
				}
			}
		})
	}
}

// TestLaneLookStopsMidBatch: a look whose batch meets a record laneFast
// does not deliver (here the unexpected queue, bounded at three
// messages, is full) stops there, having delivered those before it: it
// reports laneTaken, the next look laneOther, and the record it left in
// place goes to the general path through Recv (held, as a lean message
// that finds the queue full is), which delivers it intact and in order
// once the receives are posted; nothing is lost nor resent.
func TestLaneLookStopsMidBatch(t *testing.T) {
	for _, lw := range laneLookWires {
		t.Run(lw.name, func(t *testing.T) {
			o := DefaultBoardOptions()
			o.UnexpectedMaxMessages = 3
			pr := newPair(t, lw.tf, o, loopback.Faults{})
			const n = 5
			s := sendBehindOwnedSource(t, pr.bb, n, laneSender{pr.a, pr.atob, 0})
			looks := []laneLook{pr.bb.takeLane(s, 0, nil)}
			queued := pr.b.Counters().Get(UnexpectedQueued)
			looks = append(looks, pr.bb.takeLane(s, 0, nil))
			s.mu.Unlock()
			checkRingsRead(t, pr.bb, lw.lanes, 1)
			if fmt.Sprint(looks) != fmt.Sprint([]laneLook{laneTaken, laneOther}) || queued != 3 {
				t.Fatalf("looks %v, %d unexpected after the first: want [laneTaken laneOther] and 3", looks, queued)
			}
			waitUntil(t, "Recv to hold the record left", func() bool { return pr.b.Counters().Get(LeanHeld) > 0 })
			for i := range n {
				b := make([]byte, 8)
				r, err := pr.b.IRecv([][]byte{b}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				if st := mustWait(t, r, 30*time.Second); st.Code != nil || st.Match != uint64(i) || string(b) != string(pattern(8, uint64(i))) {
					t.Fatalf("message %d: %v, match %d, bytes intact %v", i, st.Code, st.Match, string(b) == string(pattern(8, uint64(i))))
				}
			}
			ca, cb := pr.a.Counters(), pr.b.Counters()
			if cb.Get(DropUnexpectedFull) != 0 || cb.Get(DropBadHeader) != 0 || ca.Get(Resends) != 0 {
				t.Fatalf("%d dropped for a full queue, %d bad headers, %d resends", cb.Get(DropUnexpectedFull), cb.Get(DropBadHeader), ca.Get(Resends))
			}
		})
	}
}
