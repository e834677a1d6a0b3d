package emulated

import (
	"encoding/binary"
	"hash/crc32"
	"sync/atomic"

	"github.com/gomx-dev/gomx/internal/csum"
	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// The 82599 model's receive path: a frame from the wire is filtered by
// address, held while its ring has no free descriptor, written to guest
// memory with its advanced descriptor and checksum status, and counted.
// Which queue it goes to is decided in ixgbe_rules.go; registers are in
// ixgbe_regs.go; transmit in ixgbe_tx.go.

func (n *ixgbeNIC) rxOnLocked() bool { return n.has(hw.RXCTRL, hw.RxctrlRXEN) }
func (n *ixgbeNIC) crcErrorLocked()  { n.regs[hw.CRCERRS/4]++ }

// missedLocked implements nicHooks; also under mu held for reading.
func (n *ixgbeNIC) missedLocked() { n.fast.stat[statMPC].Add(1) }

// fromFrame takes a frame off the wire: one with a bad FCS is counted and
// dropped, as the MAC drops it; another is received.
func (n *ixgbeNIC) fromFrame(fr []byte, badFCS bool) {
	if badFCS {
		n.nicCore.fromWire(fr, true)
		return
	}
	n.receive(fr)
}

// receive takes a frame from the wire or the loopback into the ring of
// the queue it is steered to, or into the hold behind the frames that
// wait there. It holds mu for reading, and the queue's lock while it
// writes the ring (deliverQueue), so frames for different queues are
// received at once; the hold is taken only while frames wait in it or
// the ring has no room. The frame buffer is the caller's. Its queue is
// known only once the filters have steered it, so it reads mu in the
// shard its flow's destination port picks (flowShard). Frames for two
// queues pass through shards apart only where that pick equals the queue
// (as transport/nic's ports 40000+q do, 40000 being a multiple of
// queueShards); Ethernet-framed messages, frames an EtherType filter
// steers and frames other than IPv4 all read shard 0, whatever queue they
// reach, and share its lock word with queue 0's (and queue 8's) readers.
func (n *ixgbeNIC) receive(fr []byte) {
	s := 0
	if n.mu.mask != 0 {
		s = flowShard(fr)
	}
	n.mu.queue(s).RLock()
	defer n.mu.queue(s).RUnlock()
	if n.closed || !n.rxOnLocked() || !n.lastLU {
		n.nDrop.Add(1)
		return
	}
	if !n.acceptLocked(fr) {
		return
	}
	if n.hold.waiting() == 0 && n.deliverQueue(fr) != rxNoRoom {
		return
	}
	deliver := n.deliverQueue
	if n.holdHook != nil {
		n.holdHook(holdNoRoom)
		deliver = func(fr []byte) rxResult {
			r := n.deliverQueue(fr)
			if r == rxNoRoom {
				n.holdHook(holdOfferNoRoom)
			}
			return r
		}
	}
	n.holdMu.Lock()
	defer n.holdMu.Unlock()
	if !n.hold.offer(fr, deliver) {
		n.nDrop.Add(1)
		n.missedLocked()
	}
}

// A holdStage is a point where a frame that found its ring full and a
// refill that makes room can cross; a test stops a goroutine at one
// (holdHook) to make them cross there.
type holdStage int

const (
	holdNoRoom      holdStage = iota + 1 // receive: the ring had no room, the hold is not yet locked
	holdOfferNoRoom                      // offer: the ring still had no room, the frame is not yet held
	holdTailMoved                        // refill: RDT moved, the hold is not yet looked at
	holdWireFrame                        // receive engine: a frame of its batch off the wire is not yet received (no lock held)
)

// acceptLocked is the L2 filter: receive addresses, promiscuous modes,
// broadcast, the multicast table.
func (n *ixgbeNIC) acceptLocked(fr []byte) bool {
	if len(fr) < 14 {
		n.fast.stat[statRUC].Add(1)
		n.nDrop.Add(1)
		return false
	}
	fctrl := n.reg(hw.FCTRL)
	var dst [6]byte
	copy(dst[:], fr)
	switch {
	case isBroadcast(fr):
		return fctrl&(hw.FctrlBAM|hw.FctrlMPE) != 0
	case dst[0]&1 != 0:
		if fctrl&hw.FctrlMPE != 0 {
			return true
		}
		if !n.has(hw.MCSTCTRL, hw.McstctrlMFE) {
			return false
		}
		if n.reg(hw.MCSTCTRL)&3 != 0 {
			n.violation("MCSTCTRL.MO = %d: this model hashes multicast with MO = 0 only", n.reg(hw.MCSTCTRL)&3)
		}
		r, b := hw.MTAHash(dst)
		return n.reg(hw.MTA+4*r)&(1<<b) != 0
	case fctrl&hw.FctrlUPE != 0:
		return true
	}
	return matchRAR(n.regs, hw.RAL(0), hw.RAREntries, dst)
}

// rxChecksumLocked checks an IPv4 frame's header and TCP/UDP checksums, as
// the 82599 always does, and returns the status and error bits.
func (n *ixgbeNIC) rxChecksumLocked(ip, l4 []byte, proto byte) uint32 {
	st := uint32(hw.RxStatIPCS)
	if csum.Fold(csum.Add(0, ip[:int(ip[0]&0xF)*4])) != 0xFFFF {
		st |= hw.RxErrIPE
	}
	if l4 == nil || (proto != 6 && proto != 17) {
		return st
	}
	if proto == 17 && binary.BigEndian.Uint16(l4[6:]) == 0 {
		return st
	}
	sum := csum.Pseudo(ip[12:20], proto, len(l4))
	st |= hw.RxStatL4CS
	if proto == 17 {
		st |= hw.RxStatUDPCS
	}
	if csum.Fold(csum.Add(sum, l4)) != 0xFFFF {
		st |= hw.RxErrTCPE
	}
	return st
}

// deliverLocked implements nicHooks: it steers one frame and writes it
// into its RX ring, under mu held for writing.
func (n *ixgbeNIC) deliverLocked(fr []byte) rxResult {
	c, res := n.steerLocked(fr)
	if res != rxDone {
		return res
	}
	return n.writeRxLocked(fr, c)
}

// deliverQueue is deliverLocked under mu held for reading: it writes the
// ring holding the lock of the queue the frame is steered to.
func (n *ixgbeNIC) deliverQueue(fr []byte) rxResult {
	c, res := n.steerLocked(fr)
	if res != rxDone {
		return res
	}
	r := &n.rxq[c.queue]
	r.mu.Lock()
	defer r.mu.Unlock()
	return n.writeRxLocked(fr, c)
}

// steerLocked checks a frame's length, steers it and checks its queue: it
// returns rxDone with an enabled queue in c.queue, or the frame dropped.
// It changes nothing but atomic counters.
func (n *ixgbeNIC) steerLocked(fr []byte) (rxClass, rxResult) {
	var none rxClass
	if !n.f.busMaster() {
		n.nDrop.Add(1)
		return none, rxDropped
	}
	if len(fr)+4 < 64 {
		n.fast.stat[statRUC].Add(1)
		n.nDrop.Add(1)
		return none, rxDropped
	}
	if len(fr) > frameLimit(fr, n.maxFrameLocked(), n.vetLocked()) {
		n.fast.stat[statROC].Add(1)
		n.nDrop.Add(1)
		return none, rxDropped
	}
	c := n.classifyLocked(fr)
	if c.drop {
		n.nDrop.Add(1)
		return none, rxDropped
	}
	q := c.queue
	if q < hw.MaxQueuePairs && !n.rxEnabled(q) && n.reg(hw.SRRCTL(q))&hw.SrrctlDropEn != 0 && n.reg(hw.RDLEN(q)) != 0 {
		// A queue stopped for a moment (a driver taking its
		// descriptors back) that drops when it has none: dropped.
		if q < hw.QueueStats {
			n.fast.stat[statQPRDC+q].Add(1)
		}
		n.nDrop.Add(1)
		return none, rxDropped
	}
	if q >= hw.MaxQueuePairs || !n.rxEnabled(q) {
		n.violation("frame steered to RX queue %d, which is not enabled", q)
		n.nDrop.Add(1)
		return none, rxDropped
	}
	return c, rxDone
}

// writeRxLocked writes a frame steered to c.queue into that queue's ring
// (or drops it, or finds no room), under mu held for writing, or for
// reading with the queue's lock.
func (n *ixgbeNIC) writeRxLocked(fr []byte, c rxClass) rxResult {
	q := c.queue
	rq := &n.rxq[q]
	hint := &rq.hint
	srrctl := n.reg(hw.SRRCTL(q))
	pktBuf := int(srrctl&hw.SrrctlBSizePktMask) << 10
	hdrBuf := int(srrctl&hw.SrrctlBSizeHdrMask>>hw.SrrctlBSizeHdrShift) * 64
	data := fr
	if !n.has(hw.HLREG0, hw.Hlreg0RxCRCStrp) {
		c := crc32.ChecksumIEEE(fr)
		data = binary.LittleEndian.AppendUint32(append([]byte(nil), fr...), c)
	}
	var tci uint16
	if n.has(hw.RXDCTL(q), hw.RxdctlVME) && len(fr) >= 18 && binary.BigEndian.Uint16(fr[12:]) == n.vetLocked() {
		// RXDCTL.VME (per queue on the 82599): a tag of VLNCTRL.VET's
		// EtherType leaves the frame for the write-back's VLAN field,
		// status VP.
		tci = binary.BigEndian.Uint16(fr[14:])
		data = append(append(make([]byte, 0, len(data)-4), data[:12]...), data[16:]...)
		c.status |= hw.RxStatVP
	}
	hdr := 0
	dt := srrctl & hw.SrrctlDescTypeMask
	if (dt == hw.SrrctlDescAdvHdrSplit || dt == hw.SrrctlDescAdvHdrAlways) && n.reg(hw.PSRTYPE(0))&(hw.PsrtypeTCPHdr|hw.PsrtypeUDPHdr|hw.PsrtypeIPv4Hdr|hw.PsrtypeIPv6Hdr) != 0 {
		if h, ok := psHeaderLen(data, false, 1<<20); ok {
			if h > hdrBuf {
				c.status |= hw.RxErrHBO
			} else {
				hdr = h
			}
		}
	}
	if dt == hw.SrrctlDescAdvHdrAlways && hdr == 0 {
		// "Always use the header buffer": a frame whose headers the
		// parser did not split puts its first BSIZEHEADER bytes there.
		hdr = min(len(data), hdrBuf)
	}
	rest := len(data) - hdr
	need := uint32(max(1, (rest+pktBuf-1)/pktBuf))
	if dt == hw.SrrctlDescAdvHdrAlways && need > 1 {
		// Strict where a driver that places payloads relies on one
		// descriptor a frame: the packet buffer of every descriptor of
		// such a queue, a posted placement or a pool buffer, must take
		// the longest frame MAXFRS lets in after its header. This model
		// spreads frames over descriptors only in the one-buffer and
		// header split types.
		n.violation("RX queue %d (SRRCTL.DESCTYPE 101, always the header buffer): a frame of %d bytes leaves %d after its %d-byte header, more than SRRCTL.BSIZEPACKET's %d: this model puts such a frame in one descriptor only; give BSIZEPACKET room for MAXFRS", q, len(data), rest, hdr, pktBuf)
		n.nDrop.Add(1)
		return rxDropped
	}
	l := n.reg(hw.RDLEN(q)) / hw.DescSize
	head, tail := n.reg(hw.RDH(q)), atomic.LoadUint32(&n.regs[hw.RDT(q)/4]) // refill stores RDT without the queue's lock
	if head >= l || tail >= l {
		n.nDrop.Add(1)
		return rxDropped
	}
	if (tail+l-head)%l < need {
		if srrctl&hw.SrrctlDropEn != 0 {
			if q < hw.QueueStats {
				n.fast.stat[statQPRDC+q].Add(1)
			}
			n.nDrop.Add(1)
			return rxDropped
		}
		return rxNoRoom
	}
	dom := n.f.dom
	base := uint64(n.reg(hw.RDBAH(q)))<<32 | uint64(n.reg(hw.RDBAL(q)))
	dom.mu.queue(q).RLock()
	defer dom.mu.queue(q).RUnlock()
	off := hdr
	for i := uint32(0); i < need; i++ {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, true, &hint[0])
		if !ok {
			n.violation("RX descriptor %d of queue %d at an unmapped IOVA", head, q)
			n.nDrop.Add(1)
			return rxDropped
		}
		rq.sum.fetch++
		pktAddr := binary.LittleEndian.Uint64(raw)
		hdrAddr := binary.LittleEndian.Uint64(raw[8:])
		wb := hw.RxWriteBack{PktInfo: c.pktInfo, Hash: c.hash, Status: hw.RxStatDD, VLAN: tci}
		if i == 0 && hdr > 0 {
			if hdrAddr&1 != 0 {
				n.violation("RX descriptor %d of queue %d: header buffer address %#x has bit 0 set (it must be even: DD sits there)", head, q, hdrAddr)
			}
			hb, ok := dom.translate(hdrAddr, hdr, true, &hint[1])
			if !ok {
				n.violation("RX header buffer at IOVA %#x (%d bytes) is not mapped", hdrAddr, hdr)
				n.nDrop.Add(1)
				return rxDropped
			}
			copy(hb, data[:hdr])
			wb.HdrInfo = hw.HdrInfoSPH | uint16(hdr)<<hw.HdrInfoLenShift
		}
		k := min(pktBuf, len(data)-off)
		if k > 0 {
			buf, ok := dom.translate(pktAddr, k, true, &hint[2])
			if !ok {
				n.violation("RX buffer at IOVA %#x (%d bytes) is not mapped", pktAddr, k)
				n.nDrop.Add(1)
				return rxDropped
			}
			copy(buf, data[off:off+k])
		}
		off += k
		wb.Length = uint16(k)
		if i == need-1 {
			wb.Status |= hw.RxStatEOP | c.status
		}
		var tmp [hw.DescSize]byte
		wb.Encode(tmp[:])
		store64(raw[0:8], binary.LittleEndian.Uint64(tmp[0:]))
		dmasync.Publish()
		store64(raw[8:16], binary.LittleEndian.Uint64(tmp[8:]))
		rq.sum.wb++
		head = (head + 1) % l
	}
	n.set(hw.RDH(q), head)
	rq.recv.Add(1)
	rq.sum.frames++
	rq.sum.octets += uint64(len(fr) + 4)
	if fr[0]&1 != 0 {
		if isBroadcast(fr) {
			rq.sum.bcast++
		} else {
			rq.sum.mcast++
		}
	}
	n.queueCauseLocked(q)
	return rxDone
}

// flowShard picks the shard of mu a received frame reads (queueLock): its
// UDP or TCP destination port for an IPv4 datagram that is not a
// fragment's tail, the port by which filters and Flow Director steer a
// flow to its queue, else 0.
func flowShard(fr []byte) int {
	if len(fr) < 14+20 || fr[12] != 0x08 || fr[13] != 0x00 || fr[14]>>4 != 4 {
		return 0
	}
	if p := fr[14+9]; p != 6 && p != 17 || binary.BigEndian.Uint16(fr[14+6:])&0x1FFF != 0 {
		return 0
	}
	at := 14 + int(fr[14]&0xF)*4 + 2
	if len(fr) < at+2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(fr[at:]))
}
