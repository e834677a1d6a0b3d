package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/netnstest"
	"github.com/gomx-dev/gomx/transport"
)

// The benchmarks compare AF_XDP with UDP sockets and AF_PACKET on one veth
// pair, ping on CPU 0 in one namespace and pong on CPU 1 in the other.
// Frame sizes are L2 bytes; UDP carries size-42 bytes of payload so the
// wire bytes are the same. All three spin (non-blocking receive in a
// loop): a polling transport must be compared with polling sockets.

const (
	benchCPUPing = 0
	benchCPUPong = 1
	udpPort      = 9000
)

// benchEnd is one side of a benchmark connection.
type benchEnd interface {
	// send sends one frame of size L2 bytes.
	send(size int) error
	// sendBatch sends up to count frames of size bytes, returns how many.
	sendBatch(size, count int) (int, error)
	// recv takes whatever has arrived, without waiting, and returns how
	// many frames that was.
	recv() (int, error)
	close()
}

// pin locks the goroutine to its thread and the thread to cpu; the
// returned function undoes both.
func pin(tb testing.TB, cpu int) func() {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	unix.SchedGetaffinity(0, &old)
	set.Set(cpu % runtime.NumCPU())
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		tb.Logf("pinning to CPU %d: %v (running unpinned)", cpu, err)
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}

// xdpEnd is an AF_XDP socket on queue 0 with the program attached.
type xdpEnd struct {
	s        *Socket
	prog     *Program
	descs    []Desc
	template []byte
}

func newXDPEnd(ns, iface string, dst, src [6]byte, mode AttachMode) (*xdpEnd, error) {
	e := &xdpEnd{descs: make([]Desc, 64), template: make([]byte, 1514)}
	PutEthHeader(e.template, EthHeader{Dst: dst, Src: src, EtherType: EtherTypeOpenMX})
	for i := EthHeaderLen; i < len(e.template); i++ {
		e.template[i] = byte(i)
	}
	err := netnstest.Do(ns, func() (err error) {
		if e.prog, err = Attach(iface, ProgramOptions{Mode: mode}); err != nil {
			return err
		}
		if e.s, err = Open(iface, 0, Options{}); err != nil {
			return err
		}
		return e.prog.Register(e.s, 0)
	})
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *xdpEnd) send(size int) error {
	_, err := e.sendBatch(size, 1)
	return err
}

func (e *xdpEnd) sendBatch(size, count int) (int, error) {
	n := e.s.Alloc(e.descs[:min(count, len(e.descs))])
	if n == 0 {
		_, err := e.s.Flush()
		return 0, err
	}
	for i := range n {
		e.descs[i].Len = uint32(copy(e.s.Frame(e.descs[i]), e.template[:size]))
	}
	for off := 0; off < n; {
		m, err := e.s.Transmit(e.descs[off:n])
		if err != nil {
			return off, err
		}
		off += m
	}
	return n, nil
}

func (e *xdpEnd) recv() (int, error) {
	n := e.s.Receive(e.descs)
	e.s.Release(e.descs[:n])
	return n, nil
}

func (e *xdpEnd) close() {
	if e.s != nil {
		e.s.Close()
	}
	if e.prog != nil {
		e.prog.Close()
	}
}

// sockEnd is a non-blocking UDP or AF_PACKET socket.
type sockEnd struct {
	fd       int
	overhead int // L2 bytes not in the payload: 42 for UDP, 0 for AF_PACKET
	buf      []byte
	batch    *mmsg
	batchLen int
}

func (e *sockEnd) send(size int) error {
	for {
		_, err := unix.Write(e.fd, e.buf[:size-e.overhead])
		if err != unix.EAGAIN && err != unix.ENOBUFS {
			return err
		}
	}
}

func (e *sockEnd) sendBatch(size, count int) (int, error) {
	if e.batchLen != size-e.overhead {
		e.batchLen = size - e.overhead
		e.batch.setLen(e.batchLen)
	}
	n, err := e.batch.send(e.fd, min(count, len(e.batch.hdrs)))
	if err == unix.EAGAIN || err == unix.ENOBUFS {
		return 0, nil
	}
	return n, err
}

