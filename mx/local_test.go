package mx

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// localTopo is a sender, a receiver and the sender's address of the
// receiver, all in this process, with the shortcut on.
type localTopo struct {
	name     string
	from, to *Endpoint
	dest     Addr
}

// localTopos builds the three in-process layouts: an endpoint sending to
// itself, two endpoints of one board, and endpoints of two boards.
func localTopos(t *testing.T, opts BoardOptions) []localTopo {
	t.Helper()
	pr := newPair(t, transportFactory{name: "local", new: newLocalWire}, opts, loopback.Faults{})
	c, err := pr.ba.OpenEndpoint(AnyEndpoint, testKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 20*time.Second)
	toSelf, err := pr.a.Connect(ctx, pr.ba.NICID(), pr.a.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	toC, err := pr.a.Connect(ctx, pr.ba.NICID(), c.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	return []localTopo{
		{"self", pr.a, pr.a, toSelf},
		{"board", pr.a, c, toC},
		{"process", pr.a, pr.b, pr.atob},
	}
}

// wireCounters are the counters that move only when frames carry messages.
var wireCounters = []Counter{SendTiny, SendSmall, SendMediumFrag, SendRndv, SendPull, SendPullReply,
	SendNotify, RecvTiny, RecvSmall, RecvMediumFrag, RecvRndv, RecvPull, RecvPullReply, RecvNotify}

// noWireTraffic fails if any message crossed the wire.
func noWireTraffic(t *testing.T, eps ...*Endpoint) {
	t.Helper()
	for _, e := range eps {
		c := e.Counters()
		for _, k := range wireCounters {
			if c.Get(k) != 0 {
				t.Errorf("endpoint %d: %q = %d: a message took the wire", e.ID(), k, c.Get(k))
			}
		}
	}
}

// sameAddr compares the public fields of two addresses.
func sameAddr(a, b Addr) bool {
	return a.NIC == b.NIC && a.Endpoint == b.Endpoint && a.Session == b.Session
}

// split cuts b into k segments of uneven lengths.
func split(b []byte, k int) [][]byte {
	if k <= 1 {
		return [][]byte{b}
	}
	var segs [][]byte
	for i := 0; i < k-1; i++ {
		n := len(b) / (k - i) / 2
		segs = append(segs, b[:n])
		b = b[n:]
	}
	return append(segs, b)
}

func TestLocalSizeClasses(t *testing.T) {
	sizes := []int{0, 1, 32, 33, 128, 129, 4096, 32 << 10, 32<<10 + 1, 300000, 4 << 20}
	for _, tp := range localTopos(t, fastOptions()) {
		ran := 0
		for _, size := range sizes {
			for _, posted := range []bool{true, false} {
				for _, nseg := range []int{1, 3} {
					name := fmt.Sprintf("%s/%dB/posted=%v/segs=%d", tp.name, size, posted, nseg)
					t.Run(name, func(t *testing.T) {
						ran++
						msg := pattern(size, uint64(size+nseg))
						got := make([]byte, size)
						var r *Request
						var err error
						if posted {
							if r, err = tp.to.IRecv(split(got, nseg), 7, ^uint64(0), nil); err != nil {
								t.Fatal(err)
							}
						}
						s, err := tp.from.ISend(split(msg, nseg), tp.dest, 7, nil)
						if err != nil {
							t.Fatal(err)
						}
						if !posted {
							if r, err = tp.to.IRecv(split(got, nseg), 7, ^uint64(0), nil); err != nil {
								t.Fatal(err)
							}
						}
						rs := mustWait(t, r, 10*time.Second)
						ss := mustWait(t, s, 10*time.Second)
						if !bytes.Equal(got, msg) {
							t.Fatal("payload differs")
						}
						if rs.MsgLength != uint32(size) || rs.XferLength != uint32(size) || ss.XferLength != uint32(size) {
							t.Fatalf("lengths: recv %+v send %+v", rs, ss)
						}
						if !sameAddr(rs.Source, tp.from.Addr()) || rs.Match != 7 {
							t.Fatalf("recv status %+v, want source %v", rs, tp.from.Addr())
						}
					})
				}
			}
		}
		noWireTraffic(t, tp.from, tp.to)
		if n := tp.to.Counters().Get(RecvLocal); n != uint64(ran) {
			t.Errorf("%s: %d local receives counted, want %d", tp.name, n, ran)
		}
	}
}

func TestLocalMatchingOrder(t *testing.T) {
	// Messages of every class in one stream, all unexpected, taken by
	// receives with masks: each must get the oldest matching message.
	sizes := []int{8, 100, 5000, 50000, 8, 200000, 0, 33}
	for _, tp := range localTopos(t, fastOptions()) {
		t.Run(tp.name, func(t *testing.T) {
			for i, size := range sizes {
				s, err := tp.from.ISend([][]byte{pattern(size, uint64(i))}, tp.dest, uint64(i%2)<<8|uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				s.Forget()
			}
			// Odd ones first (mask on bit 8), then the rest with a wildcard.
			var order []int
			for _, m := range []struct{ match, mask uint64 }{{1 << 8, 1 << 8}, {1 << 8, 1 << 8}, {1 << 8, 1 << 8}, {1 << 8, 1 << 8},
				{0, 0}, {0, 0}, {0, 0}, {0, 0}} {
				buf := make([]byte, 200000)
				r, err := tp.to.IRecv([][]byte{buf}, m.match, m.mask, nil)
				if err != nil {
					t.Fatal(err)
				}
				st := mustWait(t, r, 10*time.Second)
				i := int(st.Match & 0xFF)
				if !bytes.Equal(buf[:st.XferLength], pattern(sizes[i], uint64(i))) {
					t.Fatalf("message %d differs", i)
				}
				order = append(order, i)
			}
			if want := []int{1, 3, 5, 7, 0, 2, 4, 6}; fmt.Sprint(order) != fmt.Sprint(want) {
				t.Fatalf("matched in order %v, want %v", order, want)
			}
		})
	}
}

func TestLocalTruncation(t *testing.T) {
	for _, tp := range localTopos(t, fastOptions()) {
		for _, size := range []int{100, 5000, 100000} {
			for _, posted := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%d/posted=%v", tp.name, size, posted), func(t *testing.T) {
					msg := pattern(size, 3)
					got := make([]byte, size/2+1)
					var r *Request
					if posted {
						r, _ = tp.to.IRecv([][]byte{got}, 0, 0, nil)
					}
					s, _ := tp.from.ISend([][]byte{msg}, tp.dest, 1, nil)
					if !posted {
						r, _ = tp.to.IRecv([][]byte{got}, 0, 0, nil)
					}
					st, err := r.Wait(testCtx(t, 10*time.Second))
					if !errors.Is(err, ErrTruncated) || st.MsgLength != uint32(size) || st.XferLength != uint32(len(got)) {
						t.Fatalf("truncated receive: %+v %v", st, err)
					}
					if !bytes.Equal(got, msg[:len(got)]) {
						t.Fatal("truncated payload differs")
					}
					ss := mustWait(t, s, 10*time.Second)
					want := uint32(size) // an eager send reports what it sent
					if size > tp.from.Board().RendezvousThreshold() {
						want = uint32(len(got)) // a rendezvous what was taken
					}
					if ss.XferLength != want {
						t.Fatalf("send xfer %d, want %d", ss.XferLength, want)
					}
				})
			}
		}
	}
}

