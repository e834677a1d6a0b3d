// Package nic is the transport over a user-space NIC driver (package
// nicdrv): mx frames in raw Open-MX Ethernet framing or Open-MX over UDP,
// moved by the driver's RX and TX batches with no kernel in the path.
//
// # Framing
//
// Each frame is a 14-byte Ethernet header (destination MAC, source MAC,
// EtherType transport.EtherType, 0x86DF) followed by the frame's Data, as
// Open-MX puts it on the wire, so a board's NIC id is its MAC address (a
// frame sent to a receive lane, Frame.Lane, carries the lane's EtherType
// instead, transport.LaneEtherType; see place.go). Short
// frames are padded by the NIC to the Ethernet minimum of 60 bytes, so a
// receiver may see up to 46 bytes of Data where fewer were sent (the mx
// headers carry their own lengths). Frames of another EtherType (neither
// Open-MX's nor a lane's), too short to hold a header, or longer than one
// pool buffer (a chain of Buffers), are dropped and counted. New refuses a
// NIC whose largest frame is longer than its pool buffers.
//
// # UDP framing
//
// With Options.Framing set to FramingUDP the transport speaks
// Open-MX-over-UDP instead, as transport/udp does through the kernel: an
// Ethernet header, an IPv4 header without options (DF set, a valid header
// checksum) and a UDP header with checksum 0, then the Data as the UDP
// payload (package transport/framing writes and reads these headers). The
// board's NIC id is its IPv4 address and UDP port (Options.UDP), ip<<16 |
// port, and the MTU is 28 bytes smaller. A received datagram is delivered
// when it is unfragmented, addressed to that address and port, from a
// non-zero port, and the NIC found no bad checksum in it; its UDP length
// trims the Ethernet padding. The destination MAC of a peer comes from
// Options.Neighbors or is learned from the datagrams the peer sent; a
// datagram to a peer not known yet goes to the broadcast address. IP
// framing is what lets a NIC's IP filters steer frames by UDP port.
//
// # Queues
//
// A transport with UDP framing over a NIC of several queues implements
// transport.Queued: OpenQueue(q) returns queue q as a transport of its
// own (the same type), which sends on TX queue q and receives from RX
// queue q with the queue's own pool, locks and buffers, so goroutines
// serving different queues share no lock. Queue q's port is Options.UDP's
// port + q, and OpenQueue steers the queue's frames to RX queue q in the
// first of three ways the NIC allows:
//
//   - by a NIC rule for the port (nicdrv.RuleUDPDestPort: the 82599's
//     5-tuple filters, then Flow Director); the queue's NIC id is the
//     board's address with its port;
//   - by RSS on an address of the queue's own: a NIC without such rules
//     (the 82574) still puts each IPv4 datagram on the queue its
//     redirection table names for the Toeplitz hash of the datagram's
//     addresses (nicdrv.Info.RSS). Under a key that keeps the source
//     address out of the table's index (e1000e.DestinationRSSKey, its
//     driver's default), the destination address alone picks the queue,
//     so with Options.QueueAddrs set OpenQueue gives queue q the first
//     free address of that block which lands on queue q whoever sends
//     (nicdrv.RSS.DestQueue), and the queue's NIC id is that address with
//     its port. The NIC then steers every frame; no queue hands any over;
//   - otherwise by software demultiplexing: the queue shares the board's
//     address, each queue's transport looks up the destination port of
//     every frame it receives in the board's table (a copy-on-write map
//     read without a lock) and hands a frame of another queue's port to
//     that queue (a bounded channel; full, the frame is dropped and
//     counted). A queue whose ports are steered in software cannot sleep
//     on its own RX queue alone, so it looks at its ring and its inbox in
//     turn. The port alone cannot choose an RSS queue: the 82574 hashes
//     UDP datagrams by their addresses only, and where ports are hashed
//     the sender's port counts as much as the receiver's.
//
// While queues are open, the board transport's own Send and Recv fail
// with ErrQueuesOpen. A queue transport's Close removes its steering; the
// board's Close closes the queues still open.
//
// # Buffers
//
// Send copies each frame's Data into a packet buffer of the NIC's pool,
// behind the header, and hands the batch to TX queue 0 with one TxBatch;
// the driver gives the buffers back to the pool once the NIC has sent them.
//
// # Sending in place
//
// Register maps the caller's memory for DMA in the NIC's domain (the
// domain the pool is mapped in, through the same pci.DMA), so a frame of
// the region is sent without copying its Data: the header goes into a pool
// buffer and the Data stays where it is, attached to the buffer
// (nicdrv.Buffer.Attach), which the driver sends as a descriptor for the
// buffer and one or more pointing at the region's IOVAs (the 82574L's
// driver gives each 4 KiB IOMMU page the payload touches its own, as
// QEMU's e1000e needs). A frame's Head
// (transport.Frame.Head: a message layer's header) is copied into the pool
// buffer behind the Ethernet header, so the payload alone is read in
// place. The driver asks the NIC to
// write back DD on that descriptor, and the frame's send completes
// (Region.Pending falls) when the driver reclaims it after DD: at once
// where the NIC transmits on the tail write (QEMU, the emulated model),
// otherwise at the transport's next Send, Recv or Region.Pending, which
// all reclaim while in-place sends are pending. A frame whose Data is empty, or
// crosses an IOVA discontinuity of the mapping (4 KiB pages without an
// IOMMU), is copied and counted as such (Region.CopiedSends,
// nic_tx_region_copied). Region.Close unmaps the memory; the transport's
// Close completes every pending send (closing the NIC gives its buffers
// back) and unmaps the regions still open. A NIC whose driver would copy
// the attached memory anyway (nicdrv.Info.TxAttachCopied: a USB function)
// gets no mapping: its regions copy (Region.InPlace false) and still take
// a Head, so a caller sends its header and payload with one copy, not two.
// Recv takes frames from every RX queue with RxBatch; their Data points into
// the packet buffers, which the transport keeps until the next Recv or
// Close, as the transport contract asks, and then frees.
//
// # Receiving in place
//
// Over a driver that places payloads (nicdrv.Placer: the 82599 opened
// with ixgbe.Options.Placement), with raw Ethernet framing on one RX
// queue, the transport is a transport.Placer (place.go): Post turns spans
// of a registered region into the driver's placements (the region's
// IOVAs), and a received frame that took one carries, in Frame.Placed,
// the bytes the NIC wrote there; its Data is what came in the 64-byte
// header buffer after the Ethernet header. Over a NIC that keeps queues
// for placement alone (nicdrv.Info.PlaceOnly) the transport has lanes:
// one EtherType rule per such queue, installed by New and removed by
// Close, steers the frames peers send to that lane there, so a caller
// that has a peer send a run of frames to a lane meets no other frame in
// its postings; lane 0 then places nothing.
//
// # Waiting
//
// Recv with a timeout waits with the driver's WaitRx: on the queue's MSI-X
// eventfd in interrupt mode, by polling otherwise. Wake (transport.Waker)
// ends such a wait at once, so a receiver with nothing to do may wait as
// long as it likes (an idle mx board, until its stretched tick) and still
// hand Recv over or close the transport without waiting. A wait passes
// its timeout to WaitRx as a deadline, and the waits share one context,
// which only a Wake, a frame another queue handed over or Close cancels
// and the next wait then replaces: a receive loop that waits until its
// next tick, many times a millisecond, makes no context per wait, and on
// emulated (local) interrupts allocates nothing (a wait on one VFIO
// interrupt still allocates in pci: the eventfd's SyscallConn and a
// context.AfterFunc). A Send that finds the TX ring full or the pool empty retries for a bounded time
// (the NIC drains the ring and Recv's next call frees buffers) and then
// fails rather than hang. Close makes a waiting Recv return transport.ErrClosed, gives every
// buffer back and closes the NIC.
package nic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
)

