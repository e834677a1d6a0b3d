package fault_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/transporttest"
	"github.com/gomx-dev/gomx/transport/udp"
	"github.com/gomx-dev/gomx/xdp/xdptest"
)

// loopPair attaches two ports to a fresh fault-free loopback network.
func loopPair(t *testing.T) (a, b *loopback.Port) {
	t.Helper()
	n := loopback.NewNetwork(loopback.Options{QueueLen: 8192})
	t.Cleanup(func() { n.Close() })
	a, err := n.Attach(1)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = n.Attach(2); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func wrap(t *testing.T, tr transport.Transport, o fault.WrapOptions) *fault.Transport {
	t.Helper()
	w, err := fault.Wrap(tr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// The wrapper with faults off passes the conformance suite over the
// loopback wire and over kernel UDP.
func TestConformance(t *testing.T) {
	t.Run("loopback", func(t *testing.T) {
		transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
			a, b := loopPair(t)
			return wrap(t, a, fault.WrapOptions{}), wrap(t, b, fault.WrapOptions{})
		})
	})
	t.Run("udp", func(t *testing.T) {
		transporttest.RunWith(t, func(t *testing.T) (transport.Transport, transport.Transport) {
			return wrap(t, listenUDP(t), fault.WrapOptions{}), wrap(t, listenUDP(t), fault.WrapOptions{})
		}, transporttest.Options{Lossy: true})
	})
}

// With faults on (but no corruption, which the suite forbids), on either
// side, the wrapper still passes the suite in its lossy mode: every frame
// that arrives is byte-exact and stays so until the next Recv.
func TestConformanceFaulty(t *testing.T) {
	f := fault.Options{Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Seed: 1}
	for _, c := range []struct {
		name string
		o    fault.WrapOptions
	}{
		{"send", fault.WrapOptions{Send: f}},
		{"recv", fault.WrapOptions{Recv: f}},
		{"delay", fault.WrapOptions{Send: fault.Options{Delay: 50 * time.Microsecond, Reorder: 0.1}, Recv: fault.Options{Delay: 50 * time.Microsecond, Duplicate: 0.1, Seed: 2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunWith(t, func(t *testing.T) (transport.Transport, transport.Transport) {
				a, b := loopPair(t)
				o2 := c.o
				o2.Send.Seed++
				o2.Recv.Seed++
				return wrap(t, a, c.o), wrap(t, b, o2)
			}, transporttest.Options{Lossy: true})
		})
	}
}

func listenUDP(t *testing.T) *udp.Transport {
	t.Helper()
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp transport unavailable (%v): needs an IPv4 loopback interface", err)
	}
	return tr
}

// recvN receives frames until want arrived, copying each.
func recvN(t *testing.T, tr transport.Transport, want int, batch int) [][]byte {
	t.Helper()
	var out [][]byte
	got := make([]transport.Frame, batch)
	for len(out) < want {
		k, err := tr.Recv(got, hangGuard)
		if err != nil || k == 0 {
			t.Fatalf("Recv = %d, %v after %d of %d frames", k, err, len(out), want)
		}
		for _, f := range got[:k] {
			out = append(out, bytes.Clone(f.Data))
		}
	}
	return out
}

func checkOracle(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d frames arrived, the oracle says %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d differs from the oracle's", i)
		}
	}
}

// TestSendMatchesOracle sends one batch through send faults: what arrives
// on the fault-free wire is, frame by frame, what the oracle computes from
// the seed.
func TestSendMatchesOracle(t *testing.T) {
	const count, size = 1500, 64
	o := fault.Options{Loss: 0.02, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.03, Seed: 1313}
	a, b := loopPair(t)
	w := wrap(t, a, fault.WrapOptions{Send: o})
	frames := make([]transport.Frame, count)
	for i := range frames {
		frames[i] = transport.Frame{Peer: b.Addr(), Data: frameData(i, size)}
	}
	if n, err := w.Send(frames); n != count || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	for i := range frames {
		if !bytes.Equal(frames[i].Data, frameData(i, size)) {
			t.Fatalf("Send changed the caller's frame %d", i)
		}
	}
	want, wc := oracle(o, count, size)
	checkOracle(t, recvN(t, b, len(want), 4096), want)
	if send, recv := w.Counts(); send != wc || recv != (fault.Counts{}) {
		t.Errorf("Counts = %+v, %+v; oracle %+v", send, recv, wc)
	}
}

