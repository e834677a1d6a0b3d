// Package transporttest is the conformance suite every [transport.Transport]
// runs: the in-process loopback wire, kernel UDP sockets, AF_XDP and the
// transports still to come. A transport's own tests call [Run] (or [RunWith])
// with a function that builds a fresh pair of connected transports, and the
// suite checks, as subtests, what the message layer relies on:
//
//   - frames arrive byte-exact in both directions, from 0 bytes up to the
//     MTU, one at a time and in batches, with the sender's NIC id as Peer;
//   - a frame one byte over the MTU fails with [transport.ErrTooBig], after the
//     frames before it in the batch were sent;
//   - Recv with timeout 0 returns 0, nil at once on an empty transport, and a
//     bounded Recv returns 0, nil when nothing came;
//   - Close makes a blocked Recv (bounded or not) return
//     [transport.ErrClosed], and every later call returns it too;
//   - Send may be called from several goroutines at once;
//   - the Data of received frames stays intact until the next Recv, however
//     many frames arrive meanwhile;
//   - Addr and MTU are sane, and empty batches are no-ops;
//   - held frames (Hold) stay intact while later frames arrive through the
//     same buffers; holding more frames than the transport has buffers
//     loses none and blocks nothing (it copies or pushes back); Release
//     gives the buffers back (the held_now counter, where there is one,
//     returns to zero); Hold refuses frames it cannot name;
//   - frames sent from a registered Region arrive byte-exact, a copying
//     transport says so (InPlace false, CopiedSends) and an in-place one
//     completes (Pending returns to zero) once the receiver is done, before
//     the memory is reused; closed, foreign and outside regions are
//     refused; a transport that declares Options.InPlace proves it: every
//     frame counted in place, none copied;
//   - Close with frames held and in-place sends pending ends the holds and
//     completes the sends;
//   - a [transport.Sleeper]'s Wake ends a waiting Recv, and its ArmSleep
//     descriptor polls readable once a frame arrived.
//
// A transport that may lose frames under load (UDP, AF_XDP) sets
// Options.Lossy: the suite then retries lone frames, counts rather than
// demands batched ones, and ignores duplicates, but it still requires that
// every frame that arrives is byte-exact. A transport that pads short frames
// (raw Ethernet) sets Options.MinData.
//
// The suite never asserts wall time: timeouts in it only bound how long a
// broken transport can hang a test.
package transporttest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// Options describe what the suite may expect of a transport.
type Options struct {
	// Lossy is set for a transport that may lose, duplicate or reorder
	// frames (kernel sockets under load, a faulty wire). The suite then
	// requires only that most frames arrive, but that each one that does
	// is byte-exact.
	Lossy bool
	// MinData is set for a transport whose link pads short frames: a frame
	// shorter than MinData may arrive with extra trailing bytes, up to
	// MinData. The suite then checks only the bytes that were sent.
	MinData int
	// InPlace is set for a transport that sends frames of a registered
	// Region without copying them. The suite then requires it to say so
	// (Region.InPlace), to count every frame of the region as sent in
	// place and none as copied, and the region's memory to be unchanged
	// by the sends, as well as the byte-exact arrival and completion it
	// asks of every transport.
	InPlace bool
	// RegionMemory, when set, returns n bytes of memory for a's Register
	// (memory of the transport's own, such as a slice of an AF_XDP UMEM,
	// when only that can be sent in place); the suite otherwise registers
	// ordinary heap memory.
	RegionMemory func(t *testing.T, a transport.Transport, n int) []byte
}

// NewPair returns two open transports that can send to each other's Addr.
// The suite closes both; newPair registers cleanup (t.Cleanup) for anything
// else it made.
type NewPair func(t *testing.T) (a, b transport.Transport)

// Run runs the conformance suite on a lossless transport that does not pad.
func Run(t *testing.T, newPair NewPair) {
	RunWith(t, newPair, Options{})
}

// hangGuard bounds every wait of the suite; a transport that needs longer is
// broken (or the machine is).
const hangGuard = 20 * time.Second

