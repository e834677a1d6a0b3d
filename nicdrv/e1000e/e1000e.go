// Package e1000e is the user-space driver of the Intel 82574L gigabit NIC
// (PCI 8086:10D3), the device QEMU emulates as "e1000e". It implements
// nicdrv.NIC over any pci.Device: a real function behind vfio-pci, or the
// in-process model of package emulated.
//
// # Bring-up
//
// Open follows Linux's e1000_reset_hw_82571 and e1000_init_hw_82571, with
// what QEMU 7.2's model adds (shared/spec/nic.md §1.3 and §1.11). QEMU 7.2
// does not reset registers on CTRL.RST, so a previous driver's state
// survives: Open first quiesces everything itself (interrupts masked, RX
// and TX disabled, ring heads and tails zeroed, PCI mastering stopped and
// waited out), then resets the MAC under the MDIO semaphore, waits for the
// NVM auto-read, applies the 82574 initialisation bits, reads the MAC
// address from receive address 0, clears the other receive addresses and
// the multicast and VLAN tables, sets link up, clears the statistics, and
// programs TX and then RX. RX is switched on last: QEMU needs bus mastering,
// link up and RCTL.EN, and latches the descriptor format and buffer size
// only when RCTL is written with EN, so RFCTL (extended descriptors), the
// checksum and RSS registers come before it. TX needs TARC bit 10 and
// TXDCTL bit 22.
//
// # Queues and descriptors
//
// One or two RX/TX queue pairs. RX uses extended descriptors with 2 KiB
// buffers and the CRC stripped; with two queues, RSS spreads IPv4 and
// IPv4/TCP flows by their Toeplitz hash through a 128-entry redirection
// table (the 82574 has no other steering: non-IP frames land in queue 0,
// and every steering rule but "destination MAC to queue 0" is refused with
// nicdrv.ErrNotSupported). With Options.HeaderSplit, RX uses packet split
// descriptors instead: 32 bytes, a header and a payload buffer each, so
// that TCP and UDP over IPv4 and IPv6 arrive with their headers in one
// buffer and their payload in another (split.go). With Options.Placement
// (place.go) the packet split descriptors receive payloads where the
// caller chooses (nicdrv.Placer): a frame that is not IP, such as an
// Open-MX frame, puts its first 128 bytes in buffer 0 (a header buffer
// of the driver's) and the rest in buffer 1, a placement the caller
// posted or, without one, the rest of the pool buffer behind buffer 0.
// TX uses legacy descriptors, or a context and an
// extended data descriptor when a frame asks for checksum offload on queue
// 0 (the 82574 has one TX context for both queues, so queue 1 computes
// checksums in the driver). A Buffer with memory attached (Buffer.Attach)
// takes legacy descriptors for the buffer's Data and then for the attached
// memory, one per 4 KiB IOMMU page it touches (QEMU 7.2 drops a frame whose
// descriptor spans two pages that are not physically adjacent; see
// txPage), EOP on the last, which also carries RS so that the attachment
// completes at the next reclaim after the NIC read it.
//
// Every ring is owned the usual way: the NIC owns RX slots [RDH, RDT) and
// TX slots [TDH, TDT); the driver keeps one RX slot back so that a full
// ring never looks empty. The fast path reads no register: it polls the
// descriptors' write-back status in memory, as DPDK's em driver does, since
// under QEMU every register access is a trip through the device model.
// TxBatch writes TDT once per call. RxBatch refills what it took and
// writes RDT only once 32 refilled descriptors (an eighth of a smaller
// ring) have gathered, or when the NIC may be running short: a ping-pong
// then pays one register write per frame (TDT), not two; DPDK's em driver
// under testpmd pays two. The NIC writes a TX descriptor back (DD) only where the
// driver asks with RS, which it does on one descriptor in 32 (a quarter of
// a smaller ring), as DPDK's em driver does: each write-back is a DMA the
// NIC (and QEMU's IOMMU) would otherwise pay per frame. So sent buffers
// return to the pool in groups, and up to 31 per queue wait for later
// frames (or Close) to come back.
//
// # Close
//
// Close quiesces the NIC (interrupts masked, RX and TX off, ring registers
// zeroed, bus mastering off) before it unmaps anything, then puts back the
// reset values of what it changed in the data path's format (extended
// descriptors, RSS, checksum reporting, loopback, interrupt routing):
// QEMU 7.2's reset would not, and the next driver on the device may trust
// them.
//
// # Interrupts
//
// With Options.Interrupts the driver enables three MSI-X vectors: RX queue
// 0, RX queue 1, and "other" (link changes). RX causes auto-clear (EIAC) and
// auto-mask (IAM with CTRL_EXT.EIAME); WaitRx clears its queue's cause
// (ICR, which the frames taken while the vector was masked set: unmasked,
// it would fire at once for them), re-arms it (IMS), checks the ring
// again, and only then sleeps on the eventfd, so no interrupt is lost
// between the check and the sleep. EITR throttles each
// vector to one message per Options.InterruptInterval.
package e1000e

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/pci"
)

