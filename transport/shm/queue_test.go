package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport"
)

// newTestQueue returns a queue segment of size bytes (a power of two),
// written empty for its first lap, as Open makes one.
// It is mapped as the transport maps one, so the race detector sees only
// the accesses the protocol orders (it does not watch such mappings).
func newTestQueue(t testing.TB, size int) []byte {
	seg, fd, err := newSegment("gomx-test-queue", queueSegLen(size), false)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	t.Cleanup(func() { seg.unmap() })
	initQueue(seg.mem)
	return seg.mem
}

// enqueue claims and publishes one frame, waiting (bounded) for room.
func enqueue(t testing.TB, p *qProducer, f []byte) {
	k := uint64(cellsFor(len(f)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, ok := p.claim(k); ok {
			p.put(c, len(f), f, nil)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("producer %d: no room in the queue for 10s", p.id)
			return
		}
		runtime.Gosched()
	}
}

// testFrame is producer id's i-th frame: its id and number, then bytes
// derived from both, of a length that crosses cell boundaries.
func testFrame(id, i int) []byte {
	n := 8 + (i*37+id*11)%300
	f := make([]byte, n)
	binary.LittleEndian.PutUint32(f, uint32(id))
	binary.LittleEndian.PutUint32(f[4:], uint32(i))
	for j := 8; j < n; j++ {
		f[j] = byte(id*31 + i*7 + j)
	}
	return f
}

// TestQueueManyProducers has producers write frames of many lengths into
// one small queue at once (it fills and wraps many times) while the
// consumer takes them: every frame arrives byte for byte, each producer's
// in the order it wrote them.
func TestQueueManyProducers(t *testing.T) {
	const producers, frames = 8, 2000
	seg := newTestQueue(t, queueSizeFor(0, 1024))
	cons := newQConsumer(seg)
	var wg sync.WaitGroup
	for id := 1; id <= producers; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := qProducer{queue: newQueue(seg), id: uint32(id)}
			for i := range frames {
				enqueue(t, &p, testFrame(id, i))
			}
		}()
	}
	next := make([]int, producers+1)
	deadline := time.Now().Add(30 * time.Second)
	for got := 0; got < producers*frames; {
		f, k, id, kind, err := cons.parse(1024, new([]byte))
		if err != nil {
			t.Fatal(err)
		}
		if kind != recFrame {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames after 30s", got, producers*frames)
			}
			cons.release(true)
			runtime.Gosched()
			continue
		}
		src := int(binary.LittleEndian.Uint32(f))
		if src < 1 || src > producers || uint32(src) != id {
			t.Fatalf("frame from producer %d in a record of producer %d", src, id)
		}
		if want := testFrame(src, next[src]); !bytes.Equal(f, want) {
			t.Fatalf("producer %d frame %d: got %d bytes %x, want %d bytes %x", src, next[src], len(f), f[:8], len(want), want[:8])
		}
		next[src]++
		got++
		cons.advance(k)
		if got%16 == 0 {
			cons.release(false)
		}
	}
	wg.Wait()
}

// TestQueueClaimedCellSkipped: a producer that claimed cells and never
// published them (it was killed between the two) holds the consumer there
// until its death is known; then the consumer skips exactly that record and
// delivers what other producers wrote after it.
func TestQueueClaimedCellSkipped(t *testing.T) {
	seg := newTestQueue(t, queueSizeFor(0, 1024))
	cons := newQConsumer(seg)
	dead := qProducer{queue: newQueue(seg), id: 7}
	live := qProducer{queue: newQueue(seg), id: 8}
	enqueue(t, &live, testFrame(8, 0))
	if _, ok := dead.claim(3); !ok { // claimed, never published
		t.Fatal("no room for the claim")
	}
	enqueue(t, &live, testFrame(8, 1))
	f, k, _, kind, err := cons.parse(1024, new([]byte))
	if err != nil || kind != recFrame || !bytes.Equal(f, testFrame(8, 0)) {
		t.Fatalf("first record: kind %d, %v", kind, err)
	}
	cons.advance(k)
	_, k, id, kind, err := cons.parse(1024, new([]byte))
	if err != nil || kind != recClaimed || id != 7 || k != 3 {
		t.Fatalf("claimed record: kind %d id %d k %d, %v", kind, id, k, err)
	}
	cons.skip(k) // its producer is dead
	f, _, _, kind, err = cons.parse(1024, new([]byte))
	if err != nil || kind != recFrame || !bytes.Equal(f, testFrame(8, 1)) {
		t.Fatalf("record after the skipped one: kind %d, %v", kind, err)
	}
}

