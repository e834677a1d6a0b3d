package mx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// tapMsgs wraps a transport and keeps a copy of every TINY and SMALL frame
// its board sends; while hold is set it keeps them from the wire too.
type tapMsgs struct {
	transport.Transport
	mu     sync.Mutex
	frames [][]byte
	hold   bool
}

func (t *tapMsgs) Send(frames []transport.Frame) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return sendKept(t.Transport, frames, func(f transport.Frame) bool {
		if len(f.Data) > wire.HeadLen {
			if typ := wire.Type(f.Data[wire.HeadLen]); typ == wire.TypeTiny || typ == wire.TypeSmall {
				t.frames = append(t.frames, bytes.Clone(f.Data))
				return !t.hold
			}
		}
		return true
	})
}

// take returns the frames kept since the last take.
func (t *tapMsgs) take() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.frames
	t.frames = nil
	return f
}

func (t *tapMsgs) setHold(on bool) {
	t.mu.Lock()
	t.hold = on
	t.mu.Unlock()
}

// newTapPair is a pair over the in-process wire whose board a sends
// through a tap.
func newTapPair(t *testing.T) (*pair, *tapMsgs) {
	w := newLoopbackWire(t, loopback.Faults{})
	tap := &tapMsgs{Transport: w.a}
	w.a = tap
	return newPairOn(t, w, DefaultBoardOptions()), tap
}

func setShortOff(b *Board, off bool) {
	b.mu.Lock()
	b.shortOff = off
	b.mu.Unlock()
}

