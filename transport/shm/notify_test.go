package shm

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport"
)

// openMany opens n boards in one directory with o, closed when the test
// ends, and checks that nothing is left behind.
func openMany(t *testing.T, n int, o Options) []*Transport {
	dir := testDir(t)
	leaktest.Check(t, dir)
	o.Dir = dir
	var boards []*Transport
	for range n {
		b, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		boards = append(boards, b)
		t.Cleanup(func() { b.Close() })
	}
	return boards
}

// TestColdRingsDeliverInOrder has more producers than a receiver polls
// directly send it numbered frames, interleaved, while it sleeps between
// them (no spin: every wait goes through the doorbell), and checks that
// every frame arrives, in order per producer, through Recv and through
// Peek and Take, and that cold rings were made hot on the way.
func TestColdRingsDeliverInOrder(t *testing.T) {
	const producers, per = 3 * hotMax, 3 * promoteAfter
	boards := openMany(t, producers+1, ringOpts(Options{Spin: -1, MTU: 1024, RingSize: 64 << 10, RingBudget: -1}))
	rx, tx := boards[0], boards[1:]
	errs := make(chan error, 1)
	// A round at a time: the receiver drains each round before the next
	// is sent, so it finds the rings empty and sleeps between rounds.
	next := make(chan struct{}, 1)
	go func() {
		var b [8]byte
		for i := range per {
			if i > 0 {
				<-next
			}
			for p, s := range tx {
				binary.LittleEndian.PutUint32(b[:], uint32(p))
				binary.LittleEndian.PutUint32(b[4:], uint32(i))
				if _, err := s.SendStrict([]transport.Frame{{Peer: rx.Addr(), Data: b[:]}}); err != nil {
					errs <- fmt.Errorf("producer %d, frame %d: %w", p, i, err)
					return
				}
			}
		}
		errs <- nil
	}()
	want := make([]uint32, producers)
	got := 0
	check := func(data []byte) {
		if len(data) != 8 {
			t.Fatalf("a frame of %d bytes", len(data))
		}
		p, i := binary.LittleEndian.Uint32(data), binary.LittleEndian.Uint32(data[4:])
		if int(p) >= producers || i != want[p] {
			t.Fatalf("frame %d of producer %d, want %d", i, p, want[p])
		}
		want[p]++
		if got++; got%producers == 0 && got < producers*per {
			next <- struct{}{}
		}
	}
	frames := make([]transport.Frame, 4)
	deadline := time.Now().Add(time.Minute)
	for got < producers*per {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames of %d arrived; %v", got, producers*per, rx.Counters())
		}
		// Every other look through Peek and Take, as mx's waiters do.
		if got%2 == 0 {
			if _, data, ok, _ := rx.Peek(); ok {
				check(data)
				rx.Take()
				continue
			}
		}
		n, err := rx.Recv(frames, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames[:n] {
			check(f.Data)
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if rx.cnt.promotions.Load() <= hotMax {
		t.Errorf("%d cold rings made hot: the hot set never changed", rx.cnt.promotions.Load())
	}
	if rx.cnt.sleeps.Load() == 0 {
		t.Errorf("the receiver never slept: the doorbell's path went untested")
	}
	if len(rx.hot) > hotMax {
		t.Errorf("%d hot rings, at most %d", len(rx.hot), hotMax)
	}
}

// TestColdRingOfAGoneProducer checks that a producer whose ring is cold
// and goes away is noticed (its ring unmapped, its loss reported) though
// no frame of it raises its bit.
func TestColdRingOfAGoneProducer(t *testing.T) {
	boards := openMany(t, hotMax+3, ringOpts(Options{MTU: 1024, RingSize: 64 << 10, RingBudget: -1}))
	rx, tx := boards[0], boards[1:]
	frames := make([]transport.Frame, 8)
	for _, s := range tx {
		if _, err := s.Send([]transport.Frame{{Peer: rx.Addr(), Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < len(tx); {
		n, err := rx.Recv(frames, 10*time.Second)
		if err != nil || n == 0 {
			t.Fatalf("after %d frames: %d, %v", got, n, err)
		}
		got += n
	}
	var cold *Transport
	for _, s := range tx {
		hot := false
		for _, h := range rx.hot {
			hot = hot || h.r.peer == s.Addr()
		}
		if !hot {
			cold = s
			break
		}
	}
	if cold == nil {
		t.Fatalf("every ring is hot, with %d producers and %d hot at most", len(tx), hotMax)
	}
	cold.Close()
	deadline := time.Now().Add(20 * time.Second)
	for rx.Footprint().RingsIn != len(tx)-1 {
		if time.Now().After(deadline) {
			t.Fatalf("the gone producer's ring is still mapped: %+v", rx.Footprint())
		}
		if _, err := rx.Recv(frames, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if lost := rx.LostPeers(nil); len(lost) != 1 || lost[0] != cold.Addr() {
		t.Errorf("lost peers %v, want [%v]", lost, cold.Addr())
	}
}

// TestLanesShareTheBudget checks that a lane's size is the budget shared
// among the lanes a transport may write (Lanes, or the other boards of the
// directory when fewer), within RingSize and the floor of three frames of
// the MTU (a share rounded down to whole pages, one above a hugepage to
// whole hugepages), and
// that a job of every board talking to every other stays
// within twice the budget and the receive queues per process, as the
// transport counts it.
func TestLanesShareTheBudget(t *testing.T) {
	const n, budget, mtu = 12, 1 << 20, 4096
	boards := openMany(t, n, Options{MTU: mtu, RingBudget: budget, LaneAfter: -1})
	want := budget/defaultLanes&^(page-1) - dataOff
	if got := boards[0].ringSize(); got != want {
		t.Errorf("a ring of %d bytes with %d boards and a budget of %d, want %d", got, n, budget, want)
	}
	allToAll(t, boards)
	for i, b := range boards {
		f := b.Footprint()
		if bound := int64(2*budget + n*queueSegLen(b.opts.QueueSize)); f.MappedBytes > bound {
			t.Errorf("board %d maps %d bytes, over twice the budget and the queues (%d)", i, f.MappedBytes, bound)
		}
		if f.RingsOut > defaultLanes || f.RingsIn > defaultLanes {
			t.Errorf("board %d writes %d lanes and reads %d, over %d", i, f.RingsOut, f.RingsIn, defaultLanes)
		}
	}
	for _, c := range []struct {
		o    Options
		want int
	}{
		{Options{MTU: mtu, RingBudget: 64 << 10}, max(minFrames*recordLen(mtu), minRingLen)},
		{Options{MTU: 65535, RingBudget: 2 << 20}, 2<<20/defaultLanes - dataOff},
		{Options{MTU: 65535, RingBudget: 512 << 10}, minFrames * recordLen(65535)},
		{Options{MTU: mtu, RingBudget: 1 << 30}, 4<<20 - dataOff},
		{Options{MTU: mtu, RingBudget: -1}, 4<<20 - dataOff},
		// Three lanes of 8 MiB: 2.7 MiB each, rounded down to a
		// hugepage (hugeShare), or kept on ordinary pages.
		{Options{MTU: mtu, RingBudget: 8 << 20, Lanes: 3}, 2<<20 - dataOff},
		{Options{MTU: mtu, RingBudget: 8 << 20, Lanes: 3, NoHugepages: true}, 8<<20/3&^(page-1) - dataOff},
	} {
		o, err := c.o.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		o.Dir = boards[0].opts.Dir
		tr := &Transport{opts: o}
		got := tr.ringSize()
		tr.closeDirList() // the directory descriptor ringSize opened
		if got != c.want {
			t.Errorf("MTU %d, budget %d, %d boards: a ring of %d bytes, want %d", c.o.MTU, c.o.RingBudget, n, got, c.want)
		}
	}
}

// BenchmarkPeersIdle is the cost of an 8-byte frame between two boards
// while N-2 other boards have rings into the receiver and send nothing
// (the idle ranks of an N-rank job): a Send from board 1, then a Recv
// that polls (timeout 0), in one goroutine, so what it measures is the
// per-message work of both sides and not the scheduler, and "empty" is
// one look that finds nothing (a waiter's poll). Both stay flat as N
// grows when no poll scans every peer.
func BenchmarkPeersIdle(b *testing.B) {
	for _, n := range []int{2, 16, 64} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			tr := openBoards(b, n)
			rx := tr[0]
			frames := make([]transport.Frame, 8)
			// Every other board connects first and goes idle, as a job's
			// ranks connect to each other before they work; the active
			// peer comes last.
			for _, p := range append(tr[2:], tr[1]) {
				if _, err := p.Send([]transport.Frame{{Peer: rx.Addr(), Data: []byte("hello")}}); err != nil {
					b.Fatal(err)
				}
			}
			for got := 0; got < n-1; {
				k, err := rx.Recv(frames, time.Second)
				if err != nil || k == 0 {
					b.Fatalf("Recv = %d, %v", k, err)
				}
				got += k
			}
			msg := []transport.Frame{{Peer: rx.Addr(), Data: []byte("8 bytes!")}}
			trip := func() {
				if _, err := tr[1].Send(msg); err != nil {
					b.Fatal(err)
				}
				if k, err := rx.Recv(frames, 0); k != 1 || err != nil {
					b.Fatalf("Recv = %d, %v", k, err)
				}
			}
			for range 2 * promoteAfter {
				trip() // the active ring settles among the polled ones
			}
			b.Run("message", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					trip()
				}
			})
			b.Run("empty", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					if k, err := rx.Recv(frames, 0); k != 0 || err != nil {
						b.Fatalf("Recv = %d, %v", k, err)
					}
				}
			})
		})
	}
}
