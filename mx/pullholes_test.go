package mx

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// dropReplies wraps a pull responder's transport and drops PULL_REPLY
// frames by frame index: the first drops[i] copies of frame i of every
// pull (told apart by their puller handle).
type dropReplies struct {
	transport.Transport
	drops map[uint8]int
	mu    sync.Mutex
	sent  map[[5]byte]int // handle bytes and frame index: copies seen
}

// dropRepliesPair makes a pair on the in-process wire whose responder
// (pr.a) drops the replies drops names, with the pull timer far above a
// message's time (RTOMin 200 ms, PullTimeout 1 s), busy-polling or not.
func dropRepliesPair(t testing.TB, busy bool, drops map[uint8]int) (*pair, *dropReplies, BoardOptions) {
	w := newLoopbackWire(t, loopback.Faults{})
	d := &dropReplies{Transport: w.a, sent: map[[5]byte]int{}, drops: drops}
	w.a = d
	opts := fastOptions()
	opts.BusyPoll = busy
	opts.RTOMin = 200 * time.Millisecond
	opts.PullTimeout = time.Second
	return newPairOn(t, w, opts), d, opts
}

func (d *dropReplies) Send(frames []transport.Frame) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sendKept(d.Transport, frames, func(f transport.Frame) bool {
		p := f.Data[wire.HeadLen:]
		if len(p) < wire.PullReplyLen || p[0] != byte(wire.TypePullReply) {
			return true
		}
		k := [5]byte{p[8], p[9], p[10], p[11], p[1]}
		d.sent[k]++
		return d.sent[k] > d.drops[p[1]]
	})
}

// TestPullHolesAtOnce loses chosen PULL_REPLY frames of every 1 MiB
// message (the first of the pull, two adjacent ones, the last of a block
// with the first of the next, one whose re-request is lost too, and one
// whose re-request's reply is what reveals that loss): the puller asks for
// each hole as soon as a frame asked for after it arrives, and for the
// doubly lost one again once a reply asked for after its re-request came.
// No pull timer fires (RTOMin is far above the message's time), and
// every byte arrives.
func TestPullHolesAtOnce(t *testing.T) {
	n := 40
	if testing.Short() || raceEnabled {
		n = 10
	}
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			pr, _, _ := dropRepliesPair(t, busy, map[uint8]int{0: 1, 5: 1, 6: 1, 10: 2, 31: 1, 32: 1, 60: 1})
			msg := pattern(1<<20, 3)
			buf := make([]byte, len(msg))
			cb0 := pr.b.Counters()
			for i := 0; i < n; i++ {
				clear(buf)
				r, _ := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				s, _ := pr.a.ISend([][]byte{msg}, pr.atob, uint64(i), nil)
				mustWait(t, r, 30*time.Second)
				mustWait(t, s, 30*time.Second)
				if !bytes.Equal(buf, msg) {
					t.Fatalf("message %d differs", i)
				}
			}
			cb := pr.b.Counters()
			delta := func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
			t.Logf("%d messages: fast %d, timer %d, pull timeouts %d, PULLs again %d, frames again %d, duplicate replies %d",
				n, delta(FastRetransmits), delta(TimerRetransmits), delta(PullTimeouts), delta(PullRerequests),
				delta(PullFramesRerequested), delta(DupPullReplies))
			// Per message: {0}, {5,6}, {10} twice, {31} (block 0) and
			// {32} (block 1) in a PULL each, {60}.
			// A hole may come back on the answer to a question (ask.go)
			// when the pull was silent before the reply that reveals it
			// arrived (a loaded machine): it counts as one either way.
			if got, want := delta(FastRetransmits)+delta(AskRetransmits), uint64(7*n); got != want {
				t.Errorf("%d re-requests on evidence or on an answer, want %d (7 per message)", got, want)
			}
			if got, want := delta(PullFramesRerequested), uint64(8*n); got != want {
				t.Errorf("%d frames asked for again, want %d (8 per message)", got, want)
			}
			if got := delta(PullTimeouts) + delta(TimerRetransmits); got != 0 {
				t.Errorf("%d pull timeouts and timer retransmits: every hole had a later frame to reveal it", got)
			}
			if got := delta(DupPullReplies); got != 0 {
				t.Errorf("%d duplicate pull replies: only missing frames are asked for again", got)
			}
		})
	}
}

