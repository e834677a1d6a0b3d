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
