package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// Queue transports: the per-queue design of transport.Queued over AF_XDP.
//
// A Transport with UDP framing serves each of its queues as a transport of
// its own (OpenQueue): queue k is the socket NewTransport opened on the
// k-th served rx queue, with its own UMEM, fill, completion, RX and TX
// rings, its own receive and transmit state, held frames and regions, and
// its own NIC id, the transport's IPv4 address with UDP port Port+k. So a
// queue's Send, Recv, refill and completion reaping take only that
// socket's locks, and one goroutine per queue (mx's QueuedBoard) serves it
// on its own core.
//
// An AF_XDP socket receives only what arrives on the rx queue it is bound
// to, and the XDP program can redirect a frame only to a socket of that
// queue. So a frame for port Port+k must arrive on queue k's rx queue, or
// be handed over after it arrived elsewhere. Steer does both: it installs
// an ethtool ntuple rule (flow-type udp4 dst-port P action Q) where the
// driver has one, and enters the port in the transport's software table
// in every case, by which a queue that receives a frame for another
// queue's port copies it into that queue's inbox and wakes it. On veth,
// which has no ntuple filters, a frame arrives on the rx queue of the
// sender's tx queue, so queues that talk to the same queue index of the
// peer need no hand-over; on a NIC with rules, none does.

// ErrQueuesOpen is returned by a Transport's Send, Recv and RegionMemory
// while queue transports of it are open: each queue's transport then sends
// and receives on its own socket.
var ErrQueuesOpen = errors.New("xdp: the transport's queues are open: send and receive on each queue's transport (OpenQueue)")

var _ transport.Queued = (*Transport)(nil)

// PortSteering is how the frames for one UDP port reach one queue's
// socket: an ntuple rule in the NIC where its driver has one, and the
// transport's software hand-over for frames that arrive on another queue
// all the same (without a rule, or before it took effect).
type PortSteering struct {
	// Port is the UDP destination port steered.
	Port uint16
	// Queue is the transport's queue (OpenQueue's index) its frames reach;
	// RxQueue is that queue's rx queue on the interface.
	Queue, RxQueue int
	// Rule is the location of the ntuple rule that steers the port, -1
	// when the driver has none (veth, or a full rule table): the queue
	// that receives such a frame then hands it over in software.
	Rule int

	t       *Transport
	removed atomic.Bool
}

// Hardware reports whether an ntuple rule steers the port.
func (s *PortSteering) Hardware() bool { return s.Rule >= 0 }

// String describes the steering.
func (s *PortSteering) String() string {
	how := "software hand-over"
	if s.Hardware() {
		how = fmt.Sprintf("ntuple rule %d", s.Rule)
	}
	return fmt.Sprintf("UDP port %d to queue %d (rx queue %d of %s) by %s", s.Port, s.Queue, s.RxQueue, s.t.opts.Interface, how)
}

// Remove takes the steering out: the ntuple rule is deleted and the port
// leaves the software table, so its frames go wherever the NIC puts them
// and are dropped unless that queue's transport has the port. A second
// Remove does nothing.
func (s *PortSteering) Remove() error {
	if s.removed.Swap(true) {
		return nil
	}
	s.t.queues.Soft.Delete(s.Port)
	if !s.Hardware() {
		return nil
	}
	nfc := ethtoolRxnfc{Cmd: ethtoolSRxClsRlDel}
	nfc.FS.Location = uint32(s.Rule)
	if err := ethtoolRxnfcCmd(s.t.ctl, s.t.opts.Interface, &nfc); err != nil {
		return opErr(fmt.Sprintf("ETHTOOL_SRXCLSRLDEL rule %d (port %d)", s.Rule, s.Port), s.t.opts.Interface, s.RxQueue, err)
	}
	return nil
}

// queueLink is what a queue transport has beyond a transport's: its
// board, its index and steering, and the inbox other queues hand frames
// over to.
type queueLink struct {
	board *Transport
	index int
	steer *PortSteering
	// inbox holds frames other queues received for this queue's port,
	// copied into buffers from free; efd is the eventfd they write to
	// wake this queue's Recv. out are the buffers the latest Recv
	// returned, back to free at the next.
	inbox chan handed
	free  chan []byte
	out   [][]byte
	efd   int
	// pushers counts other queues' hand-overs under way, so Close can
	// empty the inbox once none is.
	pushers atomic.Int32
	// forwarded counts frames this queue received for another queue's
	// port and handed over; dropped those it could not (that queue
	// closed, its inbox full); taken those its Recv took from its inbox.
	forwarded, dropped, taken atomic.Uint64
}