// Loopback selects a self-test loopback mode.
type Loopback int

// Loopback modes.
const (
	// LoopbackNone sends frames to the wire.
	LoopbackNone Loopback = iota
	// LoopbackMAC turns transmitted frames back inside the MAC (RCTL.LBM).
	LoopbackMAC
	// LoopbackPHY turns them back in the PHY (PHY control bit 14), as
	// Linux's ethtool self-test does on copper 82574s.
	LoopbackPHY
)

// Options configure Open. The zero value means DefaultOptions.
type Options struct {
	// Queues is the number of RX/TX queue pairs: 1 or 2 (default 1).
	Queues int
	// RxRing and TxRing are ring sizes in descriptors: multiples of 8 from
	// 8 to 4096 (default 512).
	RxRing, TxRing int
	// Pool, when set, is the one buffer pool every queue receives into,
	// and its lock is shared by every queue. When nil, Open makes a pool
	// of PoolBuffers buffers for each queue, so that queues share no lock,
	// and Close closes them.
	Pool *nicdrv.Pool
	// PoolBuffers sizes each queue's pool (default: enough to fill the
	// queue's RX and TX rings twice, at least 1024).
	PoolBuffers int
	// Interrupts enables MSI-X interrupt mode for WaitRx.
	Interrupts bool
	// InterruptInterval is the least time between two interrupts of one
	// vector (EITR; default 50µs, rounded to 256 ns units).
	InterruptInterval time.Duration
	// Promiscuous starts the NIC accepting every frame.
	Promiscuous bool
	// Loopback starts the NIC in a loopback mode (for self-tests).
	Loopback Loopback
	// LinkTimeout bounds Open's wait for the link (default 2s). Open does
	// not fail when the link stays down: check Link or WaitLink.
	LinkTimeout time.Duration
	// RegisterTimeout bounds every wait on a register (default 1s).
	RegisterTimeout time.Duration
	// Memory is how ring memory is allocated (default hugepages;
	// AllowPageable is set when the device's DMA domain accepts pageable
	// memory, as an emulated model's does).
	Memory hugepage.Options
	// HeaderSplit receives with packet split descriptors: the headers of
	// unfragmented IPv4 and IPv6 TCP and UDP frames in one buffer, the
	// payload in a second chained to it (nicdrv's header split; see
	// split.go). Each RX descriptor then holds two pool buffers.
	HeaderSplit bool
	// Placement receives payloads into memory the caller posts
	// (nicdrv.Placer; place.go): packet split descriptors whose buffer 0
	// takes the first 128 bytes of every frame that is not IP (IPv4 and
	// IPv6 frames, its headers), and buffer 1 the rest, in a pool buffer
	// or in a placement. It excludes HeaderSplit.
	Placement bool
	// RSSKey is the Toeplitz key of a two-queue NIC (default
	// DestinationRSSKey, which steers by destination address;
	// MicrosoftRSSKey spreads flows by source too). Info().RSS reports
	// it with the redirection table.
	RSSKey *[hw.RSSKeyLen]byte
}

// DefaultOptions returns one queue pair of 512-descriptor rings, polling.
func DefaultOptions() Options {
	return Options{Queues: 1, RxRing: 512, TxRing: 512, InterruptInterval: 50 * time.Microsecond,
		LinkTimeout: 2 * time.Second, RegisterTimeout: time.Second}
}

