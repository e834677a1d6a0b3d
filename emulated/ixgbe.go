package emulated

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport/fault"
)

// IXGBEOptions configures an emulated platform of 82599 NICs.
type IXGBEOptions struct {
	// Ports is the number of NICs (PCI functions), default 2.
	Ports int
	// Cabled, when set, cables ports 0-1, 2-3, ... together at creation
	// (DefaultIXGBEOptions sets it).
	Cabled bool
	// Pending is how many frames the NIC's packet buffer holds while the
	// RX queue a frame is steered to has no free descriptor and no
	// SRRCTL.DROP_EN (default 1024). The buffer is one FIFO, so a stalled
	// queue holds back every frame behind its own, as on the 82599;
	// frames beyond it are dropped and counted in MPC.
	Pending int
	// Scatter makes the IOMMU hand out one IOVA segment per 4 KiB page.
	Scatter bool
	// IOVABase is the first IOVA the IOMMU hands out (default 4 GiB).
	IOVABase uint64
	// Clock is the time the interrupt throttle (EITR) counts in; nil means
	// the wall clock.
	Clock Clock
	// ThreadCPUTime makes IXGBEStats.ModelTime count the CPU time of the
	// thread that makes each register access (CLOCK_THREAD_CPUTIME_ID)
	// instead of wall time, for a benchmark that locks its goroutine to
	// its thread: on a loaded machine the figure then leaves out the time
	// the thread waited for a CPU.
	ThreadCPUTime bool
}

// DefaultIXGBEOptions returns two cabled NICs.
func DefaultIXGBEOptions() IXGBEOptions {
	return IXGBEOptions{Ports: 2, Cabled: true, Pending: 1024}
}

// IXGBE is an emulated platform of Intel 82599 NICs behind one IOMMU: the
// subset of the 82599 that package nicdrv/ixgbe drives, as strict as the
// datasheet. Each breach is recorded as a violation (IXGBEStats), never
// silently accepted:
//
//   - registers are accessed 32 bits wide, except the 64-bit write of
//     FDIRHASH and FDIRCMD together that Linux makes;
//   - CTRL.RST resets every register but the MAC address (the 82599's
//     software reset does, unlike QEMU's e1000e) and needs PCI mastering
//     stopped first (CTRL.GIO_DIS, STATUS.GIO clear); EEC.AUTO_RD and
//     RDRXCTL.DMAIDONE read set once it is done. The link comes up once the
//     driver has set up the MAC link (AUTOC written with AN_RESTART) and a
//     cable is in, and LINKS then reads up at 10 Gb/s;
//   - every RX and TX queue has its own enable bit (RXDCTL.ENABLE,
//     TXDCTL.ENABLE) that reads back set only when its ring is valid
//     (RDLEN a nonzero multiple of 128, the base 128-byte aligned, SRRCTL
//     naming advanced descriptors; TX also needs DMATXCTL.TE first). A
//     ring's base, length, head or SRRCTL written while the queue is
//     enabled, a tail outside the ring, or a frame steered to a queue that
//     is not enabled, is a violation;
//   - RX uses advanced descriptors only: SRRCTL sets the packet buffer size
//     (a frame longer than one buffer spans several descriptors, EOP on the
//     last) and, with header split, the header buffer, into which the
//     headers PSRTYPE names go (up to the TCP or UDP header of an
//     unfragmented IPv4 or IPv6 datagram, else the IP header), the rest to
//     the packet buffer; HLREG0.JUMBOEN and MAXFRS bound the frame size, and
//     HLREG0.RXCRCSTRP must agree with RDRXCTL.CRCSTRIP;
//   - TX uses advanced data and context descriptors only, with IFCS set and
//     PAYLEN equal to the frame's length, and writes DD back where RS asks;
//   - frames are steered in the 82599's order: EtherType filters
//     (ETQF/ETQS), then 5-tuple filters (FTQF, highest priority first),
//     then Flow Director perfect filters, then RSS (Toeplitz hash through
//     RETA), then queue 0. Flow Director filters are added through FDIRCMD
//     with the bucket hash in FDIRHASH that software computes
//     (hw.FdirBucketHash): the model recomputes it from the filter's fields
//     and FDIRHKEY, and a wrong one is a violation, the filter then sitting,
//     as on the chip, in a bucket no frame of its flow looks in. FDIRCTRL
//     must be written before RX is enabled, with RXPBSIZE(0) leaving room
//     for the table; an add to a full table is a violation;
//   - MSI-X: every RX queue raises the vector IVAR names, throttled by that
//     vector's EITR and masked by EIMS (EIAM auto-masks with GPIE.EIAME);
//     link changes raise the "other" vector of IVAR_MISC;
//   - statistics registers are read-only and clear on read (64-bit ones
//     when their high half is read);
//   - receive needs PCI bus mastering, RXCTRL.RXEN, the queue enabled and
//     the link up; DMA goes through the IOMMU, which records any access
//     outside a mapping.
//
// Ports are joined by a cable (Cable), or through Port to ports of any
// other platform (the package's Cable, Hub, Connect), an 82574L model's
// included; a frame is delivered synchronously on the TDT write. A frame
// corrupted on the wire is counted in CRCERRS and dropped.
type IXGBE struct {
	iommu *IOMMU
	fns   []*Function
	nics  []*ixgbeNIC
}

// IXGBEStats counts what one emulated 82599 saw and did.
type IXGBEStats struct {
	// TxFrames and RxFrames are frames sent to the wire and written into
	// RX rings.
	TxFrames, RxFrames uint64
	// RxDropped counts frames that reached the NIC but were not received
	// (RX off, link down, no room, filtered to a drop, bad size or FCS).
	RxDropped uint64
	// RxBadFCS counts frames that came off the wire with a bad FCS.
	RxBadFCS uint64
	// Pending is the number of frames in the packet buffer waiting for RX
	// descriptors now.
	Pending int
	// Interrupts counts MSI-X messages delivered.
	Interrupts uint64
	// TailWrites counts RDT and TDT writes.
	TailWrites uint64
	// ModelTime is the time spent in the model's register accesses (which
	// includes the transmission and reception a TDT or RDT write causes):
	// the model's share of a run on the same cores as the driver. Wall
	// time, or thread CPU time with IXGBEOptions.ThreadCPUTime.
	ModelTime time.Duration
	// Violations counts programming errors (see IXGBE); LastViolation
	// describes the latest.
	Violations    uint64
	LastViolation string
}