// lateReplies holds a responder's PULL_REPLY frames (copies: the
// transport's buffers are reused) until the puller asks for the pull's
// first frame a second time, the pull timer's re-request: then the held
// replies go out, in order, before that PULL reaches the responder, as
// they would from a responder that was only descheduled.
//
// With all set, every frame after the first held reply is held too, in
// order (a responder that was descheduled sends nothing): its answers to
// the puller's questions come after the replies.
type lateReplies struct {
	transport.Transport // the responder's
	mu                  sync.Mutex
	hold, all           bool
	held                []transport.Frame
}

func (l *lateReplies) Send(frames []transport.Frame) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sendKept(l.Transport, frames, func(f transport.Frame) bool {
		p := f.Data[wire.HeadLen:]
		reply := len(p) >= wire.PullReplyLen && p[0] == byte(wire.TypePullReply)
		if !l.hold || !reply && !(l.all && len(l.held) > 0) {
			return true
		}
		l.held = append(l.held, transport.Frame{Peer: f.Peer, Data: append([]byte(nil), f.Data...)})
		return false
	})
}

// holding reports whether the responder holds its replies.
func (l *lateReplies) holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold
}

// release sends the held replies.
func (l *lateReplies) release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold = false
	for len(l.held) > 0 {
		n, err := l.Transport.Send(l.held)
		if err != nil {
			return err
		}
		l.held = l.held[n:]
	}
	return nil
}

// watchPulls is the puller's transport: the second PULL for frame 0 (or,
// with asks set, the second question about pulls), among those sent
// while the responder holds its replies, releases them before it goes
// out.
type watchPulls struct {
	transport.Transport
	late  *lateReplies
	asks  bool
	first int
}

func (w *watchPulls) Send(frames []transport.Frame) (int, error) {
	for _, f := range frames {
		p := f.Data[wire.HeadLen:]
		again := len(p) >= wire.PullLen && p[0] == byte(wire.TypePull) && p[40]|p[41]|p[42]|p[43] == 0
		if w.asks {
			q := uint8(wire.TrucAsk | wire.TrucPulls)
			again = len(p) >= wire.TrucLen && p[0] == byte(wire.TypeTruc) && p[13]&q == q
		}
		if again && w.late.holding() {
			// Only what is asked while the replies are held counts:
			// a loaded run may ask twice during an exchange before
			// the hold, which would otherwise use up the release.
			if w.first++; w.first == 2 {
				if err := w.late.release(); err != nil {
					return 0, err
				}
			}
		}
	}
	return w.Transport.Send(frames)
}

// TestPullLateRepliesNoCascade makes a responder late rather than lossy:
// its replies to a 1 MiB pull come only once the puller's pull timer has
// asked for the first block again, and then all of them, in order, before
// the re-request's. A reply to a frame the timer asked for again may
// answer the first PULL: taken as the re-request's answer, the first
// block's late replies would have "revealed" every later block lost. Only
// the timer's one re-request of the first block may go out, no fast one,
// and every byte arrives.
// The puller's questions to the owner (ask.go) would replace the timer,
// so the puller does not ask here (as toward an Open-MX peer);
// TestPullLateRepliesAsked is the same late responder with questions.
func TestPullLateRepliesNoCascade(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	late := &lateReplies{Transport: w.a, hold: true}
	w.a = late
	w.b = &watchPulls{Transport: w.b, late: late}
	opts := fastOptions()
	opts.PullTimeout = 2 * time.Millisecond // no pull round trip measured yet
	pr := newPairOn(t, w, opts)
	noAsks(pr.b)
	msg := pattern(1<<20, 5)
	buf := make([]byte, len(msg))
	cb0 := pr.b.Counters()
	r, _ := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	s, _ := pr.a.ISend([][]byte{msg}, pr.atob, 1, nil)
	mustWait(t, r, 30*time.Second)
	mustWait(t, s, 30*time.Second)
	if !bytes.Equal(buf, msg) {
		t.Fatal("the message differs")
	}
	cb := pr.b.Counters()
	delta := func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
	t.Logf("fast %d, pull timeouts %d, frames again %d, duplicate replies %d",
		delta(FastRetransmits), delta(PullTimeouts), delta(PullFramesRerequested), delta(DupPullReplies))
	if late.hold {
		t.Fatal("the pull timer never asked for the first block again: nothing was tested")
	}
	if got := delta(FastRetransmits); got != 0 {
		t.Errorf("%d fast re-requests: late replies revealed no loss", got)
	}
	if got, most := delta(PullFramesRerequested), uint64(opts.PullBlockFrames)*delta(PullTimeouts); got > most {
		t.Errorf("%d frames asked for again by %d pull timeouts: more than the first block each", got, delta(PullTimeouts))
	}
}