func TestLocalProbeCancelSSend(t *testing.T) {
	for _, tp := range localTopos(t, fastOptions()) {
		t.Run(tp.name, func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			r, _ := tp.to.IRecv(nil, 5, ^uint64(0), nil)
			if ok, err := tp.to.Cancel(r); !ok || err != nil {
				t.Fatalf("cancel: %v %v", ok, err)
			}
			if _, err := r.Wait(ctx); !errors.Is(err, ErrCancelled) {
				t.Fatalf("cancelled receive: %v", err)
			}
			// A synchronous send waits for its receive.
			ss, _ := tp.from.ISSend([][]byte{pattern(10, 1)}, tp.dest, 5, nil)
			if _, done := ss.Test(); done {
				t.Fatal("ISSend completed before any receive was posted")
			}
			st, err := tp.to.Probe(ctx, 5, ^uint64(0))
			if err != nil || st.MsgLength != 10 || !sameAddr(st.Source, tp.from.Addr()) {
				t.Fatalf("probe: %+v %v", st, err)
			}
			big, _ := tp.from.ISend([][]byte{pattern(100000, 2)}, tp.dest, 6, nil)
			m, err := tp.to.MProbe(ctx, 6, ^uint64(0))
			if err != nil || m.Status().MsgLength != 100000 {
				t.Fatalf("mprobe: %v", err)
			}
			buf := make([]byte, 100000)
			if st, err := m.Recv(ctx, [][]byte{buf}); err != nil || !bytes.Equal(buf, pattern(100000, 2)) {
				t.Fatalf("matched receive: %+v %v", st, err)
			}
			mustWait(t, big, 10*time.Second)
			small := make([]byte, 10)
			rr, _ := tp.to.IRecv([][]byte{small}, 5, ^uint64(0), nil)
			mustWait(t, rr, 10*time.Second)
			if st := mustWait(t, ss, 10*time.Second); st.XferLength != 10 || !bytes.Equal(small, pattern(10, 1)) {
				t.Fatalf("synchronous send: %+v", st)
			}
		})
	}
}

