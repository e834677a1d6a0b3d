package mx

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// dropOne wraps a board's transport and drops the first copy of every
// frame of one kind it sends (dropKind), noting when; the next copy of
// the same frame it sends is the loss's repair, and the time between the
// two is noted too. Only frames of the kind take its lock.
type dropOne struct {
	transport.Transport
	// what every Send reads; stored while traffic flows (acks are sent
	// from the timer goroutine), so swapped whole
	what     atomic.Pointer[dropWhat]
	mu       sync.Mutex
	on       bool
	dropped  map[dropKey]int64 // first copy dropped, when
	repaired map[dropKey]bool
	repairs  []time.Duration // from each loss to its repair's send
	start    time.Time
}

// dropKind says which frame of a 1 MiB message dropOne drops: a pull
// reply (frame index frame, or the pull's last with last), a PULL (the
// one whose first frame is frame), the RNDV or the NOTIFY.
type dropKind struct {
	typ   wire.Type
	frame int
	last  bool
	total int // the message's length, for last
}

// dropWhat is the kind of frame a dropOne drops and the byte order to
// decode frames in.
type dropWhat struct {
	kind dropKind
	ord  wire.Order
}

// dropKey names one frame and its copies: the type, a handle or sequence
// number, and a frame index.
type dropKey struct {
	typ   wire.Type
	id    uint32
	frame int
}

// key returns the key of frame p (after the peer index) when it is of
// w's kind.
func (w *dropWhat) key(p []byte) (dropKey, bool) {
	t := wire.Type(p[0])
	if t != w.kind.typ {
		return dropKey{}, false
	}
	switch t {
	case wire.TypePullReply:
		h, err := wire.DecodePullReplyHeader(p, w.ord)
		if err != nil {
			return dropKey{}, false
		}
		if w.kind.last && int(h.Offset)+int(h.FrameLength) != w.kind.total || !w.kind.last && int(h.FrameSeq) != w.kind.frame {
			return dropKey{}, false
		}
		return dropKey{t, h.Handle, int(h.FrameSeq)}, true
	case wire.TypePull:
		h, err := wire.DecodePull(p, w.ord, 0, 0)
		if err != nil || int(h.FirstFrame) != w.kind.frame {
			return dropKey{}, false
		}
		return dropKey{t, h.Handle, int(h.FirstFrame)}, true
	case wire.TypeRndv:
		h, err := wire.DecodeRndv(p, w.ord)
		return dropKey{t, uint32(h.Seq), 0}, err == nil
	case wire.TypeNotify:
		h, err := wire.DecodeNotify(p, w.ord, 0)
		return dropKey{t, uint32(h.Seq), 0}, err == nil
	}
	return dropKey{}, false
}

func (d *dropOne) Send(frames []transport.Frame) (int, error) {
	w := d.what.Load()
	if w == nil {
		return d.Transport.Send(frames)
	}
	from := 0
	for i := range frames {
		k, ok := w.key(frames[i].Data[wire.HeadLen:])
		if !ok {
			continue
		}
		d.mu.Lock()
		now := time.Since(d.start).Nanoseconds()
		at, was := d.dropped[k]
		drop := d.on && !was
		if drop {
			d.dropped[k] = now
		} else if was && !d.repaired[k] {
			d.repaired[k] = true
			d.repairs = append(d.repairs, time.Duration(now-at))
		}
		d.mu.Unlock()
		if !drop {
			continue
		}
		if i > from {
			if n, err := d.Transport.Send(frames[from:i]); err != nil {
				return from + n, err
			}
		}
		from = i + 1
	}
	if from < len(frames) {
		if n, err := d.Transport.Send(frames[from:]); err != nil {
			return from + n, err
		}
	}
	return len(frames), nil
}

