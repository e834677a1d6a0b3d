package xdp

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// transfer sends count test frames on every queue of from's sockets to to's
// MAC and checks that to's sockets receive every one byte for byte, in
// order per queue. It returns, per sending queue, the rx queue its frames
// arrived on. The sender keeps at most window frames per queue in flight,
// so no ring can overflow and every loss is a bug.
func transfer(t *testing.T, from, to *side, count int) map[int]int {
	t.Helper()
	// At most a quarter of the receiver's UMEM in flight: the fill ring
	// always has room for the window.
	window := min(1024, to.socks[0].opts.Frames/4)
	queues := len(from.socks)
	var got = make([]atomic.Int64, queues) // per sending queue
	arrived := make(map[int]int)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 2)
	deadline := time.Now().Add(90 * time.Second)

	wg.Add(1)
	go func() { // receiver
		defer wg.Done()
		descs := make([]Desc, 64)
		next := make([]uint32, queues)
		total, want := 0, count*queues
		lastProgress := time.Now()
		for total < want {
			select {
			case <-stop:
				return
			default:
			}
			idle := true
			for rq, sk := range to.socks {
				n := sk.Receive(descs)
				for _, d := range descs[:n] {
					q, seq, ok := checkTestFrame(sk.Frame(d), to.mac, from.mac)
					switch {
					case q < 0 || q >= queues:
						errc <- fmt.Errorf("rx queue %d: frame of %d bytes claims sending queue %d", rq, d.Len, q)
						return
					case !ok:
						errc <- fmt.Errorf("rx queue %d: frame %d of queue %d (%d bytes) is not byte-exact", rq, seq, q, d.Len)
						return
					case seq != next[q]:
						errc <- fmt.Errorf("rx queue %d: got frame %d of queue %d, want %d", rq, seq, q, next[q])
						return
					}
					if prev, seen := arrived[q]; seen && prev != rq {
						errc <- fmt.Errorf("frames of queue %d arrived on rx queues %d and %d", q, prev, rq)
						return
					}
					arrived[q] = rq
					next[q]++
					got[q].Add(1)
				}
				sk.Release(descs[:n])
				if n > 0 {
					idle = false
					total += n
					lastProgress = time.Now()
				}
			}
			if idle {
				if time.Since(lastProgress) > 10*time.Second || time.Now().After(deadline) {
					errc <- fmt.Errorf("receiver stalled at %d of %d frames (per queue %v)", total, want, next)
					return
				}
				runtime.Gosched()
			}
		}
		errc <- nil
	}()

	wg.Add(1)
	go func() { // sender
		defer wg.Done()
		descs := make([]Desc, 64)
		sent := make([]int, queues)
		for done := 0; done < queues; {
			done = 0
			progress := false
			for q, sk := range from.socks {
				if sent[q] == count {
					done++
					continue
				}
				want := min(len(descs), count-sent[q], window-(sent[q]-int(got[q].Load())))
				if want <= 0 {
					continue
				}
				n := sk.Alloc(descs[:want])
				for i := range n {
					descs[i].Len = uint32(putTestFrame(sk.Frame(descs[i]), to.mac, from.mac, q, uint32(sent[q]+i)))
				}
				for off := 0; off < n; {
					m, err := sk.Transmit(descs[off:n])
					if err != nil {
						errc <- err
						return
					}
					off += m
					if m == 0 {
						if time.Now().After(deadline) {
							errc <- fmt.Errorf("queue %d: tx ring stayed full", q)
							return
						}
						runtime.Gosched()
					}
				}
				sent[q] += n
				if n > 0 {
					progress = true
				} else if _, err := sk.Flush(); err != nil {
					errc <- err
					return
				}
			}
			if !progress {
				select {
				case <-stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					errc <- fmt.Errorf("sender stalled at %v of %d per queue", sent, count)
					return
				}
				for _, sk := range from.socks {
					sk.Flush()
				}
				runtime.Gosched()
			}
		}
	}()

	if err := <-errc; err != nil {
		close(stop)
		wg.Wait()
		for q, sk := range to.socks {
			st, _ := sk.Stats()
			t.Logf("%s rx queue %d: %+v", to.iface, q, st)
		}
		c, _ := to.prog.Counters()
		t.Logf("%s program counters: %+v", to.iface, c)
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	return arrived
}