// TestQueueDeadClaimBeforeTailMoved: a producer killed between its swap on
// a cell's word and its move of the tail leaves the tail at its claim; when
// no other producer claims before the consumer skips that claim and frees
// its cells, the queue still takes claims after it (the consumer moved the
// tail), rather than looking full for good.
func TestQueueDeadClaimBeforeTailMoved(t *testing.T) {
	seg := newTestQueue(t, queueSizeFor(0, 1024))
	cons := newQConsumer(seg)
	dead := qProducer{queue: newQueue(seg), id: 7}
	live := qProducer{queue: newQueue(seg), id: 8}
	c := dead.tail.Load()
	// The dead producer's claim, up to the move of the tail it never made.
	if !dead.word(c).CompareAndSwap(qWord(c, qEmpty, 0, 0), qWord(c, qClaimed, 3, dead.id)) {
		t.Fatal("the claim's swap failed on a fresh queue")
	}
	_, k, id, kind, err := cons.parse(1024, new([]byte))
	if err != nil || kind != recClaimed || id != dead.id || k != 3 {
		t.Fatalf("claimed record: kind %d id %d k %d, %v", kind, id, k, err)
	}
	cons.skip(k)
	cons.release(true)
	for i := range 3 {
		f := testFrame(8, i)
		c, ok := live.claim(uint64(cellsFor(len(f))))
		if !ok {
			t.Fatalf("claim %d after the skipped one: the queue looks full (tail %d, head %d, word %#x)",
				i, live.tail.Load(), live.head.Load(), live.word(live.tail.Load()).Load())
		}
		live.put(c, len(f), f, nil)
	}
	for i := range 3 {
		f, k, _, kind, err := cons.parse(1024, new([]byte))
		if err != nil || kind != recFrame || !bytes.Equal(f, testFrame(8, i)) {
			t.Fatalf("record %d after the skipped claim: kind %d, %v", i, kind, err)
		}
		cons.advance(k)
	}
}

// TestQueueFullThenFreed: a producer finds a queue the consumer has not
// freed full, and claims again once the consumer released the cells.
func TestQueueFullThenFreed(t *testing.T) {
	seg := newTestQueue(t, 16*cellLen)
	cons := newQConsumer(seg)
	p := qProducer{queue: newQueue(seg), id: 1}
	for i := range 16 {
		c, ok := p.claim(1)
		if !ok {
			t.Fatalf("claim %d of 16 failed", i)
		}
		p.put(c, 4, []byte("abcd"), nil)
	}
	if _, ok := p.claim(1); ok {
		t.Fatal("claimed a cell of a full queue")
	}
	for range 16 {
		_, k, _, kind, err := cons.parse(256, new([]byte))
		if err != nil || kind != recFrame {
			t.Fatalf("kind %d, %v", kind, err)
		}
		cons.advance(k)
	}
	if _, ok := p.claim(1); ok {
		t.Fatal("claimed a cell the consumer has not released")
	}
	cons.release(true)
	if _, ok := p.claim(1); !ok {
		t.Fatal("no claim after the consumer released the queue")
	}
}

// oracleQueueFrame reads the record at cursor cur of cells (n a power of
// two) from the layout as queue.go describes it in prose, with code of its
// own: the word's fields, the length in the first cell, 48 then 56 bytes a
// cell past each cell's word.
func oracleQueueFrame(cells []byte, cur uint64, mtu int) (frame []byte, k uint64, state int, ok bool) {
	n := uint64(len(cells) / 64)
	at := (cur % n) * 64
	w := binary.LittleEndian.Uint64(cells[at:])
	if w&0xFFFFFFFF == (cur-n)&0xFFFFFFFF {
		return nil, 0, 0, true // a lap ago: not released yet, so empty
	}
	if w&0xFFFFFFFF != cur&0xFFFFFFFF {
		return nil, 0, 0, false
	}
	state = int(w>>32) & 3
	k = (w >> 34) & 0xFFFF
	switch state {
	case 0:
		return nil, 0, 0, w>>32 == 0
	case 1:
		return nil, k, 1, k >= 1 && k <= n/3
	case 2:
	default:
		return nil, 0, 0, false
	}
	l := int(binary.LittleEndian.Uint32(cells[at+8:]))
	if l > mtu || k > n/3 {
		return nil, 0, 0, false
	}
	want := uint64(1)
	if l > 48 {
		want += uint64((l - 48 + 55) / 56)
	}
	if want != k {
		return nil, 0, 0, false
	}
	for i := uint64(0); i < k; i++ {
		c := ((cur + i) % n) * 64
		from := c + 8
		if i == 0 {
			from = c + 16
		}
		frame = append(frame, cells[from:c+64]...)
	}
	return frame[:l], k, 2, true
}

