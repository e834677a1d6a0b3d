package ioat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// IsDSA reports whether dev is a DSA function the driver knows (by its
// PCI IDs).
func IsDSA(dev pci.Device) bool {
	id, err := pci.ReadID(dev)
	return err == nil && id.Vendor == dsahw.VendorIntel && dsahw.Devices[id.Device] != ""
}

// dsaDevice is one open DSA function shared by its work queues: the
// register files, the capabilities read at open, and the command lock.
// The function is configured once, when the first WQ opens it (OpenDSA),
// and reset when the last one closes.
type dsaDevice struct {
	dev    pci.Device
	addr   pci.Address
	regs   pci.Registers
	portal pci.Registers
	name   string
	opcap  [4]uint64
	gencap uint64
	wqOff  int // WQCFG table
	stride int // WQCFG entry size
	irqs   []*pci.Interrupt
	cmdTO  time.Duration

	mu   sync.Mutex // commands, and the open count
	open int
}

// cmd runs a device command and waits (bounded) for CMDSTS.active to
// clear; it fails naming the command and the error code.
func (d *dsaDevice) cmd(name string, c, operand uint32) error {
	d.regs.Write32(dsahw.RegCmd, dsahw.Command(c, operand))
	w := startWait(d.cmdTO)
	for i := 0; ; i++ {
		s := d.regs.Read32(dsahw.RegCmdSts)
		if s == 0xFFFFFFFF {
			return opErr(d.addr, "CMDSTS", fmt.Errorf("%s: the register reads all ones: the device is gone (or memory decoding is off)", name))
		}
		if s&dsahw.CmdStsActive == 0 {
			if code := uint8(s & dsahw.CmdStsErrMask); code != dsahw.CmdOK {
				return opErr(d.addr, "CMDSTS", fmt.Errorf("%w: %s failed with %s", ErrDescriptor, name, dsahw.CmdErrString(code)))
			}
			return nil
		}
		if w.expired() {
			return opErr(d.addr, "CMDSTS", fmt.Errorf("%w: %s still active after %v", ErrTimeout, name, d.cmdTO))
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(5 * time.Microsecond)
		}
	}
}

