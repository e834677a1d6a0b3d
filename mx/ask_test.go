package mx

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestAskRevealsLoss loses a ping of a ping-pong once (nothing later
// reveals it), with the tail-loss probe and the RTO made slow (RTOMin
// 200 ms: the probe waits srtt + 50 ms at least), in both wait modes,
// with and without SACK. The sender asks the late receiver what it holds
// after about twice the round trip, the answer shows the ping missing, and
// the ping is resent on it: an ask retransmit, no timer retransmit or
// probe, and the receiver answered an ask. Unmeasured, the lost ping is the
// pair's first message: before any round trip was measured the sender asks
// too, after the RTO's fallback (ResendDelay plus the descheduling
// allowance, at most RTOMax), and nothing is probed or resent on a timer (a
// stream of large messages never measures one: an RNDV's ack gives no
// sample).
func TestAskRevealsLoss(t *testing.T) {
	for _, busy := range []bool{false, true} {
		for _, sack := range []bool{true, false} {
			for _, measured := range []bool{true, false} {
				t.Run(fmt.Sprintf("busypoll=%v/sack=%v/measured=%v", busy, sack, measured), func(t *testing.T) {
					w := newLoopbackWire(t, loopback.Faults{})
					marker := []byte("this-ping-is-lost-once")
					d := &dropFirst{Transport: w.a, marker: marker}
					w.a = d
					opts := fastOptions()
					opts.BusyPoll = busy
					opts.NoSack = !sack
					opts.ResendDelay = 2 * time.Second
					opts.RTOMin = 200 * time.Millisecond // the probe waits 50 ms past srtt, the ask 25 ms
					opts.AckDelay = 200 * time.Millisecond
					opts.ZombieSends = -1
					pr := newPairOn(t, w, opts, opts)
					if measured {
						for range 20 { // round trips to measure
							pr.requestReply(t, []byte("ping"), 30*time.Second)
						}
					}
					ca0, cb0 := pr.a.Counters(), pr.b.Counters()
					pr.requestReply(t, marker, 30*time.Second)
					if !d.dropped.Load() {
						t.Fatal("the wire dropped nothing")
					}
					ca, cb := pr.a.Counters(), pr.b.Counters()
					t.Logf("a: %s\nb: %s", recoveryDelta(ca0, ca), recoveryDelta(cb0, cb))
					delta := func(c, c0 Counters, k Counter) uint64 { return c.Get(k) - c0.Get(k) }
					if delta(ca, ca0, AskRetransmits) == 0 || delta(cb, cb0, AsksAnswered) == 0 || delta(ca, ca0, TimerRetransmits) != 0 || delta(ca, ca0, TailProbes) != 0 {
						t.Errorf("the lost ping: %d resent on an answer, %d asks answered, %d timer retransmits, %d tail probes; want the ask's answer to resend it",
							delta(ca, ca0, AskRetransmits), delta(cb, cb0, AsksAnswered), delta(ca, ca0, TimerRetransmits), delta(ca, ca0, TailProbes))
					}
				})
			}
		}
	}
}

// TestAnswerAfterDroppedHeldMessage makes the receiver drop a message it
// had reported held: the first copy of message 0 is lost, message 1
// arrives past the hole and a SACK says it is held whole; message 0's
// resend fills the receiver's only unexpected slot (UnexpectedMaxMessages
// 1, no receive posted), so message 1, drained behind it, finds no room
// and is dropped. The receiver then holds nothing past its ack point, and
// its acks carry no SACK. Only the receiver's answers can tell the sender
// what it holds, and the SACK seen before the drop is stale: an answer
// that does not list message 1 must make it be resent, or it never comes
// (asks replace the tail-loss probe and the RTO toward a gomx peer,
// ask.go). Once the receives are posted both messages arrive, in both
// wait modes.
func TestAnswerAfterDroppedHeldMessage(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			w := newLoopbackWire(t, loopback.Faults{})
			marker := []byte("message-0-is-lost-once")
			d := &dropFirst{Transport: w.a, marker: marker}
			w.a = d
			opts := fastOptions()
			opts.BusyPoll = busy
			opts.ResendDelay = 2 * time.Second // unreachable only after an hour
			opts.ZombieSends = -1              // a send completes on its ack
			optsB := opts
			optsB.UnexpectedMaxMessages = 1
			pr := newPairOn(t, w, opts, optsB)
			ctx := testCtx(t, time.Minute)
			buf := make([]byte, 64)
			for i := range 20 { // round trips to measure: the peer is askable
				exchange(t, ctx, pr.a, pr.atob, pr.b, uint64(100+i), ^uint64(0), [][]byte{[]byte("ping")}, [][]byte{buf})
			}
			msgs := [][]byte{marker, []byte("message-1-is-dropped-after-its-sack")}
			var sends []*Request
			for i, m := range msgs {
				s, err := pr.a.ISend([][]byte{m}, pr.atob, uint64(10+i), nil)
				if err != nil {
					t.Fatal(err)
				}
				sends = append(sends, s)
			}
			deadline := time.Now().Add(30 * time.Second)
			for pr.b.Counters().Get(DropUnexpectedFull) == 0 || pr.a.Counters().Get(SacksReceived) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("message 1 was not reported held and then dropped: a: %v; b: drops %d",
						recoveryDelta(Counters{}, pr.a.Counters()), pr.b.Counters().Get(DropUnexpectedFull))
				}
				time.Sleep(time.Millisecond)
			}
			if !d.dropped.Load() {
				t.Fatal("the wire dropped nothing")
			}
			for i, m := range msgs {
				got := make([]byte, len(m))
				r, err := pr.b.IRecv([][]byte{got}, uint64(10+i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Wait(ctx); err != nil {
					t.Fatalf("message %d: %v (a: %v)", i, err, recoveryDelta(Counters{}, pr.a.Counters()))
				}
				if !bytes.Equal(got, m) {
					t.Fatalf("message %d: got %q, want %q", i, got, m)
				}
			}
			for i, s := range sends {
				if _, err := s.Wait(ctx); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			t.Logf("a: %v", recoveryDelta(Counters{}, pr.a.Counters()))
		})
	}
}

