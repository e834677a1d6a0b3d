// Package ixgbe is the user-space driver of the Intel 82599 10 gigabit NIC
// (X520 and its siblings, PCI 8086:10FB and the other 82599 physical
// functions). It implements nicdrv.NIC over any pci.Device: a real function
// behind vfio-pci, or the in-process model of package emulated.
//
// # Bring-up
//
// Open follows Linux's ixgbe and ixy (shared/spec/nic.md §2.3): it first
// quiesces whatever a previous driver left running (interrupts masked,
// receive off, every queue's enable bit cleared and polled clear, transmit
// DMA off, PCI mastering stopped through CTRL.GIO_DIS and STATUS.GIO), then
// resets the MAC (CTRL.RST with LNK_RST, polled clear), waits for the NVM
// auto-read (EEC.AUTO_RD) and the DMA initialisation (RDRXCTL.DMAIDONE),
// reads the MAC address from receive address 0, sets up the MAC link
// (AUTOC: 10G serial, restart autonegotiation), clears the statistics, and
// programs receive and transmit. Flow Director is initialised before
// receive is enabled, as the datasheet requires: its perfect filter table
// (2048 filters, PBALLOC 64 KiB) is carved out of packet buffer 0.
//
// # Queues and descriptors
//
// Up to 64 RX/TX queue pairs, each with its own enable bit and its own
// buffer pool (and, with header split, a pool of 256-byte header buffers),
// advanced
// descriptors (16 bytes: the read format gives the NIC a packet and, with
// header split, a header buffer; the write-back format returns the length,
// status, checksum results, RSS hash and packet type). Every RX queue gets
// pool buffers of Options.BufferSize (SRRCTL.BSIZEPACKET; 2 KiB by
// default, up to 16 KiB); a frame longer than one buffer (a jumbo frame,
// Options.MaxFrame up to 9018 bytes, in 2 KiB buffers) spans several
// descriptors and is delivered as a chain of Buffers (Buffer.Next), as a
// header split frame is. With several queues RSS spreads IPv4 TCP and UDP
// flows by their Toeplitz hash through the 128-entry redirection table, and
// Options.DropWhenFull (SRRCTL.DROP_EN) lets a queue without free
// descriptors drop rather than stall the others. With Options.HeaderSplit (SRRCTL DESCTYPE 010, PSRTYPE
// naming the IPv4, IPv6, TCP and UDP headers) every descriptor carries a
// header and a packet buffer: the NIC writes the headers of an
// unfragmented IPv4 or IPv6 TCP or UDP datagram into the first, the rest
// into the second, and other frames whole into the packet buffer.
//
// With Options.Placement (SRRCTL DESCTYPE 101, "always use the header
// buffer", 64-byte header buffers, PSRTYPE naming no header) every frame
// splits after its first 64 bytes, and the driver implements
// nicdrv.Placer: a descriptor the caller posts a placement for takes a
// 64-byte header buffer of the queue's header pool and the placement as
// its packet buffer; every other descriptor points its header buffer at
// the start of a pool buffer and its packet buffer 64 bytes further in,
// so such a frame lies whole in one pool Buffer as without split. Pool
// descriptors are handed to the NIC at most 8 ahead of the frames
// delivered, and none while placements are posted and not consumed, so
// that placements posted for the frames a caller expects meet them
// (nicdrv.PlacementState.Ahead says how many come first). With few
// descriptors ahead the NIC holds arriving frames in its packet buffer
// until RxBatch hands it more: leave DropWhenFull off. The last
// Options.PlaceOnly queues get no pool descriptor at all: each takes only
// what is posted (a pool buffer may be posted too), drops a frame that
// finds nothing (SRRCTL.DROP_EN), strips VLAN tags (RXDCTL.VME: a
// placement there holds Info.PlaceOnlyMin = MaxFrame-64 bytes, 4 fewer
// than PlaceMin), and CancelRx stops it (RXDCTL.ENABLE), drops what it
// holds and starts it again empty.
//
// TX uses advanced data descriptors, and a context descriptor per queue
// when a frame asks for checksum offload (each 82599 queue has its own
// contexts, so every queue offloads in hardware). A Buffer with memory
// attached (Buffer.Attach) takes two data descriptors; its frame may be a
// jumbo frame.
//
// # Steering rules
//
// AddRule carries out, in hardware, and returns an ID that RemoveRule takes:
//
//   - RuleEtherType with an EtherType filter (ETQF/ETQS, 8 of them; IPv4
//     and IPv6 cannot be EtherType-filtered);
//   - RuleUDPDestPort with a 5-tuple filter (FTQF and friends, 128; only
//     the protocol and destination port compared) while one is free, then
//     with a Flow Director perfect filter (2048), whose bucket hash the
//     driver computes (hw.FdirBucketHash) as the NIC computes it for every
//     frame;
//   - RuleFlex with a Flow Director perfect filter comparing only the flex
//     word (FDIRCTRL.FLEX_OFFSET, one offset for the NIC, IP frames only);
//   - RuleDestMAC to queue 0, with a spare receive address (127).
//
// Flow Director compares the same fields in every filter, so it holds
// either UDP port rules or flex rules at one offset; it changes from one to
// the other (re-initialised, receive paused for the moment FDIRCTRL takes)
// only while it is empty. A flex rule that cannot go in is refused with
// nicdrv.ErrNotSupported; so are RuleByte and a destination MAC to another
// queue (that needs VMDq pools). A rule whose table is full is refused with
// nicdrv.ErrTableFull, and the error says which table.
//
// The NIC applies rules in its own order: EtherType filters first, then
// 5-tuple filters, then Flow Director, then RSS, then queue 0. A received
// Buffer's Rule names the EtherType filter (its index in the descriptor's
// packet type) or Flow Director filter (FLM, and its software index in the
// descriptor) that steered the frame; a 5-tuple filter is not named in the
// descriptor, so for an IPv4 UDP frame that matched neither of the others
// the driver looks its destination port up among its 5-tuple rules (a map
// replaced, never changed, when they change, so the receive path takes no
// lock).
//
// # Fast path
//
// The fast path reads no register: RxBatch polls the write-back status in
// memory and writes RDT once 32 refilled descriptors have gathered (or the
// NIC runs short); TxBatch writes TDT once per call and reclaims by the DD
// bit of one descriptor in 32, which alone asks for a write-back (RS).
//
// # Interrupts
//
// With Options.Interrupts the driver enables one MSI-X vector per RX queue
// and one for link changes (IVAR, IVAR_MISC; with 64 queues it shares the
// last queue's), in MSI-X mode with auto-clear
// (EIAC) and auto-mask (GPIE.EIAME, EIAM); EITR throttles each vector to one
// message per Options.InterruptInterval, or not at all with
// Options.NoModeration, so that a frame wakes its queue's sleeping thread
// at once. WaitRx on one queue looks at its ring up to 164 times without
// yielding (a frame that follows closely costs no interrupt and no
// register write; while the looks catch none, each arming halves them,
// down to one, with all of them again every 16th arming or once they
// catch a frame), then arms its vector (EIMS_EX, after an EICR write
// that clears the cause the frames it took latched, so that the arming
// does not fire at once for them), looks at the ring again, and only
// then sleeps on the eventfd; a frame that lands between the last look
// and the arming finds the vector armed and raises it. A
// WaitRx on several queues looks at each in turn, as many times over
// them all as the queue that looks longest takes (at least once), arms them all with one EIMS_EX write per register that
// holds one of them (queues 0-31 in EIMS_EX0, 32-63 in EIMS_EX1), looks
// again, and sleeps on their eventfds together (pci.WaitAny). The looks
// count across waits that end at their timeout while the rings stay as
// they were, so a receive loop whose waits are shorter than the looks
// still sleeps. A WaitRx that finds a frame waiting returns at once and
// writes no register, so a busy receiver's fast path stays free of
// register accesses.
//
// # Close
//
// Close masks interrupts, turns receive off, clears every queue's enable
// bit and polls it clear, turns transmit DMA off, stops PCI mastering
// (CTRL.GIO_DIS, STATUS.GIO polled clear) and turns bus mastering off in
// configuration space, and only then unmaps the rings and gives the
// buffers back. Every step is taken even when a wait before it timed out,
// so the NIC can no longer DMA into memory being released; the timeout is
// returned after.
//
// docs/nics.md says how to bind a real 82599 to vfio-pci and run the
// conformance suite on it.
package ixgbe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/pci"
)