// OpenDSA brings up the DSA function behind dev the way SPDK and DPDK do
// under VFIO, and returns its work queues, each a Queue an Engine can
// drive: it checks the IDs, enables memory decoding and bus mastering,
// refuses a device another driver has enabled (unless o.TakeOver), resets
// it, reads GENCAP, WQCAP, GRPCAP, ENGCAP and OPCAP, puts engine i and
// dedicated WQ i in group i (further engines spread over the groups),
// shares total_wq_size among the WQs, enables the device and each WQ,
// and starts each WQ with a no-op. nWQ is how many WQs to configure (0:
// one per engine, at most WQCAP's and GRPCAP's counts). Every step is
// undone if a later one fails.
func OpenDSA(dev pci.Device, nWQ int, o Options) (_ []*WQ, err error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	addr := dev.Address()
	id, err := pci.ReadID(dev)
	if err != nil {
		return nil, err
	}
	name := dsahw.Devices[id.Device]
	if id.Vendor != dsahw.VendorIntel || name == "" {
		return nil, opErr(addr, "probe", fmt.Errorf("%w: ID %04x:%04x is not a DSA (8086:0b25, 11fb, 1212)", ErrNotCBDMA, id.Vendor, id.Device))
	}
	regs, err := dev.BAR(dsahw.BARRegs)
	if err != nil {
		return nil, err
	}
	portal, err := dev.BAR(dsahw.BARPortal)
	if err != nil {
		return nil, fmt.Errorf("ioat: %s: DSA portals (BAR2): %w", addr, err)
	}
	d := &dsaDevice{dev: dev, addr: addr, regs: regs, portal: portal, name: name, cmdTO: o.ResetTimeout}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if err := pci.SetCommand(dev, pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = pci.ClearCommand(dev, pci.CommandBusMaster) })
	sts := regs.Read32(dsahw.RegGenSts)
	switch {
	case sts == 0xFFFFFFFF:
		return nil, opErr(addr, "GENSTS", fmt.Errorf("%w: reads all ones: the device is gone", ErrNotCBDMA))
	case sts&dsahw.StateMask != dsahw.StateDisabled && !o.TakeOver:
		return nil, opErr(addr, "GENSTS", fmt.Errorf("%w: the device is %s: another driver (the kernel's idxd, a DPDK or SPDK process, or an earlier process that never closed it) has it configured. Stop that owner, or set Options.TakeOver to reset it", pci.ErrBusy, dsahw.StateName(sts)))
	}
	if err := d.cmd("RESET_DEVICE", dsahw.CmdResetDevice, 0); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = d.cmd("RESET_DEVICE", dsahw.CmdResetDevice, 0) })
	if s := regs.Read32(dsahw.RegGenSts) & dsahw.StateMask; s != dsahw.StateDisabled {
		return nil, opErr(addr, "GENSTS", fmt.Errorf("%w: %s after RESET_DEVICE, want disabled", ErrTimeout, dsahw.StateName(s)))
	}
	d.gencap = regs.Read64(dsahw.RegGenCap)
	wqcap := regs.Read64(dsahw.RegWQCap)
	total, numWQs, _ := dsahw.WQCap(wqcap)
	groups := dsahw.GroupCount(regs.Read64(dsahw.RegGrpCap))
	engines := dsahw.EngineCount(regs.Read64(dsahw.RegEngCap))
	for i := range d.opcap {
		d.opcap[i] = regs.Read64(dsahw.RegOpCap + 8*i)
	}
	tables := regs.Read64(dsahw.RegTableOff)
	grpOff := int(tables>>dsahw.TableGrpCfgShift&0xFFFF) * dsahw.TableUnit
	d.wqOff = int(tables>>dsahw.TableWQCfgShift&0xFFFF) * dsahw.TableUnit
	d.stride = dsahw.WQCfgStride(wqcap)
	switch {
	case d.gencap&dsahw.GenCapConfigEn == 0:
		return nil, opErr(addr, "GENCAP", fmt.Errorf("%w: the device's configuration is not writable (GENCAP config_en clear): configure its WQs with accel-config and use the kernel's user WQs", pci.ErrNotSupported))
	case wqcap&dsahw.WQCapDedicated == 0:
		return nil, opErr(addr, "WQCAP", fmt.Errorf("%w: the device offers no dedicated WQs", pci.ErrNotSupported))
	case numWQs == 0 || engines == 0 || groups == 0 || total == 0:
		return nil, opErr(addr, "WQCAP", fmt.Errorf("%w: %d WQs of %d entries, %d engines, %d groups", ErrNotCBDMA, numWQs, total, engines, groups))
	case !dsahw.HasOp(d.opcap, dsahw.OpMemMove) || !dsahw.HasOp(d.opcap, dsahw.OpBatch) || !dsahw.HasOp(d.opcap, dsahw.OpNoop):
		return nil, opErr(addr, "OPCAP", fmt.Errorf("%w: OPCAP lacks memory move, batch or no-op (%#x)", pci.ErrNotSupported, d.opcap[0]))
	}
	limit := min(numWQs, engines, groups, total)
	if nWQ == 0 {
		nWQ = min(limit, 4)
	}
	if nWQ < 0 || nWQ > limit {
		return nil, opErr(addr, "WQCAP", fmt.Errorf("%d work queues: the device offers 1..%d (min of %d WQs, %d engines, %d groups): %w", nWQ, limit, numWQs, engines, groups, ErrBadRequest))
	}
	// Groups: engine i and WQ i in group i; spare engines spread over the
	// used groups. Every other group and WQ is cleared.
	for g := 0; g < groups; g++ {
		base := grpOff + g*dsahw.GrpCfgSize
		for w := 0; w < 4; w++ {
			regs.Write64(base+dsahw.GrpCfgWQs+8*w, 0)
		}
		var engs uint64
		if g < nWQ {
			regs.Write64(base+dsahw.GrpCfgWQs, 1<<g)
			for e := g; e < engines; e += nWQ {
				engs |= 1 << e
			}
		}
		regs.Write64(base+dsahw.GrpCfgEngines, engs)
		regs.Write32(base+dsahw.GrpCfgFlags, 0)
	}
	size := total / nWQ
	xfer, batch := dsahw.MaxXferShift(d.gencap), dsahw.MaxBatchShift(d.gencap)
	for w := 0; w < numWQs; w++ {
		base := d.wqOff + w*d.stride
		if w >= nWQ {
			regs.Write32(base+dsahw.WQCfgSize, 0)
			continue
		}
		regs.Write32(base+dsahw.WQCfgSize, uint32(size))
		regs.Write32(base+dsahw.WQCfgThresh, 0)
		regs.Write32(base+dsahw.WQCfgMode, dsahw.WQModeDedic|1<<dsahw.WQPrioShift)
		regs.Write32(base+dsahw.WQCfgLimits, dsahw.WQLimits(xfer, batch))
	}
	if o.Interrupts {
		irqs, err := dev.EnableInterrupts(1 + nWQ)
		if err != nil {
			return nil, fmt.Errorf("ioat: %s: interrupts requested but unavailable (%d MSI-X vectors: one for errors, one per WQ; open without Interrupts to poll): %w", addr, 1+nWQ, err)
		}
		d.irqs = irqs
		undo = append(undo, func() { _ = dev.DisableInterrupts() })
		regs.Write32(dsahw.RegGenCtrl, dsahw.GenCtrlSoftErrIntEn)
	}
	if err := d.cmd("ENABLE_DEVICE", dsahw.CmdEnableDevice, 0); err != nil {
		return nil, err
	}
	wqs := make([]*WQ, 0, nWQ)
	undo = append(undo, func() {
		for _, q := range wqs {
			q.freeRing()
		}
	})
	for i := 0; i < nWQ; i++ {
		if err := d.cmd(fmt.Sprintf("ENABLE_WQ %d", i), dsahw.CmdEnableWQ, uint32(i)); err != nil {
			return nil, err
		}
		if st := regs.Read32(d.wqOff+i*d.stride+dsahw.WQCfgState) >> dsahw.WQStateShift; st != dsahw.WQStateEnable {
			return nil, opErr(addr, "WQCFG", fmt.Errorf("%w: WQ %d state %d after ENABLE_WQ, want enabled", ErrTimeout, i, st))
		}
		q, err := newWQ(d, i, nWQ, size, xfer, batch, o)
		if err != nil {
			return nil, err
		}
		wqs = append(wqs, q)
	}
	d.open = nWQ
	for _, q := range wqs {
		if err := q.selfStart(); err != nil {
			return nil, err
		}
	}
	return wqs, nil
}

