package mx

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

var loopbackOnly = transportFactories[0]

// settle waits until the receiver has n unexpected messages queued.
func settle(t *testing.T, e *Endpoint, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.b.mu.Lock()
		k := e.unexp.Len()
		e.b.mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d unexpected messages arrived", k, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func sendAll(t *testing.T, pr *pair, matches []uint64, size int) {
	t.Helper()
	for _, m := range matches {
		r, err := pr.a.ISend([][]byte{pattern(size, m)}, pr.atob, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Forget()
	}
}

func TestMatching(t *testing.T) {
	type recv struct{ match, mask uint64 }
	cases := []struct {
		name  string
		sent  []uint64 // sent first, all land in the unexpected queue
		recvs []recv
		want  []uint64 // match info each receive gets, in order
	}{
		{"exact", []uint64{1, 2, 3}, []recv{{2, ^uint64(0)}, {3, ^uint64(0)}, {1, ^uint64(0)}}, []uint64{2, 3, 1}},
		{"wildcard takes oldest", []uint64{5, 6, 7}, []recv{{0, 0}, {0, 0}, {0, 0}}, []uint64{5, 6, 7}},
		{"mask low byte", []uint64{0x1_01, 0x2_02, 0x3_01}, []recv{{0x01, 0xFF}, {0x01, 0xFF}, {0x02, 0xFF}}, []uint64{0x1_01, 0x3_01, 0x2_02}},
		{"high bits context", []uint64{1 << 63, 1, 1<<63 | 1}, []recv{{1 << 63, 1 << 63}, {0, 1 << 63}, {1 << 63, 1 << 63}}, []uint64{1 << 63, 1, 1<<63 | 1}},
		{"same match keeps order", []uint64{9, 9, 9}, []recv{{9, ^uint64(0)}, {9, ^uint64(0)}, {9, ^uint64(0)}}, []uint64{9, 9, 9}},
	}
	for _, size := range []int{8, 100, 5000, 50000} {
		for _, c := range cases {
			t.Run(c.name+"/"+itoa(size), func(t *testing.T) {
				pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
				sendAll(t, pr, c.sent, size)
				settle(t, pr.b, len(c.sent))
				for i, rv := range c.recvs {
					buf := make([]byte, size)
					r, err := pr.b.IRecv([][]byte{buf}, rv.match, rv.mask, nil)
					if err != nil {
						t.Fatal(err)
					}
					st := mustWait(t, r, 10*time.Second)
					if st.Match != c.want[i] {
						t.Fatalf("receive %d got match %#x, want %#x", i, st.Match, c.want[i])
					}
					if !bytes.Equal(buf, pattern(size, st.Match)) {
						t.Fatalf("receive %d: payload differs", i)
					}
				}
			})
		}
	}
	// Posted receives match in posting order.
	t.Run("posted order", func(t *testing.T) {
		pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
		var rs []*Request
		for i := 0; i < 4; i++ {
			r, _ := pr.b.IRecv(nil, 0x10, 0xF0, i)
			rs = append(rs, r)
		}
		sendAll(t, pr, []uint64{0x11, 0x12, 0x13, 0x14}, 0)
		for i, r := range rs {
			st := mustWait(t, r, 10*time.Second)
			if st.Match != uint64(0x11+i) || st.Context != i {
				t.Fatalf("posted %d got %+v", i, st)
			}
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestBadArguments(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	if _, err := pr.b.IRecv(nil, 0x3, 0x1, nil); !errors.Is(err, ErrBadMatchMask) {
		t.Errorf("match outside mask: %v", err)
	}
	segs := make([][]byte, MaxSegments+1)
	if _, err := pr.b.IRecv(segs, 0, 0, nil); !errors.Is(err, ErrBadSegCount) {
		t.Errorf("257 segments: %v", err)
	}
	if _, err := pr.a.ISend(segs, pr.atob, 0, nil); !errors.Is(err, ErrBadSegCount) {
		t.Errorf("257 segments: %v", err)
	}
	if _, err := pr.a.ISend(nil, Addr{NIC: 12345, Endpoint: 3}, 0, nil); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("unconnected address: %v", err)
	}
	if _, err := pr.ba.OpenEndpoint(1, 0); !errors.Is(err, ErrBusy) {
		t.Errorf("reopen: %v", err)
	}
}

func TestTruncationAndSegments(t *testing.T) {
	for _, size := range []int{32, 128, 3000, 100000} {
		t.Run(itoa(size), func(t *testing.T) {
			pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
			msg := pattern(size, 1)
			// 256 segments of uneven lengths, half the message.
			var segs [][]byte
			var total int
			per := max(1, size/2/(MaxSegments-1))
			for i := 0; i < MaxSegments && total < size/2; i++ {
				n := min(per+i%3-1, size/2-total)
				segs = append(segs, make([]byte, max(n, 0)))
				total += max(n, 0)
			}
			r, err := pr.b.IRecv(segs, 0, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Send from many segments too.
			var ssegs [][]byte
			for off := 0; off < size; off += 97 {
				ssegs = append(ssegs, msg[off:min(off+97, size)])
			}
			if len(ssegs) > MaxSegments {
				ssegs = [][]byte{msg}
			}
			s, err := pr.a.ISend(ssegs, pr.atob, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := r.Wait(testCtx(t, 10*time.Second))
			if !errors.Is(err, ErrTruncated) || !errors.Is(st.Code, ErrTruncated) {
				t.Fatalf("want ErrTruncated, got %v", err)
			}
			want := min(total, size)
			if st.MsgLength != uint32(size) || st.XferLength != uint32(want) {
				t.Fatalf("status %+v, want xfer %d", st, want)
			}
			got := gather(nil, segs)
			if !bytes.Equal(got[:want], msg[:want]) {
				t.Fatal("truncated payload differs")
			}
			mustWait(t, s, 10*time.Second)
		})
	}
}

func TestProbeAndMatchedProbe(t *testing.T) {
	for _, size := range []int{8, 1000, 20000, 60000} {
		t.Run(itoa(size), func(t *testing.T) {
			pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
			if _, ok := pr.b.IProbe(0, 0); ok {
				t.Fatal("probe found a message in an empty queue")
			}
			sendAll(t, pr, []uint64{1, 2, 3}, size)
			st, err := pr.b.Probe(testCtx(t, 10*time.Second), 2, ^uint64(0))
			if err != nil || st.Match != 2 || st.MsgLength != uint32(size) || st.Source.NIC != pr.ba.NICID() {
				t.Fatalf("probe: %+v %v", st, err)
			}
			// Probe does not consume; a matched probe does.
			m, err := pr.b.MProbe(testCtx(t, 10*time.Second), 2, ^uint64(0))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := pr.b.IProbe(2, ^uint64(0)); ok {
				t.Fatal("matched probe left the message in the queue")
			}
			// A wildcard receive posted now must not steal message 2.
			wbuf := make([]byte, size)
			w, _ := pr.b.IRecv([][]byte{wbuf}, 0, 0, nil)
			if st := mustWait(t, w, 10*time.Second); st.Match != 1 {
				t.Fatalf("wildcard got %d", st.Match)
			}
			buf := make([]byte, size)
			st, err = m.Recv(testCtx(t, 10*time.Second), [][]byte{buf})
			if err != nil || st.Match != 2 || !bytes.Equal(buf, pattern(size, 2)) {
				t.Fatalf("message recv: %+v %v", st, err)
			}
			if _, err := m.IRecv(nil, nil); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("second receive of a message: %v", err)
			}
			// Message 3 may still be on its way (a medium is several
			// frames): wait for it, then the non-blocking form must find it.
			if _, err := pr.b.Probe(testCtx(t, 10*time.Second), 3, ^uint64(0)); err != nil {
				t.Fatal(err)
			}
			if m2, ok := pr.b.IMProbe(3, ^uint64(0)); !ok || m2.Status().Match != 3 {
				t.Fatal("improbe")
			}
		})
	}
}

func TestCancelTestAnyPeekWakeup(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	r, _ := pr.b.IRecv(nil, 5, ^uint64(0), "c")
	if ok, err := pr.b.Cancel(r); !ok || err != nil {
		t.Fatalf("cancel posted receive: %v %v", ok, err)
	}
	if st, err := r.Wait(testCtx(t, time.Second)); !errors.Is(err, ErrCancelled) || st.Context != "c" {
		t.Fatalf("cancelled receive: %+v %v", st, err)
	}
	// A cancelled receive must not take a message.
	sendAll(t, pr, []uint64{5}, 4)
	settle(t, pr.b, 1)
	s, _ := pr.a.ISend(nil, pr.atob, 9, nil)
	if _, err := pr.a.Cancel(s); !errors.Is(err, ErrCancelNotSupported) {
		t.Fatalf("cancel send: %v", err)
	}
	s.Forget()

	// TestAny / WaitAny with a filter.
	r1, _ := pr.b.IRecv(nil, 0x100, 0xF00, 1)
	r2, _ := pr.b.IRecv(nil, 0x200, 0xF00, 2)
	_, _ = r1, r2
	sendAll(t, pr, []uint64{0x201, 0x101}, 0)
	st, err := pr.b.WaitAny(testCtx(t, 10*time.Second), 0x200, 0xF00)
	if err != nil || st.Context != 2 {
		t.Fatalf("waitany: %+v %v", st, err)
	}
	got, err := pr.b.Peek(testCtx(t, 10*time.Second))
	if err != nil || got != r1 {
		t.Fatalf("peek: %v %v", got, err)
	}
	if st, ok := pr.b.TestAny(0, 0); !ok || st.Context != 1 {
		t.Fatalf("testany: %+v", st)
	}
	if _, ok := pr.b.TestAny(0, 0); ok {
		t.Fatal("testany found a consumed request")
	}
	// Wakeup interrupts a blocked wait.
	r3, _ := pr.b.IRecv(nil, 77, ^uint64(0), nil)
	go func() {
		time.Sleep(20 * time.Millisecond)
		pr.b.Wakeup()
	}()
	if _, err := r3.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrWokenUp) {
		t.Fatalf("wakeup: %v", err)
	}
	if _, err := r3.Wait(testCtx(t, 10*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if ok, _ := pr.b.Cancel(r3); !ok {
		t.Fatal("cancel after timeout")
	}
	r3.Forget()
}

func TestUnexpectedHandler(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	var seen []uint64
	buf := make([]byte, 64)
	var posted *Request
	pr.b.SetUnexpectedHandler(func(m UnexpectedMessage) HandlerResult {
		seen = append(seen, m.Match)
		switch m.Match {
		case 1: // consumed by the handler
			if m.Length == 16 && !bytes.Equal(m.Data, pattern(16, 1)) {
				t.Errorf("handler data differs: %x (%d)", m.Data, m.Length)
			}
			return Finished
		case 2: // the handler posts a receive for it
			posted, _ = pr.b.IRecv([][]byte{buf}, 2, ^uint64(0), nil)
			return Continue
		}
		return Continue // queued as unexpected
	})
	sendAll(t, pr, []uint64{1, 2, 3}, 16)
	settle(t, pr.b, 1)
	if posted == nil {
		t.Fatal("handler did not run for message 2")
	}
	if st := mustWait(t, posted, 10*time.Second); st.Match != 2 || !bytes.Equal(buf[:16], pattern(16, 2)) {
		t.Fatalf("handler-posted receive: %+v", st)
	}
	if _, ok := pr.b.IProbe(1, ^uint64(0)); ok {
		t.Fatal("finished message was queued")
	}
	if _, ok := pr.b.IProbe(3, ^uint64(0)); !ok {
		t.Fatal("continued message was not queued")
	}
	if len(seen) != 3 {
		t.Fatalf("handler saw %v", seen)
	}
	// A large message finished by the handler completes its sender.
	s, _ := pr.a.ISSend([][]byte{pattern(100000, 4)}, pr.atob, 1, nil)
	if st := mustWait(t, s, 10*time.Second); st.XferLength != 0 {
		t.Fatalf("dropped rendezvous: %+v", st)
	}
}

func TestUnexpectedQueueBound(t *testing.T) {
	opts := fastOptions()
	opts.UnexpectedMaxMessages = 8
	opts.UnexpectedMaxBytes = 4096
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	const n = 64
	for i := 0; i < n; i++ {
		r, err := pr.a.ISend([][]byte{pattern(200, uint64(i))}, pr.atob, uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Forget()
	}
	settle(t, pr.b, 8)
	time.Sleep(20 * time.Millisecond)
	pr.b.b.mu.Lock()
	q, bytesQ := pr.b.unexp.Len(), pr.b.unexpBytes
	pr.b.b.mu.Unlock()
	if q > 8 || bytesQ > 4096 {
		t.Fatalf("unexpected queue grew to %d messages, %d bytes", q, bytesQ)
	}
	if pr.b.Counters().Get(DropUnexpectedFull) == 0 {
		t.Fatal("no drop counted")
	}
	// Receiving drains the queue and the resends deliver the rest, in order.
	buf := make([]byte, 200)
	for i := 0; i < n; i++ {
		r, _ := pr.b.IRecv([][]byte{buf}, 0, 0, nil)
		st := mustWait(t, r, 10*time.Second)
		if st.Match != uint64(i) || !bytes.Equal(buf, pattern(200, uint64(i))) {
			t.Fatalf("message %d: got %d", i, st.Match)
		}
	}
}

func TestSelfAndSameBoard(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	c, err := pr.ba.OpenEndpoint(AnyEndpoint, 5)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 10*time.Second)
	toSelf, err := pr.a.Connect(ctx, pr.ba.NICID(), pr.a.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	toC, err := pr.a.Connect(ctx, pr.ba.NICID(), c.ID(), 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 20, 100, 5000, 200000} {
		for _, dst := range []struct {
			e    *Endpoint
			addr Addr
		}{{pr.a, toSelf}, {c, toC}} {
			buf := make([]byte, size)
			r, _ := dst.e.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
			s, _ := pr.a.ISend([][]byte{pattern(size, 3)}, dst.addr, 1, nil)
			mustWait(t, r, 10*time.Second)
			mustWait(t, s, 10*time.Second)
			if !bytes.Equal(buf, pattern(size, 3)) {
				t.Fatalf("size %d: payload differs", size)
			}
		}
	}
}
