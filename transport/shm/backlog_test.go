package shm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// backlogOpts: no lanes (every frame through the queue) and a queue of
// 256 cells, which three 4000-byte frames fill.
func backlogOpts(fullWait time.Duration) Options {
	return Options{MTU: 8000, Lanes: -1, QueueSize: 16 << 10, NoHugepages: true, FullWait: fullWait}
}

// TestQueueFullUnderTheCallersLock: two boards each send a burst of
// frames, several times what the other's queue holds, while holding a
// lock that their own receive loop needs to handle what it took (as mx's
// board lock is held by every send, and taken to handle every received
// batch). A sender that waited for room under that lock would wait for a
// peer whose receive loop waits for the peer's own lock, held by a sender
// waiting for us: with FullWait an hour, the test would hang. The full
// queues' frames wait in the backlogs instead, the sends return, and every
// frame arrives, byte-exact and in order, none dropped; the same through
// SendParts after SerialSends (mx's way) and through SendStrict, and the
// same when each pair has a lane (a small ring) from its first frame.
func TestQueueFullUnderTheCallersLock(t *testing.T) {
	lanes := ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: time.Hour})
	for _, parts := range []bool{true, false} {
		t.Run(fmt.Sprintf("parts=%v", parts), func(t *testing.T) { testQueueFullUnderLock(t, backlogOpts(time.Hour), parts) })
		t.Run(fmt.Sprintf("lanes/parts=%v", parts), func(t *testing.T) { testQueueFullUnderLock(t, lanes, parts) })
	}
}

