package loopback

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// cacheLine pads fields written by different goroutines apart.
type cacheLine [64]byte

// txCounters are written by the goroutines sending from a port.
type txCounters struct {
	sent        atomic.Uint64
	unknownPeer atomic.Uint64
}

// rxCounters are written by the senders into a port, under its producer
// lock.
type rxCounters struct {
	delivered  atomic.Uint64
	queueDrops atomic.Uint64
	queueWaits atomic.Uint64
}

type portCounters struct {
	tx txCounters
	rx rxCounters
}

func (c *portCounters) add(tx *txCounters, rx *rxCounters) {
	c.tx.sent.Add(tx.sent.Load())
	c.tx.unknownPeer.Add(tx.unknownPeer.Load())
	c.rx.delivered.Add(rx.delivered.Load())
	c.rx.queueDrops.Add(rx.queueDrops.Load())
	c.rx.queueWaits.Add(rx.queueWaits.Load())
}

// slot is one frame in a port's receive ring. Its buffer grows to the largest
// frame it has carried and is then reused.
type slot struct {
	peer transport.NICID
	buf  []byte
	// reg is set when buf is a sender's registered memory (an in-place
	// send): the slot completes that send when the receiver is done with
	// it, and never copies into buf.
	reg *transport.Region
}

// minSlotBuf is the smallest buffer a slot allocates, so that the small
// frames of a ping-pong never make it grow twice.
const minSlotBuf = 256

// Port is one board attached to a [Network]. It implements
// [transport.Transport] and [transport.Stats]. Send may be called from
// several goroutines at once; Recv by one goroutine at a time.
type Port struct {
	net     *Network
	id      transport.NICID
	mtu     int
	slots   []slot
	mask    uint64
	done    chan struct{} // closed by Close
	wake    chan struct{} // one token: the receiver may have gone to sleep
	timer   *time.Timer   // the receiver's bounded-wait timer
	errDone error         // ErrClosed wrapped with the port, built once
	once    sync.Once

	_ cacheLine
	// Producer side, under mu: any goroutine sending to this port.
	mu    sync.Mutex
	ptail uint64        // next slot to fill (mu)
	tail  atomic.Uint64 // ptail as published to the receiver
	// base is the position that maps to slots[0] (see slot): a producer
	// that finds the queue empty and released moves it to ptail, so a
	// queue that rarely holds more than a frame or two keeps reusing its
	// first slots. Stored (under mu) before the tail that publishes the
	// frames placed by it; the receiver loads it after tail, and only
	// while it has frames the producers cannot rebase under.
	base atomic.Uint64
	rx   rxCounters // frames sent to this port
	// stalled: a wait for room timed out at head stalledAt; later frames
	// are dropped at once until the receiver moves head (mu).
	stalled   bool
	stalledAt uint64

	_  cacheLine
	tx txCounters // frames sent from this port

	_ cacheLine
	// Consumer side: the one goroutine in Recv, and Close, under cmu
	// (never held while Recv sleeps).
	cmu     sync.Mutex
	next    uint64        // next slot to hand out
	rhead   uint64        // head as last published
	head    atomic.Uint64 // slots before head are free for producers
	waiting atomic.Uint32 // 1: the receiver is about to sleep on wake
	closed  atomic.Bool
	recvd   atomic.Uint64 // frames handed out by Recv
	lends   *transport.Lends[*transport.Region]
	// inPlace counts slots handed out since rhead that hold a sender's
	// memory, so Recv walks them only when some do.
	inPlace int

	_ cacheLine
}

func newPort(n *Network, id transport.NICID) *Port {
	p := &Port{
		net:   n,
		id:    id,
		mtu:   n.mtu,
		slots: make([]slot, n.queueLen),
		mask:  uint64(n.queueLen - 1),
		done:  make(chan struct{}),
		wake:  make(chan struct{}, 1),
		timer: time.NewTimer(time.Hour),
		lends: transport.NewLends[*transport.Region](n.queueLen),
	}
	p.timer.Stop()
	p.errDone = fmt.Errorf("loopback: port %v: %w", id, transport.ErrClosed)
	return p
}

// Addr returns the port's NIC id.
func (p *Port) Addr() transport.NICID { return p.id }