// 100 000 frames each way on every queue of a 4-queue veth pair arrive byte
// for byte, in native and generic mode.
func TestFramesEveryQueue(t *testing.T) {
	count := 100000
	if testing.Short() {
		count = 5000
	}
	for _, mode := range []AttachMode{DriverMode, GenericMode} {
		t.Run(mode.String(), func(t *testing.T) {
			r := newRig(t, 4, mode, Options{})
			for _, s := range []*side{&r.a, &r.b} {
				if s.prog.Mode() != mode {
					t.Fatalf("%s: program attached in %v mode, want %v", s.iface, s.prog.Mode(), mode)
				}
				for _, sk := range s.socks {
					if sk.ZeroCopy() {
						t.Errorf("%s queue %d: veth reported zero-copy", s.iface, sk.Queue())
					}
				}
			}
			start := time.Now()
			ab := transfer(t, &r.a, &r.b, count)
			ba := transfer(t, &r.b, &r.a, count)
			t.Logf("%d frames each way on each of 4 queues in %v; tx queue -> rx queue: a->b %v, b->a %v",
				count, time.Since(start).Round(time.Millisecond), ab, ba)
			if mode == DriverMode {
				for q := range 4 {
					if ab[q] != q || ba[q] != q {
						t.Errorf("native mode: frames sent on queue %d arrived on rx queue %d (a->b) and %d (b->a), want %d", q, ab[q], ba[q], q)
					}
				}
			}
			for _, s := range []*side{&r.a, &r.b} {
				var redirected uint64
				c, err := s.prog.Counters()
				if err != nil {
					t.Fatal(err)
				}
				for _, qc := range c {
					redirected += qc.Redirected
				}
				if redirected != uint64(4*count) {
					t.Errorf("%s: program redirected %d frames, want %d (%+v)", s.iface, redirected, 4*count, c)
				}
			}
		})
	}
}

// Round trips on one queue, each side receiving and transmitting, many
// more times than the UMEM has frames: frames received and sent back in
// place (zero-copy echo) and frames allocated for sending all find their
// way back to the fill ring and the free list.
func TestEchoRecyclesFrames(t *testing.T) {
	r := newRig(t, 1, DriverMode, Options{Frames: 1024})
	a, b := r.a.socks[0], r.b.socks[0]
	const rounds = 5000 // five times the frames of a UMEM
	descs := make([]Desc, 8)
	wait := func(s *Socket) (Desc, bool) {
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if s.Receive(descs[:1]) == 1 {
				return descs[0], true
			}
			runtime.Gosched()
		}
		return Desc{}, false
	}
	for i := range rounds {
		if a.Alloc(descs[:1]) != 1 {
			t.Fatalf("round %d: no free frame to send", i)
		}
		descs[0].Len = uint32(putTestFrame(a.Frame(descs[0]), r.b.mac, r.a.mac, 0, uint32(i)))
		if n, err := a.Transmit(descs[:1]); n != 1 || err != nil {
			t.Fatalf("round %d: Transmit = %d, %v", i, n, err)
		}
		d, ok := wait(b)
		if !ok {
			st, _ := b.Stats()
			t.Fatalf("round %d: ping lost (%+v)", i, st)
		}
		f := b.Frame(d)
		if _, seq, ok := checkTestFrame(f, r.b.mac, r.a.mac); !ok || seq != uint32(i) {
			t.Fatalf("round %d: got frame %d, byte-exact %v", i, seq, ok)
		}
		// Echo in place: swap the MAC addresses and send the same frame.
		var tmp [6]byte
		copy(tmp[:], f[0:6])
		copy(f[0:6], f[6:12])
		copy(f[6:12], tmp[:])
		if n, err := b.Transmit([]Desc{d}); n != 1 || err != nil {
			t.Fatalf("round %d: echo Transmit = %d, %v", i, n, err)
		}
		d, ok = wait(a)
		if !ok {
			st, _ := a.Stats()
			t.Fatalf("round %d: echo lost (%+v)", i, st)
		}
		if _, seq, ok := checkTestFrame(a.Frame(d), r.a.mac, r.b.mac); !ok || seq != uint32(i) {
			t.Fatalf("round %d: echo is frame %d, byte-exact %v", i, seq, ok)
		}
		a.Release([]Desc{d})
	}
}

