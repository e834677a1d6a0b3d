package mx

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestLossRecovery streams every size class (tiny, small, medium, large)
// over a wire that loses none, 0.1%, 1% and 20% of frames and also
// reorders and duplicates them: every message arrives exactly once, in order, byte for
// byte, and the counters show how the losses were recovered. It runs with
// selective acks negotiated and, at 1% and 20%, with one board refusing
// them (NoSack), where neither side may send or take one.
func TestLossRecovery(t *testing.T) {
	for _, c := range []struct {
		sack bool
		loss float64
	}{{true, 0}, {true, 0.001}, {true, 0.01}, {true, 0.2}, {false, 0.01}, {false, 0.2}} {
		loss := c.loss
		t.Run(fmt.Sprintf("sack=%v/loss=%g", c.sack, loss), func(t *testing.T) {
			n := 4000
			if loss >= 0.1 {
				n = 1500
			}
			if testing.Short() {
				n /= 4
			}
			opts := fastOptions()
			// A give-up budget (ResendDelay × ResendMax) of a minute, not
			// fastOptions' 8 s: on a loaded host a frame lost at 20% can
			// wait out several backed-off resends, and the stream must be
			// resent, not declared unreachable.
			opts.ResendMax = int(time.Minute / opts.ResendDelay)
			optsB := opts
			optsB.NoSack = !c.sack
			pr := newPair(t, loopbackOnly, opts, loopback.Faults{}, optsB)
			pr.w.faults(loopback.Faults{Loss: loss, Reorder: 0.05, Duplicate: 0.02, Seed: 1300})
			runStream(t, pr, n, 32)
			ca, cb := pr.a.Counters(), pr.b.Counters()
			fast := ca.Get(FastRetransmits) + cb.Get(FastRetransmits)
			timer := ca.Get(TimerRetransmits) + cb.Get(TimerRetransmits)
			asked := ca.Get(AskRetransmits) + cb.Get(AskRetransmits) // on a question's answer (ask.go)
			t.Logf("fast retransmits %d, timer retransmits %d, on an answer %d, tail probes %d, duplicates received %d/%d, pull frames re-requested %d",
				fast, timer, asked, ca.Get(TailProbes), ca.Get(DupReceived), cb.Get(DupReceived), cb.Get(PullFramesRerequested))
			if loss > 0 && fast+timer+asked+ca.Get(TailProbes) == 0 {
				t.Errorf("frames were lost but no retransmission was counted")
			}
			if cb.Get(DupReceived) == 0 {
				t.Errorf("the wire duplicates frames but the receiver counted no duplicate")
			}
			sacks := ca.Get(SacksSent) + cb.Get(SacksSent) + ca.Get(SacksReceived) + cb.Get(SacksReceived)
			t.Logf("selective acks sent %d, received %d", cb.Get(SacksSent), ca.Get(SacksReceived))
			if c.sack && cb.Get(SacksSent) == 0 {
				t.Errorf("the wire reorders frames but the receiver sent no selective ack")
			}
			if !c.sack && sacks != 0 {
				t.Errorf("%d selective acks where one board refused them", sacks)
			}
		})
	}
}

// dropMarked wraps a transport and drops, every time, each outgoing frame
// that contains marker: a loss pattern that takes the same frame's every
// resend.
type dropMarked struct {
	transport.Transport
	marker  []byte
	dropped atomic.Int64
}

func (d *dropMarked) Send(frames []transport.Frame) (int, error) {
	return sendKept(d.Transport, frames, func(f transport.Frame) bool {
		if bytes.Contains(f.Data, d.marker) {
			d.dropped.Add(1)
			return false
		}
		return true
	})
}

// sendKept sends on tr the frames keep accepts, as one batch, and reports
// them all sent: the wrappers that lose frames on purpose use it.
func sendKept(tr transport.Transport, frames []transport.Frame, keep func(transport.Frame) bool) (int, error) {
	kept := frames[:0:0]
	for _, f := range frames {
		if keep(f) {
			kept = append(kept, f)
		}
	}
	if len(kept) > 0 {
		if _, err := tr.Send(kept); err != nil {
			return 0, err
		}
	}
	return len(frames), nil
}

