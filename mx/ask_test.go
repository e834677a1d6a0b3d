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
// the ping is resent on it: an ask retransmit, no timer retransmit, and
// the receiver answered an ask.
func TestAskRevealsLoss(t *testing.T) {
	for _, busy := range []bool{false, true} {
		for _, sack := range []bool{true, false} {
			t.Run(fmt.Sprintf("busypoll=%v/sack=%v", busy, sack), func(t *testing.T) {
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
				exchange := func(msg []byte) {
					buf := make([]byte, len(msg))
					r, _ := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
					s, _ := pr.a.ISend([][]byte{msg}, pr.atob, 1, nil)
					mustWait(t, r, 30*time.Second)
					back, _ := pr.b.ISend(nil, pr.btoa, 2, nil)
					r2, _ := pr.a.IRecv(nil, 2, ^uint64(0), nil)
					mustWait(t, r2, 30*time.Second)
					mustWait(t, s, 30*time.Second)
					mustWait(t, back, 30*time.Second)
					if !bytes.Equal(buf, msg) {
						t.Fatalf("got %q, want %q", buf, msg)
					}
				}
				for range 20 { // round trips to measure
					exchange([]byte("ping"))
				}
				ca0, cb0 := pr.a.Counters(), pr.b.Counters()
				exchange(marker)
				if !d.dropped.Load() {
					t.Fatal("the wire dropped nothing")
				}
				ca, cb := pr.a.Counters(), pr.b.Counters()
				t.Logf("a: %s\nb: %s", recoveryDelta(ca0, ca), recoveryDelta(cb0, cb))
				delta := func(c, c0 Counters, k Counter) uint64 { return c.Get(k) - c0.Get(k) }
				if delta(ca, ca0, AskRetransmits) == 0 || delta(cb, cb0, AsksAnswered) == 0 || delta(ca, ca0, TimerRetransmits) != 0 {
					t.Errorf("the lost ping: %d resent on an answer, %d asks answered, %d timer retransmits; want the ask's answer to resend it",
						delta(ca, ca0, AskRetransmits), delta(cb, cb0, AsksAnswered), delta(ca, ca0, TimerRetransmits))
				}
			})
		}
	}
}
