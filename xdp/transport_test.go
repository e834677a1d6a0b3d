package xdp

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/netnstest"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// newTransports opens a transport on each end of a fresh veth pair, with
// UDP framing when udp is set.
func newTransports(t testing.TB, queues int, udp bool) (a, b *Transport, p *netnstest.Pair) {
	t.Helper()
	requireXDP(t)
	p = netnstest.NewPair(t, queues)
	open := func(ns, iface string, ip netip.Addr) *Transport {
		var tr *Transport
		o := TransportOptions{Interface: iface, Socket: Options{Frames: 2048, RegionFrames: 64}}
		if udp {
			o.UDP = netip.AddrPortFrom(ip, 7000)
		}
		if err := netnstest.Do(ns, func() (err error) {
			tr, err = NewTransport(o)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	return open(p.NSA, p.A, p.IPA), open(p.NSB, p.B, p.IPB), p
}

// recvAll receives until want frames came or 5s passed, copying their Data.
func recvAll(t *testing.T, tr *Transport, want int) ([]transport.Frame, error) {
	t.Helper()
	var out []transport.Frame
	buf := make([]transport.Frame, 32)
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < want && time.Now().Before(deadline) {
		n, err := tr.Recv(buf, 100*time.Millisecond)
		if err != nil {
			return out, err
		}
		for _, f := range buf[:n] {
			out = append(out, transport.Frame{Peer: f.Peer, Data: bytes.Clone(f.Data)})
		}
	}
	return out, nil
}

// The transport carries frames both ways with either framing: Peer names
// the sender, Data arrives intact (raw frames may be padded to 60 bytes).
func TestTransport(t *testing.T) {
	for _, udp := range []bool{false, true} {
		t.Run(map[bool]string{false: "ethernet", true: "udp"}[udp], func(t *testing.T) {
			a, b, p := newTransports(t, 2, udp)
			if udp {
				want, _ := transport.UDPNICID(netip.AddrPortFrom(p.IPA, 7000))
				if a.Addr() != want {
					t.Errorf("Addr() = %v, want %v", a.Addr(), want)
				}
			} else if a.Addr() != transport.MACNICID(p.MACA) {
				t.Errorf("Addr() = %v, want %v", a.Addr(), transport.MACNICID(p.MACA))
			}
			if m := a.MTU(); m < 1400 || m > 1500 {
				t.Errorf("MTU() = %d", m)
			}
			// The steering program knows where PULL_REPLY frames name their
			// endpoint (mx's pull replies carry no endpoint byte).
			if po := a.prog.Options(); po.PullReplyType != 0x2A || po.PullReplyOffset != 17 || po.PullReplyXOR != 0x80 {
				t.Errorf("PULL_REPLY rule %#x/%d/%#x", po.PullReplyType, po.PullReplyOffset, po.PullReplyXOR)
			}
			for _, dir := range []struct{ from, to *Transport }{{a, b}, {b, a}} {
				const count = 500
				var frames []transport.Frame
				for i := range count {
					d := make([]byte, 1+i*7%dir.from.MTU())
					for j := range d {
						d[j] = byte(i + j)
					}
					frames = append(frames, transport.Frame{Peer: dir.to.Addr(), Data: d})
				}
				for off := 0; off < count; off += 50 {
					n, err := dir.from.Send(frames[off : off+50])
					if n != 50 || err != nil {
						t.Fatalf("Send = %d, %v", n, err)
					}
				}
				got, err := recvAll(t, dir.to, count)
				if err != nil || len(got) != count {
					t.Fatalf("received %d of %d frames: %v", len(got), count, err)
				}
				for i, f := range got {
					w := frames[i].Data
					if f.Peer != dir.from.Addr() {
						t.Fatalf("frame %d from %v, want %v", i, f.Peer, dir.from.Addr())
					}
					if len(f.Data) < len(w) || !bytes.Equal(f.Data[:len(w)], w) || (udp && len(f.Data) != len(w)) {
						t.Fatalf("frame %d: %d bytes differ from the %d sent", i, len(f.Data), len(w))
					}
				}
			}
			big := make([]byte, a.MTU()+1)
			if n, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: []byte{1}}, {Peer: b.Addr(), Data: big}}); n != 1 || !errors.Is(err, transport.ErrTooBig) {
				t.Errorf("Send of an oversized second frame = %d, %v; want 1, ErrTooBig", n, err)
			}
			if udp {
				nowhere, _ := transport.UDPNICID(netip.MustParseAddrPort("10.77.0.99:7000"))
				if _, err := a.Send([]transport.Frame{{Peer: nowhere, Data: []byte{1}}}); !errors.Is(err, transport.ErrUnreachable) {
					t.Errorf("Send to a peer without neighbour entry: %v, want ErrUnreachable", err)
				}
			}
			t.Logf("counters of b: %v", b.Counters())
		})
	}
}