func (o *Options) fill() error {
	d := DefaultOptions()
	drv.Default(&o.Queues, d.Queues)
	drv.Default(&o.RxRing, d.RxRing)
	drv.Default(&o.TxRing, d.TxRing)
	drv.Default(&o.InterruptInterval, d.InterruptInterval)
	drv.Default(&o.LinkTimeout, d.LinkTimeout)
	drv.Default(&o.RegisterTimeout, d.RegisterTimeout)
	if o.RSSKey == nil {
		k := DestinationRSSKey
		o.RSSKey = &k
	}
	if o.PoolBuffers == 0 {
		rx := o.RxRing
		if o.HeaderSplit {
			rx *= 2 // a header and a payload buffer per descriptor
		}
		o.PoolBuffers = max(1024, 2*(rx+o.TxRing))
	}
	switch {
	case o.Placement && o.HeaderSplit:
		return fmt.Errorf("e1000e: Placement and HeaderSplit: a queue has one way of filling its packet split descriptors; choose one")
	case o.Queues < 1 || o.Queues > hw.Queues:
		return fmt.Errorf("e1000e: %d queues: the 82574 has 1 or 2", o.Queues)
	case o.RxRing < 8 || o.RxRing > 4096 || o.RxRing%8 != 0:
		return fmt.Errorf("e1000e: RX ring of %d descriptors: want a multiple of 8 from 8 to 4096", o.RxRing)
	case o.TxRing < 8 || o.TxRing > 4096 || o.TxRing%8 != 0:
		return fmt.Errorf("e1000e: TX ring of %d descriptors: want a multiple of 8 from 8 to 4096", o.TxRing)
	case o.InterruptInterval < 0 || o.InterruptInterval > 16*time.Millisecond:
		return fmt.Errorf("e1000e: interrupt interval %v: want 0..16ms", o.InterruptInterval)
	case o.Loopback < LoopbackNone || o.Loopback > LoopbackPHY:
		return fmt.Errorf("e1000e: unknown loopback mode %d", o.Loopback)
	case o.Pool != nil && o.Pool.BufferSize() != nicdrv.BufferSize:
		return fmt.Errorf("e1000e: pool buffers of %d bytes: the driver programs 2048-byte RX buffers; make the pool with BufferSize %d", o.Pool.BufferSize(), nicdrv.BufferSize)
	}
	return nil
}

// MicrosoftRSSKey is the Toeplitz key of Microsoft's RSS documentation,
// which most drivers program: it spreads flows by source and destination.
var MicrosoftRSSKey = [hw.RSSKeyLen]byte{
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
}

// DestinationRSSKey is the key the driver programs by default: Microsoft's
// with key bits 25 to 62 cleared. Bit m of the hash (m = 0 for its most
// significant bit) takes key bit i+m for every set bit i of the input, and
// the redirection index is hash bits m = 25..31; the source address is
// input bits 0..31, so with those key bits clear no source address reaches
// the index, and a datagram's queue is a function of its destination
// address (and, for TCP, its ports) alone. The 82574 has no filter that
// steers by address or port, and hashes UDP by its addresses only, so this
// is what lets a receiver choose an address per queue and have every
// sender's datagrams land there (nicdrv.RSS.DestQueue; transport/nic's
// Options.QueueAddrs). TCP flows still spread by port.
var DestinationRSSKey = func() [hw.RSSKeyLen]byte {
	k := MicrosoftRSSKey
	k[3] &= 0x80 // bit 24 stays
	k[4], k[5], k[6] = 0, 0, 0
	k[7] &= 0x01 // bit 63 stays
	return k
}()

// rssInfo describes what setupRx programs: with two queues, the key and a
// table whose entries alternate between the queues, over IPv4 addresses
// alone for UDP.
func rssInfo(o Options) *nicdrv.RSS {
	if o.Queues != 2 {
		return nil
	}
	r := &nicdrv.RSS{Key: append([]byte(nil), o.RSSKey[:]...), Table: make([]int, hw.RETAEntries)}
	for i := range r.Table {
		r.Table[i] = i & 1
	}
	return r
}

// NIC is an open 82574L. It implements nicdrv.NIC.
type NIC struct {
	dev    pci.Device
	d      drv.Device // the function, BAR0 and register waits
	addr   pci.Address
	opts   Options
	info   nicdrv.Info
	mac    nicdrv.MAC
	pools  *drv.Pools
	waiter drv.RxWaiter

	rings *drv.Rings // the descriptor rings' memory
	rx    []*rxQueue
	tx    []*txQueue
	irqs  []*pci.Interrupt

	rar [hw.RAREntries]bool // receive addresses in use (0 is the station's)
}

var _ nicdrv.NIC = (*NIC)(nil)

func (n *NIC) errorf(op string, err error) error { return n.d.Errorf(op, err) }

func (n *NIC) r32(off int) uint32      { return n.d.Regs.Read32(off) }
func (n *NIC) w32(off int, v uint32)   { n.d.Regs.Write32(off, v) }
func (n *NIC) set32(off int, b uint32) { n.w32(off, n.r32(off)|b) }
func (n *NIC) clr32(off int, b uint32) { n.w32(off, n.r32(off)&^b) }

func (n *NIC) waitReg(name string, reg int, cond func(uint32) bool) error {
	return n.d.WaitReg(name, reg, cond)
}

// identity is the PCI functions Open takes.
var identity = drv.Identity{Match: hw.Is82574, Want: "8086:10d3 (82574L) or 8086:10f6", Model: "82574", BAR0Size: hw.BAR0Size}