// Options configure Open. The zero value means DefaultOptions.
type Options struct {
	// Queues is the number of RX/TX queue pairs: 1 to 64 (default 1).
	Queues int
	// RxRing and TxRing are ring sizes in descriptors: multiples of 8 from
	// 32 to 8192 (default 512).
	RxRing, TxRing int
	// Pool, when set, is the one buffer pool every queue receives into
	// (its buffers must be BufferSize bytes), and its lock is shared by every
	// queue. When nil, Open makes a pool of PoolBuffers buffers for each
	// queue, so that queues share no lock, and Close closes them.
	Pool *nicdrv.Pool
	// PoolBuffers sizes each queue's pool (default: enough to fill the
	// queue's RX and TX rings twice, at least 1024); a PlaceOnly queue's
	// pool holds at most RxRing buffers, the most it can have posted.
	PoolBuffers int
	// BufferSize is the size of each pool buffer, and each RX queue's
	// packet buffer size (SRRCTL.BSIZEPACKET, in KiB): a power of two
	// from 2048 (the default) to 16384, the most BSIZEPACKET takes. A
	// pool buffer of at least MaxFrame bytes receives every frame whole
	// in one descriptor; with Placement it must be (see Placement).
	BufferSize int
	// MaxFrame is the largest frame without FCS (default 1518, at least
	// 1514; up to 9018 for jumbo frames, which arrive as chains of
	// Buffers when they are longer than BufferSize, and are sent from one
	// buffer or with Buffer.Attach). A frame with a VLAN tag may be 4
	// bytes longer, but not on a PlaceOnly queue, which strips the tag:
	// MaxFrame = MTU + 14 lets a placement there be exactly a full
	// frame's payload (Info.PlaceOnlyMin).
	MaxFrame int
	// Interrupts enables MSI-X interrupt mode for WaitRx.
	Interrupts bool
	// InterruptInterval is the least time between two interrupts of one
	// vector (EITR, in 2 µs units; default 50µs).
	InterruptInterval time.Duration
	// NoModeration turns every vector's throttle off (EITR interval 0),
	// and InterruptInterval is not used: a frame that lands on an armed
	// queue raises its vector at once, so a thread asleep in WaitRx wakes
	// on the frame itself. A busy queue still interrupts little: its
	// vector masks itself as it fires (auto-mask), and WaitRx arms it
	// again only once it found the ring empty.
	NoModeration bool
	// Promiscuous starts the NIC accepting every frame.
	Promiscuous bool
	// HeaderSplit receives with header split (see the package doc).
	HeaderSplit bool
	// Placement receives payloads into memory the caller posts
	// (nicdrv.Placer; see the package doc): every RX queue splits every
	// frame after its first 64 bytes (SRRCTL DESCTYPE 101). It excludes
	// HeaderSplit, and each placed frame takes one descriptor, so every
	// buffer the NIC may fill must hold the largest frame, which is
	// MaxFrame+4 with a VLAN tag (the 82599 admits a tagged frame 4 bytes
	// past MAXFRS.MFS): MaxFrame+4 at most BufferSize (jumbo frames with
	// BufferSize 16384).
	Placement bool
	// PlaceOnly, with Placement, keeps the last PlaceOnly RX queues for
	// placement alone (nicdrv.Info.PlaceOnly): the driver hands them no
	// pool buffer of its own and sets their SRRCTL.DROP_EN, so a frame
	// steered there that finds nothing posted is dropped instead of
	// holding the packet buffer. Steer frames to them with EtherType
	// rules. At most Queues-1: queue 0 takes the rest of the traffic,
	// and the queues beside the PlaceOnly ones then keep their whole
	// ring of pool descriptors, as without placement (a placement posted
	// there comes after them all).
	PlaceOnly int
	// DropWhenFull sets SRRCTL.DROP_EN on every RX queue: a queue with no
	// free descriptor drops its frames (counted in Stats.RxNoDescriptor)
	// instead of holding them in the NIC's packet buffer, which is shared,
	// so that one slow queue cannot stall the others (Linux's choice with
	// several queues and no flow control). Off, the packet buffer holds
	// frames until the queue has room, and drops only when it is full.
	DropWhenFull bool
	// LinkTimeout bounds Open's wait for the link (default 2s). Open does
	// not fail when the link stays down: check Link or WaitLink.
	LinkTimeout time.Duration
	// RegisterTimeout bounds every wait on a register (default 1s).
	RegisterTimeout time.Duration
	// Memory is how ring memory is allocated (default hugepages).
	Memory hugepage.Options
}

