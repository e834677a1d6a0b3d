package emulated

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/internal/csum"
	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// The 82599 model's transmit path: a TDT write records the tail; the
// NIC's DMA then walks the TX ring, reads the context and data
// descriptors, gathers each frame from guest memory, inserts the checksums
// the descriptors ask for, writes the descriptors back and hands the
// frames to the wire (or back to the receive path when the NIC loops).
// Who runs that DMA is the one difference between the model's two modes:
// the goroutine that wrote TDT, before the write returns, or the NIC's
// DMA engine (IXGBEOptions.AsyncDMA, ixgbe_dma.go). Both run txQueue, so
// the descriptors, the write-backs, the counters and the violations are
// the same. Registers are in ixgbe_regs.go, receive in ixgbe_rx.go.
//
// A ring walk holds txMu for reading and its queue's lock (txWalk), and
// mu only for reading: the tail write and the registers it needs are read
// first (txSnap), the bytes move with mu free, so the driver's register
// accesses (statistics, a reset) proceed during a long DMA, and the walk
// takes mu for reading again to move TDH and count (queueTally, into the
// atomic counters). Everything the walk touches outside mu (txCtx[q], the
// frame buffers, the IOMMU hints) is its queue's, and a queue's TDT and
// TDH are written under its walk lock, so two queues' synchronous walks,
// and their tail writes, run at once on their writers' goroutines: the
// chip's one DMA interleaves its queues' fetches, and a tail write costs
// the host's CPU nothing while another queue sends. What stops or
// reprograms transmission takes txMu for writing and so waits out every
// walk.

// txWalk is one TX queue's walk state.
type txWalk struct {
	mu sync.Mutex
	// tail guards TDT(q) and TDH(q) among holders of the NIC's mu for
	// reading: an AsyncDMA tail write takes it alone, so it waits for
	// neither the walk under way (mu) nor a delivery (mu for reading).
	tail  sync.Mutex
	sum   queueTally // what its walks counted, under mu and the NIC's mu
	out   [][]byte   // frames of the walk under way, to deliver
	spare [][]byte   // free frame buffers
	// The walk's IOMMU hints: the ring, a frame's first buffer (the
	// driver's packet buffer) and its others (memory attached in place).
	hint [3]int
	// What the queue counts outside its tally, on a line no other
	// queue writes: TDT writes not yet folded into the access counts
	// (tdt), TDT writes taken (tails: IXGBEStats.TailWrites) and frames
	// handed on (sent: IXGBEStats.TxFrames).
	tdt, tails, sent atomic.Uint64
	_                [64]byte // apart from the next queue's
}

// transmit is a TDT write. Synchronous, every frame between TDH and the
// new TDT is on the wire when the write returns; with AsyncDMA the write
// records the tail and wakes the NIC's DMA engine.
func (n *ixgbeNIC) transmit(q int, tdt uint32) {
	if n.async {
		// mu for reading, as a delivery holds it, and TDT under the
		// queue's tail lock: the chip takes a posted write at once, and
		// mu for writing would wait for the frame the engine is writing
		// into the host's memory and hold up the frames behind it.
		w := &n.txw[q]
		n.mu.queue(q).RLock()
		w.tdt.Add(1)
		w.tail.Lock()
		ok := n.tailWriteLocked(q, tdt)
		w.tail.Unlock()
		n.mu.queue(q).RUnlock()
		if !ok {
			return
		}
		if e := n.engine(txEngine); e != nil {
			e.kick(q)
		}
		return
	}
	n.txMu.queue(q).RLock()
	defer n.txMu.queue(q).RUnlock()
	n.txQueue(q, &tdt)
}

// tailWriteLocked records a write of tdt to TDT(q) and checks it as the
// 82599 does when the write arrives. It reports whether the queue has
// descriptors for the DMA to fetch. Under mu held for writing, or for
// reading with the queue's tail lock (txWalk.tail); the caller counts the
// access.
func (n *ixgbeNIC) tailWriteLocked(q int, tdt uint32) bool {
	if q < hw.MaxQueuePairs {
		n.txw[q].tails.Add(1)
	} else {
		n.nTail.Add(1)
	}
	if n.closed {
		return false
	}
	n.set(hw.TDT(q), tdt)
	l := n.reg(hw.TDLEN(q)) / hw.DescSize
	switch {
	case tdt >= l && l != 0:
		n.violation("TDT%d = %d outside a ring of %d descriptors", q, tdt, l)
		return false
	case !n.txEnabledQ(q) || !n.has(hw.DMATXCTL, hw.DmatxctlTE):
		if tdt != n.reg(hw.TDH(q)) {
			n.violation("TDT%d moved while TX queue %d is not enabled (TXDCTL.ENABLE, DMATXCTL.TE)", q, q)
		}
		return false
	case !n.f.busMaster():
		n.violation("TDT%d written with PCI bus mastering off: the NIC cannot fetch descriptors", q)
		return false
	}
	return true
}

