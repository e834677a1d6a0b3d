package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// freeze stops a board as a descheduled process is stopped: neither its
// progress goroutine nor anything else handles a frame or runs a timer
// until thaw. It returns with the board's receive source and lock held.
func freeze(b *Board) {
	b.src.mu.Lock()
	b.mu.Lock()
}

func thaw(b *Board) {
	b.mu.Unlock()
	b.src.mu.Unlock()
}

// frozenBoards are the boards a test froze and has not thawed yet; a
// deferred thawAll thaws them when the test ends early.
type frozenBoards map[*Board]bool

func (f frozenBoards) freeze(b *Board) { freeze(b); f[b] = true }

func (f frozenBoards) thaw(b *Board) { delete(f, b); thaw(b) }

func (f frozenBoards) thawAll() {
	for b := range f {
		f.thaw(b)
	}
}

// TestStalledBoardsKeepLivePeers: two boards of one process stall together
// (the process descheduled on a loaded node) for three times the budget of
// a send that was on the wire when the stall began. The sender runs first
// after the stall, drains its transport (nothing: the receiver has not run
// yet) and judges the send: it must not declare the receiver unreachable,
// because the receiver was silent only while neither board could run. The
// send then completes on the receiver's ack. Before the stall discount
// (liveness.go) the send failed with ErrUnreachable every time.
func TestStalledBoardsKeepLivePeers(t *testing.T) {
	pr := newPair(t, transportFactories[0], patientResends(), loopback.Faults{})
	if err := pr.a.SetRequestTimeout(nil, time.Second); err != nil { // a round trip before the stall
		t.Fatal(err)
	}
	roundTrip(t, testCtx(t, 20*time.Second), pr)
	const budget = 100 * time.Millisecond
	freeze(pr.bb)
	s, err := pr.a.ISend([][]byte{[]byte("still here")}, pr.atob, 1, nil)
	if err != nil {
		thaw(pr.bb)
		t.Fatal(err)
	}
	freeze(pr.ba)
	// The send's own budget, set with both boards stopped, so that no
	// timer of a running board can judge it before the stall. Until a
	// stopped, b's silence was real: a ran (its timers with it) while the
	// test went from the send to the freeze, which takes a descheduled
	// test goroutine as long as the scheduler likes. So the budget left
	// when the stall begins is budget, whatever a's last timer run before
	// it had already counted.
	ran := time.Duration(max(0, pr.ba.live.lastRun-s.firstSend))
	s.resendMax = int((ran + budget) / pr.ba.opts.ResendDelay)
	waitGone(t, time.Now(), 3*budget)
	pr.ba.rxOwned = pr.ba.src // the timers may drain it: the test holds it
	pr.ba.runTimersLocked()
	pr.ba.rxOwned = nil
	done := s.done.Load() // judged in the timer run above
	thaw(pr.ba)
	thaw(pr.bb)
	st, err := s.Wait(testCtx(t, 20*time.Second))
	if done || err != nil {
		t.Fatalf("send to a peer that stalled with its sender: done at once %v, %v (status %+v)", done, err, st)
	}
	if c := pr.ba.Counters(); c[BoardStalls] == 0 {
		t.Errorf("the stall was not counted: %v", nonZero(c))
	}
	if c := pr.a.Counters(); c[Unreachable] != 0 {
		t.Errorf("a declared b unreachable %d times", c[Unreachable])
	}
}