// Open brings up the 82574L at dev and returns it ready to move frames. On
// failure everything Open did is undone and the NIC is left quiesced.
func Open(dev pci.Device, o Options) (_ *NIC, err error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	n := &NIC{dev: dev, addr: dev.Address(), opts: o}
	n.d = drv.Device{Dev: dev, Addr: n.addr, RegisterTimeout: o.RegisterTimeout}
	if err := n.d.Attach(identity, o.Pool); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.teardown()
		}
	}()
	if err := n.quiesce(); err != nil {
		return nil, err
	}
	if err := n.reset(); err != nil {
		return nil, err
	}
	n.initHW()
	n.readMAC()
	n.link()
	n.readStats(&nicdrv.Stats{}) // clear the clear-on-read counters

	// Header split on the 82574 writes a frame it does not split whole
	// into buffer 0, so header buffers are packet buffers: no header pool.
	// Placement takes a header buffer for each placement posted.
	po := drv.PoolsOptions{Queues: o.Queues, Shared: o.Pool, Buffers: o.PoolBuffers, Memory: o.Memory, Name: "gomx-e1000e"}
	if o.Placement {
		po.Headers = o.RxRing
	}
	if n.pools, err = drv.NewPools(dev.DMA(), po); err != nil {
		return nil, n.errorf("buffer pools", err)
	}
	if err := n.allocRings(); err != nil {
		return nil, err
	}
	n.setupTx()
	if err := n.setupRx(); err != nil {
		return nil, err
	}
	if o.Interrupts {
		if err := n.setupInterrupts(); err != nil {
			return nil, err
		}
	} else {
		n.w32(hw.IMC, 0xFFFFFFFF)
	}
	// Bus mastering, then RCTL last (QEMU: setting bus master flushes
	// queued frames into the rings at once, so they must be valid).
	if err := pci.SetCommand(dev, pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable); err != nil {
		return nil, n.errorf("enable bus mastering", err)
	}
	n.clr32(hw.CTRL, hw.CtrlGIOMasterDis)
	n.w32(hw.RCTL, n.rctl())
	// Arm: one IMS write for both queues. Queue q's cause is IMS bit
	// 20+q (hw.IntRXQ0, hw.IntRXQ1), so the mask's two low bits, one per
	// queue, move up by 20. An ICR write (write 1 to clear) before it
	// clears the causes the frames taken since the vector last fired
	// latched while it was masked: unmasking a latched cause sends it at
	// once, a wake-up to frames already taken. A STATUS read after them
	// flushes the posted writes before the wait's look (the 82599's arm
	// says why).
	n.waiter = drv.RxWaiter{Queues: o.Queues, Closed: n.d.Closed.Load, Ready: func(q int) (bool, uint32) { return n.rx[q].ready() },
		Arm: func(mask uint64) {
			n.w32(hw.ICR, uint32(mask&3)<<20)
			n.w32(hw.IMS, uint32(mask&3)<<20)
			n.r32(hw.STATUS)
		}, IRQs: n.irqs, Count: &n.d.Intr, Errorf: n.errorf}
	n.info = nicdrv.Info{Driver: "e1000e", Model: "82574L", Addr: n.addr, Queues: o.Queues,
		RxRing: o.RxRing, TxRing: o.TxRing, MaxFrame: hw.MaxFrame, Interrupts: o.Interrupts, HeaderSplit: o.HeaderSplit,
		RSS: rssInfo(o)}
	if o.Placement {
		n.info.PlaceHeader, n.info.PlaceMin = placeHeader, placeLargest-placeSplitMin
	}
	// Wait (bounded) for the link; a link that stays down is a state, not
	// an error.
	_, _ = n.WaitLink(true, o.LinkTimeout)
	return n, nil
}

// quiesce stops whatever a previous driver left running: QEMU 7.2 keeps
// RCTL.EN, TCTL.EN and the ring pointers across a software reset.
//
// Every step runs whatever the one before it found: a NIC whose
// STATUS.GIO_MASTER_ENABLE stays set past the timeout still gets PCI bus
// mastering turned off and its rings zeroed, so it can no longer DMA into
// memory the caller is about to unmap. The timeout is returned after.
func (n *NIC) quiesce() error {
	n.w32(hw.IMC, 0xFFFFFFFF)
	n.w32(hw.RCTL, 0)
	n.clr32(hw.TCTL, hw.TctlEN)
	n.r32(hw.STATUS) // flush
	n.set32(hw.CTRL, hw.CtrlGIOMasterDis)
	gio := n.waitReg("STATUS.GIO_MASTER_ENABLE", hw.STATUS, func(v uint32) bool { return v&hw.StatusGIOMasterEn == 0 })
	var bm error
	if err := pci.ClearCommand(n.dev, pci.CommandBusMaster); err != nil {
		bm = n.errorf("disable bus mastering", err)
	}
	for q := 0; q < hw.Queues; q++ {
		for _, r := range []int{hw.RDH, hw.RDT, hw.TDH, hw.TDT, hw.RDLEN, hw.TDLEN, hw.RDBAL, hw.RDBAH, hw.TDBAL, hw.TDBAH} {
			n.w32(hw.Q(r, q), 0)
		}
	}
	return errors.Join(gio, bm)
}

