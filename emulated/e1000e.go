package emulated

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/pci"
)

// E1000EOptions configures an emulated platform of 82574L NICs.
type E1000EOptions struct {
	// Ports is the number of NICs (PCI functions), default 2.
	Ports int
	// Cabled, when set, cables ports 0-1, 2-3, ... together at creation
	// with their links up (DefaultE1000EOptions sets it).
	Cabled bool
	// Pending is how many frames a NIC holds when its RX ring has no free
	// descriptor, as QEMU's net queue back-pressures the sender (default
	// 1024). Frames beyond it are dropped and counted in MPC and RNBC.
	Pending int
	// Scatter makes the IOMMU hand out one IOVA segment per 4 KiB page.
	Scatter bool
	// IOVABase is the first IOVA the IOMMU hands out (default 4 GiB).
	IOVABase uint64
	// TxBuffer, when set, is called for every TX data descriptor the
	// model reads: the port, the descriptor's buffer address and the
	// memory that address translates to, so a test can check where a
	// driver points the NIC (at a pool buffer, or in place at memory the
	// caller registered). It runs with the NIC's locks held: record and
	// return.
	TxBuffer func(port int, iova uint64, mem []byte)
	// Clock is the time the interrupt throttle (EITR) counts in; nil means
	// the wall clock. A test that gives the model a clock it advances
	// itself sees the throttle's effect in counts of frames and
	// interrupts, whatever the machine's load.
	Clock Clock
}

// Clock is a time source with timers, the one the model's interrupt
// throttle reads. The wall clock (time.Now and time.AfterFunc) is the
// default.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f once when d has passed, unless the returned stop
	// function is called first (it reports whether it stopped the call).
	// f takes the model's locks: call it from a goroutine that holds
	// none of them (the wall clock's timers run in their own), never from
	// within AfterFunc.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// wallClock is the default Clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// DefaultE1000EOptions returns two cabled NICs, as QEMU's e1000e pair on a
// hub.
func DefaultE1000EOptions() E1000EOptions {
	return E1000EOptions{Ports: 2, Cabled: true, Pending: 1024}
}

// E1000E is an emulated platform of 82574L NICs behind one IOMMU: the
// register file, descriptor rings and DMA of the device QEMU 7.2 calls
// e1000e, strict enough to catch a driver that misprograms it. What the
// model checks, each breach counted as a violation (E1000EStats):
//
//   - every register access is 32 bits wide;
//   - ring bases, lengths and heads change only while that direction is
//     disabled; bases are 16-byte aligned, lengths multiples of 128 bytes,
//     tails inside the ring;
//   - as in QEMU 7.2, RFCTL and the buffer size are latched when RCTL is
//     written with EN set, so RFCTL written while receiving is a violation;
//     CTRL.RST resets no register but the MAC address (the driver must
//     rewrite what it relies on), and a queue transmits only with TARC bit
//     10 set and TXDCTL bit 22 set;
//   - receive needs PCI bus mastering, STATUS.LU and RCTL.EN; DMA goes
//     through the IOMMU, which records any access outside a mapping;
//   - a frame may span several TX descriptors (EOP on the last), each
//     read where its address points; a descriptor whose buffer lies
//     outside every mapping is a violation and its frame is dropped
//     (E1000EOptions.TxBuffer shows a test where each one pointed);
//   - statistics registers are read-only, and clear on read;
//   - packet split receive (RCTL.DTYP=01) needs extended descriptors and
//     PSRCTL buffers 0 and 1 of nonzero size, and an even RDT (the NIC
//     counts 16-byte units); frames are split as QEMU 7.2 splits them
//     (e1000e_split.go).
//
// Ports are joined by a cable (Cable) or a hub (Hub), or, through Port,
// to ports of another platform (the package's Cable, Hub and Connect, which
// may also carry a fault model): a frame a NIC transmits is delivered,
// synchronously on the TDT write as in QEMU, to the RX path of the NIC at
// the other end, or of every other NIC on the hub; a frame corrupted on the
// wire is counted in CRCERRS and dropped. MAC loopback (RCTL.LBM) and PHY loopback (PHY
// control bit 14) turn the frame back into the sender's own RX path.
type E1000E struct {
	iommu *IOMMU
	fns   []*Function
	nics  []*e1000eNIC
}