// RunWith runs the conformance suite with the given options.
func RunWith(t *testing.T, newPair NewPair, opts Options) {
	s := &suite{opts: opts, newPair: newPair}
	t.Run("AddrMTU", s.addrMTU)
	t.Run("RoundTrip", s.roundTrip)
	t.Run("Batch", s.batch)
	t.Run("TooBig", s.tooBig)
	t.Run("EmptyBatches", s.emptyBatches)
	t.Run("PollEmpty", s.pollEmpty)
	t.Run("TimeoutEmpty", s.timeoutEmpty)
	t.Run("PollAfterTimeout", s.pollAfterTimeout)
	t.Run("CloseUnblocksRecv", s.closeUnblocks)
	t.Run("CloseUnblocksBoundedRecv", s.closeUnblocksBounded)
	t.Run("AfterClose", s.afterClose)
	t.Run("ConcurrentSend", s.concurrentSend)
	t.Run("DataStableUntilNextRecv", s.dataStable)
	t.Run("HoldSurvivesLaterFrames", s.holdSurvives)
	t.Run("HoldEverything", s.holdEverything)
	t.Run("HoldRefused", s.holdRefused)
	t.Run("SendInPlace", s.sendInPlace)
	t.Run("CloseWithHeldFrames", s.closeHeld)
	t.Run("Sleeper", s.sleeper)
}

type suite struct {
	opts    Options
	newPair NewPair
}

// pair builds a pair and closes it at the end of the test.
func (s *suite) pair(t *testing.T) (a, b transport.Transport) {
	t.Helper()
	a, b = s.newPair(t)
	if a == nil || b == nil {
		t.Fatal("newPair returned a nil transport")
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

func mtuOf(a, b transport.Transport) int { return min(a.MTU(), b.MTU()) }

// matches reports whether a received Data is the sent one, allowing the
// padding of a short frame.
func (s *suite) matches(got, want []byte) bool {
	if len(got) != len(want) {
		if len(want) >= s.opts.MinData || len(got) < len(want) || len(got) > s.opts.MinData {
			return false
		}
		got = got[:len(want)]
	}
	return string(got) == string(want)
}

// fill writes the deterministic content of the frame named key into b: key
// in the first 8 bytes when there is room, then pseudo-random bytes.
func fill(b []byte, key uint64) {
	x := key*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 24)
	}
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, key)
	}
}

func content(size int, key uint64) []byte {
	b := make([]byte, size)
	fill(b, key)
	return b
}

// sizesUpTo is the size table of the one-at-a-time test: every boundary the
// message layer cares about, clipped to the MTU.
func sizesUpTo(mtu int) []int {
	base := []int{0, 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 45, 46, 47, 59, 60, 61, 63, 64, 65,
		127, 128, 129, 255, 256, 511, 512, 1000, 1023, 1024, 1400, 1452, 1468, 1471, 1472, 1473,
		2048, 4096, 8192, 8968, 8986, 9000, 16384, 32768, 65507}
	var sizes []int
	for _, n := range base {
		if n < mtu-1 {
			sizes = append(sizes, n)
		}
	}
	return append(sizes, mtu-1, mtu)
}

func (s *suite) addrMTU(t *testing.T) {
	a, b := s.pair(t)
	if a.Addr() == b.Addr() {
		t.Errorf("both transports have NIC id %v", a.Addr())
	}
	for _, tr := range []transport.Transport{a, b} {
		if id := tr.Addr(); id&^transport.NICIDMask != 0 {
			t.Errorf("Addr() = %#x uses more than 48 bits", uint64(id))
		}
		if m := tr.MTU(); m < 64 {
			t.Errorf("MTU() = %d, want at least 64 (the mx headers alone need 48)", m)
		}
		if m1, m2 := tr.MTU(), tr.MTU(); m1 != m2 {
			t.Errorf("MTU() changed from %d to %d", m1, m2)
		}
	}
}

// recvOne waits up to timeout for one frame and copies it out.
func recvOne(t *testing.T, tr transport.Transport, timeout time.Duration) (transport.Frame, bool) {
	t.Helper()
	var fr [1]transport.Frame
	n, err := tr.Recv(fr[:], timeout)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if n == 0 {
		return transport.Frame{}, false
	}
	return transport.Frame{Peer: fr[0].Peer, Data: append([]byte(nil), fr[0].Data...)}, true
}