func TestLocalHandler(t *testing.T) {
	for _, tp := range localTopos(t, fastOptions()) {
		t.Run(tp.name, func(t *testing.T) {
			var seen []uint64
			tp.to.SetUnexpectedHandler(func(m UnexpectedMessage) HandlerResult {
				seen = append(seen, m.Match)
				if m.Match == 1 {
					if m.Length == 16 && !bytes.Equal(m.Data, pattern(16, 1)) {
						t.Errorf("handler data %x", m.Data)
					}
					return Finished
				}
				return Continue
			})
			defer tp.to.SetUnexpectedHandler(nil)
			for _, m := range []uint64{1, 2} {
				s, _ := tp.from.ISend(split(pattern(16, m), 2), tp.dest, m, nil)
				mustWait(t, s, 10*time.Second)
			}
			big, _ := tp.from.ISSend([][]byte{pattern(100000, 1)}, tp.dest, 1, nil)
			if st := mustWait(t, big, 10*time.Second); st.XferLength != 0 {
				t.Fatalf("rendezvous finished by the handler: %+v", st)
			}
			if _, ok := tp.to.IProbe(1, ^uint64(0)); ok {
				t.Fatal("a finished message was queued")
			}
			buf := make([]byte, 16)
			r, _ := tp.to.IRecv([][]byte{buf}, 2, ^uint64(0), nil)
			mustWait(t, r, 10*time.Second)
			if fmt.Sprint(seen) != "[1 2 1]" || !bytes.Equal(buf, pattern(16, 2)) {
				t.Fatalf("handler saw %v", seen)
			}
		})
	}
}

// TestLocalQueueFull: eager messages that find the unexpected queue full
// wait at the sender instead of being dropped, and arrive in order.
func TestLocalQueueFull(t *testing.T) {
	opts := fastOptions()
	opts.UnexpectedMaxMessages = 4
	opts.UnexpectedMaxBytes = 1000
	for _, tp := range localTopos(t, opts) {
		t.Run(tp.name, func(t *testing.T) {
			const n = 32
			var sends []*Request
			for i := 0; i < n; i++ {
				s, err := tp.from.ISend([][]byte{pattern(200, uint64(i))}, tp.dest, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				sends = append(sends, s)
			}
			pending := 0
			for _, s := range sends {
				if !s.done.Load() {
					pending++
				}
			}
			if pending == 0 {
				t.Fatal("every send completed although the queue holds 1000 bytes")
			}
			if c := tp.to.Counters().Get(DropUnexpectedFull); c != 0 {
				t.Fatalf("%d messages dropped", c)
			}
			buf := make([]byte, 200)
			for i := 0; i < n; i++ {
				r, _ := tp.to.IRecv([][]byte{buf}, 0, 0, nil)
				st := mustWait(t, r, 10*time.Second)
				if st.Match != uint64(i) || !bytes.Equal(buf, pattern(200, uint64(i))) {
					t.Fatalf("message %d: got %d", i, st.Match)
				}
			}
			for _, s := range sends {
				mustWait(t, s, 10*time.Second)
			}
		})
	}
}

// TestLocalClose: a receiver that closes fails the sends queued at it; a
// sender that closes leaves its queued sends failing their receives; sends
// to a closed endpoint fail as they would on the wire.
func TestLocalClose(t *testing.T) {
	t.Run("receiver", func(t *testing.T) {
		tps := localTopos(t, fastOptions())
		tp := tps[2]
		big, _ := tp.from.ISend([][]byte{pattern(100000, 1)}, tp.dest, 1, nil)
		tp.to.Close()
		if _, err := big.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrEndpointClosed) {
			t.Fatalf("queued send at a closed receiver: %v", err)
		}
		s, _ := tp.from.ISend([][]byte{[]byte("x")}, tp.dest, 1, nil)
		if _, err := s.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrEndpointClosed) {
			t.Fatalf("send to a closed endpoint: %v", err)
		}
		s, _ = tp.from.ISend(nil, tp.dest, 1, nil)
		if _, err := s.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("send after the peer was reset: %v", err)
		}
	})
	t.Run("sender", func(t *testing.T) {
		tps := localTopos(t, fastOptions())
		tp := tps[1]
		other, err := tp.from.Board().OpenEndpoint(AnyEndpoint, testKey)
		if err != nil {
			t.Fatal(err)
		}
		dest, err := other.Connect(testCtx(t, 10*time.Second), tp.to.Board().NICID(), tp.to.ID(), testKey)
		if err != nil {
			t.Fatal(err)
		}
		big, _ := other.ISend([][]byte{pattern(100000, 1)}, dest, 1, nil)
		if _, err := tp.to.Probe(testCtx(t, 10*time.Second), 1, ^uint64(0)); err != nil {
			t.Fatal(err)
		}
		other.Close()
		if _, err := big.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrEndpointClosed) {
			t.Fatalf("send of a closed endpoint: %v", err)
		}
		r, _ := tp.to.IRecv([][]byte{make([]byte, 100000)}, 1, ^uint64(0), nil)
		if st, err := r.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrEndpointClosed) || st.MsgLength != 100000 {
			t.Fatalf("receive of a withdrawn message: %+v %v", st, err)
		}
	})
}

