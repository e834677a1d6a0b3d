package emulated

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport/fault"
)

// The 82599 (ixgbe) model, split as its driver is: this file holds the
// platform (options, the NICs' PCI functions, cables, statistics) and each
// NIC's state; ixgbe_regs.go the control path (registers, reset, link,
// interrupts); ixgbe_rules.go receive steering (the filters, Flow Director,
// RSS); ixgbe_tx.go transmit; ixgbe_rx.go receive.

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
	// thread that makes each register access (CLOCK_THREAD_CPUTIME_ID),
	// for a benchmark that locks its goroutine to its thread: on a loaded
	// machine the figure then leaves out the time the thread waited for a
	// CPU. Without it the model reads no clock around an access (two
	// clock reads per tail write cost about a fifth of a microsecond per
	// message of mx over a model pair) and ModelTime stays zero.
	ThreadCPUTime bool
	// AsyncDMA gives each NIC DMA engines of its own, as a NIC has: a
	// TDT write records the tail and returns, and the NIC's transmit
	// goroutine (started by the first tail write with work for it)
	// fetches the descriptors, reads the frames through the IOMMU, puts
	// them on the cable and writes the descriptors back, in the order and
	// with the checks of the synchronous path; its receive goroutine
	// (started by the first frame off the wire) takes the frames that
	// came off the wire into the NIC's packet buffer through the receive
	// path (the RX ring writes, their write-backs and interrupts), so
	// each NIC writes its own host's memory. Without it the goroutine that
	// writes TDT does all of that before the write returns, so every
	// frame is on the wire (and in a cabled peer's RX ring) when it
	// does: tests that look for a frame right after sending it want
	// that; a benchmark of the driver's or mx's own CPU time wants the
	// engines, whose time is not the driver's. Close and resets stop the
	// engines and wait for them (ixgbe_dma.go).
	AsyncDMA bool
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
//     is not enabled, is a violation, but for a queue with a ring and
//     SRRCTL.DROP_EN, stopped for a moment, which drops the frame (QPRDC);
//   - RX uses advanced descriptors only: SRRCTL sets the packet buffer size
//     (BSIZEPACKET, 1 to 16 KiB, else a violation; a frame longer than one
//     buffer spans several descriptors, EOP on the last, but on a queue
//     that always uses the header buffer, where this model keeps a frame
//     to one descriptor, such a frame is a violation and dropped) and,
//     with header split, the header buffer, into which the
//     headers PSRTYPE names go (up to the TCP or UDP header of an
//     unfragmented IPv4 or IPv6 datagram, else the IP header), the rest to
//     the packet buffer; with header split "always use the header buffer"
//     (DESCTYPE 101) a frame the parser does not split (not IP, or
//     PSRTYPE naming no header) puts its first BSIZEHEADER bytes in the
//     header buffer and the rest in the packet buffer, so every frame
//     longer than the header buffer arrives in two; HLREG0.JUMBOEN and MAXFRS bound the frame size (an
//     802.1Q-tagged one may be 4 bytes longer), a queue with RXDCTL.VME strips the tag (its TCI in the
//     write-back's VLAN field, status VP), and HLREG0.RXCRCSTRP must agree with RDRXCTL.CRCSTRIP;
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
// included. A frame is delivered synchronously on the TDT write, or by
// the NICs' own DMA engines after it with IXGBEOptions.AsyncDMA. A frame
// corrupted on the wire is counted in CRCERRS and dropped.
type IXGBE struct {
	nicPlatform[*ixgbeNIC]
}

