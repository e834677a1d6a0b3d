package emulated

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// The 82599 model's control path: its register file and how reads and
// writes of it act (reset, CTRL and RXCTRL, the RX and TX ring registers,
// the statistics that clear on read, the model's clock), the link, and
// the interrupt causes, their routing through IVAR and the MSI-X messages
// with their EITR throttle. The platform and the NIC's state are in
// ixgbe.go; the receive filters and the Flow Director table in
// ixgbe_rules.go; transmit in ixgbe_tx.go; receive in ixgbe_rx.go.

func (n *ixgbeNIC) reg(off int) uint32         { return n.regs[off/4] }
func (n *ixgbeNIC) set(off int, v uint32)      { n.regs[off/4] = v }
func (n *ixgbeNIC) has(off int, b uint32) bool { return n.regs[off/4]&b != 0 }

// powerOn sets the reset values the model relies on.
func (n *ixgbeNIC) powerOn() {
	clear(n.regs)
	n.set(hw.EEC, hw.EECPres|hw.EECAutoRd)
	n.set(hw.RDRXCTL, hw.RdrxctlDMAIDone)
	n.set(hw.HLREG0, hw.Hlreg0TxCRCEn|hw.Hlreg0RxCRCStrp|hw.Hlreg0TxPadEn)
	n.set(hw.VLNCTRL, 0x8100)                         // VET
	n.set(hw.MAXFRS, (hw.StdFrame+4)<<hw.MaxfrsShift) // 0x5EE
	n.set(hw.RXPBSIZE(0), 512<<10)
	n.set(hw.TXPBSIZE(0), 160<<10)
	for q := 0; q < hw.Queues; q++ {
		n.set(hw.SRRCTL(q), 2|4<<hw.SrrctlBSizeHdrShift) // 2 KiB packet, 256 B header buffers
	}
	n.set(hw.AUTOC, hw.AutocLMS10GSerial)
	n.loadMAC()
	n.hold.drop()
	n.macLink = false
	n.fdir, n.fdirN = nil, 0
	n.fdirHit.Store(0)
	n.fdirMis.Store(0)
	n.clearStats()
	n.octets = [len(octetRegs)]octetLatch{}
	for i := range n.vecs {
		n.vecs[i].cause, n.vecs[i].enabled = false, false
	}
	n.ftqfOn = [hw.FiveTupleEntries / 64]uint64{}
	n.txCtx = [hw.MaxQueuePairs][2]hw.TxDesc{}
	n.lastLU = n.linkUp()
	// The reset is over: the packet buffer takes frames again
	// (stopEngine put it off), unless the NIC is closed.
	n.in.off.Store(n.closed)
}

func (n *ixgbeNIC) loadMAC() {
	m := n.mac
	n.set(hw.RAL(0), uint32(m[0])|uint32(m[1])<<8|uint32(m[2])<<16|uint32(m[3])<<24)
	n.set(hw.RAH(0), uint32(m[4])|uint32(m[5])<<8|1<<31)
}

func (n *ixgbeNIC) loopback() bool { return n.has(hw.HLREG0, hw.Hlreg0Lpbk) }

// linkUp is LINKS.UP: the MAC link is set up and a cable is in (or the MAC
// loops back).
func (n *ixgbeNIC) linkUp() bool {
	return n.macLink && (n.plug.cable.Load() || n.loopback())
}

func (n *ixgbeNIC) lscLocked() { n.otherCauseLocked(hw.EicrLSC) }

// modelTimeSince adds the thread CPU time since t0 (threadCPUNanos) to
// ModelTime.
func (n *ixgbeNIC) modelTimeSince(t0 int64) { n.modelNS.Add(threadCPUNanos() - t0) }

