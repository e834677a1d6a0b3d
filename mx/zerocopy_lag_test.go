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

// lagTransport sends in place the way a NIC that reads its descriptors
// late does: Send queues a region's frames (their Data still the caller's
// memory), and they are read and put on the wire only once they have
// waited lag, at a later Send, Recv or Region.Pending; until then the
// region counts them pending. It wraps a loopback port, and checks on
// every late read that the memory read is not guarded (a buffer whose
// send completed).
type lagTransport struct {
	*loopback.Port
	lag time.Duration

	mu    sync.Mutex
	queue []lagFrame

	guard   func(data []byte) bool // reports memory the NIC must not read any more
	badRead atomic.Int64
	late    atomic.Int64 // frames read after a wait
}

type lagFrame struct {
	f  transport.Frame
	at time.Time
}

func (l *lagTransport) Register(mem []byte) (*transport.Region, error) {
	r := transport.NewRegion(l, mem, true, nil)
	r.SetTakesHead()
	r.SetPoll(func() { l.pump(false) })
	return r, nil
}

func (l *lagTransport) Send(frames []transport.Frame) (int, error) {
	var now []transport.Frame
	l.mu.Lock()
	for _, f := range frames {
		if f.Region == nil {
			now = append(now, f)
			continue
		}
		if err := f.Region.Check(l, &f); err != nil {
			l.mu.Unlock()
			return 0, err
		}
		f.Region.Begin()
		f.Head = append([]byte(nil), f.Head...) // the caller reuses its header buffer
		l.queue = append(l.queue, lagFrame{f: f, at: time.Now()})
	}
	l.mu.Unlock()
	if len(now) > 0 {
		if _, err := l.Port.Send(now); err != nil {
			return 0, err
		}
	}
	l.pump(false)
	return len(frames), nil
}

func (l *lagTransport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	l.pump(false)
	return l.Port.Recv(frames, min(timeout, time.Millisecond))
}

// pump reads and sends the frames that waited long enough (all of them
// when all is set).
func (l *lagTransport) pump(all bool) {
	l.mu.Lock()
	var due []lagFrame
	kept := l.queue[:0]
	for _, q := range l.queue {
		if all || time.Since(q.at) >= l.lag {
			due = append(due, q)
		} else {
			kept = append(kept, q)
		}
	}
	l.queue = kept
	l.mu.Unlock()
	for _, q := range due {
		if l.guard != nil && l.guard(q.f.Data) {
			l.badRead.Add(1)
		}
		l.late.Add(1)
		data := append(append([]byte(nil), q.f.Head...), q.f.Data...)
		_, _ = l.Port.Send([]transport.Frame{{Peer: q.f.Peer, Data: data}})
		q.f.Region.Done()
	}
}

func (l *lagTransport) Close() error {
	l.pump(true)
	return l.Port.Close()
}

// TestZeroCopyCompletionWaitsForTheNIC: over a transport whose in-place
// sends complete late (lagTransport), so that replies asked for again are
// still queued when the receiver's NOTIFY comes, a large send completes
// only once its memory is no longer read: the sender writes a guard into
// its buffer as soon as its send completes, and the transport never reads
// a guarded buffer.
func TestZeroCopyCompletionWaitsForTheNIC(t *testing.T) {
	n := loopback.NewNetwork(loopback.Options{QueueLen: 8192})
	pa, err := n.Attach(0x020000000001)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := n.Attach(0x020000000002)
	if err != nil {
		t.Fatal(err)
	}
	var guarded sync.Map // *byte of a completed send's buffer -> length
	lag := &lagTransport{Port: pa, lag: 6 * time.Millisecond}
	lag.guard = func(data []byte) bool {
		hit := false
		guarded.Range(func(k, v any) bool {
			b := k.(*[]byte)
			if within(*b, data) {
				hit = true
			}
			return !hit
		})
		return hit
	}
	w := &wire2{a: lag, b: pb, close: func() { n.Close() }}
	o := zcOptions("on")
	o.PullTimeout = 2 * time.Millisecond // re-request while the first replies still wait
	checkLeaks(t)
	pr := newPairOn(t, w, o)
	ctx := testCtx(t, 60*time.Second)
	for i := range 12 {
		src := pattern(200<<10, uint64(i))
		want := append([]byte(nil), src...)
		dst := make([]byte, len(src))
		exchange(t, ctx, pr.a, pr.atob, pr.b, 4, ^uint64(0), [][]byte{src}, [][]byte{dst})
		guarded.Store(&src, len(src))
		for j := range src {
			src[j] = 0xEE
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("message %d arrived changed", i)
		}
	}
	if n := lag.badRead.Load(); n != 0 {
		t.Errorf("the transport read a buffer %d times after its send completed", n)
	}
	if c := pr.a.CopyStats(); c.SendInPlace == 0 {
		t.Errorf("nothing was sent in place: %+v", c)
	}
	t.Logf("%d frames read late; %d pull frames re-requested", lag.late.Load(), pr.b.Counters().Get(PullFramesRerequested))
}
