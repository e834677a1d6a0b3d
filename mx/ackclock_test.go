package mx

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestAckClock checks the time the receive path's ack bookkeeping uses: a
// polling waiter's reading (or a later one of the board's) when it has
// one, without reading the clock; the batch's reading when it made one;
// else a reading of its own.
func TestAckClock(t *testing.T) {
	// A board whose clock reads about an hour: any reading stands out
	// from the small values the cases set.
	hour := int64(time.Hour)
	for _, c := range []struct {
		name        string
		seen, nowv  int64
		nowOK       bool
		want        int64 // 0: a reading of the clock
		wantReadNow bool
	}{
		{name: "waiter's reading", seen: 5000, nowv: 1000, want: 5000},
		{name: "board's later reading", seen: 5000, nowv: 9000, want: 9000},
		{name: "batch's reading", seen: 5000, nowv: 7, nowOK: true, want: 7},
		{name: "no reading at hand", nowv: 1000, wantReadNow: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Board{base: time.Now().Add(-time.Hour), seen: c.seen, nowv: c.nowv, nowOK: c.nowOK}
			got := b.ackClock()
			if c.wantReadNow {
				if got < hour || !b.nowOK || b.nowv != got {
					t.Fatalf("ackClock = %d, nowOK %v, nowv %d: want a reading of the clock (about %d), kept for the batch", got, b.nowOK, b.nowv, hour)
				}
				return
			}
			if got != c.want {
				t.Fatalf("ackClock = %d, want %d", got, c.want)
			}
			if b.nowOK != c.nowOK {
				t.Fatalf("ackClock read the clock (nowOK %v): it had a reading at hand", b.nowOK)
			}
		})
	}
}

// TestPolledSampleWaitsForReading checks where a round-trip sample from a
// polling waiter's batch is taken: on the board's next clock reading
// when that comes within rttFoldGap of the waiter's, dropped when it
// comes later; on the batch's reading when it has one; on a reading
// made at once when there is none at hand. A partner's first ack gives a
// sample, and then one in rttEvery, whichever way its time is read; the
// others are dropped, and no clock is read for them.
func TestPolledSampleWaitsForReading(t *testing.T) {
	// A board whose clock reads ten minutes (below rttMaxSample).
	ten := int64(10 * time.Minute)
	for _, c := range []struct {
		name  string
		seen  int64 // the waiter's reading (0: none)
		nowOK bool  // the batch read the clock (at 3000)
		next  int64 // the board's next reading (0: none)
		est   bool  // the partner has an estimate already (srtt 7 ns)
		skip  int   // acks since the last one that gave a sample
		want  int64 // the sample taken (sent at 500); 0: none; -1: one on a reading of the clock
	}{
		{name: "next reading soon", seen: 1000, next: 4000, want: 3500},
		{name: "next reading late", seen: 1000, next: 1000 + rttFoldGap + 1, want: 0},
		// Another goroutine's reading from before the waiter's (made
		// before the ack came, its timer run delayed): dropped, not a
		// sample of almost nothing.
		{name: "next reading older", seen: 1000, next: 900, want: 0},
		{name: "batch's reading", seen: 1000, nowOK: true, want: 2500},
		{name: "no reading at hand", want: -1},
		{name: "rttEvery-th, no reading at hand", est: true, skip: rttEvery - 1, want: -1},
		{name: "rttEvery-th, next reading soon", est: true, skip: rttEvery - 1, seen: 1000, next: 4000, want: 3500},
		{name: "rttEvery-th, batch's reading", est: true, skip: rttEvery - 1, nowOK: true, want: 2500},
		{name: "others, no reading at hand", est: true, skip: 0, want: 0},
		{name: "others later, no reading at hand", est: true, skip: rttEvery - 2, want: 0},
		{name: "others, next reading soon", est: true, skip: 0, seen: 1000, next: 4000, want: 0},
		{name: "others, batch's reading", est: true, skip: 0, nowOK: true, want: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Board{base: time.Now().Add(-10 * time.Minute), seen: c.seen, nowv: 3000, nowOK: c.nowOK}
			p := &partner{ep: &Endpoint{b: b}, rttSkip: c.skip}
			if c.est {
				p.rtt = rtt{srtt: 7, rttvar: 3, ok: true}
			}
			before := p.rtt
			p.sampleRTT(500)
			b.seen = 0
			if c.next != 0 {
				if p.rtt != before {
					t.Fatalf("sample %+v taken before the next reading", p.rtt)
				}
				b.useReading(c.next)
			}
			// The sample r itself: what the estimate was set to, or
			// what moved it from srtt 7 (srtt = (7*7 + r)/8).
			r := p.rtt.srtt
			if c.est {
				r = 8*p.rtt.srtt - 49
			}
			switch {
			case len(b.rttPend) != 0:
				t.Fatalf("%d samples still pending after the reading", len(b.rttPend))
			case c.want == 0 && p.rtt != before:
				t.Fatalf("sample taken (%+v), want it dropped", p.rtt)
			case c.want > 0 && (r < c.want-7 || r > c.want):
				t.Fatalf("sample %d (%+v), want %d", r, p.rtt, c.want)
			case c.want < 0 && r < ten-500-8:
				t.Fatalf("sample %d, want one on a reading of the clock (about %d)", r, ten)
			case c.want == 0 && c.seen == 0 && !c.nowOK && b.nowOK:
				t.Fatal("the clock was read for a sample that was dropped")
			}
		})
	}
}