// TestShortPathFramesMatch sends the same messages on the short path and
// on the general path and compares their frames byte for byte (the
// trailer included): they differ only in the sequence number, which is
// the next one. Each message is received on the short path in one round
// and on the general path in the other, with the same status and data.
func TestShortPathFramesMatch(t *testing.T) {
	pr, tap := newTapPair(t)
	ctx := testCtx(t, time.Minute)
	long := make([]byte, 128)
	for i := range long {
		long[i] = byte(i*7 + 3)
	}
	cases := []struct {
		segs  [][]byte
		match uint64
	}{
		{nil, 0},
		{[][]byte{long[:1]}, 1},
		{[][]byte{long[:8]}, 0xFEDCBA9876543210},
		{[][]byte{long[:32]}, 1 << 63},
		{[][]byte{long[:33]}, 42},
		{[][]byte{long[:64]}, 0xFFFFFFFF},
		{[][]byte{long}, 0xFFFFFFFF00000000},
		{[][]byte{long[:5], nil, long[5:40]}, 7},  // small, gathered
		{[][]byte{long[:3], long[3:20]}, 1 << 32}, // tiny, gathered
	}
	for i, c := range cases {
		n, _ := segLen(c.segs)
		var frames [2][]byte
		var sts [2]Status
		var got [2][]byte
		for k, off := range []bool{false, true} {
			setShortOff(pr.ba, off)
			setShortOff(pr.bb, off)
			a0, b0 := pr.a.Counters(), pr.b.Counters()
			buf := make([]byte, 200)
			r, err := pr.b.IRecv([][]byte{buf}, c.match, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := pr.a.ISend(c.segs, pr.atob, c.match, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if sts[k], err = r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			got[k] = buf[:sts[k].XferLength]
			fs := tap.take()
			if len(fs) != 1 {
				t.Fatalf("case %d: %d message frames sent, want 1", i, len(fs))
			}
			frames[k] = fs[0]
			a1, b1 := pr.a.Counters(), pr.b.Counters()
			want := uint64(1)
			if off {
				want = 0
			}
			if d := a1[ShortSends] - a0[ShortSends]; d != want {
				t.Errorf("case %d, short path off %v: %d short sends, want %d", i, off, d, want)
			}
			if d := b1[ShortRecvs] - b0[ShortRecvs]; d != want {
				t.Errorf("case %d, short path off %v: %d short receives, want %d", i, off, d, want)
			}
		}
		// The general path's frame is the short path's with the next
		// sequence number.
		short, general := frames[0], frames[1]
		if len(short) != len(general) {
			t.Fatalf("case %d: frames of %d and %d bytes", i, len(short), len(general))
		}
		ord := pr.ba.ord
		m, payload, err := wire.DecodeMsg(short[wire.HeadLen:], ord)
		if err != nil {
			t.Fatal(err)
		}
		typ := wire.TypeTiny
		if n > wire.TinyMax {
			typ = wire.TypeSmall
		}
		if m.Type != typ || int(m.Length) != n || m.Match != c.match || m.DstEP != pr.b.ID() || m.SrcEP != pr.a.ID() ||
			m.Session != pr.b.Addr().Session || !bytes.Equal(payload, gather(nil, c.segs)) {
			t.Errorf("case %d: short path frame %+v, payload %x", i, m, payload)
		}
		want := bytes.Clone(short)
		pos := wire.HeadLen + 8
		body := want[:wire.HeadLen+wire.MsgLen+n]
		ordPut16(body[pos:], seqNext(m.Seq), ord)
		if pr.ba.crc {
			want = wire.Seal(body)
		}
		if !bytes.Equal(general, want) {
			t.Errorf("case %d: frames differ\nshort   %x\ngeneral %x\nwant    %x", i, short, general, want)
		}
		if sts[0] != sts[1] || !bytes.Equal(got[0], got[1]) || !bytes.Equal(got[0], gather(nil, c.segs)) {
			t.Errorf("case %d: received %+v %x on the short path, %+v %x on the general", i, sts[0], got[0], sts[1], got[1])
		}
	}
}

func ordPut16(p []byte, v uint16, o wire.Order) {
	if o == wire.LittleEndian {
		p[0], p[1] = byte(v), byte(v>>8)
		return
	}
	p[0], p[1] = byte(v>>8), byte(v)
}

// TestShortPathFallbacks checks that every message the short receive path
// must leave alone is delivered as before by the general path, and that a
// plain ping-pong takes the short path both ways.
func TestShortPathFallbacks(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	msg := []byte("12345678")
	recvOne := func(t *testing.T, r *Request, want []byte, code error) Status {
		t.Helper()
		st, err := r.Wait(ctx)
		if !errors.Is(err, code) || !errors.Is(st.Code, code) {
			t.Fatalf("receive: %v (status %v), want %v", err, st.Code, code)
		}
		return st
	}
	// checkShort runs fn, which delivers one message to pr.b, and
	// checks whether it took the short receive path.
	checkShort := func(t *testing.T, pr *pair, short bool, fn func()) {
		t.Helper()
		c0 := pr.b.Counters()
		fn()
		c1 := pr.b.Counters()
		if got := c1[ShortRecvs] - c0[ShortRecvs]; (got != 0) != short {
			t.Errorf("%d short receives, want short %v", got, short)
		}
	}
	send := func(t *testing.T, pr *pair, match uint64, b []byte) {
		t.Helper()
		s, err := pr.a.ISend([][]byte{b}, pr.atob, match, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("ping-pong", func(t *testing.T) {
		pr, _ := newTapPair(t)
		a0, b0 := pr.a.Counters(), pr.b.Counters()
		const rounds = 50
		for range rounds {
			pingOnce(t, ctx, pr.a, pr.atob, pr.b, 0, 0, [][]byte{msg}, [][]byte{make([]byte, 8)})
			pingOnce(t, ctx, pr.b, pr.btoa, pr.a, 0, 0, [][]byte{msg}, [][]byte{make([]byte, 8)})
		}
		a1, b1 := pr.a.Counters(), pr.b.Counters()
		for _, c := range []struct {
			name string
			d    uint64
		}{
			{"a short sends", a1[ShortSends] - a0[ShortSends]},
			{"a short receives", a1[ShortRecvs] - a0[ShortRecvs]},
			{"b short sends", b1[ShortSends] - b0[ShortSends]},
			{"b short receives", b1[ShortRecvs] - b0[ShortRecvs]},
		} {
			if c.d < rounds {
				t.Errorf("%s: %d in %d round trips", c.name, c.d, rounds)
			}
		}
	})
	t.Run("no posted receive, probe", func(t *testing.T) {
		pr, _ := newTapPair(t)
		checkShort(t, pr, false, func() {
			send(t, pr, 5, msg)
			st, err := pr.b.Probe(ctx, 5, ^uint64(0)) // in the unexpected queue
			if err != nil || st.MsgLength != uint32(len(msg)) {
				t.Fatalf("probe: %+v, %v", st, err)
			}
			buf := make([]byte, 8)
			r, err := pr.b.IRecv([][]byte{buf}, 5, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			recvOne(t, r, msg, nil)
			if !bytes.Equal(buf, msg) {
				t.Errorf("received %q", buf)
			}
		})
	})
	t.Run("first posted does not match", func(t *testing.T) {
		pr, _ := newTapPair(t)
		other, err := pr.b.IRecv([][]byte{make([]byte, 8)}, 9, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		checkShort(t, pr, false, func() {
			buf := make([]byte, 8)
			r, err := pr.b.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			send(t, pr, 7, msg)
			recvOne(t, r, msg, nil)
			if !bytes.Equal(buf, msg) {
				t.Errorf("received %q", buf)
			}
		})
		if _, ok := other.Test(); ok {
			t.Error("the receive that did not match completed")
		}
	})
	t.Run("truncated", func(t *testing.T) {
		pr, _ := newTapPair(t)
		checkShort(t, pr, false, func() {
			buf := make([]byte, 3)
			r, err := pr.b.IRecv([][]byte{buf}, 8, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			send(t, pr, 8, msg)
			st := recvOne(t, r, msg, ErrTruncated)
			if st.MsgLength != 8 || st.XferLength != 3 || !bytes.Equal(buf, msg[:3]) {
				t.Errorf("truncated receive: %+v, %q", st, buf)
			}
		})
	})
	t.Run("segments", func(t *testing.T) {
		pr, _ := newTapPair(t)
		checkShort(t, pr, false, func() {
			x, y := make([]byte, 3), make([]byte, 5)
			r, err := pr.b.IRecv([][]byte{x, y}, 9, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			send(t, pr, 9, msg)
			recvOne(t, r, msg, nil)
			if got := append(x, y...); !bytes.Equal(got, msg) {
				t.Errorf("received %q", got)
			}
		})
	})
	t.Run("handler", func(t *testing.T) {
		pr, _ := newTapPair(t)
		var seen []uint64
		pr.b.SetUnexpectedHandler(func(m UnexpectedMessage) HandlerResult {
			seen = append(seen, m.Match)
			return Finished
		})
		checkShort(t, pr, false, func() {
			buf := make([]byte, 8)
			r, err := pr.b.IRecv([][]byte{buf}, 10, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			send(t, pr, 10, msg) // matches the posted receive: the handler never sees it
			recvOne(t, r, msg, nil)
		})
		if len(seen) != 0 {
			t.Errorf("the handler saw %v", seen)
		}
	})
	t.Run("out of order and duplicate", func(t *testing.T) {
		// Two frames held from the wire and handed to the receiver
		// second first, then the first twice: the second waits among
		// the early frames, the first completes both receives in
		// order, and its copy is a duplicate.
		pr, tap := newTapPair(t)
		var rs [2]*Request
		var bufs [2][]byte
		for i := range rs {
			bufs[i] = make([]byte, 8)
			var err error
			if rs[i], err = pr.b.IRecv([][]byte{bufs[i]}, 11, ^uint64(0), nil); err != nil {
				t.Fatal(err)
			}
		}
		tap.setHold(true)
		send(t, pr, 11, []byte("first..."))
		send(t, pr, 11, []byte("second.."))
		fs := tap.take()
		tap.setHold(false)
		if len(fs) != 2 {
			t.Fatalf("%d frames held, want 2", len(fs))
		}
		c0 := pr.b.Counters()
		from := pr.ba.nic
		for _, f := range [][]byte{fs[1], fs[0], fs[0]} {
			pr.bb.mu.Lock()
			pr.bb.handleFrame(from, f)
			pr.bb.unlock()
		}
		for i, want := range []string{"first...", "second.."} {
			recvOne(t, rs[i], nil, nil)
			if string(bufs[i]) != want {
				t.Errorf("receive %d: %q, want %q", i, bufs[i], want)
			}
		}
		c1 := pr.b.Counters()
		if d := c1[ShortRecvs] - c0[ShortRecvs]; d != 0 {
			t.Errorf("%d short receives of frames out of order", d)
		}
		if d := c1[EarlyStored] - c0[EarlyStored]; d != 1 {
			t.Errorf("%d early frames stored, want 1", d)
		}
		if d := c1[DupReceived] - c0[DupReceived]; d < 1 {
			t.Errorf("%d duplicates received, want at least 1", d)
		}
	})
}

// BenchmarkShortPath is the in-process ping-pong of 8-byte messages with
// the short path on and off (BenchmarkMessageCost's loop on one
// goroutine), for a quick comparison of the two.
func BenchmarkShortPath(b *testing.B) {
	for _, off := range []bool{false, true} {
		b.Run(fmt.Sprintf("off=%v", off), func(b *testing.B) {
			o := DefaultBoardOptions()
			o.BusyPoll = true
			pr := newPair(b, transportFactory{name: "loopback", new: newLoopbackWire}, o, loopback.Faults{})
			setShortOff(pr.ba, off)
			setShortOff(pr.bb, off)
			ctx := context.Background()
			msg, buf := make([]byte, 8), make([]byte, 8)
			one := func(src *Endpoint, to Addr, dst *Endpoint) {
				r, _ := dst.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
				r.Test()
				s, _ := src.ISend([][]byte{msg}, to, 1, nil)
				s.Wait(ctx)
				if _, err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				one(pr.a, pr.atob, pr.b)
				one(pr.b, pr.btoa, pr.a)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/msg")
		})
	}
}
