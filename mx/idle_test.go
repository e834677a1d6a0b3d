package mx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// idleState is what a board's idle ticks look like (progress.go): the
// idle period (idleTickMax once it has no tick), the periodic timer runs
// and the progress goroutine's wake-ups.
func (b *Board) idleState() (idle time.Duration, runs, looks uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idleTick, b.tickRuns, b.looks.Load()
}

// waitIdle waits, within bound, until b is idle (its idle tick period is
// at least p: an idle board has none, progress.go), and fails the test
// when it is not.
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

// TestIdleBoardFindsDeadPeer checks that a board that stopped ticking
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
