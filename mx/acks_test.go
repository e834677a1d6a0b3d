package mx

import (
	"context"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestAckPolicy checks each way an ack reaches the sender, with timers set
// so that only the way under test can complete a send: the assertions wait
// on completions, never on how fast the machine is.
func TestAckPolicy(t *testing.T) {
	// NotAckedMax messages in a row are acked at once: with an hour of
	// ack delay and no resends, nothing else can complete them.
	opts := fastOptions()
	opts.AckDelay = time.Hour
	opts.ResendDelay = time.Hour
	opts.RTOMin = time.Hour // no tail-loss probe either: it too is answered by an ack
	opts.ZombieSends = -1   // sends complete on their ack
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	first, _ := pr.a.ISend([][]byte{[]byte("x")}, pr.atob, 1, nil)
	var rs []*Request
	for i := 1; i < opts.NotAckedMax; i++ {
		r, _ := pr.a.ISend(nil, pr.atob, 2, nil)
		rs = append(rs, r)
	}
	for _, r := range append(rs, first) {
		mustWait(t, r, 10*time.Second)
	}
	if c := pr.b.Counters(); c.Get(AcksImmediate) == 0 || c.Get(AcksDelayed) != 0 {
		t.Fatalf("acks immediate %d, delayed %d", c.Get(AcksImmediate), c.Get(AcksDelayed))
	}
	// A reply carries the ack: the hour-long timers cannot.
	r, _ := pr.b.IRecv(nil, 3, ^uint64(0), nil)
	s, _ := pr.a.ISend(nil, pr.atob, 3, nil)
	mustWait(t, r, 10*time.Second)
	back, _ := pr.b.ISend(nil, pr.btoa, 4, nil)
	mustWait(t, s, 10*time.Second)
	back.Forget()
	if pr.b.Counters().Get(AcksPiggybacked) == 0 {
		t.Fatal("no piggybacked ack")
	}

	// One message and no traffic back: only the delayed ack completes it
	// (resends would be answered by an ack too, so they wait an hour).
	opts.AckDelay = 5 * time.Millisecond
	pr = newPair(t, loopbackOnly, opts, loopback.Faults{})
	s, _ = pr.a.ISend([][]byte{[]byte("x")}, pr.atob, 1, nil)
	mustWait(t, s, 10*time.Second)
	if c := pr.b.Counters(); c.Get(AcksDelayed) == 0 || c.Get(AcksImmediate) != 0 {
		t.Fatalf("acks delayed %d, immediate %d", c.Get(AcksDelayed), c.Get(AcksImmediate))
	}
}

// TestRingAckPolicy: a receiver acks a peer on the rings once per
// ringAcks messages, or per NotAckedMax when its rings run dry, and the
// last few after ringAckDelay, not AckDelay: sends that complete only on
// their ack (no zombie sends here) all complete although AckDelay is an
// hour and the last messages are acked by no count.
func TestRingAckPolicy(t *testing.T) {
	o := DefaultBoardOptions()
	o.AckDelay = time.Hour
	o.ZombieSends = -1 // sends complete on their ack
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	every := pr.a.b.ringAcks()
	if every <= o.NotAckedMax {
		t.Fatalf("ringAcks %d: want more than NotAckedMax %d with the default windows", every, o.NotAckedMax)
	}
	const n = 501 // a multiple of neither NotAckedMax nor ringAcks
	var sends []*Request
	for i := range n {
		s, err := pr.a.ISend([][]byte{pattern(8, uint64(i))}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		sends = append(sends, s)
	}
	buf := make([]byte, 8)
	for i := range n {
		r, err := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		mustWait(t, r, 10*time.Second)
		if string(buf) != string(pattern(8, uint64(i))) {
			t.Fatalf("message %d: bytes changed", i)
		}
	}
	for _, s := range sends {
		mustWait(t, s, 10*time.Second)
	}
	// Never more ack frames than one per NotAckedMax messages. (How many
	// fewer depends on how the receiver's batches fell.)
	if c := pr.b.Counters(); c.Get(SendTruc) > uint64(n/o.NotAckedMax+1) {
		t.Fatalf("%d messages: %d ack frames, want at most %d", n, c.Get(SendTruc), n/o.NotAckedMax+1)
	}
	// One message alone: no count acks it, only the short delay.
	delayed := pr.b.Counters().Get(AcksDelayed)
	s, err := pr.a.ISend([][]byte{pattern(8, n)}, pr.atob, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, 10*time.Second)
	if got := pr.b.Counters().Get(AcksDelayed); got != delayed+1 {
		t.Fatalf("a lone message: %d delayed acks, want %d", got-delayed, 1)
	}
}

// TestRingAckAfterPolledMessage checks that a message a polling waiter
// took from the rings, which starts its ack delay without reading the
// clock (noteReceived), is still acked after that delay: with acks on a
// count and piggybacks out of reach, only the delayed ack completes the
// sends, one ack per lone message, in either wait mode.
func TestRingAckAfterPolledMessage(t *testing.T) {
	for _, busy := range []bool{false, true} {
		o := DefaultBoardOptions()
		o.AckDelay = time.Hour // the rings' short delay still applies
		o.ResendDelay = time.Hour
		o.RTOMin = time.Hour // no tail-loss probe, which an ack answers at once
		o.ZombieSends = -1   // sends complete on their ack
		o.BusyPoll = busy
		pr := newPair(t, shmFactory, o, loopback.Faults{})
		buf := make([]byte, 8)
		for i := range 5 {
			r, err := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			delayed := pr.b.Counters().Get(AcksDelayed)
			got := make(chan error, 1)
			go func() {
				_, err := r.Wait(testCtx(t, 10*time.Second))
				got <- err
			}()
			s, err := pr.a.ISend([][]byte{pattern(8, uint64(i))}, pr.atob, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("busy %v, message %d: receive: %v", busy, i, err)
			}
			if string(buf) != string(pattern(8, uint64(i))) {
				t.Fatalf("busy %v, message %d: bytes changed", busy, i)
			}
			mustWait(t, s, 10*time.Second)
			if n := pr.b.Counters().Get(AcksDelayed) - delayed; n != 1 {
				t.Fatalf("busy %v, message %d: %d delayed acks, want 1", busy, i, n)
			}
		}
		t.Logf("busy %v: receiver's waits %+v", busy, pr.b.Board().WaitStats())
	}
}

func TestEagerSendsCompleteAtOnce(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	for _, size := range []int{0, 32, 128, 20000} {
		msg := pattern(size, 1)
		s, _ := pr.a.ISend([][]byte{msg}, pr.atob, 1, nil)
		if !s.Done() {
			t.Fatalf("eager send of %d bytes: Done is false once ISend returned", size)
		}
		if _, done := s.Test(); !done {
			t.Fatalf("eager send of %d bytes did not complete once copied", size)
		}
		clear(msg) // the stack copied it
		buf := make([]byte, size)
		r, _ := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
		mustWait(t, r, 10*time.Second)
		if string(buf) != string(pattern(size, 1)) {
			t.Fatalf("%d bytes: payload changed after the send completed", size)
		}
	}
	// Synchronous sends wait for the receiver.
	s, _ := pr.a.ISSend([][]byte{[]byte("sync")}, pr.atob, 2, nil)
	time.Sleep(10 * time.Millisecond)
	if s.Done() {
		t.Fatal("issend reports Done before the receiver matched")
	}
	if _, done := s.Test(); done {
		t.Fatal("issend completed before the receiver matched")
	}
	r, _ := pr.b.IRecv([][]byte{make([]byte, 4)}, 2, ^uint64(0), nil)
	mustWait(t, r, 10*time.Second)
	mustWait(t, s, 10*time.Second)
}

// TestBusyTickOnlyForFineTimeouts: a partner on a lossy wire, whose
// resends are due after RTOMin (250 µs by default), keeps its board on the
// busy tick while it has frames in flight; a peer on the rings, whose
// resends wait the rings' FullWait (a second), does not, so that a stream
// of messages to it wakes the progress goroutine every tick (8 ms by
// default), not every 62.5 µs.
func TestBusyTickOnlyForFineTimeouts(t *testing.T) {
	for _, c := range []struct {
		name string
		tf   transportFactory
		fine bool
	}{{"loopback", loopbackOnly, true}, {"rings", shmFactory, false}} {
		pr := newPair(t, c.tf, DefaultBoardOptions(), loopback.Faults{})
		b := pr.a.b
		b.mu.Lock()
		fine, floor := pr.atob.p.finerThanTick(), time.Duration(pr.atob.p.rtoMin())
		b.mu.Unlock()
		if fine != c.fine {
			t.Errorf("%s: partner's timeouts (floor %v) finer than the %v tick: %v, want %v", c.name, floor, b.tick, fine, c.fine)
		}
	}
}

// TestProbeAllowsDescheduledPeer checks that the tail-loss probe's
// timeout allows for a peer the machine keeps descheduled by itself, not
// through the measured round trip: with the process's descheduling
// estimate at a loaded machine's (descheduled.go), a probe toward a peer
// that is probed (an Open-MX peer over the network) waits at least srtt
// plus that allowance whether the round trips measured 1 µs or 50 µs, and
// one through the rings waits their FullWait plus the allowance, so a
// ring peer descheduled past FullWait is not probed. With no allowance
// (an idle machine) the network's probe waits about a round trip and the
// rings' FullWait.
func TestProbeAllowsDescheduledPeer(t *testing.T) {
	saved := [2]int64{descheduling.cur.Load(), descheduling.prev.Load()}
	t.Cleanup(func() { descheduling.cur.Store(saved[0]); descheduling.prev.Store(saved[1]) })
	const gap = int64(40 * time.Millisecond) // the longest recent gap: the allowance is 3x
	for _, c := range []struct {
		name  string
		tf    transportFactory
		rings bool
	}{{"loopback", loopbackOnly, false}, {"rings", shmFactory, true}} {
		pr := newPair(t, c.tf, DefaultBoardOptions(), loopback.Faults{})
		b, p := pr.a.b, pr.atob.p
		for _, srtt := range []int64{int64(time.Microsecond), int64(50 * time.Microsecond)} {
			for _, loaded := range []bool{false, true} {
				// The estimate is the process's: the pair's own waiters
				// may raise it meanwhile, so the timeout is taken between
				// two equal readings of it (bounded).
				var pto, slack int64
				for i := 0; ; i++ {
					descheduling.start.Store(time.Now().UnixNano()) // no rotation meanwhile
					descheduling.cur.Store(0)
					descheduling.prev.Store(0)
					if loaded {
						descheduling.cur.Store(gap)
					}
					slack = descheduling.slack()
					b.mu.Lock()
					p.rtt = rtt{srtt: srtt, rttvar: srtt / 4, ok: true}
					pto = p.pto(0)
					b.mu.Unlock()
					if descheduling.slack() == slack || i == 100 {
						break
					}
				}
				if loaded && slack < 3*gap {
					t.Fatalf("allowance %v with a gap of %v, want 3x", time.Duration(slack), time.Duration(gap))
				}
				var lo, hi int64
				if c.rings {
					lo = int64(pr.ba.rings.FullWait()) + slack
					hi = lo
				} else {
					lo = srtt + slack
					hi = max(2*srtt, srtt+b.tailAckDelay()+slack)
				}
				if pto < lo || pto > hi {
					t.Errorf("%s, srtt %v, allowance %v: probe after %v, want %v..%v", c.name, time.Duration(srtt), time.Duration(slack), time.Duration(pto), time.Duration(lo), time.Duration(hi))
				}
			}
		}
	}
}

// laneStream sends n 8-byte messages from a to b of pr one at a time, each
// received (and its receive waited for) before the next goes, so that b's
// rings run dry after every message, and checks their bytes. It returns
// b's ack frames and a's lane sends. A sender that never waits takes its
// acks only when its receive loop runs: every 32 messages the stream waits
// until a holds no more than ringAcks messages un-acked, so that it stays
// within the lean window (leanWindow) whenever its loop runs.
func laneStream(t *testing.T, pr *pair, n int) (acks, laneSends uint64) {
	t.Helper()
	acks0, lanes0 := pr.b.Counters().Get(SendTruc), pr.a.Counters().Get(LaneSends)
	buf := make([]byte, 8)
	every := pr.b.b.ringAcks()
	for i := range n {
		if i%32 == 31 {
			waitUntil(t, "the sender to take its acks", func() bool {
				pr.a.b.mu.Lock()
				defer pr.a.b.mu.Unlock()
				return seqDiff(pr.atob.p.sendSeq, pr.atob.p.ackPoint) <= every
			})
		}
		r, err := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.a.ISend([][]byte{pattern(8, uint64(i))}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustWait(t, r, 10*time.Second)
		if string(buf) != string(pattern(8, uint64(i))) {
			t.Fatalf("message %d: bytes changed", i)
		}
		mustWait(t, s, 10*time.Second)
	}
	return pr.b.Counters().Get(SendTruc) - acks0, pr.a.Counters().Get(LaneSends) - lanes0
}

// TestLaneAcksOneWay: a pair that talks one way, by lane records, whose
// receiver's rings run dry after every message, costs an ack frame per
// ringAcks messages, not per NotAckedMax: the sender completed each one as
// it wrote it (lean.go). With AckDelay an hour no delayed ack can come;
// then, with the default AckDelay, the last few messages are acked once
// that delay has passed, and no sooner by any count.
func TestLaneAcksOneWay(t *testing.T) {
	o := DefaultBoardOptions()
	o.AckDelay = time.Hour
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	// A pair's first messages go before its lane records may (the
	// boards' announcements): count from the first that did.
	waitUntil(t, "the pair's first lane record", func() bool {
		laneStream(t, pr, 1)
		return pr.a.Counters().Get(LaneSends) > 0
	})
	const n = 512
	acks, lanes := laneStream(t, pr, n)
	if lanes != n {
		t.Fatalf("%d of %d messages went as lane records", lanes, n)
	}
	every := uint64(pr.b.b.ringAcks())
	t.Logf("%d messages, one way: %d ack frames (%.3f a message)", n, acks, float64(acks)/n)
	if acks > n/every+1 {
		t.Fatalf("%d messages one way: %d ack frames, want at most %d (one per %d)", n, acks, n/every+1, every)
	}

	pr = newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	if acks, _ := laneStream(t, pr, 3); acks > 1 {
		t.Fatalf("3 messages: %d ack frames before the delay, want at most 1", acks)
	}
	waitUntil(t, "the delayed ack of a one-way stream's last messages", func() bool { return pr.b.Counters().Get(AcksDelayed) > 0 })
	if c := pr.b.Counters(); c.Get(AcksImmediate) != 0 || c.Get(AcksDelayed) != 1 {
		t.Fatalf("3 messages: %d acks at once, %d delayed; want 0 and 1", c.Get(AcksImmediate), c.Get(AcksDelayed))
	}
	// The sender's lean window moved: everything it sent is acked.
	waitUntil(t, "the sender to take the delayed ack", func() bool {
		pr.a.b.mu.Lock()
		defer pr.a.b.mu.Unlock()
		return pr.atob.p.ackPoint == pr.atob.p.sendSeq
	})
}

// TestLaneAckJoinedBySequenced checks noteReceived's classes on a pair
// on the rings: lane records alone wait AckDelay and are never owed an
// ack when the rings run dry; a tiny message of the sequenced path that
// joins them (its sender may wait for the ack) brings the deadline forward
// to ringAckDelay and is owed one at NotAckedMax.
func TestLaneAckJoinedBySequenced(t *testing.T) {
	pr, b, p, o := lockedRingPartner(t)
	deadline := func() int64 {
		if p.ackDeadline == ackUnstamped {
			b.stampAcks(b.setNow())
		}
		return p.ackDeadline
	}
	for range o.NotAckedMax {
		p.noteReceived(ackLane)
	}
	now := b.setNow()
	if !p.ackLazy || p.owed || p.notAcked != o.NotAckedMax {
		t.Fatalf("%d lane records: lazy %v, owed %v, %d un-acked; want lazy, not owed, %d", o.NotAckedMax, p.ackLazy, p.owed, p.notAcked, o.NotAckedMax)
	}
	if d := deadline(); d < now+int64(time.Hour)-int64(time.Minute) {
		t.Fatalf("lane records alone: ack due in %v, want AckDelay (%v)", time.Duration(d-now), o.AckDelay)
	}
	p.noteReceived(ackSmall)
	if p.ackLazy || !p.owed {
		t.Fatalf("a tiny message joined: lazy %v, owed %v; want neither lazy nor without an owed ack", p.ackLazy, p.owed)
	}
	if d := deadline(); d > b.setNow()+int64(ringAckDelay) {
		t.Fatalf("a tiny message joined: ack due in %v, want at most ringAckDelay (%v)", time.Duration(d-now), ringAckDelay)
	}
	sent := pr.b.cnt[SendTruc]
	b.ackDrained()
	if pr.b.cnt[SendTruc] != sent+1 || p.notAcked != 0 || p.ackDeadline != 0 || p.ackLazy {
		t.Fatalf("rings drained: %d ack frames, %d un-acked, deadline %d, lazy %v; want one ack and nothing left", pr.b.cnt[SendTruc]-sent, p.notAcked, p.ackDeadline, p.ackLazy)
	}
}

// TestLargeFramesOnRingsAckedLazily: a RNDV delivered unpulled or a
// NOTIFY from a peer on the rings, whose ack only releases a frame, waits
// AckDelay for a frame to carry it, as lane records do, not tailAckDelay:
// a 16-rank 64 KiB alltoall's ranks otherwise sent an ack frame of their
// own, with a timer armed for it and often a wake-up, for one NOTIFY in
// ten (docs/alltoall.md).
func TestLargeFramesOnRingsAckedLazily(t *testing.T) {
	pr, b, p, o := lockedRingPartner(t)
	sent := pr.b.cnt[SendTruc]
	p.noteReceived(ackLarge)
	p.noteReceived(ackLarge)
	now := b.setNow()
	if p.ackDeadline == ackUnstamped {
		b.stampAcks(now)
	}
	if d := p.ackDeadline - now; d < int64(time.Hour)-int64(time.Minute) || !p.ackLazy || pr.b.cnt[SendTruc] != sent {
		t.Fatalf("two large frames: ack due in %v (lazy %v, %d ack frames), want AckDelay (%v) and no frame yet", time.Duration(d), p.ackLazy, pr.b.cnt[SendTruc]-sent, o.AckDelay)
	}
}

// TestUnmeasuredTimeoutsAllowDescheduledPeer: before the first round-trip
// sample, the probe, the RTO and the pull RTO toward a network peer wait
// their configured fallback (ResendDelay, PullTimeout) plus the
// descheduling allowance, as the measured ones have it for their
// granularity term: a fallback of milliseconds (mxbench's lossy runs use
// 20 ms) was overrun by a peer a loaded machine kept descheduled, and the
// first messages of a lossless stream were probed and resent. The
// allowance is set, not measured: the process's estimate holds a gap of
// 40 ms (the test's gate on the machine's scheduler).
func TestUnmeasuredTimeoutsAllowDescheduledPeer(t *testing.T) {
	saved := [2]int64{descheduling.cur.Load(), descheduling.prev.Load()}
	t.Cleanup(func() { descheduling.cur.Store(saved[0]); descheduling.prev.Store(saved[1]) })
	opts := DefaultBoardOptions()
	opts.ResendDelay = 20 * time.Millisecond
	opts.PullTimeout = 50 * time.Millisecond
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	b, p := pr.a.b, pr.atob.p
	const gap = int64(40 * time.Millisecond)
	// The pair's own waiters may raise the estimate meanwhile: the
	// timeouts are taken between two equal readings of it (bounded).
	var slack, rto, pto, pull int64
	for i := 0; ; i++ {
		descheduling.start.Store(time.Now().UnixNano()) // no rotation meanwhile
		descheduling.prev.Store(0)
		descheduling.cur.Store(gap)
		slack = descheduling.slack()
		b.mu.Lock()
		p.rtt, p.prtt = rtt{}, rtt{} // no round trip measured yet
		rto, pto, pull = p.rto(opts.ResendDelay, 0), p.pto(0), p.pullRTO(0)
		b.mu.Unlock()
		if descheduling.slack() == slack || i == 100 {
			break
		}
	}
	want := func(what string, got int64, fallback time.Duration) {
		t.Helper()
		if lo := int64(fallback) + min(slack, int64(fallback)); got < lo {
			t.Errorf("%s before a round trip was measured, allowance %v: %v, want at least %v", what, time.Duration(slack), time.Duration(got), time.Duration(lo))
		}
	}
	want("RTO", rto, opts.ResendDelay)
	want("probe timeout", pto, opts.ResendDelay)
	want("pull RTO", pull, opts.PullTimeout)
}

// TestRendezvousAckedBesidePull: a receiver whose receive is posted acks
// a large message's rendezvous at once, beside the PULLs it starts, not
// on a frame of its own once the ack delay has passed in the middle of
// the pull (4 MiB, far longer than the delay), and the messages arrive
// whole.
func TestRendezvousAckedBesidePull(t *testing.T) {
	n := 8
	if testing.Short() || raceEnabled {
		n = 3
	}
	pr := newPair(t, loopbackOnly, DefaultBoardOptions(), loopback.Faults{})
	msg := pattern(4<<20, 5)
	buf := make([]byte, len(msg))
	delta := exchangeCounted(t, pr, msg, buf, n)
	if got := delta(SendPull); got < uint64(n) {
		t.Fatalf("%d PULLs for %d large messages: not pulled", got, n)
	}
	if imm, del := delta(AcksImmediate), delta(AcksDelayed); imm < uint64(n) || del != 0 {
		t.Errorf("receiver of %d rendezvous: %d acks at once, %d after the delay; want %d or more at once, none delayed", n, imm, del, n)
	}
}

// TestAckDeadlineNotedAtBatchEnd: an ack deadline a frame starts in the
// middle of a batch is noted for the fine timer as the batch ends, and
// only if the ack is still owed then: a later frame of the batch that
// sent it (the rendezvous beside whose PULLs the ack goes) leaves the
// timerfd unset, and one that did not leaves it set once, for that
// deadline.
func TestAckDeadlineNotedAtBatchEnd(t *testing.T) {
	pr := newPair(t, transportFactory{name: "loopback", new: newLoopbackWire}, fastOptions(), loopback.Faults{})
	b, p := pr.a.b, pr.atob.p
	if b.fine == nil {
		t.Skip("no timerfd on this system: the board keeps its ticks alone")
	}
	b.mu.Lock()
	defer b.unlock()
	b.runTimersLocked() // nothing pending now: due is 0
	if d := b.due.Load(); d != 0 || p.ackDeadline != 0 {
		t.Skipf("a deadline %d (ack %d) is pending on an idle board", d, p.ackDeadline)
	}
	// The fine timer's goroutine, if it fired a moment ago and yields
	// (finetimer.go), would set the timerfd itself: this test is noteDue's
	// caller's side, as though it were asleep.
	awake := b.fineAwake
	b.fineAwake = false
	defer func() { b.fineAwake = awake }()
	for _, sent := range []bool{true, false} {
		arms := b.cnt[FineArms]
		b.armed = 0
		b.setNow()
		b.batchDepth++ // a batch being handled (handleBatchLocked)
		p.notAcked++
		p.armAck(int64(time.Hour), false)
		if b.cnt[FineArms] != arms {
			t.Fatalf("ack deadline set the timerfd in the middle of the batch")
		}
		if sent {
			p.sendAck() // a later frame's handling acked
		}
		b.batchDepth--
		b.noteAckArms()
		want, due := uint64(0), int64(0)
		if !sent {
			want, due = 1, p.ackDeadline
		}
		if got := b.cnt[FineArms] - arms; got != want || b.armed != due {
			t.Errorf("ack sent in the batch %v: %d arms, armed for %d; want %d, for %d", sent, got, b.armed, want, due)
		}
		p.sendAck()
		b.runTimersLocked()
	}
}

// TestLaneReceivedAsUpdateFull: what a lane record's receiver notes for
// its ack (laneReceived, laneFast's shortcut) is what updateFull(ackLane)
// notes, in every state of the partner's acks that the shortcut decides
// on: a SACK open or not, a clock reading at hand or not, no deadline, an
// unstamped or a stamped one, lane records waiting or another class, the
// count short of ringAcks, one short and at it. An ack sent counts.
func TestLaneReceivedAsUpdateFull(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	roundTrip(t, ctx, pr) // the partners know each other
	b := pr.bb
	b.mu.Lock()
	defer b.mu.Unlock()
	p := pr.b.partnerAt(pr.ba.NICID(), pr.a.id)
	if p == nil || p.rings() == nil {
		t.Fatalf("partner %v: want one on the rings", p)
	}
	every := b.ringAcks()
	type state struct {
		fullSeq, recvSeq          uint16
		oooFrames, notAcked       int
		ackDeadline               int64
		sackOpen, ackLazy, stampQ bool
		nowOK, readWants          bool
		toStamp                   int
		acks                      uint64
	}
	get := func(acks uint64) state { // acks: AcksImmediate before
		return state{p.fullSeq, p.recvSeq, p.oooFrames, p.notAcked, p.ackDeadline,
			p.sackOpen, p.ackLazy, p.stampQ, b.nowOK, b.readWants, len(b.toStamp), pr.b.cnt[AcksImmediate] - acks}
	}
	cases := 0
	for _, sack := range []bool{false, true} {
		for _, nowOK := range []bool{false, true} {
			for _, dl := range []int64{0, ackUnstamped, b.clock() + int64(time.Hour)} {
				for _, lazy := range []bool{false, true} {
					for _, waiting := range []int{0, every - 2, every - 1} {
						set := func() {
							p.fullSeq = p.recvSeq
							p.recvSeq = seqNext(p.recvSeq) // the record just taken
							p.sackOpen, p.ackDeadline, p.ackLazy, p.notAcked, p.oooFrames = sack, dl, lazy, waiting, 1
							p.stampQ = dl == ackUnstamped
							b.nowOK, b.readWants = nowOK, false
							b.toStamp = b.toStamp[:0]
							if p.stampQ {
								b.toStamp = append(b.toStamp, p)
							}
						}
						seq, acked, acks := p.recvSeq, p.ackNumSent, pr.b.cnt[AcksImmediate]
						set()
						p.updateFull(ackLane)
						want := get(acks)
						p.recvSeq, p.ackNumSent, acks = seq, acked, pr.b.cnt[AcksImmediate]
						set()
						p.laneReceived()
						if got := get(acks); got != want {
							t.Errorf("sack %v, reading %v, deadline %d, lazy %v, %d waiting: laneReceived %+v, updateFull %+v",
								sack, nowOK, dl, lazy, waiting, got, want)
						}
						cases++
					}
				}
			}
		}
	}
	p.ackDeadline, p.ackLazy, p.sackOpen, p.stampQ, b.toStamp = 0, false, false, false, b.toStamp[:0]
	t.Logf("%d cases", cases)
}

// lockedRingPartner opens a pair on the rings whose AckDelay is an hour
// and returns it, its board b, locked until the test ends, b's partner
// for a, owed no ack, and the pair's options. The clock readings the
// test makes (setNow) are its own until it ends.
func lockedRingPartner(t *testing.T) (*pair, *Board, *partner, BoardOptions) {
	t.Helper()
	o := DefaultBoardOptions()
	o.AckDelay = time.Hour
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	b := pr.b.b
	b.mu.Lock()
	t.Cleanup(func() {
		b.nowOK = false
		b.mu.Unlock()
	})
	p := pr.btoa.p
	if p.rings() == nil {
		t.Fatal("the pair is not on the rings")
	}
	p.sendAck() // nothing owed from the connection
	return pr, b, p, o
}
