package nic

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/queueset"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/framing"
)

// ErrQueuesOpen is returned by a board transport's Send and Recv while
// queue transports of it are open: each queue's transport then sends and
// receives on its own queue.
var ErrQueuesOpen = errors.New("transport/nic: the board's queues are open: send and receive on each queue's transport (OpenQueue)")

var _ transport.Queued = (*Transport)(nil)

// Steering is how the frames for one UDP port reach one RX queue: a rule
// in the NIC's filters, the NIC's RSS hash of a destination address chosen
// for the queue, or the transport's software demultiplexing when the NIC
// can do neither.
type Steering struct {
	// Port is the UDP destination port steered.
	Port uint16
	// Queue is the RX queue its frames reach.
	Queue int
	// Rule is the NIC's rule (nicdrv.Rule, RuleUDPDestPort) that steers
	// them, or 0 when RSS or the transport's software demultiplexing
	// does: with software, the queue that receives such a frame hands it
	// to its own queue's transport.
	Rule nicdrv.RuleID
	// Addr, when valid, is the queue's own IPv4 address, chosen from
	// Options.QueueAddrs so that the NIC's RSS puts every datagram to it
	// on Queue whoever sends it (nicdrv.RSS.DestQueue).
	Addr netip.Addr

	t       *Transport
	removed atomic.Bool
}

// Hardware reports whether the NIC steers the frames itself, by a rule or
// by RSS on the queue's address, so that no queue hands frames to another.
func (s *Steering) Hardware() bool { return s.Rule != 0 || s.Addr.IsValid() }

// String describes the steering.
func (s *Steering) String() string {
	switch {
	case s.Rule != 0:
		return fmt.Sprintf("UDP port %d to queue %d by NIC rule %d", s.Port, s.Queue, s.Rule)
	case s.Addr.IsValid():
		return fmt.Sprintf("address %v (UDP port %d) to queue %d by the NIC's RSS hash", s.Addr, s.Port, s.Queue)
	}
	return fmt.Sprintf("UDP port %d to queue %d by software demultiplexing", s.Port, s.Queue)
}

// Remove takes the steering out: the NIC's rule is removed, the port
// leaves the software table, or the queue's address becomes free for
// another queue. Frames for the port then go wherever the NIC puts them
// (RSS, or queue 0) and are dropped unless a transport has that port. A
// second Remove does nothing.
func (s *Steering) Remove() error {
	if s.removed.Swap(true) {
		return nil
	}
	if s.Addr.IsValid() {
		s.t.queues.release(s.Addr)
		return nil
	}
	if s.Hardware() {
		if err := s.t.nic.RemoveRule(s.Rule); err != nil {
			return fmt.Errorf("transport/nic: remove steering of port %d: %w", s.Port, err)
		}
		return nil
	}
	s.t.queues.Soft.Delete(s.Port)
	return nil
}

// queueSet is a board transport's queues: the queue transports open, the
// ports steered in software, and what the board keeps of its queues
// beyond a queued transport's.
type queueSet struct {
	*queueset.Set[Transport]
	addrMu  sync.Mutex          // orders addrs
	orphans []*region           // mappings of closed queues (under Mu), unmapped at the board's Close
	addrs   map[netip.Addr]bool // queue addresses in use (RSS steering), under addrMu
}

// maxAddrTries bounds how many addresses of Options.QueueAddrs OpenQueue
// tries for one queue.
const maxAddrTries = 4096

// pickAddr takes the first free address of prefix (past its network and
// before its broadcast address) whose datagrams, to
// port, the NIC's RSS puts on queue q whatever their sender. It reports
// false when the RSS key lets the sender choose the queue (no address
// steers) or no address of the prefix's first maxAddrTries does.
func (s *queueSet) pickAddr(rss *nicdrv.RSS, prefix netip.Prefix, port uint16, q int) (netip.Addr, bool) {
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	a := prefix.Masked().Addr()
	last := netip.Addr{}
	if prefix.Bits() <= 30 {
		// Leave out the block's network and broadcast addresses.
		a = a.Next()
		b := a.As4()
		host := uint32(1)<<(32-prefix.Bits()) - 1
		v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
		last = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	for range maxAddrTries {
		if !a.IsValid() || !prefix.Contains(a) || a == last {
			break
		}
		if !s.addrs[a] {
			got, err := rss.DestQueue(netip.AddrPortFrom(a, port))
			if err != nil {
				return netip.Addr{}, false
			}
			if got == q {
				if s.addrs == nil {
					s.addrs = map[netip.Addr]bool{}
				}
				s.addrs[a] = true
				return a, true
			}
		}
		a = a.Next()
	}
	return netip.Addr{}, false
}

// release frees a queue address.
func (s *queueSet) release(a netip.Addr) {
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	delete(s.addrs, a)
}

func newQueueSet(n int) *queueSet {
	return &queueSet{Set: queueset.New[Transport](n)}
}

// unmapOrphans unmaps the regions of queue transports closed while the NIC
// could still read them; the board's Close calls it after closing the NIC.
func (s *queueSet) unmapOrphans() error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	var err error
	for _, x := range s.orphans {
		err = errors.Join(err, x.t.pool.DMA().Unmap(x.m))
	}
	s.orphans = nil
	return err
}