// IXGBEStats counts what one emulated 82599 saw and did.
type IXGBEStats struct {
	// TxFrames and RxFrames are frames sent to the wire and written into
	// RX rings. A frame is counted sent once the wire (or the loopback)
	// took it: when a cabled peer's TxFrames reached k, the first k frames
	// are in this NIC's ring, held, counted dropped or (AsyncDMA) counted
	// in RxQueued.
	TxFrames, RxFrames uint64
	// RxDropped counts frames that reached the NIC but were not received
	// (RX off, link down, no room, filtered to a drop, bad size or FCS).
	RxDropped uint64
	// RxBadFCS counts frames that came off the wire with a bad FCS.
	RxBadFCS uint64
	// Pending is the number of frames in the packet buffer waiting for RX
	// descriptors now.
	Pending int
	// RxQueued is the number of frames off the wire waiting for the
	// NIC's receive engine (IXGBEOptions.AsyncDMA) now, or being received
	// by it: zero, once the sender's TxFrames counted a frame, says the
	// frame was received (written, held or dropped).
	RxQueued int
	// Interrupts counts MSI-X messages delivered.
	Interrupts uint64
	// TailWrites counts RDT and TDT writes.
	TailWrites uint64
	// ModelTime is the thread CPU time spent in the model's register
	// accesses (which includes the transmission and reception a TDT or
	// RDT write causes) and, with IXGBEOptions.AsyncDMA, in its DMA
	// engines' passes: the model's share of a run on the same cores as
	// the driver. Counted only with IXGBEOptions.ThreadCPUTime.
	ModelTime time.Duration
	// Violations counts programming errors (see IXGBE); LastViolation
	// describes the latest.
	Violations    uint64
	LastViolation string
}

// NewIXGBE builds the platform.
func NewIXGBE(o IXGBEOptions) (*IXGBE, error) {
	if err := nicOptions("ixgbe", &o.Ports, &o.Pending, DefaultIXGBEOptions().Pending, &o.Clock); err != nil {
		return nil, err
	}
	p := &IXGBE{nicPlatform[*ixgbeNIC]{platform: platform{iommu: newIOMMU(o.IOVABase, o.Scatter)}, regName: hw.RegName}}
	// The queues read txMu, mu and the IOMMU in shards of their own
	// (queueLock), but with AsyncDMA an engine pass takes txMu for
	// writing and serves every queue itself, which a shard per queue
	// would make dearer and no queue faster; the NIC's locks and the
	// platform's IOMMU then keep one shard.
	shards := queueShards + 1
	if o.AsyncDMA {
		shards = 1
	}
	p.iommu.mu = newQueueLock(shards)
	for i := 0; i < o.Ports; i++ {
		f := newNICFunction(0x10+uint8(i), p.iommu, hw.MSIXVectors, hw.BAR0Size, initIXGBEConfig)
		n := &ixgbeNIC{cpuTime: o.ThreadCPUTime, async: o.AsyncDMA, regs: make([]uint32, hw.BAR0Size/4)}
		n.nicCore = newNICCore(n, f, i, hw.MSIXVectors, o.Pending, shards, o.Clock, [6]byte{0x02, 0x1B, 0x21, 0x00, 0x00, byte(i)})
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

func initIXGBEConfig(f *Function) {
	// An Ethernet controller (class 02h, subclass 00h) with a 64-bit
	// memory BAR0 and MSI-X at 0x70: 64 vectors, table and PBA in BAR4 (as
	// the 82599).
	baseConfig{vendor: hw.VendorIntel, device: hw.Device82599SFP, class: 0x02, subclass: 0x00, bar0: 0xF0000000 | 0x4,
		msix: 0x70, vectors: hw.MSIXVectors, table: 4, pba: 0x2000 | 4}.init(f)
	binary.LittleEndian.PutUint16(f.cfg[pci.ConfigSubVendorID:], hw.VendorIntel)
}

// Cable joins ports a and b of this platform with a perfect cable.
func (p *IXGBE) Cable(a, b int) error {
	if a < 0 || b < 0 || a >= len(p.nics) || b >= len(p.nics) {
		return fmt.Errorf("emulated ixgbe: cable %d-%d: want ports of 0..%d", a, b, len(p.nics)-1)
	}
	return Cable(p.Port(a), p.Port(b))
}

// WireFaults returns what the fault model of port i's cable did so far.
func (p *IXGBE) WireFaults(i int) fault.Counts { return wireFaults(p.nics[i]) }

// WaitSent waits, at most timeout, until port i has put count frames on
// the wire since it was made and every port has received what came to it
// (RxQueued 0 on each): with AsyncDMA the NICs' engines send after the
// driver's TxBatch returns, and receive after that. It returns an error
// that says how far they got when the time runs out.
func (p *IXGBE) WaitSent(i int, count uint64, timeout time.Duration) error {
	queued := func() (n int64) {
		for _, m := range p.nics {
			n += m.in.queued.Load()
		}
		return n
	}
	for deadline := time.Now().Add(timeout); p.nics[i].txFrames() < count || queued() != 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			return fmt.Errorf("model 82599 %d sent %d frames in %v (want %d), %d frames wait for an engine", i, p.nics[i].txFrames(), timeout, count, queued())
		}
	}
	return nil
}

