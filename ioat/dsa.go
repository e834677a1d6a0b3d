package ioat

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/rollback"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// A DSA's control path under VFIO: identify, reset and configure the
// device (groups, engines, dedicated WQs), enable it and its WQs, set up
// each WQ's ring and completion records, and close. The data path
// (enqueue, Submit, Poll) is in dsa_submit.go; the kernel path (the idxd
// driver's user WQs) in dsa_user.go.

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
	var undo rollback.Stack
	defer func() {
		if err != nil {
			undo.Run()
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
	// acc gathers, in deliver, the result of a compare or CRC request
	// whose descriptors complete one by one.
	acc       Completion
	closing   bool
	fullSince time.Time // when a shared WQ began refusing, none of ours in it

	head, posted, tail, reaped uint64 // ring indexes
	uHead, uTail               uint64 // units posted, completed
	stall                      int
	stallAt                    time.Time
	// now is the watchdog's clock: time.Now, unless a test drives the
	// watchdog from a clock of its own so that it fires when the test
	// says, not when the scheduler happens to starve the device.
	now    func() time.Time
	closed bool
	broken error
	rec    [dsahw.DescSize]byte // the portal write's staging
}

var _ Queue = (*WQ)(nil)

func newWQ(d *dsaDevice, idx, nWQ, size int, xferShift, batchShift uint, o Options) (*WQ, error) {
	q := &WQ{d: d, idx: idx, opts: o, wqSize: uint64(size), maxXfer: 1 << min(xferShift, 31), maxBatch: 1 << batchShift, dma: d.dev.DMA(), now: time.Now}
	q.info = Info{Addr: d.addr, Index: idx, Channels: nWQ, Platform: hw.Platform(d.name),
		MaxTransfer: q.maxXfer, Fill: dsahw.HasOp(d.opcap, dsahw.OpFill),
		Compare: dsahw.HasOp(d.opcap, dsahw.OpCompare), CRC: dsahw.HasOp(d.opcap, dsahw.OpCRCGen), RingSize: o.RingSize}
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

// Error describes the failure in one line: the operation and its cause.
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