// queueState is what a queue transport has beyond a board's: its board,
// its port's steering, and the frames other queues received for it.
type queueState struct {
	board *Transport
	steer *Steering
	inbox chan *nicdrv.Buffer
	// forwarded counts frames this queue received for another queue's
	// port and handed over; dropped those it could not (the other queue
	// closed or its inbox full); delivered the frames its Recv returned.
	forwarded, dropped, delivered atomic.Uint64
	// pushers counts other queues' forward calls pushing into inbox now.
	pushers atomic.Int32
}

// Steering returns how a queue transport's frames reach its queue (nil
// for a board transport).
func (t *Transport) Steering() *Steering {
	if t.queue == nil {
		return nil
	}
	return t.queue.steer
}

// Queues implements transport.Queued: the NIC's queue pairs.
func (t *Transport) Queues() int { return t.nic.Info().Queues }

// OpenQueue implements transport.Queued: it returns queue q as a transport
// of its own, sending on TX queue q and receiving from RX queue q, with
// the queue's own pool, locks and buffers, so its Send and Recv share no
// lock with another queue's. It needs UDP framing: the queue's port is
// Options.UDP's port + q, and OpenQueue steers the queue's frames to RX
// queue q: by a NIC rule for the port where the NIC has one (the 82599's
// 5-tuple or Flow Director filters); else, with Options.QueueAddrs set and
// a NIC whose RSS lets the destination address choose the queue (the
// 82574), by giving the queue an address of that block which RSS puts on
// queue q (the queue's NIC id then carries that address); else by software
// demultiplexing (Steer), in which every queue's transport hands the
// frames it receives for another queue's port to that queue (so, with
// software steering, every queue must be open and received on). The
// queue's Steering says which. While any queue is
// open the board transport's own Send and Recv fail with ErrQueuesOpen.
// The queue transport's Close removes the steering; the board's Close
// closes its queues.
func (t *Transport) OpenQueue(q int) (transport.Transport, error) {
	return t.openQueue(q)
}

func (t *Transport) openQueue(q int) (*Transport, error) {
	if t.queue != nil {
		return nil, errors.New("transport/nic: OpenQueue on a queue's transport: open queues on the board's")
	}
	if t.closed.Load() {
		return nil, errClosed
	}
	if t.hdr != framing.UDPHeadersLen {
		return nil, fmt.Errorf("transport/nic: queue transports need UDP framing (Options.Framing = FramingUDP): a NIC steers frames to queues by UDP port: %w", nicdrv.ErrNotSupported)
	}
	if q < 0 || q >= t.Queues() {
		return nil, fmt.Errorf("transport/nic: queue %d of a %d-queue NIC: %w", q, t.Queues(), nicdrv.ErrBadQueue)
	}
	port := int(t.ip.port) + q
	if port > 0xFFFF {
		return nil, fmt.Errorf("transport/nic: queue %d's port %d+%d is past 65535: choose a lower Options.UDP port", q, t.ip.port, q)
	}
	s := t.queues
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Open[q].Load() != nil {
		return nil, fmt.Errorf("transport/nic: queue %d is open already", q)
	}
	// From here on the board's Send and Recv refuse; one under way now
	// would overlap the queue's on its rings, so the queue is not opened.
	s.NOpen.Add(1)
	if !t.idle() {
		s.NOpen.Add(-1)
		return nil, errors.New("transport/nic: OpenQueue while a Send or Recv of the board is under way: open the queues before using the board")
	}
	ip := t.ip
	ip.port, ip.c = uint16(port), &ipCounters{}
	st, err := t.steerQueue(uint16(port), q)
	if err != nil {
		s.NOpen.Add(-1)
		return nil, err
	}
	id := t.id&^0xFFFF | transport.NICID(port)
	if st.Addr.IsValid() {
		ip.ip = st.Addr.As4()
		id, _ = transport.UDPNICID(netip.AddrPortFrom(st.Addr, uint16(port)))
	}
	x := &Transport{
		nic: t.nic, pool: t.nic.Pool(q), mac: t.mac, id: id, opts: t.opts, mtu: t.mtu, ip: ip, hdr: t.hdr,
		txq: q, rxq: q, nq: t.nq,
		queue:   &queueState{board: t, inbox: make(chan *nicdrv.Buffer, 4*t.opts.Batch)},
		txb:     make([]*nicdrv.Buffer, 0, 64),
		rxb:     make([]*nicdrv.Buffer, t.opts.Batch),
		lends:   transport.NewLends[*nicdrv.Buffer](max(1, t.nic.Pool(q).Len()/4)),
		regions: map[*transport.Region]*region{},
	}
	x.ctx, x.cancel = context.WithCancel(t.ctx)
	x.queue.steer = st
	s.Open[q].Store(x)
	return x, nil
}

