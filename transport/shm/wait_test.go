package shm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport"
)

// waitFor polls cond until it holds; the bound only keeps a broken build
// from hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWakeSleepingRecv: a Recv that ran out of spin sleeps on the futex
// (counted), and Wake makes it return with nothing; a Wake with no Recv
// running is kept for the next one.
func TestWakeSleepingRecv(t *testing.T) {
	a, b := newTestPair(t, Options{Spin: time.Microsecond})
	defer a.Close()
	defer b.Close()
	frames := make([]transport.Frame, 4)
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := a.Recv(frames, -1)
		done <- res{n, err}
	}()
	waitFor(t, "the receiver to sleep", func() bool { return counter(a, "shm receiver sleeps") > 0 })
	a.Wake()
	if r := <-done; r.n != 0 || r.err != nil {
		t.Fatalf("woken Recv: %d frames, %v", r.n, r.err)
	}
	a.Wake()
	if n, err := a.Recv(frames, -1); n != 0 || err != nil {
		t.Fatalf("Recv after a Wake: %d frames, %v", n, err)
	}
}

// TestWakeWritesOncePerRequest: Wakes that come while an earlier one is
// still pending (its Recv asleep, or woken but not yet run) write the
// eventfd once between them; once the Recv has returned for it, the next
// Wake writes again.
func TestWakeWritesOncePerRequest(t *testing.T) {
	a, b := newTestPair(t, Options{Spin: time.Microsecond})
	defer a.Close()
	defer b.Close()
	frames := make([]transport.Frame, 4)
	for round := uint64(1); round <= 2; round++ {
		slept := counter(a, "shm receiver sleeps")
		done := make(chan error, 1)
		go func() {
			n, err := a.Recv(frames, -1)
			if err == nil && n != 0 {
				err = fmt.Errorf("%d frames", n)
			}
			done <- err
		}()
		waitFor(t, fmt.Sprintf("the receiver to sleep (round %d)", round), func() bool { return counter(a, "shm receiver sleeps") > slept })
		for range 100 {
			a.Wake()
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: woken Recv: %v", round, err)
		}
		if w := counter(a, "shm receiver wake-ups sent"); w != round {
			t.Fatalf("round %d: %d wake-ups sent for 100 Wakes of one sleep each round, want %d", round, w, round)
		}
		// The Wakes after the Recv returned left a request pending, for
		// the next Recv: this one takes it, so the next round's sleeps.
		if n, err := a.Recv(frames, time.Millisecond); n != 0 || err != nil {
			t.Fatalf("round %d: Recv after the Wakes: %d frames, %v", round, n, err)
		}
	}
}