// NewIXGBE builds the platform.
func NewIXGBE(o IXGBEOptions) (*IXGBE, error) {
	if o.Ports == 0 {
		o.Ports = 2
	}
	if o.Pending == 0 {
		o.Pending = DefaultIXGBEOptions().Pending
	}
	if o.Ports < 1 || o.Ports > 32 {
		return nil, fmt.Errorf("emulated ixgbe: %d ports: want 1..32", o.Ports)
	}
	if o.Pending < 0 {
		return nil, fmt.Errorf("emulated ixgbe: negative Pending %d", o.Pending)
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	p := &IXGBE{iommu: newIOMMU(o.IOVABase, o.Scatter)}
	for i := 0; i < o.Ports; i++ {
		f := &Function{
			addr:    pci.Address{Bus: 0x10 + uint8(i), Device: 0, Function: 0},
			dom:     p.iommu,
			nIRQ:    hw.MSIXVectors,
			cfgSize: 4096,
		}
		f.bar = &bar{f: f, size: hw.BAR0Size}
		initIXGBEConfig(f)
		n := &ixgbeNIC{f: f, port: i, pendMax: o.Pending, clock: o.Clock, cpuTime: o.ThreadCPUTime,
			mac: [6]byte{0x02, 0x1B, 0x21, 0x00, 0x00, byte(i)}, regs: make([]uint32, hw.BAR0Size/4)}
		n.powerOn()
		f.m = n
		p.fns = append(p.fns, f)
		p.nics = append(p.nics, n)
	}
	if o.Cabled {
		for i := 0; i+1 < o.Ports; i += 2 {
			if err := Cable(p.Port(i), p.Port(i+1)); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func initIXGBEConfig(f *Function) {
	c := &f.cfg
	le := binary.LittleEndian
	le.PutUint16(c[pci.ConfigVendorID:], hw.VendorIntel)
	le.PutUint16(c[pci.ConfigDeviceID:], hw.Device82599SFP)
	le.PutUint16(c[pci.ConfigStatus:], pci.StatusCapList)
	c[pci.ConfigClass+1] = 0x00
	c[pci.ConfigClass+2] = 0x02
	le.PutUint32(c[pci.ConfigBAR0:], 0xF0000000|0x4) // 64-bit memory BAR
	le.PutUint16(c[pci.ConfigSubVendorID:], hw.VendorIntel)
	c[pci.ConfigCapPtr] = 0x70
	// MSI-X capability: 64 vectors, table and PBA in BAR4 (as the 82599).
	c[0x70] = pci.CapMSIX
	le.PutUint16(c[0x72:], hw.MSIXVectors-1)
	le.PutUint32(c[0x74:], 4)
	le.PutUint32(c[0x78:], 0x2000|4)
	le.PutUint16(f.cfgW[pci.ConfigCommand:], pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable)
	le.PutUint16(f.cfgW[0x72:], 0xC000)
}

// Functions returns the NICs' PCI functions.
func (p *IXGBE) Functions() []*Function { return p.fns }

// Devices returns the functions as pci.Devices.
func (p *IXGBE) Devices() []pci.Device {
	ds := make([]pci.Device, len(p.fns))
	for i, f := range p.fns {
		ds[i] = f
	}
	return ds
}

// IOMMU returns the platform's IOMMU.
func (p *IXGBE) IOMMU() *IOMMU { return p.iommu }

// MAC returns the address port i loads from its NVM into RAL0/RAH0.
func (p *IXGBE) MAC(i int) [6]byte { return p.nics[i].mac }

// Port returns port i for the wire (Cable, Hub, Connect).
func (p *IXGBE) Port(i int) Port { return Port{end: p.nics[i]} }

// Cable joins ports a and b of this platform with a perfect cable.
func (p *IXGBE) Cable(a, b int) error {
	if a < 0 || b < 0 || a >= len(p.nics) || b >= len(p.nics) {
		return fmt.Errorf("emulated ixgbe: cable %d-%d: want ports of 0..%d", a, b, len(p.nics)-1)
	}
	return Cable(p.Port(a), p.Port(b))
}

// SetLink plugs (up) or unplugs the cable at port i; on a cable both ends
// see the change (LINKS, and the LSC cause).
func (p *IXGBE) SetLink(i int, up bool) { setLink(p.nics[i], up) }

// WireFaults returns what the fault model of port i's cable did so far.
func (p *IXGBE) WireFaults(i int) fault.Counts { return wireFaults(p.nics[i]) }

// HoldGIOMaster makes port i keep STATUS.GIO set while bus mastering is on,
// even after CTRL.GIO_DIS: a NIC whose outstanding DMA never drains, for
// testing a driver's Close after a timeout.
func (p *IXGBE) HoldGIOMaster(i int, hold bool) { p.nics[i].holdGIO.Store(hold) }

// Stats returns port i's counters.
func (p *IXGBE) Stats(i int) IXGBEStats {
	n := p.nics[i]
	s := IXGBEStats{TxFrames: n.nTx.Load(), RxFrames: n.nRx.Load(), RxDropped: n.nDrop.Load(), RxBadFCS: n.nBadFCS.Load(),
		Interrupts: n.nIRQ.Load(), Violations: n.nViol.Load(), TailWrites: n.nTail.Load(), ModelTime: time.Duration(n.modelNS.Load())}
	if v := n.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	n.mu.Lock()
	s.Pending = len(n.pend)
	n.mu.Unlock()
	return s
}

// Accesses returns what port i's driver has done to it since the platform
// was made or since ResetAccesses.
func (p *IXGBE) Accesses(i int) NICAccesses {
	n := p.nics[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.acc.named(hw.RegName)
}

// ResetAccesses sets port i's access counts to zero.
func (p *IXGBE) ResetAccesses(i int) {
	n := p.nics[i]
	n.mu.Lock()
	n.acc = regAccesses{}
	n.mu.Unlock()
}

// Close stops every NIC and takes its ports off the wire; no DMA happens
// after it returns.
func (p *IXGBE) Close() error {
	wireMu.Lock()
	for _, n := range p.nics {
		detachLocked(n)
	}
	wireMu.Unlock()
	var errs []error
	for _, f := range p.fns {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// fdirFilter is one Flow Director perfect filter as the table holds it.
type fdirFilter struct {
	in    hw.FdirInput // the masked fields it matches
	swIdx uint16
	queue int
	qen   bool
	drop  bool
}

// ixgbeNIC is one 82599. Register accesses arrive on the driver's
// goroutines and are serialised by mu; transmission runs on the goroutine
// that writes TDT, under txMu, and hands frames to the wire after releasing
// mu (lock order: txMu, then mu or a peer's mu, never two mu at once).
type ixgbeNIC struct {
	f       *Function
	mac     [6]byte
	port    int
	plug    jack
	holdGIO atomic.Bool

	txMu  sync.Mutex
	out   [][]byte
	spare [][]byte

	mu      sync.Mutex
	regs    []uint32
	closed  bool
	pend    [][]byte
	pendMax int
	macLink bool // the driver set up the MAC link (AUTOC.AN_RESTART)
	lastLU  bool
	txCtx   [hw.MaxQueuePairs][2]hw.TxDesc
	fdir    map[uint32][]fdirFilter // by bucket
	fdirN   int
	fdirHit uint32
	fdirMis uint32
	vecMask uint64 // EIMS: vectors enabled
	vecCaus uint64 // EICR: vector causes pending
	vecNext [hw.MSIXVectors]time.Time
	vecTmr  [hw.MSIXVectors]func() bool
	clock   Clock
	cpuTime bool // ModelTime in thread CPU time (IXGBEOptions.ThreadCPUTime)
	hint    int
	acc     regAccesses

	nTx, nRx, nDrop, nBadFCS, nIRQ, nViol, nTail atomic.Uint64
	modelNS                                      atomic.Int64
	lastViol                                     atomic.Pointer[string]
}

func (n *ixgbeNIC) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	n.nViol.Add(1)
	n.lastViol.Store(&s)
}

func (n *ixgbeNIC) reg(off int) uint32         { return n.regs[off/4] }
func (n *ixgbeNIC) set(off int, v uint32)      { n.regs[off/4] = v }
func (n *ixgbeNIC) has(off int, b uint32) bool { return n.regs[off/4]&b != 0 }

// powerOn sets the reset values the model relies on.
func (n *ixgbeNIC) powerOn() {
	clear(n.regs)
	n.set(hw.EEC, hw.EECPres|hw.EECAutoRd)
	n.set(hw.RDRXCTL, hw.RdrxctlDMAIDone)
	n.set(hw.HLREG0, hw.Hlreg0TxCRCEn|hw.Hlreg0RxCRCStrp|hw.Hlreg0TxPadEn)
	n.set(hw.MAXFRS, (hw.MaxFrame+4)<<hw.MaxfrsShift)
	n.set(hw.RXPBSIZE(0), 512<<10)
	n.set(hw.TXPBSIZE(0), 160<<10)
	for q := 0; q < hw.Queues; q++ {
		n.set(hw.SRRCTL(q), 2|4<<hw.SrrctlBSizeHdrShift) // 2 KiB packet, 256 B header buffers
	}
	n.set(hw.AUTOC, hw.AutocLMS10GSerial)
	n.loadMAC()
	n.pend = n.pend[:0]
	n.macLink = false
	n.fdir, n.fdirN, n.fdirHit, n.fdirMis = nil, 0, 0, 0
	n.vecMask, n.vecCaus = 0, 0
	n.txCtx = [hw.MaxQueuePairs][2]hw.TxDesc{}
	n.lastLU = n.linkUp()
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

func (n *ixgbeNIC) jack() *jack { return &n.plug }

func (n *ixgbeNIC) setCable(up bool) {
	n.plug.cable.Store(up)
	n.mu.Lock()
	n.linkChangedLocked()
	n.mu.Unlock()
}

// fromWire implements wireEnd.
func (n *ixgbeNIC) fromWire(fr []byte, badFCS bool) {
	if badFCS {
		n.mu.Lock()
		n.regs[hw.CRCERRS/4]++
		n.mu.Unlock()
		n.nBadFCS.Add(1)
		n.nDrop.Add(1)
		return
	}
	n.receive(fr)
}

func (n *ixgbeNIC) linkChangedLocked() {
	if lu := n.linkUp(); lu != n.lastLU {
		n.lastLU = lu
		n.otherCauseLocked(hw.EicrLSC)
		if lu {
			n.flushPendingLocked()
		}
	}
}

// clockNS is the model's own clock for ModelTime, in nanoseconds.
func (n *ixgbeNIC) clockNS() int64 {
	if n.cpuTime {
		return threadCPUNanos()
	}
	return time.Now().UnixNano()
}

func (n *ixgbeNIC) read(off, w int) uint64 {
	t0 := n.clockNS()
	defer func() { n.modelNS.Add(n.clockNS() - t0) }()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acc.count(&n.acc.reads, off)
	if w != 4 {
		n.violation("%d-byte read at %#x: 82599 registers are read 32 bits at a time", w, off)
		return 0
	}
	switch {
	case off == hw.STATUS:
		s := uint32(0)
		if n.linkUp() {
			s |= hw.StatusLinkUp
		}
		if n.f.busMaster() && (!n.has(hw.CTRL, hw.CtrlGIODis) || n.holdGIO.Load()) {
			s |= hw.StatusGIO
		}
		return uint64(s)
	case off == hw.LINKS:
		if n.linkUp() {
			return hw.LinksUp | hw.LinksSpeed10G
		}
		return 0
	case off == hw.EICR:
		v := n.reg(hw.EICR)&^hw.EicrRTxQMask | uint32(n.vecCaus)&hw.EicrRTxQMask
		n.set(hw.EICR, 0)
		n.vecCaus = 0
		return uint64(v)
	case off == hw.EIMS:
		return uint64(n.reg(hw.EIMS)&^hw.EicrRTxQMask | uint32(n.vecMask)&hw.EicrRTxQMask)
	case off == hw.EIMSEx(0) || off == hw.EIMSEx(1):
		return n.vecMask >> (32 * ((off - hw.EIMSEx(0)) / 4)) & 0xFFFFFFFF
	case off == hw.EICS || off == hw.EIMC || off == hw.EIMCEx(0) || off == hw.EIMCEx(1):
		return 0
	case off == hw.FDIRFREE:
		return uint64(n.fdirCapLocked() - n.fdirN)
	case off == hw.FDIRMATCH:
		v := n.fdirHit
		n.fdirHit = 0
		return uint64(v)
	case off == hw.FDIRMISS:
		v := n.fdirMis
		n.fdirMis = 0
		return uint64(v)
	case isIXGBEStat(off):
		v := n.reg(off)
		switch off {
		case hw.GORCH, hw.GOTCH, hw.TORH:
			n.set(off-4, 0)
		}
		n.set(off, 0)
		return uint64(v)
	}
	return uint64(n.reg(off))
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

func (n *ixgbeNIC) write(off, w int, v64 uint64) {
	t0 := n.clockNS()
	defer func() { n.modelNS.Add(n.clockNS() - t0) }()
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
	if q, reg, _, ok := ringReg(off); ok && reg == hw.TDT(0) {
		n.transmit(q, v)
		return
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
	case off == hw.EICR:
		n.set(hw.EICR, n.reg(hw.EICR)&^(v&^hw.EicrRTxQMask))
		n.vecCaus &^= uint64(v & hw.EicrRTxQMask)
	case off == hw.EICS:
		for vec := 0; vec < 16; vec++ {
			if v&(1<<vec) != 0 {
				n.vectorCauseLocked(vec)
			}
		}
		if o := v &^ hw.EicrRTxQMask; o != 0 {
			n.otherCauseLocked(o)
		}
	case off == hw.EIMS:
		n.set(hw.EIMS, n.reg(hw.EIMS)|v&^hw.EicrRTxQMask)
		n.unmaskLocked(uint64(v & hw.EicrRTxQMask))
	case off == hw.EIMC:
		n.set(hw.EIMS, n.reg(hw.EIMS)&^(v&^hw.EicrRTxQMask))
		n.vecMask &^= uint64(v & hw.EicrRTxQMask)
	case off == hw.EIMSEx(0) || off == hw.EIMSEx(1):
		n.unmaskLocked(uint64(v) << (32 * ((off - hw.EIMSEx(0)) / 4)))
	case off == hw.EIMCEx(0) || off == hw.EIMCEx(1):
		n.vecMask &^= uint64(v) << (32 * ((off - hw.EIMCEx(0)) / 4))
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
	case hw.RDT(0):
		n.nTail.Add(1)
		l := n.reg(hw.RDLEN(q)) / hw.DescSize
		if v >= l && !(l == 0 && v == 0) {
			n.violation("RDT%d = %d outside a ring of %d descriptors", q, v, l)
			return
		}
		n.set(off, v)
		n.flushPendingLocked()
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
			case dt != hw.SrrctlDescAdvOneBuf && dt != hw.SrrctlDescAdvHdrSplit:
				n.violation("RXDCTL%d.ENABLE with SRRCTL%d.DESCTYPE = %d: this model uses advanced descriptors (one buffer, 001, or header split, 010)", q, q, dt>>25)
				v &^= hw.RxdctlEnable
			case n.reg(hw.SRRCTL(q))&hw.SrrctlBSizePktMask == 0:
				n.violation("RXDCTL%d.ENABLE with SRRCTL%d.BSIZEPACKET = 0: give the packet buffer size in KiB", q, q)
				v &^= hw.RxdctlEnable
			case dt == hw.SrrctlDescAdvHdrSplit && n.reg(hw.SRRCTL(q))&hw.SrrctlBSizeHdrMask == 0:
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

// fdirCapLocked is how many perfect filters the table holds (0 when Flow
// Director is off).
func (n *ixgbeNIC) fdirCapLocked() int {
	pb := n.reg(hw.FDIRCTRL) & hw.FdirctrlPBAllocMask
	if pb == 0 {
		return 0
	}
	return hw.FdirPerfect64K << (pb - 1)
}

func (n *ixgbeNIC) writeFdirctrl(v uint32) {
	if n.has(hw.RXCTRL, hw.RxctrlRXEN) {
		n.violation("FDIRCTRL written with RXCTRL.RXEN set: Flow Director is initialised before receive is enabled")
	}
	pb := v & hw.FdirctrlPBAllocMask
	if pb != 0 {
		if v&hw.FdirctrlPerfectMatch == 0 {
			n.violation("FDIRCTRL without PERFECT_MATCH: this model has perfect filters only (signature filters are not modelled)")
		}
		mem := uint32(64<<10) << (pb - 1)
		if n.reg(hw.RXPBSIZE(0)) > 512<<10-mem {
			n.violation("FDIRCTRL.PBALLOC %d takes %d KiB of the packet buffer, but RXPBSIZE0 is %d KiB: shrink RXPBSIZE0 first", pb, mem>>10, n.reg(hw.RXPBSIZE(0))>>10)
		}
		v |= hw.FdirctrlInitDone
	}
	n.set(hw.FDIRCTRL, v)
	n.fdir, n.fdirN = nil, 0
}

// fdirMaskedLocked applies the Flow Director masks to a flow's fields.
func (n *ixgbeNIC) fdirMaskedLocked(in hw.FdirInput) hw.FdirInput {
	m := n.reg(hw.FDIRM)
	if m&hw.FdirmPool != 0 {
		in.Pool = 0
	}
	if m&hw.FdirmVLANID != 0 && m&hw.FdirmVLANP != 0 {
		in.VLAN = 0
	}
	if m&hw.FdirmL4P != 0 {
		in.FlowType &^= 3
	}
	if m&hw.FdirmFlex != 0 {
		in.Flex = [2]byte{}
	}
	if n.reg(hw.FDIRSIP4M) != 0 {
		in.SrcIP = [16]byte{}
	}
	if n.reg(hw.FDIRDIP4M) != 0 {
		in.DstIP = [16]byte{}
	}
	pm := n.reg(hw.FDIRUDPM)
	if in.FlowType&3 == hw.FlowTCP {
		pm = n.reg(hw.FDIRTCPM)
	}
	if pm&0xFFFF != 0 {
		in.SrcPort = 0
	}
	if pm>>16 != 0 {
		in.DstPort = 0
	}
	return in
}

// fdirCommandLocked carries out an FDIRCMD write: add, remove or query a
// perfect filter described by FDIRIPSA/IPDA/PORT/VLAN/HASH.
func (n *ixgbeNIC) fdirCommandLocked(v uint32) {
	n.set(hw.FDIRCMD, v&^hw.FdircmdCmdMask)
	cmd := v & hw.FdircmdCmdMask
	if cmd == 0 {
		return
	}
	if n.reg(hw.FDIRCTRL)&hw.FdirctrlInitDone == 0 {
		n.violation("FDIRCMD with Flow Director not initialised: write FDIRCTRL with PBALLOC and poll INIT_DONE first")
		return
	}
	fh := n.reg(hw.FDIRHASH)
	bucketBits := hw.FdirBucketBits(n.reg(hw.FDIRCTRL) & hw.FdirctrlPBAllocMask)
	bucket := fh & hw.FdirhashBucketMask & (1<<bucketBits - 1)
	sw := uint16(fh >> hw.FdirhashSWShift)
	var in hw.FdirInput
	in.FlowType = uint8(v & hw.FdircmdL4TypeMask >> hw.FdircmdL4TypeShift)
	if v&hw.FdircmdIPv6 != 0 {
		n.violation("FDIRCMD with IPv6 flow type: this model has IPv4 perfect filters only")
		return
	}
	binary.LittleEndian.PutUint32(in.SrcIP[:], n.reg(hw.FDIRIPSA))
	binary.LittleEndian.PutUint32(in.DstIP[:], n.reg(hw.FDIRIPDA))
	port := n.reg(hw.FDIRPORT)
	in.DstPort, in.SrcPort = uint16(port>>hw.FdirportDstShift), uint16(port)
	vl := n.reg(hw.FDIRVLAN)
	in.VLAN = uint16(vl)
	in.Flex = [2]byte{byte(vl >> 16), byte(vl >> 24)}
	in = n.fdirMaskedLocked(in)
	list := n.fdir[bucket]
	at := -1
	for i, f := range list {
		if f.swIdx == sw {
			at = i
		}
	}
	switch cmd {
	case hw.FdircmdAdd:
		want := hw.FdirBucketHash(in, n.reg(hw.FDIRHKEY)) & (1<<bucketBits - 1)
		if want != bucket {
			n.violation("FDIRHASH bucket %#x for a filter whose fields hash to %#x under FDIRHKEY %#x: compute the bucket hash over the masked fields; the filter lands in a bucket its flow never looks in", bucket, want, n.reg(hw.FDIRHKEY))
		}
		f := fdirFilter{in: in, swIdx: sw, queue: int(v & hw.FdircmdQueueMask >> hw.FdircmdQueueShift),
			qen: v&hw.FdircmdQueueEn != 0, drop: v&hw.FdircmdDrop != 0}
		if at >= 0 {
			list[at] = f
			return
		}
		if n.fdirN >= n.fdirCapLocked() {
			n.violation("FDIRCMD add to a full Flow Director table (%d filters): check FDIRFREE first", n.fdirN)
			n.set(hw.FDIRCMD, n.reg(hw.FDIRCMD)|hw.FdircmdCollision)
			return
		}
		if n.fdir == nil {
			n.fdir = map[uint32][]fdirFilter{}
		}
		n.fdir[bucket] = append(list, f)
		n.fdirN++
	case hw.FdircmdRemove:
		if at < 0 {
			return // removing an absent filter does nothing
		}
		n.fdir[bucket] = append(list[:at], list[at+1:]...)
		n.fdirN--
	case hw.FdircmdQuery:
		if at >= 0 {
			n.set(hw.FDIRCMD, n.reg(hw.FDIRCMD)|hw.FdircmdFilterValid)
		}
	}
}

// transmit is a TDT write: the model sends synchronously, so every frame
// between TDH and the new TDT is on the wire when the write returns.
func (n *ixgbeNIC) transmit(q int, tdt uint32) {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	n.acc.count(&n.acc.writes, hw.TDT(q))
	n.nTail.Add(1)
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.set(hw.TDT(q), tdt)
	l := n.reg(hw.TDLEN(q)) / hw.DescSize
	switch {
	case tdt >= l && l != 0:
		n.violation("TDT%d = %d outside a ring of %d descriptors", q, tdt, l)
		n.mu.Unlock()
		return
	case !n.txEnabledQ(q) || !n.has(hw.DMATXCTL, hw.DmatxctlTE):
		if tdt != n.reg(hw.TDH(q)) {
			n.violation("TDT%d moved while TX queue %d is not enabled (TXDCTL.ENABLE, DMATXCTL.TE)", q, q)
		}
		n.mu.Unlock()
		return
	case !n.f.busMaster():
		n.violation("TDT%d written with PCI bus mastering off: the NIC cannot fetch descriptors", q)
		n.mu.Unlock()
		return
	}
	n.out = n.out[:0]
	n.txRingLocked(q, l, tdt)
	loop := n.loopback()
	lu := n.linkUp()
	n.mu.Unlock()
	for _, fr := range n.out {
		switch {
		case loop:
			n.receive(fr)
		case lu:
			toWire(n, fr)
		}
		n.spare = append(n.spare, fr)
	}
	n.out = n.out[:0]
}

func (n *ixgbeNIC) frameBuf() []byte {
	if k := len(n.spare); k > 0 {
		b := n.spare[k-1]
		n.spare = n.spare[:k-1]
		return b[:0]
	}
	return make([]byte, 0, 16384)
}

// txRingLocked walks TX ring q from TDH to tdt, gathering frames into
// n.out.
func (n *ixgbeNIC) txRingLocked(q int, l, tdt uint32) {
	dom := n.f.dom
	base := uint64(n.reg(hw.TDBAH(q)))<<32 | uint64(n.reg(hw.TDBAL(q)))
	head := n.reg(hw.TDH(q))
	if head >= l {
		n.violation("TDH%d = %d outside a ring of %d descriptors", q, head, l)
		return
	}
	frame := n.frameBuf()
	var first hw.TxDesc
	inFrame, faulted := false, false
	dom.rlock()
	defer dom.runlock()
	for head != tdt {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, true, &n.hint)
		if !ok {
			n.violation("TX descriptor %d of queue %d at an unmapped IOVA", head, q)
			break
		}
		n.acc.txFetch++
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
				buf, ok := dom.translate(d.Addr, ln, false, &n.hint)
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
					n.finishFrameLocked(&frame, q, first)
				}
				inFrame, faulted = false, false
			}
		}
		if d.CmdType&hw.TxCmdRS != 0 {
			dmasync.Publish()
			store64(raw[8:16], uint64(d.CmdType)|uint64(d.Olinfo|hw.TxStatDD)<<32)
			n.acc.txWB++
		}
		head = (head + 1) % l
	}
	n.set(hw.TDH(q), head)
	if inFrame {
		n.violation("TX queue %d: descriptors up to TDT end without EOP", q)
	}
	n.spare = append(n.spare, frame[:0])
}

// finishFrameLocked checks, pads, checksums and counts a complete frame and
// queues it for the wire.
func (n *ixgbeNIC) finishFrameLocked(frame *[]byte, q int, first hw.TxDesc) {
	fr := *frame
	*frame = n.frameBuf()
	drop := func() { n.spare = append(n.spare, fr[:0]) }
	if paylen := int(first.Olinfo >> hw.TxPaylenShift); paylen != len(fr) {
		n.violation("TX frame of %d bytes with PAYLEN %d in its first descriptor: PAYLEN is the frame's length", len(fr), paylen)
	}
	if len(fr) < 14 {
		n.violation("TX frame of %d bytes: shorter than an Ethernet header", len(fr))
		drop()
		return
	}
	if max := n.maxFrameLocked(); len(fr) > max {
		n.violation("TX frame of %d bytes: longer than %d (HLREG0.JUMBOEN, MAXFRS)", len(fr), max)
		drop()
		return
	}
	if n.has(hw.HLREG0, hw.Hlreg0TxPadEn) {
		for len(fr) < hw.MinFrame {
			fr = append(fr, 0)
		}
	}
	if popts := first.Olinfo & (hw.TxPoptsIXSM | hw.TxPoptsTXSM); popts != 0 {
		n.txChecksumLocked(fr, q, first.Olinfo, popts)
	}
	n.nTx.Add(1)
	n.count64(hw.GOTCL, uint64(len(fr)+4))
	n.regs[hw.GPTC/4]++
	n.regs[hw.TPT/4]++
	if fr[0]&1 != 0 {
		if isBroadcast(fr) {
			n.regs[hw.BPTC/4]++
		} else {
			n.regs[hw.MPTC/4]++
		}
	}
	n.out = append(n.out, fr)
}

// maxFrameLocked is the largest frame without FCS the MAC passes.
func (n *ixgbeNIC) maxFrameLocked() int {
	if n.has(hw.HLREG0, hw.Hlreg0JumboEn) {
		return int(n.reg(hw.MAXFRS)>>hw.MaxfrsShift) - 4
	}
	return hw.MaxFrame
}

func (n *ixgbeNIC) count64(lo int, v uint64) {
	c := uint64(n.regs[lo/4+1])<<32 | uint64(n.regs[lo/4]) + v
	n.regs[lo/4], n.regs[lo/4+1] = uint32(c), uint32(c>>32)
}

// txChecksumLocked inserts the IPv4 header and TCP/UDP checksums the
// context descriptor (IDX of olinfo) describes.
func (n *ixgbeNIC) txChecksumLocked(fr []byte, q int, olinfo, popts uint32) {
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
		binary.BigEndian.PutUint16(ip[10:], ^csumFold(csumAdd(0, ip[:ipLen])))
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
		s := ^csumFold(csumAdd(0, l4))
		if udp && s == 0 {
			s = 0xFFFF
		}
		binary.BigEndian.PutUint16(l4[at:], s)
	}
}

// receive takes a frame from the wire or the loopback. The frame buffer is
// the caller's: it is copied into the ring or the packet buffer.
func (n *ixgbeNIC) receive(fr []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || !n.has(hw.RXCTRL, hw.RxctrlRXEN) || !n.lastLU {
		n.nDrop.Add(1)
		return
	}
	if !n.acceptLocked(fr) {
		return
	}
	if len(n.pend) == 0 {
		if n.deliverLocked(fr) != rxNoRoom {
			return
		}
	}
	if len(n.pend) >= n.pendMax {
		n.nDrop.Add(1)
		n.regs[hw.MPC(0)/4]++
		return
	}
	n.pend = append(n.pend, append([]byte(nil), fr...))
}

func (n *ixgbeNIC) flushPendingLocked() {
	if !n.has(hw.RXCTRL, hw.RxctrlRXEN) || !n.lastLU || n.closed {
		return
	}
	i := 0
	for ; i < len(n.pend); i++ {
		if n.deliverLocked(n.pend[i]) == rxNoRoom {
			break
		}
	}
	if i > 0 {
		k := copy(n.pend, n.pend[i:])
		clear(n.pend[k:])
		n.pend = n.pend[:k]
	}
}

// acceptLocked is the L2 filter: receive addresses, promiscuous modes,
// broadcast, the multicast table.
func (n *ixgbeNIC) acceptLocked(fr []byte) bool {
	if len(fr) < 14 {
		n.regs[hw.RUC/4]++
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
	lo := uint32(dst[0]) | uint32(dst[1])<<8 | uint32(dst[2])<<16 | uint32(dst[3])<<24
	hi := uint32(dst[4]) | uint32(dst[5])<<8
	for i := 0; i < hw.RAREntries; i++ {
		rah := n.reg(hw.RAH(i))
		if rah&(1<<31) != 0 && n.reg(hw.RAL(i)) == lo && rah&0xFFFF == hi {
			return true
		}
	}
	return false
}

// rxClass is what the filters decided about a frame.
type rxClass struct {
	queue   int
	drop    bool
	pktInfo uint16
	hash    uint32
	status  uint32
}

// classifyLocked steers a frame in the 82599's order: EtherType filters,
// 5-tuple filters, Flow Director perfect filters, RSS, queue 0.
func (n *ixgbeNIC) classifyLocked(fr []byte) rxClass {
	var c rxClass
	etype := binary.BigEndian.Uint16(fr[12:])
	ip, l4, proto, isIPv4 := parseIPv4(fr)
	switch {
	case isIPv4:
		c.pktInfo |= hw.PktTypeIPv4
		switch {
		case l4 != nil && proto == 6:
			c.pktInfo |= hw.PktTypeTCP
		case l4 != nil && proto == 17:
			c.pktInfo |= hw.PktTypeUDP
		}
		c.status |= n.rxChecksumLocked(ip, l4, proto)
	case etype == 0x86DD:
		c.pktInfo |= hw.PktTypeIPv6
	}
	// 1. EtherType filters.
	for i := 0; i < hw.ETQFEntries; i++ {
		f := n.reg(hw.ETQF(i))
		if f&hw.EtqfFilterEn == 0 || uint16(f) != etype {
			continue
		}
		c.pktInfo = hw.PktTypeETQF | uint16(i)<<hw.PktTypeETQFShift
		if s := n.reg(hw.ETQS(i)); s&hw.EtqsQueueEn != 0 {
			c.queue = int(s & hw.EtqsQueueMask >> hw.EtqsQueueShift)
			return c
		}
		break
	}
	if !isIPv4 {
		return n.rssLocked(fr, c, nil, nil, 0)
	}
	var sport, dport uint16
	if l4 != nil && (proto == 6 || proto == 17 || proto == 132) {
		sport, dport = binary.BigEndian.Uint16(l4[0:]), binary.BigEndian.Uint16(l4[2:])
	}
	// 2. 5-tuple filters: the highest priority wins, then the lowest index.
	best, bestPrio := -1, uint32(0)
	for i := 0; i < hw.FiveTupleEntries; i++ {
		f := n.reg(hw.FTQF(i))
		if f&hw.FtqfQueueEn == 0 {
			continue
		}
		if f&hw.FtqfMaskProto == 0 {
			want := map[uint32]byte{hw.FtqfProtoTCP: 6, hw.FtqfProtoUDP: 17, hw.FtqfProtoSCTP: 132}[f&hw.FtqfProtoMask]
			if f&hw.FtqfProtoMask == hw.FtqfProtoOther || want != proto {
				continue
			}
		}
		if f&hw.FtqfMaskSrcAddr == 0 && n.reg(hw.SAQF(i)) != binary.LittleEndian.Uint32(ip[12:]) {
			continue
		}
		if f&hw.FtqfMaskDstAddr == 0 && n.reg(hw.DAQF(i)) != binary.LittleEndian.Uint32(ip[16:]) {
			continue
		}
		if (f&hw.FtqfMaskSrcPort == 0 || f&hw.FtqfMaskDstPort == 0) && l4 == nil {
			continue
		}
		ports := n.reg(hw.SDPQF(i))
		if f&hw.FtqfMaskSrcPort == 0 && uint16(ports) != sport {
			continue
		}
		if f&hw.FtqfMaskDstPort == 0 && uint16(ports>>hw.SdpqfDstPortShift) != dport {
			continue
		}
		if prio := f & hw.FtqfPriorityMask >> hw.FtqfPriorityShift; best < 0 || prio > bestPrio {
			best, bestPrio = i, prio
		}
	}
	if best >= 0 {
		c.queue = int(n.reg(hw.L34TIMIR(best)) & hw.L34tQueueMask >> hw.L34tQueueShift)
		return c
	}
	// 3. Flow Director perfect filters.
	if n.reg(hw.FDIRCTRL)&hw.FdirctrlInitDone != 0 {
		var in hw.FdirInput
		switch {
		case l4 != nil && proto == 17:
			in.FlowType = hw.FlowUDP
		case l4 != nil && proto == 6:
			in.FlowType = hw.FlowTCP
		case l4 != nil && proto == 132:
			in.FlowType = hw.FlowSCTP
		}
		copy(in.SrcIP[:4], ip[12:16])
		copy(in.DstIP[:4], ip[16:20])
		in.SrcPort, in.DstPort = sport, dport
		if off := int(n.reg(hw.FDIRCTRL)&hw.FdirctrlFlexMask>>hw.FdirctrlFlexShift) * 2; off+2 <= len(fr) {
			in.Flex = [2]byte{fr[off], fr[off+1]}
		}
		in = n.fdirMaskedLocked(in)
		bucketBits := hw.FdirBucketBits(n.reg(hw.FDIRCTRL) & hw.FdirctrlPBAllocMask)
		bucket := hw.FdirBucketHash(in, n.reg(hw.FDIRHKEY)) & (1<<bucketBits - 1)
		for _, f := range n.fdir[bucket] {
			if f.in != in {
				continue
			}
			n.fdirHit++
			c.status |= hw.RxStatFLM
			c.hash = uint32(f.swIdx) | bucket<<16
			switch {
			case f.drop:
				c.drop = true
			case f.qen:
				c.queue = f.queue
			default:
				return n.rssLocked(fr, c, ip, l4, proto)
			}
			return c
		}
		n.fdirMis++
	}
	// 4. RSS, 5. queue 0.
	return n.rssLocked(fr, c, ip, l4, proto)
}

// rssLocked picks the queue by RSS when MRQC enables it (the hash of an
// IPv4 frame, or none), keeping c's other findings.
func (n *ixgbeNIC) rssLocked(fr []byte, c rxClass, ip, l4 []byte, proto byte) rxClass {
	mrqc := n.reg(hw.MRQC)
	if mrqc&hw.MrqcMRQEMask != hw.MrqcRSSEn || ip == nil {
		return c
	}
	var in []byte
	var typ uint16
	switch {
	case proto == 6 && l4 != nil && mrqc&hw.MrqcTCPIPv4 != 0:
		in, typ = append(append([]byte(nil), ip[12:20]...), l4[0:4]...), hw.RSSTypeTCPIPv4
	case proto == 17 && l4 != nil && mrqc&hw.MrqcUDPIPv4 != 0:
		in, typ = append(append([]byte(nil), ip[12:20]...), l4[0:4]...), hw.RSSTypeUDPIPv4
	case mrqc&hw.MrqcIPv4 != 0:
		in, typ = ip[12:20], hw.RSSTypeIPv4
	default:
		return c
	}
	var key [hw.RSSKeyLen]byte
	for i := range key {
		key[i] = byte(n.reg(hw.RSSRK+i/4*4) >> (8 * (i % 4)))
	}
	h := toeplitz(key[:], in)
	e := byte(n.reg(hw.RETA+int(h&127)/4*4) >> (8 * (h & 3)))
	c.queue = int(e & hw.RETAQueueMask)
	if c.status&hw.RxStatFLM == 0 {
		c.pktInfo |= typ
		if n.has(hw.RXCSUM, hw.RxcsumPCSD) {
			c.hash = h
		}
	}
	return c
}

// rxChecksumLocked checks an IPv4 frame's header and TCP/UDP checksums, as
// the 82599 always does, and returns the status and error bits.
func (n *ixgbeNIC) rxChecksumLocked(ip, l4 []byte, proto byte) uint32 {
	st := uint32(hw.RxStatIPCS)
	if csumFold(csumAdd(0, ip[:int(ip[0]&0xF)*4])) != 0xFFFF {
		st |= hw.RxErrIPE
	}
	if l4 == nil || (proto != 6 && proto != 17) {
		return st
	}
	if proto == 17 && binary.BigEndian.Uint16(l4[6:]) == 0 {
		return st
	}
	sum := csumAdd(0, ip[12:20]) + uint32(proto) + uint32(len(l4))
	st |= hw.RxStatL4CS
	if proto == 17 {
		st |= hw.RxStatUDPCS
	}
	if csumFold(csumAdd(sum, l4)) != 0xFFFF {
		st |= hw.RxErrTCPE
	}
	return st
}

// deliverLocked steers one frame and writes it into its RX ring.
func (n *ixgbeNIC) deliverLocked(fr []byte) rxResult {
	if !n.f.busMaster() {
		n.nDrop.Add(1)
		return rxDropped
	}
	if len(fr)+4 < 64 {
		n.regs[hw.RUC/4]++
		n.nDrop.Add(1)
		return rxDropped
	}
	if len(fr) > n.maxFrameLocked() {
		n.regs[hw.ROC/4]++
		n.nDrop.Add(1)
		return rxDropped
	}
	c := n.classifyLocked(fr)
	if c.drop {
		n.nDrop.Add(1)
		return rxDropped
	}
	q := c.queue
	if q >= hw.MaxQueuePairs || !n.rxEnabled(q) {
		n.violation("frame steered to RX queue %d, which is not enabled", q)
		n.nDrop.Add(1)
		return rxDropped
	}
	srrctl := n.reg(hw.SRRCTL(q))
	pktBuf := int(srrctl&hw.SrrctlBSizePktMask) << 10
	hdrBuf := int(srrctl&hw.SrrctlBSizeHdrMask>>hw.SrrctlBSizeHdrShift) * 64
	data := fr
	if !n.has(hw.HLREG0, hw.Hlreg0RxCRCStrp) {
		c := crc32.ChecksumIEEE(fr)
		data = binary.LittleEndian.AppendUint32(append([]byte(nil), fr...), c)
	}
	hdr := 0
	if srrctl&hw.SrrctlDescTypeMask == hw.SrrctlDescAdvHdrSplit && n.reg(hw.PSRTYPE(0))&(hw.PsrtypeTCPHdr|hw.PsrtypeUDPHdr|hw.PsrtypeIPv4Hdr|hw.PsrtypeIPv6Hdr) != 0 {
		if h, ok := psHeaderLen(fr, false, 1<<20); ok {
			if h > hdrBuf {
				c.status |= hw.RxErrHBO
			} else {
				hdr = h
			}
		}
	}
	rest := len(data) - hdr
	need := uint32(max(1, (rest+pktBuf-1)/pktBuf))
	l := n.reg(hw.RDLEN(q)) / hw.DescSize
	head, tail := n.reg(hw.RDH(q)), n.reg(hw.RDT(q))
	if head >= l || tail >= l {
		n.nDrop.Add(1)
		return rxDropped
	}
	if (tail+l-head)%l < need {
		if srrctl&hw.SrrctlDropEn != 0 {
			if q < hw.QueueStats {
				n.regs[hw.QPRDC(q)/4]++
			}
			n.nDrop.Add(1)
			return rxDropped
		}
		return rxNoRoom
	}
	dom := n.f.dom
	base := uint64(n.reg(hw.RDBAH(q)))<<32 | uint64(n.reg(hw.RDBAL(q)))
	dom.rlock()
	defer dom.runlock()
	off := hdr
	for i := uint32(0); i < need; i++ {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, true, &n.hint)
		if !ok {
			n.violation("RX descriptor %d of queue %d at an unmapped IOVA", head, q)
			n.nDrop.Add(1)
			return rxDropped
		}
		n.acc.rxFetch++
		pktAddr := binary.LittleEndian.Uint64(raw)
		hdrAddr := binary.LittleEndian.Uint64(raw[8:])
		wb := hw.RxWriteBack{PktInfo: c.pktInfo, Hash: c.hash, Status: hw.RxStatDD}
		if i == 0 && hdr > 0 {
			if hdrAddr&1 != 0 {
				n.violation("RX descriptor %d of queue %d: header buffer address %#x has bit 0 set (it must be even: DD sits there)", head, q, hdrAddr)
			}
			hb, ok := dom.translate(hdrAddr, hdr, true, &n.hint)
			if !ok {
				n.violation("RX header buffer at IOVA %#x (%d bytes) is not mapped", hdrAddr, hdr)
				n.nDrop.Add(1)
				return rxDropped
			}
			copy(hb, fr[:hdr])
			wb.HdrInfo = hw.HdrInfoSPH | uint16(hdr)<<hw.HdrInfoLenShift
		}
		k := min(pktBuf, len(data)-off)
		if k > 0 {
			buf, ok := dom.translate(pktAddr, k, true, &n.hint)
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
		n.acc.rxWB++
		head = (head + 1) % l
	}
	n.set(hw.RDH(q), head)
	n.nRx.Add(1)
	n.regs[hw.GPRC/4]++
	n.regs[hw.TPR/4]++
	n.count64(hw.GORCL, uint64(len(fr)+4))
	n.count64(hw.TORL, uint64(len(fr)+4))
	if fr[0]&1 != 0 {
		if isBroadcast(fr) {
			n.regs[hw.BPRC/4]++
		} else {
			n.regs[hw.MPRC/4]++
		}
	}
	n.queueCauseLocked(q)
	return rxDone
}

// queueCauseLocked raises RX queue q's interrupt cause on the vector IVAR
// routes it to.
func (n *ixgbeNIC) queueCauseLocked(q int) {
	e := n.reg(hw.IVAR(q/2)) >> hw.IVARRxShift(q) & 0xFF
	if e&hw.IVARValid == 0 {
		return
	}
	n.vectorCauseLocked(int(e & 0x3F))
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

// vectorCauseLocked sets vector v's cause and sends it if unmasked.
func (n *ixgbeNIC) vectorCauseLocked(v int) {
	n.vecCaus |= 1 << v
	n.fireLocked(v)
}

// unmaskLocked sets EIMS bits: causes already pending fire.
func (n *ixgbeNIC) unmaskLocked(m uint64) {
	n.vecMask |= m
	for p := m & n.vecCaus; p != 0; p &= p - 1 {
		n.fireLocked(bits.TrailingZeros64(p))
	}
}

func (n *ixgbeNIC) fireLocked(v int) {
	if n.vecMask&(1<<v) == 0 || !n.has(hw.GPIE, hw.GpieMSIXMode) {
		return
	}
	// Auto-mask (GPIE.EIAME with EIAM) and auto-clear (EIAC) on sending.
	var eiam uint64
	if v < 16 {
		eiam = uint64(n.reg(hw.EIAM) & hw.EicrRTxQMask)
	}
	eiam |= uint64(n.reg(hw.EIAMEx(0))) | uint64(n.reg(hw.EIAMEx(1)))<<32
	if n.has(hw.GPIE, hw.GpieEIAME) && eiam&(1<<v) != 0 {
		n.vecMask &^= 1 << v
	}
	if v >= 16 || n.reg(hw.EIAC)&(1<<v) != 0 {
		n.vecCaus &^= 1 << v
	}
	n.messageLocked(v)
}

// messageLocked sends MSI-X vector v, no sooner than its EITR allows.
func (n *ixgbeNIC) messageLocked(v int) {
	now := n.clock.Now()
	if now.Before(n.vecNext[v]) {
		if n.vecTmr[v] == nil {
			n.vecTmr[v] = n.clock.AfterFunc(n.vecNext[v].Sub(now), func() {
				n.mu.Lock()
				defer n.mu.Unlock()
				n.vecTmr[v] = nil
				if !n.closed {
					n.sendLocked(v, n.clock.Now())
				}
			})
		}
		return
	}
	n.sendLocked(v, now)
}

func (n *ixgbeNIC) sendLocked(v int, now time.Time) {
	itv := time.Duration(n.reg(hw.EITR(v))&hw.EitrIntervalMask>>hw.EitrIntervalShift) * hw.EitrUnitNanos
	n.vecNext[v] = now.Add(itv)
	if n.f.raise(v) {
		n.nIRQ.Add(1)
	}
}

func (n *ixgbeNIC) configWrite(off, ln int) {
	if off <= pci.ConfigCommand+1 && off+ln > pci.ConfigCommand {
		n.mu.Lock()
		n.flushPendingLocked()
		n.mu.Unlock()
	}
}

func (n *ixgbeNIC) flr() {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopTimersLocked()
	n.powerOn()
}

func (n *ixgbeNIC) stopTimersLocked() {
	for i, stop := range n.vecTmr {
		if stop != nil {
			stop()
			n.vecTmr[i] = nil
		}
	}
}

func (n *ixgbeNIC) close() {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	n.stopTimersLocked()
	n.pend = nil
}