// roundTrip sends every size of the table one frame at a time, in both
// directions, and checks each frame as it arrives.
func (s *suite) roundTrip(t *testing.T) {
	a, b := s.pair(t)
	mtu := mtuOf(a, b)
	for dir, ends := range [][2]transport.Transport{{a, b}, {b, a}} {
		from, to := ends[0], ends[1]
		var sent [][]byte
		for _, size := range sizesUpTo(mtu) {
			want := content(size, uint64(dir)<<32|uint64(size))
			sent = append(sent, want)
			if !s.sendUntilReceived(t, from, to, want, sent[:len(sent)-1]) {
				return
			}
		}
	}
}

// sendUntilReceived sends want from one transport and waits for it at the
// other; a lossy transport may need it sent again and may deliver stale
// copies of earlier frames first.
func (s *suite) sendUntilReceived(t *testing.T, from, to transport.Transport, want []byte, earlier [][]byte) bool {
	t.Helper()
	attempts, wait := 1, hangGuard
	if s.opts.Lossy {
		attempts, wait = 50, 200*time.Millisecond
	}
	for range attempts {
		if n, err := from.Send([]transport.Frame{{Peer: to.Addr(), Data: want}}); n != 1 || err != nil {
			t.Fatalf("Send of %d bytes = %d, %v", len(want), n, err)
		}
		for {
			got, ok := recvOne(t, to, wait)
			if !ok {
				break // lost: send again (or fail below)
			}
			if got.Peer != from.Addr() {
				t.Fatalf("frame of %d bytes from %v, want Peer %v", len(got.Data), got.Peer, from.Addr())
			}
			if s.matches(got.Data, want) {
				return true
			}
			if s.opts.Lossy && s.isEarlier(got.Data, earlier) {
				continue
			}
			t.Errorf("sent %d bytes, received %d bytes that differ:\n got %x\nwant %x",
				len(want), len(got.Data), head(got.Data), head(want))
			return false
		}
	}
	t.Errorf("frame of %d bytes never arrived (%d attempts)", len(want), attempts)
	return false
}

func (s *suite) isEarlier(got []byte, earlier [][]byte) bool {
	for _, e := range earlier {
		if s.matches(got, e) {
			return true
		}
	}
	return false
}

// head abbreviates a frame for an error message.
func head(b []byte) []byte { return b[:min(len(b), 64)] }

// stream is a set of frames named by key, each with a size derived from it.
type stream struct {
	id    uint64 // high 16 bits of the keys
	count int
	mtu   int
}

func (st stream) key(i int) uint64 { return st.id<<48 | uint64(i) }

// size spreads the frames over 8..mtu, with the MTU itself and the smallest
// size both present.
func (st stream) size(i int) int {
	switch i % 16 {
	case 0:
		return st.mtu
	case 1:
		return 8
	}
	return 8 + int((uint64(i)*2654435761)%uint64(st.mtu-8+1))
}

// collector receives frames of known streams and checks each one.
type collector struct {
	s       *suite
	to      transport.Transport
	streams map[uint64]stream
	peers   map[uint64]transport.NICID // stream id -> sender
	seen    map[uint64]int             // key -> copies received
	bad     []string
}

func newCollector(s *suite, to transport.Transport) *collector {
	return &collector{s: s, to: to, streams: map[uint64]stream{}, peers: map[uint64]transport.NICID{}, seen: map[uint64]int{}}
}

func (c *collector) add(st stream, from transport.NICID) {
	c.streams[st.id] = st
	c.peers[st.id] = from
}

func (c *collector) want() int {
	n := 0
	for _, st := range c.streams {
		n += st.count
	}
	return n
}