// MTU returns the largest Data a frame may carry.
func (p *Port) MTU() int { return p.mtu }

// Send copies frames onto the wire in order. It waits only for room in a
// full receive queue, at most the network's FullWait while the receiver
// frees nothing (see the package doc); a frame to a NIC id no port has
// attached, or that still finds no room then, is dropped and counted, not
// refused. Send returns an error wrapping [transport.ErrTooBig] for the first
// frame whose Data is longer than the MTU (frames before it are sent), and
// one wrapping [transport.ErrClosed] once the port is closed.
func (p *Port) Send(frames []transport.Frame) (int, error) {
	if p.closed.Load() {
		return 0, p.errDone
	}
	n := p.net
	if n.faulty.Load() {
		return n.sendFaulty(p, frames)
	}
	ports := *n.ports.Load()
	i := 0
	for i < len(frames) {
		if r := frames[i].Region; r != nil {
			if err := r.Check(p, &frames[i]); err != nil {
				return i, fmt.Errorf("loopback: port %v: frame %d: %w", p.id, i, err)
			}
		}
		// Send the run of frames to one peer, up to the first too big one,
		// with one lock and one wakeup.
		peer := frames[i].Peer
		j := i
		for j < len(frames) && frames[j].Peer == peer && len(frames[j].Data) <= p.mtu {
			j++
		}
		if j > i {
			dst := ports[peer]
			if dst == nil || !dst.enqueue(p.id, frames[i:j]) {
				p.tx.unknownPeer.Add(uint64(j - i))
			}
			p.tx.sent.Add(uint64(j - i))
			i = j
			continue
		}
		return i, p.tooBig(i, len(frames[i].Data))
	}
	return i, nil
}

func (p *Port) tooBig(i, size int) error {
	return fmt.Errorf("loopback: port %v: frame %d: %d bytes exceeds MTU %d: %w", p.id, i, size, p.mtu, transport.ErrTooBig)
}

// enqueue copies frames (all no larger than the MTU) from src into the
// receive ring, waiting for room when it is full (waitRoom) and dropping
// what still does not fit. It reports false if the port is closed.
func (p *Port) enqueue(src transport.NICID, frames []transport.Frame) bool {
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		return false
	}
	tail := p.ptail
	// The acquire load of head orders our slot writes after the
	// receiver's last reads of those slots (released by its store).
	head := p.head.Load()
	free := uint64(len(p.slots)) - (tail - head)
	if head == tail && (tail-p.base.Load())&p.mask != 0 {
		// Empty, and every slot handed back: start again at slots[0],
		// whose buffer is still in the cache, rather than walk on
		// through all the others (a ping-pong cycled through every
		// slot and its buffer, a cache miss per frame on each side).
		p.base.Store(tail)
	}
	var put, dropped uint64
	for i := range frames {
		if free == 0 {
			// Let the receiver have what is there, and wait for room.
			p.publish(tail, put)
			put = 0
			if free = p.waitRoom(tail); free == 0 {
				dropped = uint64(len(frames) - i)
				break
			}
		}
		free--
		d := frames[i].Data
		s := p.slot(tail)
		if r := frames[i].Region; r != nil && len(d) > 0 {
			// In place: the receiver reads the sender's memory, and
			// the send completes when the receiver is done with it.
			r.Begin()
			s.buf, s.reg, s.peer = d[:len(d):len(d)], r, src
			tail++
			put++
			continue
		}
		if cap(s.buf) < len(d) {
			s.buf = make([]byte, len(d), slotCap(len(d), p.mtu))
		}
		s.buf = s.buf[:len(d)]
		copy(s.buf, d)
		s.peer = src
		tail++
		put++
	}
	p.publish(tail, put)
	p.mu.Unlock()
	if dropped > 0 {
		p.rx.queueDrops.Add(dropped)
	}
	return true
}

