package mx

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// recvInOrder posts a receive for each of n messages matching match and
// checks that message i carries pattern(sizes[i%len(sizes)], i).
func recvInOrder(t *testing.T, e *Endpoint, n int, match uint64, sizes []int) {
	t.Helper()
	for i := range n {
		size := sizes[i%len(sizes)]
		buf := make([]byte, size)
		r, err := e.IRecv([][]byte{buf}, match, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := mustWait(t, r, 30*time.Second)
		if st.Code != nil || int(st.XferLength) != size || string(buf) != string(pattern(size, uint64(i))) {
			t.Fatalf("message %d (%d B): status %v, %d bytes, bytes intact %v", i, size, st.Code, st.XferLength,
				string(buf) == string(pattern(size, uint64(i))))
		}
	}
}

// TestLeanSendNeedsNoAck: an eager send of one frame (tiny, small, a
// medium of one fragment) to a peer on the rings completes in ISend
// itself, with no ack: here the receiving board cannot
// run at all (its lock is held) and only one send may complete before its
// ack on the sequenced path (ZombieSends 1), yet every send of a window's
// worth completes at once. The sends past the window take the sequenced
// path (the receiver's memory stays bounded); once the receiver runs,
// every message arrives intact and in order, and nothing was resent.
func TestLeanSendNeedsNoAck(t *testing.T) {
	o := DefaultBoardOptions()
	o.ZombieSends = 1
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	sizes := []int{0, 8, 32, 33, 128, 129, 4096} // tiny, small, medium of one fragment
	const n = leanWindow + 20
	var sends []*Request
	pr.bb.mu.Lock()
	for i := range n {
		size := sizes[i%len(sizes)]
		s, err := pr.a.ISend([][]byte{pattern(size, uint64(i))}, pr.atob, 1, nil)
		if err != nil {
			pr.bb.mu.Unlock()
			t.Fatal(err)
		}
		sends = append(sends, s)
	}
	c := pr.a.Counters()
	done := 0
	for _, s := range sends[:leanWindow] {
		if s.done.Load() {
			done++
		}
	}
	pr.bb.mu.Unlock()
	if done != leanWindow || c.Get(LeanSends) != leanWindow || c.Get(RecvTruc) != 0 {
		t.Fatalf("receiver stopped: %d of the first %d sends complete, %d lean sends, %d acks received; want all, %d, none",
			done, leanWindow, c.Get(LeanSends), c.Get(RecvTruc), leanWindow)
	}
	recvInOrder(t, pr.b, n, 1, sizes)
	for i, s := range sends {
		if st := mustWait(t, s, 30*time.Second); st.Code != nil {
			t.Fatalf("send %d: %v", i, st.Code)
		}
	}
	if c := pr.a.Counters(); c.Get(Resends) != 0 || c.Get(TailProbes) != 0 {
		t.Fatalf("%d resends, %d tail probes: the rings lose nothing", c.Get(Resends), c.Get(TailProbes))
	}
}

// TestLeanHeldWhenUnexpectedFull: lean messages, which nobody resends,
// that find the receiver's unexpected queue full are held, not dropped,
// and arrive intact and in order once receives are posted.
func TestLeanHeldWhenUnexpectedFull(t *testing.T) {
	o := DefaultBoardOptions()
	o.UnexpectedMaxMessages = 2
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	sizes := []int{8, 100, 4000}
	const n = 20
	for i := range n {
		s, err := pr.a.ISend([][]byte{pattern(sizes[i%len(sizes)], uint64(i))}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, done := s.Test(); !done {
			t.Fatalf("lean send %d did not complete at once", i)
		}
	}
	waitUntil(t, "a held message", func() bool { return pr.b.Counters().Get(LeanHeld) > 0 })
	recvInOrder(t, pr.b, n, 1, sizes)
	if c := pr.b.Counters(); c.Get(DropUnexpectedFull) != 0 {
		t.Fatalf("%d lean messages dropped", c.Get(DropUnexpectedFull))
	}
	if got := pr.a.Counters().Get(LeanSends); got != n {
		t.Fatalf("%d lean sends, want %d", got, n)
	}
}

// TestLeanHeldWhileProgressionOff: the unexpected handler sees lean
// messages that came while progression was disabled once it is enabled
// again, all of them, in order.
func TestLeanHeldWhileProgressionOff(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	var mu sync.Mutex
	var seen []string
	pr.b.SetUnexpectedHandler(func(m UnexpectedMessage) HandlerResult {
		mu.Lock()
		seen = append(seen, string(m.Data))
		mu.Unlock()
		return Finished
	})
	pr.b.DisableProgression()
	const n = 10
	for i := range n {
		if _, err := pr.a.ISend([][]byte{[]byte(fmt.Sprint("m", i))}, pr.atob, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "a held message", func() bool { return pr.b.Counters().Get(LeanHeld) > 0 })
	mu.Lock()
	early := len(seen)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("the handler saw %d messages while progression was disabled", early)
	}
	if err := pr.b.ReenableProgression(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for i, s := range seen {
		if s != fmt.Sprint("m", i) {
			t.Fatalf("handler saw %q as message %d", s, i)
		}
	}
}

// TestLeanKeepsOrderWithSequenced: lean messages and messages that keep
// the sequenced path's resend state (mediums of several fragments, large)
// from the same peer match in the order they were sent.
func TestLeanKeepsOrderWithSequenced(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	sizes := []int{8, 3000, 64, 100000, 128, 20000, 0}
	const n = 50
	for i := range n {
		size := sizes[i%len(sizes)]
		s, err := pr.a.ISend([][]byte{pattern(size, uint64(i))}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Forget()
	}
	recvInOrder(t, pr.b, n, 1, sizes)
	if pr.a.Counters().Get(LeanSends) == 0 {
		t.Fatal("no lean sends")
	}
}

// TestLeanPeerGone: when a peer goes, the lean messages a receiver held
// for it go with it (nothing leaks, nothing waits for a sender that
// cannot come back), a message it had already queued stays receivable,
// and a send to the lost peer fails at once with ErrUnreachable.
func TestLeanPeerGone(t *testing.T) {
	o := DefaultBoardOptions()
	o.UnexpectedMaxMessages = 1
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	const n = 5
	for i := range n {
		s, err := pr.a.ISend([][]byte{pattern(8, uint64(i))}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, done := s.Test(); !done {
			t.Fatalf("lean send %d did not complete at once", i)
		}
	}
	waitUntil(t, "a held message", func() bool { return pr.b.Counters().Get(LeanHeld) > 0 })
	pr.ba.Close()
	waitUntil(t, "the peer's loss", func() bool { return pr.b.Counters().Get(Unreachable) > 0 })
	pr.bb.mu.Lock()
	for _, p := range pr.b.plist {
		if p.held != nil || len(p.early) > 0 {
			pr.bb.mu.Unlock()
			t.Fatalf("partner %v still holds frames of a lost peer: held %v, %d early", p.addr(), p.held != nil, len(p.early))
		}
	}
	pr.bb.mu.Unlock()
	recvInOrder(t, pr.b, 1, 1, []int{8})
	s, err := pr.b.ISend([][]byte{[]byte("x")}, pr.btoa, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(testCtx(t, 30*time.Second)); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to a lost peer: %v, want ErrUnreachable", err)
	}
}