// txSnap is what a ring walk reads from the registers under mu before it
// moves bytes without it.
type txSnap struct {
	base         uint64
	l, head, tdt uint32
	maxFrame     int
	vet          uint16 // VLNCTRL.VET
	pad          bool
}

// queueTally is what a queue's DMA counted: descriptors fetched and
// written back, and the frames for the statistics registers. A ring walk
// counts into one of its own and adds it to its queue's (txWalk.sum) when
// it ends; a delivery counts into its RX queue's (rxQueue.sum). foldLocked
// adds a queue's to the registers and access counts.
type queueTally struct {
	fetch, wb      uint64
	frames, octets uint64
	bcast, mcast   uint64
}

// add adds t to q.
func (q *queueTally) add(t *queueTally) {
	q.fetch += t.fetch
	q.wb += t.wb
	q.frames += t.frames
	q.octets += t.octets
	q.bcast += t.bcast
	q.mcast += t.mcast
}

// txQueue transmits what TX queue q holds between TDH and TDT, if the
// queue may still transmit, and delivers the frames; with tail, it first
// takes the write of *tail to TDT. Under txMu (for reading, at least); it
// takes the queue's walk lock, and mu for reading.
func (n *ixgbeNIC) txQueue(q int, tail *uint32) {
	w := &n.txw[q]
	w.mu.Lock()
	defer w.mu.Unlock()
	n.mu.queue(q).RLock()
	if tail != nil {
		w.tdt.Add(1)
	}
	w.tail.Lock()
	if tail != nil && !n.tailWriteLocked(q, *tail) {
		w.tail.Unlock()
		n.mu.queue(q).RUnlock()
		return
	}
	l := n.reg(hw.TDLEN(q)) / hw.DescSize
	tdt, head := n.reg(hw.TDT(q)), n.reg(hw.TDH(q))
	w.tail.Unlock()
	if n.closed || !n.txEnabledQ(q) || !n.has(hw.DMATXCTL, hw.DmatxctlTE) || !n.f.busMaster() || tdt >= l {
		// The tail write recorded what was wrong with it; a queue
		// stopped since fetches nothing more.
		n.mu.queue(q).RUnlock()
		return
	}
	s := txSnap{
		base:     uint64(n.reg(hw.TDBAH(q)))<<32 | uint64(n.reg(hw.TDBAL(q))),
		l:        l,
		head:     head,
		tdt:      tdt,
		maxFrame: n.maxFrameLocked(),
		vet:      n.vetLocked(),
		pad:      n.has(hw.HLREG0, hw.Hlreg0TxPadEn),
	}
	n.mu.queue(q).RUnlock()

	w.out = w.out[:0]
	var t queueTally
	head = n.txRing(q, w, &s, &t)

	n.mu.queue(q).RLock()
	w.tail.Lock()
	if n.reg(hw.TDH(q)) == s.head {
		// Unless the driver stopped the queue and set its head
		// during the walk, which the next walk then starts from.
		n.set(hw.TDH(q), head)
	}
	w.tail.Unlock()
	w.sum.add(&t)
	loop := n.loopback()
	lu := n.linkUp()
	n.mu.queue(q).RUnlock()
	for _, fr := range w.out {
		switch {
		case loop:
			n.receive(fr)
		case lu:
			// A peer that keeps the frame for its engine takes this
			// buffer and gives one of its spent ones back.
			fr = handOff(n, fr)
		}
		// Counted once handed on, so a TxFrames that reached k says
		// the first k frames are in the peer's hands.
		w.sent.Add(1)
		if cap(fr) >= txFrameCap {
			w.spare = append(w.spare, fr[:0])
		}
	}
	w.out = w.out[:0]
}