// restoreResetState puts back the reset values of what the driver changed
// in the data path's format. QEMU 7.2's software reset resets none of it,
// so without this the next driver on the device (the kernel's e1000e, a
// test, an older gomx) would find extended descriptors, RSS, checksum
// reporting or a loopback it did not ask for.
func (n *NIC) restoreResetState() {
	for _, r := range []int{hw.RFCTL, hw.PSRCTL, hw.RXCSUM, hw.MRQC, hw.IVAR, hw.EIAC, hw.IAM} {
		n.w32(r, 0)
	}
	for v := 0; v < hw.MSIXVectors; v++ {
		n.w32(hw.EITR(v), 0)
	}
	n.clr32(hw.CTRLEXT, hw.CtrlExtEIAME|hw.CtrlExtPBAClr|hw.CtrlExtDrvLoad)
	for q := 0; q < hw.Queues; q++ {
		n.set32(hw.Q(hw.TARC, q), hw.TARCEnable)
	}
	for i := 1; i < hw.RAREntries; i++ {
		n.w32(hw.RAH(i), 0)
		n.w32(hw.RAL(i), 0)
	}
	for i := 0; i < hw.MTAEntries; i++ {
		n.w32(hw.MTA+4*i, 0)
	}
	for i := 0; i < hw.RETAEntries/4; i++ {
		n.w32(hw.RETA+4*i, 0)
	}
	if bmcr, err := n.phyRead(hw.PHYControl); err == nil && bmcr&hw.PHYCtlLoop != 0 {
		_ = n.phyWrite(hw.PHYControl, bmcr&^hw.PHYCtlLoop)
	}
	c := n.r32(hw.CTRL)
	if c&(hw.CtrlFrcSpd|hw.CtrlFrcDpx) != 0 {
		n.w32(hw.CTRL, c&^(hw.CtrlFrcSpd|hw.CtrlFrcDpx)|hw.CtrlASDE)
	}
}

// throttleDrain is how long Close waits, with every cause masked, before
// it turns MSI-X off: twice the longer of the vectors' interrupt interval
// (EITR) and QEMU 7.2's least one (E1000E_MIN_XITR, 500 units of 256 ns),
// so that no vector's throttling timer is still running then. QEMU 7.2's
// e1000e asserts that MSI-X is on when such a timer fires and aborts the
// whole machine otherwise (e1000e_intrmgr_on_msix_throttling_timer); a
// real 82574L only waits.
func throttleDrain(interval time.Duration) time.Duration {
	return 2 * max(interval, 500*256*time.Nanosecond)
}

// Fixed waits of the reset sequence (Linux e1000_reset_hw_82571): let
// transactions in flight finish after RX and TX stop, and let the PHY load
// its NVM configuration after the reset.
const (
	quiesceSettle = 10 * time.Millisecond
	phySettle     = 25 * time.Millisecond
)

// reset is the software reset under the MDIO semaphore.
func (n *NIC) reset() error {
	time.Sleep(quiesceSettle)
	if err := n.waitReg("EXTCNF_CTRL.MDIO_SW_OWNERSHIP", hw.EXTCNFCTRL, func(v uint32) bool {
		if v&hw.ExtcnfMDIOSWOwn != 0 {
			return true
		}
		n.w32(hw.EXTCNFCTRL, v|hw.ExtcnfMDIOSWOwn)
		return false
	}); err != nil {
		return err
	}
	n.w32(hw.CTRL, n.r32(hw.CTRL)|hw.CtrlRST)
	n.clr32(hw.EXTCNFCTRL, hw.ExtcnfMDIOSWOwn)
	if err := n.waitReg("CTRL.RST", hw.CTRL, func(v uint32) bool { return v&hw.CtrlRST == 0 }); err != nil {
		return err
	}
	if err := n.waitReg("EECD.AUTO_RD", hw.EECD, func(v uint32) bool { return v&hw.EECDAutoRd != 0 }); err != nil {
		return err
	}
	// The 82573/82574 load PHY configuration from the NVM after the MAC's
	// auto-read is done: Linux gives it 25 ms more.
	time.Sleep(phySettle)
	n.w32(hw.IMC, 0xFFFFFFFF)
	n.r32(hw.ICR)
	return nil
}