// TestBusyReceiverCostsNoWakeups: frames to a receiver that is polling
// (spinning in Recv, not sleeping) are delivered without a single futex
// wake-up from the producer; once it sleeps, the producer wakes it.
func TestBusyReceiverCostsNoWakeups(t *testing.T) {
	a, b := newTestPair(t, Options{Spin: time.Hour})
	defer a.Close()
	defer b.Close()
	frames := make([]transport.Frame, 64)
	got := 0
	for i := 0; i < 100; i++ {
		if _, err := b.Send([]transport.Frame{{Peer: a.Addr(), Data: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
		n, err := a.Recv(frames, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if got != 100 {
		t.Fatalf("received %d frames of 100", got)
	}
	if w := counter(b, "shm receiver wake-ups sent"); w != 0 {
		t.Errorf("%d futex wake-ups sent to a receiver that never slept", w)
	}
	if s := counter(a, "shm receiver sleeps"); s != 0 {
		t.Errorf("the spinning receiver slept %d times", s)
	}

	// A receiver that does not spin sleeps at once and must be woken.
	c, err := Open(Options{Dir: a.opts.Dir, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		n, err := c.Recv(frames, -1)
		if err == nil && n != 1 {
			err = errors.New("not one frame")
		}
		done <- err
	}()
	waitFor(t, "the receiver to sleep", func() bool { return counter(c, "shm receiver sleeps") > 0 })
	if _, err := b.Send([]transport.Frame{{Peer: c.Addr(), Data: []byte("wake")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if counter(b, "shm receiver wake-ups sent") == 0 {
		t.Error("the sleeping receiver got its frame without a wake-up")
	}
}

// TestSpinFromEnv: GOMX_SHM_SPIN sets the default spin; a bad value is an
// error that names the variable.
func TestSpinFromEnv(t *testing.T) {
	t.Setenv("GOMX_SHM_SPIN", "7us")
	o, err := Options{}.withDefaults()
	if err != nil || o.Spin != 7*time.Microsecond {
		t.Fatalf("spin %v, %v", o.Spin, err)
	}
	t.Setenv("GOMX_SHM_SPIN", "0")
	if o, err = (Options{}).withDefaults(); err != nil || o.Spin >= 0 {
		t.Fatalf("GOMX_SHM_SPIN=0: spin %v, %v", o.Spin, err)
	}
	t.Setenv("GOMX_SHM_SPIN", "fast")
	if _, err = (Options{}).withDefaults(); err == nil {
		t.Fatal("GOMX_SHM_SPIN=fast accepted")
	}
}

// TestFullRingKeepsMoving: a producer that fills the smallest ring a 16000-
// byte MTU allows (four records) with frames of every size, against a
// receiver in another goroutine, loses none and gets every frame through
// intact and in order: the receiver publishes its head in batches (commit),
// and a producer waiting for room still sees it move.
func TestFullRingKeepsMoving(t *testing.T) {
	const mtu, count = 16000, 600
	a, b := newTestPair(t, ringOpts(Options{MTU: mtu, RingSize: minRingLen, NoHugepages: true, FullWait: time.Minute}))
	defer a.Close()
	defer b.Close()
	frame := func(i int) []byte {
		f := make([]byte, 1+i*7919%mtu)
		for k := range f {
			f[k] = byte(i + k)
		}
		return f
	}
	errc := make(chan error, 1)
	go func() {
		frames := make([]transport.Frame, 64)
		deadline := time.Now().Add(time.Minute)
		for i := 0; i < count; {
			if time.Now().After(deadline) {
				errc <- errors.New("frames stopped coming")
				return
			}
			n, err := b.Recv(frames, time.Second)
			if err != nil {
				errc <- err
				return
			}
			for _, f := range frames[:n] {
				if !bytes.Equal(f.Data, frame(i)) {
					errc <- fmt.Errorf("frame %d: %d bytes, not the %d sent", i, len(f.Data), len(frame(i)))
					return
				}
				i++
			}
		}
		errc <- nil
	}()
	for i := range count {
		if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: frame(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if d := counter(a, "shm frames dropped (ring full)"); d != 0 {
		t.Fatalf("%d frames dropped", d)
	}
}

// TestStuckReceiverFailsSendStrict: frames to a lane whose consumer takes
// nothing wait in the pair's backlog once the ring is full, until the
// consumer has taken nothing for FullWait (or the backlogs are full):
// then SendStrict fails with ErrRingFull for the frame that found no room
// (counted), the frames before it arrive intact, in order (the backlog's
// through the lane as the consumer frees room), and once the consumer
// drains the ring, it works again.
func TestStuckReceiverFailsSendStrict(t *testing.T) {
	const size = 4000
	a, b := newTestPair(t, ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: 10 * time.Millisecond}))
	defer a.Close()
	defer b.Close()
	frame := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, size) }
	sent := 0
	var err error
	for ; sent < 2*maxBacklog/size; sent++ { // the ring and the backlogs hold fewer
		var n int
		if n, err = a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: frame(sent)}}); err != nil {
			if n != 0 {
				t.Fatalf("SendStrict = %d, %v: want 0 frames sent with the error", n, err)
			}
			break
		}
	}
	if !errors.Is(err, ErrRingFull) {
		t.Fatalf("after %d frames into a ring nobody reads: SendStrict error %v, want ErrRingFull", sent, err)
	}
	if d := counter(a, "shm frames dropped (ring full)"); d != 1 {
		t.Fatalf("%d frames counted dropped, want 1", d)
	}
	frames := make([]transport.Frame, 8)
	for i := 0; i < sent; {
		n, err := b.Recv(frames, time.Minute)
		if err != nil || n == 0 {
			t.Fatalf("after %d of %d frames: Recv = %d, %v", i, sent, n, err)
		}
		for _, f := range frames[:n] {
			if !bytes.Equal(f.Data, frame(i)) {
				t.Fatalf("frame %d: not the bytes sent", i)
			}
			i++
		}
	}
	if n, err := b.Recv(frames, 0); n != 0 || err != nil { // gives the space back
		t.Fatalf("Recv of a drained ring = %d, %v", n, err)
	}
	if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: frame(sent)}}); err != nil {
		t.Fatalf("SendStrict into the drained ring: %v", err)
	}
	if n, err := b.Recv(frames, time.Minute); n != 1 || err != nil || !bytes.Equal(frames[0].Data, frame(sent)) {
		t.Fatalf("after the drain: Recv = %d, %v, want the frame sent", n, err)
	}
}

// TestRecvTimeoutEndsTheSpin: a Recv given a timeout shorter than its spin
// (an hour here) returns with nothing once the timeout passes, instead of
// spinning on.
func TestRecvTimeoutEndsTheSpin(t *testing.T) {
	a, b := newTestPair(t, Options{Spin: time.Hour})
	defer a.Close()
	defer b.Close()
	frames := make([]transport.Frame, 4)
	done := make(chan error, 1)
	go func() {
		n, err := a.Recv(frames, 10*time.Millisecond)
		if err == nil && n != 0 {
			err = fmt.Errorf("%d frames from nobody", n)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		a.Wake()
		t.Fatal("a Recv with a 10 ms timeout still spins after a minute")
	}
}

// TestSleepersWakeAcrossProcesses: a child process whose Recv sleeps (its
// doorbell says so) is woken by our send, and our sleeping Recv by its
// echo, round after round, with nothing lost: every frame comes back intact
// within the bound, each send found the child asleep and woke it, and no
// descriptor (the eventfds included) is left behind.
func TestSleepersWakeAcrossProcesses(t *testing.T) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	a, err := Open(Options{Dir: dir, Spin: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cmd, out := spawn(t, os.Args[0], nil, fmt.Sprintf("echo %s %d", dir, 4244))
	waitReady(t, out)
	peer := NICBase | 4244
	frames := make([]transport.Frame, 4)
	const rounds = 100
	for i := range rounds {
		msg := []byte(fmt.Sprintf("round %d", i))
		if i > 0 {
			o := (*a.outSnap.Load())[peer]
			waitFor(t, "the child to sleep", func() bool { return o.slp.Load() != 0 })
		}
		if _, err := a.Send([]transport.Frame{{Peer: peer, Data: msg}}); err != nil {
			t.Fatal(err)
		}
		n, err := a.Recv(frames, time.Minute)
		if err != nil || n != 1 {
			t.Fatalf("round %d: %d frames, %v: a wake-up was lost", i, n, err)
		}
		if !bytes.Equal(frames[0].Data, msg) {
			t.Fatalf("round %d: echo %q, want %q", i, frames[0].Data, msg)
		}
	}
	if w := counter(a, "shm receiver wake-ups sent"); w < rounds-1 {
		t.Errorf("%d wake-ups sent to a child that slept before %d sends", w, rounds-1)
	}
	if s := counter(a, "shm receiver sleeps"); s == 0 {
		t.Error("our Recv never slept")
	}
	a.Send([]transport.Frame{{Peer: peer, Data: []byte("quit")}})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

// TestSendParts: a frame written from a head (0 to 27 bytes: copied 8
// bytes at a time, then the rest) and parts arrives as their
// concatenation, through several laps of a small ring (pad records
// included); one above the MTU fails with ErrTooBig, and one that finds a
// stuck consumer's ring full with ErrRingFull, as SendStrict does. All of
// it alike with the ring's lock (serial: after SerialSends) or without.
func TestSendParts(t *testing.T) {
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) { testSendParts(t, serial) })
	}
}

func testSendParts(t *testing.T, serial bool) {
	a, b := newTestPair(t, ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: 10 * time.Millisecond}))
	defer a.Close()
	defer b.Close()
	if serial {
		a.SerialSends()
	}
	frames := make([]transport.Frame, 8)
	for i := range 3 * minRingLen / 512 {
		n := i % 700
		head := make([]byte, i%28)
		for k := range head {
			head[k] = byte(i + 3*k)
		}
		p1 := bytes.Repeat([]byte{byte(i + 1)}, n/2)
		p2 := bytes.Repeat([]byte{byte(i + 2)}, n-n/2)
		if err := a.SendParts(b.Addr(), head, [][]byte{p1, nil, p2}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		k, err := b.Recv(frames, time.Minute)
		if err != nil || k != 1 {
			t.Fatalf("frame %d: Recv = %d, %v", i, k, err)
		}
		want := append(append(append([]byte{}, head...), p1...), p2...)
		if !bytes.Equal(frames[0].Data, want) {
			t.Fatalf("frame %d: got %d bytes, want %d (% x...)", i, len(frames[0].Data), len(want), want[:min(len(want), 8)])
		}
	}
	if err := a.SendParts(b.Addr(), make([]byte, 10), [][]byte{make([]byte, 7991)}); !errors.Is(err, transport.ErrTooBig) {
		t.Fatalf("an 8001-byte frame: %v, want ErrTooBig", err)
	}
	var err error
	for i := 0; i < 2*maxBacklog/4000 && err == nil; i++ { // the ring and the backlogs hold fewer
		err = a.SendParts(b.Addr(), nil, [][]byte{make([]byte, 4000)})
	}
	if !errors.Is(err, ErrRingFull) {
		t.Fatalf("into a ring nobody reads: %v, want ErrRingFull", err)
	}
}