func (e *sockEnd) recv() (int, error) {
	n, err := e.batch.recv(e.fd)
	if err == unix.EAGAIN {
		return 0, nil
	}
	return n, err
}

func (e *sockEnd) close() { unix.Close(e.fd) }

func newSockEnd(fd, overhead int) *sockEnd {
	e := &sockEnd{fd: fd, overhead: overhead, buf: make([]byte, 1514), batch: newMmsg(64, 1514)}
	for i := range e.buf {
		e.buf[i] = byte(i)
	}
	for _, b := range e.batch.bufs {
		copy(b, e.buf)
	}
	return e
}

// newUDPEnd opens a UDP socket in ns bound to local:udpPort and connected
// to remote:udpPort.
func newUDPEnd(ns string, local, remote [4]byte) (*sockEnd, error) {
	var e *sockEnd
	err := netnstest.Do(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: local, Port: udpPort}); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: remote, Port: udpPort}); err != nil {
			unix.Close(fd)
			return err
		}
		e = newSockEnd(fd, UDPHeadersLen)
		return nil
	})
	return e, err
}

// newPacketEnd opens an AF_PACKET raw socket in ns bound to iface and the
// Open-MX EtherType, bypassing the qdisc and ignoring its own frames.
func newPacketEnd(ns, iface string, dst, src [6]byte) (*sockEnd, error) {
	var e *sockEnd
	err := netnstest.Do(ns, func() error {
		proto := int(htons(EtherTypeOpenMX))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, proto)
		if err != nil {
			return err
		}
		ifindex, err := ifIndex(iface)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifindex})
		}
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
		}
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		if err != nil {
			unix.Close(fd)
			return err
		}
		e = newSockEnd(fd, 0)
		for _, b := range append([][]byte{e.buf}, e.batch.bufs...) {
			PutEthHeader(b, EthHeader{Dst: dst, Src: src, EtherType: EtherTypeOpenMX})
		}
		return nil
	})
	return e, err
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