// unit is one descriptor posted to a WQ portal: a single descriptor of
// the ring or a batch descriptor naming a run of them. Each takes one WQ
// entry until its completion record is written.
type unit struct {
	first, n uint64 // ring indexes [first, first+n)
	// redo marks a unit whose entry re-runs the rest of descriptors a
	// page fault cut short (the kernel path: WQ.redo); waiting, one
	// whose re-run a shared WQ has not accepted yet.
	redo, waiting bool
}

// WQ drives one dedicated work queue of a DSA through its portal. Like a
// Channel it has one owner, who enqueues, submits and polls; Engine adds
// locking and scheduling.
//
// Descriptors are built in a ring in DMA memory. Submit posts what was
// enqueued since the last Submit: one descriptor as itself, several as
// batch descriptors whose lists are runs of the ring (split at the ring's
// end, at IOVA discontinuities and at the batch limit). Each posted
// descriptor (a unit) takes a WQ entry until its completion record is
// written, and no more than the WQ's size are outstanding, since a
// descriptor past that would be dropped silently; what does not fit waits
// in the ring and Poll posts it as entries free. Members of a batch ask
// for a record only on failure (CRAV without RCR), so a successful batch
// costs the device one record write.
type WQ struct {
	d     *dsaDevice
	idx   int
	info  Info
	opts  Options
	stats Stats

	mem      *hugepage.Region
	memMap   *pci.Mapping
	ring     []byte // descriptors, 64 bytes each
	recs     []byte // member records, 32 bytes each, one per ring slot
	urecs    []byte // unit records, 32 bytes each, one per WQ entry
	slotIOVA []uint64
	recIOVA  []uint64
	urecIOVA []uint64
	slots    []slot
	size     uint64 // ring slots
	mask     uint64
	units    []unit
	wqSize   uint64
	maxXfer  int
	maxBatch int
	intH     uint16 // completion interrupt handle (0: none)
	irq      *pci.Interrupt
	dma      pci.DMA

	// The kernel path (OpenUserWQ): the portal mapped from the WQ's
	// character device instead of BAR2, ENQCMD on a shared WQ, and
	// process virtual addresses, whose page faults are resumed.
	user      *userWQ
	shared    bool
	redo      []uint64 // ring indexes to re-run after a page fault, oldest first
	redoTries int      // faults of redo[0] so far
	closing   bool

	head, posted, tail, reaped uint64 // ring indexes
	uHead, uTail               uint64 // units posted, completed
	stall                      int
	stallAt                    time.Time
	closed                     bool
	broken                     error
	rec                        [dsahw.DescSize]byte // the portal write's staging
}

var _ Queue = (*WQ)(nil)