// BenchmarkLossOneFrame measures what one lost frame of each kind costs a
// 1 MiB ping-pong over the loopback wire (docs/loss-recovery.md): both
// boards lose the first copy of one chosen frame of every message they
// send or pull (a reply in mid-message, the pull's last reply, its first
// or last PULL, the RNDV, the NOTIFY), and the benchmark reports the one-way
// time, the median and 90th percentile time from each loss to its
// repair's send (repair-us, repair-p90-us), and per loss the re-requests
// on evidence, those on a question's answer and the questions asked.
//
//	go test -run '^$' -bench LossOneFrame -benchtime 300x ./mx/
//
// drop=none is the like-for-like lossless run. The loopback wire
// delivers each Send's frames in order, so a loss that a later frame reveals (a
// reply in mid-message, a PULL other than the last, a NOTIFY followed by
// the next RNDV) is repaired at once or on the SACK; one that nothing
// follows waits for a question.
func BenchmarkLossOneFrame(b *testing.B) {
	const size = 1 << 20
	for _, wait := range []string{"spin", "block"} {
		for _, k := range []struct {
			name string
			kind dropKind
		}{
			{"none", dropKind{}},
			{"reply-mid", dropKind{typ: wire.TypePullReply, frame: 60}},
			{"reply-last", dropKind{typ: wire.TypePullReply, last: true, total: size}},
			{"pull-first", dropKind{typ: wire.TypePull, frame: 0}},
			{"pull-last", dropKind{typ: wire.TypePull, frame: -1}},
			{"rndv", dropKind{typ: wire.TypeRndv}},
			{"notify", dropKind{typ: wire.TypeNotify}},
		} {
			b.Run(fmt.Sprintf("wait=%s/drop=%s", wait, k.name), func(b *testing.B) {
				o := lossyOptions()
				o.BusyPoll = wait == "spin"
				lossOneFrame(b, o, k.kind, size)
			})
		}
	}
}

func lossOneFrame(b *testing.B, o BoardOptions, kind dropKind, size int) {
	w := newLoopbackWire(b, loopback.Faults{})
	now := time.Now()
	da := &dropOne{Transport: w.a, dropped: map[dropKey]int64{}, repaired: map[dropKey]bool{}, start: now}
	db := &dropOne{Transport: w.b, dropped: map[dropKey]int64{}, repaired: map[dropKey]bool{}, start: now}
	w.a, w.b = da, db
	pr := newPairOn(b, w, o)
	ctx := testCtx(b, 10*time.Minute)
	sbuf, rbuf, pbuf := pattern(size, 1), make([]byte, size), make([]byte, size)
	round := func() { exchange(b, ctx, pr.a, pr.atob, pr.a, 0, 0, [][]byte{sbuf}, [][]byte{rbuf}) }
	const warm = 10
	done := make(chan error, 1)
	go func() {
		for i := 0; i < warm+b.N; i++ {
			if err := pongOnce(ctx, pr, pbuf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < warm; i++ {
		round()
	}
	if kind.typ == wire.TypePull && kind.frame < 0 {
		// The last PULL asks for the last block.
		pr.ba.mu.Lock()
		L := pr.a.partnerOf(pr.atob).replyLen
		pr.ba.mu.Unlock()
		kind.frame = (size + L - 1) / L
		kind.frame = (kind.frame - 1) / o.PullBlockFrames * o.PullBlockFrames
	}
	for _, d := range []*dropOne{da, db} {
		d.what.Store(&dropWhat{kind, pr.ba.ord})
		d.mu.Lock()
		d.on = kind.typ != 0
		d.mu.Unlock()
	}
	ca0, cb0 := pr.a.Counters(), pr.b.Counters()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		round()
	}
	el := time.Since(start)
	b.StopTimer()
	for _, d := range []*dropOne{da, db} {
		d.mu.Lock()
		d.on = false
		d.mu.Unlock()
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if string(rbuf) != string(sbuf) {
		b.Fatal("the echoed message differs from the one sent")
	}
	ca, cb := pr.a.Counters(), pr.b.Counters()
	delta := func(k Counter) float64 { return float64(ca[k] - ca0[k] + cb[k] - cb0[k]) }
	b.ReportMetric(float64(el.Nanoseconds())/1e3/float64(2*b.N), "us/oneway")
	da.mu.Lock()
	db.mu.Lock()
	rep := append(slices.Clone(da.repairs), db.repairs...)
	losses := len(da.dropped) + len(db.dropped)
	db.mu.Unlock()
	da.mu.Unlock()
	if kind.typ == 0 {
		return
	}
	if losses != 2*b.N {
		b.Fatalf("%d frames lost in %d round trips, want one a message (%d)", losses, b.N, 2*b.N)
	}
	slices.Sort(rep)
	if len(rep) > 0 {
		b.ReportMetric(float64(rep[len(rep)/2].Nanoseconds())/1e3, "repair-us")
		b.ReportMetric(float64(rep[len(rep)*9/10].Nanoseconds())/1e3, "repair-p90-us")
	}
	n := float64(losses)
	b.ReportMetric(n/float64(b.N), "losses/op")
	b.ReportMetric(delta(FastRetransmits)/n, "fast/loss")
	b.ReportMetric(delta(AskRetransmits)/n, "on-answer/loss")
	b.ReportMetric((delta(TailAsks)+delta(PullAsks))/n, "questions/loss")
}