// TestPolledRoundTripSamples checks that round-trip samples come and
// measure a round trip, in both wait modes: taken on a polling waiter's
// reading (ackClock), or, where the receive had none at hand (the receive
// loop's batches with blocking waits over the in-process wire), on a
// reading made for one ack in rttEvery. A ping-pong leaves each side's
// estimate positive and well above the 1 ns a sample taken before its
// send would be clamped to. 400 round trips give each side some fifty
// samples (one ack in rttEvery): a busy-polled pair on a machine loaded
// past its CPUs takes 15-25 ms a round trip (two spinning waiters, each
// run for a time slice at a time), so the bound is ten minutes, not the
// minute 2000 round trips once overran.
func TestPolledRoundTripSamples(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) { checkRoundTripSamples(t, busy) })
	}
}

// checkRoundTripSamples is TestPolledRoundTripSamples in one wait mode.
func checkRoundTripSamples(t *testing.T, busy bool) {
	opts := DefaultBoardOptions()
	opts.BusyPoll = busy
	pr := newPair(t, factoryNamed(t, "loopback"), opts, loopback.Faults{})
	ctx := testCtx(t, 10*time.Minute)
	const rounds = 400
	buf := make([]byte, 8)
	ctx, done := pr.echoB(ctx, rounds, [][]byte{buf}, [][]byte{buf})
	sbuf, rbuf := make([]byte, 8), make([]byte, 8)
	for range rounds {
		pingOnce(t, ctx, pr.a, pr.atob, pr.a, 0, 0, [][]byte{sbuf}, [][]byte{rbuf})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		name string
		b    *Board
		to   Addr
	}{{"a", pr.ba, pr.atob}, {"b", pr.bb, pr.btoa}} {
		side.b.mu.Lock()
		est := side.to.p.rtt
		side.b.mu.Unlock()
		if !est.ok || est.srtt < 100 {
			t.Errorf("side %s: round-trip estimate %+v after %d round trips: want samples, and an srtt of at least 100 ns", side.name, est, rounds)
		}
	}
}

// TestAcksUnanswered sends small messages one way to a receiver that never
// replies, in both wait modes: each is acked (its deadline, left for the
// next reading when the receive had none at hand, gets one), so the
// sender's window empties and the receiver counts delayed acks.
func TestAcksUnanswered(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opts := DefaultBoardOptions()
			opts.BusyPoll = busy
			pr := newPair(t, factoryNamed(t, "loopback"), opts, loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			buf := make([]byte, 64)
			const n = 20
			for i := range n {
				r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				s, err := pr.a.ISend([][]byte{buf}, pr.atob, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := waitAMinute(ctx, r); err != nil {
					t.Fatalf("receive %d: %v", i, err)
				}
				if _, err := waitAMinute(ctx, s); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				// The receiver does nothing more: its ack must go out
				// without a reply to carry it.
				waitCond(t, fmt.Sprintf("message %d is acked", i), func() bool { return pr.ba.unackedTotal() == 0 })
			}
			if c := pr.b.Counters(); c.Get(AcksDelayed) == 0 {
				t.Errorf("%d unanswered messages and no delayed ack", n)
			}
		})
	}
}

