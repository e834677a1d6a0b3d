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
			w := newLoopbackWire(t, loopback.Faults{})
			d := &dropReplies{Transport: w.a, sent: map[[5]byte]int{},
				drops: map[uint8]int{0: 1, 5: 1, 6: 1, 10: 2, 31: 1, 32: 1, 60: 1}}
			w.a = d
			opts := fastOptions()
			opts.BusyPoll = busy
			opts.RTOMin = 200 * time.Millisecond
			opts.PullTimeout = time.Second
			pr := newPairOn(t, w, opts)
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
			if got, want := delta(FastRetransmits), uint64(7*n); got != want {
				t.Errorf("%d fast re-requests, want %d (7 per message)", got, want)
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
type lateReplies struct {
	transport.Transport // the responder's
	mu                  sync.Mutex
	hold                bool
	held                []transport.Frame
}

func (l *lateReplies) Send(frames []transport.Frame) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sendKept(l.Transport, frames, func(f transport.Frame) bool {
		p := f.Data[wire.HeadLen:]
		if !l.hold || len(p) < wire.PullReplyLen || p[0] != byte(wire.TypePullReply) {
			return true
		}
		l.held = append(l.held, transport.Frame{Peer: f.Peer, Data: append([]byte(nil), f.Data...)})
		return false
	})
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

// watchPulls is the puller's transport: the second PULL for frame 0
// releases the responder's held replies before it goes out.
type watchPulls struct {
	transport.Transport
	late  *lateReplies
	first int
}

func (w *watchPulls) Send(frames []transport.Frame) (int, error) {
	for _, f := range frames {
		p := f.Data[wire.HeadLen:]
		if len(p) >= wire.PullLen && p[0] == byte(wire.TypePull) && p[40]|p[41]|p[42]|p[43] == 0 {
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
func TestPullLateRepliesNoCascade(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	late := &lateReplies{Transport: w.a, hold: true}
	w.a = late
	w.b = &watchPulls{Transport: w.b, late: late}
	opts := fastOptions()
	opts.PullTimeout = 2 * time.Millisecond // no pull round trip measured yet
	pr := newPairOn(t, w, opts)
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