// TestUnreachableKeepsTotalTime sends, to a partner whose round trip is
// known (so resends start at RTOMin), one message whose every copy the
// wire drops: the resends (on the answers to questions that back off)
// back off, and the send still fails with
// ErrUnreachable no sooner than ResendDelay*(ResendMax+1) after it went
// out, as with fixed-period resends.
func TestUnreachableKeepsTotalTime(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	marker := []byte("every-copy-of-this-frame-is-lost")
	d := &dropMarked{Transport: w.a, marker: marker}
	w.a = d
	opts := fastOptions()
	opts.ResendDelay = 10 * time.Millisecond
	opts.ResendMax = 20
	opts.RTOMin = time.Millisecond
	opts.RTOMax = 40 * time.Millisecond
	opts.ZombieSends = -1 // the send completes on its ack, or fails
	pr := newPairOn(t, w, opts)
	// Round trips to measure: ping-pongs with the partner.
	for range 20 {
		pr.requestReply(t, []byte("ping"), 10*time.Second)
	}
	before := pr.a.Counters()
	start := time.Now()
	s, err := pr.a.ISend([][]byte{marker}, pr.atob, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(testCtx(t, 60*time.Second)); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("want ErrUnreachable, got %v", err)
	}
	el := time.Since(start)
	total := opts.ResendDelay * time.Duration(opts.ResendMax+1)
	if el < total {
		t.Errorf("declared unreachable after %v, before the configured %v", el, total)
	}
	after := pr.a.Counters()
	// Resends on a timer, or, toward a peer that answers questions
	// (ask.go), on each answer that shows the message still missing.
	resends := after.Get(TimerRetransmits) + after.Get(AskRetransmits) - before.Get(TimerRetransmits) - before.Get(AskRetransmits)
	// RTOMin 1 ms backing off to RTOMax 40 ms within 210 ms: about ten
	// resends; without backoff it would be about two hundred.
	if resends == 0 || resends > uint64(opts.ResendMax) {
		t.Errorf("%d timer resends before the verdict: want some, at most ResendMax (%d)", resends, opts.ResendMax)
	}
	if d.dropped.Load() < int64(resends) {
		t.Errorf("the wire dropped %d copies, fewer than the %d resends", d.dropped.Load(), resends)
	}
	t.Logf("unreachable after %v (configured %v), %d resends, %d copies dropped", el, total, resends, d.dropped.Load())
}

// FuzzRTTTimeout feeds the estimator adversarial samples (negative, zero,
// huge, wildly alternating) and bounds: the timeout is never zero or
// negative, stays within its bounds and never shrinks as backoff grows.
func FuzzRTTTimeout(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1}, int64(500e3), int64(500e6), int64(50e3), int64(20e6))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(0), int64(0), int64(0), int64(0))
	f.Add([]byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, int64(-5), int64(-7), int64(-1), int64(-3))
	f.Fuzz(func(t *testing.T, samples []byte, lo, hi, gran, fallback int64) {
		var e rtt
		check := func() {
			prev := int64(0)
			for k := 0; k < 70; k++ {
				to := e.timeout(fallback, gran, lo, hi, k)
				if to <= 0 {
					t.Fatalf("timeout %d after backoff %d (srtt %d, rttvar %d, lo %d, hi %d, fallback %d)", to, k, e.srtt, e.rttvar, lo, hi, fallback)
				}
				if to < max(lo, 1) {
					t.Fatalf("timeout %d below the floor %d", to, lo)
				}
				ceil := max(hi, lo, 1)
				if !e.ok {
					ceil = max(ceil, fallback)
				}
				if to > ceil {
					t.Fatalf("timeout %d above the ceiling %d", to, ceil)
				}
				if to < prev {
					t.Fatalf("timeout shrank from %d to %d with more backoff", prev, to)
				}
				prev = to
			}
		}
		check()
		for len(samples) >= 8 {
			var s int64
			for _, c := range samples[:8] {
				s = s<<8 | int64(c)
			}
			samples = samples[8:]
			e.sample(s)
			if e.srtt <= 0 || e.rttvar < 0 {
				t.Fatalf("after sample %d: srtt %d, rttvar %d", s, e.srtt, e.rttvar)
			}
			check()
		}
	})
}

// dropFirst wraps a transport and drops the first outgoing frame that
// contains marker, once.
type dropFirst struct {
	transport.Transport
	marker  []byte
	dropped atomic.Bool
}