// initHW applies the 82574 initialisation bits (Linux init_hw_82571) and
// clears what QEMU 7.2's reset keeps.
func (n *NIC) initHW() {
	for q := 0; q < hw.Queues; q++ {
		n.w32(hw.Q(hw.TXDCTL, q), hw.TxdctlGRAN|hw.TxdctlBit22|1<<hw.TxdctlWTHRESHShift)
		n.w32(hw.Q(hw.RXDCTL, q), hw.RxdctlGRAN)
		tarc := n.r32(hw.Q(hw.TARC, q))
		tarc = tarc&^hw.TARC82574Clr | hw.TARCBit26
		if q < n.opts.Queues {
			tarc |= hw.TARCEnable
		} else {
			tarc &^= hw.TARCEnable
		}
		n.w32(hw.Q(hw.TARC, q), tarc)
	}
	n.clr32(hw.CTRL, hw.Ctrl82574Bit29|hw.CtrlVME)
	ext := n.r32(hw.CTRLEXT)
	ext = ext&^(hw.CtrlExtBit23|hw.CtrlExtIAME|hw.CtrlExtEIAME) | hw.CtrlExtBit22 | hw.CtrlExtDrvLoad
	n.w32(hw.CTRLEXT, ext)
	n.set32(hw.GCR, hw.GCRBit22)
	n.set32(hw.GCR2, hw.GCR2Bit0)
	n.w32(hw.IVAR, 0)
	for v := 0; v < hw.MSIXVectors; v++ {
		n.w32(hw.EITR(v), 0)
	}
	n.w32(hw.ITR, 0)
	n.w32(hw.EIAC, 0)
	n.w32(hw.IAM, 0)
	n.w32(hw.RDTR, 0)
	n.w32(hw.RADV, 0)
	n.w32(hw.TIDV, 0)
	n.w32(hw.TADV, 0)
	n.w32(hw.MRQC, 0)
	n.w32(hw.RXCSUM, 0)
	n.w32(hw.RFCTL, 0)
	n.w32(hw.PSRCTL, 0)
	for i := 1; i < hw.RAREntries; i++ {
		n.w32(hw.RAH(i), 0)
		n.w32(hw.RAL(i), 0)
	}
	for i := 0; i < hw.MTAEntries; i++ {
		n.w32(hw.MTA+4*i, 0)
		n.w32(hw.VFTA+4*i, 0)
	}
	for i := 0; i < hw.RETAEntries/4; i++ {
		n.w32(hw.RETA+4*i, 0)
	}
}

// readMAC takes the station address from receive address 0, which the NIC
// loaded from its NVM.
func (n *NIC) readMAC() {
	lo, hi := n.r32(hw.RAL(0)), n.r32(hw.RAH(0))
	n.mac = nicdrv.MAC{byte(lo), byte(lo >> 8), byte(lo >> 16), byte(lo >> 24), byte(hi), byte(hi >> 8)}
	n.w32(hw.RAH(0), hi|1<<31) // address valid
}

// link tells the MAC to link and lets the PHY autonegotiate, or sets up the
// requested loopback.
func (n *NIC) link() {
	c := n.r32(hw.CTRL)
	c &^= hw.CtrlFrcSpd | hw.CtrlFrcDpx | hw.CtrlLRST | hw.CtrlPHYRST
	c |= hw.CtrlSLU | hw.CtrlASDE
	if n.opts.Loopback == LoopbackPHY {
		// Linux's PHY loopback self-test forces 1000/full.
		c = c&^hw.CtrlASDE | hw.CtrlFrcSpd | hw.CtrlFrcDpx | hw.CtrlSpeed1000 | hw.CtrlFD
	}
	n.w32(hw.CTRL, c)
	bmcr, err := n.phyRead(hw.PHYControl)
	if err == nil {
		if n.opts.Loopback == LoopbackPHY {
			bmcr |= hw.PHYCtlLoop
		} else {
			bmcr &^= hw.PHYCtlLoop
		}
		_ = n.phyWrite(hw.PHYControl, bmcr)
	}
}

func (n *NIC) mdic(v uint32) (uint16, error) {
	n.w32(hw.MDIC, v)
	var got uint32
	if err := n.waitReg("MDIC.READY", hw.MDIC, func(x uint32) bool { got = x; return x&hw.MDICReady != 0 }); err != nil {
		return 0, err
	}
	if got&hw.MDICErr != 0 {
		return 0, n.errorf("MDIC", fmt.Errorf("PHY register %d access failed (MDIC %#08x)", v>>hw.MDICRegShift&0x1F, got))
	}
	return uint16(got), nil
}

func (n *NIC) phyRead(reg int) (uint16, error) {
	return n.mdic(uint32(reg)<<hw.MDICRegShift | hw.PHYAddr<<hw.MDICPHYShift | hw.MDICOpRead)
}

func (n *NIC) phyWrite(reg int, v uint16) error {
	_, err := n.mdic(uint32(v) | uint32(reg)<<hw.MDICRegShift | hw.PHYAddr<<hw.MDICPHYShift | hw.MDICOpWrite)
	return err
}