// TestRecvMatchesOracle applies the faults on the receiving side.
func TestRecvMatchesOracle(t *testing.T) {
	const count, size = 1500, 64
	o := fault.Options{Loss: 0.02, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.03, Seed: 77}
	a, b := loopPair(t)
	w := wrap(t, b, fault.WrapOptions{Recv: o})
	frames := make([]transport.Frame, count)
	for i := range frames {
		frames[i] = transport.Frame{Peer: b.Addr(), Data: frameData(i, size)}
	}
	if n, err := a.Send(frames); n != count || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	want, wc := oracle(o, count, size)
	// One batch large enough for everything: the model sees every frame
	// at one instant, as the oracle assumes.
	checkOracle(t, recvN(t, w, len(want), 4096), want)
	if send, recv := w.Counts(); recv != wc || send != (fault.Counts{}) {
		t.Errorf("Counts = %+v, %+v; oracle %+v", send, recv, wc)
	}
}

// poolTransport is a wrapped transport with a pool of receive buffers, like
// an AF_XDP UMEM: Recv hands out buffers from the pool, and at the next Recv
// takes them back and overwrites them. A wrapper that kept a reference to
// one would hand out garbage.
type poolTransport struct {
	addr    transport.NICID
	queue   [][]byte // frames waiting, by content
	pool    [][]byte
	out     []int // pool buffers handed out by the last Recv
	closed  bool
	hostU   bool
	lost    []transport.NICID
	maxUsed int
	served  int
}

// SpinCheap says the pool's Recv makes no system call (it makes none).
func (p *poolTransport) SpinCheap() bool { return true }

// Served counts the calls (transport.Served).
func (p *poolTransport) Served() { p.served++ }

func newPool(addr transport.NICID, bufs int) *poolTransport {
	p := &poolTransport{addr: addr, hostU: true}
	for range bufs {
		p.pool = append(p.pool, make([]byte, 2048))
	}
	return p
}

func (p *poolTransport) Addr() transport.NICID { return p.addr }
func (p *poolTransport) MTU() int              { return 2048 }
func (p *poolTransport) Send(frames []transport.Frame) (int, error) {
	for _, f := range frames {
		p.queue = append(p.queue, bytes.Clone(f.Data))
	}
	return len(frames), nil
}
func (p *poolTransport) Recv(frames []transport.Frame, _ time.Duration) (int, error) {
	for _, i := range p.out {
		for j := range p.pool[i] {
			p.pool[i][j] = 0xEE
		}
	}
	p.out = p.out[:0]
	if p.closed {
		return 0, transport.ErrClosed
	}
	n := 0
	for n < len(frames) && n < len(p.pool) && len(p.queue) > 0 {
		buf := p.pool[n][:copy(p.pool[n], p.queue[0])]
		frames[n] = transport.Frame{Peer: 9, Data: buf}
		p.out = append(p.out, n)
		p.queue = p.queue[1:]
		n++
	}
	p.maxUsed = max(p.maxUsed, n)
	return n, nil
}
func (p *poolTransport) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	f.Data = bytes.Clone(f.Data)
	return transport.HoldInfo{Copied: true}, nil
}
func (p *poolTransport) Release(f *transport.Frame) { f.Data = nil }
func (p *poolTransport) Register(mem []byte) (*transport.Region, error) {
	return transport.NewRegion(p, mem, false, nil), nil
}
func (p *poolTransport) Close() error        { p.closed = true; return nil }
func (p *poolTransport) HostUniqueNIC() bool { return p.hostU }
func (p *poolTransport) LostPeers(dst []transport.NICID) []transport.NICID {
	return append(dst, p.lost...)
}
func (p *poolTransport) Counters() []transport.Counter {
	return []transport.Counter{{Name: "pool_bufs", Value: uint64(len(p.pool))}}
}

// TestNoStaleBuffers runs receive faults that hold, delay, duplicate and
// corrupt frames over a transport that reuses its buffers at every Recv:
// every frame the wrapper hands out must be intact (or exactly one bit
// off, when corrupted), however long the wrapper held it.
func TestNoStaleBuffers(t *testing.T) {
	const count, size = 3000, 100
	p := newPool(1, 8)
	o := fault.Options{Duplicate: 0.2, Reorder: 0.3, Corrupt: 0.05, Delay: 20 * time.Microsecond, Seed: 5}
	w := wrap(t, p, fault.WrapOptions{Recv: o})
	for i := range count {
		p.queue = append(p.queue, frameData(i, size))
	}
	got := make([]transport.Frame, 5)
	seen := map[int]int{}
	for total, quiet := 0, 0; total < count+int(o.Duplicate*count*2) && quiet < 2; {
		k, err := w.Recv(got, 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			// Twice nothing for longer than any frame is held: the
			// wrapper released everything.
			quiet++
			continue
		}
		quiet = 0
		for _, f := range got[:k] {
			i, ok := identify(f.Data, size)
			if !ok {
				t.Fatalf("a frame handed out damaged (% x...): a buffer the wrapped transport reused", f.Data[:8])
			}
			seen[i]++
		}
		total += k
	}
	if len(seen) != count {
		t.Errorf("%d distinct frames arrived, want %d", len(seen), count)
	}
	if p.maxUsed > len(p.pool) {
		t.Errorf("pool overdrawn: %d", p.maxUsed)
	}
	_, rc := w.Counts()
	if rc.Reordered == 0 || rc.Duplicated == 0 || rc.Corrupted == 0 || rc.Delayed == 0 {
		t.Errorf("faults did not happen: %+v", rc)
	}
}