// Busy polling is an option that the kernel accepts on any driver; frames
// flow as without it.
func TestBusyPoll(t *testing.T) {
	r := newRig(t, 1, DriverMode, Options{BusyPoll: 50 * time.Microsecond, BusyPollBudget: 16, TxBudget: 128, Frames: 1024})
	transfer(t, &r.a, &r.b, 2000)
}

// The batch calls of the data path allocate nothing.
func TestDataPathDoesNotAllocate(t *testing.T) {
	r := newRig(t, 1, DriverMode, Options{Frames: 1024})
	a, b := r.a.socks[0], r.b.socks[0]
	descs := make([]Desc, 16)
	rx := make([]Desc, 64)
	allocs := testing.AllocsPerRun(200, func() {
		n := a.Alloc(descs)
		for i := range n {
			descs[i].Len = 60
		}
		a.Transmit(descs[:n])
		a.Flush()
		m := b.Receive(rx)
		b.Release(rx[:m])
	})
	if allocs != 0 {
		t.Errorf("Alloc, Transmit, Flush, Receive and Release allocate %v times per batch", allocs)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{FrameSize: 1024}, "FrameSize 1024"},
		{Options{Frames: 100}, "Frames 100"},
		{Options{Frames: 64, RingSize: 128}, "RingSize 128"},
		{Options{Mode: 9}, "CopyMode(9)"},
		{Options{BusyPoll: -1}, "negative"},
	} {
		if _, err := tc.o.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig saying %q", tc.o, err, tc.want)
		}
	}
	o, err := Options{Frames: 256, BusyPoll: time.Microsecond}.withDefaults()
	if err != nil || o.FrameSize != 2048 || o.RingSize != 128 || o.BusyPollBudget != 64 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// A receiver's empty polls take the UMEM's lock only when the fill ring has
// something to be topped up with: a completed transmission to reap, or
// frames beyond the transmit reserve. Otherwise a poll proceeds while the
// transmit side (Alloc, on another goroutine) holds the lock, so a
// spinning receiver and a sender of one socket do not take turns on a lock,
// and its cache line, at every poll.
func TestEmptyReceiveTakesNoLock(t *testing.T) {
	r := newRig(t, 1, DriverMode, Options{Frames: 1024})
	a, b := r.a.socks[0], r.b.socks[0]
	descs, rx := make([]Desc, 1), make([]Desc, 8)
	if a.Alloc(descs) != 1 {
		t.Fatal("no free frame to send")
	}
	descs[0].Len = uint32(putTestFrame(a.Frame(descs[0]), r.b.mac, r.a.mac, 0, 1))
	if n, err := a.Transmit(descs); n != 1 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	got := 0
	for deadline := time.Now().Add(5 * time.Second); got == 0 && time.Now().Before(deadline); {
		got = b.Receive(rx)
	}
	if got != 1 {
		t.Fatalf("received %d frames, want 1", got)
	}
	b.Release(rx[:got])

	// b has nothing to top up: its polls take no lock.
	if b.u.refillDue() {
		t.Fatal("after Release the receiver still has frames to move to its fill ring")
	}
	b.u.mu.Lock()
	done := make(chan int, 1)
	go func() { done <- b.Receive(rx) }()
	select {
	case n := <-done:
		b.u.mu.Unlock()
		if n != 0 {
			t.Fatalf("empty Receive returned %d frames", n)
		}
	case <-time.After(10 * time.Second):
		b.u.mu.Unlock()
		<-done
		t.Fatal("an empty Receive waited for the UMEM's lock")
	}

	// a's transmission completes: its next poll reaps it, under the lock.
	for deadline := time.Now().Add(5 * time.Second); !a.u.refillDue() && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	if !a.u.refillDue() {
		t.Fatal("the sender's completion never showed")
	}
	if n := a.Receive(rx); n != 0 {
		t.Fatalf("sender received %d frames", n)
	}
	if a.u.refillDue() {
		t.Error("a poll left the completion unreaped")
	}
}

