package udp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

const hangGuard = 20 * time.Second

func listen(t *testing.T, opts Options) *Transport {
	t.Helper()
	tr, err := Listen("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func TestConformance(t *testing.T) {
	transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
		return listen(t, Options{}), listen(t, Options{})
	}, transporttest.Options{Lossy: true})
}

// TestConformanceJumbo runs the suite with the largest MTU and small batches,
// so Send splits and Recv returns partial batches.
func TestConformanceJumbo(t *testing.T) {
	transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
		return listen(t, Options{MTU: MaxMTU, Batch: 3}), listen(t, Options{MTU: MaxMTU, Batch: 3})
	}, transporttest.Options{Lossy: true})
}

func counter(tr *Transport, name string) uint64 {
	for _, c := range tr.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	panic("no counter " + name)
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		bad  string
	}{
		{Options{MTU: -1}, "MTU"},
		{Options{MTU: MaxMTU + 1}, "MTU"},
		{Options{Batch: 1025}, "batch"},
		{Options{Batch: -1}, "batch"},
		{Options{ReadBuffer: -1}, "negative"},
	} {
		if tr, err := Listen("127.0.0.1:0", tc.opts); err == nil || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("Listen(%+v) = %v, want an error about %s", tc.opts, err, tc.bad)
			if tr != nil {
				tr.Close()
			}
		}
	}
	if _, err := Listen("[::1]:0", Options{}); err == nil {
		t.Error("Listen on IPv6 succeeded")
	}
	tr := listen(t, Options{})
	if tr.MTU() != DefaultMTU || tr.batch != DefaultBatch {
		t.Errorf("MTU %d, batch %d; want the defaults", tr.MTU(), tr.batch)
	}
	r, w := tr.SocketBuffers()
	if r <= 0 || w <= 0 {
		t.Errorf("SocketBuffers = %d, %d", r, w)
	}
	if os.Geteuid() == 0 && (r < DefaultBuffer || w < DefaultBuffer) {
		t.Errorf("as root, SocketBuffers = %d, %d; want at least the %d requested", r, w, DefaultBuffer)
	}
}

func TestAddr(t *testing.T) {
	tr := listen(t, Options{})
	ap := tr.Addr().UDPAddr()
	if ap.Addr() != netip.MustParseAddr("127.0.0.1") || ap.Port() == 0 {
		t.Errorf("Addr = %v", ap)
	}
	// A socket bound to 0.0.0.0 reports the host's address; the tests stay
	// on 127.0.0.1, so only the choice of that address is checked here.
	if ip := hostIPv4(); !ip.Is4() || ip.IsUnspecified() {
		t.Errorf("hostIPv4() = %v, want an IPv4 address", ip)
	}
}

func loopbackID(port uint16) transport.NICID {
	id, _ := transport.UDPNICID(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port))
	return id
}

func TestUnaddressable(t *testing.T) {
	tr := listen(t, Options{})
	for _, peer := range []transport.NICID{1 << 48, loopbackID(0)} {
		frames := []transport.Frame{{Peer: tr.Addr(), Data: []byte("ok")}, {Peer: peer, Data: []byte("x")}}
		n, err := tr.Send(frames)
		if n != 1 || !errors.Is(err, transport.ErrUnreachable) {
			t.Errorf("Send to %#x = %d, %v; want 1 and ErrUnreachable", uint64(peer), n, err)
		}
	}
}