// Stats returns port i's counters.
func (p *IXGBE) Stats(i int) IXGBEStats {
	n := p.nics[i]
	s := IXGBEStats{TxFrames: n.txFrames(), RxDropped: n.nDrop.Load(), RxBadFCS: n.nBadFCS.Load(),
		Interrupts: n.interrupts(), Violations: n.nViol.Load(), TailWrites: n.nTail.Load(), ModelTime: time.Duration(n.modelNS.Load())}
	for q := range n.rxq {
		s.RxFrames += n.rxq[q].recv.Load()
		s.TailWrites += n.rxq[q].tails.Load() + n.txw[q].tails.Load()
	}
	if v := n.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	n.mu.Lock()
	s.Pending = n.hold.len()
	n.mu.Unlock()
	s.RxQueued = int(n.in.queued.Load())
	return s
}

// ixgbeNIC is one 82599: the state every NIC model keeps (nicCore, with
// its locks) and the 82599's own.
//
// # Locks
//
// The 82599's queues share no lock on the chip, and the model's data path
// takes none that another queue's takes for long: a TDT write and its ring
// walk (ixgbe_tx.go) hold txMu and mu for reading and the TX queue's walk
// lock; a frame's delivery into its RX ring (ixgbe_rx.go) holds mu for
// reading and the RX queue's lock (rxq), and an RDT write mu for reading
// alone (it stores RDT atomically, so it waits for no delivery, unless a
// writer of mu waits for one: a register read or Stats, whom an RWMutex
// lets no later reader pass). They
// read txMu, mu and the IOMMU in their queue's shard (queueLock; a
// delivery reads mu in the shard its destination port picks), and count
// into their queue's own lines (txWalk, rxQueue), so two queues moving
// frames at once on two CPUs write no cache line in common, as long as
// each delivery's port picks its queue's shard (transport/nic's UDP ports
// 40000+q do; Ethernet-framed and non-IPv4 frames all read shard 0). The
// registers shared by
// all queues (control, filters, interrupt routing, the rings' base, length
// and enable bits) are written only under mu held for writing, which so
// waits out every queue's access in flight; a queue's head and tail are
// written under mu for reading with the queue's lock, or under mu for
// writing. Each MSI-X vector's cause and mask bits (its bits of EICR and
// EIMS), its EITR deadline and deferred message are its own (nicCore's
// irqVector), under its own lock with mu for reading, or under mu for
// writing: a delivery raises its queue's vector, and an arming masks and
// unmasks it, under that vector's lock alone, in the queue's shard of mu
// (where vector and queue match, as transport/nic maps them), so two
// queues' interrupts share no lock; EICR's other causes and EIMS's other
// bits are the control path's, under mu for writing. What a queue's DMA
// counts (frames, octets, descriptors) is its queue's (queueTally, under
// the queue's lock), what the data path counts outside a queue's lock is
// atomic (fast), and foldLocked adds both to the registers and acc under
// mu for writing before they are read; frames waiting for descriptors
// (hold) are under holdMu. Lock order: txMu, a walk lock, mu, then holdMu, an
// RX queue's lock, a vector's lock.
type ixgbeNIC struct {
	nicCore
	cpuTime bool // ModelTime in thread CPU time (IXGBEOptions.ThreadCPUTime)
	async   bool // IXGBEOptions.AsyncDMA

	// rxq is each RX queue's lock and receive state.
	rxq [hw.MaxQueuePairs]rxQueue

	// txw is each TX queue's walk state, under its own lock (and txMu
	// for reading, or for writing with AsyncDMA's transmit engine).
	txw [hw.MaxQueuePairs]txWalk

	fast fastCounts

	// holdHook, when a test sets it (before frames flow), runs at each
	// holdStage a receive or a refill passes.
	holdHook func(holdStage)

	// Under mu.
	regs    []uint32
	macLink bool // the driver set up the MAC link (AUTOC.AN_RESTART)
	txCtx   [hw.MaxQueuePairs][2]hw.TxDesc
	fdir    map[uint32][]fdirFilter // by bucket
	fdirN   int
	octets  [len(octetRegs)]octetLatch // what each octet counter's low half read
	fdirHit atomic.Uint32              // FDIRMATCH, counted by the data path
	fdirMis atomic.Uint32              // FDIRMISS, counted by the data path
	// ftqfOn has bit i set while FTQF(i) has QUEUE_EN: the receive
	// path compares a frame with those filters alone, where the chip
	// compares all 128 at once and a loop over every one cost the
	// model about half a microsecond per frame.
	ftqfOn [hw.FiveTupleEntries / 64]uint64

	// dma holds the running DMA engines (AsyncDMA), txEngine's and
	// rxEngine's, or nil: set under mu held for reading (engine, which
	// loads it without mu first), cleared under mu held for writing
	// (stopEngine).
	dma [2]atomic.Pointer[dmaEngine]

	in wireIn // frames off the wire waiting for the engine (AsyncDMA)

	// nTail counts the tail writes of the queues the model does not run
	// (the others count their own: txWalk, rxQueue).
	nTail   atomic.Uint64
	modelNS atomic.Int64
}