// DefaultOptions returns one queue pair of 512-descriptor rings, polling.
func DefaultOptions() Options {
	return Options{Queues: 1, RxRing: 512, TxRing: 512, MaxFrame: hw.MaxFrame, InterruptInterval: 50 * time.Microsecond,
		LinkTimeout: 2 * time.Second, RegisterTimeout: time.Second}
}

// maxJumbo is the largest MaxFrame the driver takes: a 9000-byte MTU.
const maxJumbo = 9018

// minFrame is the least MaxFrame the driver takes: an untagged frame of a
// 1500-byte MTU, so that a PlaceOnly queue, stripping VLAN tags, writes at
// most 1450 bytes after the 64-byte header buffer.
const minFrame = 1514

// vlanTag is how much longer than MaxFrame a frame the 82599 admits may
// be: a VLAN-tagged one may be MAXFRS.MFS+4 bytes (HLREG0.JUMBOEN is
// always set), so a placement and a placing queue's pool buffer
// hold MaxFrame+vlanTag bytes.
const vlanTag = 4

// maxBufferSize is the largest BufferSize: SRRCTL.BSIZEPACKET's 16 KiB.
const maxBufferSize = 16384

func (o *Options) fill() error {
	d := DefaultOptions()
	drv.Default(&o.Queues, d.Queues)
	drv.Default(&o.RxRing, d.RxRing)
	drv.Default(&o.TxRing, d.TxRing)
	drv.Default(&o.MaxFrame, d.MaxFrame)
	drv.Default(&o.BufferSize, nicdrv.BufferSize)
	drv.Default(&o.InterruptInterval, d.InterruptInterval)
	drv.Default(&o.LinkTimeout, d.LinkTimeout)
	drv.Default(&o.RegisterTimeout, d.RegisterTimeout)
	if o.PoolBuffers == 0 {
		per := (o.MaxFrame + o.BufferSize - 1) / o.BufferSize
		o.PoolBuffers = max(1024, 2*(o.RxRing+o.TxRing), o.RxRing*per+o.TxRing)
	}
	switch {
	case o.Queues < 1 || o.Queues > hw.MaxQueuePairs:
		return fmt.Errorf("ixgbe: %d queues: want 1..%d", o.Queues, hw.MaxQueuePairs)
	case o.RxRing < 32 || o.RxRing > 8192 || o.RxRing%8 != 0:
		return fmt.Errorf("ixgbe: RX ring of %d descriptors: want a multiple of 8 from 32 to 8192", o.RxRing)
	case o.TxRing < 32 || o.TxRing > 8192 || o.TxRing%8 != 0:
		return fmt.Errorf("ixgbe: TX ring of %d descriptors: want a multiple of 8 from 32 to 8192", o.TxRing)
	case o.MaxFrame < minFrame || o.MaxFrame > maxJumbo:
		return fmt.Errorf("ixgbe: MaxFrame %d: want %d..%d (a 1500-byte MTU untagged at least, a 9000-byte one at most)", o.MaxFrame, minFrame, maxJumbo)
	case o.InterruptInterval < 0 || o.InterruptInterval > time.Duration(hw.EitrIntervalMask>>hw.EitrIntervalShift)*hw.EitrUnitNanos:
		return fmt.Errorf("ixgbe: interrupt interval %v: want 0..1022µs", o.InterruptInterval)
	case o.NoModeration && !o.Interrupts:
		return fmt.Errorf("ixgbe: NoModeration without Interrupts: it turns the interrupt throttle off; set Interrupts too, or leave it out when polling")
	case o.Placement && o.HeaderSplit:
		return fmt.Errorf("ixgbe: Placement and HeaderSplit: a queue has one descriptor type; choose one")
	case o.PlaceOnly < 0 || o.PlaceOnly > 0 && (!o.Placement || o.PlaceOnly >= o.Queues):
		return fmt.Errorf("ixgbe: PlaceOnly %d with Placement %v and %d queues: want Placement and 0..Queues-1 (queue 0 takes the unsteered traffic)", o.PlaceOnly, o.Placement, o.Queues)
	case o.BufferSize < nicdrv.BufferSize || o.BufferSize > maxBufferSize || o.BufferSize&(o.BufferSize-1) != 0:
		return fmt.Errorf("ixgbe: BufferSize %d: want a power of two from %d to %d (SRRCTL.BSIZEPACKET, 1..16 KiB)", o.BufferSize, nicdrv.BufferSize, maxBufferSize)
	case o.Placement && o.MaxFrame+vlanTag > o.BufferSize:
		return fmt.Errorf("ixgbe: Placement with MaxFrame %d and %d-byte pool buffers: a placed frame takes one descriptor, and a pool buffer must hold any frame the NIC may put where a placement was expected, VLAN-tagged ones of MaxFrame+%d bytes too; set BufferSize to at least %d", o.MaxFrame, o.BufferSize, vlanTag, o.MaxFrame+vlanTag)
	case o.Pool != nil && o.Pool.BufferSize() != o.BufferSize:
		return fmt.Errorf("ixgbe: pool buffers of %d bytes: the driver programs %d-byte RX buffers (BufferSize); make the pool with BufferSize %d", o.Pool.BufferSize(), o.BufferSize, o.BufferSize)
	}
	return nil
}