// idle reports whether no Send or Recv of the board is under way.
func (t *Transport) idle() bool {
	if !t.txMu.TryLock() {
		return false
	}
	defer t.txMu.Unlock()
	if !t.rxMu.TryLock() {
		return false
	}
	defer t.rxMu.Unlock()
	return true
}

// Steer makes the frames for UDP destination port reach RX queue q, and
// returns the steering to Remove. It installs a NIC rule
// (nicdrv.RuleUDPDestPort) where the NIC carries one out, and otherwise
// (the NIC refuses it with nicdrv.ErrNotSupported or its table is full)
// enters the port in the transport's software table, which queue
// transports consult for every frame they receive. OpenQueue steers each
// queue's own port; Steer steers others (a second port of the same queue).
func (t *Transport) Steer(port uint16, q int) (*Steering, error) {
	if t.queue != nil {
		t = t.queue.board
	}
	if q < 0 || q >= t.Queues() {
		return nil, fmt.Errorf("transport/nic: steer port %d to queue %d of a %d-queue NIC: %w", port, q, t.Queues(), nicdrv.ErrBadQueue)
	}
	s := &Steering{Port: port, Queue: q, t: t}
	id, err := t.nic.AddRule(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: port, Queue: q})
	switch {
	case err == nil:
		s.Rule = id
	case errors.Is(err, nicdrv.ErrNotSupported), errors.Is(err, nicdrv.ErrTableFull):
		t.queues.Soft.Set(port, q)
	default:
		return nil, fmt.Errorf("transport/nic: steer port %d to queue %d: %w", port, q, err)
	}
	return s, nil
}

// steerQueue steers queue q's frames to it: by a NIC rule for its port
// where the NIC has one, else by RSS on an address of Options.QueueAddrs
// chosen for the queue where the NIC's key lets the destination decide,
// else in software (Steer).
func (t *Transport) steerQueue(port uint16, q int) (*Steering, error) {
	rss := t.nic.Info().RSS
	if !t.opts.QueueAddrs.IsValid() || rss == nil || t.nic.RuleCapacity(nicdrv.RuleUDPDestPort) > 0 {
		return t.Steer(port, q)
	}
	a, ok := t.queues.pickAddr(rss, t.opts.QueueAddrs, port, q)
	if !ok {
		return t.Steer(port, q)
	}
	return &Steering{Port: port, Queue: q, Addr: a, t: t}, nil
}

// queuesOpen fails a board transport's Send and Recv while its queues are
// open.
func (t *Transport) queuesOpen() error {
	if t.queue == nil && t.queues.AnyOpen() {
		return ErrQueuesOpen
	}
	return nil
}