// txFrames is the frames sent to the wire: what the queues handed on.
func (n *ixgbeNIC) txFrames() uint64 {
	var s uint64
	for q := range n.txw {
		s += n.txw[q].sent.Load()
	}
	return s
}

// rxQueue is one RX queue's lock and what its deliveries use besides the
// registers: the IOMMU hints, one for each kind of access, as an IOTLB
// keeps the translations of the rings and of the buffers at once (one
// hint for all would miss at every access where they alternate, a
// descriptor and then its buffer in another mapping, and each miss costs
// a search of the mappings): the ring, the header buffer and the packet
// buffer (a pool buffer, or a placement in the receiver's memory).
type rxQueue struct {
	mu   sync.Mutex
	hint [3]int
	sum  queueTally // what its deliveries counted
	// What the queue counts outside its tally, on a line no other
	// queue writes: RDT writes not yet folded into the access counts
	// (rdt), RDT writes taken (tails: IXGBEStats.TailWrites) and frames
	// written into the ring (recv: IXGBEStats.RxFrames).
	rdt, tails, recv atomic.Uint64
	_                [64]byte // apart from the next queue's
}

// The statistics registers the data path counts (fastCounts.stat).
// (What a queue counts for every frame it moves is in its queueTally.)
const (
	statRUC = iota
	statROC
	statMPC
	statQPRDC
	nStats = statQPRDC + hw.QueueStats
)

// statRegs is each counted statistic's register.
var statRegs = func() (r [nStats]int) {
	r[statRUC], r[statROC], r[statMPC] = hw.RUC, hw.ROC, hw.MPC(0)
	for q := range hw.QueueStats {
		r[statQPRDC+q] = hw.QPRDC(q)
	}
	return r
}()

