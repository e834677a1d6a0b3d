package mx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// idleState is what a board's idle ticks look like (progress.go): the
// stretched period, the periodic timer runs and the progress goroutine's
// wake-ups.
func (b *Board) idleState() (idle time.Duration, runs, looks uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idleTick, b.tickRuns, b.looks.Load()
}

// waitIdle waits, within bound, until b's idle tick period is at least
// p, and fails the test when it is not.
func waitIdle(t *testing.T, b *Board, p time.Duration, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		if idle, _, _ := b.idleState(); idle >= p {
			return
		}
		if time.Now().After(deadline) {
			idle, runs, looks := b.idleState()
			t.Fatalf("board never idle: tick period %v after %d timer runs and %d looks (want %v)", idle, runs, looks, p)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestIdleBoardSleeps checks that a board with nothing in flight stops
// ticking at once and then wakes no more: from its last message it runs
// its timers a few times (the ack it owes, the ticks that find it quiet)
// before it waits the longest tick, where doubling the period from the
// fifth quiet tick took some fifteen runs; and while a busy board beside
// it runs 200 ticks, it runs no timers, its fine timer does not fire and
// its receive loop does not wake, unless the longest tick it planned
// falls inside them. Counted in timer runs, the board's counters and
// another board's ticks, not time. Whatever is sent afterwards brings the
// ticks back and completes as usual.
func TestIdleBoardSleeps(t *testing.T) {
	for _, tf := range transportFactories {
		if tf.name != "loopback" && tf.name != "udp" && tf.name != "shm" {
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			pr := newPair(t, tf, patientResends(), loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			msg := [][]byte{pattern(8, 1)}
			buf := [][]byte{make([]byte, 8)}
			exchange(t, ctx, pr.a, pr.atob, pr.b, 1, ^uint64(0), msg, buf)
			exchange(t, ctx, pr.b, pr.btoa, pr.a, 2, ^uint64(0), msg, buf)
			// Idle once: a new board ticks busy for its first busyLinger.
			waitIdle(t, pr.ba, idleTickMax, 30*time.Second)
			// A receive posted and waited for in the background: an idle
			// rank waits so, and a posted receive is nothing to time.
			r, err := pr.a.IRecv(buf, 3, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := r.Wait(ctx); done <- err }()
			// A message each way wakes the ticks; from the last, the
			// board stretches again.
			exchange(t, ctx, pr.a, pr.atob, pr.b, 4, ^uint64(0), msg, buf)
			buf5 := [][]byte{make([]byte, 8)}
			exchange(t, ctx, pr.b, pr.btoa, pr.a, 5, ^uint64(0), msg, buf5)
			_, runs0, _ := pr.ba.idleState()
			waitIdle(t, pr.ba, idleTickMax, 30*time.Second)
			_, runs1, _ := pr.ba.idleState()
			// The ack owed for the last message, the two quiet ticks,
			// and a tick or two before the ack came.
			if runs := runs1 - runs0; runs > 6 {
				t.Errorf("board ran its timers %d times between its last message and its longest tick, want at most 6", runs)
			}

			// A busy board's ticks measure the window: a connect to a
			// NIC nobody attached keeps its board ticking.
			ref := newPair(t, loopbackOnly, patientResends(), loopback.Faults{})
			if _, err := ref.a.IConnect(transport.NICID(0x02000000ffff), 2, testKey, 0, nil); err != nil {
				t.Fatal(err)
			}
			// refTicks waits until the reference board ran n more ticks.
			refTicks := func(n uint64) {
				t.Helper()
				_, from, _ := ref.ba.idleState()
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
					if _, now, _ := ref.ba.idleState(); now-from >= n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("the reference board ran fewer than %d ticks in 30s", n)
					}
				}
			}
			// The window opens once the waiter's poll is over: it sleeps
			// on its channel, and the receive loop it handed the sources
			// back to has had 20 ticks to go back to its wait. (A
			// polling waiter keeps the loop away and wakes it as it
			// leaves: the waiter is not idle.)
			for deadline := time.Now().Add(30 * time.Second); pr.ba.sleep.chanSleepers.Load() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the receive's waiter did not sleep within 30s")
				}
			}
			refTicks(20)
			pr.ba.mu.Lock()
			planned := pr.ba.nextTick.Load()
			pr.ba.mu.Unlock()
			_, runs2, looks2 := pr.ba.idleState()
			c2 := pr.ba.Counters()
			refTicks(200)
			_, runs3, looks3 := pr.ba.idleState()
			c3 := pr.ba.Counters()
			// The planned tick, if the window outlasted it (a loaded
			// machine stretches 200 ticks): one timer run and one wake
			// of whoever keeps the ticks per idleTickMax past it.
			allowed := uint64(0)
			if now := pr.ba.clock(); now >= planned {
				allowed = 1 + uint64((now-planned)/int64(idleTickMax))
			}
			if runs := runs3 - runs2; runs > allowed {
				t.Errorf("idle board ran its timers %d times while another board ticked 200 times, want %d", runs, allowed)
			}
			if f := c3[FineFirings] - c2[FineFirings]; f > allowed {
				t.Errorf("idle board's fine timer fired %d times while another board ticked 200 times, want %d", f, allowed)
			}
			// (A transport Close cannot wake keeps the receive loop's Recv
			// waits within a tick, progress.go.)
			if s := pr.ba.src; s.waker == nil && s.kick == nil {
				t.Logf("progress goroutine not counted: its Recv waits a tick at most")
			} else if looks := looks3 - looks2; looks > allowed {
				t.Errorf("idle board's receive loop woke %d times while another board ticked 200 times, want %d", looks, allowed)
			}

			// A send ends the idle ticks at once, and everything
			// completes as usual.
			s, err := pr.b.ISend(msg, pr.btoa, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			pr.bb.mu.Lock()
			idleB := pr.bb.idleTick
			pr.bb.mu.Unlock()
			if idleB != 0 {
				t.Errorf("sending board still idle (tick period %v) after a send", idleB)
			}
			exchange(t, ctx, pr.a, pr.atob, pr.b, 4, ^uint64(0), msg, buf)
		})
	}
}