// identify returns the number of a frame that is intact or has one bit
// flipped (perhaps in its number).
func identify(d []byte, size int) (int, bool) {
	if len(d) != size {
		return 0, false
	}
	n := int(d[0])<<8 | int(d[1])
	if bytes.Equal(d, frameData(n, size)) {
		return n, true
	}
	for bit := range 17 {
		i := n
		if bit < 16 {
			i ^= 1 << bit
		}
		if bitsOff(d, frameData(i, size)) == 1 {
			return i, true
		}
	}
	return 0, false
}

func bitsOff(a, b []byte) int {
	if len(a) != len(b) {
		return -1
	}
	n := 0
	for i := range a {
		for x := a[i] ^ b[i]; x != 0; x &= x - 1 {
			n++
		}
	}
	return n
}

// TestCapabilities: the wrapper forwards the wrapped transport's optional
// interfaces and answers as a transport without them when it has none.
func TestCapabilities(t *testing.T) {
	p := newPool(0x0a0000010001, 1)
	p.lost = []transport.NICID{42}
	w := wrap(t, p, fault.WrapOptions{Send: fault.Options{Loss: 0.5}})
	if !w.HostUniqueNIC() || w.Addr() != p.addr || w.MTU() != p.MTU() || w.Unwrap() != transport.Transport(p) {
		t.Errorf("HostUniqueNIC %v, Addr %v, MTU %d", w.HostUniqueNIC(), w.Addr(), w.MTU())
	}
	if got := w.LostPeers(nil); len(got) != 1 || got[0] != 42 {
		t.Errorf("LostPeers = %v", got)
	}
	cs := w.Counters()
	if len(cs) == 0 || cs[0].Name != "pool_bufs" {
		t.Errorf("Counters = %v, want the wrapped transport's first", cs)
	}
	w.Send([]transport.Frame{{Peer: 2, Data: []byte{1}}})
	if c := counterOf(cs, "fault_send_frames"); c != 0 {
		t.Errorf("fault_send_frames = %d before any send", c)
	}
	if c := counterOf(w.Counters(), "fault_send_frames"); c != 1 {
		t.Errorf("fault_send_frames = %d, want 1", c)
	}

	if !w.SpinCheap() {
		t.Error("a wrapper with send faults only hides that the wrapped transport's Recv costs no system call")
	}
	if r := wrap(t, newPool(0x0a0000010002, 1), fault.WrapOptions{Recv: fault.Options{Loss: 0.5}}); r.SpinCheap() {
		t.Error("a wrapper with receive faults, whose Recv waits for held frames, says a waiter may poll it")
	}
	w.Served()
	if p := w.Unwrap().(*poolTransport); p.served != 1 {
		t.Errorf("Served of a wrapper with send faults only reached the wrapped transport %d times, want 1", p.served)
	}
	rp := newPool(0x0a0000010002, 1)
	wrap(t, rp, fault.WrapOptions{Recv: fault.Options{Loss: 0.5}}).Served()
	if rp.served != 0 {
		t.Error("Served of a wrapper with receive faults, whose Recv waits on its own, reached the wrapped transport")
	}

	a, _ := loopPair(t) // no HostUnique, no PeerWatcher, no Spinner
	wa := wrap(t, a, fault.WrapOptions{})
	if wk, ok := transport.Transport(a).(transport.Waker); (wa.RecvWaker() != nil) != ok || ok && wa.RecvWaker() != wk {
		t.Errorf("RecvWaker of a pass-through wrapper = %v, want the wrapped transport's Waker (%v)", wa.RecvWaker(), ok)
	}
	if r := wrap(t, a, fault.WrapOptions{Recv: fault.Options{Loss: 0.5}}); r.RecvWaker() != nil {
		t.Error("a wrapper with receive faults hands out the wrapped transport's Waker, which would not end its Recv")
	}
	if wa.HostUniqueNIC() || len(wa.LostPeers(nil)) != 0 || wa.SpinCheap() {
		t.Error("a wrapper of a transport without HostUnique, PeerWatcher or Spinner claims them")
	}
	wa.Send([]transport.Frame{{Peer: 2, Data: []byte{1}}, {Peer: 2, Data: []byte{2}}})
	if send, _ := wa.Counts(); send != (fault.Counts{Frames: 2}) {
		t.Errorf("a wrapper without faults counted %+v, want the 2 frames it passed through", send)
	}
}

func counterOf(cs []transport.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 1 << 63
}