// fastCounts is what the data path counts without mu held for writing and
// outside a queue's lock: statistics of frames dropped (cleared by a
// reset) and register accesses (not), until foldLocked adds them to the
// registers and acc.
type fastCounts struct {
	stat   [nStats]atomic.Uint64
	mask   [queueShards + 1]maskCounts // writes of maskRegs, by mu's shard
	status atomic.Uint64               // reads of STATUS
}

// maskCounts is the writes of each of maskRegs that held one shard of mu
// (writeMask), on a line of its own.
type maskCounts struct {
	n [len(maskRegs)]atomic.Uint64
	_ [64 - 8*len(maskRegs)%64]byte
}

// foldLocked implements nicHooks.
func (n *ixgbeNIC) foldLocked() {
	f := &n.fast
	for i := range f.stat {
		v := f.stat[i].Swap(0)
		if v == 0 {
			continue
		}
		n.regs[statRegs[i]/4] += uint32(v)
	}
	for q := range n.rxq {
		if v := n.rxq[q].rdt.Swap(0); v != 0 {
			n.acc.add(&n.acc.writes, hw.RDT(q), v)
		}
		if v := n.txw[q].tdt.Swap(0); v != 0 {
			n.acc.add(&n.acc.writes, hw.TDT(q), v)
		}
	}
	for s := range f.mask {
		for i, off := range maskRegs {
			if v := f.mask[s].n[i].Swap(0); v != 0 {
				n.acc.add(&n.acc.writes, off, v)
			}
		}
	}
	if v := f.status.Swap(0); v != 0 {
		n.acc.add(&n.acc.reads, hw.STATUS, v)
	}
	for q := range n.rxq {
		n.foldTally(&n.rxq[q].sum, &rxTallyRegs, &n.acc.rxFetch, &n.acc.rxWB)
	}
	for q := range n.txw {
		n.foldTally(&n.txw[q].sum, &txTallyRegs, &n.acc.txFetch, &n.acc.txWB)
	}
}

// tallyRegs are the statistics registers a direction's queueTally goes
// to: frames to each of frames, broadcast and multicast frames to bcast
// and mcast, octets to each 64-bit register (its low half) of octets.
type tallyRegs struct {
	frames       [2]int
	bcast, mcast int
	octets       []int
}

var (
	rxTallyRegs = tallyRegs{[2]int{hw.GPRC, hw.TPR}, hw.BPRC, hw.MPRC, []int{hw.GORCL, hw.TORL}}
	txTallyRegs = tallyRegs{[2]int{hw.GPTC, hw.TPT}, hw.BPTC, hw.MPTC, []int{hw.GOTCL}}
)

// octetLatch is a 64-bit octet counter as its low half's read found it.
type octetLatch struct {
	v   uint64
	set bool // the low half was read, and the high half not since
}

// foldTally adds t to the registers r names and to the descriptor counts
// fetch and wb, and zeroes it. Under mu.
func (n *ixgbeNIC) foldTally(t *queueTally, r *tallyRegs, fetch, wb *uint64) {
	*fetch += t.fetch
	*wb += t.wb
	for _, off := range r.frames {
		n.regs[off/4] += uint32(t.frames)
	}
	n.regs[r.bcast/4] += uint32(t.bcast)
	n.regs[r.mcast/4] += uint32(t.mcast)
	for _, off := range r.octets {
		n.count64(off, t.octets)
	}
	*t = queueTally{}
}

// clearStats forgets the statistics counted since the last fold (a
// reset), keeping the access counts. Under mu.
func (n *ixgbeNIC) clearStats() {
	for i := range n.fast.stat {
		n.fast.stat[i].Store(0)
	}
	for q := range n.rxq {
		t := &n.rxq[q].sum
		*t = queueTally{fetch: t.fetch, wb: t.wb}
	}
	for q := range n.txw {
		t := &n.txw[q].sum
		*t = queueTally{fetch: t.fetch, wb: t.wb}
	}
}