// allocRings allocates and maps one region for every descriptor ring.
func (n *NIC) allocRings() error {
	q := n.opts.Queues
	rxDesc := hw.DescSize
	if n.opts.HeaderSplit || n.opts.Placement {
		rxDesc = hw.PSDescSize
	}
	size := q * (n.opts.RxRing*rxDesc + n.opts.TxRing*hw.DescSize)
	rings, err := n.d.AllocRings(size, n.opts.Memory, "gomx-e1000e-rings")
	if err != nil {
		return err
	}
	n.rings = rings
	for i := 0; i < q; i++ {
		b, iova, err := rings.Cut(n.opts.RxRing*rxDesc, 0)
		if err != nil {
			return n.errorf("RX ring", err)
		}
		r := newRxQueue(n, i, b, iova)
		n.rx = append(n.rx, r)
		n.d.AddRx(&r.cnt)
	}
	for i := 0; i < q; i++ {
		b, iova, err := rings.Cut(n.opts.TxRing*hw.DescSize, 0)
		if err != nil {
			return n.errorf("TX ring", err)
		}
		t := newTxQueue(n, i, b, iova)
		n.tx = append(n.tx, t)
		n.d.AddTx(&t.cnt)
	}
	return nil
}

// newRxQueue makes RX queue q over ring (its descriptors at iova), whose
// descriptors are packet split ones with header split or placement.
func newRxQueue(n *NIC, q int, ring []byte, iova uint64) *rxQueue {
	dsz := uint32(hw.DescSize)
	if n.opts.HeaderSplit || n.opts.Placement {
		dsz = hw.PSDescSize
	}
	size := uint32(len(ring)) / dsz
	r := &rxQueue{nic: n, q: q, pool: n.pools.Packet[q], ring: ring, iova: iova, size: size, dsz: dsz,
		freeThresh: rxFreeThresh(size), ps: n.opts.HeaderSplit || n.opts.Placement}
	pools := []*nicdrv.Pool{r.pool}
	if n.opts.HeaderSplit {
		pools = append(pools, r.pool) // a payload buffer per slot too
	}
	r.fill = drv.NewRxFill(r.size, pools, &r.cnt.NoBuf)
	r.slot = r.fill.Bufs[0]
	if n.opts.HeaderSplit {
		r.pay = r.fill.Bufs[1]
	}
	if n.opts.Placement {
		r.initPlace()
	}
	return r
}

// newTxQueue makes TX queue q over ring (its descriptors at iova).
func newTxQueue(n *NIC, q int, ring []byte, iova uint64) *txQueue {
	t := &txQueue{nic: n, q: q, ring: ring, iova: iova, size: uint32(len(ring) / hw.DescSize), pools: drv.PoolCheck{DMA: n.dev.DMA()}}
	t.s = drv.NewTxSlots(t.size, n.pools.Packet[q], t.done)
	return t
}

func (n *NIC) setupTx() {
	for _, t := range n.tx {
		clear(t.ring)
		n.w32(hw.Q(hw.TDBAL, t.q), uint32(t.iova))
		n.w32(hw.Q(hw.TDBAH, t.q), uint32(t.iova>>32))
		n.w32(hw.Q(hw.TDLEN, t.q), t.size*hw.DescSize)
		n.w32(hw.Q(hw.TDH, t.q), 0)
		n.w32(hw.Q(hw.TDT, t.q), 0)
	}
	n.w32(hw.TIPG, hw.TIPGDefault)
	n.w32(hw.TCTL, hw.TctlEN|hw.TctlPSP|15<<hw.TctlCTShift|63<<hw.TctlCOLDShift|hw.TctlRTLC|hw.TctlMULR)
}

func (n *NIC) setupRx() error {
	for _, r := range n.rx {
		if err := r.start(); err != nil {
			return err
		}
	}
	if n.opts.HeaderSplit {
		// Buffer sizes first: QEMU latches them when RCTL is written with
		// EN. IP fragments are not split, so they arrive whole.
		n.w32(hw.PSRCTL, psrctl)
		n.w32(hw.RFCTL, hw.RfctlEXTEN|hw.RfctlIPFRSPDis)
	} else if n.opts.Placement {
		// The same order. IP fragments are not split at their
		// headers either: their first 128 bytes go to buffer 0.
		n.w32(hw.PSRCTL, placePSRCTL)
		n.w32(hw.RFCTL, hw.RfctlEXTEN|hw.RfctlIPFRSPDis)
	} else {
		n.w32(hw.RFCTL, hw.RfctlEXTEN)
	}
	rxcsum := uint32(hw.RxcsumIPOFL | hw.RxcsumTUOFL)
	if n.opts.Queues == 2 {
		for i := 0; i < hw.RSSKeyLen/4; i++ {
			k := n.opts.RSSKey[4*i:]
			n.w32(hw.RSSRK+4*i, uint32(k[0])|uint32(k[1])<<8|uint32(k[2])<<16|uint32(k[3])<<24)
		}
		// Alternate entries between the queues (rssInfo says so).
		for i := 0; i < hw.RETAEntries/4; i++ {
			n.w32(hw.RETA+4*i, uint32(hw.RETAQueue1)<<8|uint32(hw.RETAQueue1)<<24)
		}
		n.w32(hw.MRQC, hw.MRQCEnableRSS2|hw.MRQCTCPIPv4|hw.MRQCIPv4)
		rxcsum |= hw.RxcsumPCSD
	}
	n.w32(hw.RXCSUM, rxcsum)
	return nil
}