func newWQ(d *dsaDevice, idx, nWQ, size int, xferShift, batchShift uint, o Options) (*WQ, error) {
	q := &WQ{d: d, idx: idx, opts: o, wqSize: uint64(size), maxXfer: 1 << min(xferShift, 31), maxBatch: 1 << batchShift, dma: d.dev.DMA()}
	q.info = Info{Addr: d.addr, Index: idx, Channels: nWQ, Platform: hw.Platform(d.name),
		MaxTransfer: q.maxXfer, Fill: dsahw.HasOp(d.opcap, dsahw.OpFill), RingSize: o.RingSize}
	if id, err := pci.ReadID(d.dev); err == nil {
		q.info.Device = id.Device
	}
	if len(d.irqs) > 1+idx {
		q.irq = d.irqs[1+idx]
		q.intH = uint16(1 + idx)
		q.info.Interrupts = true
	}
	if err := q.allocRing(); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *WQ) allocRing() error {
	r := q.opts.RingSize
	ringBytes, recBytes, urecBytes := r*dsahw.DescSize, r*dsahw.ComplSize, int(q.wqSize)*dsahw.ComplSize
	mo := q.opts.Memory
	mo.AllowPageable = mo.AllowPageable || pci.AcceptsPageable(q.dma)
	mem, err := hugepage.Alloc(ringBytes+recBytes+urecBytes, mo)
	if err != nil {
		return fmt.Errorf("ioat: %s: WQ %d descriptor ring: %w", q.d.addr, q.idx, err)
	}
	m, err := q.dma.Map(mem.Bytes())
	if err != nil {
		mem.Close()
		return fmt.Errorf("ioat: %s: map WQ %d ring for DMA: %w", q.d.addr, q.idx, err)
	}
	q.mem, q.memMap = mem, m
	q.info.MemoryDegraded = mem.Degraded()
	b := mem.Bytes()
	q.ring = b[:ringBytes:ringBytes]
	q.recs = b[ringBytes : ringBytes+recBytes : ringBytes+recBytes]
	q.urecs = b[ringBytes+recBytes : ringBytes+recBytes+urecBytes]
	q.size, q.mask = uint64(r), uint64(r-1)
	q.slots = make([]slot, r)
	q.units = make([]unit, q.wqSize)
	if q.user != nil {
		q.redo = make([]uint64, 0, q.maxBatch)
	}
	iovas := func(base, n, stride int) ([]uint64, error) {
		out := make([]uint64, n)
		for i := range out {
			iova, contig, err := m.IOVA(base + i*stride)
			if err != nil || contig < stride || iova%uint64(stride) != 0 {
				return nil, fmt.Errorf("ioat: %s: WQ %d ring entry at %d is not a %d-byte aligned, contiguous IOVA (%#x): %w", q.d.addr, q.idx, base+i*stride, stride, iova, ErrBadRequest)
			}
			out[i] = iova
		}
		return out, nil
	}
	if q.slotIOVA, err = iovas(0, r, dsahw.DescSize); err == nil {
		if q.recIOVA, err = iovas(ringBytes, r, dsahw.ComplSize); err == nil {
			q.urecIOVA, err = iovas(ringBytes+recBytes, int(q.wqSize), dsahw.ComplSize)
		}
	}
	if err != nil {
		q.freeRing()
		return err
	}
	return nil
}

func (q *WQ) freeRing() {
	if q.memMap != nil {
		_ = q.dma.Unmap(q.memMap)
		q.memMap = nil
	}
	if q.mem != nil {
		q.mem.Close()
		q.mem = nil
	}
}

// selfStart runs a no-op through the freshly enabled WQ and checks that
// it completes.
func (q *WQ) selfStart() error {
	if err := q.EnqueueNull(^uint64(0)); err != nil {
		return err
	}
	q.Submit()
	var out [1]Completion
	w := startWait(q.opts.StartTimeout)
	for q.Poll(out[:]) == 0 {
		if w.expired() {
			if q.user != nil {
				return opErr(q.d.addr, "start", fmt.Errorf("%w: %s's start-up no-op did not complete in %v: the WQ takes no descriptors (is it enabled? see %s)",
					ErrTimeout, q.user.wq.Name, q.opts.StartTimeout, q.user.dir))
			}
			return opErr(q.d.addr, "start", fmt.Errorf("%w: WQ %d's start-up no-op did not complete in %v (GENSTS %s, SWERR %#x)",
				ErrTimeout, q.idx, q.opts.StartTimeout, dsahw.StateName(q.d.regs.Read32(dsahw.RegGenSts)), q.d.regs.Read64(dsahw.RegSWErr)))
		}
		time.Sleep(2 * time.Microsecond)
	}
	if out[0].Err != nil {
		return fmt.Errorf("ioat: %s: WQ %d start-up no-op failed: %w", q.d.addr, q.idx, out[0].Err)
	}
	return nil
}

// Info describes the work queue: Index is the WQ's number, RingSize the
// software ring, MaxTransfer 2^max_xfer_shift.
func (q *WQ) Info() Info { return q.info }

// Stats returns the work queue's counters (Doorbells counts portal
// writes).
func (q *WQ) Stats() Stats { return q.stats }

// MaxTransfer is the largest transfer one descriptor moves.
func (q *WQ) MaxTransfer() int { return q.maxXfer }

// Interrupt returns the WQ's completion vector, nil when interrupts are
// off.
func (q *WQ) Interrupt() *pci.Interrupt { return q.irq }

// rearm is a no-op: each completion that asks for an interrupt sends one
// MSI-X message.
func (q *WQ) rearm() {}

func (q *WQ) countInterrupt() { q.stats.Interrupts++ }

// Free returns how many descriptors can be enqueued now.
func (q *WQ) Free() int { return int(q.size - 1 - (q.head - q.tail)) }

// Outstanding returns how many descriptors are enqueued and not yet
// reported by Poll.
func (q *WQ) Outstanding() int { return int(q.head - q.reaped) }