func testQueueFullUnderLock(t *testing.T, opts Options, parts bool) {
	const frames, size = 64, 4000
	a, b := newTestPair(t, opts)
	defer a.Close()
	defer b.Close()
	boards := []*Transport{a, b}
	var locks [2]sync.Mutex
	frame := func(from, i int) []byte {
		f := bytes.Repeat([]byte{byte(from*frames + i)}, size-i)
		f[0] = byte(i)
		return f
	}
	if parts {
		a.SerialSends()
		b.SerialSends()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	// Both locks are taken before either burst starts and held until both
	// are sent, so neither receive loop handles a frame during the bursts
	// and each burst overfills the other's queue or lane whatever the
	// scheduler runs first (a sender that ran after the other had sent and
	// let go found a receive loop keeping up, and nothing waited).
	var locked, sent sync.WaitGroup
	locked.Add(2)
	sent.Add(2)
	for me := range 2 {
		tr, peer := boards[me], boards[1-me].Addr()
		wg.Add(2)
		go func() { // the sender: the whole burst under the lock
			defer wg.Done()
			locks[me].Lock()
			defer locks[me].Unlock()
			locked.Done()
			locked.Wait()
			defer sent.Wait()
			defer sent.Done()
			for i := range frames {
				f := frame(me, i)
				var err error
				if parts {
					err = tr.SendParts(peer, f[:10], [][]byte{f[10:]})
				} else {
					_, err = tr.SendStrict([]transport.Frame{{Peer: peer, Data: f}})
				}
				if err != nil {
					errs <- fmt.Errorf("board %d frame %d: %w", me, i, err)
					return
				}
			}
		}()
		go func() { // the receive loop: each batch handled under the lock
			defer wg.Done()
			buf := make([]transport.Frame, 8)
			for got := 0; got < frames; {
				n, err := tr.Recv(buf, time.Minute)
				if err != nil || n == 0 {
					errs <- fmt.Errorf("board %d after %d frames: Recv = %d, %v", me, got, n, err)
					return
				}
				locks[me].Lock()
				for _, f := range buf[:n] {
					if want := frame(1-me, got); !bytes.Equal(f.Data, want) {
						locks[me].Unlock()
						errs <- fmt.Errorf("board %d: frame %d differs (%d bytes, first %d)", me, got, len(f.Data), f.Data[0])
						return
					}
					got++
				}
				locks[me].Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, tr := range boards {
		if d := counter(tr, "shm frames dropped (ring full)"); d != 0 {
			t.Errorf("board %d dropped %d frames", i, d)
		}
		if n := counter(tr, "shm frames that waited in a backlog"); n == 0 {
			t.Errorf("board %d: no frame waited in a backlog: the queue never filled, the test proves nothing", i)
		}
		// The flusher counts a frame's bytes out after it published it.
		waitFor(t, "the backlog's bytes counted out", func() bool { return tr.blBytes.Load() == 0 })
		if opts.LaneAfter < 0 {
			if f := tr.Footprint(); f.RingsOut != 1 || f.RingsIn != 1 {
				t.Errorf("board %d: %d lanes written and %d read, want 1 and 1", i, f.RingsOut, f.RingsIn)
			}
		}
	}
}

// TestBacklogOfASlowConsumer: a consumer that takes nothing for far
// longer than FullWait (1 ns here, so that every frame after the first in
// the backlog comes later than that) while the backlogs stay below their
// bound is a live one that did not get a CPU in time, not a stuck one: no
// frame is dropped, SendStrict never fails, and every frame arrives, in
// order, once it reads. Through the queue, and through a lane.
func TestBacklogOfASlowConsumer(t *testing.T) {
	lane := ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: time.Nanosecond})
	t.Run("queue", func(t *testing.T) { testSlowConsumer(t, backlogOpts(time.Nanosecond)) })
	t.Run("lane", func(t *testing.T) { testSlowConsumer(t, lane) })
}

func testSlowConsumer(t *testing.T, opts Options) {
	const frames, size = 256, 4000 // 1 MiB, a sixteenth of the bound
	a, b := newTestPair(t, opts)
	defer a.Close()
	defer b.Close()
	frame := func(i int) []byte {
		f := bytes.Repeat([]byte{byte(i + 1)}, size-i)
		f[0] = byte(i >> 8)
		return f
	}
	for i := range frames {
		if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: frame(i)}}); err != nil {
			t.Fatalf("frame %d to a consumer that has not read yet: %v", i, err)
		}
	}
	if w := counter(a, "shm frames that waited in a backlog"); w < frames/2 {
		t.Fatalf("%d frames waited in a backlog, want most of the %d", w, frames)
	}
	recvInOrder(t, b, frames, 8, frame)
	if d := counter(a, "shm frames dropped (ring full)"); d != 0 {
		t.Errorf("%d frames dropped", d)
	}
	waitFor(t, "the backlog to empty", func() bool { return a.blBytes.Load() == 0 })
}

// TestBacklogOfAStuckConsumer: frames to a consumer that takes nothing
// wait in the backlog until the backlogs reach their bound; then the
// sender waits, and once the consumer has taken nothing for FullWait of
// that wait, SendStrict fails with ErrRingFull (counted). Every frame
// accepted before arrives, in order, once the consumer reads.
func TestBacklogOfAStuckConsumer(t *testing.T) {
	const size = 4000
	a, b := newTestPair(t, backlogOpts(10*time.Millisecond))
	defer a.Close()
	defer b.Close()
	frame := func(i int) []byte {
		f := bytes.Repeat([]byte{byte(i + 1)}, size)
		f[1] = byte(i >> 8)
		return f
	}
	sent := 0
	var err error
	for ; sent < 2*maxBacklog/size; sent++ { // the bound stops it first
		if _, err = a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: frame(sent)}}); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrRingFull) {
		t.Fatalf("after %d frames to a consumer that takes nothing: %v, want ErrRingFull", sent, err)
	}
	if d := counter(a, "shm frames dropped (ring full)"); d != 1 {
		t.Errorf("%d frames counted dropped, want 1", d)
	}
	recvInOrder(t, b, sent, 8, frame)
	waitFor(t, "the backlog to empty", func() bool { return a.blBytes.Load() == 0 })
}