func (d *dropFirst) Send(frames []transport.Frame) (int, error) {
	return sendKept(d.Transport, frames, func(f transport.Frame) bool {
		return !bytes.Contains(f.Data, d.marker) || !d.dropped.CompareAndSwap(false, true)
	})
}

// TestSackMediumFragment loses the middle fragment of a three-fragment
// medium message once. With selective acks the receiver, holding the
// fragment after the hole, reports it at once and the sender resends that
// fragment alone, as a fast retransmit, long before any timer (RTOMin is
// 50 ms here). Without them (the receiver's board sets NoSack) no SACK
// crosses the wire: the sender asks the late receiver what it holds
// (ask.go) and resends the message on the answer, or the timer does.
func TestSackMediumFragment(t *testing.T) {
	for _, sack := range []bool{true, false} {
		t.Run(fmt.Sprintf("sack=%v", sack), func(t *testing.T) {
			w := newLoopbackWire(t, loopback.Faults{})
			marker := []byte("the-middle-fragment-is-lost-once")
			d := &dropFirst{Transport: w.a, marker: marker}
			w.a = d
			opts := fastOptions()
			opts.ResendDelay = time.Second
			opts.RTOMin = 50 * time.Millisecond
			opts.ZombieSends = -1
			optsB := opts
			optsB.NoSack = !sack
			pr := newPairOn(t, w, opts, optsB)
			for range 10 { // round trips to measure
				pr.requestReply(t, nil, 10*time.Second)
			}
			pr.ba.mu.Lock()
			stride := pr.a.partner(pr.bb.NICID(), 2, false).stride
			pr.ba.mu.Unlock()
			msg := pattern(2*stride+100, 7)
			copy(msg[stride+50:], marker)
			ca0, cb0 := pr.a.Counters(), pr.b.Counters()
			buf := make([]byte, len(msg))
			r, _ := pr.b.IRecv([][]byte{buf}, 3, ^uint64(0), nil)
			s, _ := pr.a.ISend([][]byte{msg}, pr.atob, 3, nil)
			mustWait(t, r, 30*time.Second)
			mustWait(t, s, 30*time.Second)
			if !bytes.Equal(buf, msg) {
				t.Fatal("the medium message differs")
			}
			if !d.dropped.Load() {
				t.Fatal("the wire dropped nothing: is the marker in one fragment?")
			}
			ca, cb := pr.a.Counters(), pr.b.Counters()
			delta := func(c Counters, c0 Counters, k Counter) uint64 { return c.Get(k) - c0.Get(k) }
			fast, timer := delta(ca, ca0, FastRetransmits), delta(ca, ca0, TimerRetransmits)
			probes, frags := delta(ca, ca0, TailProbes), delta(ca, ca0, SendMediumFrag)
			t.Logf("fast %d, timer %d, probes %d, fragments sent %d, sacks sent %d",
				fast, timer, probes, frags, delta(cb, cb0, SacksSent))
			if !sack {
				asked := delta(ca, ca0, AskRetransmits)
				if fast != 0 || timer+asked == 0 || delta(cb, cb0, SacksSent)+delta(ca, ca0, SacksReceived) != 0 {
					t.Errorf("without SACK: fast %d, timer %d, resent on an answer %d, sacks %d",
						fast, timer, asked, delta(cb, cb0, SacksSent))
				}
				return
			}
			// The fragment comes back on the SACK after its reordering
			// window, or on the answer to a question (ask.go) when that
			// window's descheduling allowance is longer: either way alone.
			if asked := delta(ca, ca0, AskRetransmits); delta(cb, cb0, SacksSent) == 0 || delta(ca, ca0, SacksReceived) == 0 || fast+asked == 0 {
				t.Errorf("with SACK: %d sent, %d received, %d fast retransmits, %d on an answer; want a SACK and a fast retransmit",
					delta(cb, cb0, SacksSent), delta(ca, ca0, SacksReceived), fast, asked)
			}
			// Three fragments, the lost one again (twice if a stalled
			// machine delayed the first resend past a repeated SACK), and
			// whatever a stall made the timers send.
			if frags != 3+fast+delta(ca, ca0, AskRetransmits)+3*timer+probes {
				t.Errorf("%d fragments sent: want the three and the missing one only (timer %d, probes %d)", frags, timer, probes)
			}
		})
	}
}