// Recv honours its timeout, and Close ends a blocked Recv with ErrClosed.
func TestTransportRecvTimeoutAndClose(t *testing.T) {
	a, _, _ := newTransports(t, 1, false)
	buf := make([]transport.Frame, 4)
	if n, err := a.Recv(buf, 0); n != 0 || err != nil {
		t.Errorf("Recv(0) on an idle transport = %d, %v", n, err)
	}
	start := time.Now()
	if n, err := a.Recv(buf, 50*time.Millisecond); n != 0 || err != nil {
		t.Errorf("Recv(50ms) = %d, %v", n, err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("Recv(50ms) returned after %v", d)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Recv(buf, -1)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("blocked Recv returned %v after Close, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Recv within 5s")
	}
	if _, err := a.Send([]transport.Frame{{Data: []byte{1}}}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Wake ends a Recv that waits, whether it spins or sleeps in ppoll, with
// 0, nil, and a Wake that comes first ends the next Recv that would wait;
// a Wake spends itself, so the Recv after it waits its timeout again.
func TestTransportWake(t *testing.T) {
	a, b, _ := newTransports(t, 1, false)
	buf := make([]transport.Frame, 4)
	a.Wake()
	if n, err := a.Recv(buf, -1); n != 0 || err != nil {
		t.Fatalf("Recv after Wake = %d, %v; want 0, nil", n, err)
	}
	done := make(chan error, 1)
	go func() {
		n, err := a.Recv(buf, -1)
		if err == nil && n != 0 {
			err = fmt.Errorf("%d frames", n)
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !a.asleep.Load() {
		if time.Now().After(deadline) {
			t.Fatal("Recv(-1) on an idle transport never slept in ppoll")
		}
		time.Sleep(time.Millisecond)
	}
	a.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Recv asleep, woken: %v; want 0, nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not end a Recv asleep in ppoll")
	}
	start := time.Now()
	if n, err := a.Recv(buf, 30*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("Recv(30ms) after the Wake = %d, %v", n, err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("Recv(30ms) after a spent Wake returned after %v: the wake-up stayed pending", d)
	}
	if _, err := b.Send([]transport.Frame{{Peer: a.Addr(), Data: []byte("after a wake")}}); err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(t, a, 1)
	if err != nil || len(got) != 1 || !bytes.HasPrefix(got[0].Data, []byte("after a wake")) {
		t.Fatalf("frame after the wake-ups: %v, %v", got, err)
	}
}

func ExampleNewTransport() {
	// In the network namespace of eth1, serve every queue with raw
	// Ethernet framing.
	tr, err := NewTransport(TransportOptions{Interface: "eth1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	fmt.Println("board", tr.Addr(), "MTU", tr.MTU())
}

// The transport passes the conformance suite every gomx transport runs,
// with raw Ethernet framing (short frames padded to the 60-byte minimum)
// and with UDP framing. It is lossy like UDP: a receiver that falls behind
// runs the fill ring dry and the kernel drops (and counts) frames.
func TestTransportConformance(t *testing.T) {
	for _, udp := range []bool{false, true} {
		name, opts := "ethernet", transporttest.Options{Lossy: true, MinData: minFrame - EthHeaderLen}
		if udp {
			name, opts = "udp", transporttest.Options{Lossy: true}
		}
		// Regions from the UMEM's region frames are sent in place.
		opts.InPlace = true
		opts.RegionMemory = func(t *testing.T, a transport.Transport, n int) []byte {
			b, err := a.(*Transport).RegionMemory(n)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		t.Run(name, func(t *testing.T) {
			requireXDP(t)
			transporttest.RunWith(t, func(t *testing.T) (transport.Transport, transport.Transport) {
				a, b, _ := newTransports(t, 2, udp)
				return a, b
			}, opts)
		})
	}
}

// Send and a Recv that finds frames waiting allocate nothing.
func TestTransportDoesNotAllocate(t *testing.T) {
	for _, udp := range []bool{false, true} {
		a, b, _ := newTransports(t, 1, udp)
		out := []transport.Frame{{Peer: b.Addr(), Data: make([]byte, 100)}}
		in := make([]transport.Frame, 8)
		// Warm up: neighbour lookup, learning the peer.
		a.Send(out)
		b.Recv(in, time.Second)
		allocs := testing.AllocsPerRun(100, func() {
			a.Send(out)
			for range 1000 {
				if n, _ := b.Recv(in, 0); n > 0 {
					break
				}
			}
		})
		if allocs != 0 {
			t.Errorf("udp=%v: Send and Recv allocate %v times per frame", udp, allocs)
		}
	}
}

// Frames of a region in the UMEM's region frames go out in place: the
// kernel returns the region's own addresses on the completion ring (only
// that completes them), the bytes arrive intact, a frame across a UMEM
// frame edge goes as two descriptors, and memory outside the region
// frames is copied.
func TestTransportSendInPlace(t *testing.T) {
	for _, udp := range []bool{false, true} {
		t.Run(map[bool]string{false: "ethernet", true: "udp"}[udp], func(t *testing.T) {
			a, b, _ := newTransports(t, 1, udp)
			fs := a.Sockets()[0].FrameSize()
			mem, err := a.RegionMemory(4 * fs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range mem {
				mem[i] = byte(i * 13)
			}
			r, err := a.Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			if !r.InPlace() {
				t.Fatal("a region in the region frames copies")
			}
			size := min(1000, a.MTU())
			// Frame 0 inside a UMEM frame, frame 1 across the edge.
			offs := []int{100, fs - size/2}
			var batch []transport.Frame
			for _, off := range offs {
				batch = append(batch, r.Frame(b.Addr(), off, size))
			}
			// The transport may lose frames (copy mode): resend until both came.
			have := map[int]bool{}
			for try := 0; len(have) < len(offs); try++ {
				if try == 20 {
					t.Fatalf("%d of %d frames sent in place arrived", len(have), len(offs))
				}
				if n, err := a.Send(batch); n != len(batch) || err != nil {
					t.Fatalf("Send: %d, %v", n, err)
				}
				got, err := recvAll(t, b, len(offs)-len(have))
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range got {
					for i, off := range offs {
						if bytes.Equal(f.Data, mem[off:off+size]) {
							have[i] = true
						}
					}
				}
				for k := 0; r.Pending() != 0; k++ {
					if k == 5000 {
						t.Fatalf("%d in-place sends pending: the kernel never returned the region's addresses", r.Pending())
					}
					a.Sockets()[0].Flush()
					time.Sleep(100 * time.Microsecond)
				}
			}
			if r.CopiedSends() != 0 || r.InPlaceSends()%3 != 0 || r.InPlaceSends() == 0 {
				t.Errorf("region counted %d in place (want 3 a round: one descriptor, then two across the edge), %d copied", r.InPlaceSends(), r.CopiedSends())
			}
			heap := make([]byte, size)
			rh, err := a.Register(heap)
			if err != nil {
				t.Fatal(err)
			}
			if rh.InPlace() {
				t.Error("heap memory outside the UMEM claims to be sent in place")
			}
			if _, err := a.Send([]transport.Frame{rh.Frame(b.Addr(), 0, size)}); err != nil || rh.CopiedSends() != 1 {
				t.Errorf("Send from heap memory: %v, %d copied", err, rh.CopiedSends())
			}
			if err := r.Close(); err != nil {
				t.Errorf("Close of a completed region: %v", err)
			}
			if _, err := a.RegionMemory(1 << 30); !errors.Is(err, ErrConfig) {
				t.Errorf("RegionMemory past the region frames: %v, want ErrConfig", err)
			}
		})
	}
}

// Every region takes a Head: a frame of a region in the region frames goes
// out as the link headers and the Head in a UMEM frame of the socket's,
// the Data in place behind them; a frame of heap memory is copied, Head
// and Data together. Both arrive as Head followed by Data, and the
// region's counters say which path each took.
func TestTransportSendHead(t *testing.T) {
	for _, udp := range []bool{false, true} {
		t.Run(map[bool]string{false: "ethernet", true: "udp"}[udp], func(t *testing.T) {
			a, b, _ := newTransports(t, 1, udp)
			fs := a.Sockets()[0].FrameSize()
			umem, err := a.RegionMemory(2 * fs)
			if err != nil {
				t.Fatal(err)
			}
			heap := make([]byte, 2*fs)
			for i := range umem {
				umem[i], heap[i] = byte(i*13), byte(i*7+1)
			}
			head := []byte("mx's header: 24 bytes..!")
			size := min(1000, a.MTU()-len(head))
			for _, mem := range [][]byte{umem, heap} {
				inPlace := &mem[0] == &umem[0]
				r, err := a.Register(mem)
				if err != nil {
					t.Fatal(err)
				}
				if r.InPlace() != inPlace || !r.TakesHead() {
					t.Fatalf("region (in the UMEM: %v): InPlace %v, TakesHead %v", inPlace, r.InPlace(), r.TakesHead())
				}
				f := r.Frame(b.Addr(), fs-size/2, size) // across a UMEM frame edge
				f.Head = head
				want := append(append([]byte{}, head...), mem[fs-size/2:fs-size/2+size]...)
				arrived := false
				for try := 0; !arrived; try++ {
					if try == 20 {
						t.Fatalf("the frame (in place: %v) never arrived whole", inPlace)
					}
					if n, err := a.Send([]transport.Frame{f}); n != 1 || err != nil {
						t.Fatalf("Send: %d, %v", n, err)
					}
					got, err := recvAll(t, b, 1)
					if err != nil {
						t.Fatal(err)
					}
					for _, g := range got {
						arrived = arrived || bytes.Equal(g.Data, want)
					}
					for k := 0; r.Pending() != 0; k++ {
						if k == 5000 {
							t.Fatalf("%d in-place sends pending", r.Pending())
						}
						a.Sockets()[0].Flush()
						time.Sleep(100 * time.Microsecond)
					}
				}
				if inPlace && (r.CopiedSends() != 0 || r.InPlaceSends() == 0) || !inPlace && (r.InPlaceSends() != 0 || r.CopiedSends() == 0) {
					t.Errorf("region (in the UMEM: %v) counted %d in place, %d copied", inPlace, r.InPlaceSends(), r.CopiedSends())
				}
				big := r.Frame(b.Addr(), 0, a.MTU())
				big.Head = head
				if _, err := a.Send([]transport.Frame{big}); !errors.Is(err, transport.ErrTooBig) {
					t.Errorf("a frame whose Head and Data exceed the MTU: %v, want ErrTooBig", err)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Queue puts frames on the TX ring without the kick and Kick sends them:
// several goroutines queueing (and kicking) at once each see their frames
// arrive whole and in their order, and Kick after Close does nothing.
func TestTransportQueueKick(t *testing.T) {
	a, b, _ := newTransports(t, 1, false)
	var k transport.Kicker = a
	const senders, each = 4, 200 // fewer than b's RX ring holds
	errs := make(chan error, senders)
	for g := range senders {
		go func() {
			for i := range each {
				f := []transport.Frame{{Peer: b.Addr(), Data: []byte{byte(g), byte(i >> 8), byte(i)}}}
				if n, err := k.Queue(f); n != 1 || err != nil {
					errs <- fmt.Errorf("sender %d: Queue = %d, %v", g, n, err)
					return
				}
				if i%50 == 49 {
					if err := k.Kick(); err != nil {
						errs <- fmt.Errorf("sender %d: Kick: %v", g, err)
						return
					}
				}
			}
			errs <- k.Kick()
		}()
	}
	got, rerr := recvAll(t, b, senders*each)
	for range senders {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if rerr != nil || len(got) != senders*each {
		t.Fatalf("received %d of %d frames: %v", len(got), senders*each, rerr)
	}
	var next [senders]int
	for _, f := range got {
		g, i := int(f.Data[0]), int(f.Data[1])<<8|int(f.Data[2])
		if g >= senders || i != next[g] {
			t.Fatalf("frame %d of sender %d arrived where %d was next", i, g, next[g])
		}
		next[g]++
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := k.Kick(); err != nil {
		t.Errorf("Kick after Close = %v, want nil", err)
	}
	if _, err := k.Queue([]transport.Frame{{Peer: b.Addr(), Data: []byte{1}}}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Queue after Close = %v, want ErrClosed", err)
	}
}