// errClosed is what calls on a closed transport return: transport.ErrClosed,
// which is also nicdrv.ErrClosed, so a transport closed under a closed NIC
// answers to both names.
var errClosed = fmt.Errorf("transport/nic: transport %w", transport.ErrClosed)

// headerLen is the Ethernet header.
const headerLen = 14

// minFrame is the shortest Ethernet frame without FCS.
const minFrame = 60

// Options configure New.
type Options struct {
	// SendTimeout bounds how long Send waits for room in the TX ring or
	// the pool before it fails (default 1s).
	SendTimeout time.Duration
	// Batch is the most frames one RxBatch call takes per queue (default
	// 64).
	Batch int
	// Framing is the link framing: FramingEthernet (the default, raw
	// Open-MX frames, NIC id = MAC) or FramingUDP (Open-MX over
	// IPv4/UDP, NIC id = ip<<16|port; see the package documentation).
	Framing Framing
	// UDP is the board's IPv4 address and UDP port, for FramingUDP. The
	// port is the board's (queue transports take their own: see
	// OpenQueue).
	UDP netip.AddrPort
	// Neighbors gives the MAC address of IPv4 peers, for FramingUDP;
	// peers not listed are learned from the frames they send, and a frame
	// to a peer not known yet is sent to the broadcast address.
	Neighbors map[netip.Addr]nicdrv.MAC
	// QueueAddrs, for FramingUDP, is a block of IPv4 addresses reserved
	// to this board for its queues, used where the NIC has no rule for a
	// UDP port but steers by RSS with a key that lets the destination
	// address alone choose the queue (the 82574 with its driver's default
	// key): OpenQueue(q) gives queue q the first free address of the
	// block whose datagrams land on RX queue q from every sender. Leave
	// it unset (or on a NIC that cannot) and queues share the board's
	// address and are demultiplexed in software. See the package doc.
	QueueAddrs netip.Prefix
	// MTU is the most bytes a frame carries after its Ethernet header
	// (the link MTU: the IP MTU for FramingUDP): 1500 when zero, and no
	// more than the NIC's largest frame less the Ethernet header (18
	// bytes less leaves room for a peer's VLAN tag; the 82599's placing
	// lanes strip it) nor than one of its pool buffers less the Ethernet
	// header, since Send copies a frame into one buffer and Recv takes
	// one buffer a frame. Jumbo frames (up to 9000) need a NIC opened for
	// them: the 82599 with ixgbe.Options MaxFrame and BufferSize.
	// Transport.MTU, what mx sees, is this less the framing's headers
	// after the Ethernet header (none raw, 28 for UDP).
	MTU int
}