// forward hands b, received on this queue, to the queue its UDP port is
// steered to in software, and reports whether it did (or dropped it).
func (t *Transport) forward(b *nicdrv.Buffer) bool {
	soft := t.queue.board.queues.Soft.Load()
	if len(soft) == 0 {
		return false
	}
	h, _, err := framing.ParseUDP(b.Data)
	if err != nil {
		return false
	}
	q, ok := soft[h.DstPort]
	if !ok || q == t.rxq {
		return false
	}
	if o := t.queue.board.queues.Open[q].Load(); o != nil {
		// Announce the push before looking at closed: closeQueue sets
		// closed, then waits for pushers to leave before it empties
		// the inbox, so no buffer is left in a closed queue's inbox.
		o.queue.pushers.Add(1)
		pushed := false
		if !o.closed.Load() {
			select {
			case o.queue.inbox <- b:
				pushed = true
			default:
			}
		}
		o.queue.pushers.Add(-1)
		if pushed {
			o.nudge()
			t.queue.forwarded.Add(1)
			return true
		}
	}
	t.queue.dropped.Add(1)
	_ = t.pool.Free(b)
	return true
}

// fromInbox delivers frames other queues handed over, up to len(frames).
// rxMu is held.
func (t *Transport) fromInbox(frames []transport.Frame) int {
	got := 0
	for got < len(frames) {
		var b *nicdrv.Buffer
		select {
		case b = <-t.queue.inbox:
		default:
			return got
		}
		t.held = append(t.held, b)
		if peer, data, ok := t.decode(b); ok {
			frames[got] = transport.Frame{Peer: peer, Data: data, Ref: t.lends.RecvRef(len(t.held) - 1)}
			got++
		}
	}
	return got
}

// waitQueue waits for a frame on the queue: on its RX queue with WaitRx,
// until a frame comes there or another queue hands one over to its inbox
// (forward), which ends the wait (nudge). recvWait armed the wait's
// cancel before this looks at the inbox, so a frame handed over before
// the look is seen by it, and one handed over after ends the wait.
func (t *Transport) waitQueue(ctx context.Context, deadline time.Time) error {
	if len(t.queue.inbox) > 0 {
		return nil
	}
	_, err := t.nic.WaitRx(ctx, deadline, t.rxq)
	t.rxWakes.Add(1)
	return err
}

// closeQueue closes a queue transport: its steering is removed, its
// buffers go back, and its in-place sends complete (waiting for the NIC at
// most Options.SendTimeout; a region still being read is then unmapped at
// the board's Close instead).
func (t *Transport) closeQueue() error {
	if t.closed.Swap(true) {
		return nil
	}
	b := t.queue.board
	s := b.queues
	s.Mu.Lock()
	defer s.Mu.Unlock()
	t.cancel()
	err := t.queue.steer.Remove()
	s.Open[t.rxq].CompareAndSwap(t, nil)
	for t.queue.pushers.Load() > 0 { // a push takes no longer than a channel send
		runtime.Gosched()
	}
	err = errors.Join(err, t.releaseBuffers())
	t.txMu.Lock()
	deadline := time.Now().Add(t.opts.SendTimeout)
	for t.inflight.Load() > 0 && time.Now().Before(deadline) && !b.closed.Load() {
		_, _ = t.nic.TxBatch(t.txq, nil)
		runtime.Gosched()
	}
	t.txMu.Unlock()
	t.regMu.Lock()
	for _, x := range t.regions {
		if t.inflight.Load() == 0 && !b.closed.Load() {
			err = errors.Join(err, t.pool.DMA().Unmap(x.m))
		} else {
			s.orphans = append(s.orphans, x)
		}
		t.forget(x)
	}
	t.regMu.Unlock()
	s.NOpen.Add(-1)
	return err
}

// releaseBuffers gives back the buffers Recv handed out, the held ones and
// those still in the inbox.
func (t *Transport) releaseBuffers() error {
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	err := t.pool.Free(t.held...)
	clear(t.held)
	t.held = t.held[:0]
	err = errors.Join(err, t.pool.Free(t.lends.Close()...))
	for {
		select {
		case x := <-t.queue.inbox:
			err = errors.Join(err, t.pool.Free(x))
		default:
			return err
		}
	}
}

// closeQueues closes the board's open queue transports, before the board
// closes the NIC: their regions are unmapped after it (unmapOrphans).
func (t *Transport) closeQueues() error {
	return t.queues.CloseAll((*Transport).closeQueue)
}

// queueCounters appends a queue transport's software steering counters.
func (t *Transport) queueCounters(c []transport.Counter) []transport.Counter {
	if t.queue == nil {
		return c
	}
	return append(c,
		transport.Counter{Name: "nic_queue_delivered", Value: t.queue.delivered.Load()},
		transport.Counter{Name: "nic_queue_forwarded", Value: t.queue.forwarded.Load()},
		transport.Counter{Name: "nic_queue_forward_dropped", Value: t.queue.dropped.Load()},
	)
}