// TestSerialSends: after SerialSends, senders on several goroutines that
// serialize their sends under a lock of their own, as mx's boards do,
// interleave SendParts (which then takes no lock of the ring) with Send
// and SendStrict (which do) through many laps of a small ring: every
// frame arrives whole and in each sender's order, and the transports
// count every frame sent and received.
func TestSerialSends(t *testing.T) {
	a, b := newTestPair(t, ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: time.Minute}))
	defer a.Close()
	defer b.Close()
	a.SerialSends()
	const senders, each = 3, 400
	var mu sync.Mutex
	errs := make(chan error, senders)
	for g := range senders {
		go func() {
			var err error
			for i := 0; i < each && err == nil; i++ {
				head := []byte{byte(g), byte(i), byte(i >> 8)}
				body := bytes.Repeat([]byte{byte(g + i)}, (g*97+i*13)%300)
				mu.Lock()
				switch i % 3 {
				case 0:
					err = a.SendParts(b.Addr(), head, [][]byte{body})
				case 1:
					_, err = a.Send([]transport.Frame{{Peer: b.Addr(), Data: append(head, body...)}})
				default:
					_, err = a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: append(head, body...)}})
				}
				mu.Unlock()
			}
			errs <- err
		}()
	}
	next := make([]int, senders)
	frames := make([]transport.Frame, 8)
	for got := 0; got < senders*each; {
		k, err := b.Recv(frames, time.Minute)
		if err != nil {
			t.Fatalf("after %d frames: %v", got, err)
		}
		for _, f := range frames[:k] {
			if len(f.Data) < 3 || int(f.Data[0]) >= senders {
				t.Fatalf("frame %d: % x, not one that was sent", got, f.Data[:min(len(f.Data), 8)])
			}
			g, i := int(f.Data[0]), int(f.Data[1])|int(f.Data[2])<<8
			want := append([]byte{byte(g), byte(i), byte(i >> 8)}, bytes.Repeat([]byte{byte(g + i)}, (g*97+i*13)%300)...)
			if i != next[g] || !bytes.Equal(f.Data, want) {
				t.Fatalf("frame %d: sender %d's message %d (%d bytes), want its message %d intact", got, g, i, len(f.Data), next[g])
			}
			next[g]++
			got++
		}
	}
	for range senders {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s, r := counter(a, "shm frames sent"), counter(b, "shm frames received"); s != senders*each || r != senders*each {
		t.Fatalf("counted %d frames sent and %d received, want %d", s, r, senders*each)
	}
}

