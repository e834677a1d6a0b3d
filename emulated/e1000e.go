package emulated

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/pci"
)

// The 82574L (e1000e) model, split as its driver is: this file holds the
// platform (options, the NICs' PCI functions, cables, statistics) and each
// NIC's state; e1000e_regs.go the control path (registers, reset, link,
// interrupts); e1000e_tx.go transmit; e1000e_rx.go receive, with packet
// split descriptors in e1000e_split.go.

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
	nicPlatform[*e1000eNIC]
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
	if err := nicOptions("e1000e", &o.Ports, &o.Pending, DefaultE1000EOptions().Pending, &o.Clock); err != nil {
		return nil, err
	}
	p := &E1000E{nicPlatform[*e1000eNIC]{platform: platform{iommu: newIOMMU(o.IOVABase, o.Scatter)}, regName: hw.RegName}}
	for i := 0; i < o.Ports; i++ {
		f := newNICFunction(1+uint8(i), p.iommu, hw.MSIXVectors, hw.BAR0Size, initE1000EConfig)
		n := &e1000eNIC{txHook: o.TxBuffer}
		n.nicCore = newNICCore(n, f, i, hw.MSIXVectors, o.Pending, 1, o.Clock, [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56 + byte(i)})
		n.powerOn()
		p.add(f, n)
	}
	if o.Cabled {
		if err := p.cablePairs(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func initE1000EConfig(f *Function) {
	// An Ethernet controller (class 02h, subclass 00h) with a 32-bit
	// memory BAR0 and MSI-X at 0xA0: 5 vectors, table and PBA in BAR3 (as
	// QEMU).
	baseConfig{vendor: hw.VendorIntel, device: hw.Device82574L, class: 0x02, subclass: 0x00, bar0: 0xFEBC0000,
		msix: 0xA0, vectors: hw.MSIXVectors, table: 3, pba: 0x2000 | 3}.init(f)
	binary.LittleEndian.PutUint16(f.cfg[pci.ConfigSubVendorID:], hw.VendorIntel)
}

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

// Stats returns port i's counters.
func (p *E1000E) Stats(i int) E1000EStats {
	n := p.nics[i]
	s := E1000EStats{TxFrames: n.nTx.Load(), RxFrames: n.nRx.Load(), RxDropped: n.nDrop.Load(), Interrupts: n.interrupts(), Violations: n.nViol.Load()}
	if v := n.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	n.mu.Lock()
	s.Pending = n.hold.len()
	n.mu.Unlock()
	return s
}

// E1000EAccesses counts what a driver's use of one emulated 82574L would
// cost on QEMU's e1000e, where every register access is a trip through the
// device model (an MMIO exit of the vCPU, handled under QEMU's global lock)
// and every descriptor access a DMA through the IOMMU. Frames are counted
// in E1000EStats and MSI-X messages in its Interrupts.
type E1000EAccesses = NICAccesses

// e1000eNIC is one 82574L: the state every NIC model keeps (nicCore,
// with its locks) and the 82574L's own.
type e1000eNIC struct {
	nicCore
	txHook func(port int, iova uint64, mem []byte) // E1000EOptions.TxBuffer

	// Under mu.
	regs    [hw.BAR0Size / 4]uint32
	phy     [32]uint16
	rxOn    bool // RCTL.EN latched
	rxExt   bool // extended descriptors latched
	rxBuf   int  // buffer size latched
	rxPS    bool // packet split descriptors latched (e1000e_split.go)
	rxPSBuf [hw.PSBuffers]int
	txCtx   hw.TxDesc
}
