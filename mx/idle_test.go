package mx

import (
	"context"
	"errors"
	"testing"
	"time"

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
// ticking: its tick period doubles at each tick, the progress goroutine
// wakes about once per tick, and whatever is sent afterwards brings the
// ticks back and completes as usual. Counted in ticks and wake-ups, not
// time: while the period goes from 8 ticks to 32, a board ticking every
// tick would run its timers 24 times, an idle one runs them twice.
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
			// A receive posted and waited for in the background: an idle
			// rank waits so, and a posted receive is nothing to time.
			r, err := pr.a.IRecv(buf, 3, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := r.Wait(ctx); done <- err }()

			tick := pr.ba.tick
			waitIdle(t, pr.ba, 8*tick, 30*time.Second)
			_, runs0, looks0 := pr.ba.idleState()
			waitIdle(t, pr.ba, 32*tick, 30*time.Second)
			_, runs1, looks1 := pr.ba.idleState()
			// 8 -> 16 -> 32: two stretched ticks, and a third if the
			// period was already past 8 ticks when first read.
			if runs := runs1 - runs0; runs > 3 {
				t.Errorf("idle board ran its timers %d times while its tick period went from 8 to 32 ticks, want at most 3", runs)
			}
			// Each tick wakes the progress goroutine once; the
			// receive's waiter may hand the source back once or twice.
			// (A transport Close cannot wake keeps its Recv waits
			// within a tick, progress.go.)
			if s := pr.ba.src; s.waker == nil && s.kick == nil {
				t.Logf("progress goroutine not counted: its Recv waits a tick at most")
			} else if looks := looks1 - looks0; looks > 8 {
				t.Errorf("idle board's progress goroutine woke %d times in %d ticks, want at most 8", looks, runs1-runs0)
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
