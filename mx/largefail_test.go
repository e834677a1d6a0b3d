package mx

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// noPullReplies drops the PULL_REPLY frames its board sends while on is
// set: a region owner whose answers never arrive.
type noPullReplies struct {
	transport.Transport
	on atomic.Bool
}

func (t *noPullReplies) Send(frames []transport.Frame) (int, error) {
	if !t.on.Load() {
		return t.Transport.Send(frames)
	}
	keep := make([]transport.Frame, 0, len(frames))
	for _, f := range frames {
		if len(f.Data) > wire.HeadLen && wire.Type(f.Data[wire.HeadLen]) == wire.TypePullReply {
			continue
		}
		keep = append(keep, f)
	}
	if _, err := t.Transport.Send(keep); err != nil {
		return 0, err
	}
	return len(frames), nil
}

// largeFailPair is a pair on the loopback wire whose board a never
// delivers a pull reply. The boards' ResendMax (what bounds a pull, and
// the sender's notify timeout) are sender's and receiver's; the endpoints'
// request timeouts are long, so that no partner is declared unreachable on
// a loaded machine while the test waits for the outcome it checks.
func largeFailPair(t *testing.T, sender, receiver int) *pair {
	checkLeaks(t)
	w := newLoopbackWire(t, loopback.Faults{})
	a := &noPullReplies{Transport: w.a}
	a.on.Store(true)
	w.a = a
	o := DefaultBoardOptions()
	o.ResendDelay = 10 * time.Millisecond
	o.PullTimeout = 5 * time.Millisecond
	oa, ob := o, o
	oa.ResendMax, ob.ResendMax = sender, receiver
	pr := newPairOn(t, w, oa, ob)
	for _, e := range []*Endpoint{pr.a, pr.b} {
		if err := e.SetRequestTimeout(nil, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return pr
}

// startLarge posts a large receive on b and sends it from a.
func startLarge(t *testing.T, pr *pair) (r, s *Request) {
	t.Helper()
	size := pr.ba.RendezvousThreshold() * 4
	r, err := pr.b.IRecv([][]byte{make([]byte, size)}, 3, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err = pr.a.ISend([][]byte{pattern(size, 3)}, pr.atob, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, s
}

// TestLargeSendFailsWithReceiversPull: a receiver whose pull times out
// completes its receive with ErrUnreachable and still notifies the
// sender, whose send completes with ErrPullFailed instead of waiting for
// ever; the connection stays up.
func TestLargeSendFailsWithReceiversPull(t *testing.T) {
	pr := largeFailPair(t, 1000, 3) // b's pull fails after 30 ms
	ctx := testCtx(t, 20*time.Second)
	r, s := startLarge(t, pr)
	if _, err := r.Wait(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("receive: %v, want ErrUnreachable", err)
	}
	if _, err := s.Wait(ctx); !errors.Is(err, ErrPullFailed) {
		t.Fatalf("send: %v, want ErrPullFailed", err)
	}
	if c := pr.b.Counters(); c[PullsAbandoned] != 1 {
		t.Errorf("receiver: %d pulls abandoned, want 1", c[PullsAbandoned])
	}
	if c := pr.a.Counters(); c[SendsPullFailed] != 1 || c[Unreachable] != 0 {
		t.Errorf("sender: %d sends failed by the pull (want 1), %d unreachable (want 0)", c[SendsPullFailed], c[Unreachable])
	}
	roundTrip(t, ctx, pr)
}

// TestLargeSendNotifyTimeout: a receiver that started pulling and then
// went away (its board closed) without a NOTIFY fails the send with
// ErrUnreachable after the notify timeout, although the sender has
// nothing else unacked to that peer that would find it unreachable.
func TestLargeSendNotifyTimeout(t *testing.T) {
	pr := largeFailPair(t, 3, 1000) // a's notify timeout is 80 ms; b's pull would go on for ten seconds
	ctx := testCtx(t, 20*time.Second)
	r, s := startLarge(t, pr)
	// Wait until a served a PULL and b acked the RNDV, then take b away.
	for i := 0; ; i++ {
		c := pr.a.Counters()
		if c[RecvPull] > 0 && pr.unackedTo(pr.a) == 0 {
			break
		}
		if i > 20000 {
			t.Fatalf("no pull arrived: %v", nonZero(c))
		}
		time.Sleep(time.Millisecond)
	}
	pr.bb.Close()
	if _, err := r.Wait(ctx); err == nil {
		t.Fatal("the receive completed on a closed board")
	}
	if _, err := s.Wait(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send: %v, want ErrUnreachable", err)
	}
	if c := pr.a.Counters(); c[NotifyTimeouts] != 1 {
		t.Errorf("sender: %d notify timeouts, want 1", c[NotifyTimeouts])
	}
}

// unackedTo is how many sequenced requests e has unacked to the pair's
// other endpoint.
func (pr *pair) unackedTo(e *Endpoint) int {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	n := 0
	for _, p := range e.plist {
		n += p.unacked.Len()
	}
	return n
}
