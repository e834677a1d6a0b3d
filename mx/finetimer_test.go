package mx

import (
	"context"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// tickClock is a board that keeps ticking: its wire loses every frame
// and it connects to an endpoint, so a connect is always in flight and
// every tick runs. Its ticks measure an interval for a test without
// reading the time.
type tickClock struct {
	b *Board
}

// newTickClock opens the ticking board on a wire of its own.
func newTickClock(t *testing.T) tickClock {
	t.Helper()
	pr := newPair(t, transportFactory{name: "loopback", new: newLoopbackWire}, DefaultBoardOptions(), loopback.Faults{})
	pr.w.faults(loopback.Faults{Loss: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = pr.a.Connect(ctx, pr.bb.NICID(), pr.b.ID()+1, testKey) // never answered
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return tickClock{b: pr.ba}
}

// wait returns once the clock's board has run n more ticks.
func (c tickClock) wait(t *testing.T, n uint64) {
	t.Helper()
	_, from, _ := c.b.idleState()
	waitUntil(t, "the reference board's ticks", func() bool {
		_, runs, _ := c.b.idleState()
		return runs >= from+n
	})
}

// wakeState is what woke board b so far: its fine timer's arms and
// firings, its ticks, its sleeps that a timeout ended and its receive
// loop's returns from Recv.
func (b *Board) wakeState() (w boardWakes, looks uint64) {
	return takeWakes(b), b.looks.Load()
}

// TestIdleBoardSleepsWithoutTimers checks that a board with nothing to
// time is woken by nothing: once it has stopped ticking, it runs no timer,
// arms and fires no timerfd and ends no sleep by a timeout while another
// board ticks 8 times (a blocking waiter sits on a posted receive
// meanwhile, as an idle rank does), and a send afterwards brings its
// ticks back and completes.
func TestIdleBoardSleepsWithoutTimers(t *testing.T) {
	clock := newTickClock(t)
	for _, tf := range transportFactories {
		if tf.name != "loopback" && tf.name != "udp" && tf.name != "shm" {
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			pr := newPair(t, tf, patientResends(), loopback.Faults{})
			if pr.ba.fine == nil {
				t.Skip("no timerfd on this system: the board keeps its ticks")
			}
			ctx := testCtx(t, time.Minute)
			msg := [][]byte{pattern(8, 1)}
			buf := [][]byte{make([]byte, 8)}
			exchange(t, ctx, pr.a, pr.atob, pr.b, 1, ^uint64(0), msg, buf)
			exchange(t, ctx, pr.b, pr.btoa, pr.a, 2, ^uint64(0), msg, buf)
			r, err := pr.a.IRecv(buf, 3, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := r.Wait(ctx); done <- err }()

			waitUntil(t, "the board to stop ticking", func() bool { return pr.ba.nextTick.Load() == noTick })
			w0, looks0 := pr.ba.wakeState()
			clock.wait(t, 8)
			w1, looks1 := pr.ba.wakeState()
			if d := w1.sub(w0); d != (boardWakes{waits: d.waits}) {
				t.Errorf("idle board woken while another ticked 8 times: %d timer runs, %d timerfd arms, %d firings, %d sleeps ended by a timeout",
					d.ticks, d.arms, d.firings, d.empty)
			}
			// A transport Close cannot wake keeps its Recv waits
			// within a tick (progress.go).
			if s := pr.ba.src; s.sleeper != nil || s.kick != nil {
				if looks := looks1 - looks0; looks > 1 {
					t.Errorf("idle board's receive loop woke %d times while another board ticked 8 times, want at most 1", looks)
				}
			}

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
			if next := pr.bb.nextTick.Load(); next == noTick {
				t.Error("sending board has no tick after a send")
			}
			exchange(t, ctx, pr.a, pr.atob, pr.b, 4, ^uint64(0), msg, buf)
		})
	}
}

// TestBlockingPingPongWakes runs a blocking 8-byte ping-pong and counts
// what woke the boards besides the messages: the periodic tick runs a few
// times per thousand messages, not once per busy tick, a receive loop's
// sleep is rarely ended by a timeout, and the fine timer is armed and
// fires for a fraction of the messages (about once per deadline
// interval, not per message).
func TestBlockingPingPongWakes(t *testing.T) {
	const rounds = 2000
	for _, tf := range transportFactories {
		if tf.name != "loopback" && tf.name != "udp" && tf.name != "shm" {
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			pr := newPair(t, tf, DefaultBoardOptions(), loopback.Faults{})
			if pr.ba.fine == nil {
				t.Skip("no timerfd on this system: the board keeps its ticks")
			}
			ctx := testCtx(t, time.Minute)
			ping := func(n int) {
				errc := make(chan error, 1)
				go func() {
					buf := [][]byte{make([]byte, 8)}
					for i := range n {
						r, err := pr.b.IRecv(buf, uint64(i), ^uint64(0), nil)
						if err == nil {
							_, err = r.Wait(ctx)
						}
						var s *Request
						if err == nil {
							s, err = pr.b.ISend(buf, pr.btoa, uint64(i), nil)
						}
						if err == nil {
							_, err = s.Wait(ctx)
						}
						if err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				msg, buf := [][]byte{pattern(8, 1)}, [][]byte{make([]byte, 8)}
				for i := range n {
					r, err := pr.a.IRecv(buf, uint64(i), ^uint64(0), nil)
					if err != nil {
						t.Fatal(err)
					}
					s, err := pr.a.ISend(msg, pr.atob, uint64(i), nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := s.Wait(ctx); err != nil {
						t.Fatal(err)
					}
					if _, err := r.Wait(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			ping(100) // round trips measured
			w0 := takeWakes(pr.ba, pr.bb)
			ping(rounds)
			d := takeWakes(pr.ba, pr.bb).sub(w0)
			msgs := uint64(2 * rounds)
			t.Logf("per 1000 messages: %.1f timerfd arms, %.1f firings (%.1f with nothing due), %.1f ticks, %.1f sleeps ended by a timeout",
				1000*float64(d.arms)/float64(msgs), 1000*float64(d.firings)/float64(msgs), 1000*float64(d.idle)/float64(msgs),
				1000*float64(d.ticks)/float64(msgs), 1000*float64(d.empty)/float64(msgs))
			// Over the in-process wires a round trip is a small part
			// of the deadline interval; over UDP on a loaded machine
			// a reply often comes after a tail's ack delay, and the
			// timer sends that ack: still not one firing per message.
			limit, what := msgs/4, "one in four"
			if tf.name == "udp" {
				limit, what = msgs, "one per message"
			}
			if d.arms > limit || d.firings > limit {
				t.Errorf("fine timer armed %d and fired %d times for %d messages, want at most %s", d.arms, d.firings, msgs, what)
			}
			if d.ticks > msgs/20 {
				t.Errorf("%d ticks for %d messages, want at most one in twenty", d.ticks, msgs)
			}
			if d.empty > msgs/10 {
				t.Errorf("%d sleeps ended by a timeout for %d messages, want at most one in ten", d.empty, msgs)
			}
		})
	}
}