// TestLocalBothWays has two boards stream to each other at once, from
// several goroutines, in every size class: deliveries and completions cross
// between the two board locks both ways.
func TestLocalBothWays(t *testing.T) {
	tp := localTopos(t, fastOptions())[2]
	back, err := tp.to.Connect(testCtx(t, 10*time.Second), tp.from.Board().NICID(), tp.from.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 4, 200
	ctx := testCtx(t, 60*time.Second)
	sizes := []int{0, 8, 200, 5000, 40000, 150000}
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers)
	for _, dir := range []struct {
		from, to *Endpoint
		dest     Addr
	}{{tp.from, tp.to, tp.dest}, {tp.to, tp.from, back}} {
		startStreams(&wg, errs, ctx, dir.from, dir.dest, dir.to, workers, per, func(_, i int) int { return sizes[i%len(sizes)] })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	noWireTraffic(t, tp.from, tp.to)
}

// TestLocalOverUDP: two boards of one process on real UDP sockets, with
// default options, take the shortcut by themselves once connected.
func TestLocalOverUDP(t *testing.T) {
	checkLeaks(t)
	w := newUDPWire(t, loopback.Faults{})
	o := DefaultBoardOptions()
	ba, err := NewBoard(w.a, o)
	if err != nil {
		t.Fatal(err)
	}
	defer ba.Close()
	bb, err := NewBoard(w.b, o)
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	a, _ := ba.OpenEndpoint(0, testKey)
	b, _ := bb.OpenEndpoint(0, testKey)
	dest, err := a.Connect(testCtx(t, 10*time.Second), bb.NICID(), 0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	sent := func() uint64 {
		for _, c := range ba.TransportCounters() {
			if c.Name == "sent" {
				return c.Value
			}
		}
		return 0
	}
	before := sent()
	for i, size := range []int{8, 5000, 1 << 20} {
		buf := make([]byte, size)
		r, _ := b.IRecv([][]byte{buf}, 0, 0, nil)
		s, _ := a.ISend([][]byte{pattern(size, uint64(i))}, dest, 1, nil)
		mustWait(t, s, 10*time.Second)
		mustWait(t, r, 10*time.Second)
		if !bytes.Equal(buf, pattern(size, uint64(i))) {
			t.Fatalf("%d bytes differ", size)
		}
	}
	if n := sent() - before; n != 0 {
		t.Fatalf("%d UDP frames sent after the connect", n)
	}
	if a.Counters().Get(SendLocal) != 3 {
		t.Fatalf("local sends: %d", a.Counters().Get(SendLocal))
	}
}