// rssKey is the default Toeplitz key (Microsoft's RSS document's).
var rssKey = [hw.RSSKeyLen]byte{
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
}

// Flow Director as the driver sets it up: the 64 KiB table of 2048 perfect
// filters, and packet buffer 0 shrunk by as much.
const (
	fdirPBAlloc = hw.FdirctrlPBAlloc64K
	fdirMem     = 64 << 10
	rxPBTotal   = 512 << 10
)

// NIC is an open 82599. It implements nicdrv.NIC.
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

	rules ruleTables
	// fivePorts maps a destination port to the 5-tuple rule that takes
	// it, for the receive path (ruleOf); nil when no 5-tuple rule is in.
	fivePorts atomic.Pointer[map[uint16]nicdrv.RuleID]
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
var identity = drv.Identity{Match: hw.Is82599, Want: "an 82599 physical function (8086:10fb and siblings)", Model: "82599", BAR0Size: hw.BAR0Size}

// Open brings up the 82599 at dev and returns it ready to move frames. On
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
			_ = n.teardown()
		}
	}()
	if err := n.quiesce(); err != nil {
		return nil, err
	}
	if err := n.reset(); err != nil {
		return nil, err
	}
	n.readMAC()
	n.link()
	n.readStats(&nicdrv.Stats{}) // clear the clear-on-read counters

	po := drv.PoolsOptions{Queues: o.Queues, Shared: o.Pool, Buffers: o.PoolBuffers, BufferSize: o.BufferSize, Memory: o.Memory, Name: "gomx-ixgbe"}
	if o.HeaderSplit || o.Placement {
		po.Headers = 2 * o.RxRing
	}
	if o.Pool == nil && o.PlaceOnly > 0 {
		// A PlaceOnly queue's pool serves only the pool buffers a
		// caller posts there (a ring's worth at most), and sends nothing.
		po.Small, po.SmallBuffers = o.PlaceOnly, min(o.PoolBuffers, o.RxRing)
	}
	if n.pools, err = drv.NewPools(dev.DMA(), po); err != nil {
		return nil, n.errorf("buffer pools", err)
	}
	if err := n.allocRings(); err != nil {
		return nil, err
	}
	// Bus mastering before the queues start: their enable bits need it to
	// fetch descriptors.
	if err := pci.SetCommand(dev, pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable); err != nil {
		return nil, n.errorf("enable bus mastering", err)
	}
	if err := n.setupRx(); err != nil {
		return nil, err
	}
	if err := n.setupTx(); err != nil {
		return nil, err
	}
	if o.Interrupts {
		if err := n.setupInterrupts(); err != nil {
			return nil, err
		}
	}
	n.set32(hw.CTRLEXT, hw.CtrlExtDrvLoad)
	n.w32(hw.RXCTRL, hw.RxctrlRXEN)
	n.waiter = drv.RxWaiter{Queues: o.Queues, Closed: n.d.Closed.Load, Ready: func(q int) (bool, uint32) { return n.rx[q].ready() },
		Arm: n.arm, IRQs: n.irqs, Spin: armSpin, Count: &n.d.Intr, Errorf: n.errorf}
	n.info = nicdrv.Info{Driver: "ixgbe", Model: "82599", Addr: n.addr, Queues: o.Queues, RxRing: o.RxRing,
		TxRing: o.TxRing, MaxFrame: o.MaxFrame, Interrupts: o.Interrupts, HeaderSplit: o.HeaderSplit}
	if o.Placement {
		n.info.PlaceHeader, n.info.PlaceMin, n.info.PlaceOnly = placeHeader, o.MaxFrame+vlanTag-placeHeader, o.PlaceOnly
		if o.PlaceOnly > 0 {
			n.info.PlaceOnlyMin = o.MaxFrame - placeHeader // RXDCTL.VME strips the tag (rxQueue.start)
		}
	}
	_, _ = n.WaitLink(true, o.LinkTimeout)
	return n, nil
}