// TestBacklogOfAPeerThatWent: a backlog to a peer that closes is
// dropped (counted), its bytes given back, and the flusher ends with the
// transport.
func TestBacklogOfAPeerThatWent(t *testing.T) {
	a, b := newTestPair(t, backlogOpts(time.Hour))
	defer a.Close()
	const frames = 16
	for i := range frames {
		if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: make([]byte, 4000)}}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	waiting := counter(a, "shm frames that waited in a backlog")
	if waiting == 0 {
		t.Fatal("no frame waited in a backlog")
	}
	b.Close()
	waitFor(t, "the backlog to be dropped", func() bool { return a.blBytes.Load() == 0 })
	if d := counter(a, "shm frames dropped (ring full)"); d != waiting {
		t.Errorf("%d frames counted dropped, want the %d of the backlog", d, waiting)
	}
}

// TestCloseDrainsTheBacklog: frames still in a backlog when their sender
// closes were sent (mx completes a lean send on them), so Close moves
// them into the receiver's queue first, while the receiver takes frames:
// every one arrives, in order, after the sender has closed.
func TestCloseDrainsTheBacklog(t *testing.T) {
	const frames, size = 64, 4000
	a, b := newTestPair(t, backlogOpts(10*time.Second))
	defer b.Close()
	frame := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, size) }
	for i := range frames {
		if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: frame(i)}}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if counter(a, "shm frames that waited in a backlog") == 0 {
		t.Fatal("no frame waited in a backlog")
	}
	got := make(chan error, 1)
	go func() {
		buf := make([]transport.Frame, 8)
		for i := 0; i < frames; {
			n, err := b.Recv(buf, time.Minute)
			if err != nil || n == 0 {
				got <- fmt.Errorf("after %d of %d frames: Recv = %d, %v", i, frames, n, err)
				return
			}
			for _, f := range buf[:n] {
				if !bytes.Equal(f.Data, frame(i)) {
					got <- fmt.Errorf("frame %d differs", i)
					return
				}
				i++
			}
		}
		got <- nil
	}()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := counter(a, "shm frames dropped (ring full)"); d != 0 {
		t.Errorf("Close dropped %d frames of the backlog", d)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestBacklogWokenByTheConsumer: with FullWait an hour, the flusher
// sleeps on its room bell between passes with nothing to move (no
// polling), so the backlog reaches the receiver only if the consumer,
// freeing the cells it waits for, writes the producer's room bell: the
// sender sends nothing after its burst, and every frame arrives, in
// order, with the consumer's count of room bells written above 0.
func TestBacklogWokenByTheConsumer(t *testing.T) {
	const frames, size = 32, 4000
	a, b := newTestPair(t, backlogOpts(time.Hour))
	defer a.Close()
	defer b.Close()
	frame := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, size-i) }
	for i := range frames {
		if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: frame(i)}}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if counter(a, "shm frames that waited in a backlog") == 0 {
		t.Fatal("no frame waited in a backlog")
	}
	recvInOrder(t, b, frames, 4, frame)
	if n := counter(b, "shm room bells written for producers' backlogs"); n == 0 {
		t.Error("the consumer wrote no room bell")
	}
	waitFor(t, "the backlog's bytes counted out", func() bool { return a.blBytes.Load() == 0 })
}

// recvInOrder receives count frames on tr, batch at a time, and fails the
// test unless frame i is exactly frame(i).
func recvInOrder(t *testing.T, tr *Transport, count, batch int, frame func(int) []byte) {
	t.Helper()
	buf := make([]transport.Frame, batch)
	for got := 0; got < count; {
		n, err := tr.Recv(buf, time.Minute)
		if err != nil || n == 0 {
			t.Fatalf("after %d of %d frames: Recv = %d, %v", got, count, n, err)
		}
		for _, f := range buf[:n] {
			if !bytes.Equal(f.Data, frame(got)) {
				t.Fatalf("frame %d of %d: %d bytes, not the ones sent", got, count, len(f.Data))
			}
			got++
		}
	}
}