// check verifies one received frame.
func (c *collector) check(fr transport.Frame) {
	if len(fr.Data) < 8 {
		c.bad = append(c.bad, fmt.Sprintf("runt frame of %d bytes from %v", len(fr.Data), fr.Peer))
		return
	}
	key := binary.LittleEndian.Uint64(fr.Data)
	st, ok := c.streams[key>>48]
	i := int(key & (1<<48 - 1))
	if !ok || i >= st.count {
		c.bad = append(c.bad, fmt.Sprintf("frame of %d bytes with unknown key %#x from %v: %x", len(fr.Data), key, fr.Peer, head(fr.Data)))
		return
	}
	if want := c.peers[st.id]; fr.Peer != want {
		c.bad = append(c.bad, fmt.Sprintf("frame %#x from %v, want Peer %v", key, fr.Peer, want))
	}
	if want := content(st.size(i), key); !c.s.matches(fr.Data, want) {
		c.bad = append(c.bad, fmt.Sprintf("frame %#x: received %d bytes, sent %d that differ:\n got %x\nwant %x",
			key, len(fr.Data), len(want), head(fr.Data), head(want)))
	}
	c.seen[key]++
}

// run receives in batches of 64 until every frame arrived, the transport
// stays quiet for quiet (once done is closed), or the hang guard expires.
func (c *collector) run(done <-chan struct{}, quiet time.Duration) {
	frames := make([]transport.Frame, 64)
	want := c.want()
	deadline := time.Now().Add(hangGuard)
	sendersDone := false
	for len(c.seen) < want && time.Now().Before(deadline) {
		if !sendersDone {
			select {
			case <-done:
				sendersDone = true
			default:
			}
		}
		wait := 50 * time.Millisecond
		if sendersDone {
			wait = quiet
		}
		n, err := c.to.Recv(frames, wait)
		if err != nil {
			c.bad = append(c.bad, fmt.Sprintf("Recv: %v", err))
			return
		}
		if n == 0 && sendersDone {
			return
		}
		for _, fr := range frames[:n] {
			c.check(fr)
		}
	}
}

// report fails the test for bad frames, and for lost or duplicated ones
// unless the transport is lossy.
func (c *collector) report(t *testing.T) {
	t.Helper()
	for i, msg := range c.bad {
		if i == 10 {
			t.Errorf("... and %d more", len(c.bad)-10)
			break
		}
		t.Error(msg)
	}
	want, dups := c.want(), 0
	for _, n := range c.seen {
		dups += n - 1
	}
	if c.s.opts.Lossy {
		t.Logf("%d of %d frames arrived, %d duplicates", len(c.seen), want, dups)
		if 2*len(c.seen) < want {
			t.Errorf("only %d of %d frames arrived: more loss than any wire should show on an idle host", len(c.seen), want)
		}
		return
	}
	if len(c.seen) != want {
		t.Errorf("%d of %d frames arrived on a lossless transport", len(c.seen), want)
	}
	if dups != 0 {
		t.Errorf("%d duplicate frames on a lossless transport", dups)
	}
}