// TestAskWaitForgetsOutlier: a question resends nothing, so one round trip
// of a descheduled peer (the first sample, of a connect's exchanges, was
// 14-19 ms on a loaded machine) must not make the questions that follow
// wait milliseconds: srtt + 4·rttvar stays that high for a hundred
// samples, and every loss among them cost that long. After the outlier
// and a few round trips of a microsecond, a busy-polling board's first
// question about a message waits a few microseconds (its margin the round
// trips' lower envelope), while a sleeping board keeps the estimate and
// the usual margin (tailAckDelay/2): its round trips include wake-ups.
// A question asked again (its peer late, or it or its answer lost) waits
// the estimate doubled in both modes, so a peer descheduled for
// milliseconds draws one question more than a sleeping board's, not a
// dozen. A path that becomes slower for good lifts the envelope (a sample
// a time), so the wait follows it. The probe's timeout, which resends, is
// left as the estimate and the allowance make it.
func TestAskWaitForgetsOutlier(t *testing.T) {
	const us = int64(time.Microsecond)
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opts := DefaultBoardOptions()
			opts.BusyPoll = busy
			pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
			b, p := pr.a.b, pr.atob.p
			b.mu.Lock()
			defer b.mu.Unlock()
			if !p.askable() {
				t.Fatal("a gomx peer over the in-process wire is not asked")
			}
			p.rtt = rtt{}
			p.rtt.sample(18000 * us) // the outlier, first
			for range 4 {
				p.rtt.sample(us)
			}
			if est := max(2*p.rtt.srtt, p.rtt.srtt+4*p.rtt.rttvar); est < 10000*us {
				t.Fatalf("srtt %v, rttvar %v: the outlier no longer shows in the estimate; the test shows nothing",
					time.Duration(p.rtt.srtt), time.Duration(p.rtt.rttvar))
			}
			est := max(2*p.rtt.srtt, p.rtt.srtt+4*p.rtt.rttvar) + b.tailAckDelay()/2
			want := min(est, int64(b.opts.RTOMax))
			if busy {
				want = askSpread*us + us // at most askSpread round trips, and one for the margin
			}
			if w := p.askWait(0); w != want {
				t.Errorf("after an 18 ms sample and four of 1 µs: ask after %v, want %v", time.Duration(w), time.Duration(want))
			}
			if w := p.askWait(1); w != min(2*est, int64(b.opts.RTOMax)) {
				t.Errorf("asked once: next ask after %v, want twice the estimate and margin, %v", time.Duration(w), time.Duration(min(2*est, int64(b.opts.RTOMax))))
			}
			if pto := p.pto(0); pto < 2*us*askSpread+b.tailAckDelay() {
				t.Errorf("probe timeout %v: the probe resends, and keeps the estimate and the allowance", time.Duration(pto))
			}
			// The path becomes 50 µs for good: within 40 samples the
			// envelope, and with it the wait, follows.
			for range 40 {
				p.rtt.sample(50 * us)
			}
			if p.rtt.lo < 40*us || p.rtt.lo > 50*us {
				t.Errorf("after 40 samples of 50 µs the envelope is %v, want 40-50 µs", time.Duration(p.rtt.lo))
			}
		})
	}
}

// TestAskWaitAfterStampPastReading: a request sent and acked within one
// receive batch may carry a send stamp past the batch's reading, a sample
// of zero or less. It is no round trip, and a clock reading that came out
// a few nanoseconds short is none either: neither may bring a
// busy-polling board's first question down to some nanoseconds after
// the message (nine of the fastest round trips).
func TestAskWaitAfterStampPastReading(t *testing.T) {
	const us = int64(time.Microsecond)
	b, p := busyPartnerOf(t, us)
	const floor = 3 * us // twice the round trip, and one for the margin
	now := b.now()
	p.rtt.sampleSince(now, now)   // stamped at the reading
	p.rtt.sampleSince(now, now+5) // stamped after it
	if w := p.askWait(0); w < floor {
		t.Errorf("after 1 µs round trips and samples of a stamp at or past the reading: first question after %v, want at least %v", time.Duration(w), time.Duration(floor))
	}
	p.rtt.sample(3) // a reading that came out short
	if p.rtt.lo < rttLoMin {
		t.Errorf("after a 3 ns sample the fastest round trip is taken as %v, want at least %v", time.Duration(p.rtt.lo), time.Duration(rttLoMin))
	}
}