func ifIndex(iface string) (int, error) {
	ifi, err := usableInterface(iface)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

// openXDPEnds opens an AF_XDP end on each side, the program attached in
// mode.
func openXDPEnds(p *netnstest.Pair, mode AttachMode) (benchEnd, benchEnd, error) {
	a, err := newXDPEnd(p.NSA, p.A, p.MACB, p.MACA, mode)
	if err != nil {
		return nil, nil, err
	}
	b, err := newXDPEnd(p.NSB, p.B, p.MACA, p.MACB, mode)
	if err != nil {
		a.close()
		return nil, nil, err
	}
	return a, b, nil
}

// benchKinds builds a connected pair of ends of each kind.
var benchKinds = []struct {
	name string
	open func(p *netnstest.Pair) (ping, pong benchEnd, err error)
}{
	{"afxdp", func(p *netnstest.Pair) (benchEnd, benchEnd, error) { return openXDPEnds(p, DriverMode) }},
	{"afxdp-generic", func(p *netnstest.Pair) (benchEnd, benchEnd, error) { return openXDPEnds(p, GenericMode) }},
	{"udp", func(p *netnstest.Pair) (benchEnd, benchEnd, error) {
		a, err := newUDPEnd(p.NSA, p.IPA.As4(), p.IPB.As4())
		if err != nil {
			return nil, nil, err
		}
		b, err := newUDPEnd(p.NSB, p.IPB.As4(), p.IPA.As4())
		if err != nil {
			a.close()
			return nil, nil, err
		}
		return a, b, nil
	}},
	{"afpacket", func(p *netnstest.Pair) (benchEnd, benchEnd, error) {
		a, err := newPacketEnd(p.NSA, p.A, p.MACB, p.MACA)
		if err != nil {
			return nil, nil, err
		}
		b, err := newPacketEnd(p.NSB, p.B, p.MACA, p.MACB)
		if err != nil {
			a.close()
			return nil, nil, err
		}
		return a, b, nil
	}},
}

var benchSizes = []int{64, 1500}

// errTimeout is a frame that did not come back in time.
var errTimeout = errors.New("no frame in time")

// roundTrip sends a frame of size and waits for the answer, sending again
// after 200ms without one (a frame lost on a loaded machine) up to 10
// times; it returns how many times it resent.
func roundTrip(ping benchEnd, size int) (int, error) {
	for resent := 0; resent < 10; resent++ {
		if err := ping.send(size); err != nil {
			return resent, err
		}
		err := waitFrame(ping, 200*time.Millisecond)
		if err != errTimeout {
			return resent, err
		}
	}
	return 10, errTimeout
}

// waitFrame spins on e.recv until a frame arrives, for at most limit
// (the clock is read every 4096 spins).
func waitFrame(e benchEnd, limit time.Duration) error {
	var deadline time.Time
	for i := 0; ; i++ {
		n, err := e.recv()
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if i&4095 == 4095 {
			if deadline.IsZero() {
				deadline = time.Now().Add(limit)
			} else if time.Now().After(deadline) {
				return errTimeout
			}
		}
	}
}

// BenchmarkPingPong measures the round trip of one frame: ping sends, pong
// echoes, ping waits. us/oneway is half the median round trip.
func BenchmarkPingPong(b *testing.B) { eachKind(b, benchPingPong) }

// eachKind runs bench for every kind of end (benchKinds) and every size
// (benchSizes) between two fresh ends on a veth pair.
func eachKind(b *testing.B, bench func(b *testing.B, x, y benchEnd, size int)) {
	requireXDP(b)
	p := netnstest.NewPair(b, 1)
	for _, kind := range benchKinds {
		b.Run(kind.name, func(b *testing.B) {
			for _, size := range benchSizes {
				b.Run(fmt.Sprint(size), func(b *testing.B) {
					x, y, err := kind.open(p)
					if err != nil {
						b.Fatal(err)
					}
					defer x.close()
					defer y.close()
					bench(b, x, y, size)
				})
			}
		})
	}
}

func benchPingPong(b *testing.B, ping, pong benchEnd, size int) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	pongErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer pin(b, benchCPUPong)()
		for !stop.Load() {
			n, err := pong.recv()
			if err != nil {
				pongErr <- err
				return
			}
			for range n {
				if err := pong.send(size); err != nil {
					pongErr <- err
					return
				}
			}
		}
		pongErr <- nil
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
		if err := <-pongErr; err != nil {
			b.Error("pong:", err)
		}
	}()
	defer pin(b, benchCPUPing)()

	const warm = 500
	for range warm {
		if _, err := roundTrip(ping, size); err != nil {
			b.Fatal("warm-up:", err)
		}
	}
	rtt := make([]time.Duration, min(b.N, 1<<20))
	resent := 0
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t0 := time.Now()
		n, err := roundTrip(ping, size)
		if err != nil {
			b.Fatalf("round trip %d: %v", i, err)
		}
		resent += n
		if i < len(rtt) {
			rtt[i] = time.Since(t0)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(rtt[len(rtt)/2])/2/1e3, "us/oneway")
	b.ReportMetric(float64(rtt[len(rtt)*99/100])/1e3, "us/rtt-p99")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "roundtrips/s")
	b.ReportMetric(float64(resent), "resent")
}

// BenchmarkStream measures one-way streaming: the sender pushes b.N frames
// in batches of 64 (sendmmsg for the sockets), the receiver counts what
// arrives. frames/s and Gbit/s (L2 bytes) are the receiver's.
func BenchmarkStream(b *testing.B) { eachKind(b, benchStream) }

