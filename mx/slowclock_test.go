package mx

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// setSlowClock makes b handle messages as on a clock whose reading is a
// system call (Board.slowClk: a TCG guest's HPET), whatever this machine's
// clock costs. Called before the pair exchanges its messages.
func setSlowClock(b *Board) {
	b.mu.Lock()
	b.slowClk = true
	b.mu.Unlock()
}

// TestSlowClockNoSpuriousRecovery is TestNoSpuriousRecovery on boards
// that read no clock for a small message's receive (its ack deadline waits
// for the next reading, and one ack in slowRTTEvery gives a round-trip
// sample), over the in-process wire and UDP on loopback, in both wait
// modes: no timer, probe or resend acts on a lossless wire.
func TestSlowClockNoSpuriousRecovery(t *testing.T) {
	n := 20000
	if testing.Short() || raceEnabled {
		n = 4000
	}
	for _, name := range []string{"loopback", "udp"} {
		tf := factoryNamed(t, name)
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/busypoll=%v", name, busy), func(t *testing.T) {
				checkNoSpurious(t, tf, busy, true, n)
			})
		}
	}
}

// TestSlowClockLossyPingPong is TestLossyPingPong on boards that take
// their clock as slow: every byte of a ping-pong over a wire losing 1% of
// its frames arrives, brought back by questions, probes or timers.
func TestSlowClockLossyPingPong(t *testing.T) {
	n := 2000
	if testing.Short() || raceEnabled {
		n = 500
	}
	checkLossyPingPong(t, n, true)
}

// TestSlowClockAcksUnanswered sends small messages one way to a receiver on
// a slow clock that never replies, in both wait modes: each is acked (its
// deadline, left for the next reading, gets one), so the sender's window
// empties and the receiver counts delayed acks.
func TestSlowClockAcksUnanswered(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opts := DefaultBoardOptions()
			opts.BusyPoll = busy
			pr := newPair(t, factoryNamed(t, "loopback"), opts, loopback.Faults{})
			setSlowClock(pr.ba)
			setSlowClock(pr.bb)
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

// stopTicks puts b's periodic ticks an hour apart, so that only what a
// test is about can run its timers: its loop's looks, its fine timer.
func stopTicks(b *Board) {
	b.mu.Lock()
	b.tick, b.tickBusy = time.Hour, time.Hour
	b.nextTick.Store(b.clock() + int64(time.Hour))
	b.mu.Unlock()
}

// TestSlowClockAckWithoutTick: on a slow clock, a message whose receiver
// then neither replies nor waits again is acked without the board's next
// tick, whoever received it. The receiver's ticks are stopped and the
// sender asks only after half a second, so the ack the sender gets is the
// receiver's delayed ack. A waiter asleep on its sources (UDP) gives the
// deadline its time with the reading it made as it woke, before its wait
// returns; a busy-polling waiter leaves it for the next reading, the
// receive loop's next look (at most the poll grace later).
func TestSlowClockAckWithoutTick(t *testing.T) {
	for _, c := range []struct {
		name    string
		wire    string
		busy    bool
		sleeper bool
	}{
		{"busypoll", "loopback", true, false},
		{"sleeper", "udp", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.sleeper {
				needSleepers(t)
			}
			oa := fastOptions()
			oa.RTOMin, oa.ResendDelay = 2*time.Second, 4*time.Second // asks after 250 ms at least
			ob := fastOptions()
			ob.BusyPoll = c.busy
			if c.sleeper {
				ob.Spin = -1 // sleep at once
				ob.SleepOnSources = true
			}
			pr := newPair(t, factoryNamed(t, c.wire), oa, loopback.Faults{}, ob)
			setSlowClock(pr.ba)
			setSlowClock(pr.bb)
			stopTicks(pr.bb)
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