// quiesce stops whatever a previous driver (or this one, at Close) left
// running. Every step runs whatever the one before it found, so that bus
// mastering ends up off even when a queue or the GIO master does not stop
// in time; the timeouts are returned after.
func (n *NIC) quiesce() error {
	var errs []error
	n.w32(hw.EIMC, 0x7FFFFFFF)
	n.w32(hw.EIMCEx(0), 0xFFFFFFFF)
	n.w32(hw.EIMCEx(1), 0xFFFFFFFF)
	n.clr32(hw.RXCTRL, hw.RxctrlRXEN)
	for q := 0; q < hw.MaxQueuePairs; q++ {
		if v := n.r32(hw.RXDCTL(q)); v&hw.RxdctlEnable != 0 {
			n.w32(hw.RXDCTL(q), v&^hw.RxdctlEnable)
			errs = append(errs, n.waitReg(fmt.Sprintf("RXDCTL%d.ENABLE", q), hw.RXDCTL(q), func(v uint32) bool { return v&hw.RxdctlEnable == 0 }))
		}
		if v := n.r32(hw.TXDCTL(q)); v&hw.TxdctlEnable != 0 {
			n.w32(hw.TXDCTL(q), v&^hw.TxdctlEnable)
			errs = append(errs, n.waitReg(fmt.Sprintf("TXDCTL%d.ENABLE", q), hw.TXDCTL(q), func(v uint32) bool { return v&hw.TxdctlEnable == 0 }))
		}
	}
	n.clr32(hw.DMATXCTL, hw.DmatxctlTE)
	n.set32(hw.CTRL, hw.CtrlGIODis)
	errs = append(errs, n.waitReg("STATUS.GIO", hw.STATUS, func(v uint32) bool { return v&hw.StatusGIO == 0 }))
	if err := pci.ClearCommand(n.dev, pci.CommandBusMaster); err != nil {
		errs = append(errs, n.errorf("disable bus mastering", err))
	}
	return errors.Join(errs...)
}

