package mx

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// kickWire is a transport.Kicker over the in-process wire that sends what
// Queue queued only when Kick is called, in queueing order, as an AF_XDP
// TX ring in copy mode does: a send path that queued a frame and never
// kicked leaves it unsent.
type kickWire struct {
	transport.Transport
	mu            sync.Mutex
	queued        []transport.Frame
	queues, kicks atomic.Uint64
}

func (k *kickWire) Queue(frames []transport.Frame) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range frames {
		f.Data = bytes.Clone(f.Data)
		k.queued = append(k.queued, f)
	}
	k.queues.Add(uint64(len(frames)))
	return len(frames), nil
}

func (k *kickWire) Kick() error {
	k.mu.Lock()
	defer k.mu.Unlock() // held across the send: batches leave in order
	k.kicks.Add(1)
	q := k.queued
	k.queued = nil
	for len(q) > 0 {
		n, err := k.Transport.Send(q)
		if err != nil {
			return err
		}
		q = q[n:]
	}
	return nil
}

// A board whose transport queues and kicks (transport.Kicker) sends
// through Queue alone and kicks after its lock, on every path: tiny,
// medium and large messages (pulls, notifies, acks) complete both ways, in
// both wait modes, and nothing stays queued.
func TestKickAfterUnlock(t *testing.T) {
	for _, busy := range []bool{true, false} {
		t.Run(map[bool]string{true: "busy-poll", false: "block"}[busy], func(t *testing.T) {
			var ka, kb *kickWire
			tf := transportFactory{name: "kick", new: func(t testing.TB, f loopback.Faults) *wire2 {
				w := newLoopbackWire(t, f)
				ka, kb = &kickWire{Transport: w.a}, &kickWire{Transport: w.b}
				w.a, w.b = ka, kb
				return w
			}}
			o := fastOptions()
			o.BusyPoll = busy
			pr := newPair(t, tf, o, loopback.Faults{})
			ctx := testCtx(t, 60*time.Second)
			for i, n := range []int{8, 3000, 200 << 10, 8, 0} {
				msg := pattern(n, uint64(i))
				got := make([]byte, n)
				exchange(t, ctx, pr.a, pr.atob, pr.b, 7, ^uint64(0), [][]byte{msg}, [][]byte{got})
				if !bytes.Equal(got, msg) {
					t.Fatalf("message %d (%d bytes) arrived changed", i, n)
				}
				exchange(t, ctx, pr.b, pr.btoa, pr.a, 8, ^uint64(0), [][]byte{got}, [][]byte{msg})
			}
			for _, k := range []*kickWire{ka, kb} {
				if k.queues.Load() == 0 || k.kicks.Load() == 0 {
					t.Errorf("%d frames queued, %d kicks: the board did not queue its sends", k.queues.Load(), k.kicks.Load())
				}
			}
		})
	}
}

// While a busy-polling waiter watches a board, a noted deadline leaves
// the fine timer unarmed; the receive loop's return to Recv arms it for
// the deadline then pending. A board whose waiters block arms it at once.
func TestFineTimerUnarmedWhileWatched(t *testing.T) {
	for _, busy := range []bool{true, false} {
		t.Run(map[bool]string{true: "busy-poll", false: "block"}[busy], func(t *testing.T) {
			o := fastOptions()
			o.BusyPoll = busy
			pr := newPair(t, transportFactory{name: "loopback", new: newLoopbackWire}, o, loopback.Faults{})
			b := pr.ba
			if b.fine == nil {
				t.Skip("no timerfd on this system: the board keeps its ticks alone")
			}
			b.mu.Lock()
			defer b.unlock()
			b.runTimersLocked() // nothing pending now: due is 0
			if d := b.due.Load(); d != 0 {
				t.Skipf("a deadline %d is pending on an idle board", d)
			}
			s := b.src
			s.pollIn.Add(1) // a waiter polls
			arms := b.cnt[FineArms]
			b.armed = 0
			due := b.clock() + int64(time.Second)
			b.noteDue(due)
			s.pollLeft.Add(1)
			if busy {
				if b.cnt[FineArms] != arms || !b.fineLapsed.Load() {
					t.Fatalf("noted while watched: %d arms, lapsed %v; want none, lapsed", b.cnt[FineArms]-arms, b.fineLapsed.Load())
				}
				s.idle.Store(idleNever) // the waiter gave up: the loop comes back
				b.armLapsed()
			}
			if b.cnt[FineArms] != arms+1 || b.armed != due || b.fineLapsed.Load() {
				t.Errorf("%d arms for %d (lapsed %v); want 1 for %d", b.cnt[FineArms]-arms, b.armed, b.fineLapsed.Load(), due)
			}
		})
	}
}

// A deadline noted while the fine timer's goroutine is up (it fired and
// has not set the timerfd again) costs its noter no timerfd_settime: the
// goroutine sets the timerfd for it as it goes back to sleep (rearmFine).
func TestFineArmLeftToFiredTimer(t *testing.T) {
	o := fastOptions()
	pr := newPair(t, transportFactory{name: "loopback", new: newLoopbackWire}, o, loopback.Faults{})
	b := pr.ba
	if b.fine == nil {
		t.Skip("no timerfd on this system: the board keeps its ticks alone")
	}
	b.mu.Lock()
	b.runTimersLocked() // nothing pending now: due is 0
	if d := b.due.Load(); d != 0 {
		b.unlock()
		t.Skipf("a deadline %d is pending on an idle board", d)
	}
	due := b.clock() + int64(time.Hour)
	arms := b.cnt[FineArms]
	b.armed = 0         // it fired
	b.fineTicks = false // the progress goroutine keeps the ticks
	b.fineAwake = true
	b.noteDue(due)
	if b.cnt[FineArms] != arms || b.armed != 0 {
		b.unlock()
		t.Fatalf("noted while the timer's goroutine was up: %d arms, armed for %d; want none", b.cnt[FineArms]-arms, b.armed)
	}
	// Back to sleep, the goroutine sets the timerfd for it.
	b.rearmFine()
	n, armed := b.cnt[FineArms]-arms, b.armed
	b.unlock()
	if n != 1 || armed != due {
		t.Errorf("back to sleep: %d arms, armed for %d; want 1, for the deadline noted meanwhile %d", n, armed, due)
	}
}