// handed is a frame one queue received for another: its sender and Data.
type handed struct {
	peer transport.NICID
	ip   [4]byte
	mac  [6]byte
	data []byte
}

// inboxFrames is how many frames a queue's inbox holds.
const inboxFrames = 256

// Queues implements transport.Queued: one queue per served rx queue
// (TransportOptions.Queues).
func (t *Transport) Queues() int {
	if t.queue != nil {
		return 0
	}
	return len(t.socks)
}

// OpenQueue implements transport.Queued: it returns queue q (0 to
// Queues()-1, the socket of rx queue TransportOptions.Queues[q]) as a
// transport of its own, with the socket's UMEM, rings and region frames
// (RegionMemory, Register) to itself, and steers its port, the
// transport's UDP port + q, there (Steer). It needs UDP framing: queues
// are told apart by UDP port. While any queue is open the transport's own
// Send, Recv and RegionMemory fail with ErrQueuesOpen; OpenQueue fails
// while they are under way, and for queue 0 while the transport has
// regions registered or region memory out. The queue transport's Close
// removes the steering and gives the socket back; the transport's Close
// closes its queues.
func (t *Transport) OpenQueue(q int) (transport.Transport, error) {
	return t.openQueue(q)
}

func (t *Transport) openQueue(q int) (_ *Transport, err error) {
	iface := t.opts.Interface
	if t.queue != nil {
		return nil, configErr("open queue", "OpenQueue on a queue's transport: open queues on the transport NewTransport returned")
	}
	if t.closed.Load() {
		return nil, errClosed
	}
	if !t.udp {
		return nil, &OpError{Op: "open queue", Iface: iface, Queue: q, Err: ErrNotSupported,
			Fix: "queue transports need UDP framing (TransportOptions.UDP): queues are told apart by UDP port"}
	}
	if q < 0 || q >= len(t.socks) {
		return nil, &OpError{Op: "open queue", Iface: iface, Queue: q, Err: ErrQueue,
			Fix: fmt.Sprintf("the transport serves %d queues: open 0 to %d", len(t.socks), len(t.socks)-1)}
	}
	s := t.queues
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Open[q].Load() != nil {
		return nil, &OpError{Op: "open queue", Iface: iface, Queue: q, Err: ErrBusy, Fix: "the queue is open already: close its transport first"}
	}
	// The transport's Send and Recv must be idle and stay out: nopen
	// makes them refuse, the locks say none is under way.
	s.NOpen.Add(1)
	defer func() {
		if err != nil {
			s.NOpen.Add(-1)
		}
	}()
	if !t.rxMu.TryLock() {
		return nil, configErr("open queue", "a Recv of the transport is under way: open the queues before receiving on the transport")
	}
	defer t.rxMu.Unlock()
	if !t.txMu.TryLock() {
		return nil, configErr("open queue", "a Send of the transport is under way: open the queues before sending on the transport")
	}
	defer t.txMu.Unlock()
	sock := t.socks[q]
	if q == 0 {
		t.regMu.RLock()
		busy := len(t.regions) > 0 || t.frames.inUse()
		t.regMu.RUnlock()
		if busy {
			return nil, configErr("open queue", "queue 0's socket has regions or region memory of the transport's: close them and release the memory (ReleaseRegionMemory) before opening queue 0")
		}
	}
	// Frames of the transport's last Recv on this socket go back to it.
	h := t.held[q][:0]
	for _, d := range t.held[q] {
		if d.Addr != lentMark {
			h = append(h, d)
		}
	}
	sock.Release(h)
	t.held[q] = t.held[q][:0]

	port := t.port + uint16(q)
	x := &Transport{
		opts: t.opts, prog: t.prog, socks: []*Socket{sock}, wake: -1, nl: t.nl, nlMu: t.nlMu, ctl: -1,
		mac: t.mac, ifMTU: t.ifMTU, udp: true, ip: t.ip, port: port,
		neigh: make(map[[4]byte][6]byte),
	}
	x.addr, _ = transport.UDPNICID(netip.AddrPortFrom(netip.AddrFrom4(t.ip), port))
	for ip, mac := range t.opts.Neighbors {
		if ip.Unmap().Is4() {
			x.neigh[ip.Unmap().As4()] = mac
		}
	}
	link := &queueLink{board: t, index: q, efd: -1, inbox: make(chan handed, inboxFrames), free: make(chan []byte, inboxFrames)}
	x.queue = link
	defer func() {
		if err != nil {
			for _, fd := range []int{x.wake, link.efd} {
				if fd >= 0 {
					unix.Close(fd)
				}
			}
		}
	}()
	if x.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, opErr("eventfd", iface, q, err)
	}
	if link.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, opErr("eventfd", iface, q, err)
	}
	x.fds = []unix.PollFd{{Fd: int32(sock.FD()), Events: unix.POLLIN}, {Fd: int32(x.wake), Events: unix.POLLIN}, {Fd: int32(link.efd), Events: unix.POLLIN}}
	mtu := x.MTU()
	for range inboxFrames {
		link.free <- make([]byte, mtu)
	}
	x.held = [][]Desc{make([]Desc, 0, 256)}
	x.rxDesc = make([]Desc, 256)
	x.lends = transport.NewLends[lentFrame](max(1, len(sock.UMEM())/sock.FrameSize()/4))
	x.txDesc = make([]Desc, 64)
	x.txOut = make([]Desc, 0, 3*64)
	fs := sock.FrameSize()
	x.frames = newRegionFrames(len(sock.RegionMemory())/fs, fs, sock.u.regionBase)
	if link.steer, err = t.Steer(port, q); err != nil {
		return nil, err
	}
	sock.u.mu.Lock()
	sock.u.regionDone = x.regionDone
	sock.u.mu.Unlock()
	s.Open[q].Store(x)
	return x, nil
}