// TestIdleBoardFindsDeadPeer checks that a board whose ticks stretched
// while idle still gives up a peer that vanished, once it sends to it:
// the send brings the ticks back and the resend limit runs as usual.
func TestIdleBoardFindsDeadPeer(t *testing.T) {
	for _, tf := range transportFactories {
		if tf.name != "loopback" && tf.name != "udp" {
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			pr := newPair(t, tf, patientResends(), loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			msg := [][]byte{pattern(8, 1)}
			buf := [][]byte{make([]byte, 8)}
			exchange(t, ctx, pr.a, pr.atob, pr.b, 1, ^uint64(0), msg, buf)
			waitIdle(t, pr.ba, 8*pr.ba.tick, 30*time.Second)
			pr.bb.Close()
			if err := pr.a.SetRequestTimeout(nil, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			s, err := pr.a.ISend(msg, pr.atob, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(testCtx(t, time.Minute)); !errors.Is(err, ErrUnreachable) {
				t.Fatalf("send to a vanished peer from an idle board: %v, want ErrUnreachable", err)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatal("test context expired")
			}
		})
	}
}

// TestIdleSendOnlyBoardTicks checks that a board that only sends lean
// messages (a stream's sender) leaves its stretched tick once it sends:
// a lean send completes at once and times nothing, yet the board must
// answer its lanes' retire requests and count its peers. From an idle
// board, stretched to idleTickMax with no lane out, it streams over a
// lane; after every send the board's next tick is at most its lanes'
// LaneIdle away, and it runs its timers while the stream goes on.
// Counted in messages and timer runs, not time.
func TestIdleSendOnlyBoardTicks(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	tr := pr.ba.shmTransport()
	msg := [][]byte{pattern(8, 1)}
	buf := [][]byte{make([]byte, 8)}
	send := func(match uint64, check func()) {
		t.Helper()
		r, err := pr.b.IRecv(buf, match, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.a.ISend(msg, pr.atob, match, nil)
		if err != nil {
			t.Fatal(err)
		}
		check()
		if _, err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const bound = 50000
	lanes := pr.a.Counters().Get(LaneSends)
	for i := 0; pr.a.Counters().Get(LaneSends) == lanes; i++ {
		if i == bound {
			t.Fatalf("no lane send in %d messages", bound)
		}
		send(uint64(i), func() {})
	}
	// Idle, its lane retired: the longest tick.
	waitIdle(t, pr.ba, idleTickMax, 30*time.Second)
	if n := tr.LanesOut(); n != 0 {
		t.Fatalf("board stretched to %v with %d lanes out", idleTickMax, n)
	}
	_, runs0, _ := pr.ba.idleState()
	laneTick := min(max(tr.LaneIdle(), 2*pr.ba.tick), idleTickMax)
	lanes = pr.a.Counters().Get(LaneSends)
	for i := 0; ; i++ {
		_, runs, _ := pr.ba.idleState()
		if runs-runs0 >= 3 && pr.a.Counters().Get(LaneSends) > lanes {
			break
		}
		if i == bound {
			t.Fatalf("%d timer runs and %d lane sends in %d lean sends", runs-runs0, pr.a.Counters().Get(LaneSends)-lanes, bound)
		}
		send(uint64(i), func() {
			pr.ba.mu.Lock()
			idle, next, now := pr.ba.idleTick, pr.ba.nextTick.Load(), pr.ba.clock()
			pr.ba.mu.Unlock()
			// (Two timer runs between the send and this look may
			// stretch the tick again, to laneTick while a lane is out.)
			if tr.LanesOut() > 0 && (idle > laneTick || time.Duration(next-now) > laneTick) {
				t.Fatalf("send %d went, with a lane out: tick period %v, next tick in %v, want at most %v",
					i, idle, time.Duration(next-now), laneTick)
			}
		})
	}
}