// E1000EStats counts what one emulated NIC saw and did.
type E1000EStats struct {
	// TxFrames and RxFrames are frames sent to the wire and written into
	// the RX ring.
	TxFrames, RxFrames uint64
	// RxDropped counts frames that reached the NIC but were not received:
	// RX disabled, link down, no room even in the pending queue, DMA
	// faults, bad length.
	RxDropped uint64
	// Pending is the number of frames waiting for RX descriptors now.
	Pending int
	// Interrupts counts MSI-X messages delivered.
	Interrupts uint64
	// Violations counts programming errors (see E1000E); LastViolation
	// describes the latest.
	Violations    uint64
	LastViolation string
}

// NewE1000E builds the platform.
func NewE1000E(o E1000EOptions) (*E1000E, error) {
	if o.Ports == 0 {
		o.Ports = 2
	}
	if o.Pending == 0 {
		o.Pending = DefaultE1000EOptions().Pending
	}
	if o.Ports < 1 || o.Ports > 32 {
		return nil, fmt.Errorf("emulated e1000e: %d ports: want 1..32", o.Ports)
	}
	if o.Pending < 0 {
		return nil, fmt.Errorf("emulated e1000e: negative Pending %d", o.Pending)
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	p := &E1000E{iommu: newIOMMU(o.IOVABase, o.Scatter)}
	for i := 0; i < o.Ports; i++ {
		f := &Function{
			addr: pci.Address{Bus: 1 + uint8(i), Device: 0, Function: 0},
			dom:  p.iommu,
			nIRQ: hw.MSIXVectors,
			// A PCIe function: the extended configuration space answers.
			cfgSize: 4096,
		}
		f.bar = &bar{f: f, size: hw.BAR0Size}
		initE1000EConfig(f)
		n := &e1000eNIC{f: f, port: i, txHook: o.TxBuffer, pendMax: o.Pending, clock: o.Clock, mac: [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56 + byte(i)}}
		n.powerOn()
		f.m = n
		p.fns = append(p.fns, f)
		p.nics = append(p.nics, n)
	}
	if o.Cabled {
		for i := 0; i+1 < o.Ports; i += 2 {
			if err := p.Cable(i, i+1); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func initE1000EConfig(f *Function) {
	c := &f.cfg
	le := binary.LittleEndian
	le.PutUint16(c[pci.ConfigVendorID:], hw.VendorIntel)
	le.PutUint16(c[pci.ConfigDeviceID:], hw.Device82574L)
	le.PutUint16(c[pci.ConfigStatus:], pci.StatusCapList)
	c[pci.ConfigClass+1] = 0x00 // Ethernet
	c[pci.ConfigClass+2] = 0x02 // network controller
	le.PutUint32(c[pci.ConfigBAR0:], 0xFEBC0000)
	le.PutUint16(c[pci.ConfigSubVendorID:], hw.VendorIntel)
	c[pci.ConfigCapPtr] = 0xA0
	// MSI-X capability: 5 vectors, table and PBA in BAR3 (as QEMU).
	c[0xA0] = pci.CapMSIX
	le.PutUint16(c[0xA2:], hw.MSIXVectors-1)
	le.PutUint32(c[0xA4:], 3)
	le.PutUint32(c[0xA8:], 0x2000|3)
	le.PutUint16(f.cfgW[pci.ConfigCommand:], pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable)
	le.PutUint16(f.cfgW[0xA2:], 0xC000)
}

// Functions returns the NICs' PCI functions.
func (p *E1000E) Functions() []*Function { return p.fns }

// Devices returns the functions as pci.Devices.
func (p *E1000E) Devices() []pci.Device {
	ds := make([]pci.Device, len(p.fns))
	for i, f := range p.fns {
		ds[i] = f
	}
	return ds
}

// IOMMU returns the platform's IOMMU.
func (p *E1000E) IOMMU() *IOMMU { return p.iommu }

// MAC returns the address port i loads from its NVM into RAL0/RAH0.
func (p *E1000E) MAC(i int) [6]byte { return p.nics[i].mac }

// Port returns port i for the wire (Cable, Hub, Connect), which may join
// it to a port of another platform.
func (p *E1000E) Port(i int) Port { return Port{end: p.nics[i]} }

// Cable joins ports a and b of this platform with a cable whose link is up.
// A port is on at most one cable or hub; cabling it again moves it.
func (p *E1000E) Cable(a, b int) error { return p.Hub(a, b) }

// Hub joins ports of this platform on one hub, as QEMU's -netdev hubport
// does: a frame one of them transmits reaches every other (each NIC's
// receive filter then decides). A port leaves its previous cable or hub.
func (p *E1000E) Hub(ports ...int) error {
	var ps []Port
	for _, i := range ports {
		if i < 0 || i >= len(p.nics) {
			return fmt.Errorf("emulated e1000e: hub of ports %v: want ports of 0..%d", ports, len(p.nics)-1)
		}
		ps = append(ps, p.Port(i))
	}
	if err := Hub(ps...); err != nil {
		return fmt.Errorf("emulated e1000e: hub of ports %v: %w", ports, err)
	}
	return nil
}

// SetLink plugs (up) or unplugs the cable at port i, which raises ICR.LSC.
// On a cable between two ports both ends see the change; on a hub of more,
// only port i does (as QEMU's set_link on one hubport).
func (p *E1000E) SetLink(i int, up bool) { setLink(p.nics[i], up) }

// HoldGIOMaster makes port i keep STATUS.GIO_MASTER_ENABLE set while PCI
// bus mastering is on, even after CTRL.GIO_MASTER_DISABLE asks it to stop
// mastering: a NIC whose outstanding DMA never drains. A driver waiting for
// the bit times out; only turning bus mastering off in configuration space
// then stops the NIC's DMA.
func (p *E1000E) HoldGIOMaster(i int, hold bool) { p.nics[i].holdGIO.Store(hold) }

// Stats returns port i's counters.
func (p *E1000E) Stats(i int) E1000EStats {
	n := p.nics[i]
	s := E1000EStats{TxFrames: n.nTx.Load(), RxFrames: n.nRx.Load(), RxDropped: n.nDrop.Load(), Interrupts: n.nIRQ.Load(), Violations: n.nViol.Load()}
	if v := n.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	n.mu.Lock()
	s.Pending = len(n.pend)
	n.mu.Unlock()
	return s
}

// E1000EAccesses counts what a driver's use of one emulated 82574L would
// cost on QEMU's e1000e, where every register access is a trip through the
// device model (an MMIO exit of the vCPU, handled under QEMU's global lock)
// and every descriptor access a DMA through the IOMMU. Frames are counted
// in E1000EStats and MSI-X messages in its Interrupts.
type E1000EAccesses = NICAccesses

// Accesses returns what port i's driver has done to it since the platform
// was made or since ResetAccesses.
func (p *E1000E) Accesses(i int) E1000EAccesses {
	n := p.nics[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.acc
	return a.named(hw.RegName)
}

// ResetAccesses sets port i's access counts to zero, so that a test can
// count one phase (a steady stream after the bring-up).
func (p *E1000E) ResetAccesses(i int) {
	n := p.nics[i]
	n.mu.Lock()
	n.acc = regAccesses{}
	n.mu.Unlock()
}

// Close stops every NIC and takes its ports off the wire; no DMA happens
// after it returns.
func (p *E1000E) Close() error {
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

// e1000eNIC is one 82574L. Register accesses arrive on the driver's
// goroutines and are serialised by mu; transmission runs on the goroutine
// that writes TDT, under txMu, and hands frames to the peer after releasing
// mu, so two cabled NICs transmitting at each other cannot deadlock (lock
// order: txMu, then mu or the peer's mu, never two mu at once).
type e1000eNIC struct {
	f      *Function
	mac    [6]byte
	port   int
	txHook func(port int, iova uint64, mem []byte) // E1000EOptions.TxBuffer

	plug jack // the wire (wire.go)
	// holdGIO keeps STATUS.GIO_MASTER_ENABLE set while bus mastering is
	// on, whatever CTRL.GIO_MASTER_DISABLE says (E1000E.HoldGIOMaster).
	holdGIO atomic.Bool

	txMu  sync.Mutex
	out   [][]byte // frames of the TDT write being processed, to deliver
	spare [][]byte // free frame buffers

	mu      sync.Mutex
	regs    [hw.BAR0Size / 4]uint32
	phy     [32]uint16
	closed  bool
	pend    [][]byte // frames waiting for RX descriptors
	pendMax int
	rxOn    bool // RCTL.EN latched
	rxExt   bool // extended descriptors latched
	rxBuf   int  // buffer size latched
	rxPS    bool // packet split descriptors latched (e1000e_split.go)
	rxPSBuf [hw.PSBuffers]int
	txCtx   hw.TxDesc
	hint    int
	lastLU  bool
	vecNext [hw.MSIXVectors]time.Time
	vecTmr  [hw.MSIXVectors]func() bool // stops a deferred message
	clock   Clock

	nTx, nRx, nDrop, nIRQ, nViol atomic.Uint64
	lastViol                     atomic.Pointer[string]

	acc regAccesses // under mu
}

func (n *e1000eNIC) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	n.nViol.Add(1)
	n.lastViol.Store(&s)
}

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
	n.pend = n.pend[:0]
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

func (n *e1000eNIC) jack() *jack { return &n.plug }

// fromWire implements wireEnd: a frame with a bad FCS is counted (CRCERRS)
// and dropped, as the MAC drops it.
func (n *e1000eNIC) fromWire(fr []byte, badFCS bool) {
	if badFCS {
		n.mu.Lock()
		n.regs[hw.CRCERRS/4]++
		n.mu.Unlock()
		n.nDrop.Add(1)
		return
	}
	n.receive(fr)
}

func (n *e1000eNIC) setCable(up bool) {
	n.plug.cable.Store(up)
	n.mu.Lock()
	n.linkChangedLocked()
	n.mu.Unlock()
}

// linkChangedLocked raises LSC when STATUS.LU changed.
func (n *e1000eNIC) linkChangedLocked() {
	if lu := n.linkUp(); lu != n.lastLU {
		n.lastLU = lu
		n.causeLocked(hw.IntLSC)
		if lu {
			n.flushPendingLocked()
		}
	}
}

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

// messageLocked sends MSI-X vector vec, no sooner than EITR allows.
func (n *e1000eNIC) messageLocked(vec int) {
	now := n.clock.Now()
	if now.Before(n.vecNext[vec]) {
		if n.vecTmr[vec] == nil {
			n.vecTmr[vec] = n.clock.AfterFunc(n.vecNext[vec].Sub(now), func() {
				n.mu.Lock()
				defer n.mu.Unlock()
				n.vecTmr[vec] = nil
				if !n.closed {
					n.sendLocked(vec, n.clock.Now())
				}
			})
		}
		return
	}
	n.sendLocked(vec, now)
}

func (n *e1000eNIC) sendLocked(vec int, now time.Time) {
	interval := time.Duration(n.reg(hw.EITR(vec))&0xFFFF) * 256 * time.Nanosecond
	n.vecNext[vec] = now.Add(interval)
	if n.f.raise(vec) {
		n.nIRQ.Add(1)
	}
}

// transmit is a TDT write: QEMU 7.2 sends synchronously, so every frame
// between TDH and the new TDT is on the wire when the write returns.
func (n *e1000eNIC) transmit(q int, tdt uint32) {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	n.acc.count(&n.acc.writes, hw.Q(hw.TDT, q))
	if n.closed {
		n.mu.Unlock()
		return
	}
	tdt &= 0xFFFF
	n.set(hw.Q(hw.TDT, q), tdt)
	l := n.reg(hw.Q(hw.TDLEN, q)) / hw.DescSize
	switch {
	case !n.has(hw.TCTL, hw.TctlEN):
		n.mu.Unlock()
		return
	case tdt >= l && l != 0:
		n.violation("TDT%d = %d outside a ring of %d descriptors", q, tdt, l)
		n.mu.Unlock()
		return
	case !n.has(hw.Q(hw.TARC, q), hw.TARCEnable):
		n.violation("TDT%d written with TARC%d bit 10 clear: QEMU 7.2 does not transmit from a disabled queue", q, q)
		n.mu.Unlock()
		return
	case !n.f.busMaster():
		n.violation("TDT%d written with PCI bus mastering off: the NIC cannot fetch descriptors", q)
		n.mu.Unlock()
		return
	}
	n.out = n.out[:0]
	sent := n.txRingLocked(q, l, tdt)
	loop := n.macLoop() || n.phyLoop()
	lu := n.linkUp()
	if sent {
		n.causeLocked(hw.IntTXDW | hw.IntTXQ0<<q)
	}
	n.mu.Unlock()

	for _, fr := range n.out {
		switch {
		case loop:
			n.receive(fr)
		case !lu:
			// Link down: the frame is lost on the wire.
		default:
			toWire(n, fr)
		}
		n.spare = append(n.spare, fr)
	}
	n.out = n.out[:0]
}

// frameBuf returns an empty frame buffer for the TX path (txMu held).
func (n *e1000eNIC) frameBuf() []byte {
	if k := len(n.spare); k > 0 {
		b := n.spare[k-1]
		n.spare = n.spare[:k-1]
		return b[:0]
	}
	return make([]byte, 0, 16384)
}

// txRingLocked walks TX ring q from TDH to tdt, gathering frames into
// n.out; it reports whether any descriptor completed.
func (n *e1000eNIC) txRingLocked(q int, l, tdt uint32) bool {
	dom := n.f.dom
	base := uint64(n.reg(hw.Q(hw.TDBAH, q)))<<32 | uint64(n.reg(hw.Q(hw.TDBAL, q)))
	head := n.reg(hw.Q(hw.TDH, q))
	if head >= l {
		n.violation("TDH%d = %d outside a ring of %d descriptors", q, head, l)
		return false
	}
	frame := n.frameBuf()
	var popts uint8
	did, faulted := false, false // faulted: the frame read unmapped memory
	dom.rlock()
	defer dom.runlock()
	for head != tdt {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, false, &n.hint)
		if !ok {
			n.violation("TX descriptor %d of queue %d at an unmapped IOVA", head, q)
			break
		}
		n.acc.txFetch++
		d := hw.DecodeTxDesc(raw)
		switch {
		case d.Extended() && d.DTyp() == hw.TxDTypContext:
			n.txCtx = d
		case d.Extended() && d.DTyp() != hw.TxDTypData:
			n.violation("TX descriptor type %d: want 0 (context) or 1 (data)", d.DTyp())
		default:
			if !d.Extended() && d.Cmd()&hw.TxCmdIC != 0 {
				n.violation("legacy TX descriptor with IC: QEMU 7.2 does not insert legacy checksums; use a context and data descriptor")
			}
			if d.Extended() {
				popts |= d.POPTS()
			}
			ln := d.Len()
			if ln > 0 {
				buf, ok := dom.translate(d.Addr, ln, false, &n.hint)
				if !ok {
					n.violation("TX buffer at IOVA %#x (%d bytes) is not mapped", d.Addr, ln)
					frame = frame[:0]
					faulted = true
				} else if !faulted {
					if n.txHook != nil {
						n.txHook(n.port, d.Addr, buf)
					}
					if len(frame)+ln <= cap(frame) {
						frame = append(frame, buf...)
					}
				}
			}
			if d.Cmd()&hw.TxCmdEOP != 0 {
				if faulted {
					// The fetch failed: the frame is dropped, as the
					// NIC drops a frame whose DMA read aborted.
					frame, faulted = frame[:0], false
				} else {
					n.finishFrameLocked(&frame, popts)
				}
				popts = 0
			}
		}
		if d.Cmd()&hw.TxCmdRS != 0 {
			dmasync.Publish()
			raw[12] |= hw.TxStatDD
			n.acc.txWB++
		}
		did = true
		head = (head + 1) % l
	}
	n.set(hw.Q(hw.TDH, q), head)
	if len(frame) > 0 {
		// A frame without EOP stays unsent, as on hardware until EOP comes.
		n.violation("TX queue %d: descriptors up to TDT end without EOP", q)
	}
	if cap(frame) > 0 {
		n.spare = append(n.spare, frame[:0])
	}
	return did
}

// finishFrameLocked pads, checksums and counts a complete frame and queues
// it for delivery.
func (n *e1000eNIC) finishFrameLocked(frame *[]byte, popts uint8) {
	fr := *frame
	*frame = n.frameBuf()
	if len(fr) < 14 {
		n.violation("TX frame of %d bytes: shorter than an Ethernet header", len(fr))
		n.spare = append(n.spare, fr[:0])
		return
	}
	max := hw.MaxFrame + 4
	if n.has(hw.RCTL, hw.RctlLPE) {
		max = 16128
	}
	if len(fr) > max {
		n.violation("TX frame of %d bytes: longer than %d", len(fr), max)
		n.spare = append(n.spare, fr[:0])
		return
	}
	if n.has(hw.TCTL, hw.TctlPSP) {
		for len(fr) < hw.MinFrame {
			fr = append(fr, 0)
		}
	}
	if popts != 0 {
		n.txChecksum(fr, popts)
	}
	n.nTx.Add(1)
	n.count64(hw.GOTCL, uint64(len(fr)+4))
	n.count64(hw.TOTL, uint64(len(fr)+4))
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

func isBroadcast(fr []byte) bool {
	return fr[0]&fr[1]&fr[2]&fr[3]&fr[4]&fr[5] == 0xFF
}

func (n *e1000eNIC) count64(lo int, v uint64) {
	c := uint64(n.regs[lo/4+1])<<32 | uint64(n.regs[lo/4]) + v
	n.regs[lo/4], n.regs[lo/4+1] = uint32(c), uint32(c>>32)
}

// txChecksum inserts the checksums the context descriptor describes: the
// sum over [start, end] is stored at the offset, the field's own content
// (the driver's pseudo-header seed) included, as Intel NICs do.
func (n *e1000eNIC) txChecksum(fr []byte, popts uint8) {
	c := n.txCtx
	ipcss, ipcso, ipcse := int(uint8(c.Addr)), int(uint8(c.Addr>>8)), int(uint16(c.Addr>>16))
	tucss, tucso, tucse := int(uint8(c.Addr>>32)), int(uint8(c.Addr>>40)), int(uint16(c.Addr>>48))
	ins := func(start, at, end int, udp bool) {
		if end == 0 || end >= len(fr) {
			end = len(fr) - 1
		}
		if start > end || at+2 > len(fr) {
			n.violation("TX checksum context out of the frame: start %d, offset %d, end %d, frame %d bytes", start, at, end, len(fr))
			return
		}
		s := ^csumFold(csumAdd(0, fr[start:end+1]))
		if udp && s == 0 {
			s = 0xFFFF
		}
		binary.BigEndian.PutUint16(fr[at:], s)
	}
	if popts&hw.TxPoptsIXSM != 0 {
		binary.BigEndian.PutUint16(fr[min(ipcso, len(fr)-2):], 0)
		ins(ipcss, ipcso, ipcse, false)
	}
	if popts&hw.TxPoptsTXSM != 0 {
		ins(tucss, tucso, tucse, c.Cmd()&hw.TxTucmdTCP == 0)
	}
}

// csumAdd adds b to a one's-complement sum.
func csumAdd(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

func csumFold(sum uint32) uint16 {
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return uint16(sum)
}

// receive takes a frame from the wire (or the loopback). The frame buffer
// belongs to the caller: it is copied into the ring or the pending queue.
func (n *e1000eNIC) receive(fr []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || !n.rxOn || !n.lastLU {
		n.nDrop.Add(1)
		return
	}
	if !n.accept(fr) {
		return
	}
	if len(n.pend) == 0 {
		switch n.deliverLocked(fr) {
		case rxDone, rxDropped:
			return
		}
	}
	if len(n.pend) >= n.pendMax {
		n.nDrop.Add(1)
		n.regs[hw.MPC/4]++
		return
	}
	n.pend = append(n.pend, append([]byte(nil), fr...))
}

// flushPendingLocked moves waiting frames into the ring while it has room.
func (n *e1000eNIC) flushPendingLocked() {
	if !n.rxOn || !n.lastLU || n.closed {
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

// accept is the receive filter: RAR, promiscuous, broadcast and multicast
// table.
func (n *e1000eNIC) accept(fr []byte) bool {
	if len(fr) < 14 {
		n.nDrop.Add(1)
		return false
	}
	rctl := n.reg(hw.RCTL)
	var dst [6]byte
	copy(dst[:], fr)
	switch {
	case isBroadcast(fr):
		return rctl&(hw.RctlBAM|hw.RctlMPE) != 0
	case dst[0]&1 != 0:
		if rctl&hw.RctlMPE != 0 {
			return true
		}
		if rctl&hw.RctlMOMask != 0 {
			n.violation("RCTL.MO=%d: this model hashes multicast with MO=0 only", rctl&hw.RctlMOMask>>12)
		}
		r, b := hw.MTAHash(dst)
		return n.reg(hw.MTA+4*r)&(1<<b) != 0
	case rctl&hw.RctlUPE != 0:
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

type rxResult int

const (
	rxDone rxResult = iota
	rxDropped
	rxNoRoom
)

// deliverLocked writes one frame into the RX ring its queue selects.
func (n *e1000eNIC) deliverLocked(fr []byte) rxResult {
	if !n.f.busMaster() {
		n.nDrop.Add(1)
		return rxDropped
	}
	rctl := n.reg(hw.RCTL)
	max := hw.MaxFrame + 4
	if rctl&hw.RctlLPE != 0 {
		max = 16128
	}
	if len(fr) > max {
		n.regs[hw.ROC/4]++
		n.nDrop.Add(1)
		return rxDropped
	}
	q, hash, rssType := n.rssLocked(fr)
	l := n.reg(hw.Q(hw.RDLEN, q)) / hw.DescSize
	if l == 0 {
		n.violation("frame for RX queue %d, whose ring is not programmed (RDLEN%d = 0)", q, q)
		n.nDrop.Add(1)
		return rxDropped
	}
	total := len(fr)
	if rctl&hw.RctlSECRC == 0 {
		total += 4 // QEMU appends a zero FCS when it is not stripped
	}
	need := uint32((total + n.rxBuf - 1) / n.rxBuf)
	head, tail := n.reg(hw.Q(hw.RDH, q)), n.reg(hw.Q(hw.RDT, q))
	if head >= l || tail >= l {
		n.nDrop.Add(1)
		return rxDropped
	}
	if (tail+l-head)%l < need {
		n.regs[hw.RNBC/4]++
		n.causeLocked(hw.IntRXO)
		return rxNoRoom
	}
	if n.rxPS {
		return n.deliverPSLocked(fr, q, hash, rssType, l, total)
	}
	status := n.rxChecksumLocked(fr)
	dom := n.f.dom
	base := uint64(n.reg(hw.Q(hw.RDBAH, q)))<<32 | uint64(n.reg(hw.Q(hw.RDBAL, q)))
	dom.rlock()
	defer dom.runlock()
	off := 0
	for i := uint32(0); i < need; i++ {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, true, &n.hint)
		if !ok {
			n.violation("RX descriptor %d of queue %d at an unmapped IOVA", head, q)
			n.nDrop.Add(1)
			return rxDropped
		}
		n.acc.rxFetch++
		addr := binary.LittleEndian.Uint64(raw)
		k := min(n.rxBuf, total-off)
		buf, ok := dom.translate(addr, k, true, &n.hint)
		if !ok {
			n.violation("RX buffer at IOVA %#x (%d bytes) is not mapped", addr, k)
			n.nDrop.Add(1)
			return rxDropped
		}
		m := copy(buf, fr[min(off, len(fr)):])
		clear(buf[m:])
		off += k
		wb := hw.RxWriteBack{Status: hw.RxStatDD, Length: uint16(k)}
		if i == need-1 {
			wb.Status |= hw.RxStatEOP | status
		}
		if n.has(hw.RXCSUM, hw.RxcsumPCSD) {
			wb.Hash = hash
			wb.MRQ = rssType | uint32(q)<<8
		}
		var tmp [hw.DescSize]byte
		if n.rxExt {
			wb.Encode(tmp[:])
		} else {
			// Legacy write-back: the buffer address stays, then length,
			// checksum, status, errors, VLAN.
			copy(tmp[0:8], raw[0:8])
			binary.LittleEndian.PutUint16(tmp[8:], uint16(k))
			tmp[12] = byte(wb.Status & 0xFF)
			tmp[13] = byte(wb.Status >> 24)
		}
		store64(raw[0:8], binary.LittleEndian.Uint64(tmp[0:]))
		dmasync.Publish()
		store64(raw[8:16], binary.LittleEndian.Uint64(tmp[8:]))
		n.acc.rxWB++
		head = (head + 1) % l
	}
	n.set(hw.Q(hw.RDH, q), head)
	n.countRxLocked(fr, q)
	return rxDone
}

// countRxLocked counts a frame written into RX queue q and raises its
// interrupt causes.
func (n *e1000eNIC) countRxLocked(fr []byte, q int) {
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
	n.causeLocked(hw.IntRXT0 | hw.IntRXQ0<<q)
}

// rssLocked picks the RX queue: RSS over IPv4 (and TCP ports) when MRQC
// enables it with RXCSUM.PCSD and extended descriptors, else queue 0.
func (n *e1000eNIC) rssLocked(fr []byte) (q int, hash, typ uint32) {
	mrqc := n.reg(hw.MRQC)
	if mrqc&hw.MRQCEnableMask != hw.MRQCEnableRSS2 || !n.has(hw.RXCSUM, hw.RxcsumPCSD) || !n.rxExt {
		return 0, 0, 0
	}
	ip, l4, proto, ok := parseIPv4(fr)
	if !ok {
		return 0, 0, 0
	}
	var in []byte
	switch {
	case proto == 6 && l4 != nil && mrqc&hw.MRQCTCPIPv4 != 0:
		in = append(append([]byte(nil), ip[12:20]...), l4[0:4]...)
		typ = hw.RSSTypeTCPIPv4
	case mrqc&hw.MRQCIPv4 != 0:
		in = ip[12:20]
		typ = hw.RSSTypeIPv4
	default:
		return 0, 0, 0
	}
	var key [hw.RSSKeyLen]byte
	for i := range key {
		key[i] = byte(n.reg(hw.RSSRK+i/4*4) >> (8 * (i % 4)))
	}
	hash = toeplitz(key[:], in)
	e := byte(n.reg(hw.RETA+int(hash&127)/4*4) >> (8 * (hash & 3)))
	if e&hw.RETAQueue1 != 0 {
		q = 1
	}
	return q, hash, typ
}

// toeplitz is the Microsoft RSS hash of in under key.
func toeplitz(key, in []byte) uint32 {
	var h uint32
	for i, b := range in {
		for bit := 0; bit < 8; bit++ {
			if b&(0x80>>bit) == 0 {
				continue
			}
			// The 32 key bits starting at bit i*8+bit.
			s := i*8 + bit
			var w uint32
			for k := 0; k < 32; k++ {
				p := s + k
				if p/8 < len(key) && key[p/8]&(0x80>>(p%8)) != 0 {
					w |= 1 << (31 - k)
				}
			}
			h ^= w
		}
	}
	return h
}

// parseIPv4 finds the IPv4 header and, for an unfragmented TCP or UDP
// datagram, the L4 header, of an untagged Ethernet frame.
func parseIPv4(fr []byte) (ip, l4 []byte, proto byte, ok bool) {
	if len(fr) < 34 || fr[12] != 0x08 || fr[13] != 0x00 || fr[14]>>4 != 4 {
		return nil, nil, 0, false
	}
	ihl := int(fr[14]&0xF) * 4
	tot := int(binary.BigEndian.Uint16(fr[16:]))
	if ihl < 20 || tot < ihl || 14+tot > len(fr) {
		return nil, nil, 0, false
	}
	ip = fr[14 : 14+tot]
	proto = ip[9]
	frag := binary.BigEndian.Uint16(ip[6:]) & 0x3FFF
	if frag == 0 && (proto == 6 && tot-ihl >= 20 || proto == 17 && tot-ihl >= 8) {
		l4 = ip[ihl:]
	}
	return ip, l4, proto, true
}

// rxChecksumLocked checks what RXCSUM asks of an IPv4 frame and returns
// the status and error bits for the descriptor.
func (n *e1000eNIC) rxChecksumLocked(fr []byte) uint32 {
	rxcsum := n.reg(hw.RXCSUM)
	if rxcsum&(hw.RxcsumIPOFL|hw.RxcsumTUOFL) == 0 {
		return 0
	}
	ip, l4, proto, ok := parseIPv4(fr)
	if !ok {
		return 0
	}
	var st uint32
	if rxcsum&hw.RxcsumIPOFL != 0 {
		st |= hw.RxStatIPCS
		if csumFold(csumAdd(0, ip[:int(ip[0]&0xF)*4])) != 0xFFFF {
			st |= hw.RxErrIPE
		}
	}
	if rxcsum&hw.RxcsumTUOFL != 0 && l4 != nil {
		if proto == 17 && binary.BigEndian.Uint16(l4[6:]) == 0 {
			return st // UDP without a checksum
		}
		sum := csumAdd(0, ip[12:20])
		sum += uint32(proto) + uint32(len(l4))
		sum = csumAdd(sum, l4)
		if proto == 6 {
			st |= hw.RxStatTCPCS
		} else {
			st |= hw.RxStatUDPCS
		}
		if csumFold(sum) != 0xFFFF {
			st |= hw.RxErrTCPE
		}
	}
	return st
}

func (n *e1000eNIC) configWrite(off, ln int) {
	if off <= pci.ConfigCommand+1 && off+ln > pci.ConfigCommand {
		// QEMU: turning bus mastering on flushes queued frames at once.
		n.mu.Lock()
		n.flushPendingLocked()
		n.mu.Unlock()
	}
}

func (n *e1000eNIC) flr() {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopTimersLocked()
	n.powerOn()
}

func (n *e1000eNIC) stopTimersLocked() {
	for i, stop := range n.vecTmr {
		if stop != nil {
			stop()
			n.vecTmr[i] = nil
		}
	}
}

func (n *e1000eNIC) close() {
	// Taking txMu and mu waits out a transmission or reception in flight:
	// no DMA after close returns.
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	n.stopTimersLocked()
	n.pend = nil
}