// rctl is the RCTL value of the NIC's current configuration.
func (n *NIC) rctl() uint32 {
	v := uint32(hw.RctlEN | hw.RctlBAM | hw.RctlSECRC | hw.RctlBSIZE2048)
	if n.opts.HeaderSplit || n.opts.Placement {
		v |= hw.RctlDTYPPS
	}
	if n.opts.Promiscuous {
		v |= hw.RctlUPE | hw.RctlMPE
	}
	if n.opts.Loopback == LoopbackMAC {
		v |= hw.RctlLBMMAC
	}
	return v
}

func (n *NIC) setupInterrupts() error {
	irqs, err := n.dev.EnableInterrupts(3)
	if err != nil {
		return n.errorf("enable MSI-X", fmt.Errorf("%w (%w: use polling, Options.Interrupts false)", err, nicdrv.ErrNotSupported))
	}
	n.irqs = irqs
	ivar := uint32(hw.IVARValid)<<hw.IVARRxQ0Shift | uint32(hw.IVARValid|1)<<hw.IVARRxQ1Shift | uint32(hw.IVARValid|2)<<hw.IVAROtherShift
	n.w32(hw.IVAR, ivar)
	itr := uint32(n.opts.InterruptInterval / (256 * time.Nanosecond))
	for v := 0; v < 3; v++ {
		n.w32(hw.EITR(v), itr)
	}
	rxCauses := uint32(hw.IntRXQ0 | hw.IntRXQ1)
	n.w32(hw.EIAC, rxCauses)
	n.w32(hw.IAM, rxCauses)
	n.set32(hw.CTRLEXT, hw.CtrlExtPBAClr|hw.CtrlExtEIAME)
	n.w32(hw.IMS, hw.IntLSC|hw.IntOther)
	return nil
}

// WaitRx implements nicdrv.NIC: with interrupts it arms the queues'
// causes, looks at their rings again, and only then sleeps on their
// vectors.
func (n *NIC) WaitRx(ctx context.Context, deadline time.Time, queues ...int) (int, error) {
	return n.waiter.Wait(ctx, deadline, queues)
}

// RxBatch implements nicdrv.NIC.
func (n *NIC) RxBatch(q int, bufs []*nicdrv.Buffer) (int, error) {
	if err := n.d.CheckQueue("RX", q, len(n.rx)); err != nil {
		return 0, err
	}
	return n.rx[q].batch(bufs)
}

// TxBatch implements nicdrv.NIC.
func (n *NIC) TxBatch(q int, bufs []*nicdrv.Buffer) (int, error) {
	if err := n.d.CheckQueue("TX", q, len(n.tx)); err != nil {
		return 0, err
	}
	return n.tx[q].batch(bufs)
}

// Close implements nicdrv.NIC.
func (n *NIC) Close() error {
	return drv.Close(&n.d.Mu, &n.d.Closed, n.rx, n.tx, n.teardown)
}

// teardown quiesces the NIC and releases everything, for Close and for a
// failed Open. Nothing is released before the NIC is quiet.
func (n *NIC) teardown() error {
	quiesce := func() error {
		err := n.quiesce()
		n.restoreResetState()
		if n.irqs != nil {
			// MSI-X goes off next (DisableInterrupts): let every
			// vector's throttling timer expire first (throttleDrain).
			time.Sleep(throttleDrain(n.opts.InterruptInterval))
		}
		return err
	}
	return drv.Teardown(&n.d, quiesce, n.irqs != nil, n.rx, n.tx, n.rings, n.pools)
}

// Release implements drv.Releaser: the queue's buffers go back to their
// pools (Close, once the NIC is quiet).
func (r *rxQueue) Release() error {
	err := r.fill.Release()
	if r.place {
		err = errors.Join(err, r.releasePlace())
	}
	return err
}

// Release implements drv.Releaser.
func (t *txQueue) Release() error { return t.s.Release() }