func (q *WQ) usable() error {
	if !q.closed && q.broken == nil {
		return nil // inlined: the fast path of every enqueue
	}
	return q.unusable()
}

func (q *WQ) unusable() error {
	if q.closed {
		return opErr(q.d.addr, "enqueue", ErrClosed)
	}
	return q.broken
}

// EnqueueCopy adds a memory move of n bytes from src at srcOff to dst at
// dstOff, split at the transfer limit and at IOVA discontinuities, as
// Channel.EnqueueCopy does. Nothing runs until Submit.
func (q *WQ) EnqueueCopy(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if err := checkRange("copy destination", dst, dstOff, n); err != nil {
		return err
	}
	if err := checkRange("copy source", src, srcOff, n); err != nil {
		return err
	}
	if n == 0 {
		return q.EnqueueNull(tag)
	}
	return q.enqueue(dsahw.OpMemMove, dst, dstOff, src, srcOff, n, 0, tag)
}

// EnqueueFill adds a fill of n bytes at dst/dstOff with the 64-bit
// pattern (byte i gets byte i%8), split like EnqueueCopy. It fails with
// ErrNoFill when OPCAP lacks memory fill.
func (q *WQ) EnqueueFill(dst *pci.Mapping, dstOff, n int, pattern uint64, tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if !q.info.Fill {
		return opErr(q.d.addr, "fill", ErrNoFill)
	}
	if err := checkRange("fill destination", dst, dstOff, n); err != nil {
		return err
	}
	if n == 0 {
		return q.EnqueueNull(tag)
	}
	return q.enqueue(dsahw.OpFill, dst, dstOff, nil, 0, n, pattern, tag)
}

// EnqueueNull adds a no-op descriptor that completes in order.
func (q *WQ) EnqueueNull(tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if q.Free() < 1 {
		return ErrRingFull
	}
	q.put(dsahw.OpNoop, 0, 0, 0, tag, q.head, true, 2)
	return nil
}

// chunk is the next piece of a transfer: within the transfer limit and
// IOVA-contiguous in both buffers.
func (q *WQ) chunk(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int) (l int, d, s uint64, err error) {
	l = min(n, q.maxXfer)
	di, dc, err := dst.IOVA(dstOff)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ioat: destination: %w", err)
	}
	l = min(l, dc)
	if src != nil {
		si, sc, err := src.IOVA(srcOff)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("ioat: source: %w", err)
		}
		l, s = min(l, sc), si
	}
	return l, di, s, nil
}

func (q *WQ) enqueue(op uint8, dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, pattern, tag uint64) error {
	if n <= q.maxXfer && len(dst.Segments) == 1 && (src == nil || len(src.Segments) == 1) {
		// One descriptor, addresses straight from the single segments
		// (checkRange has bounded the offsets): the common case, kept
		// free of the per-chunk lookups below.
		if q.head-q.tail >= q.mask {
			return ErrRingFull
		}
		d := dst.Segments[0].IOVA + uint64(dstOff)
		s, kind := pattern, uint8(1)
		if src != nil {
			s, kind = src.Segments[0].IOVA+uint64(srcOff), 0
		}
		q.put(op, s, d, uint32(n), tag, q.head, true, kind)
		return nil
	}
	need := 1
	if n > q.maxXfer || len(dst.Segments) > 1 || (src != nil && len(src.Segments) > 1) {
		need = 0
		for done := 0; done < n; need++ {
			l, _, _, err := q.chunk(dst, dstOff+done, src, srcOff+done, n-done)
			if err != nil {
				return err
			}
			done += l
		}
	}
	if need > q.Free() {
		return ErrRingFull
	}
	first := q.head
	for done := 0; done < n; {
		l, d, s, _ := q.chunk(dst, dstOff+done, src, srcOff+done, n-done)
		if src == nil {
			s = bits.RotateLeft64(pattern, -8*(done%8))
		}
		done += l
		o := uint8(0)
		if src == nil {
			o = 1
		}
		q.put(op, s, d, uint32(l), tag, first, done == n, o)
	}
	return nil
}

// put writes the next ring descriptor. Its record asks for nothing yet:
// Submit decides between a single posting (RCR to the unit record) and a
// batch member (CRAV to its own record, written only on failure).
func (q *WQ) put(op uint8, src, dst uint64, n uint32, tag, first uint64, last bool, kind uint8) {
	i := q.head & q.mask
	b := (*[dsahw.DescSize]byte)(q.ring[i*dsahw.DescSize:])
	le := binary.LittleEndian
	le.PutUint32(b[dsahw.DescOffPASID:], 0)
	le.PutUint32(b[dsahw.DescOffFlags:], uint32(op)<<24|dsahw.FlagCRAV|dsahw.FlagCC)
	le.PutUint64(b[dsahw.DescOffCompl:], q.recIOVA[i])
	le.PutUint64(b[dsahw.DescOffSrc:], src)
	le.PutUint64(b[dsahw.DescOffDst:], dst)
	le.PutUint32(b[dsahw.DescOffSize:], n)
	le.PutUint32(b[dsahw.DescOffIntH:], 0)
	// A plain store clears the record's status: the device cannot
	// write it before the portal write that follows (MOVDIR64B fences
	// the stores before it), and a locked store costs more than the rest
	// of the descriptor.
	le.PutUint32(q.recs[i*dsahw.ComplSize:], 0)
	q.slots[i] = slot{tag: tag, opFirst: first, last: last, op: kind}
	q.head++
}

