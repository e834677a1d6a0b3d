package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestHeldRndvAckedInBatch: a RNDV that no receive takes yet is acked as
// the batch that delivered it ends (ack.go's ackLarge), not after the
// delayed-ack deadline, here later than the first question's (AckDelay
// 4 s). The sender's RNDV leaves its unacked list while the receiver
// still holds the message, the receiver counts no delayed ack, and the
// sender, its timers run past its first question's deadline, asked
// nothing about the held message (before, it asked, and its answer
// acked the RNDV); posted later, the receive completes it byte-exact.
func TestHeldRndvAckedInBatch(t *testing.T) {
	bothWaitModes(t, func(t *testing.T, busy bool) {
		o := fastOptions()
		o.BusyPoll = busy
		// The delayed ack later than the first question (askWait about
		// AckDelay/2 in blocking mode), both well inside waitCond's bound.
		o.AckDelay = 4 * time.Second
		o.RTOMin, o.RTOMax = 80*time.Second, 80*time.Second // tailAckDelay: AckDelay
		pr := newPair(t, loopbackOnly, o, loopback.Faults{})
		p := pr.atob.p
		pr.warmRTT(t) // askWait from a measured round trip
		const size = 1 << 20
		src, dst := pattern(size, 5), make([]byte, size)
		ctx := testCtx(t, time.Minute)
		a0, b0 := pr.a.Counters(), pr.b.Counters()
		s, err := pr.a.ISend([][]byte{src}, pr.atob, 9, nil)
		if err != nil {
			t.Fatal(err)
		}
		var due int64
		waitCond(t, "a's RNDV acked while b holds it", func() bool {
			pr.ba.mu.Lock()
			defer pr.ba.mu.Unlock()
			if due == 0 {
				due = s.lastSend + p.askWait(0) // the first question's deadline
			}
			return p.unacked.Len() == 0
		})
		waitCond(t, "the question's deadline passed", func() bool {
			pr.ba.mu.Lock()
			defer pr.ba.mu.Unlock()
			return pr.ba.clock() >= due
		})
		pr.ba.mu.Lock()
		pr.ba.timersLocked(true) // a's timers run past the deadline, whatever its wait mode
		pr.ba.mu.Unlock()
		a1, b1 := pr.a.Counters(), pr.b.Counters()
		if n := b1.Get(RecvRndv) - b0.Get(RecvRndv); n != 1 {
			t.Fatalf("b received %d RNDVs: want 1", n)
		}
		if n := b1.Get(AcksDelayed) - b0.Get(AcksDelayed); n != 0 {
			t.Errorf("b sent %d delayed acks: want the held RNDV acked as its batch ended", n)
		}
		if n := b1.Get(AcksImmediate) - b0.Get(AcksImmediate); n == 0 {
			t.Error("b sent no immediate ack: want the held RNDV's")
		}
		for _, k := range []Counter{TailAsks, TailProbes, Resends} {
			if n := a1.Get(k) - a0.Get(k); n != 0 {
				t.Errorf("a sent %d %q while b held its RNDV: want none", n, k)
			}
		}
		if _, done := s.Test(); done {
			t.Fatal("the send completed before the receive was posted")
		}
		r, err := pr.b.IRecv([][]byte{dst}, 9, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, ctx, r, s)
		if !bytes.Equal(src, dst) {
			t.Fatal("the message arrived changed")
		}
	})
}

// warmRTT exchanges requests and replies, at most 64, until a's board
// has measured its round trip to b.
func (pr *pair) warmRTT(t *testing.T) {
	t.Helper()
	measured := func() bool {
		pr.ba.mu.Lock()
		defer pr.ba.mu.Unlock()
		return pr.atob.p.rtt.ok
	}
	for i := 0; i < 64 && !measured(); i++ {
		pr.requestReply(t, []byte("warm"), time.Minute)
	}
	if !measured() {
		t.Fatal("64 round trips measured no round trip")
	}
}

// TestNoQuestionWhilePulled: every TRUC the receiver sends is lost, so the
// RNDV of a second message, sent after the first and held by the receiver
// (no receive for it yet), stays unacked at the sender while the receiver
// pulls the first, 4 MiB.
// The PULLs show the receiver alive and taking the sender's frames: the
// sender asks no question about the stream while they come (ask.go).
// The first message's NOTIFY then acks the held RNDV, and the second
// message arrives byte-exact once its receive is posted.
func TestNoQuestionWhilePulled(t *testing.T) {
	bothWaitModes(t, func(t *testing.T, busy bool) {
		d := &trucDrop{}
		checkLeaks(t)
		o := zcOptions("on")
		o.BusyPoll = busy
		o.PullTimeout = 10 * time.Second // the receiver re-requests nothing, however slow the host
		// PULLs a window apart are progress, however loaded the host, and the
		// cap on holding a question back (RTOMax) is past the pull.
		o.RTOMin, o.RTOMax = time.Second, 10*time.Second
		pr := newPairOn(t, zcWire(t, d.model(), nil, nil), o)
		p := pr.atob.p
		pr.warmRTT(t) // askWait from a measured round trip
		d.from.Store(uint64(pr.bb.NICID()))
		d.on.Store(true)
		const size = 4 << 20
		src1, dst1 := pattern(size, 11), make([]byte, size)
		src2, dst2 := pattern(1<<20, 12), make([]byte, 1<<20)
		ctx := testCtx(t, time.Minute)
		// The second message's RNDV follows the first's: a PULL of the
		// first acks only what was sent before it (reliability.go), so the
		// held RNDV stays unacked while the first is pulled.
		r1, err := pr.b.IRecv([][]byte{dst1}, 1, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s1, err := pr.a.ISend([][]byte{src1}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := pr.a.ISend([][]byte{src2}, pr.atob, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		held := -1
		waitCond(t, "a served the first PULL", func() bool {
			pr.ba.mu.Lock()
			defer pr.ba.mu.Unlock()
			if p.lastPulled == 0 {
				return false
			}
			held = p.unacked.Len()
			return true
		})
		if held == 0 && !s1.done.Load() {
			t.Fatal("the second message's RNDV was acked while the first was pulled: nothing left to ask about")
		}
		before := pr.a.Counters()
		waitDone(t, ctx, r1, s1)
		during := pr.a.Counters()
		if !bytes.Equal(src1, dst1) {
			t.Fatal("the first message arrived changed")
		}
		if n := during.Get(TailAsks) - before.Get(TailAsks); n != 0 {
			t.Errorf("a asked %d questions while b pulled the first message: want none", n)
		}
		r2, err := pr.b.IRecv([][]byte{dst2}, 2, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, ctx, r2, s2)
		if !bytes.Equal(src2, dst2) {
			t.Fatal("the second message arrived changed")
		}
		if d.dropped.Load() == 0 {
			t.Fatal("the cable lost no TRUC of b's")
		}
	})
}