// Transport is mx's transport over one NIC. It implements
// transport.Transport and transport.Stats.
type Transport struct {
	nic  nicdrv.NIC
	pool *nicdrv.Pool
	mac  nicdrv.MAC
	id   transport.NICID
	opts Options
	mtu  int
	ip   ipFraming // FramingUDP's addressing; hdr says which framing
	hdr  int       // link header length: headerLen or framing.UDPHeadersLen

	// Queues (queue.go): the TX queue Send uses and the RX queue Recv
	// takes from (-1: every queue); a board's open queue transports, or
	// a queue transport's own state.
	txq, rxq int
	nq       int // the NIC's queues (Info, read once)
	// Lanes (place.go): the EtherType rules of lanes 1..len, and the
	// queue of lane 1.
	laneRules []nicdrv.RuleID
	laneQ     int
	queues    *queueSet
	queue     *queueState

	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool

	// wakeMu guards the Recv wait under way (wakeWait, its context's
	// cancel; nil: none) and woken, a Wake that found none waiting: the
	// next wait returns at once.
	wakeMu   sync.Mutex
	wakeWait context.CancelFunc
	woken    bool
	// waitCtx is the context of Recv's waits, kept from wait to wait
	// under rxMu until a Wake, a frame another queue handed over or
	// Close cancels it (waitCancel): a wait costs no context.
	waitCtx    context.Context
	waitCancel context.CancelFunc

	txMu sync.Mutex
	txb  []*nicdrv.Buffer
	// txRegion is the region the last frame sent in place was of (under
	// txMu): a pull's replies come from one region, so Send finds its
	// mapping without the map and its lock (regionOf).
	txRegion *region

	// postMu serializes Post, whose placements are built in postBuf
	// (no allocation a block) and whose region is found through
	// postRegion as Send's through txRegion.
	postMu     sync.Mutex
	postBuf    []nicdrv.Placement
	postRegion *region

	rxMu  sync.Mutex
	held  []*nicdrv.Buffer
	lends *transport.Lends[*nicdrv.Buffer]
	rxb   []*nicdrv.Buffer
	next  int // the queue Recv looks at first

	regMu    sync.RWMutex
	regions  map[*transport.Region]*region
	inflight atomic.Int64 // in-place frames not completed

	foreign, short, chained, sendWaits atomic.Uint64
	// rxWakes counts the returns of Recv's waits from the driver's WaitRx
	// (a frame, the timeout, Wake or a hand-over): the receiving thread's
	// wake-ups.
	rxWakes                   atomic.Uint64
	txInPlace, txRegionCopied atomic.Uint64
}

// region is a registered Region's DMA mapping. It is the completion the
// driver calls for each of the region's frames it sent in place.
type region struct {
	t *Transport
	r *transport.Region
	m *pci.Mapping
	// gone is set when the region leaves the transport's map (under
	// regMu): a cached pointer to it is then looked up again.
	gone atomic.Bool
}

// regionOf returns the mapping of r, nil when r is not one of the
// transport's mapped regions, through the one-entry cache *last (under
// the lock that guards it).
func (t *Transport) regionOf(r *transport.Region, last **region) *region {
	if x := *last; x != nil && x.r == r && !x.gone.Load() {
		return x
	}
	t.regMu.RLock()
	x := t.regions[r]
	t.regMu.RUnlock()
	if x != nil {
		*last = x
	}
	return x
}

// forget removes x from the transport's map (regMu held).
func (t *Transport) forget(x *region) {
	x.gone.Store(true)
	delete(t.regions, x.r)
}

// Done implements nicdrv.Completion: the NIC has read one frame of the
// region.
func (x *region) Done() {
	x.r.Done()
	x.t.inflight.Add(-1)
}