// Submit posts every descriptor enqueued since the last Submit, as far as
// the WQ has entries; Poll posts the rest as entries free.
func (q *WQ) Submit() {
	if q.closed || q.broken != nil {
		return
	}
	q.post()
}

// post turns ring descriptors [posted, head) into units while the WQ has
// free entries.
func (q *WQ) post() {
	for q.posted < q.head && q.uHead-q.uTail < q.wqSize && !q.closing {
		first := q.posted
		n := uint64(1)
		for first+n < q.head && int(n) < q.maxBatch && (first+n)&q.mask != 0 &&
			q.slotIOVA[(first+n)&q.mask] == q.slotIOVA[first&q.mask]+n*dsahw.DescSize {
			n++
		}
		le := binary.LittleEndian
		u := q.uHead % q.wqSize
		q.units[u] = unit{first: first, n: n}
		le.PutUint32(q.urecs[u*dsahw.ComplSize:], 0) // before the portal write, as in put
		var flags uint32 = dsahw.FlagCRAV | dsahw.FlagRCR
		if q.intH != 0 {
			flags |= dsahw.FlagRCI
		}
		if n == 1 {
			copy(q.rec[:], q.ring[(first&q.mask)*dsahw.DescSize:][:dsahw.DescSize])
			f := le.Uint32(q.rec[dsahw.DescOffFlags:])
			le.PutUint32(q.rec[dsahw.DescOffFlags:], f|flags)
			le.PutUint64(q.rec[dsahw.DescOffCompl:], q.urecIOVA[u])
		} else {
			q.rec = [dsahw.DescSize]byte{}
			le.PutUint32(q.rec[dsahw.DescOffFlags:], uint32(dsahw.OpBatch)<<24|flags)
			le.PutUint64(q.rec[dsahw.DescOffCompl:], q.urecIOVA[u])
			le.PutUint64(q.rec[dsahw.DescOffSrc:], q.slotIOVA[first&q.mask])
			le.PutUint32(q.rec[dsahw.DescOffSize:], uint32(n))
		}
		le.PutUint16(q.rec[dsahw.DescOffIntH:], q.intH)
		if !q.write() {
			return // a shared WQ is full: Poll posts it later
		}
		if q.uHead == q.uTail {
			q.stall = 0 // the watchdog's clock starts with this work
		}
		q.uHead++
		q.posted += n
		q.stats.Submitted += n
		q.stats.Doorbells++
	}
}

// enqTries bounds the ENQCMDs one submission tries on a full shared WQ
// before it leaves the descriptor for the next Submit or Poll.
const enqTries = 64

// write submits q.rec: one 64-byte posted write to BAR2 or to the
// kernel's portal (MOVDIR64B fences the descriptor and record stores
// before it), or ENQCMD on a shared WQ, retried while the WQ answers full
// (at most enqTries times). It reports whether the WQ took it.
func (q *WQ) write() bool {
	switch {
	case q.user == nil:
		q.d.portal.WritePortal(dsahw.PortalOffset(q.idx), &q.rec)
		return true
	case !q.shared:
		q.user.portal.Write64B(&q.rec)
		return true
	}
	for i := 0; i < enqTries; i++ {
		if q.user.portal.Enqueue(&q.rec) {
			return true
		}
		q.stats.EnqRetries++
	}
	return false
}

// Poll reaps completed requests into out, in submission order, and
// returns how many it wrote. It reads the completion records of posted
// units, never a register, except when the oldest unit has not completed
// for Options.Watchdog: then it reads SWERR and GENSTS, aborts the WQ and
// fails what was outstanding.
func (q *WQ) Poll(out []Completion) int {
	if q.closed {
		return q.deliver(out)
	}
	for q.uTail < q.uHead {
		ui := q.uTail % q.wqSize
		u := q.units[ui]
		if u.waiting && !q.repost(ui) {
			break
		}
		rec := q.urecs[ui*dsahw.ComplSize:]
		st := uint8(load32(rec)) & dsahw.ComplStatusMask
		if st == dsahw.StatusNone {
			q.stallCheck()
			break
		}
		dmasync.Observe()
		q.stall = 0
		if q.user != nil && q.resume(ui, st) {
			break // the unit's entry re-runs what a page fault cut short
		}
		if st != dsahw.StatusSuccess && st != dsahw.StatusSuccessPred && !q.units[ui].redo {
			q.unitFailed(u, rec, st)
		}
		q.units[ui].redo = false
		q.uTail++
		q.tail = u.first + u.n
		q.stats.Completed += u.n
	}
	q.post()
	return q.deliver(out)
}