// Steer makes the frames for UDP destination port reach queue q's socket
// and returns the steering to Remove: an ntuple rule (udp4 dst-port to
// the queue's rx queue) where the driver carries one out, and in any case
// the port in the software table, so a queue that receives the port's
// frames anyway hands them to queue q. OpenQueue steers each queue's own
// port; the port must be one the XDP program claims, the transport's UDP
// port to that port + Queues()-1. Errors wrap ErrConfig (no UDP framing,
// or a port the program does not claim), ErrQueue, and those of the
// ntuple ioctl other than ErrNotSupported and a full table, which leave
// the port to the software table.
func (t *Transport) Steer(port uint16, q int) (*PortSteering, error) {
	if t.queue != nil {
		t = t.queue.board
	}
	iface := t.opts.Interface
	if !t.udp {
		return nil, configErr("steer", "steering by UDP port needs UDP framing (TransportOptions.UDP)")
	}
	if q < 0 || q >= len(t.socks) {
		return nil, &OpError{Op: "steer", Iface: iface, Queue: q, Err: ErrQueue,
			Fix: fmt.Sprintf("the transport serves %d queues: steer to 0 to %d", len(t.socks), len(t.socks)-1)}
	}
	if hi := int(t.port) + len(t.socks) - 1; int(port) < int(t.port) || int(port) > hi {
		return nil, configErr("steer", fmt.Sprintf("UDP port %d is not one the XDP program claims (%d to %d, one per queue): steer a port of that range", port, t.port, hi))
	}
	st := &PortSteering{Port: port, Queue: q, RxQueue: t.socks[q].Queue(), Rule: -1, t: t}
	loc, err := insertRule(t.ctl, iface, udpPortRule(port, st.RxQueue))
	switch {
	case err == nil:
		st.Rule = int(loc)
	case errors.Is(err, ErrNotSupported), errors.Is(err, unix.ENOSPC):
	default:
		return nil, err
	}
	t.queues.Soft.Set(port, q)
	return st, nil
}

// queuesOpen fails a transport's Send, Recv and RegionMemory while its
// queues are open.
func (t *Transport) queuesOpen() error {
	if t.queues.AnyOpen() {
		return ErrQueuesOpen
	}
	return nil
}

// handOver gives the frame of h and data, received on this queue for
// another queue's port, to that queue, and reports whether the port is
// steered in software to another queue (the frame is then handed over or
// dropped, and counted either way).
func (t *Transport) handOver(h UDPHeader, data []byte) bool {
	b := t.queue.board
	k, ok := b.queues.Soft.Lookup(h.DstPort)
	if !ok || k == t.queue.index {
		return false
	}
	if o := b.queues.Open[k].Load(); o != nil {
		// Announce the push before looking at closed: Close sets closed,
		// then waits for pushers to leave before it empties the inbox.
		dst := o.queue
		dst.pushers.Add(1)
		pushed := false
		if !o.closed.Load() && len(data) <= o.MTU() {
			select {
			case buf := <-dst.free:
				id, _ := transport.UDPNICID(netip.AddrPortFrom(netip.AddrFrom4(h.SrcIP), h.SrcPort))
				select {
				case dst.inbox <- handed{peer: id, ip: h.SrcIP, mac: h.Eth.Src, data: buf[:copy(buf[:cap(buf)], data)]}:
					pushed = true
				default:
					dst.free <- buf
				}
			default:
			}
		}
		if pushed {
			var one [8]byte
			one[0] = 1
			unix.Write(dst.efd, one[:])
		}
		dst.pushers.Add(-1)
		if pushed {
			t.queue.forwarded.Add(1)
			return true
		}
	}
	t.queue.dropped.Add(1)
	return true
}