func (w *txWalk) frameBuf() []byte {
	if k := len(w.spare); k > 0 {
		b := w.spare[k-1]
		w.spare = w.spare[:k-1]
		return b[:0]
	}
	return make([]byte, 0, txFrameCap)
}

// txFrameCap is the size of the TX path's frame buffers: the longest
// frame the walk gathers. A buffer a peer gives back (handOff) that is
// shorter is left to the garbage collector.
const txFrameCap = 16384

// txRing walks TX ring q from the snapshot's head to its tail, gathering
// frames into w.out, and returns the new head. Under w.mu, not mu.
func (n *ixgbeNIC) txRing(q int, w *txWalk, s *txSnap, t *queueTally) uint32 {
	dom := n.f.dom
	l, head := s.l, s.head
	if head >= l {
		n.violation("TDH%d = %d outside a ring of %d descriptors", q, head, l)
		return head
	}
	frame := w.frameBuf()
	var first hw.TxDesc
	inFrame, faulted := false, false
	dom.mu.queue(q).RLock()
	defer dom.mu.queue(q).RUnlock()
	for head != s.tdt {
		raw, ok := dom.translate(s.base+uint64(head)*hw.DescSize, hw.DescSize, true, &w.hint[0])
		if !ok {
			n.violation("TX descriptor %d of queue %d at an unmapped IOVA", head, q)
			break
		}
		t.fetch++
		d := hw.DecodeTxDesc(raw)
		switch {
		case d.CmdType&hw.TxCmdDEXT == 0:
			n.violation("legacy TX descriptor on queue %d: this model uses advanced descriptors (DEXT set)", q)
		case d.DTyp() == hw.TxDTypContext:
			n.txCtx[q][d.Olinfo>>hw.TxOlinfoIdxShift&1] = d
		case d.DTyp() != hw.TxDTypData:
			n.violation("TX descriptor type %d on queue %d: want 2 (context) or 3 (data)", d.DTyp()>>20, q)
		default:
			if !inFrame {
				first, inFrame = d, true
				if d.CmdType&hw.TxCmdIFCS == 0 {
					n.violation("TX data descriptor without IFCS: the frame would leave without an FCS")
				}
			}
			if ln := d.Len(); ln > 0 {
				hint := &w.hint[1]
				if len(frame) > 0 {
					hint = &w.hint[2]
				}
				buf, ok := dom.translate(d.Addr, ln, false, hint)
				switch {
				case !ok:
					n.violation("TX buffer at IOVA %#x (%d bytes) is not mapped", d.Addr, ln)
					faulted = true
				case !faulted && len(frame)+ln <= cap(frame):
					frame = append(frame, buf...)
				}
			}
			if d.CmdType&hw.TxCmdEOP != 0 {
				if faulted {
					frame = frame[:0]
				} else {
					n.finishFrame(w, &frame, q, first, s, t)
				}
				inFrame, faulted = false, false
			}
		}
		if d.CmdType&hw.TxCmdRS != 0 {
			dmasync.Publish()
			store64(raw[8:16], uint64(d.CmdType)|uint64(d.Olinfo|hw.TxStatDD)<<32)
			t.wb++
		}
		head = (head + 1) % l
	}
	if inFrame {
		n.violation("TX queue %d: descriptors up to TDT end without EOP", q)
	}
	w.spare = append(w.spare, frame[:0])
	return head
}

// finishFrame checks, pads, checksums and counts a complete frame and
// queues it for the wire. Under w.mu.
func (n *ixgbeNIC) finishFrame(w *txWalk, frame *[]byte, q int, first hw.TxDesc, s *txSnap, t *queueTally) {
	fr := *frame
	*frame = w.frameBuf()
	drop := func() { w.spare = append(w.spare, fr[:0]) }
	if paylen := int(first.Olinfo >> hw.TxPaylenShift); paylen != len(fr) {
		n.violation("TX frame of %d bytes with PAYLEN %d in its first descriptor: PAYLEN is the frame's length", len(fr), paylen)
	}
	if len(fr) < 14 {
		n.violation("TX frame of %d bytes: shorter than an Ethernet header", len(fr))
		drop()
		return
	}
	if lim := frameLimit(fr, s.maxFrame, s.vet); len(fr) > lim {
		n.violation("TX frame of %d bytes: longer than %d (HLREG0.JUMBOEN, MAXFRS; 4 more with a VLAN tag)", len(fr), lim)
		drop()
		return
	}
	if s.pad {
		for len(fr) < hw.MinFrame {
			fr = append(fr, 0)
		}
	}
	if popts := first.Olinfo & (hw.TxPoptsIXSM | hw.TxPoptsTXSM); popts != 0 {
		n.txChecksum(fr, q, first.Olinfo, popts)
	}
	t.frames++
	t.octets += uint64(len(fr) + 4)
	if fr[0]&1 != 0 {
		if isBroadcast(fr) {
			t.bcast++
		} else {
			t.mcast++
		}
	}
	w.out = append(w.out, fr)
}

