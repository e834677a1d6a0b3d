// Package loopback is an in-process wire for the mx message layer: a
// [Network] connects any number of [Port]s, each a board with its own NIC id,
// and moves frames between them by copying them into the destination port's
// receive queue. It needs no privileges and no kernel, so the message layer's
// tests run anywhere, and its fault injector makes the wire as hostile as a
// test wants.
//
// # The fast path
//
// Every port owns a bounded ring of frame slots (Options.QueueLen of them).
// Send looks the destination up in a copy-on-write table, takes the
// destination's producer lock once per run of frames to the same peer, copies
// each Data into a slot buffer and publishes the new tail with one atomic
// store. There is no goroutine hop and no channel per frame, and once every
// slot has a buffer large enough for its frames (slot buffers grow on demand
// and are kept), Send allocates nothing. Recv by the one receiving goroutine
// takes no lock: it loads the tail atomically and hands out Data slices that
// point into the slots themselves. Those slots are released to the senders
// only at the next Recv (or never, after Close), which is what keeps Data
// valid until then, as the [transport] contract requires. A sender that
// finds the queue empty and every slot released starts filling at the
// first slot again, so a queue that holds a frame or two at a time (a
// ping-pong's) reuses the same few slots and buffers, which stay in the
// cache, instead of walking through all of them. A poll (timeout 0)
// on an empty queue is two atomic loads. A waiting Recv sleeps on a one-slot
// channel that a sender signals only when the receiver has said it is about to
// sleep.
//
// A full queue pushes back: Send publishes what it has put, wakes the
// receiver and waits for room, as the [transport] contract asks of a
// transport whose queue is momentarily full (QueueWaits counts the waits).
// Only a receiver that frees nothing for Options.FullWait makes the wire
// drop and count (QueueDrops) the frames that do not fit, and the frames
// after them at once until it moves again, so a port nobody reads does not
// stall its senders; a frame addressed to a NIC id that no port has
// attached is dropped and counted (UnknownPeer), as it would vanish on a real
// wire. Neither is an error for Send.
//
// # Faults
//
// [Faults] turns the wire lossy: each frame is independently lost,
// corrupted (one random bit of one random byte flipped), duplicated
// (delivered twice), reordered (held back and released after the next frame
// to the same port, or after a short bound so that nothing is held forever)
// and delayed, with the fractions given. Decisions come from a PRNG seeded by
// Faults.Seed, and are drawn in send order under one network-wide lock, so the
// same seed and the same sequence of Send calls give the same fault pattern
// (which frames are lost, corrupted, ...) from run to run. The lock is
// held for the draws: the frames of a Send that the model lets through are
// then delivered as the fast path delivers them, each run to one port with
// one enqueue, and after the lock is released unless the model may hold
// frames back (reorder or delay on, or a frame still held), whose release
// must keep its order with theirs. So a polling receiver takes a sender's
// batch as one batch, and a sender's copies (or its wait for room in a
// full queue) hold up no send to another port unless reorder or delay is
// on: with faults on and nothing lost, the wire costs what it costs
// without. The frames of one Send keep their order, save those the model
// reorders; two concurrent Sends from one port to one destination may
// arrive in either order, as on the fast path. Delayed and held frames are
// released by one timer goroutine per network, started when a fault needs
// it and stopped by [Network.Close]. With every fault at zero the wire
// takes the fast path above. The model itself lives in package [fault],
// whose wrapper applies the same faults, with the same seeds, to any other
// transport.
package loopback

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

// DefaultMTU is the MTU of a network whose Options.MTU is 0: the Data of a
// 9000-byte jumbo Ethernet frame once its 14-byte Ethernet header is taken off.
// Open-MX counts the Ethernet header against the interface MTU, so this is
// the largest Data an Open-MX peer sends on a 9000-byte link (a pull reply of
// 8968 payload bytes plus its 18 bytes of headers).
const DefaultMTU = 9000 - 14

// DefaultQueueLen is the number of frames a port buffers when
// Options.QueueLen is 0.
const DefaultQueueLen = 4096

// DefaultFullWait is how long Send waits for room in a full queue whose
// receiver frees nothing when Options.FullWait is 0: a live receiver
// descheduled on a loaded machine frees slots well within it.
const DefaultFullWait = 100 * time.Millisecond

// ErrInUse is returned by [Network.Attach] for a NIC id that another port of
// the same network already uses.
var ErrInUse = errors.New("loopback: NIC id already attached")

// Faults says how hostile the wire is: the fault model of package
// [fault], which the wrapper around any other transport applies too.
// Fractions are clamped to [0, 1]; a negative Delay counts as 0. The zero
// value is a perfect wire.
type Faults = fault.Options

// Options configures a [Network]. The zero value is a fault-free wire with
// [DefaultMTU] and [DefaultQueueLen].
type Options struct {
	// MTU is the largest Data one frame may carry; 0 (or a negative
	// value) means DefaultMTU.
	MTU int
	// QueueLen is the number of frames each port buffers before the wire
	// drops (and counts) further frames to it; 0 (or a negative value)
	// means DefaultQueueLen. It is rounded up to a power of two. Slot
	// buffers grow to the frames they carry, so a port's queue holds at
	// most QueueLen*MTU bytes, and much less for small frames.
	QueueLen int
	// FullWait is how long Send waits for room in a full queue whose
	// receiver frees nothing before it drops (and counts) the frames that
	// do not fit; 0 means DefaultFullWait, a negative value never waits.
	FullWait time.Duration
	// Faults is the initial fault setting; see Network.SetFaults.
	Faults Faults
}