// exchangeCounted sends msg from a to b n times (tags 1 to n), each
// checked whole as exchangeWhole does, and returns what b's counters
// moved by over them.
func exchangeCounted(t *testing.T, pr *pair, msg, buf []byte, n int) func(Counter) uint64 {
	t.Helper()
	cb0 := pr.b.Counters()
	for i := 1; i <= n; i++ {
		exchangeWhole(t, pr, msg, buf, uint64(i))
	}
	cb := pr.b.Counters()
	return func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
}

// exchangeWhole sends msg from pr.a to pr.b with tag, into buf, and fails
// the test unless it arrives whole within 30 s.
func exchangeWhole(t *testing.T, pr *pair, msg, buf []byte, tag uint64) {
	t.Helper()
	clear(buf)
	exchange(t, testCtx(t, 30*time.Second), pr.a, pr.atob, pr.b, tag, ^uint64(0), [][]byte{msg}, [][]byte{buf})
	if !bytes.Equal(buf, msg) {
		t.Fatalf("message %d differs", tag)
	}
}

// noAsks makes e's partners peers that do not answer questions (no
// ExtAsk), as Open-MX peers are.
func noAsks(e *Endpoint) {
	e.b.mu.Lock()
	for _, p := range e.plist {
		p.ask = false
	}
	e.b.unlock()
}

// TestPullLateRepliesAsked makes a responder descheduled rather than lossy:
// it sends nothing (its replies to a 1 MiB pull, and then every frame
// after them, in order) until the puller has asked it twice about its
// pull. Questions resend nothing, and the answers come after the replies,
// so nothing is asked for again, whether the pull round trip was measured
// or not: no frame re-requested, no duplicate, no timer, and every byte
// arrives.
func TestPullLateRepliesAsked(t *testing.T) {
	for _, measured := range []bool{false, true} {
		t.Run(fmt.Sprintf("measured=%v", measured), func(t *testing.T) {
			w := newLoopbackWire(t, loopback.Faults{})
			late := &lateReplies{Transport: w.a, all: true}
			w.a = late
			w.b = &watchPulls{Transport: w.b, late: late, asks: true}
			opts := fastOptions()
			opts.PullTimeout = 2 * time.Millisecond // before a pull round trip is measured
			pr := newPairOn(t, w, opts)
			msg := pattern(1<<20, 5)
			buf := make([]byte, len(msg))
			send := func(tag uint64) { exchangeWhole(t, pr, msg, buf, tag) }
			if measured {
				send(1)
			}
			late.mu.Lock()
			late.hold = true
			late.mu.Unlock()
			cb0 := pr.b.Counters()
			send(2)
			cb := pr.b.Counters()
			delta := func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
			t.Logf("pull asks %d, frames again %d, duplicate replies %d, pull timeouts %d",
				delta(PullAsks), delta(PullFramesRerequested), delta(DupPullReplies), delta(PullTimeouts))
			if late.hold {
				t.Fatal("the puller never asked twice: nothing was tested")
			}
			for _, k := range []Counter{PullFramesRerequested, DupPullReplies, PullTimeouts, FastRetransmits, TimerRetransmits} {
				if got := delta(k); got != 0 {
					t.Errorf("%v: %d, want 0: a late responder lost nothing", k, got)
				}
			}
		})
	}
}

// TestPullAskRevealsLostReplies loses the first copy of every PULL_REPLY
// of a 1 MiB message, in both wait modes: no reply arrives to reveal a
// hole, and the pull timer is slow (RTOMin 200 ms, PullTimeout 1 s). The
// puller asks the owner once its pull is silent past the pull round trip,
// the answer shows what was lost, and only that answer re-requests: resent
// on an answer, no pull timeout, no duplicate, and every byte arrives.
func TestPullAskRevealsLostReplies(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			pr, d, _ := dropRepliesPair(t, busy, map[uint8]int{})
			msg := pattern(1<<20, 9)
			buf := make([]byte, len(msg))
			send := func(tag uint64) { exchangeWhole(t, pr, msg, buf, tag) }
			send(1) // the pull round trip is measured
			d.mu.Lock()
			for i := range 256 {
				d.drops[uint8(i)] = 1
			}
			d.mu.Unlock()
			cb0 := pr.b.Counters()
			send(2)
			cb := pr.b.Counters()
			delta := func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
			t.Logf("pull asks %d, resent on an answer %d, frames again %d, pull timeouts %d, duplicates %d",
				delta(PullAsks), delta(AskRetransmits), delta(PullFramesRerequested), delta(PullTimeouts), delta(DupPullReplies))
			if delta(PullAsks) == 0 || delta(AskRetransmits) == 0 {
				t.Errorf("%d pull asks, %d re-requests on an answer: want the answer to reveal the lost replies",
					delta(PullAsks), delta(AskRetransmits))
			}
			for _, k := range []Counter{PullTimeouts, TimerRetransmits, DupPullReplies} {
				if got := delta(k); got != 0 {
					t.Errorf("%v: %d, want 0", k, got)
				}
			}
		})
	}
}