// TestHotStill: HotStill, the look at the hot rings' record words that a
// polling waiter makes between its Peeks, reports them still exactly while
// a Peek finds nothing on them: from a record's landing until it is taken
// it reports otherwise, and so once the ring's producer closed.
func TestHotStill(t *testing.T) {
	a, b := newTestPair(t, ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: 10 * time.Second}))
	defer a.Close()
	defer b.Close()
	send := func(i int) []byte {
		f := bytes.Repeat([]byte{byte(i)}, 8)
		if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: f}}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		return f
	}
	waitStirred := func(what string) {
		for k := 0; k < 1e6; k++ {
			if !b.HotStill() {
				return
			}
		}
		t.Fatalf("HotStill still true %s", what)
	}
	for i := range 4 {
		f := send(i)
		if i > 0 {
			// Hot since the first frame was taken: a record lands
			// where HotStill looks.
			waitStirred("after a record landed")
		}
		var data []byte
		for k := 0; k < 1e6 && data == nil; k++ {
			_, data, _, _ = b.Peek()
		}
		if !bytes.Equal(data, f) {
			t.Fatalf("frame %d: Peek shows %d bytes, want %d", i, len(data), len(f))
		}
		if i > 0 && b.HotStill() {
			t.Fatalf("frame %d: HotStill true with a record peeked, not taken", i)
		}
		b.Take()
		if len(b.hot) != 1 || !b.HotStill() {
			t.Fatalf("frame %d taken: %d hot rings, HotStill %v; want 1 and true", i, len(b.hot), b.HotStill())
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for b.HotStill() {
		if time.Now().After(deadline) {
			t.Fatal("HotStill true a minute after the producer closed")
		}
	}
	if _, _, ok, empty := b.Peek(); ok || empty {
		t.Fatalf("Peek where HotStill saw the producer close: ok %v, empty %v; want a miss for Recv", ok, empty)
	}
}

// TestPeekTake: Peek shows the next frame without taking it (Recv then
// returns it), Take consumes it, and a consumer that takes every frame
// with Peek and Take through many laps of a small ring gives the space
// back: its producer never finds the ring full. Pads are left to Recv.
func TestPeekTake(t *testing.T) {
	a, b := newTestPair(t, ringOpts(Options{MTU: 8000, RingSize: minRingLen, NoHugepages: true, FullWait: 10 * time.Second}))
	defer a.Close()
	defer b.Close()
	if _, _, ok, empty := b.Peek(); ok || !empty {
		t.Fatalf("Peek at no record: ok %v, empty %v; want a miss that says empty", ok, empty)
	}
	frames := make([]transport.Frame, 8)
	send := func(i int) []byte {
		f := bytes.Repeat([]byte{byte(i)}, 100+i%900)
		if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: f}}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		return f
	}
	// Not taken: Recv returns it.
	f := send(1)
	waitFor := func() (transport.NICID, []byte) {
		for k := 0; k < 1e6; k++ {
			if peer, data, ok, _ := b.Peek(); ok {
				return peer, data
			}
		}
		t.Fatal("Peek never showed the frame")
		return 0, nil
	}
	if peer, data := waitFor(); peer != a.Addr() || !bytes.Equal(data, f) {
		t.Fatalf("Peek = %v, %d bytes; want %v, %d bytes", peer, len(data), a.Addr(), len(f))
	}
	if n, _ := b.Recv(frames, time.Minute); n != 1 || !bytes.Equal(frames[0].Data, f) {
		t.Fatalf("Recv after an untaken Peek: %d frames", n)
	}
	// Taken, lap after lap (Peek gives the space of the untaken frame's
	// Recv back itself).
	for i := range 8 * minRingLen / 500 {
		f := send(i)
		if _, _, ok, empty := b.Peek(); !ok {
			if empty {
				t.Fatalf("round %d: Peek called rings empty that hold a record", i)
			}
			// A pad record: Recv skips it (and the frame is right behind:
			// it returns that too).
			if n, _ := b.Recv(frames, time.Minute); n != 1 || !bytes.Equal(frames[0].Data, f) {
				t.Fatalf("frame %d behind a pad: Recv got %d frames", i, n)
			}
			continue
		}
		if _, data := waitFor(); !bytes.Equal(data, f) {
			t.Fatalf("frame %d: Peek shows %d bytes, want %d", i, len(data), len(f))
		}
		b.Take()
	}
	if d := counter(a, "shm frames dropped (ring full)"); d != 0 {
		t.Fatalf("%d frames dropped: Take did not give the space back", d)
	}
	if n, _ := b.Recv(frames, 0); n != 0 {
		t.Fatalf("Recv after every frame was taken: %d frames", n)
	}
	if _, _, ok, empty := b.Peek(); ok || !empty {
		t.Fatalf("Peek after every frame was taken: ok %v, empty %v; want a miss that says empty", ok, empty)
	}
}