// FuzzQueueParse feeds arbitrary queue contents and cursors (what a buggy
// or hostile producer could leave in the cells) to the consumer's parser:
// it must never panic, and must agree with oracleQueueFrame.
func FuzzQueueParse(f *testing.F) {
	seg := newTestQueue(f, 16*cellLen)
	p := qProducer{queue: newQueue(seg), id: 3}
	for _, l := range []int{5, 48, 49, 200} {
		c, _ := p.claim(uint64(cellsFor(l)))
		p.put(c, l, bytes.Repeat([]byte{byte(l)}, l), nil)
	}
	p.claim(2)
	cells := seg[qCellsOff:]
	for _, cur := range []uint64{0, 1, 2, 7, 8, 3} {
		f.Add(append([]byte(nil), cells...), cur, 300)
	}
	f.Fuzz(func(t *testing.T, in []byte, cur uint64, mtu int) {
		n := 16
		for n*2*cellLen <= len(in) && n < 1024 {
			n *= 2
		}
		if len(in) < n*cellLen || mtu < 0 || mtu > 1<<20 {
			return
		}
		seg := make([]byte, queueSegLen(n*cellLen))
		copy(seg[qCellsOff:], in)
		q := newQConsumer(seg)
		q.cur, q.wordAt = cur, q.word(cur)
		frame, k, _, kind, err := q.parse(mtu, new([]byte))
		want, wk, wstate, ok := oracleQueueFrame(seg[qCellsOff:], cur, mtu)
		if !ok {
			if err == nil {
				t.Fatalf("parsed a broken record (kind %d, k %d)", kind, k)
			}
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("error %v is not errCorrupt", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("refused a valid record: %v", err)
		}
		switch {
		case wstate == 0 && kind != recNone,
			wstate == 1 && (kind != recClaimed || k != wk),
			wstate == 2 && (kind != recFrame || k != wk || !bytes.Equal(frame, want)):
			t.Fatalf("parse: kind %d k %d %d bytes; oracle: state %d k %d %d bytes", kind, k, len(frame), wstate, wk, len(want))
		}
	})
}

// ringOpts gives every pair a lane at its first frame, for tests of the
// lanes themselves (rings, hot and cold, their accounting).
func ringOpts(o Options) Options {
	o.LaneAfter, o.Lanes = -1, 64
	return o
}

func must(v int, err error) int {
	if err != nil {
		panic(err)
	}
	return v
}

// TestQueueProducerKilledMidEnqueue: a child process claims cells in our
// receive queue and is killed before it publishes them. The frames another
// producer queued behind its claim wait until the child is known dead, then
// arrive, in order, past the skipped record (counted); nothing of the child
// stays mapped, and no file stays in the directory.
func TestQueueProducerKilledMidEnqueue(t *testing.T) {
	a, dir := openChecked(t)
	b, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cmd, out := spawn(t, os.Args[0], nil, fmt.Sprintf("claim %s %d %d", dir, 78, a.Board()))
	waitReady(t, out)
	child := NICBase | 78
	if got := recvFrom(t, a, child); string(got) != "hello" {
		t.Fatalf("got %q", got)
	}
	const after = 20
	for i := range after {
		if _, err := b.Send([]transport.Frame{{Peer: a.Addr(), Data: []byte(fmt.Sprintf("after %d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	frames := make([]transport.Frame, 8)
	// The claim holds the queue while its producer lives.
	if n, err := a.Recv(frames, 20*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("Recv past a live producer's claim: %d frames, %v", n, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < after; {
		n, err := a.Recv(frames, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames[:n] {
			if want := fmt.Sprintf("after %d", i); f.Peer != b.Addr() || string(f.Data) != want {
				t.Fatalf("got %q from %v, want %q from %v", f.Data, f.Peer, want, b.Addr())
			}
			i++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames behind the dead claim: %v", i, after, a.Counters())
		}
	}
	if c := counter(a, "shm queue claims of dead producers skipped"); c != 1 {
		t.Fatalf("%d claims skipped, want 1", c)
	}
	// The killed child left only its socket file: the next Open of the
	// directory removes it (leaktest.Check then finds nothing).
	c, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if n := counter(c, "shm stale sockets removed at open"); n != 1 {
		t.Errorf("%d stale sockets removed, want the child's", n)
	}
	c.Close()
}

// TestLaneHandOverKeepsOrder: producers send numbered frames of many
// lengths to one receiver at once; each pair moves from the queue to a
// lane after LaneAfter frames, or stays on the queue when the receiver's
// lanes are taken. Every frame arrives byte for byte and each producer's
// in order, across the hand-over, and no transport has more lanes either
// way than Lanes.
func TestLaneHandOverKeepsOrder(t *testing.T) {
	const producers, frames, lanes = 4, 600, 2
	opts := Options{MTU: 4096, LaneAfter: 8, Lanes: lanes, QueueSize: 16 << 10}
	boards := openMany(t, producers+1, opts)
	rx := boards[0]
	var wg sync.WaitGroup
	for p := 1; p <= producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range frames {
				if _, err := boards[p].SendStrict([]transport.Frame{{Peer: rx.Addr(), Data: testFrame(p, i)}}); err != nil {
					t.Errorf("producer %d frame %d: %v", p, i, err)
					return
				}
			}
		}()
	}
	from := make(map[transport.NICID]int)
	for p := 1; p <= producers; p++ {
		from[boards[p].Addr()] = p
	}
	next := make([]int, producers+1)
	buf := make([]transport.Frame, 16)
	deadline := time.Now().Add(60 * time.Second)
	for got := 0; got < producers*frames; {
		n, err := rx.Recv(buf, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range buf[:n] {
			p := from[f.Peer]
			if p == 0 {
				t.Fatalf("a frame from unknown board %v", f.Peer)
			}
			if want := testFrame(p, next[p]); !bytes.Equal(f.Data, want) {
				t.Fatalf("producer %d: frame %d differs (got %d bytes, number %d)", p, next[p], len(f.Data), binary.LittleEndian.Uint32(f.Data[4:]))
			}
			next[p]++
			got++
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %v of %d each after 60s: %v", next[1:], frames, rx.Counters())
		}
	}
	wg.Wait()
	// A producer goes on through the queue while it waits for the answer
	// to its lane, which may come after its last frame: so may the
	// receiver's mapping of the lane it answers for.
	var refused, opened uint64
	waitFor(t, "every lane answered", func() bool {
		refused, opened = 0, 0
		for _, b := range boards[1:] {
			refused += counter(b, "shm lanes refused by peers")
			opened += counter(b, "shm lanes opened")
		}
		return refused+opened >= producers
	})
	if refused != producers-lanes || opened != lanes {
		t.Errorf("%d lanes opened and %d refused, want %d and %d", opened, refused, lanes, producers-lanes)
	}
	if f := rx.Footprint(); f.RingsIn != lanes {
		t.Errorf("the receiver reads %d lanes, want %d", f.RingsIn, lanes)
	}
}

// TestFootprintQueues: boards that each send a few frames to every other
// map their own queue, one queue per peer and their spare lanes (one per
// peer dialed, at most Lanes: spare.go), and no ring, as the transport
// counts it and as the kernel lists it.
func TestFootprintQueues(t *testing.T) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	base := mappedGomx(t)
	const n = 6
	var boards []*Transport
	for range n {
		b, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		boards = append(boards, b)
		defer b.Close()
	}
	allToAll(t, boards)
	var mapped int64
	q := int64(queueSegLen(boards[0].opts.QueueSize))
	for i, b := range boards {
		f := b.Footprint()
		b.spareMu.Lock()
		spares, sb := len(b.spares), int64(0)
		for _, s := range b.spares {
			sb += int64(len(s.seg.mem))
		}
		b.spareMu.Unlock()
		if spares != min(b.opts.Lanes, n-1) {
			t.Errorf("board %d holds %d spare lanes, want %d", i, spares, min(b.opts.Lanes, n-1))
		}
		if f.RingsOut != 0 || f.RingsIn != 0 || f.Peers != n-1 || f.MappedBytes != n*q+sb || f.OwnedBytes != q+sb || f.SpareBytes != sb {
			t.Errorf("board %d: %+v; want no lane, %d peers, %d bytes mapped and %d owned", i, f, n-1, n*q+sb, q+sb)
		}
		mapped += f.MappedBytes
	}
	if got := mappedGomx(t) - base; got != mapped {
		t.Errorf("the boards count %d bytes mapped, the kernel lists %d", mapped, got)
	}
}

// TestLaneMadeOffTheSendPath: the send after which a pair asks for its
// lane does not make the lane's segment itself (mapping it populated is
// milliseconds of zeroing on a loaded host, which the peer, waiting for
// that very frame, would wait through): with the segment held back, every
// send returns and every frame arrives, in order, through the queue, and
// no lane is mapped; once the segment is made, the pair takes its lane,
// and its frames go on, in order, with none put into a backlog. (Without
// a spare lane, made at the dial: TestSpareLaneTakenAtOnce.)
func TestLaneMadeOffTheSendPath(t *testing.T) {
	const laneAfter, before, after = 8, 40, 40
	a, b := newTestPair(t, Options{MTU: 4096, LaneAfter: laneAfter, Lanes: 1, NoSpareLanes: true})
	defer a.Close()
	defer b.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before the Closes, which wait for the lane's maker
	a.laneSeg = func(name string, n int, huge bool) (segment, int, error) {
		close(entered)
		<-release
		return newSegment(name, n, huge)
	}
	send := func(from, to int) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			for i := from; i < to; i++ {
				if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: testFrame(1, i)}}); err != nil {
					done <- fmt.Errorf("frame %d: %w", i, err)
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			unblock()
			t.Fatal("a send waits for the lane's segment to be made")
		}
	}
	buf := make([]transport.Frame, 8)
	recv := func(from, to int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := from; i < to; {
			n, err := b.Recv(buf, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range buf[:n] {
				if want := testFrame(1, i); f.Peer != a.Addr() || !bytes.Equal(f.Data, want) {
					t.Fatalf("frame %d differs (got %d bytes from %v, number %d)", i, len(f.Data), f.Peer, binary.LittleEndian.Uint32(f.Data[4:]))
				}
				i++
			}
			if time.Now().After(deadline) {
				t.Fatalf("frame %d of %d..%d not received", i, from, to)
			}
		}
	}
	send(0, before)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("no lane asked for after %d frames", before)
	}
	recv(0, before)
	if f := a.Footprint(); f.RingsOut != 0 {
		t.Errorf("a lane is written before its segment was made: %+v", f)
	}
	unblock()
	waitFor(t, "the lane to be answered", func() bool { return counter(a, "shm lanes opened") == 1 })
	send(before, before+after)
	recv(before, before+after)
	if f := a.Footprint(); f.RingsOut != 1 {
		t.Errorf("the pair writes %d lanes, want 1", f.RingsOut)
	}
	if n := counter(a, "shm frames that waited in a backlog"); n != 0 {
		t.Errorf("%d frames waited in a backlog, want 0", n)
	}
}

// TestQueueTakesMaxProducers: a receive queue takes MaxProducers
// producers and refuses the next one: its dial fails with
// transport.ErrUnreachable, the receiver counts the refused connection,
// and the producers already in go on; once an id is free again, a
// producer gets it. Placeholders hold all ids but the last, so the test
// opens three boards rather than 16,384.
func TestQueueTakesMaxProducers(t *testing.T) {
	a, b := newTestPair(t, Options{})
	c, err := Open(Options{Dir: a.opts.Dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
		c.Close()
	})
	placeholder := &inRing{}
	a.inMu.Lock()
	for id := uint32(1); id < MaxProducers; id++ {
		a.qProd[id] = placeholder
	}
	a.inMu.Unlock()
	t.Cleanup(func() {
		a.inMu.Lock()
		for id, r := range a.qProd {
			if r == placeholder {
				delete(a.qProd, id)
			}
		}
		a.inMu.Unlock()
	})
	send := func(p *Transport, msg string) error {
		_, err := p.Send([]transport.Frame{{Peer: a.Addr(), Data: []byte(msg)}})
		return err
	}
	if err := send(b, "last id"); err != nil {
		t.Fatalf("producer %d of %d: %v", MaxProducers, MaxProducers, err)
	}
	if got := recvFrom(t, a, b.Addr()); string(got) != "last id" {
		t.Fatalf("got %q from the last producer", got)
	}
	if err := send(c, "one too many"); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("producer %d of %d: %v, want transport.ErrUnreachable", MaxProducers+1, MaxProducers, err)
	}
	if n := counter(a, "shm connections refused"); n != 1 {
		t.Fatalf("the receiver counted %d refused connections, want 1", n)
	}
	if err := send(b, "still in"); err != nil {
		t.Fatal(err)
	}
	if got := recvFrom(t, a, b.Addr()); string(got) != "still in" {
		t.Fatalf("got %q from the last producer after the refusal", got)
	}
	a.inMu.Lock()
	delete(a.qProd, 77)
	a.inMu.Unlock()
	if err := send(c, "freed id"); err != nil {
		t.Fatalf("with id 77 free: %v", err)
	}
	if got := recvFrom(t, a, c.Addr()); string(got) != "freed id" {
		t.Fatalf("got %q from the producer that took the freed id", got)
	}
}