// publish hands the receiver the put frames filled up to tail, and wakes
// it if it sleeps (mu held).
func (p *Port) publish(tail, put uint64) {
	p.ptail = tail
	// The release store of tail publishes the slot contents.
	p.tail.Store(tail)
	if put == 0 {
		return
	}
	p.rx.delivered.Add(put)
	// The receiver stores waiting=1 and then loads tail; we stored
	// tail and now load waiting. Go atomics are sequentially
	// consistent, so at least one side sees the other's store: the
	// receiver finds the frame, or we find it waiting and wake it.
	if p.waiting.Load() != 0 && p.waiting.CompareAndSwap(1, 0) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// waitRoom waits until the receiver frees slots of a full queue whose
// next slot to fill is tail, and returns how many are free: 0 when the
// receiver freed nothing for FullWait (or the port closed), and at once
// while an earlier wait's timeout stands and the receiver has not moved
// since (mu held: senders to this port queue behind the one waiting).
func (p *Port) waitRoom(tail uint64) uint64 {
	n := uint64(len(p.slots))
	h := p.head.Load()
	if free := n - (tail - h); free > 0 {
		// The receiver freed slots between the caller's look and
		// this one: the loop below waits for the head to move from
		// h, and it may never move again if the receiver has taken
		// everything.
		return free
	}
	if p.stalled && h == p.stalledAt {
		return 0
	}
	p.stalled = false
	wait := p.net.fullWait
	if wait < 0 {
		return 0
	}
	p.rx.queueWaits.Add(1)
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		if h2 := p.head.Load(); h2 != h {
			return n - (tail - h2)
		}
		if p.closed.Load() {
			return 0
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				p.stalled, p.stalledAt = true, h
				return 0
			}
			time.Sleep(10 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// slot returns the slot of queue position pos: by the producer lock, or by
// the receiver for a position it has taken and not yet handed back (no
// producer moves base then: the queue is not empty and released).
func (p *Port) slot(pos uint64) *slot {
	return &p.slots[(pos-p.base.Load())&p.mask]
}

// slotCap is the capacity a slot allocates for a frame of n bytes: a power of
// two (at least minSlotBuf) but never more than the MTU.
func slotCap(n, mtu int) int {
	c := minSlotBuf
	for c < n {
		c <<= 1
	}
	return max(min(c, mtu), n)
}

// Recv fills frames with up to len(frames) received frames; see
// [transport.Transport.Recv]. Their Data points into the port's ring and
// stays valid until the next Recv; its capacity is clipped to its length, so
// appending to it cannot overwrite another frame. Recv with an empty frames
// slice returns 0, nil at once. After Close it returns an error wrapping
// [transport.ErrClosed], and a Recv blocked at Close returns that too.
func (p *Port) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	// Hand the slots of the previous Recv back to the producers.
	p.cmu.Lock()
	if p.rhead != p.next {
		if p.inPlace > 0 {
			p.completeSlots(p.rhead, p.next)
		}
		p.rhead = p.next
		p.head.Store(p.next)
	}
	p.lends.Recv()
	if p.closed.Load() {
		p.cmu.Unlock()
		return 0, p.errDone
	}
	n := p.takeLocked(frames)
	p.cmu.Unlock()
	if n > 0 || timeout == 0 || len(frames) == 0 {
		return n, nil
	}
	return p.wait(frames, timeout)
}

// take hands out up to len(frames) queued frames without releasing them.
func (p *Port) take(frames []transport.Frame) int {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	return p.takeLocked(frames)
}

// takeLocked is take with cmu held.
func (p *Port) takeLocked(frames []transport.Frame) int {
	if len(frames) == 0 || p.closed.Load() {
		return 0 // Close completed the queued frames
	}
	avail := p.tail.Load() - p.next
	if avail == 0 {
		return 0
	}
	n := min(int(avail), len(frames))
	p.lends.Got(n)
	base := p.base.Load() // after tail: see Port.base
	for i := range n {
		s := &p.slots[(p.next+uint64(i)-base)&p.mask]
		frames[i] = transport.Frame{Peer: s.peer, Data: s.buf[:len(s.buf):len(s.buf)], Ref: p.lends.RecvRef(i)}
		if s.reg != nil {
			p.inPlace++
		}
	}
	p.next += uint64(n)
	p.recvd.Add(uint64(n))
	return n
}

// wait sleeps until a frame arrives, the timeout passes (timeout > 0) or the
// port is closed.
func (p *Port) wait(frames []transport.Frame, timeout time.Duration) (int, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		p.timer.Reset(timeout)
		defer p.timer.Stop()
		expired = p.timer.C
	}
	for {
		p.waiting.Store(1)
		if n := p.take(frames); n > 0 {
			p.waiting.Store(0)
			return n, nil
		}
		select {
		case <-p.wake:
		case <-p.done:
			p.waiting.Store(0)
			return 0, p.errDone
		case <-expired:
			p.waiting.Store(0)
			// A frame may have arrived with the timer.
			return p.take(frames), nil
		}
	}
}

// completeSlots completes the in-place sends of slots [from, to), which
// the receiver is done with, and forgets the senders' memory.
func (p *Port) completeSlots(from, to uint64) {
	for k := from; k != to; k++ {
		s := p.slot(k)
		if s.reg != nil {
			s.reg.Done()
			s.buf, s.reg = nil, nil
		}
	}
	p.inPlace = 0
}

// Hold keeps a frame of the latest Recv; see [transport.Transport.Hold].
// The port lends the frame's slot buffer (or, for an in-place send, the
// sender's memory, whose send then completes at Release) and gives the slot
// a fresh buffer when it next carries a frame; it lends at most QueueLen
// buffers at once and copies Data past that.
func (p *Port) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	i, err := p.lends.Index(f.Ref)
	if err == nil && p.closed.Load() {
		err = p.errDone
	}
	if err != nil {
		return transport.HoldInfo{}, fmt.Errorf("loopback: port %v: hold: %w", p.id, err)
	}
	s := p.slot(p.next - uint64(p.lends.Count()) + uint64(i))
	if p.lends.Lend(f, s.reg) {
		s.buf, s.reg = nil, nil // the caller owns it now
		return transport.HoldInfo{}, nil
	}
	p.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

// Release ends a hold; see [transport.Transport.Release].
func (p *Port) Release(f *transport.Frame) {
	if r, ok := p.lends.Return(f); ok && r != nil {
		r.Done()
	}
}

// Register registers mem for in-place sends: a frame of the region is
// handed to the receiving port by reference, and its send completes when
// the receiver's next Recv (or Release, if it held the frame) is done with
// it. Frames dropped because the receiving queue is full complete at once.
// With faults on (Network.SetFaults) frames of regions are copied.
func (p *Port) Register(mem []byte) (*transport.Region, error) {
	if p.closed.Load() {
		return nil, p.errDone
	}
	return transport.NewRegion(p, mem, true, nil), nil
}

// Close detaches the port from its network and makes a blocked Recv, and
// every later call, return an error wrapping [transport.ErrClosed]. Frames
// still queued are dropped, held frames are released, and the in-place
// sends of both complete. It is safe to call more than once.
func (p *Port) Close() error {
	p.once.Do(func() {
		p.cmu.Lock()
		p.mu.Lock()
		p.closed.Store(true)
		// No producer enqueues and no Recv takes any more: complete
		// what is queued or handed out.
		p.completeSlots(p.rhead, p.ptail)
		p.mu.Unlock()
		p.cmu.Unlock()
		for _, r := range p.lends.Close() {
			if r != nil {
				r.Done()
			}
		}
		close(p.done)
		p.net.detach(p)
	})
	return nil
}

// Counters returns the port's counters: frames sent from it, frames sent
// from it to no attached port (unknown_peer), frames placed in its queue
// (delivered), dropped because its queue stayed full (queue_drops), waits of
// senders for room in its queue (queue_waits), and handed out by Recv
// (received).
func (p *Port) Counters() []transport.Counter {
	return append([]transport.Counter{
		{Name: "sent", Value: p.tx.sent.Load()},
		{Name: "unknown_peer", Value: p.tx.unknownPeer.Load()},
		{Name: "delivered", Value: p.rx.delivered.Load()},
		{Name: "queue_drops", Value: p.rx.queueDrops.Load()},
		{Name: "queue_waits", Value: p.rx.queueWaits.Load()},
		{Name: "received", Value: p.recvd.Load()},
	}, p.lends.Counters("")...)
}

// Interface checks.
var (
	_ transport.Transport = (*Port)(nil)
	_ transport.Stats     = (*Port)(nil)
)