// TestTruncated has a plain socket send a datagram over the MTU: it is
// dropped and counted, and the next one arrives.
func TestTruncated(t *testing.T) {
	tr := listen(t, Options{MTU: 100})
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(tr.Addr().UDPAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(make([]byte, 101))
	c.Write(bytes.Repeat([]byte{7}, 100))
	got := make([]transport.Frame, 4)
	n, err := tr.Recv(got, hangGuard)
	if n != 1 || err != nil || !bytes.Equal(got[0].Data, bytes.Repeat([]byte{7}, 100)) {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if got[0].Peer.UDPAddr() != c.LocalAddr().(*net.UDPAddr).AddrPort() {
		t.Errorf("Peer = %v, want %v", got[0].Peer.UDPAddr(), c.LocalAddr())
	}
	if tc := counter(tr, "truncated"); tc != 1 {
		t.Errorf("truncated = %d, want 1", tc)
	}
	// Only oversized datagrams: a bounded Recv times out with 0, nil.
	c.Write(make([]byte, 500))
	if n, err := tr.Recv(got, 200*time.Millisecond); n != 0 || err != nil {
		t.Errorf("Recv = %d, %v; want 0, nil", n, err)
	}
	if tc := counter(tr, "truncated"); tc != 2 {
		t.Errorf("truncated = %d, want 2", tc)
	}
}

// TestPeerGone sends to a port nobody listens on, then checks the socket
// still works both ways.
func TestPeerGone(t *testing.T) {
	a := listen(t, Options{})
	b := listen(t, Options{})
	gone, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	goneID := gone.Addr()
	gone.Close()
	for range 20 {
		if _, err := a.Send([]transport.Frame{{Peer: goneID, Data: []byte("anyone?")}}); err != nil {
			t.Fatalf("Send to a departed peer: %v", err)
		}
	}
	got := make([]transport.Frame, 4)
	for _, dir := range [][2]*Transport{{a, b}, {b, a}} {
		if _, err := dir[0].Send([]transport.Frame{{Peer: dir[1].Addr(), Data: []byte("still here")}}); err != nil {
			t.Fatal(err)
		}
		n, err := dir[1].Recv(got, hangGuard)
		if n != 1 || err != nil || string(got[0].Data) != "still here" {
			t.Fatalf("Recv after sends to a departed peer = %d, %v", n, err)
		}
	}
	t.Logf("counters: %v", a.Counters())
}

func TestBusyPoll(t *testing.T) {
	tr, err := Listen("127.0.0.1:0", Options{BusyPoll: 50 * time.Microsecond})
	if err != nil {
		if os.Geteuid() != 0 && strings.Contains(err.Error(), "CAP_NET_ADMIN") {
			t.Skipf("busy polling needs CAP_NET_ADMIN: run the tests as root: %v", err)
		}
		t.Fatal(err)
	}
	tr.Close()
}

func TestLargeBatchSplit(t *testing.T) {
	a := listen(t, Options{Batch: 16})
	b := listen(t, Options{Batch: 16})
	frames := make([]transport.Frame, 100)
	for i := range frames {
		frames[i] = transport.Frame{Peer: b.Addr(), Data: []byte{byte(i)}}
	}
	if n, err := a.Send(frames); n != 100 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	got := make([]transport.Frame, 64)
	seen := 0
	for seen < 100 {
		n, err := b.Recv(got, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break // lost on loopback: unheard of, but UDP may
		}
		if n > 16 {
			t.Fatalf("Recv returned %d frames, more than the batch of 16", n)
		}
		seen += n
	}
	if seen < 90 {
		t.Errorf("received %d of 100", seen)
	}
	if c := counter(a, "sent"); c != 100 {
		t.Errorf("sent = %d", c)
	}
}

// TestNoAllocs checks Send and Recv allocate nothing in steady state.
func TestNoAllocs(t *testing.T) {
	a := listen(t, Options{})
	b := listen(t, Options{})
	out := []transport.Frame{{Peer: b.Addr(), Data: make([]byte, 64)}, {Peer: b.Addr(), Data: make([]byte, 1000)}}
	in := make([]transport.Frame, 4)
	step := func() {
		a.Send(out)
		for range 1000 {
			if n, _ := b.Recv(in, 0); n > 0 {
				break
			}
		}
		b.Recv(in, 0) // the second one, if it came separately
	}
	for range 10 {
		step()
	}
	if allocs := testing.AllocsPerRun(200, step); allocs != 0 {
		t.Errorf("%v allocations per Send+Recv", allocs)
	}
}

// TestBlockingRecvAfterTimeout checks that a bounded Recv that timed out does
// not leave a deadline behind for a following blocking Recv.
func TestBlockingRecvAfterTimeout(t *testing.T) {
	a := listen(t, Options{})
	b := listen(t, Options{})
	got := make([]transport.Frame, 1)
	if n, err := b.Recv(got, time.Millisecond); n != 0 || err != nil {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	res := make(chan error, 1)
	go func() {
		n, err := b.Recv(got, -1)
		if err == nil && n != 1 {
			err = errors.New("no frame")
		}
		res <- err
	}()
	time.Sleep(20 * time.Millisecond)
	a.Send([]transport.Frame{{Peer: b.Addr(), Data: []byte("late")}})
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("blocking Recv never returned")
	}
}