// resetSettle is how long Linux lets the MAC settle after a reset.
const resetSettle = 10 * time.Millisecond

// reset is the MAC and link reset, then the waits for the NVM auto-read
// and the DMA initialisation.
func (n *NIC) reset() error {
	n.w32(hw.CTRL, n.r32(hw.CTRL)|hw.CtrlRstMask)
	if err := n.waitReg("CTRL.RST", hw.CTRL, func(v uint32) bool { return v&hw.CtrlRstMask == 0 }); err != nil {
		return err
	}
	time.Sleep(resetSettle)
	n.w32(hw.EIMC, 0x7FFFFFFF)
	n.r32(hw.EICR)
	if err := n.waitReg("EEC.AUTO_RD", hw.EEC, func(v uint32) bool { return v&hw.EECAutoRd != 0 }); err != nil {
		return err
	}
	return n.waitReg("RDRXCTL.DMAIDONE", hw.RDRXCTL, func(v uint32) bool { return v&hw.RdrxctlDMAIDone != 0 })
}

// readMAC takes the station address from receive address 0, which the NIC
// loaded from its NVM.
func (n *NIC) readMAC() {
	lo, hi := n.r32(hw.RAL(0)), n.r32(hw.RAH(0))
	n.mac = nicdrv.MAC{byte(lo), byte(lo >> 8), byte(lo >> 16), byte(lo >> 24), byte(hi), byte(hi >> 8)}
	n.w32(hw.RAH(0), hi|1<<31)
}

// link sets up the MAC link: 10G serial, autonegotiation restarted.
func (n *NIC) link() {
	a := n.r32(hw.AUTOC)
	a = a&^(hw.AutocLMSMask|hw.AutocPMAPMDMask) | hw.AutocLMS10GSerial
	n.w32(hw.AUTOC, a)
	n.w32(hw.AUTOC, a|hw.AutocANRestart)
}

// allocRings allocates and maps one region for every descriptor ring.
func (n *NIC) allocRings() error {
	q := n.opts.Queues
	size := q * (n.opts.RxRing + n.opts.TxRing) * hw.DescSize
	rings, err := n.d.AllocRings(size, n.opts.Memory, "gomx-ixgbe-rings")
	if err != nil {
		return err
	}
	n.rings = rings
	for i := 0; i < q; i++ {
		b, iova, err := rings.Cut(n.opts.RxRing*hw.DescSize, hw.RingAlign)
		if err != nil {
			return n.errorf("RX ring", err)
		}
		r := newRxQueue(n, i, b, iova)
		n.rx = append(n.rx, r)
		n.d.AddRx(&r.cnt)
	}
	for i := 0; i < q; i++ {
		b, iova, err := rings.Cut(n.opts.TxRing*hw.DescSize, hw.RingAlign)
		if err != nil {
			return n.errorf("TX ring", err)
		}
		t := newTxQueue(n, i, b, iova)
		n.tx = append(n.tx, t)
		n.d.AddTx(&t.cnt)
	}
	return nil
}