// sendStream sends a stream in batches of batch frames, pausing briefly
// between batches on a lossy transport so a socket buffer is not the test.
func (s *suite) sendStream(from transport.Transport, to transport.NICID, st stream, batch int) error {
	frames := make([]transport.Frame, 0, batch)
	for i := 0; i < st.count; {
		frames = frames[:0]
		for ; i < st.count && len(frames) < batch; i++ {
			frames = append(frames, transport.Frame{Peer: to, Data: content(st.size(i), st.key(i))})
		}
		for sent := 0; sent < len(frames); {
			n, err := from.Send(frames[sent:])
			if err != nil {
				return fmt.Errorf("sending a batch of %d: sent %d: %w", len(frames)-sent, n, err)
			}
			if n == 0 {
				return fmt.Errorf("sending a batch of %d: Send returned 0, nil", len(frames)-sent)
			}
			sent += n
		}
		if s.opts.Lossy {
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// batch streams frames of many sizes in batches, both directions at once.
func (s *suite) batch(t *testing.T) {
	a, b := s.pair(t)
	mtu := mtuOf(a, b)
	const count = 512
	type dir struct {
		from, to transport.Transport
		st       stream
	}
	dirs := []dir{{a, b, stream{id: 1, count: count, mtu: mtu}}, {b, a, stream{id: 2, count: count, mtu: mtu}}}
	var wg sync.WaitGroup
	cols := make([]*collector, len(dirs))
	errs := make([]error, len(dirs))
	for i, d := range dirs {
		cols[i] = newCollector(s, d.to)
		cols[i].add(d.st, d.from.Addr())
		done := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer close(done)
			errs[i] = s.sendStream(d.from, d.to.Addr(), d.st, 32)
		}()
		go func() {
			defer wg.Done()
			cols[i].run(done, s.quiet())
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Error(errs[i])
		}
		cols[i].report(t)
	}
}

// quiet is how long a receiver waits for stragglers once the senders are
// done. A lossless transport delivers everything, so the collector stops
// when all arrived and this only bounds a failing test.
func (s *suite) quiet() time.Duration {
	if s.opts.Lossy {
		return 500 * time.Millisecond
	}
	return 2 * time.Second
}

func (s *suite) tooBig(t *testing.T) {
	a, b := s.pair(t)
	mtu := a.MTU()
	n, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: make([]byte, mtu+1)}})
	if n != 0 || !errors.Is(err, transport.ErrTooBig) {
		t.Errorf("Send of MTU+1 (%d) bytes = %d, %v; want 0 and ErrTooBig", mtu+1, n, err)
	}
	ok := content(min(mtu, b.MTU()), 77)
	frames := []transport.Frame{
		{Peer: b.Addr(), Data: ok},
		{Peer: b.Addr(), Data: make([]byte, mtu+1)},
		{Peer: b.Addr(), Data: ok},
	}
	n, err = a.Send(frames)
	if n != 1 || !errors.Is(err, transport.ErrTooBig) {
		t.Errorf("Send of [MTU, MTU+1, MTU] = %d, %v; want 1 and ErrTooBig", n, err)
	}
	if s.opts.Lossy {
		return
	}
	got, ok2 := recvOne(t, b, hangGuard)
	if !ok2 || !s.matches(got.Data, ok) {
		t.Errorf("the frame before the oversized one did not arrive intact (arrived: %v)", ok2)
	}
	if extra, more := recvOne(t, b, 50*time.Millisecond); more {
		t.Errorf("a frame of %d bytes arrived after the oversized one stopped the batch", len(extra.Data))
	}
}

// emptyBatches checks that sending nothing and receiving into nothing are
// harmless no-ops.
func (s *suite) emptyBatches(t *testing.T) {
	a, b := s.pair(t)
	if n, err := a.Send(nil); n != 0 || err != nil {
		t.Errorf("Send(nil) = %d, %v; want 0, nil", n, err)
	}
	if n, err := b.Recv(nil, 0); n != 0 || err != nil {
		t.Errorf("Recv(nil, 0) = %d, %v; want 0, nil", n, err)
	}
}

func (s *suite) pollEmpty(t *testing.T) {
	a, _ := s.pair(t)
	frames := make([]transport.Frame, 8)
	for range 100 {
		if n, err := a.Recv(frames, 0); n != 0 || err != nil {
			t.Fatalf("Recv(timeout 0) on an idle transport = %d, %v", n, err)
		}
	}
}

func (s *suite) timeoutEmpty(t *testing.T) {
	a, _ := s.pair(t)
	frames := make([]transport.Frame, 8)
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, 20 * time.Millisecond} {
		if n, err := a.Recv(frames, d); n != 0 || err != nil {
			t.Errorf("Recv(timeout %v) on an idle transport = %d, %v; want 0, nil", d, n, err)
		}
	}
}

// pollAfterTimeout checks that a bounded Recv that timed out leaves no
// trace: the busy-poll loop that follows (timeout 0) still gets frames.
// (A read deadline left armed once made every later poll fail at once.)
func (s *suite) pollAfterTimeout(t *testing.T) {
	a, b := s.pair(t)
	frames := make([]transport.Frame, 8)
	if n, err := b.Recv(frames, time.Millisecond); n != 0 || err != nil {
		t.Fatalf("Recv(1ms) on an idle transport = %d, %v", n, err)
	}
	want := content(64, 0x706f6c6c)
	attempts, window := 1, hangGuard
	if s.opts.Lossy {
		attempts, window = 50, 200*time.Millisecond
	}
	for range attempts {
		if n, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: want}}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		// Poll only (timeout 0), for at most window per attempt.
		for deadline := time.Now().Add(window); time.Now().Before(deadline); {
			n, err := b.Recv(frames, 0)
			if err != nil {
				t.Fatalf("Recv(0) after a timed-out Recv: %v", err)
			}
			for _, f := range frames[:n] {
				if s.matches(f.Data, want) {
					return
				}
			}
			if n == 0 {
				runtime.Gosched()
			}
		}
	}
	t.Fatal("after a bounded Recv timed out, polling with timeout 0 never returned the frame sent")
}