// unackedTotal returns how many sequenced sends of b wait for an ack.
func (b *Board) unackedTotal() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, e := range b.epl {
		for _, p := range e.plist {
			n += p.unacked.Len()
		}
	}
	return n
}

// TestAckWithoutTick: a message whose receiver then neither replies nor
// waits again is acked without the board's next
// tick, whoever received it. The receiver's ticks are stopped and the
// sender asks only after half a second, so the ack the sender gets is the
// receiver's delayed ack. A waiter asleep on its sources (UDP) gives the
// deadline its time with the reading it made as it woke, before its wait
// returns; a busy-polling waiter leaves it for the next reading, the
// receive loop's next look (at most the poll grace later).
func TestAckWithoutTick(t *testing.T) {
	for _, c := range []struct {
		name    string
		wire    string
		busy    bool
		sleeper bool
	}{
		{"busypoll", "loopback", true, false},
		{"block", "loopback", false, false},
		{"sleeper", "udp", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.sleeper {
				needSleepers(t)
			}
			oa := fastOptions()
			// The sender asks after 250 ms at least: askWait counts half
			// its tailAckDelay, min(AckDelay, RTOMin/4), and
			// fastOptions' AckDelay (500 µs) would make it 250 µs, which
			// a receiver descheduled on a loaded machine outlasts once
			// the sender's receive loop has taken a round-trip sample.
			oa.RTOMin, oa.ResendDelay, oa.AckDelay = 2*time.Second, 4*time.Second, time.Second
			ob := fastOptions()
			ob.BusyPoll = c.busy
			ob.noTicks = true // only the loop's looks and the fine timer run b's timers
			if c.sleeper {
				ob.Spin = -1 // sleep at once
				ob.SleepOnSources = true
			}
			pr := newPair(t, factoryNamed(t, c.wire), oa, loopback.Faults{}, ob)
			ctx := testCtx(t, time.Minute)
			buf, sbuf := make([]byte, 64), make([]byte, 64) // a receive and a send may run at once
			const n = 5
			for i := range n {
				r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				wait := func() error { _, err := waitAMinute(ctx, r); return err }
				var errc chan error
				k0 := pr.bb.WaitStats().Kernel
				if c.sleeper {
					errc = asleepOn(t, pr.bb, wait)
				}
				s, err := pr.a.ISend([][]byte{sbuf}, pr.atob, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				if c.sleeper {
					err = <-errc
				} else {
					err = wait()
				}
				if err != nil {
					t.Fatalf("receive %d: %v", i, err)
				}
				if pr.bb.WaitStats().Kernel > k0 && pr.bb.unstamped.Load() {
					// Received on the waiter's own thread (not on its
					// channel, by the loop, which stamps after its batch).
					t.Fatalf("message %d: the waiter asleep on its sources left its ack deadline without a time", i)
				}
				if pr.bb.WaitStats().Kernel > k0 && pr.bb.heldAck() {
					t.Fatalf("message %d: the waiter asleep on its sources left its ack to the next reading (holdAck)", i)
				}
				if _, err := waitAMinute(ctx, s); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				waitCond(t, fmt.Sprintf("message %d is acked", i), func() bool { return pr.ba.unackedTotal() == 0 })
			}
			if c.sleeper && pr.bb.WaitStats().Kernel == 0 {
				t.Errorf("none of %d waits received asleep on the sources", n)
			}
			if asks := pr.a.Counters().Get(TailAsks); asks != 0 {
				t.Errorf("the sender asked %d times: an ack was late", asks)
			}
			if d := pr.b.Counters().Get(AcksDelayed); d < n {
				t.Errorf("%d delayed acks for %d unanswered messages", d, n)
			}
		})
	}
}

// heldAck reports whether b holds a message's ack for the next reading
// (holdAck).
func (b *Board) heldAck() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ackHeld != nil
}