func (n *NIC) setupRx() error {
	o := n.opts
	// Packet buffer 0 makes room for the Flow Director table; the others
	// are unused (no DCB).
	n.w32(hw.RXPBSIZE(0), rxPBTotal-fdirMem)
	for i := 1; i < 8; i++ {
		n.w32(hw.RXPBSIZE(i), 0)
	}
	hl := n.r32(hw.HLREG0) | hw.Hlreg0RxCRCStrp
	// JUMBOEN always, as Linux's ixgbe: MAXFRS.MFS (FCS included) then
	// bounds the frames at MaxFrame untagged, MaxFrame+4 tagged; without
	// it the MAC drops an untagged frame past 1514 (hw.StdFrame).
	hl |= hw.Hlreg0JumboEn
	n.w32(hw.HLREG0, hl&^hw.Hlreg0Lpbk)
	n.w32(hw.MAXFRS, uint32(o.MaxFrame+4)<<hw.MaxfrsShift)
	n.set32(hw.RDRXCTL, hw.RdrxctlCRCStrip)
	n.w32(hw.FCTRL, n.fctrl())
	n.w32(hw.MCSTCTRL, hw.McstctrlMFE)
	for i := 1; i < hw.RAREntries; i++ {
		n.w32(hw.RAH(i), 0)
		n.w32(hw.RAL(i), 0)
	}
	for i := 0; i < hw.MTAEntries; i++ {
		n.w32(hw.MTA+4*i, 0)
	}
	n.set32(hw.CTRLEXT, hw.CtrlExtNSDis)
	switch {
	case o.HeaderSplit:
		n.w32(hw.PSRTYPE(0), hw.PsrtypeTCPHdr|hw.PsrtypeUDPHdr|hw.PsrtypeIPv4Hdr|hw.PsrtypeIPv6Hdr|hw.PsrtypeL2Hdr)
	case o.Placement:
		// No header parsed: every frame splits at BSIZEHEADER.
		n.w32(hw.PSRTYPE(0), 0)
	}
	// RSS over IPv4 (TCP and UDP ports too), spreading the redirection
	// table over the queues in turn.
	if o.Queues > 1 {
		for i := 0; i < hw.RSSKeyLen/4; i++ {
			n.w32(hw.RSSRK+4*i, binary.LittleEndian.Uint32(rssKey[4*i:]))
		}
		for i := 0; i < hw.RETAEntries/4; i++ {
			var v uint32
			for j := 0; j < 4; j++ {
				v |= uint32((4*i+j)%o.Queues) << (8 * j)
			}
			n.w32(hw.RETA+4*i, v)
		}
		n.w32(hw.MRQC, hw.MrqcRSSEn|hw.MrqcTCPIPv4|hw.MrqcIPv4|hw.MrqcUDPIPv4)
		n.w32(hw.RXCSUM, hw.RxcsumPCSD)
	} else {
		n.w32(hw.MRQC, 0)
		n.w32(hw.RXCSUM, 0)
	}
	if err := n.initFdir(fdirPorts, 0); err != nil {
		return err
	}
	for _, r := range n.rx {
		if err := r.start(); err != nil {
			return err
		}
	}
	return nil
}

// fctrl is the FCTRL value of the NIC's current filtering.
func (n *NIC) fctrl() uint32 {
	v := uint32(hw.FctrlBAM)
	if n.opts.Promiscuous {
		v |= hw.FctrlUPE | hw.FctrlMPE
	}
	return v
}

func (n *NIC) setupTx() error {
	n.set32(hw.HLREG0, hw.Hlreg0TxCRCEn|hw.Hlreg0TxPadEn)
	n.w32(hw.DTXMXSZ, 0xFFFF)
	n.clr32(hw.RTTDCS, hw.RttdcsArbDis)
	for _, t := range n.tx {
		clear(t.ring)
		n.w32(hw.TDBAL(t.q), uint32(t.iova))
		n.w32(hw.TDBAH(t.q), uint32(t.iova>>32))
		n.w32(hw.TDLEN(t.q), t.size*hw.DescSize)
		n.w32(hw.TDH(t.q), 0)
		n.w32(hw.TDT(t.q), 0)
		n.w32(hw.TXDCTL(t.q), 36<<hw.TxdctlPThreshShift|8<<hw.TxdctlHThreshShift|4<<hw.TxdctlWThreshShift)
	}
	n.set32(hw.DMATXCTL, hw.DmatxctlTE)
	for _, t := range n.tx {
		n.set32(hw.TXDCTL(t.q), hw.TxdctlEnable)
		if err := n.waitReg(fmt.Sprintf("TXDCTL%d.ENABLE", t.q), hw.TXDCTL(t.q), func(v uint32) bool { return v&hw.TxdctlEnable != 0 }); err != nil {
			return err
		}
	}
	return nil
}