// fromInbox moves frames other queues handed over into frames, up to its
// length, numbering them from got. rxMu is held.
func (t *Transport) fromInbox(frames []transport.Frame, got int) int {
	q := t.queue
	for got < len(frames) {
		var h handed
		select {
		case h = <-q.inbox:
		default:
			return got
		}
		q.out = append(q.out, h.data)
		t.learn(h.ip, h.mac)
		frames[got] = transport.Frame{Peer: h.peer, Data: h.data, Ref: t.lends.RecvRef(got)}
		t.rxAt = append(t.rxAt[:got], lentFrame{sock: -1})
		q.taken.Add(1)
		got++
	}
	return got
}

// recycle gives the inbox buffers the latest Recv returned back to the
// free list, and drains the wake-up count. rxMu is held.
func (t *Transport) recycle() {
	q := t.queue
	for _, b := range q.out {
		q.free <- b[:cap(b)]
	}
	clear(q.out)
	q.out = q.out[:0]
}

// drainWake reads the inbox's eventfd so that the next ppoll sleeps.
func (q *queueLink) drainWake() {
	var buf [8]byte
	unix.Read(q.efd, buf[:])
}

// closeQueue closes a queue transport: its steering is removed, its
// frames go back to its socket, its in-place sends complete (waiting for
// the kernel at most a second), and the socket returns to the transport.
func (t *Transport) closeQueue() error {
	if t.closed.Swap(true) {
		return nil
	}
	var one [8]byte
	one[0] = 1
	unix.Write(t.wake, one[:])
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	t.txMu.Lock()
	defer t.txMu.Unlock()
	q := t.queue
	b := q.board
	b.queues.Mu.Lock()
	defer b.queues.Mu.Unlock()
	err := q.steer.Remove()
	b.queues.Open[q.index].CompareAndSwap(t, nil)
	// A hand-over takes no longer than two channel operations and a write.
	for i := 0; q.pushers.Load() > 0 && i < 1_000_000; i++ {
		runtime.Gosched()
	}
	s := t.socks[0]
	h := t.held[0][:0]
	for _, d := range t.held[0] {
		if d.Addr != lentMark {
			h = append(h, d)
		}
	}
	s.Release(h)
	t.held[0] = t.held[0][:0]
	for _, lf := range t.lends.Close() {
		s.Release([]Desc{lf.d})
	}
	// The kernel may still read frames sent in place: reap its
	// completions for a while, then complete what it never reported.
	u := s.u
	deadline := time.Now().Add(time.Second)
	for t.inflight() > 0 && time.Now().Before(deadline) {
		_, _ = s.Flush()
		u.mu.Lock()
		u.reap()
		u.mu.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
	t.regMu.Lock()
	for _, x := range t.regions {
		for ; x.inflight.Load() > 0; x.inflight.Add(-1) {
			x.r.Done()
		}
	}
	t.regMu.Unlock()
	u.mu.Lock()
	u.regionDone = nil
	if q.index == 0 {
		u.regionDone = b.regionDone
	}
	u.mu.Unlock()
	t.wakeMu.Lock() // see Transport.wakeMu: a racing Wake writes nothing now
	t.wakeShut = true
	t.wakeMu.Unlock()
	err = errors.Join(err, unix.Close(t.wake), unix.Close(q.efd))
	b.queues.NOpen.Add(-1)
	return err
}

// inflight counts the in-place sends of the transport's regions the
// kernel has not completed.
func (t *Transport) inflight() int64 {
	t.regMu.RLock()
	defer t.regMu.RUnlock()
	var n int64
	for _, x := range t.regions {
		n += x.inflight.Load()
	}
	return n
}

// closeQueues closes the transport's open queue transports.
func (t *Transport) closeQueues() error {
	return t.queues.CloseAll((*Transport).closeQueue)
}

// queueCounters appends a queue transport's hand-over counters.
func (t *Transport) queueCounters(c []transport.Counter) []transport.Counter {
	if t.queue == nil {
		return c
	}
	return append(c,
		transport.Counter{Name: "xdp_queue_handed_over", Value: t.queue.forwarded.Load()},
		transport.Counter{Name: "xdp_queue_hand_over_dropped", Value: t.queue.dropped.Load()},
		transport.Counter{Name: "xdp_queue_taken_over", Value: t.queue.taken.Load()},
	)
}