// unitFailed marks the requests of a unit whose record reports status st.
func (q *WQ) unitFailed(u unit, rec []byte, st uint8) {
	c, _ := dsahw.DecodeCompletion(rec)
	if u.n > 1 && st == dsahw.StatusBatchFail {
		// The members that failed wrote their own records.
		for k := u.first; k < u.first+u.n; k++ {
			mr := q.recs[(k&q.mask)*dsahw.ComplSize:]
			if ms := uint8(load32(mr)) & dsahw.ComplStatusMask; ms != dsahw.StatusNone && ms != dsahw.StatusSuccess && ms != dsahw.StatusSuccessPred {
				mc, _ := dsahw.DecodeCompletion(mr)
				q.failFrom(k, q.descErr(k, mc))
			}
		}
		return
	}
	// The whole unit failed with one status: a single descriptor, or a
	// batch the device refused as a whole.
	for k := u.first; k < u.first+u.n; k++ {
		q.failFrom(k, q.descErr(k, c))
	}
}

func (q *WQ) descErr(k uint64, c dsahw.Completion) error {
	return &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[k&q.mask].op], Status: c.Status, Bytes: c.Bytes, Fault: c.Fault, Write: c.Write}
}

// failFrom marks ring index k failed, and with it the rest of its
// request.
func (q *WQ) failFrom(k uint64, err error) {
	for ; k < q.head; k++ {
		s := &q.slots[k&q.mask]
		if s.failed == nil {
			s.failed = err
		}
		if s.last {
			return
		}
	}
}

// stallCheck runs the watchdog when the oldest unit has not completed:
// every 1024 looks it reads SWERR (an error logged for this WQ instead of
// a record), every 64 it checks the clock against Options.Watchdog.
func (q *WQ) stallCheck() {
	q.stall++
	if q.stall == 1 {
		q.stallAt = time.Now()
		return
	}
	if q.user != nil {
		q.userStall()
		return
	}
	var sw uint64
	switch {
	case q.stall&1023 == 0:
		q.stats.StallChecks++
		sw = q.d.regs.Read64(dsahw.RegSWErr)
		if sw&dsahw.SWErrValid == 0 || int(sw>>dsahw.SWErrWQShift&0xFF) != q.idx {
			sw = 0
			if time.Since(q.stallAt) < q.opts.Watchdog {
				return
			}
		}
	case q.stall&63 == 0 && time.Since(q.stallAt) >= q.opts.Watchdog:
	default:
		return
	}
	// A record that never came: the device logged why in SWERR (a record
	// address it could not write), or it stopped. Abort the WQ's work and
	// fail everything posted.
	q.stats.Recoveries++
	gensts := q.d.regs.Read32(dsahw.RegGenSts)
	if sw&dsahw.SWErrValid != 0 {
		q.d.regs.Write64(dsahw.RegSWErr, dsahw.SWErrValid|dsahw.SWErrOverflow)
	} else {
		q.stats.Watchdogs++
	}
	q.d.mu.Lock()
	abortErr := q.d.cmd(fmt.Sprintf("ABORT_WQ %d", q.idx), dsahw.CmdAbortWQ, 1<<(q.idx%16)|uint32(q.idx/16)<<16)
	q.d.mu.Unlock()
	e := &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[q.tail&q.mask].op], SWErr: sw, Stalled: sw&dsahw.SWErrValid == 0, Waited: q.opts.Watchdog, State: gensts & dsahw.StateMask}
	for k := q.tail; k < q.posted; k++ {
		q.failFrom(k, e)
	}
	q.stats.Completed += q.posted - q.tail
	q.tail = q.posted
	q.uTail = q.uHead
	q.stall = 0
	if abortErr != nil || gensts&dsahw.StateMask != dsahw.StateEnabled {
		q.broken = opErr(q.d.addr, "recover", fmt.Errorf("%w: WQ %d: device %s, abort: %v", ErrChannelBroken, q.idx, dsahw.StateName(gensts), abortErr))
		for k := q.posted; k < q.head; k++ {
			q.failFrom(k, q.broken)
		}
		q.tail, q.posted = q.head, q.head
	}
}

// deliver reports completed requests.
func (q *WQ) deliver(out []Completion) int {
	n := 0
	for n < len(out) && q.reaped < q.tail {
		s := &q.slots[q.reaped&q.mask]
		q.reaped++
		if !s.last {
			continue
		}
		out[n] = Completion{Tag: s.tag, Err: s.failed}
		n++
		q.stats.Ops++
		if s.failed != nil {
			q.stats.Failed++
		}
	}
	return n
}