// blockedRecv starts a Recv with the timeout and returns its result channel.
func blockedRecv(tr transport.Transport, timeout time.Duration) <-chan error {
	res := make(chan error, 1)
	go func() {
		frames := make([]transport.Frame, 4)
		n, err := tr.Recv(frames, timeout)
		if err == nil {
			err = fmt.Errorf("receiving: Recv returned %d, nil", n)
		}
		res <- err
	}()
	return res
}

func (s *suite) closeUnblocks(t *testing.T)        { s.closeDuring(t, -1) }
func (s *suite) closeUnblocksBounded(t *testing.T) { s.closeDuring(t, hangGuard) }

func (s *suite) closeDuring(t *testing.T, timeout time.Duration) {
	a, _ := s.pair(t)
	res := blockedRecv(a, timeout)
	time.Sleep(20 * time.Millisecond) // let Recv block; the test holds either way
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Recv blocked at Close returned %v, want ErrClosed", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Close did not unblock Recv")
	}
}

func (s *suite) afterClose(t *testing.T) {
	a, b := s.pair(t)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: []byte("late")}}); n != 0 || !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close = %d, %v; want 0 and ErrClosed", n, err)
	}
	frames := make([]transport.Frame, 4)
	if n, err := a.Recv(frames, 0); n != 0 || !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Recv(0) after Close = %d, %v; want 0 and ErrClosed", n, err)
	}
	select {
	case err := <-blockedRecv(a, -1):
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Recv(-1) after Close returned %v, want ErrClosed", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Recv(-1) after Close blocked")
	}
	// A second Close must not panic or hang; what it returns is up to
	// the transport.
	_ = a.Close()
}

// concurrentSend has several goroutines send to one receiver at once.
func (s *suite) concurrentSend(t *testing.T) {
	a, b := s.pair(t)
	mtu := mtuOf(a, b)
	const senders, count = 4, 200
	col := newCollector(s, b)
	streams := make([]stream, senders)
	for i := range streams {
		streams[i] = stream{id: uint64(10 + i), count: count, mtu: mtu}
		col.add(streams[i], a.Addr())
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, senders)
	for i := range senders {
		wg.Go(func() {
			errs[i] = s.sendStream(a, b.Addr(), streams[i], 1+i*5)
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	col.run(done, s.quiet())
	<-done
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	col.report(t)
}

// dataStable checks that frames arriving after a Recv do not overwrite the
// Data it returned.
func (s *suite) dataStable(t *testing.T) {
	a, b := s.pair(t)
	mtu := mtuOf(a, b)
	st := stream{id: 30, count: 8, mtu: mtu}
	if err := s.sendStream(a, b.Addr(), st, 8); err != nil {
		t.Fatal(err)
	}
	frames := make([]transport.Frame, 8)
	n, err := b.Recv(frames, hangGuard)
	if err != nil || n == 0 {
		t.Fatalf("Recv = %d, %v; want frames", n, err)
	}
	snap := make([][]byte, n)
	for i := range n {
		snap[i] = append([]byte(nil), frames[i].Data...)
	}
	// Flood the receiver with frames of other content, enough to wrap any
	// reasonable ring, and give them time to land. They are small: any
	// write into a lent buffer changes its first bytes.
	flood := stream{id: 31, count: 1024, mtu: min(mtu, 256)}
	if err := s.sendStream(a, b.Addr(), flood, 64); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	for i := range n {
		if string(frames[i].Data) != string(snap[i]) {
			t.Errorf("frame %d of the last Recv changed before the next Recv:\n now %x\nwas %x", i, head(frames[i].Data), head(snap[i]))
		}
	}
	// The next Recv may reuse them; it must still work.
	if _, err := b.Recv(frames, 0); err != nil {
		t.Errorf("Recv after the flood: %v", err)
	}
}
