package emulated

import (
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// The 82574L model's control path: its register file and how reads and
// writes of it act (reset, the ring registers, RCTL and CTRL, the PHY
// through MDIC), the link, and the interrupt causes and MSI-X messages with
// their EITR throttle. The platform and the NIC's state are in e1000e.go;
// what a TDT write sets going in e1000e_tx.go; what a frame from the wire
// does in e1000e_rx.go (packet split receive in e1000e_split.go).

func (n *e1000eNIC) reg(off int) uint32         { return n.regs[off/4] }
func (n *e1000eNIC) set(off int, v uint32)      { n.regs[off/4] = v }
func (n *e1000eNIC) has(off int, b uint32) bool { return n.regs[off/4]&b != 0 }

// powerOn sets the power-on values (QEMU 7.2's reset values where they
// matter).
func (n *e1000eNIC) powerOn() {
	n.regs = [hw.BAR0Size / 4]uint32{}
	n.set(hw.CTRL, hw.CtrlFD|hw.CtrlSLU|hw.CtrlSpeed1000)
	n.set(hw.EECD, hw.EECDAutoRd|1<<8)
	n.set(hw.VET, 0x8100)
	n.set(hw.PBA, 0x00140014)
	n.set(hw.TIPG, hw.TIPGDefault)
	for q := 0; q < hw.Queues; q++ {
		n.set(hw.Q(hw.TXDCTL, q), hw.TxdctlGRAN|hw.TxdctlBit22|1<<hw.TxdctlWTHRESHShift)
		n.set(hw.Q(hw.TARC, q), hw.TARCEnable)
	}
	n.loadMAC()
	n.phy = [32]uint16{}
	n.phy[hw.PHYControl] = 0x1140 // autoneg enabled, full duplex, 1000
	n.phy[hw.PHYID1] = 0x0141
	n.phy[hw.PHYID2] = 0x0CB1
	n.rxOn, n.rxExt, n.rxBuf, n.rxPS = false, false, 2048, false
	n.hold.drop()
	n.lastLU = n.linkUp()
}

// loadMAC is the NVM auto-load of receive address 0.
func (n *e1000eNIC) loadMAC() {
	m := n.mac
	n.set(hw.RAL(0), uint32(m[0])|uint32(m[1])<<8|uint32(m[2])<<16|uint32(m[3])<<24)
	n.set(hw.RAH(0), uint32(m[4])|uint32(m[5])<<8|1<<31)
}

// phyLoop and macLoop tell whether transmitted frames turn back.
func (n *e1000eNIC) phyLoop() bool { return n.phy[hw.PHYControl]&hw.PHYCtlLoop != 0 }
func (n *e1000eNIC) macLoop() bool { return n.reg(hw.RCTL)&hw.RctlLBMMask != 0 }

// linkUp is STATUS.LU: the MAC is told to link (CTRL.SLU, not in link
// reset) and the PHY has a link, or loops back.
func (n *e1000eNIC) linkUp() bool {
	c := n.reg(hw.CTRL)
	if c&hw.CtrlSLU == 0 || c&hw.CtrlLRST != 0 {
		return false
	}
	return n.plug.cable.Load() || n.phyLoop() || n.macLoop()
}

func (n *e1000eNIC) lscLocked() { n.causeLocked(hw.IntLSC) }

func (n *e1000eNIC) status() uint32 {
	s := uint32(hw.StatusLANInitDone)
	c := n.reg(hw.CTRL)
	if n.linkUp() {
		s |= hw.StatusLU | hw.StatusFD | hw.StatusSpeed1000
	}
	if n.f.busMaster() && (c&hw.CtrlGIOMasterDis == 0 || n.holdGIO.Load()) {
		s |= hw.StatusGIOMasterEn
	}
	if n.has(hw.STATUS, hw.StatusPHYRA) {
		s |= hw.StatusPHYRA
	}
	return s
}

func (n *e1000eNIC) read(off, w int) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acc.count(&n.acc.reads, off)
	if w != 4 {
		n.violation("%d-byte read at %#x: 82574 registers are accessed 32 bits at a time", w, off)
		return 0
	}
	switch {
	case off == hw.STATUS:
		return uint64(n.status())
	case off == hw.ICR:
		v := n.reg(hw.ICR)
		if v != 0 {
			v |= hw.IntAsserted
		}
		n.set(hw.ICR, 0)
		return uint64(v)
	case off == hw.ICS:
		return uint64(n.reg(hw.ICR))
	case off == hw.IMC:
		return 0
	case off >= hw.StatsFirst && off <= hw.StatsLast:
		v := n.reg(off)
		switch off {
		case hw.GORCH, hw.GOTCH, hw.TORH, hw.TOTH:
			// QEMU 7.2: reading the high half clears both halves.
			n.set(off-4, 0)
		}
		n.set(off, 0)
		return uint64(v)
	}
	return uint64(n.reg(off))
}