// TestAnswerToQuestionAskedAgain: a question asked again under its number
// (every tag taken by questions still unanswered) keeps its first copy's
// time, so its answer's round trip includes the backoff the loss of that
// copy cost. It must not lift the round trips' lower envelope, even though
// the answer's ack, applied first, cleared the count of questions.
func TestAnswerToQuestionAskedAgain(t *testing.T) {
	const us = int64(time.Microsecond)
	b, p := busyPartnerOf(t, us)
	now := b.now()
	first := now - 500*us
	p.asked, p.answered = 5+askWindow, 5 // every tag outstanding
	p.askNum, p.askAt, p.lastAsk, p.asks = p.asked, first, first, 1
	r := &Request{}
	r.lastSend = first - us
	p.askDue(now, r)
	if p.askAt != first {
		t.Fatalf("the question was not asked again under its number (asked at %d, want %d): the test shows nothing", p.askAt, first)
	}
	p.asks = 0 // as the answer's ack clears it (applyAck)
	p.onAnswer()
	if p.rtt.lo != us {
		t.Errorf("the answer to a question asked again made the fastest round trip %v, want it left at %v", time.Duration(p.rtt.lo), time.Duration(us))
	}
}

// busyPartnerOf returns a busy-polling board, with its lock held until the
// test ends, and its partner over the in-process wire, whose round trips
// were eight samples of rt.
func busyPartnerOf(t *testing.T, rt int64) (*Board, *partner) {
	opts := DefaultBoardOptions()
	opts.BusyPoll = true
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	b, p := pr.a.b, pr.atob.p
	b.mu.Lock()
	t.Cleanup(b.mu.Unlock)
	p.rtt = rtt{}
	for range 8 {
		p.rtt.sample(rt)
	}
	return b, p
}

// TestExpectsSeveral checks which pulls a silence leaves expecting two
// or more replies (pull.expectsSeveral): frames asked for after the
// newest reply that came (pull.top), a PULL none of whose frames came
// counting as one, and holes before it counting for nothing.
func TestExpectsSeveral(t *testing.T) {
	blk := func(first, n int, seq uint32, got uint64) pblock {
		return pblock{first: first, n: n, seq: seq, got: got}
	}
	again := func(bl pblock, x int, seq uint32) pblock { // frame x asked again in PULL seq
		bl.fast |= 1 << x
		bl.fseq[x] = seq
		return bl
	}
	for _, c := range []struct {
		name   string
		blocks []pblock
		top    askedAt
		want   bool
	}{
		{"nothing came, one PULL", []pblock{blk(0, 4, 1, 0)}, askedAt{}, false},
		{"nothing came, two PULLs", []pblock{blk(0, 4, 1, 0), blk(4, 4, 2, 0)}, askedAt{}, true},
		{"the last two of a PULL that came", []pblock{blk(0, 4, 1, 0b0011)}, askedAt{1, 1}, true},
		{"the last one of a PULL that came", []pblock{blk(0, 4, 1, 0b0111)}, askedAt{1, 2}, false},
		{"a hole before the newest reply", []pblock{blk(0, 4, 1, 0b1011)}, askedAt{1, 3}, false},
		{"holes, then one PULL none of whose replies came", []pblock{blk(0, 4, 1, 0b1001), blk(4, 4, 2, 0)}, askedAt{1, 3}, false},
		{"a hole, then two PULLs silent", []pblock{blk(0, 4, 1, 0b1011), blk(4, 4, 2, 0), blk(8, 4, 3, 0)}, askedAt{1, 3}, true},
		{"a hole asked again, alone", []pblock{again(blk(0, 4, 1, 0b1011), 2, 2)}, askedAt{1, 3}, false},
		{"a hole asked again, and one due of the PULL that came",
			[]pblock{again(blk(0, 4, 1, 0b0001), 1, 2), blk(4, 2, 2, 0b01)}, askedAt{2, 4}, false},
		{"a hole asked again after the newest reply, and one due of its PULL",
			[]pblock{again(blk(0, 4, 1, 0b1101), 1, 3), blk(4, 2, 2, 0b01)}, askedAt{2, 4}, true},
		{"the rest of the PULL that came",
			[]pblock{blk(0, 4, 1, 0b1111), blk(4, 4, 2, 0b0001)}, askedAt{2, 4}, true},
	} {
		pl := &pull{blocks: c.blocks, top: c.top}
		if got := pl.expectsSeveral(); got != c.want {
			t.Errorf("%s: expectsSeveral %v, want %v", c.name, got, c.want)
		}
	}
}