func benchStream(b *testing.B, tx, rx benchEnd, size int) {
	var sending atomic.Bool
	sending.Store(true)
	type result struct {
		got     int
		elapsed time.Duration
		err     error
	}
	res := make(chan result, 1)
	ready := make(chan struct{})
	go func() {
		defer pin(b, benchCPUPong)()
		close(ready)
		var r result
		var start time.Time
		last := time.Now()
		for r.got < b.N {
			n, err := rx.recv()
			if err != nil {
				r.err = err
				break
			}
			if n > 0 {
				last = time.Now()
				if start.IsZero() {
					start = last
				}
				r.got += n
				continue
			}
			if !sending.Load() && time.Since(last) > 50*time.Millisecond {
				break
			}
		}
		if r.got > 0 {
			r.elapsed = last.Sub(start)
		}
		res <- r
	}()
	<-ready
	unpin := pin(b, benchCPUPing)
	b.ResetTimer()
	sendStart := time.Now()
	deadline := sendStart.Add(60 * time.Second)
	for sent := 0; sent < b.N; {
		n, err := tx.sendBatch(size, min(64, b.N-sent))
		if err != nil {
			b.Fatal(err)
		}
		sent += n
		if n == 0 && time.Now().After(deadline) {
			b.Fatalf("sent %d of %d frames in 60s", sent, b.N)
		}
	}
	sendTime := time.Since(sendStart)
	// Let an AF_XDP sender's ring drain before the receiver gives up.
	if x, ok := tx.(*xdpEnd); ok {
		for range 1000 {
			if n, _ := x.s.Flush(); n == 0 {
				break
			}
		}
	}
	sending.Store(false)
	unpin()
	r := <-res
	b.StopTimer()
	if r.err != nil {
		b.Fatal(r.err)
	}
	if r.got == 0 {
		b.Fatalf("none of %d frames arrived", b.N)
	}
	// The receiver's rate over the frames it saw; with one frame there is
	// no interval, so use the sender's time.
	el := r.elapsed
	if r.got < 2 || el <= 0 {
		el = sendTime
	}
	fps := float64(r.got) / el.Seconds()
	b.ReportMetric(fps, "frames/s")
	b.ReportMetric(fps*float64(size)*8/1e9, "Gbit/s")
	b.ReportMetric(100*float64(b.N-r.got)/float64(b.N), "loss%")
}

// BenchmarkSendInPlace sends batches of 32 full frames (the transport's
// MTU of Data: 1514 bytes on the wire) through the transport over veth,
// from a region in the UMEM's region frames sent in place (a header
// descriptor, the Data where it lies) or from the same bytes copied into
// UMEM frames; the receiver drains what arrives. ns/frame is the sender's
// Send per frame, which in copy mode includes the kernel's whole path
// (skb, veth, the peer's XDP and its copy into the peer's UMEM).
func BenchmarkSendInPlace(b *testing.B) {
	for _, inPlace := range []bool{false, true} {
		b.Run(fmt.Sprintf("1514B/inplace=%v", inPlace), func(b *testing.B) {
			a, rx, _ := newTransports(b, 1, false)
			const batch = 32
			size := a.MTU()
			mem, err := a.RegionMemory(batch * a.Sockets()[0].FrameSize())
			if err != nil {
				b.Fatal(err)
			}
			r, err := a.Register(mem)
			if err != nil {
				b.Fatal(err)
			}
			out := make([]transport.Frame, batch)
			for i := range out {
				out[i] = r.Frame(rx.Addr(), i*a.Sockets()[0].FrameSize(), size)
				if !inPlace {
					out[i].Region = nil
				}
			}
			in := make([]transport.Frame, 64)
			b.SetBytes(int64(batch * size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if n, err := a.Send(out); n != batch || err != nil {
					b.Fatalf("Send: %d, %v", n, err)
				}
				for {
					if n, _ := rx.Recv(in, 0); n == 0 {
						break
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
			for k := 0; r.Pending() != 0; k++ {
				if k == 100000 {
					b.Fatalf("%d in-place sends never completed", r.Pending())
				}
				a.Sockets()[0].Flush()
				runtime.Gosched()
			}
		})
	}
}