// TestErrors: bad options fail Wrap with ErrOptions; too big a frame fails
// Send with ErrTooBig after the frames before it; Close closes the wrapped
// transport and makes later calls fail with ErrClosed.
func TestErrors(t *testing.T) {
	a, b := loopPair(t)
	if _, err := fault.Wrap(a, fault.WrapOptions{Recv: fault.Options{Loss: 1.5}}); !errors.Is(err, fault.ErrOptions) {
		t.Errorf("Wrap with Loss 1.5 = %v, want ErrOptions", err)
	}
	if _, err := fault.Wrap(nil, fault.WrapOptions{}); err == nil {
		t.Error("Wrap(nil) succeeded")
	}
	w := wrap(t, a, fault.WrapOptions{Send: fault.Options{Duplicate: 1}, Recv: fault.Options{Duplicate: 1}})
	frames := []transport.Frame{{Peer: 2, Data: []byte{1}}, {Peer: 2, Data: make([]byte, w.MTU()+1)}}
	if n, err := w.Send(frames); n != 1 || !errors.Is(err, transport.ErrTooBig) {
		t.Errorf("Send = %d, %v; want 1, ErrTooBig", n, err)
	}
	if got := recvN(t, b, 2, 4); !bytes.Equal(got[0], []byte{1}) || !bytes.Equal(got[1], []byte{1}) {
		t.Errorf("the duplicated frame before the too big one: %v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Send(frames[:1]); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close = %v", err)
	}
	if _, err := w.Recv(make([]transport.Frame, 1), 0); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Recv after Close = %v", err)
	}
	if _, err := a.Send(frames[:1]); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("the wrapped port is still open after the wrapper's Close: %v", err)
	}
}

// TestRecvWaitsForHeld: a frame held by receive faults comes out of a
// blocking Recv (no timeout) when due, though nothing else arrives.
func TestRecvWaitsForHeld(t *testing.T) {
	a, b := loopPair(t)
	w := wrap(t, b, fault.WrapOptions{Recv: fault.Options{Reorder: 1, Delay: time.Millisecond}})
	a.Send([]transport.Frame{{Peer: 2, Data: []byte("held")}})
	got := make([]transport.Frame, 2)
	done := make(chan error, 1)
	go func() {
		k, err := w.Recv(got, -1)
		if err == nil && (k != 1 || string(got[0].Data) != "held") {
			err = fmt.Errorf("Recv = %d frames %q", k, got[0].Data)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		w.Close()
		<-done
		t.Fatal("a blocking Recv never returned the held frame")
	}
}

// TestXDP wraps AF_XDP transports (a veth pair in throwaway namespaces) with
// faults on both sides: frames come back through the UMEM the wrapper must
// not hold on to, and every one that arrives is intact. Needs root; skips
// saying so, or fails when GOMX_REQUIRE_XDP=1.
func TestXDP(t *testing.T) {
	a, b := xdptest.Pair(t)
	f := fault.Options{Loss: 0.05, Duplicate: 0.05, Reorder: 0.2, Delay: 10 * time.Microsecond, Seed: 3}
	wa := wrap(t, a, fault.WrapOptions{Send: f})
	f.Seed++
	wb := wrap(t, b, fault.WrapOptions{Recv: f})
	const count, size = 2000, 200
	seen := map[int]int{}
	got := make([]transport.Frame, 16)
	for i := 0; i < count; i += 8 {
		var batch []transport.Frame
		for j := i; j < i+8; j++ {
			batch = append(batch, transport.Frame{Peer: wb.Addr(), Data: frameData(j, size)})
		}
		if n, err := wa.Send(batch); n != len(batch) || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		// Take what came until the wire is quiet, so the receive ring
		// never overflows (the veth wire would drop the excess).
		for range 1000 {
			k, err := wb.Recv(got, 2*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				break
			}
			checkFrames(t, got[:k], size, seen)
		}
	}
	// The veth wire itself may drop under load, but not most frames.
	if len(seen) < count/2 {
		t.Errorf("%d of %d distinct frames arrived", len(seen), count)
	}
	sc, _ := wa.Counts()
	_, rc := wb.Counts()
	if sc.Dropped == 0 || rc.Reordered == 0 || rc.Duplicated == 0 {
		t.Errorf("faults did not happen: send %+v recv %+v", sc, rc)
	}
}

func checkFrames(t *testing.T, frames []transport.Frame, size int, seen map[int]int) {
	t.Helper()
	for _, f := range frames {
		if len(f.Data) < 2 {
			t.Fatalf("a %d-byte frame", len(f.Data))
		}
		i := int(f.Data[0])<<8 | int(f.Data[1])
		if !bytes.Equal(f.Data, frameData(i, size)) {
			t.Fatalf("frame %d arrived damaged", i)
		}
		seen[i]++
	}
}