// The free list hands a sender the frames used last and feeds the fill
// ring the ones unused longest, and holds whatever is pushed on it.
func TestFrameStack(t *testing.T) {
	f := newFrameStack(4)
	for a := range uint64(4) {
		f.push(a)
	}
	if f.len() != 4 || f.top(0) != 3 || f.top(3) != 0 {
		t.Fatalf("len %d, top %d, bottom %d; want 4, 3, 0", f.len(), f.top(0), f.top(3))
	}
	if a := f.popCold(); a != 0 {
		t.Fatalf("popCold = %d, want 0 (the oldest)", a)
	}
	f.drop(1) // 3 goes to a sender
	f.push(9)
	f.push(10) // wraps around the buffer
	if got := []uint64{f.top(0), f.top(1), f.top(2), f.top(3)}; !slices.Equal(got, []uint64{10, 9, 2, 1}) {
		t.Fatalf("stack from the top = %v, want [10 9 2 1]", got)
	}
	f.push(11)     // past the buffer: it grows, in order
	f.pushCold(12) // and again at the bottom
	want := []uint64{12, 1, 2, 9, 10, 11}
	for i, w := range want {
		if a := f.popCold(); a != w {
			t.Fatalf("popCold %d = %d, want %d", i, a, w)
		}
	}
	if f.len() != 0 {
		t.Fatalf("len %d after taking everything", f.len())
	}
}

// In a ping-pong each side sends from the few frames it used last, not
// from frames that went round the fill ring (and out of the cache): the
// frames a sender gets from Alloc over a thousand round trips are a
// handful.
func TestPingPongReusesFrames(t *testing.T) {
	r := newRig(t, 1, DriverMode, Options{Frames: 1024})
	a, b := r.a.socks[0], r.b.socks[0]
	descs, rx := make([]Desc, 1), make([]Desc, 8)
	used := map[uint64]bool{}
	one := func(from, to *Socket, dst, src [6]byte, seq uint32) {
		t.Helper()
		if from.Alloc(descs) != 1 {
			t.Fatalf("round %d: no free frame", seq)
		}
		if from == a {
			used[descs[0].Addr] = true
		}
		descs[0].Len = uint32(putTestFrame(from.Frame(descs[0]), dst, src, 0, seq))
		if n, err := from.Transmit(descs); n != 1 || err != nil {
			t.Fatalf("round %d: Transmit = %d, %v", seq, n, err)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if n := to.Receive(rx); n > 0 {
				to.Release(rx[:n])
				return
			}
		}
		t.Fatalf("round %d: frame lost", seq)
	}
	const rounds = 1000 // as many as the UMEM's frames
	for i := range uint32(rounds) {
		one(a, b, r.b.mac, r.a.mac, i)
		one(b, a, r.a.mac, r.b.mac, i)
	}
	if len(used) > 8 {
		t.Errorf("the sender wrote into %d different frames in %d round trips, want a handful", len(used), rounds)
	}
}