// maxFrameLocked is the largest untagged frame without FCS the MAC
// passes (MAXFRS.MFS less the FCS with HLREG0.JUMBOEN, 1514 without; see
// frameLimit for a tagged one). RX drops a longer one and counts it in ROC.
func (n *ixgbeNIC) maxFrameLocked() int {
	if n.has(hw.HLREG0, hw.Hlreg0JumboEn) {
		return int(n.reg(hw.MAXFRS)>>hw.MaxfrsShift) - 4
	}
	return hw.StdFrame
}

// vetLocked is the EtherType of a VLAN tag (VLNCTRL.VET).
func (n *ixgbeNIC) vetLocked() uint16 { return uint16(n.reg(hw.VLNCTRL) & hw.VlnctrlVETMask) }

// frameLimit is the largest length without FCS of a frame like fr when
// the largest untagged one is untagged: a frame with a VLAN tag (EtherType
// vet, VLNCTRL.VET, at offset 12) may be 4 bytes longer, as the 82599
// admits one of MFS+4 bytes (MAXFRS; without JUMBOEN, 1518 tagged).
func frameLimit(fr []byte, untagged int, vet uint16) int {
	if len(fr) >= 14 && binary.BigEndian.Uint16(fr[12:]) == vet {
		return untagged + 4
	}
	return untagged
}

func (n *ixgbeNIC) count64(lo int, v uint64) {
	c := uint64(n.regs[lo/4+1])<<32 | uint64(n.regs[lo/4]) + v
	n.regs[lo/4], n.regs[lo/4+1] = uint32(c), uint32(c>>32)
}

// txChecksum inserts the IPv4 header and TCP/UDP checksums the
// context descriptor (IDX of olinfo) describes.
func (n *ixgbeNIC) txChecksum(fr []byte, q int, olinfo, popts uint32) {
	c := n.txCtx[q][olinfo>>hw.TxOlinfoIdxShift&1]
	if c.DTyp() != hw.TxDTypContext {
		n.violation("TX checksum offload on queue %d without a context descriptor", q)
		return
	}
	macLen := int(uint32(c.Addr) >> hw.TxCtxMACLenShift & 0x7F)
	ipLen := int(uint32(c.Addr) & hw.TxCtxIPLenMask)
	if macLen+ipLen > len(fr) || ipLen < 20 {
		n.violation("TX checksum context out of the frame: MACLEN %d, IPLEN %d, frame %d bytes", macLen, ipLen, len(fr))
		return
	}
	ip := fr[macLen:]
	if popts&hw.TxPoptsIXSM != 0 {
		if c.CmdType&hw.TxCtxTucmdIPv4 == 0 {
			n.violation("IXSM without TUCMD.IPV4 in the context")
		}
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], csum.Checksum(ip[:ipLen]))
	}
	if popts&hw.TxPoptsTXSM != 0 {
		l4 := fr[macLen+ipLen:]
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if tot < ipLen || macLen+tot > len(fr) {
			n.violation("TXSM on a frame whose IPv4 total length %d does not fit it", tot)
			return
		}
		l4 = l4[:tot-ipLen]
		udp := c.CmdType&hw.TxCtxTucmdL4Mask == hw.TxCtxTucmdL4UDP
		at := 16
		if udp {
			at = 6
		}
		if len(l4) < at+2 {
			return
		}
		// The driver seeded the field with the pseudo-header sum (as
		// Linux and DPDK do); the NIC sums from the L4 header to the end.
		s := csum.Checksum(l4)
		if udp && s == 0 {
			s = 0xFFFF
		}
		binary.BigEndian.PutUint16(l4[at:], s)
	}
}