// TestOneWayAsleepAcks: a one-way stream of small messages over UDP whose
// receiver waits asleep on its sources (after its 200 µs spin) and then
// computes 3 ms without replying or waiting is acked at the delayed-ack
// deadline each message starts, not at the receiver's next tick: no
// receive the waiter made asleep leaves its ack held for the next reading
// (holdAck), which it would not make before the tick (8 ms on a board not
// busy; the sender then asked 61-173 times in 100 messages, against 7-25
// with every deadline set at once). The asks are logged, not judged: a
// loaded host delays the receiver's fine timer too (2-34 at load 13-22
// with -race either way, 72 once with both CPUs kept busy).
func TestOneWayAsleepAcks(t *testing.T) {
	needSleepers(t)
	oa := DefaultBoardOptions()
	oa.Local.Off = true
	ob := oa
	ob.SleepOnSources, ob.Spin = true, 200*time.Microsecond
	pr := newPair(t, factoryNamed(t, "udp"), oa, loopback.Faults{}, ob)
	ctx := testCtx(t, 5*time.Minute)
	const n = 100
	asks0 := pr.a.Counters().Get(TailAsks)
	buf, sbuf := make([]byte, 8), make([]byte, 8)
	for i := range n {
		r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		k0 := pr.bb.WaitStats().Kernel
		errc := asleepOn(t, pr.bb, func() error { _, err := waitAMinute(ctx, r); return err })
		s, err := pr.a.ISend([][]byte{sbuf}, pr.atob, uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if pr.bb.WaitStats().Kernel > k0 && pr.bb.heldAck() {
			t.Fatalf("message %d: the waiter asleep on its sources left its ack to the next reading", i)
		}
		for start := time.Now(); time.Since(start) < 3*time.Millisecond; { // computes, neither replies nor waits
		}
		if _, err := waitAMinute(ctx, s); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	asks := pr.a.Counters().Get(TailAsks) - asks0
	kernel := pr.bb.WaitStats().Kernel
	t.Logf("%d one-way messages: %d asks, %d received asleep on the sources", n, asks, kernel)
	if kernel == 0 {
		t.Errorf("none of %d waits received asleep on the sources", n)
	}
}

// TestRoundTripSamplesUnbiased checks that which acks give round-trip
// samples does not depend on how late their reply came. A reply found at
// a waiter's first look has no waiter's reading at hand; a later one
// does (the waiter read the clock while it polled), and so does one the
// receive loop's batch brought. If the first kind gave a sample only one
// time in rttEvery and the others every time, a ping-pong's estimate
// would lean toward its slow round trips, and so would the tail-loss
// probe's and the ask's timeouts drawn from it. Here half the acks, in a
// seeded random order, come fast (1 µs) at a first look and half slow
// (50 µs) after the waiter read the clock or in a loop's batch: the
// samples must be about half slow (with one in rttEvery for the first
// kind and all of the second, 89 % were, and the estimate was 46 µs).
func TestRoundTripSamplesUnbiased(t *testing.T) {
	const (
		fast = int64(time.Microsecond)
		slow = int64(50 * time.Microsecond)
		acks = 4000
	)
	b := &Board{base: time.Now().Add(-10 * time.Minute)}
	p := &partner{ep: &Endpoint{b: b}}
	rng := uint64(0x9E3779B97F4A7C15)
	var took [2]int // samples taken: fast, slow
	var offered [2]int
	for i := range acks {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		late := rng&1 == 1
		before := p.rtt
		b.nowOK, b.seen = false, 0
		k := 0
		if late {
			k = 1
			now := b.clock()
			if i%2 == 0 {
				// The waiter read the clock, polled, and then the
				// reply came; the reply's send reads it again.
				b.seen = now
				p.sampleRTT(now - slow)
				b.seen = 0
				b.useReading(now)
			} else {
				// The receive loop's batch, with its reading.
				b.nowv, b.nowOK = now, true
				p.sampleRTT(now - slow)
			}
		} else {
			// Found at the waiter's first look: no reading at hand.
			p.sampleRTT(b.clock() - fast)
		}
		offered[k]++
		if p.rtt != before {
			took[k]++
		}
	}
	if len(b.rttPend) != 0 {
		t.Fatalf("%d samples left pending", len(b.rttPend))
	}
	total := took[0] + took[1]
	share := float64(took[1]) / float64(total)
	want := float64(offered[1]) / float64(acks)
	t.Logf("acks fast %d slow %d; samples fast %d slow %d; srtt %v", offered[0], offered[1], took[0], took[1], time.Duration(p.rtt.srtt))
	if total < acks/(2*rttEvery) {
		t.Errorf("%d samples from %d acks: want at least one in %d", total, acks, 2*rttEvery)
	}
	if share < want-0.1 || share > want+0.1 {
		t.Errorf("slow replies gave %.0f %% of the samples, and were %.0f %% of the acks: the sample choice depends on how late the reply came", 100*share, 100*want)
	}
}