// Stats are a network's counters, summed over every port it has had.
type Stats struct {
	Sent        uint64 // frames accepted by Send
	Delivered   uint64 // frames placed in a receive queue (duplicates count twice)
	Dropped     uint64 // frames lost by the Loss fault
	QueueDrops  uint64 // frames dropped because the receiving port's queue stayed full for FullWait
	QueueWaits  uint64 // times a Send waited for room in a full queue
	Duplicated  uint64 // frames delivered twice by the Duplicate fault
	Reordered   uint64 // frames held back by the Reorder fault
	Corrupted   uint64 // frames with a bit flipped by the Corrupt fault
	Delayed     uint64 // frames whose delivery the Delay fault postponed
	UnknownPeer uint64 // frames sent to a NIC id no port had attached
}

// Network is an in-process wire connecting ports. Its methods may be called
// from any goroutine.
type Network struct {
	mtu      int
	queueLen int
	fullWait time.Duration

	// ports is the current NIC id table, replaced (never modified) under mu
	// by Attach and Port.Close, so that Send reads it without a lock.
	ports  atomic.Pointer[map[transport.NICID]*Port]
	faulty atomic.Bool        // faults are on: Send goes through fe
	fe     *fault.Line[*Port] // the fault model, shared by every port

	lateUnknown atomic.Uint64 // held or delayed frames whose sender and destination were gone

	mu      sync.Mutex
	closed  bool
	retired portCounters // counters of closed ports
}

// NewNetwork returns an empty network with the given options.
func NewNetwork(opts Options) *Network {
	n := &Network{mtu: opts.MTU, queueLen: opts.QueueLen, fullWait: opts.FullWait}
	if n.fullWait == 0 {
		n.fullWait = DefaultFullWait
	}
	if n.mtu <= 0 {
		n.mtu = DefaultMTU
	}
	if n.queueLen <= 0 {
		n.queueLen = DefaultQueueLen
	}
	q := 1
	for q < n.queueLen {
		q <<= 1
	}
	n.queueLen = q
	empty := map[transport.NICID]*Port{}
	n.ports.Store(&empty)
	n.fe = fault.NewLine(Faults{}, n.deliverItem)
	n.SetFaults(opts.Faults)
	return n
}

// MTU returns the largest Data a frame on this network may carry.
func (n *Network) MTU() int { return n.mtu }

// Attach connects a new port with NIC id id. It fails with [ErrInUse] if a
// port of this network already has that id, with an error wrapping
// [transport.ErrUnreachable] if id does not fit in 48 bits, and with
// [transport.ErrClosed] after Close. Closing the port detaches it and frees
// its id.
func (n *Network) Attach(id transport.NICID) (*Port, error) {
	if id&^transport.NICIDMask != 0 {
		return nil, fmt.Errorf("loopback: attach %#x: NIC id wider than 48 bits: %w", uint64(id), transport.ErrUnreachable)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("loopback: attach %v: network: %w", id, transport.ErrClosed)
	}
	old := *n.ports.Load()
	if _, ok := old[id]; ok {
		return nil, fmt.Errorf("loopback: attach %v: %w", id, ErrInUse)
	}
	p := newPort(n, id)
	ports := make(map[transport.NICID]*Port, len(old)+1)
	for k, v := range old {
		ports[k] = v
	}
	ports[id] = p
	n.ports.Store(&ports)
	return p, nil
}

// detach removes p from the table and keeps its counters.
func (n *Network) detach(p *Port) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := *n.ports.Load()
	if old[p.id] != p {
		return
	}
	ports := make(map[transport.NICID]*Port, len(old))
	for k, v := range old {
		if v != p {
			ports[k] = v
		}
	}
	n.ports.Store(&ports)
	n.retired.add(&p.tx, &p.rx)
}

// SetFaults changes the faults for frames sent from now on and reseeds the
// fault PRNG with f.Seed. Frames already held or delayed are still delivered.
func (n *Network) SetFaults(f Faults) {
	n.fe.SetOptions(f)
	n.faulty.Store(f.Clamped().Active())
}

// Stats returns the network's counters, including those of closed ports.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	var c portCounters
	c.add(&n.retired.tx, &n.retired.rx)
	for _, p := range *n.ports.Load() {
		c.add(&p.tx, &p.rx)
	}
	n.mu.Unlock()
	fc := n.fe.Counts()
	return Stats{
		Sent:        c.tx.sent.Load(),
		Delivered:   c.rx.delivered.Load(),
		Dropped:     fc.Dropped,
		QueueDrops:  c.rx.queueDrops.Load(),
		QueueWaits:  c.rx.queueWaits.Load(),
		Duplicated:  fc.Duplicated,
		Reordered:   fc.Reordered,
		Corrupted:   fc.Corrupted,
		Delayed:     fc.Delayed,
		UnknownPeer: c.tx.unknownPeer.Load() + n.lateUnknown.Load(),
	}
}

// Close closes every port, drops frames still held or delayed, and stops the
// fault timer goroutine. Later Attach calls fail with [transport.ErrClosed].
// It is safe to call more than once.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ports := *n.ports.Load()
	n.mu.Unlock()
	for _, p := range ports {
		p.Close()
	}
	n.fe.Close()
	return nil
}

// deliver copies data from src into the queue of the port attached as dst.
// It reports false if no open port has that NIC id; a full queue counts as
// delivered to the wire (the port counts the drop).
func (n *Network) deliver(src, dst transport.NICID, data []byte) bool {
	frame := [1]transport.Frame{{Peer: dst, Data: data}}
	p := (*n.ports.Load())[dst]
	return p != nil && p.enqueue(src, frame[:])
}
