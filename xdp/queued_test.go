package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/netnstest"
	"github.com/gomx-dev/gomx/transport"
)

// counter returns the named counter of tr.
func counter(tr transport.Transport, name string) uint64 {
	for _, c := range tr.(transport.Stats).Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// queueFrame is the Data of frame seq from queue from to queue to:
// from, to and seq, then pattern bytes chosen by seq.
func queueFrame(from, to int, seq uint32) []byte {
	d := make([]byte, 12+int(seq*977%1200))
	binary.BigEndian.PutUint32(d[0:], uint32(from))
	binary.BigEndian.PutUint32(d[4:], uint32(to))
	binary.BigEndian.PutUint32(d[8:], seq)
	copy(d[12:], pattern[int(seq*131)%(len(pattern)-2048):])
	return d
}

// Each queue of a UDP transport is a transport of its own with its own
// port: frames sent from any queue of one end to queue r of the other are
// delivered byte-exact by queue r alone, those that arrive on another rx
// queue (veth has no ntuple rules: a frame lands on the rx queue of the
// sender's tx queue) handed over to it; once a queue's steering is removed
// its port's frames are no longer anyone's; each queue names its rx
// queue's interrupt CPU (none on veth), the transport of all none. While
// queues are open the transport's own Send and Recv refuse, and after
// they close it works again; nothing leaks.
func TestQueues(t *testing.T) {
	const queues = 3
	requireXDP(t)
	p := netnstest.NewPair(t, queues)
	fds := openFDs(t)
	open := func(ns, iface string, ip netip.Addr) *Transport {
		var tr *Transport
		o := TransportOptions{Interface: iface, UDP: netip.AddrPortFrom(ip, 7000), Socket: Options{Frames: 1024, RegionFrames: 16}}
		if err := netnstest.Do(ns, func() (err error) {
			tr, err = NewTransport(o)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	a, b := open(p.NSA, p.A, p.IPA), open(p.NSB, p.B, p.IPB)
	if a.Queues() != queues {
		t.Fatalf("Queues() = %d, want %d", a.Queues(), queues)
	}
	var qa, qb [queues]*Transport
	for q := range queues {
		var err error
		if qa[q], err = a.openQueue(q); err != nil {
			t.Fatal(err)
		}
		if qb[q], err = b.openQueue(q); err != nil {
			t.Fatal(err)
		}
		want, _ := transport.UDPNICID(netip.AddrPortFrom(p.IPB, uint16(7000+q)))
		if qb[q].Addr() != want {
			t.Errorf("queue %d: Addr %v, want %v", q, qb[q].Addr(), want)
		}
		st := qb[q].queue.steer
		if st.Port != uint16(7000+q) || st.Queue != q || st.RxQueue != q || st.Hardware() {
			t.Errorf("queue %d steered as %v; want its port to its rx queue by software (veth has no ntuple rules)", q, st)
		}
		t.Log(st)
		if c := qb[q].IRQCPU(); c != -1 {
			_, why := QueueCPU(p.B, q)
			t.Errorf("queue %d: IRQCPU %d, want -1: veth has no queue interrupt (%s)", q, c, why)
		}
	}
	if c := a.IRQCPU(); c != -1 {
		t.Errorf("a transport of %d rx queues: IRQCPU %d, want -1", queues, c)
	}
	if _, err := a.OpenQueue(0); !errors.Is(err, ErrBusy) {
		t.Errorf("opening an open queue: %v, want ErrBusy", err)
	}
	if _, err := a.Send([]transport.Frame{{Peer: qb[0].Addr(), Data: []byte{1}}}); !errors.Is(err, ErrQueuesOpen) {
		t.Errorf("the transport's Send with its queues open: %v, want ErrQueuesOpen", err)
	}
	if _, err := a.Recv(make([]transport.Frame, 1), 0); !errors.Is(err, ErrQueuesOpen) {
		t.Errorf("the transport's Recv with its queues open: %v, want ErrQueuesOpen", err)
	}
	if _, err := a.Steer(6999, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("steering a port the program does not claim: %v, want ErrConfig", err)
	}

	// Every queue of a sends to every queue of b; each queue of b receives
	// on its own goroutine.
	const perPair = 200
	var wg sync.WaitGroup
	got := make([][]transport.Frame, queues)
	for r := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]transport.Frame, 32)
			deadline := time.Now().Add(10 * time.Second)
			for len(got[r]) < queues*perPair && time.Now().Before(deadline) {
				n, err := qb[r].Recv(buf, 50*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				for _, f := range buf[:n] {
					got[r] = append(got[r], transport.Frame{Peer: f.Peer, Data: bytes.Clone(f.Data)})
				}
			}
		}()
	}
	for q := range queues {
		for seq := range uint32(perPair) {
			var fs []transport.Frame
			for r := range queues {
				fs = append(fs, transport.Frame{Peer: qb[r].Addr(), Data: queueFrame(q, r, seq)})
			}
			if n, err := qa[q].Send(fs); n != len(fs) || err != nil {
				t.Fatalf("queue %d: Send = %d, %v", q, n, err)
			}
			if seq%32 == 31 {
				time.Sleep(time.Millisecond) // let the receivers keep up: the wire is lossy
			}
		}
	}
	wg.Wait()
	for r := range queues {
		seen := map[[2]uint32]bool{}
		for _, f := range got[r] {
			from := int(binary.BigEndian.Uint32(f.Data[0:]))
			to := int(binary.BigEndian.Uint32(f.Data[4:]))
			seq := binary.BigEndian.Uint32(f.Data[8:])
			if to != r || from < 0 || from >= queues {
				t.Fatalf("queue %d received a frame from queue %d for queue %d", r, from, to)
			}
			if f.Peer != qa[from].Addr() {
				t.Fatalf("queue %d: frame from %v, want %v", r, f.Peer, qa[from].Addr())
			}
			if !bytes.Equal(f.Data, queueFrame(from, to, seq)) {
				t.Fatalf("queue %d: frame %d of queue %d differs", r, seq, from)
			}
			seen[[2]uint32{uint32(from), seq}] = true
		}
		if len(seen) != queues*perPair {
			t.Errorf("queue %d received %d distinct frames of %d (counters %v)", r, len(seen), queues*perPair, qb[r].Counters())
		}
		// Frames of queue r's own tx queue arrive on rx queue r; the
		// others were handed over by the queues they arrived on.
		if n := counter(qb[r], "xdp_queue_taken_over"); n != uint64((queues-1)*perPair) {
			t.Errorf("queue %d took %d frames over, want %d", r, n, (queues-1)*perPair)
		}
	}

	// On veth a frame lands on the rx queue of the sender's tx queue: the
	// program redirected to rx queue q exactly what queue q of a sent.
	qc, err := b.Program().Counters()
	if err != nil {
		t.Fatal(err)
	}
	for q, c := range qc {
		if c.Redirected != queues*perPair {
			t.Errorf("rx queue %d: %d frames redirected, want %d", q, c.Redirected, queues*perPair)
		}
	}

	// A frame that arrives on another queue's socket is handed over even
	// when its queue is held up; Hold copies it.
	handed := counter(qb[0], "xdp_queue_handed_over")
	if _, err := qa[0].Send([]transport.Frame{{Peer: qb[1].Addr(), Data: queueFrame(0, 1, 9999)}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && counter(qb[0], "xdp_queue_handed_over") == handed; i++ {
		qb[0].Recv(make([]transport.Frame, 4), 10*time.Millisecond)
	}
	buf := make([]transport.Frame, 4)
	if n, err := qb[1].Recv(buf, time.Second); n != 1 || err != nil {
		t.Fatalf("queue 1: Recv of the handed-over frame = %d, %v", n, err)
	}
	if info, err := qb[1].Hold(&buf[0]); err != nil || !info.Copied {
		t.Errorf("Hold of a handed-over frame = %+v, %v; want a copy", info, err)
	}
	qb[1].Release(&buf[0])

	// Close queue 1 of b: its steering goes, and its port's frames, which
	// arrive on rx queue 0, are no longer anyone's.
	if err := qb[1].Close(); err != nil {
		t.Fatal(err)
	}
	bad := counter(qb[0], "xdp_rx_not_ours")
	if _, err := qa[0].Send([]transport.Frame{{Peer: qb[1].Addr(), Data: queueFrame(0, 1, 1)}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && counter(qb[0], "xdp_rx_not_ours") == bad; i++ {
		if n, err := qb[0].Recv(make([]transport.Frame, 4), 10*time.Millisecond); n != 0 || err != nil {
			t.Fatalf("queue 0 delivered %d frames (%v) for the port of closed queue 1", n, err)
		}
	}
	if counter(qb[0], "xdp_rx_not_ours") != bad+1 {
		t.Errorf("the frame for closed queue 1 was not seen and refused by queue 0")
	}
	if _, err := qb[1].Send([]transport.Frame{{Peer: qa[1].Addr(), Data: []byte{1}}}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send on a closed queue: %v, want ErrClosed", err)
	}

	// With every queue closed, the transports send and receive again.
	for q := range queues {
		if err := errors.Join(qa[q].Close(), qb[q].Close()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: []byte("again")}}); n != 1 || err != nil {
		t.Fatalf("Send after the queues closed = %d, %v", n, err)
	}
	if fs, err := recvAll(t, b, 1); err != nil || len(fs) != 1 || string(fs[0].Data) != "again" {
		t.Fatalf("Recv after the queues closed: %d frames, %v", len(fs), err)
	}
	// Queues reopen, and the transport's Close closes them.
	if _, err := b.OpenQueue(2); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(a.Close(), b.Close()); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t); n > fds {
		t.Errorf("%d file descriptors open after Close, %d before", n, fds)
	}
}

// A transport with raw Ethernet framing has no queue transports: the
// queues are told apart by UDP port.
func TestQueuesNeedUDP(t *testing.T) {
	a, _, _ := newTransports(t, 2, false)
	if _, err := a.OpenQueue(0); !errors.Is(err, ErrNotSupported) {
		t.Errorf("OpenQueue with raw framing: %v, want ErrNotSupported", err)
	}
	if _, err := a.Steer(7000, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("Steer with raw framing: %v, want ErrConfig", err)
	}
}