// arm unmasks the vectors of the queues in mask (drv.RxWaiter.Arm): one
// EIMS_EX write per register that holds one of them, after one EICR write
// that clears the causes queues 0-15 latched while their vectors were
// masked. Every frame taken since a vector fired (auto-mask) left its
// cause set, and unmasking a vector with its cause set sends it at once:
// the sleep that follows would wake to the frames already taken, and the
// message would mask the vector again, so the wait armed a second time
// before it slept. On mxbench overlap's 4 MiB exchanges that was 16 of
// the 37 sleeps of an exchange (docs/nics.md). A frame that lands after
// the clear sets its cause again and raises the vector once unmasked; one
// that landed before is found by the wait's look after arming: a read of
// STATUS after the writes makes sure of that on a real NIC, whose posted
// writes may reach it after the look (a frame written back between the
// look and the clear would lose its cause and its wake-up); the read
// returns only once they have, and after the NIC's earlier write-backs.
// Queues 16 and up have no cause bit in EICR, and keep the extra wake.
func (n *NIC) arm(mask uint64) {
	c := uint32(mask) & hw.EicrRTxQMask
	if c != 0 {
		n.w32(hw.EICR, c) // write 1 to clear, queue causes of vectors 0-15 (IVAR maps queue q to vector q)
	}
	for r := range 2 {
		if bits := uint32(mask >> (32 * r)); bits != 0 {
			n.w32(hw.EIMSEx(r), bits)
		}
	}
	if c != 0 {
		n.r32(hw.STATUS) // flush the posted writes before the look
	}
}

// armSpin is how many looks at its rings WaitRx takes at most, in
// interrupt mode, before it arms the vectors, without yielding
// (drv.RxWaiter.Spin: fewer while they catch no frame). A
// frame that follows the last one closely is taken without the register
// write that arms, the interrupt and the wake-up. The looks do not yield:
// a progress thread locked to its OS thread paid two context switches for
// each runtime.Gosched between looks (measured in docs/nics.md).
const armSpin = 164

// setupInterrupts enables one MSI-X vector per RX queue and one for link
// changes; with 64 queues, which take every vector, link changes share the
// last queue's (a waiter woken by one looks at its ring and sleeps again).
func (n *NIC) setupInterrupts() error {
	q := n.opts.Queues
	other := min(q, hw.MSIXVectors-1)
	irqs, err := n.dev.EnableInterrupts(other + 1)
	if err != nil {
		return n.errorf("enable MSI-X", fmt.Errorf("%w (%w: use polling, Options.Interrupts false)", err, nicdrv.ErrNotSupported))
	}
	n.irqs = irqs
	n.w32(hw.GPIE, hw.GpieMSIXMode|hw.GpiePBA|hw.GpieEIAME|hw.GpieOCD)
	ivar := make([]uint32, (q+1)/2)
	for i := 0; i < q; i++ {
		ivar[i/2] |= (uint32(i) | hw.IVARValid) << hw.IVARRxShift(i)
	}
	for i, v := range ivar {
		n.w32(hw.IVAR(i), v)
	}
	n.w32(hw.IVARMisc, (uint32(other)|hw.IVARValid)<<hw.IVARMiscOtherShift)
	itr := uint32(n.opts.InterruptInterval/(hw.EitrUnitNanos*time.Nanosecond)) << hw.EitrIntervalShift & hw.EitrIntervalMask
	if n.opts.NoModeration {
		itr = 0
	}
	for v := 0; v <= other; v++ {
		n.w32(hw.EITR(v), itr|hw.EitrCntWDis)
	}
	queues := uint64(1)<<q - 1
	n.w32(hw.EIAC, uint32(queues)&hw.EicrRTxQMask)
	n.w32(hw.EIAMEx(0), uint32(queues))
	n.w32(hw.EIAMEx(1), uint32(queues>>32))
	n.w32(hw.EIMS, hw.EicrLSC)
	return nil
}

// WaitRx implements nicdrv.NIC: with interrupts it arms the queues'
// vectors, looks at their rings again, and only then sleeps on their
// eventfds.
func (n *NIC) WaitRx(ctx context.Context, deadline time.Time, queues ...int) (int, error) {
	return n.waiter.Wait(ctx, deadline, queues)
}

var _ nicdrv.RxServer = (*NIC)(nil)

// RxServed implements nicdrv.RxServer: with interrupts, the next WaitRx on
// queue q arms its vector after its first look.
func (n *NIC) RxServed(q int) { n.waiter.Served(q) }

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
		n.clr32(hw.CTRLEXT, hw.CtrlExtDrvLoad)
		return err
	}
	return drv.Teardown(&n.d, quiesce, n.irqs != nil, n.rx, n.tx, n.rings, n.pools)
}

// Release implements drv.Releaser.
func (t *txQueue) Release() error { return t.s.Release() }