// Close disables the WQ (the device finishes what it holds first), fails
// what is still outstanding with ErrClosed and frees the ring. Closing the
// device's last open WQ disables and resets the device, so no DMA happens
// after it.
func (q *WQ) Close() error {
	if q.closed {
		return nil
	}
	if q.user != nil {
		return q.closeUser()
	}
	q.closed = true
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.cmd(fmt.Sprintf("DISABLE_WQ %d", q.idx), dsahw.CmdDisableWQ, 1<<(q.idx%16)|uint32(q.idx/16)<<16)
	d.open--
	if d.open == 0 {
		err = errors.Join(err, d.cmd("DISABLE_DEVICE", dsahw.CmdDisableDevice, 0), d.cmd("RESET_DEVICE", dsahw.CmdResetDevice, 0))
		if d.irqs != nil {
			_ = d.dev.DisableInterrupts()
		}
		_ = pci.ClearCommand(d.dev, pci.CommandBusMaster)
	}
	for k := q.tail; k < q.head; k++ {
		q.failFrom(k, opErr(d.addr, "request", ErrClosed))
	}
	q.tail, q.posted = q.head, q.head
	if err != nil {
		return fmt.Errorf("ioat: %s: close WQ %d: the device did not confirm it stopped, ring memory left mapped: %w", d.addr, q.idx, err)
	}
	q.freeRing()
	return nil
}

// DSAError is a request failure a DSA reported in a completion record or
// in SWERR.
type DSAError struct {
	Addr pci.Address
	WQ   int
	// Op is "copy", "fill" or "null".
	Op string
	// Status is the completion status (dsahw.Status*); Bytes the bytes
	// done before a fault at Fault (a write fault when Write).
	Status uint8
	Bytes  uint32
	Fault  uint64
	Write  bool
	// SWErr is the first word of SWERR when the failure was logged there
	// instead of in a record.
	SWErr uint64
	// Stalled is set when the WQ completed nothing for Waited and nothing
	// explains it; State is GENSTS's state then.
	Stalled bool
	Waited  time.Duration
	State   uint32
	// Kernel is set for a WQ of the kernel path (OpenUserWQ), which user
	// space cannot abort or reset.
	Kernel bool
	// Touch is why a page fault could not be resumed (the kernel path):
	// the page could not be brought in, or the descriptor kept faulting.
	Touch error
}

func (e *DSAError) Error() string {
	switch {
	case e.Stalled && e.Kernel:
		return fmt.Sprintf("ioat %s WQ %d: %s failed: the WQ completed nothing for %v; the kernel owns it: disable and enable it again", e.Addr, e.WQ, e.Op, e.Waited)
	case e.Stalled:
		return fmt.Sprintf("ioat %s WQ %d: %s failed: the WQ completed nothing for %v (device %s, SWERR empty); the WQ was aborted", e.Addr, e.WQ, e.Op, e.Waited, dsahw.StateName(e.State))
	case e.Touch != nil:
		side := "read"
		if e.Write {
			side = "write"
		}
		return fmt.Sprintf("ioat %s WQ %d: %s failed: page fault (%s) at %#x after %d bytes, not resumed: %v", e.Addr, e.WQ, e.Op, side, e.Fault, e.Bytes, e.Touch)
	case e.SWErr != 0:
		return fmt.Sprintf("ioat %s WQ %d: %s failed: SWERR %#x (status %s): the completion record could not be written", e.Addr, e.WQ, e.Op, e.SWErr, dsahw.StatusString(uint8(e.SWErr>>dsahw.SWErrCodeShift)))
	}
	hint := ""
	switch {
	case dsahw.IsFault(e.Status):
		side := "source"
		if e.Write {
			side = "destination"
		}
		hint = fmt.Sprintf(": the %s address %#x was refused after %d bytes (not mapped for DMA)", side, e.Fault, e.Bytes)
	case e.Status >= dsahw.StatusBadOpcode:
		hint = ": the descriptor was refused (a driver bug: please report it)"
	}
	return fmt.Sprintf("ioat %s WQ %d: %s failed: status %s%s", e.Addr, e.WQ, e.Op, dsahw.StatusString(e.Status), hint)
}

// Is matches ErrDMAFault, ErrDescriptor and ErrStalled.
func (e *DSAError) Is(target error) bool {
	switch target {
	case ErrDMAFault:
		return dsahw.IsFault(e.Status) || e.SWErr != 0 && dsahw.IsFault(uint8(e.SWErr>>dsahw.SWErrCodeShift))
	case ErrDescriptor:
		return e.Status >= dsahw.StatusBadOpcode && !dsahw.IsFault(e.Status)
	case ErrStalled:
		return e.Stalled
	}
	return false
}