func (n *e1000eNIC) write(off, w int, v64 uint64) {
	if w != 4 {
		n.mu.Lock()
		n.acc.count(&n.acc.writes, off)
		n.violation("%d-byte write at %#x: 82574 registers are accessed 32 bits at a time", w, off)
		n.mu.Unlock()
		return
	}
	v := uint32(v64)
	if off == hw.Q(hw.TDT, 0) || off == hw.Q(hw.TDT, 1) {
		n.transmit((off-hw.TDT)/hw.QueueStride, v) // counts the write
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acc.count(&n.acc.writes, off)
	n.writeLocked(off, v)
}

func (n *e1000eNIC) ringRegs(off int) (q int, reg int, ok bool) {
	for _, base := range []int{hw.RDBAL, hw.TDBAL} {
		if off >= base && off < base+2*hw.QueueStride {
			return (off - base) / hw.QueueStride, base + (off-base)%hw.QueueStride, true
		}
	}
	return 0, 0, false
}

func (n *e1000eNIC) writeLocked(off int, v uint32) {
	if n.closed {
		return
	}
	if q, reg, ok := n.ringRegs(off); ok {
		n.writeRing(q, reg, off, v)
		return
	}
	switch {
	case off == hw.CTRL:
		n.writeCtrl(v)
	case off == hw.STATUS:
		// Read-only but for PHYRA, which software clears.
		if v&hw.StatusPHYRA == 0 {
			n.set(hw.STATUS, n.reg(hw.STATUS)&^hw.StatusPHYRA)
		}
	case off == hw.EECD:
		n.set(off, v|hw.EECDAutoRd)
	case off == hw.EERD:
		if v&hw.EERDStart != 0 {
			addr := v >> hw.EERDAddrShift & 0x3FFF
			var word uint32
			if addr < 3 {
				word = uint32(n.mac[2*addr]) | uint32(n.mac[2*addr+1])<<8
			}
			n.set(off, addr<<hw.EERDAddrShift|hw.EERDDone|word<<hw.EERDDataShift)
		}
	case off == hw.MDIC:
		n.mdic(v)
	case off == hw.ICR:
		n.set(hw.ICR, n.reg(hw.ICR)&^v) // write 1 to clear
	case off == hw.ICS:
		n.causeLocked(v)
	case off == hw.IMS:
		n.set(hw.IMS, n.reg(hw.IMS)|v)
		n.causeLocked(0) // newly unmasked causes fire
	case off == hw.IMC:
		n.set(hw.IMS, n.reg(hw.IMS)&^v)
	case off == hw.RCTL:
		n.writeRctl(v)
	case off == hw.RFCTL || off == hw.PSRCTL:
		if n.rxOn {
			n.violation("%s written while RCTL.EN is set: QEMU 7.2 latches it only when RCTL is written with EN; program it before enabling RX", regName(off))
		}
		n.set(off, v)
	case off == hw.TCTL:
		n.set(off, v)
	case off >= hw.StatsFirst && off <= hw.StatsLast:
		n.violation("write to statistics register %#x: they are read-only (read to clear)", off)
	case off == hw.RAH(0) || (off >= hw.RAL0 && off < hw.RAL0+8*hw.RAREntries):
		n.set(off, v)
	case off >= hw.Q(hw.TARC, 0) && off <= hw.Q(hw.TARC, 1) && (off-hw.TARC)%hw.QueueStride == 0:
		n.set(off, v)
	default:
		n.set(off, v)
	}
}

func regName(off int) string {
	names := map[int]string{hw.RFCTL: "RFCTL", hw.PSRCTL: "PSRCTL", hw.RDBAL: "RDBAL", hw.RDBAH: "RDBAH", hw.RDLEN: "RDLEN",
		hw.RDH: "RDH", hw.RDT: "RDT", hw.TDBAL: "TDBAL", hw.TDBAH: "TDBAH", hw.TDLEN: "TDLEN", hw.TDH: "TDH", hw.TDT: "TDT",
		hw.TXDCTL: "TXDCTL", hw.RXDCTL: "RXDCTL"}
	if s, ok := names[off]; ok {
		return s
	}
	return fmt.Sprintf("register %#x", off)
}

func (n *e1000eNIC) writeCtrl(v uint32) {
	if v&hw.CtrlRST != 0 {
		if n.f.busMaster() && v&hw.CtrlGIOMasterDis == 0 && n.reg(hw.CTRL)&hw.CtrlGIOMasterDis == 0 {
			n.violation("CTRL.RST with PCI master enabled: set CTRL.GIO_MASTER_DISABLE and wait for STATUS.GIO_MASTER_ENABLE to clear first")
		}
		if n.rxOn || n.has(hw.TCTL, hw.TctlEN) {
			n.violation("CTRL.RST with RX or TX enabled: clear RCTL and TCTL.EN first")
		}
		// QEMU 7.2: the software reset restores only the MAC address; it
		// self-clears at once. Every other register keeps its value.
		n.loadMAC()
		v &^= hw.CtrlRST
	}
	if v&hw.CtrlPHYRST != 0 {
		n.set(hw.STATUS, n.reg(hw.STATUS)|hw.StatusPHYRA)
		v &^= hw.CtrlPHYRST
	}
	n.set(hw.CTRL, v)
	n.linkChangedLocked()
}

func (n *e1000eNIC) writeRctl(v uint32) {
	n.set(hw.RCTL, v)
	if v&hw.RctlEN == 0 {
		n.rxOn = false
		n.linkChangedLocked()
		return
	}
	// Latch the descriptor type and buffer size, as QEMU 7.2 does on every
	// RCTL write with EN.
	n.latchPSLocked(v)
	if n.has(hw.MRQC, hw.MRQCEnableMask) && !n.has(hw.RFCTL, hw.RfctlEXTEN) {
		n.violation("MRQC enables RSS with legacy descriptors (RFCTL.EXTEN clear): RSS needs extended descriptors")
	}
	n.rxExt = n.has(hw.RFCTL, hw.RfctlEXTEN)
	switch {
	case v&hw.RctlFLXBUFMask != 0:
		n.rxBuf = int(v&hw.RctlFLXBUFMask>>27) * 1024
	case v&hw.RctlBSEX != 0:
		n.rxBuf = [4]int{0, 16384, 8192, 4096}[v&hw.RctlBSIZEMask>>16]
	default:
		n.rxBuf = [4]int{2048, 1024, 512, 256}[v&hw.RctlBSIZEMask>>16]
	}
	if n.rxBuf == 0 {
		n.violation("RCTL: BSEX with BSIZE=00 is reserved")
		n.rxBuf = 2048
	}
	for q := 0; q < hw.Queues; q++ {
		if q == 0 && n.reg(hw.Q(hw.RDLEN, q)) == 0 {
			n.violation("RCTL.EN set with RDLEN0 = 0: program the RX ring first")
		}
	}
	n.rxOn = true
	n.linkChangedLocked()
	n.flushPendingLocked()
}

func (n *e1000eNIC) writeRing(q, reg, off int, v uint32) {
	rx := reg < hw.TDBAL
	enabled := n.rxOn
	dir := "RCTL.EN"
	if !rx {
		enabled = n.has(hw.TCTL, hw.TctlEN)
		dir = "TCTL.EN"
	}
	switch reg {
	case hw.RDBAL, hw.TDBAL:
		if enabled {
			n.violation("%s%d written while %s is set: disable the direction first", regName(reg), q, dir)
		}
		if v&(hw.RingAlign-1) != 0 {
			n.violation("%s%d = %#x: ring base must be 16-byte aligned", regName(reg), q, v)
			v &^= hw.RingAlign - 1
		}
	case hw.RDBAH, hw.TDBAH:
		if enabled {
			n.violation("%s%d written while %s is set: disable the direction first", regName(reg), q, dir)
		}
	case hw.RDLEN, hw.TDLEN:
		if enabled {
			n.violation("%s%d written while %s is set: disable the direction first", regName(reg), q, dir)
		}
		if v%hw.RingLenAlign != 0 || v >= 1<<20 {
			n.violation("%s%d = %d: must be a multiple of 128 bytes below 1 MiB", regName(reg), q, v)
		}
		v &= 0xFFF80
	case hw.RDH, hw.TDH:
		if enabled {
			n.violation("%s%d written while %s is set: heads move only while the ring is stopped", regName(reg), q, dir)
		}
		v &= 0xFFFF
	case hw.RDT:
		v &= 0xFFFF
		if l := n.reg(hw.Q(hw.RDLEN, q)) / hw.DescSize; v >= l && !(l == 0 && v == 0) {
			n.violation("RDT%d = %d outside a ring of %d descriptors", q, v, l)
		}
		if n.rxOn && n.rxPS && v%hw.PSDescUnits != 0 {
			n.violation("RDT%d = %d with packet split descriptors: the tail counts 16-byte units, so it is twice the descriptor index (even)", q, v)
		}
		n.set(off, v)
		n.flushPendingLocked()
		return
	case hw.TXDCTL:
		if v&hw.TxdctlBit22 == 0 {
			n.violation("TXDCTL%d = %#x: bit 22 must be 1 on the 82574", q, v)
		}
	}
	n.set(off, v)
}

func (n *e1000eNIC) mdic(v uint32) {
	phyAddr := v >> hw.MDICPHYShift & 0x1F
	r := v >> hw.MDICRegShift & 0x1F
	if phyAddr != hw.PHYAddr {
		n.set(hw.MDIC, v|hw.MDICReady|hw.MDICErr)
		return
	}
	switch v & (3 << 26) {
	case hw.MDICOpWrite:
		d := uint16(v)
		if r == hw.PHYControl {
			d &^= hw.PHYCtlReset | hw.PHYCtlANRest // self-clearing
		}
		if r != hw.PHYStatus && r != hw.PHYID1 && r != hw.PHYID2 {
			n.phy[r] = d
		}
		n.set(hw.MDIC, v&^hw.MDICErr|hw.MDICReady)
		n.linkChangedLocked()
	case hw.MDICOpRead:
		d := n.phy[r]
		if r == hw.PHYStatus {
			d = 0x7949
			if n.plug.cable.Load() || n.phyLoop() {
				d |= hw.PHYStatusLink | hw.PHYStatusANC
			}
		}
		n.set(hw.MDIC, v&^(hw.MDICErr|hw.MDICDataMask)|uint32(d)|hw.MDICReady)
	default:
		n.violation("MDIC op %d: want 01 (write) or 10 (read)", v>>26&3)
		n.set(hw.MDIC, v|hw.MDICReady|hw.MDICErr)
	}
}

// causeLocked sets interrupt causes and delivers what is unmasked: in MSI-X
// mode each cause goes to the vector IVAR names, throttled by EITR.
func (n *e1000eNIC) causeLocked(c uint32) {
	icr := n.reg(hw.ICR) | c
	n.set(hw.ICR, icr)
	fire := icr & n.reg(hw.IMS)
	if fire == 0 {
		return
	}
	ivar := n.reg(hw.IVAR)
	route := []struct {
		cause uint32
		shift int
	}{
		{hw.IntRXQ0, hw.IVARRxQ0Shift}, {hw.IntRXQ1, hw.IVARRxQ1Shift},
		{hw.IntTXQ0, hw.IVARTxQ0Shift}, {hw.IntTXQ1, hw.IVARTxQ1Shift},
		{hw.IntLSC | hw.IntOther | hw.IntRXO, hw.IVAROtherShift},
	}
	for _, r := range route {
		if fire&r.cause == 0 {
			continue
		}
		e := ivar >> r.shift & 0xF
		if e&hw.IVARValid == 0 {
			continue
		}
		vec := int(e & 7)
		if vec >= hw.MSIXVectors {
			n.violation("IVAR names vector %d: the 82574 has %d", vec, hw.MSIXVectors)
			continue
		}
		// EIAC auto-clears the cause; with CTRL_EXT.EIAME, IAM auto-masks.
		auto := r.cause & n.reg(hw.EIAC)
		n.set(hw.ICR, n.reg(hw.ICR)&^auto)
		if n.has(hw.CTRLEXT, hw.CtrlExtEIAME) {
			n.set(hw.IMS, n.reg(hw.IMS)&^(r.cause&n.reg(hw.IAM)))
		}
		n.messageLocked(vec)
	}
}

// eitrLocked implements nicHooks: EITR counts 256 ns units.
func (n *e1000eNIC) eitrLocked(vec int) time.Duration {
	return time.Duration(n.reg(hw.EITR(vec))&0xFFFF) * 256 * time.Nanosecond
}

// foldLocked implements nicHooks: the 82574L counts everything under mu.
func (n *e1000eNIC) foldLocked() {}