// TestPullAskTailLoss loses the first copies of the last two replies of
// every 1 MiB pull, in both wait modes, as a receive queue that
// overflowed at the end of a burst would: no later reply reveals them,
// and the pull timer is slow (RTOMin 200 ms, PullTimeout 1 s). The pull
// still expects two replies when it falls silent, so its question waits
// for a late owner first (askDue), and then the answer re-requests both:
// no pull timeout, no duplicate, and every byte arrives.
func TestPullAskTailLoss(t *testing.T) {
	n := 20
	if testing.Short() || raceEnabled {
		n = 5
	}
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			pr, d, _ := dropRepliesPair(t, busy, map[uint8]int{})
			msg := pattern(1<<20, 11)
			buf := make([]byte, len(msg))
			exchangeWhole(t, pr, msg, buf, 0) // the pull round trip is measured
			pr.ba.mu.Lock()
			last := wire.PullFrames{Total: len(msg), L: pr.atob.p.replyLen}.Count() - 1 // nothing placed: no header room
			pr.ba.mu.Unlock()
			d.mu.Lock()
			d.drops[uint8(last-1)], d.drops[uint8(last)] = 1, 1
			d.mu.Unlock()
			delta := exchangeCounted(t, pr, msg, buf, n)
			t.Logf("%d messages: pull asks %d, resent on an answer %d, frames again %d, pull timeouts %d, duplicates %d",
				n, delta(PullAsks), delta(AskRetransmits), delta(PullFramesRerequested), delta(PullTimeouts), delta(DupPullReplies))
			if delta(PullAsks) == 0 || delta(AskRetransmits) == 0 {
				t.Errorf("%d pull asks, %d re-requests on an answer: want the answers to reveal the lost tails",
					delta(PullAsks), delta(AskRetransmits))
			}
			if got, want := delta(PullFramesRerequested), uint64(2*n); got != want {
				t.Errorf("%d frames asked for again, want %d (the two lost of each message)", got, want)
			}
			for _, k := range []Counter{PullTimeouts, TimerRetransmits, DupPullReplies} {
				if got := delta(k); got != 0 {
					t.Errorf("%v: %d, want 0", k, got)
				}
			}
		})
	}
}

// BenchmarkPullTailLoss times a 1 MiB message (one pull) that loses
// the first copies of its last 2 or 8 replies, in both wait modes: only
// the pull's question reveals them, after its wait for a late owner
// (askDue), so this is what that wait costs.
func BenchmarkPullTailLoss(b *testing.B) {
	for _, k := range []int{2, 8} {
		for _, busy := range []bool{false, true} {
			b.Run(fmt.Sprintf("last=%d/busypoll=%v", k, busy), func(b *testing.B) {
				pr, d, _ := dropRepliesPair(b, busy, map[uint8]int{})
				msg := pattern(1<<20, 11)
				buf := make([]byte, len(msg))
				ctx := testCtx(b, time.Hour)
				for i := range 20 { // the round trips are measured
					exchange(b, ctx, pr.a, pr.atob, pr.b, uint64(i), ^uint64(0), [][]byte{msg}, [][]byte{buf})
				}
				pr.ba.mu.Lock()
				last := wire.PullFrames{Total: len(msg), L: pr.atob.p.replyLen}.Count() - 1
				pr.ba.mu.Unlock()
				d.mu.Lock()
				for j := range k {
					d.drops[uint8(last-j)] = 1
				}
				d.mu.Unlock()
				cb0 := pr.b.Counters()
				b.SetBytes(1 << 20)
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					exchange(b, ctx, pr.a, pr.atob, pr.b, uint64(100+i), ^uint64(0), [][]byte{msg}, [][]byte{buf})
				}
				b.StopTimer()
				cb := pr.b.Counters()
				b.ReportMetric(float64(cb.Get(PullAsks)-cb0.Get(PullAsks))/float64(b.N), "asks/op")
				b.ReportMetric(float64(cb.Get(PullTimeouts)-cb0.Get(PullTimeouts))/float64(b.N), "timeouts/op")
			})
		}
	}
}