func (n *ixgbeNIC) read(off, w int) uint64 {
	if n.cpuTime {
		defer n.modelTimeSince(threadCPUNanos())
	}
	if w == 4 && off == hw.STATUS {
		return uint64(n.readStatus())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acc.count(&n.acc.reads, off)
	if w != 4 {
		n.violation("%d-byte read at %#x: 82599 registers are read 32 bits at a time", w, off)
		return 0
	}
	switch {
	case off == hw.LINKS:
		if n.linkUp() {
			return hw.LinksUp | hw.LinksSpeed10G
		}
		return 0
	case off == hw.EICR:
		// Read to clear: the other causes and every vector's.
		v := n.reg(hw.EICR)&^hw.EicrRTxQMask | uint32(n.vectorBitsLocked(true, true))&hw.EicrRTxQMask
		n.set(hw.EICR, 0)
		return uint64(v)
	case off == hw.EIMS:
		return uint64(n.reg(hw.EIMS)&^hw.EicrRTxQMask | uint32(n.vectorBitsLocked(false, false))&hw.EicrRTxQMask)
	case off == hw.EIMSEx(0) || off == hw.EIMSEx(1):
		return n.vectorBitsLocked(false, false) >> (32 * ((off - hw.EIMSEx(0)) / 4)) & 0xFFFFFFFF
	case off == hw.EICS || off == hw.EIMC || off == hw.EIMCEx(0) || off == hw.EIMCEx(1):
		return 0
	case off == hw.FDIRFREE:
		return uint64(n.fdirCapLocked() - n.fdirN)
	case off == hw.FDIRMATCH:
		return uint64(n.fdirHit.Swap(0))
	case off == hw.FDIRMISS:
		return uint64(n.fdirMis.Swap(0))
	case isIXGBEStat(off):
		n.foldLocked()
		for i, lo := range octetRegs {
			if off == lo || off == lo+4 {
				return uint64(n.readOctets(i, off == lo+4))
			}
		}
		v := n.reg(off)
		n.set(off, 0)
		return uint64(v)
	}
	return uint64(n.reg(off))
}

// octetRegs are the low halves of the 64-bit octet counters.
var octetRegs = [...]int{hw.GORCL, hw.GOTCL, hw.TORL}

// readOctets is a read of the high (hi) or low half of octet counter
// octetRegs[i]. The low half's read latches the count and returns its low
// half; the high half's returns the latch's high half and takes the latch
// off the count, which so reads as cleared if nothing was counted between
// the two reads, and keeps what was for the next. A high half read with no
// low half read before it latches the count itself. Under mu.
func (n *ixgbeNIC) readOctets(i int, hi bool) uint32 {
	lo := octetRegs[i]
	c := uint64(n.regs[lo/4+1])<<32 | uint64(n.regs[lo/4])
	l := &n.octets[i]
	if !hi {
		*l = octetLatch{c, true}
		return uint32(c)
	}
	if !l.set {
		l.v = c
	}
	c -= l.v
	n.regs[lo/4], n.regs[lo/4+1] = uint32(c), uint32(c>>32)
	v := l.v
	*l = octetLatch{}
	return uint32(v >> 32)
}

// isIXGBEStat tells whether off is a clear-on-read statistics register.
func isIXGBEStat(off int) bool {
	switch {
	case off >= hw.StatsFirst && off <= hw.StatsLast:
		return true
	case off >= hw.MPC(0) && off <= hw.MPC(7):
		return true
	}
	for q := 0; q < hw.QueueStats; q++ {
		if off == hw.QPRDC(q) {
			return true
		}
	}
	return false
}

// readStatus is a read of STATUS: link and GIO master state, which only
// mu held for writing changes. A driver reads it after every arming to
// flush its posted writes, so it holds mu for reading, as the arming's
// writes do, and waits for no queue's frames.
func (n *ixgbeNIC) readStatus() uint32 {
	n.mu.RLock()
	defer n.mu.RUnlock()
	n.fast.status.Add(1)
	s := uint32(0)
	if n.linkUp() {
		s |= hw.StatusLinkUp
	}
	if n.f.busMaster() && (!n.has(hw.CTRL, hw.CtrlGIODis) || n.holdGIO.Load()) {
		s |= hw.StatusGIO
	}
	return s
}

func (n *ixgbeNIC) write(off, w int, v64 uint64) {
	if n.cpuTime {
		defer n.modelTimeSince(threadCPUNanos())
	}
	if w == 8 && off == hw.FDIRHASH {
		// Linux writes FDIRHASH and FDIRCMD with one 64-bit store.
		n.write32(off, uint32(v64))
		n.write32(off+4, uint32(v64>>32))
		return
	}
	if w != 4 {
		n.mu.Lock()
		n.acc.count(&n.acc.writes, off)
		n.violation("%d-byte write at %#x: 82599 registers are written 32 bits at a time (64 only at FDIRHASH)", w, off)
		n.mu.Unlock()
		return
	}
	n.write32(off, uint32(v64))
}

// ringReg decodes an RX or TX ring register: the queue, the register of
// queue 0 it corresponds to, and whether it is RX.
func ringReg(off int) (q, reg int, rx, ok bool) {
	switch {
	case off >= 0x01000 && off < 0x02000:
		q, reg = (off-0x01000)/0x40, 0x01000+(off-0x01000)%0x40
	case off >= 0x0D000 && off < 0x0E000:
		q, reg = 64+(off-0x0D000)/0x40, 0x01000+(off-0x0D000)%0x40
	case off >= 0x06000 && off < 0x08000:
		return (off - 0x06000) / 0x40, 0x06000 + (off-0x06000)%0x40, false, true
	case off >= 0x02100 && off < 0x02140:
		return (off - 0x02100) / 4, hw.SRRCTL(0), true, true
	default:
		return 0, 0, false, false
	}
	if reg == 0x01014 { // SRRCTL's other home for queues 0-15
		reg = hw.SRRCTL(0)
	}
	return q, reg, true, true
}

func (n *ixgbeNIC) write32(off int, v uint32) {
	// The tails of the queues the model runs take their queue's path; a
	// tail of queues 64-127 is only a register, written under mu below.
	if q, reg, rx, ok := ringReg(off); ok && q < hw.MaxQueuePairs && reg == hw.TDT(0) {
		n.transmit(q, v)
		return
	} else if ok && rx && q < hw.MaxQueuePairs && reg == hw.RDT(0) {
		n.refill(q, off, v)
		return
	}
	if i := maskReg(off); i >= 0 {
		n.writeMask(i, off, v)
		return
	}
	if off == hw.CTRL && v&hw.CtrlRst != 0 {
		// A software reset stops the DMA engines and waits out a
		// transmission or delivery in flight (the NIC takes no frame
		// until powerOn ends the reset): powerOn runs under txMu and mu.
		n.stopEngine()
		n.txMu.Lock()
		defer n.txMu.Unlock()
	} else if _, reg, rx, ok := ringReg(off); ok && !rx && reg != hw.TDT(0) || off == hw.DMATXCTL || off == hw.CTRL {
		// What stops transmit DMA or reprograms a TX ring (TXDCTL,
		// TDBAL/H, TDLEN, TDH, DMATXCTL.TE, CTRL.GIODis) waits out a
		// ring walk in flight, which holds txMu and not mu: the
		// hardware's enable and GIO status bits read set until its
		// outstanding DMA is done, so a driver that polls them clear
		// finds no DMA running, and a ring programmed afresh is not
		// walked from a stale head.
		n.txMu.Lock()
		defer n.txMu.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acc.count(&n.acc.writes, off)
	if n.closed {
		return
	}
	if q, reg, rx, ok := ringReg(off); ok {
		if rx {
			n.writeRxRing(q, reg, off, v)
		} else {
			n.writeTxRing(q, reg, off, v)
		}
		return
	}
	switch {
	case off == hw.CTRL:
		n.writeCtrl(v)
	case off == hw.STATUS || off == hw.LINKS || off == hw.FDIRFREE:
		// Read-only.
	case off == hw.EEC:
		n.set(off, v|hw.EECPres|hw.EECAutoRd)
	case off == hw.RDRXCTL:
		n.set(off, v|hw.RdrxctlDMAIDone)
	case off == hw.AUTOC:
		if v&hw.AutocANRestart != 0 {
			n.macLink = true
			v &^= hw.AutocANRestart
		}
		n.set(off, v)
		n.linkChangedLocked()
	case off == hw.HLREG0:
		n.set(off, v)
		n.linkChangedLocked()
	case off == hw.EICS: // under mu for writing: no vector's lock
		for vec := 0; vec < 16; vec++ {
			if v&(1<<vec) != 0 {
				n.vectorCauseLocked(vec)
			}
		}
		if o := v &^ hw.EicrRTxQMask; o != 0 {
			n.otherCauseLocked(o)
		}
	case off >= hw.IVAR(0) && off <= hw.IVAR(63):
		for _, sh := range []int{0, 8, 16, 24} {
			if e := v >> sh & 0xFF; e&hw.IVARValid != 0 && e&0x7F >= hw.MSIXVectors {
				n.violation("IVAR%d names vector %d: the 82599 has %d", (off-hw.IVAR(0))/4, e&0x7F, hw.MSIXVectors)
			}
		}
		n.set(off, v)
	case off == hw.RXCTRL:
		n.writeRxctrl(v)
	case off == hw.MRQC:
		if m := v & hw.MrqcMRQEMask; m != 0 && m != hw.MrqcRSSEn {
			n.violation("MRQC.MRQE = %#x: this model has RSS (0001) or none (0000); VMDq and DCB modes are not modelled", m)
		}
		n.set(off, v)
	case off >= hw.ETQF(0) && off <= hw.ETQF(hw.ETQFEntries-1):
		if t := v & hw.EtqfTypeMask; v&hw.EtqfFilterEn != 0 && (t == 0x0800 || t == 0x86DD) {
			n.violation("ETQF%d filters EtherType %#04x: IPv4 and IPv6 may not be EtherType-filtered; use 5-tuple or Flow Director filters", (off-hw.ETQF(0))/4, t)
		}
		n.set(off, v)
	case off >= hw.FTQF(0) && off <= hw.FTQF(hw.FiveTupleEntries-1):
		if v&hw.FtqfQueueEn != 0 && v&hw.FtqfPoolMaskEn == 0 {
			n.violation("FTQF%d compares the pool (bit 30 clear) without VMDq: set the pool mask bit", (off-hw.FTQF(0))/4)
		}
		n.set(off, v)
		i := (off - hw.FTQF(0)) / 4
		if v&hw.FtqfQueueEn != 0 {
			n.ftqfOn[i/64] |= 1 << (i % 64)
		} else {
			n.ftqfOn[i/64] &^= 1 << (i % 64)
		}
	case off == hw.FDIRCTRL:
		n.writeFdirctrl(v)
	case off == hw.FDIRCMD:
		n.fdirCommandLocked(v)
	case off == hw.FDIRTCPM || off == hw.FDIRUDPM:
		for _, h := range []uint32{v & 0xFFFF, v >> 16} {
			if h != 0 && h != 0xFFFF {
				n.violation("%s = %#08x: this model compares ports whole or not at all (each half 0x0000 or 0xFFFF)", hw.RegName(off), v)
			}
		}
		n.set(off, v)
	case off == hw.FDIRSIP4M || off == hw.FDIRDIP4M:
		if v != 0 && v != 0xFFFFFFFF {
			n.violation("%s = %#08x: this model compares addresses whole or not at all (0 or 0xFFFFFFFF)", hw.RegName(off), v)
		}
		n.set(off, v)
	case isIXGBEStat(off):
		n.violation("write to statistics register %#x: they are read-only (read to clear)", off)
	default:
		n.set(off, v)
	}
}

func (n *ixgbeNIC) writeCtrl(v uint32) {
	if v&hw.CtrlRst != 0 {
		if n.f.busMaster() && v&hw.CtrlGIODis == 0 && !n.has(hw.CTRL, hw.CtrlGIODis) {
			n.violation("CTRL.RST with PCI master enabled: set CTRL.GIO_DIS and wait for STATUS.GIO to clear first")
		}
		n.stopTimersLocked()
		n.powerOn()
		n.linkChangedLocked()
		return
	}
	n.set(hw.CTRL, v&^hw.CtrlLinkRst)
	if v&hw.CtrlLinkRst != 0 {
		n.macLink = false
		n.linkChangedLocked()
	}
}

func (n *ixgbeNIC) writeRxctrl(v uint32) {
	n.set(hw.RXCTRL, v)
	if v&hw.RxctrlRXEN == 0 {
		return
	}
	if n.has(hw.HLREG0, hw.Hlreg0RxCRCStrp) != n.has(hw.RDRXCTL, hw.RdrxctlCRCStrip) {
		n.violation("HLREG0.RXCRCSTRP and RDRXCTL.CRCSTRIP differ: set both or neither before RXCTRL.RXEN")
	}
	n.flushPendingLocked()
}

func (n *ixgbeNIC) rxEnabled(q int) bool  { return n.has(hw.RXDCTL(q), hw.RxdctlEnable) }
func (n *ixgbeNIC) txEnabledQ(q int) bool { return n.has(hw.TXDCTL(q), hw.TxdctlEnable) }

func (n *ixgbeNIC) writeRxRing(q, reg, off int, v uint32) {
	enabled := n.rxEnabled(q)
	name := func() string {
		return fmt.Sprintf("%s%d", map[int]string{hw.RDBAL(0): "RDBAL", hw.RDBAH(0): "RDBAH", hw.RDLEN(0): "RDLEN", hw.RDH(0): "RDH", hw.SRRCTL(0): "SRRCTL"}[reg], q)
	}
	switch reg {
	case hw.RDBAL(0), hw.RDBAH(0), hw.RDLEN(0), hw.RDH(0), hw.SRRCTL(0):
		if enabled {
			n.violation("%s written while RXDCTL%d.ENABLE is set: disable the queue and poll the bit clear first", name(), q)
		}
		if reg == hw.RDLEN(0) && (v%hw.RingLenAlign != 0 || v >= 1<<20) {
			n.violation("RDLEN%d = %d: must be a multiple of 128 bytes below 1 MiB", q, v)
		}
		if reg == hw.SRRCTL(0) {
			// Queues 0-15 have SRRCTL in two places; the model keeps one.
			off = hw.SRRCTL(q)
		}
		n.set(off, v)
	case hw.RDT(0): // of a queue the model does not run (refill takes the others)
		n.nTail.Add(1)
		if n.rdtInRing(q, v) {
			n.set(off, v)
		}
	case hw.RXDCTL(0):
		if v&hw.RxdctlEnable != 0 && !enabled {
			l := n.reg(hw.RDLEN(q))
			base := uint64(n.reg(hw.RDBAH(q)))<<32 | uint64(n.reg(hw.RDBAL(q)))
			dt := n.reg(hw.SRRCTL(q)) & hw.SrrctlDescTypeMask
			switch {
			case l == 0:
				n.violation("RXDCTL%d.ENABLE with RDLEN%d = 0: program the ring first", q, q)
				v &^= hw.RxdctlEnable
			case base%hw.RingAlign != 0:
				n.violation("RXDCTL%d.ENABLE with a ring base %#x not 128-byte aligned", q, base)
				v &^= hw.RxdctlEnable
			case dt != hw.SrrctlDescAdvOneBuf && dt != hw.SrrctlDescAdvHdrSplit && dt != hw.SrrctlDescAdvHdrAlways:
				n.violation("RXDCTL%d.ENABLE with SRRCTL%d.DESCTYPE = %d: this model uses advanced descriptors (one buffer, 001; header split, 010; header split always using the header buffer, 101)", q, q, dt>>25)
				v &^= hw.RxdctlEnable
			case n.reg(hw.SRRCTL(q))&hw.SrrctlBSizePktMask == 0:
				n.violation("RXDCTL%d.ENABLE with SRRCTL%d.BSIZEPACKET = 0: give the packet buffer size in KiB", q, q)
				v &^= hw.RxdctlEnable
			case n.reg(hw.SRRCTL(q))&hw.SrrctlBSizePktMask > 16:
				n.violation("RXDCTL%d.ENABLE with SRRCTL%d.BSIZEPACKET = %d KiB: the 82599 takes 1 to 16 KiB", q, q, n.reg(hw.SRRCTL(q))&hw.SrrctlBSizePktMask)
				v &^= hw.RxdctlEnable
			case dt != hw.SrrctlDescAdvOneBuf && n.reg(hw.SRRCTL(q))&hw.SrrctlBSizeHdrMask == 0:
				n.violation("RXDCTL%d.ENABLE with header split and SRRCTL%d.BSIZEHEADER = 0", q, q)
				v &^= hw.RxdctlEnable
			}
		}
		n.set(off, v)
		if v&hw.RxdctlEnable != 0 {
			n.flushPendingLocked()
		}
	default:
		n.set(off, v)
	}
}

// maskRegs are the interrupt mask registers, and EICR, which a driver that
// sleeps on its queues' vectors writes to arm them (EICR to clear the
// causes latched while they were masked, then EIMS_EX) while other queues
// move frames; maskReg is off's index among them, or -1.
var maskRegs = [...]int{hw.EIMS, hw.EIMC, hw.EIMSEx(0), hw.EIMSEx(1), hw.EIMCEx(0), hw.EIMCEx(1), hw.EICR}

func maskReg(off int) int {
	for i, r := range maskRegs {
		if r == off {
			return i
		}
	}
	return -1
}

// maskBits splits a write of v to the mask register or EICR at off into
// the vectors it names (bit i: vector i) and EICR's other causes.
func maskBits(off int, v uint32) (vecs uint64, other uint32) {
	switch off {
	case hw.EIMS, hw.EIMC, hw.EICR:
		return uint64(v & hw.EicrRTxQMask), v &^ hw.EicrRTxQMask
	case hw.EIMSEx(1), hw.EIMCEx(1):
		return uint64(v) << 32, 0
	}
	return uint64(v), 0 // EIMS_EX(0), EIMC_EX(0)
}

// writeMask is a write of v to maskRegs[i] (at off). A write that names
// vectors alone (an arming: EICR to clear the causes its vectors latched
// while masked, then EIMS_EX; or EIMC_EX) changes only those vectors'
// state, so it holds mu for reading, in the shard of the lowest vector it
// names (a queue's own, where vector and queue match), and each vector's
// lock in turn, as a delivery that raises a cause does: an arming waits
// for no queue's frames and shares no line with another queue's arming. A
// write that names EICR's other causes (LSC ...), which are raised under
// mu held for writing, holds mu for writing.
func (n *ixgbeNIC) writeMask(i, off int, v uint32) {
	vecs, other := maskBits(off, v)
	if other != 0 {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.fast.mask[queueShards].n[i].Add(1)
		if n.closed {
			return
		}
		switch off {
		case hw.EIMS:
			n.set(hw.EIMS, n.reg(hw.EIMS)|other)
		case hw.EIMC:
			n.set(hw.EIMS, n.reg(hw.EIMS)&^other)
		default: // EICR: write 1 to clear
			n.set(hw.EICR, n.reg(hw.EICR)&^other)
		}
		n.maskVectors(off, vecs)
		return
	}
	sh, c := n.mu.others(), &n.fast.mask[queueShards]
	if vecs != 0 {
		v := bits.TrailingZeros64(vecs)
		sh, c = n.mu.queue(v), &n.fast.mask[v%queueShards]
	}
	sh.RLock()
	defer sh.RUnlock()
	c.n[i].Add(1)
	if n.closed {
		return
	}
	n.maskVectors(off, vecs)
}

// maskVectors applies a write to the mask register or EICR at off to the
// vectors vecs, each under its own lock: EIMS sets their mask bits (a
// cause already pending fires), EIMC clears them, EICR clears their
// causes. Under mu, for reading at least.
func (n *ixgbeNIC) maskVectors(off int, vecs uint64) {
	for ; vecs != 0; vecs &= vecs - 1 {
		v := bits.TrailingZeros64(vecs)
		iv := &n.vecs[v]
		iv.mu.Lock()
		switch off {
		case hw.EIMS, hw.EIMSEx(0), hw.EIMSEx(1):
			iv.enabled = true
			if iv.cause {
				n.fireLocked(v)
			}
		case hw.EIMC, hw.EIMCEx(0), hw.EIMCEx(1):
			iv.enabled = false
		default: // EICR
			iv.cause = false
		}
		iv.mu.Unlock()
	}
}

// vectorBitsLocked returns the vectors' causes (cause), or their mask bits,
// as a mask (bit i: vector i), and clears the causes if clear is set. Under
// mu held for writing, which excludes every holder of a vector's lock.
func (n *ixgbeNIC) vectorBitsLocked(cause, clear bool) uint64 {
	var m uint64
	for i := range n.vecs {
		iv := &n.vecs[i]
		if cause && iv.cause || !cause && iv.enabled {
			m |= 1 << i
		}
		if clear {
			iv.cause = false
		}
	}
	return m
}

// refill is a write of v to RDT(q) (at off): it gives the NIC the
// descriptors up to v, and lets frames held for want of them in. It holds
// mu for reading and stores RDT atomically, so it waits for no delivery.
func (n *ixgbeNIC) refill(q, off int, v uint32) {
	n.mu.queue(q).RLock()
	defer n.mu.queue(q).RUnlock()
	r := &n.rxq[q]
	r.rdt.Add(1)
	if n.closed {
		return
	}
	r.tails.Add(1)
	if !n.rdtInRing(q, v) {
		return
	}
	// Stored atomically rather than under the queue's lock, which a
	// delivery holds while it writes a frame into the host's memory: the
	// chip takes the posted write at once, where the lock would make the
	// driver wait out that frame (and, parked, a wake-up after it). The
	// delivery loads it atomically (writeRxLocked).
	atomic.StoreUint32(&n.regs[off/4], v)
	if n.holdHook != nil {
		n.holdHook(holdTailMoved)
	}
	// After the tail moved: a frame offered to the hold since is either
	// counted here or found the room (rxHold).
	if n.hold.waiting() == 0 || n.closed || !n.rxOnLocked() || !n.lastLU {
		return
	}
	n.holdMu.Lock()
	n.hold.flush(n.deliverQueue)
	n.holdMu.Unlock()
}

// rdtInRing tells whether v may be written to RDT(q), and records a
// violation if it may not. Under mu, for reading at least.
func (n *ixgbeNIC) rdtInRing(q int, v uint32) bool {
	l := n.reg(hw.RDLEN(q)) / hw.DescSize
	if v >= l && !(l == 0 && v == 0) {
		n.violation("RDT%d = %d outside a ring of %d descriptors", q, v, l)
		return false
	}
	return true
}

func (n *ixgbeNIC) writeTxRing(q, reg, off int, v uint32) {
	enabled := n.txEnabledQ(q)
	switch reg {
	case hw.TDBAL(0), hw.TDBAH(0), hw.TDLEN(0), hw.TDH(0):
		if enabled {
			n.violation("TX ring register %s written while TXDCTL%d.ENABLE is set: disable the queue and poll the bit clear first", hw.RegName(off), q)
		}
		if reg == hw.TDLEN(0) && (v%hw.RingLenAlign != 0 || v >= 1<<20) {
			n.violation("TDLEN%d = %d: must be a multiple of 128 bytes below 1 MiB", q, v)
		}
		n.set(off, v)
	case hw.TDT(0): // of a queue the model does not run (transmit takes the others)
		n.tailWriteLocked(q, v)
	case hw.TXDCTL(0):
		if v&hw.TxdctlEnable != 0 && !enabled {
			base := uint64(n.reg(hw.TDBAH(q)))<<32 | uint64(n.reg(hw.TDBAL(q)))
			switch {
			case !n.has(hw.DMATXCTL, hw.DmatxctlTE):
				n.violation("TXDCTL%d.ENABLE before DMATXCTL.TE: enable TX DMA first", q)
				v &^= hw.TxdctlEnable
			case n.reg(hw.TDLEN(q)) == 0:
				n.violation("TXDCTL%d.ENABLE with TDLEN%d = 0: program the ring first", q, q)
				v &^= hw.TxdctlEnable
			case base%hw.RingAlign != 0:
				n.violation("TXDCTL%d.ENABLE with a ring base %#x not 128-byte aligned", q, base)
				v &^= hw.TxdctlEnable
			case q >= hw.MaxQueuePairs:
				n.violation("TXDCTL%d.ENABLE: this model runs TX queues 0..%d", q, hw.MaxQueuePairs-1)
				v &^= hw.TxdctlEnable
			}
		}
		n.set(off, v)
	default:
		n.set(off, v)
	}
}

// queueCauseLocked raises RX queue q's interrupt cause on the vector IVAR
// routes it to.
func (n *ixgbeNIC) queueCauseLocked(q int) {
	e := n.reg(hw.IVAR(q/2)) >> hw.IVARRxShift(q) & 0xFF
	if e&hw.IVARValid == 0 {
		return
	}
	iv := &n.vecs[e&0x3F]
	iv.mu.Lock()
	n.vectorCauseLocked(int(e & 0x3F))
	iv.mu.Unlock()
}

// otherCauseLocked raises causes of EICR's upper half (LSC ...), delivered
// on the vector IVAR_MISC names for "other" when EIMS enables them.
func (n *ixgbeNIC) otherCauseLocked(c uint32) {
	n.set(hw.EICR, n.reg(hw.EICR)|c)
	if c&n.reg(hw.EIMS) == 0 || !n.has(hw.GPIE, hw.GpieMSIXMode) {
		return
	}
	e := n.reg(hw.IVARMisc) >> hw.IVARMiscOtherShift & 0xFF
	if e&hw.IVARValid == 0 {
		return
	}
	n.messageLocked(int(e & 0x3F))
}

// vectorCauseLocked sets vector v's cause and sends it if unmasked. Under
// mu held for writing, or for reading with the vector's lock.
func (n *ixgbeNIC) vectorCauseLocked(v int) {
	n.vecs[v].cause = true
	n.fireLocked(v)
}

// fireLocked sends vector v's pending cause if its mask bit is set, and
// auto-masks and auto-clears it as GPIE, EIAM and EIAC say. Under mu held
// for writing, or for reading with the vector's lock.
func (n *ixgbeNIC) fireLocked(v int) {
	iv := &n.vecs[v]
	if !iv.enabled || !n.has(hw.GPIE, hw.GpieMSIXMode) {
		return
	}
	// Auto-mask (GPIE.EIAME with EIAM) and auto-clear (EIAC) on sending.
	var eiam uint64
	if v < 16 {
		eiam = uint64(n.reg(hw.EIAM) & hw.EicrRTxQMask)
	}
	eiam |= uint64(n.reg(hw.EIAMEx(0))) | uint64(n.reg(hw.EIAMEx(1)))<<32
	if n.has(hw.GPIE, hw.GpieEIAME) && eiam&(1<<v) != 0 {
		iv.enabled = false
	}
	if v >= 16 || n.reg(hw.EIAC)&(1<<v) != 0 {
		iv.cause = false
	}
	n.messageLocked(v)
}

// eitrLocked implements nicHooks.
func (n *ixgbeNIC) eitrLocked(v int) time.Duration {
	return time.Duration(n.reg(hw.EITR(v))&hw.EitrIntervalMask>>hw.EitrIntervalShift) * hw.EitrUnitNanos
}