// unmap is the region's release: it undoes the mapping unless the
// transport's Close did.
func (x *region) unmap() error {
	t := x.t
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if t.regions[x.r] != x {
		return nil
	}
	t.forget(x)
	if err := t.pool.DMA().Unmap(x.m); err != nil {
		return fmt.Errorf("transport/nic: unmap region: %w", err)
	}
	return nil
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Stats     = (*Transport)(nil)
)

// New makes a transport over an open NIC. The transport owns the NIC from
// now on: its Close closes the NIC.
func New(n nicdrv.NIC, o Options) (*Transport, error) {
	if o.SendTimeout == 0 {
		o.SendTimeout = time.Second
	}
	if o.Batch == 0 {
		o.Batch = 64
	}
	if o.SendTimeout < 0 || o.Batch < 1 || o.Batch > 4096 {
		return nil, fmt.Errorf("transport/nic: bad options %+v: want a positive SendTimeout and Batch 1..4096", o)
	}
	info := n.Info()
	if info.MaxFrame < minFrame+headerLen {
		return nil, fmt.Errorf("transport/nic: %s NIC's largest frame is %d bytes: too small", info.Driver, info.MaxFrame)
	}
	if bs := n.Pool(0).BufferSize(); info.MaxFrame > bs {
		return nil, fmt.Errorf("transport/nic: %s NIC's largest frame is %d bytes and its pool buffers %d: the transport takes a frame in one buffer; open the NIC with a BufferSize of at least %d (ixgbe.Options.BufferSize; MaxFrame+4 for a VLAN tag)",
			info.Driver, info.MaxFrame, bs, info.MaxFrame+4)
	}
	mac := n.MAC()
	ipf, hdr, id, err := newFraming(o, mac, info)
	if err != nil {
		return nil, err
	}
	// An untagged frame of at most 1514 bytes by default: a 1500-byte
	// payload.
	mtu := min(info.MaxFrame, headerLen+1500) - hdr
	if o.MTU != 0 {
		if o.MTU < minFrame || o.MTU+headerLen > info.MaxFrame || o.MTU+headerLen > n.Pool(0).BufferSize() {
			return nil, fmt.Errorf("transport/nic: MTU %d over a %s NIC whose largest frame is %d bytes and pool buffers %d: want %d..%d (open the NIC for larger frames and buffers)",
				o.MTU, info.Driver, info.MaxFrame, n.Pool(0).BufferSize(), minFrame, min(info.MaxFrame-headerLen, n.Pool(0).BufferSize()-headerLen))
		}
		mtu = headerLen + o.MTU - hdr
	}
	t := &Transport{
		nic: n, pool: n.Pool(0), mac: mac, id: id, opts: o, ip: ipf, hdr: hdr, rxq: -1, nq: info.Queues,
		queues: newQueueSet(info.Queues),
		mtu:    mtu,
		txb:    make([]*nicdrv.Buffer, 0, 64),
		rxb:    make([]*nicdrv.Buffer, o.Batch),
		// Lend at most a quarter of the pool: the rest keeps the RX
		// ring and Send supplied.
		lends:   transport.NewLends[*nicdrv.Buffer](max(1, n.Pool(0).Len()/4)),
		regions: map[*transport.Region]*region{},
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.setupLanes()
	return t, nil
}

// NIC returns the NIC the transport runs over.
func (t *Transport) NIC() nicdrv.NIC { return t.nic }

// Addr implements transport.Transport: the NIC's MAC address, or with UDP
// framing its IPv4 address and port (ip<<16 | port).
func (t *Transport) Addr() transport.NICID { return t.id }

// HostUniqueNIC reports that the NIC id (the device's MAC) belongs to this
// board alone: one process owns the device through VFIO (see
// transport.HostUnique).
func (t *Transport) HostUniqueNIC() bool { return true }

// MTU implements transport.Transport.
func (t *Transport) MTU() int { return t.mtu }

// Send implements transport.Transport.
func (t *Transport) Send(frames []transport.Frame) (int, error) {
	if err := t.queuesOpen(); err != nil {
		return 0, err
	}
	t.txMu.Lock()
	defer t.txMu.Unlock()
	sent := 0
	for sent < len(frames) {
		if t.closed.Load() {
			return sent, errClosed
		}
		// Build up to a batch of frames, stopping at a bad one.
		batch := frames[sent:min(len(frames), sent+cap(t.txb))]
		var bad error
		for i := range batch {
			f := &batch[i]
			if len(f.Head)+len(f.Data) > t.mtu {
				bad = fmt.Errorf("transport/nic: frame of %d bytes, MTU %d: %w", len(f.Head)+len(f.Data), t.mtu, transport.ErrTooBig)
				batch = batch[:i]
				break
			}
			if err := t.reachable(f.Peer); err != nil {
				bad = err
				batch = batch[:i]
				break
			}
			if r := f.Region; r != nil {
				if err := r.Check(t, f); err != nil {
					bad = fmt.Errorf("transport/nic: %w", err)
					batch = batch[:i]
					break
				}
			}
		}
		if len(batch) > 0 {
			if err := t.sendBatch(batch); err != nil {
				return sent, err
			}
			sent += len(batch)
		}
		if bad != nil {
			return sent, bad
		}
	}
	return sent, nil
}

// sendBatch transmits frames that all fit the MTU.
func (t *Transport) sendBatch(frames []transport.Frame) error {
	bufs := t.txb[:len(frames)]
	deadline := time.Time{}
	for got := 0; got < len(bufs); {
		n, err := t.pool.Alloc(bufs[got:])
		got += n
		if err == nil {
			break
		}
		if !errors.Is(err, nicdrv.ErrPoolExhausted) {
			_ = t.pool.Free(bufs[:got]...)
			return t.closedOr(err)
		}
		if deadline, err = t.wait(deadline, "free packet buffers"); err != nil {
			_ = t.pool.Free(bufs[:got]...)
			return err
		}
	}
	for i := range frames {
		f := &frames[i]
		if f.Region != nil && t.attach(bufs[i], f) {
			b := bufs[i].SetLen(t.hdr + len(f.Head))
			t.header(b, f.Peer, len(f.Head)+len(f.Data), f.Lane)
			copy(b[t.hdr:], f.Head)
			continue
		}
		b := bufs[i].SetLen(t.hdr + len(f.Head) + len(f.Data))
		t.header(b, f.Peer, len(f.Head)+len(f.Data), f.Lane)
		copy(b[t.hdr+copy(b[t.hdr:], f.Head):], f.Data)
		if f.Region != nil {
			f.Region.Copied()
			t.txRegionCopied.Add(1)
		}
	}
	deadline = time.Time{}
	for len(bufs) > 0 {
		n, err := t.nic.TxBatch(t.txq, bufs)
		bufs = bufs[n:]
		if err != nil {
			_ = t.pool.Free(bufs...)
			return t.closedOr(err)
		}
		if len(bufs) > 0 && n == 0 {
			if deadline, err = t.wait(deadline, "room in the TX ring"); err != nil {
				_ = t.pool.Free(bufs...)
				return err
			}
		}
	}
	clear(t.txb[:len(frames)])
	return nil
}

// header writes the link header of a frame of n bytes of Data to peer,
// for the peer's lane (raw Ethernet framing; see place.go).
func (t *Transport) header(b []byte, peer transport.NICID, n int, lane uint8) {
	if t.hdr != headerLen {
		t.ip.header(b, t.mac, peer, n)
		return
	}
	dst := peer.MAC()
	copy(b[0:6], dst[:])
	copy(b[6:12], t.mac[:])
	et := uint16(transport.EtherType)
	if lane > 0 && lane <= transport.MaxLanes {
		et = transport.LaneEtherType(int(lane))
	}
	binary.BigEndian.PutUint16(b[12:], et)
}

// attach hangs the Data of f, a frame of a region Check accepted, on b to
// be sent in place, and reports whether it could: not for empty Data, a
// region registered without a mapping, or Data across an IOVA
// discontinuity. From here on, freeing b completes the send.
func (t *Transport) attach(b *nicdrv.Buffer, f *transport.Frame) bool {
	r := f.Region
	if len(f.Data) == 0 || !r.InPlace() {
		return false
	}
	x := t.regionOf(r, &t.txRegion)
	if x == nil {
		return false
	}
	iova, contig, err := x.m.IOVA(r.Offset(f.Data))
	if err != nil || contig < len(f.Data) {
		return false
	}
	r.Begin()
	t.inflight.Add(1)
	t.txInPlace.Add(1)
	b.Attach(f.Data, iova, x)
	return true
}

// wait yields while Send waits for a resource, and fails once the send
// timeout has passed since the first wait.
func (t *Transport) wait(deadline time.Time, what string) (time.Time, error) {
	now := time.Now()
	if deadline.IsZero() {
		t.sendWaits.Add(1)
		return now.Add(t.opts.SendTimeout), nil
	}
	if t.closed.Load() {
		return deadline, errClosed
	}
	if now.After(deadline) {
		return deadline, fmt.Errorf("transport/nic: no %s for %v (is the receiver holding every buffer, or the link down?)", what, t.opts.SendTimeout)
	}
	runtime.Gosched()
	return deadline, nil
}

func (t *Transport) closedOr(err error) error {
	if t.closed.Load() || errors.Is(err, nicdrv.ErrClosed) {
		return errClosed
	}
	return fmt.Errorf("transport/nic: %w", err)
}

// Recv implements transport.Transport. A look that finds the rings empty
// (timeout 0) is the busy-polling waiter's every look, so it takes no
// deferred calls (a function of this many returns and defers gets them
// from the runtime's defer records, not open-coded) and reads nothing
// from the NIC but the rings.
func (t *Transport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	if err := t.queuesOpen(); err != nil {
		return 0, err
	}
	t.rxMu.Lock()
	n, err := t.recvLocked(frames, timeout)
	t.lends.Got(len(t.held))
	t.rxMu.Unlock()
	return n, err
}

// recvLocked is Recv with rxMu held.
func (t *Transport) recvLocked(frames []transport.Frame, timeout time.Duration) (int, error) {
	if t.closed.Load() {
		return 0, errClosed
	}
	t.reclaim()
	if len(t.held) > 0 { // an empty poll takes no pool lock
		if err := t.pool.Free(t.held...); err != nil {
			return 0, fmt.Errorf("transport/nic: %w", err)
		}
		clear(t.held)
		t.held = t.held[:0]
	}
	t.lends.Recv()
	if len(frames) == 0 {
		return 0, nil
	}
	n, err := t.poll(frames)
	if n > 0 || err != nil || timeout == 0 {
		return n, err
	}
	return t.recvWait(frames, timeout)
}

// recvWait waits up to timeout (forever if negative) for frames, after a
// poll found none. rxMu is held.
func (t *Transport) recvWait(frames []transport.Frame, timeout time.Duration) (int, error) {
	if t.waitCtx == nil || t.waitCtx.Err() != nil {
		// The first wait, or the last one's context was ended (Wake,
		// a frame another queue handed over, Close): a fresh one.
		t.waitCtx, t.waitCancel = context.WithCancel(t.ctx)
	}
	ctx, cancel := t.waitCtx, t.waitCancel
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if !t.armWake(cancel) {
		return 0, nil // woken before the wait
	}
	defer t.disarmWake()
	for {
		if err := t.waitAny(ctx, deadline); err != nil {
			if t.closed.Load() || errors.Is(err, nicdrv.ErrClosed) {
				return 0, errClosed
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return 0, nil
			}
			if errors.Is(err, context.Canceled) && t.ctx.Err() == nil {
				// Wake, or a frame another queue handed over
				// (nudge): take what is there, if anything.
				return t.poll(frames)
			}
			return 0, fmt.Errorf("transport/nic: %w", err)
		}
		if n, err := t.poll(frames); n > 0 || err != nil {
			return n, err
		}
	}
}

var _ transport.Spinner = (*Transport)(nil)

// SpinCheap implements transport.Spinner: a queue transport's empty look
// (Recv with a zero timeout) reads its RX ring's next descriptor in DMA
// memory and makes no system call and no register read, so a waiter that
// expects a frame soon may poll its own queue (mx's run-to-completion
// wait). A board transport's look sweeps every queue: it reports false.
func (t *Transport) SpinCheap() bool { return t.queue != nil }

var _ transport.Served = (*Transport)(nil)

// Served implements transport.Served: a queue transport's next Recv wait
// arms the queue's MSI-X vector after its first look, over a driver that
// spins before it arms (nicdrv.RxServer) in interrupt mode. A board
// transport's waits, on every queue, are left as they are.
func (t *Transport) Served() {
	if s, ok := t.nic.(nicdrv.RxServer); ok && t.queue != nil {
		s.RxServed(t.rxq)
	}
}

var _ transport.Waker = (*Transport)(nil)

// Wake implements transport.Waker: a Recv waiting for frames (on the NIC's
// interrupts or by polling its rings) returns 0, nil at once, and one
// called while none waits makes the next wait return so. Only Recv's wait
// looks at it: a Recv that finds frames pays nothing for it.
func (t *Transport) Wake() {
	t.wakeMu.Lock()
	if t.wakeWait != nil {
		t.wakeWait()
	} else {
		t.woken = true
	}
	t.wakeMu.Unlock()
}

// nudge ends the Recv wait under way, if any, so that it looks at the
// rings and the inbox again: a frame another queue handed over is there.
// Unlike Wake it leaves no Wake for a later wait, which would look at the
// inbox before it waits anyway.
func (t *Transport) nudge() {
	t.wakeMu.Lock()
	if t.wakeWait != nil {
		t.wakeWait()
	}
	t.wakeMu.Unlock()
}

// armWake makes cancel the wait Wake ends, or reports false (and clears
// the Wake) when a Wake came since the last wait.
func (t *Transport) armWake(cancel context.CancelFunc) bool {
	t.wakeMu.Lock()
	defer t.wakeMu.Unlock()
	if t.woken {
		t.woken = false
		return false
	}
	t.wakeWait = cancel
	return true
}

// disarmWake ends the wait armWake armed.
func (t *Transport) disarmWake() {
	t.wakeMu.Lock()
	t.wakeWait = nil
	t.wakeMu.Unlock()
}

// waitAny waits for a frame on any RX queue, with one WaitRx on them all,
// or for a queue transport on its queue (queue.go), until ctx ends or
// deadline (the zero Time: none) passes.
func (t *Transport) waitAny(ctx context.Context, deadline time.Time) error {
	if t.queue != nil {
		return t.waitQueue(ctx, deadline)
	}
	_, err := t.nic.WaitRx(ctx, deadline)
	t.rxWakes.Add(1)
	return err
}

// poll takes what the NIC has received, up to len(frames). rxMu is held.
func (t *Transport) poll(frames []transport.Frame) (int, error) {
	got := 0
	q := t.nq
	if t.queue != nil {
		got, q = t.fromInbox(frames), 1
	}
	for k := 0; k < q && got < len(frames); k++ {
		queue := (t.next + k) % q
		if t.rxq >= 0 {
			queue = t.rxq
		}
		n, err := t.nic.RxBatch(queue, t.rxb[:min(len(t.rxb), len(frames)-got)])
		if err != nil {
			if t.closed.Load() || errors.Is(err, nicdrv.ErrClosed) {
				return got, errClosed
			}
			return got, fmt.Errorf("transport/nic: %w", err)
		}
		for _, b := range t.rxb[:n] {
			if t.queue != nil && t.forward(b) {
				continue // steered in software to another queue
			}
			t.held = append(t.held, b)
			peer, data, ok := t.decode(b)
			if !ok {
				continue
			}
			frames[got] = transport.Frame{Peer: peer, Data: data, Ref: t.lends.RecvRef(len(t.held) - 1), Lane: t.laneOf(queue)}
			if ext, _ := b.Attached(); ext != nil {
				frames[got].Placed = ext // a placement took the rest (place.go)
			}
			got++
		}
		clear(t.rxb[:n])
	}
	t.next++
	if t.queue != nil && got > 0 {
		t.queue.delivered.Add(uint64(got))
	}
	return got, nil
}

// decode checks a received frame's link header and returns its sender and
// Data; a frame that is not for this transport is counted and skipped.
func (t *Transport) decode(b *nicdrv.Buffer) (transport.NICID, []byte, bool) {
	if b.Next != nil {
		// A frame longer than one pool buffer, which a NIC admitting
		// frames up to a VLAN tag past its buffers may chain: a frame
		// is one buffer here, so it is dropped whole, not cut.
		t.chained.Add(1)
		return 0, nil, false
	}
	if t.hdr != headerLen {
		return t.ip.decode(b)
	}
	d := b.Data
	if len(d) < headerLen {
		t.short.Add(1)
		return 0, nil, false
	}
	if et := binary.BigEndian.Uint16(d[12:]); et-transport.EtherType > transport.MaxLanes {
		// Open-MX's EtherType, or one of a lane's (place.go).
		t.foreign.Add(1)
		return 0, nil, false
	}
	var src [6]byte
	copy(src[:], d[6:12])
	return transport.MACNICID(src), d[headerLen:], true
}

// Hold implements transport.Transport: it lends the frame's packet buffer,
// which the transport then does not give back to the pool at the next Recv
// (the driver refills the RX ring from the pool), and reports the pool's
// memory as the DMA-able memory it lies in. It lends at most a quarter of
// the pool at once and copies Data past that.
func (t *Transport) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	i, err := t.lends.Index(f.Ref)
	if err == nil && t.held[i] == nil {
		err = transport.ErrNotHoldable
	}
	if err == nil && t.closed.Load() {
		err = errClosed
	}
	if err != nil {
		return transport.HoldInfo{}, fmt.Errorf("transport/nic: hold: %w", err)
	}
	if t.lends.Lend(f, t.held[i]) {
		t.held[i] = nil
		return transport.HoldInfo{DMA: t.pool.Memory()}, nil
	}
	t.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

// Release implements transport.Transport: the packet buffer goes back to
// the pool.
func (t *Transport) Release(f *transport.Frame) {
	if b, ok := t.lends.Return(f); ok {
		_ = t.pool.Free(b)
	}
}

// reclaim lets the driver complete in-place sends the NIC has finished,
// when there are any and no Send is under way (which reclaims itself).
func (t *Transport) reclaim() {
	if t.inflight.Load() == 0 || !t.txMu.TryLock() {
		return
	}
	defer t.txMu.Unlock()
	if !t.closed.Load() {
		_, _ = t.nic.TxBatch(t.txq, nil)
	}
}

// Register implements transport.Transport: it maps mem for DMA in the
// NIC's domain, so that frames of the region are sent in place
// (Region.InPlace is true; see the package documentation). An empty mem
// has nothing to map: its region copies. Over a NIC whose driver copies
// attached memory itself (nicdrv.Info.TxAttachCopied: usbnet), nothing is
// mapped either: the region copies each frame, Head and Data, into a
// packet buffer during Send and counts it (Region.CopiedSends), so a
// caller learns that the memory is read by the CPU.
func (t *Transport) Register(mem []byte) (*transport.Region, error) {
	if t.closed.Load() {
		return nil, errClosed
	}
	if len(mem) == 0 {
		return transport.NewRegion(t, mem, false, nil), nil
	}
	if t.nic.Info().TxAttachCopied {
		r := transport.NewRegion(t, mem, false, nil)
		r.SetTakesHead()
		return r, nil
	}
	dma := t.pool.DMA()
	m, err := dma.Map(mem)
	if err != nil {
		return nil, fmt.Errorf("transport/nic: map %d bytes for the NIC to send in place: %w (on VFIO, raise RLIMIT_MEMLOCK: the pages are pinned)", len(mem), err)
	}
	x := &region{t: t, m: m}
	x.r = transport.NewRegion(t, mem, true, x.unmap)
	x.r.SetPoll(t.reclaim)
	x.r.SetTakesHead()
	t.regMu.Lock()
	defer t.regMu.Unlock()
	if t.closed.Load() {
		return nil, errors.Join(errClosed, dma.Unmap(m))
	}
	t.regions[x.r] = x
	return x.r, nil
}

// Counters implements transport.Stats: the NIC's statistics and the
// transport's own drops.
func (t *Transport) Counters() []transport.Counter {
	c := []transport.Counter{
		{Name: "nic_foreign_ethertype", Value: t.foreign.Load()},
		{Name: "nic_short_frames", Value: t.short.Load()},
		{Name: "nic_chained_frames", Value: t.chained.Load()},
		{Name: "nic_send_waits", Value: t.sendWaits.Load()},
		{Name: "nic_rx_wait_wakeups", Value: t.rxWakes.Load()},
		{Name: "nic_tx_in_place", Value: t.txInPlace.Load()},
		{Name: "nic_tx_region_copied", Value: t.txRegionCopied.Load()},
	}
	c = append(c, t.lends.Counters("nic_")...)
	c = t.ip.counters(c)
	c = t.queueCounters(c)
	s, err := t.nic.Stats()
	if err != nil {
		return c
	}
	return append(c,
		transport.Counter{Name: "nic_rx_frames", Value: s.RxFrames},
		transport.Counter{Name: "nic_tx_frames", Value: s.TxFrames},
		transport.Counter{Name: "nic_rx_missed", Value: s.RxMissed},
		transport.Counter{Name: "nic_rx_no_descriptor", Value: s.RxNoDescriptor},
		transport.Counter{Name: "nic_rx_errors", Value: s.RxErrors},
		transport.Counter{Name: "nic_rx_no_buffer", Value: s.RxNoBuffer},
		transport.Counter{Name: "nic_rx_dropped", Value: s.RxDropped},
		transport.Counter{Name: "nic_tx_ring_full", Value: s.TxRingFull},
		transport.Counter{Name: CounterRxInterrupts, Value: s.Interrupts},
	)
}

// CounterRxInterrupts names the counter of the NIC interrupts the
// transport's receive waits consumed (nicdrv.Stats.Interrupts), which a
// report reads to count a progress thread's wake-ups.
const CounterRxInterrupts = "nic_rx_interrupts"

// Close implements transport.Transport: it wakes a waiting Recv, gives
// back the buffers Recv handed out, closes the NIC (which completes the
// in-place sends still in its TX ring) and unmaps the regions still
// registered.
func (t *Transport) Close() error {
	if t.queue != nil {
		return t.closeQueue()
	}
	if t.closed.Swap(true) {
		return nil
	}
	t.cancel()
	err := t.closeQueues()
	t.rxMu.Lock()
	err = errors.Join(err, t.pool.Free(t.held...))
	clear(t.held)
	t.held = t.held[:0]
	err = errors.Join(err, t.pool.Free(t.lends.Close()...))
	t.rxMu.Unlock()
	t.txMu.Lock()
	err = errors.Join(err, t.removeLanes(), t.nic.Close())
	t.txMu.Unlock()
	t.regMu.Lock()
	defer t.regMu.Unlock()
	for _, x := range t.regions {
		err = errors.Join(err, t.pool.DMA().Unmap(x.m))
		t.forget(x)
	}
	return errors.Join(err, t.queues.unmapOrphans())
}
