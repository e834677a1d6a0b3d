package mx

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// staleAnswer is a responder that answers its puller's first question
// about pulls and then goes quiet (descheduled): it sends the replies it
// held back, then holds its answer and every frame after it, in order,
// until release.
type staleAnswer struct {
	transport.Transport // the responder's
	mu                  sync.Mutex
	quiet, hold         bool // hold: replies held; quiet: everything held
	held                []transport.Frame
}

// pullTruc returns the probe flags of a TRUC about pulls in f (ok false
// for any other frame).
func pullTruc(f transport.Frame) (probe uint8, ok bool) {
	p := f.Data[wire.HeadLen:]
	if len(p) < wire.TrucLen || p[0] != byte(wire.TypeTruc) || p[13]&wire.TrucPulls == 0 {
		return 0, false
	}
	return p[13], true
}

func (s *staleAnswer) Send(frames []transport.Frame) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sendKept(s.Transport, frames, func(f transport.Frame) bool {
		p := f.Data[wire.HeadLen:]
		reply := len(p) >= wire.PullReplyLen && p[0] == byte(wire.TypePullReply)
		probe, pulls := pullTruc(f)
		if s.hold && !s.quiet && pulls && probe&wire.TrucAnswer != 0 {
			// The first answer: the replies before it go out, it
			// and everything after it wait.
			if _, err := s.Transport.Send(s.held); err != nil {
				panic(err)
			}
			clear(s.held)
			s.held, s.quiet = s.held[:0], true
		}
		if !s.quiet && !(s.hold && reply) {
			return true
		}
		s.held = append(s.held, transport.Frame{Peer: f.Peer, Data: append([]byte(nil), f.Data...)})
		return false
	})
}

// isQuiet reports whether the responder holds every frame.
func (s *staleAnswer) isQuiet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiet
}

// release sends what the responder held, in order, and stops holding.
func (s *staleAnswer) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.quiet = false, false
	for len(s.held) > 0 {
		n, err := s.Transport.Send(s.held)
		if err != nil {
			panic(err)
		}
		s.held = s.held[n:]
	}
}

// heldAsks is the puller's transport: once armed, when it has sent after
// questions about pulls while the responder held its frames (askWindow
// + 1: as many as there are tags and one, the last with the first's tag),
// the responder sends them, in order, before that question goes out.
type heldAsks struct {
	transport.Transport
	resp  *staleAnswer
	after int
	mu    sync.Mutex
	armed bool
	n     int
	done  bool
}

func (w *heldAsks) Send(frames []transport.Frame) (int, error) {
	for _, f := range frames {
		probe, pulls := pullTruc(f)
		if !pulls || probe&wire.TrucAsk == 0 {
			continue
		}
		w.mu.Lock()
		if w.armed && w.resp.isQuiet() {
			w.n++
		}
		release := w.armed && !w.done && w.n >= w.after
		w.done = w.done || release
		w.mu.Unlock()
		if release {
			w.resp.release()
		}
	}
	return w.Transport.Send(frames)
}

// noPullRecovery logs the puller's question and re-request counters
// since cb0 and fails the test if any recovery acted: the wire lost
// nothing.
func noPullRecovery(t *testing.T, cb0, cb Counters) {
	t.Helper()
	delta := func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
	t.Logf("pull asks %d, frames again %d, duplicate replies %d, resent on an answer %d",
		delta(PullAsks), delta(PullFramesRerequested), delta(DupPullReplies), delta(AskRetransmits))
	for _, k := range []Counter{PullFramesRerequested, DupPullReplies, AskRetransmits, PullTimeouts, TimerRetransmits} {
		if got := delta(k); got != 0 {
			t.Errorf("%v: %d, want 0: the wire lost nothing", k, got)
		}
	}
}

// TestPullAnswerAfterTagsWrap makes the answer to a pull's first question
// come after the puller asked so many more that the tags wrapped: the
// responder answers the first question, after the replies it owed, and
// is then descheduled while the puller's next PULLs wait for it and the
// puller asks again and again. The old answer then comes first, ahead of
// the later PULLs' replies: it answers a question asked before those
// PULLs went out, and shows none of their frames lost. Taken for the
// newest question, whose tag it has, it re-requested every frame of them
// and each arrived twice. Nothing is asked for again, nothing arrives
// twice, and every byte arrives.
func TestPullAnswerAfterTagsWrap(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	resp := &staleAnswer{Transport: w.a}
	w.a = resp
	watch := &heldAsks{Transport: w.b, resp: resp, after: askWindow + 1}
	w.b = watch
	opts := fastOptions()
	opts.PullTimeout = 2 * time.Millisecond
	opts.PullBlocks, opts.PullBlockFrames = 2, 4 // PULLs after the first question
	pr := newPairOn(t, w, opts)
	msg := pattern(1<<20, 7)
	buf := make([]byte, len(msg))
	exchangeWhole(t, pr, msg, buf, 1) // the pull round trip is measured
	watch.mu.Lock()
	watch.armed = true
	watch.mu.Unlock()
	resp.mu.Lock()
	resp.hold = true
	resp.mu.Unlock()
	cb0 := pr.b.Counters()
	exchangeWhole(t, pr, msg, buf, 2)
	cb := pr.b.Counters()
	watch.mu.Lock()
	done, n := watch.done, watch.n
	watch.mu.Unlock()
	if !done {
		t.Fatalf("the puller asked %d times, too few for its tags to wrap while the responder held its answer: nothing was tested", n)
	}
	noPullRecovery(t, cb0, cb)
	if !bytes.Equal(buf, msg) {
		t.Fatal("the message differs")
	}
}
