package ioat

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/rollback"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// A channel's control path: its options and identity, opening it (the PCI
// function, the descriptor ring, the interrupt vector), register access
// and the waits on it, clearing errors, reset and start (with the start-up
// null descriptor), the interrupt, and closing. The data path (enqueue,
// Submit, Poll, recovery from a failed descriptor) is in submit.go.

// Options configures a channel.
type Options struct {
	// RingSize is the number of descriptors in the ring, a power of two from
	// 16 to 65536 (default 4096). At most RingSize-1 are outstanding.
	RingSize int
	// Interrupts enables the channel's MSI-X vector so waits can sleep
	// instead of spinning. A function has one vector per channel, as
	// Linux sets it up (INTRCTRL MSI-X vector control): the first of its
	// channels opened with interrupts enables them all, the last closed
	// disables them. A function that offers fewer vectors than channels
	// is refused (poll instead).
	Interrupts bool
	// ResetTimeout bounds the wait for CHANCMD.RESET to clear (default
	// 200ms, as Linux).
	ResetTimeout time.Duration
	// StartTimeout bounds the wait for the start-up null descriptor
	// (default 100ms). It and ResetTimeout count the time the waiting
	// goroutine ran: a stall of the whole process (a loaded machine)
	// does not use them up.
	StartTimeout time.Duration
	// Watchdog is how long a channel may make no progress with work
	// outstanding before Poll fails the oldest request with a *ChanError
	// matching ErrStalled and resets the channel (default 2s: Linux's
	// completion timeout is 200 ms for hardware, but an emulated channel
	// is a goroutine that a loaded machine may starve for a while). It
	// must exceed the time one descriptor takes. CHANERR bits set without
	// HALTED are acted on at the first stall check, without waiting.
	Watchdog time.Duration
	// Index picks the channel within the function, 0 to CHANCNT-1 (see
	// ChannelCount): Xeons have one channel per function, older parts
	// several, each with its register block at 0x80 x (Index+1).
	Index int
	// TakeOver opens a channel whose CHANCTRL.IN_USE claim is already
	// set (a previous owner crashed or never closed it; Info.WasInUse
	// then says so). Without it Open refuses such a channel with
	// pci.ErrBusy.
	TakeOver bool
	// Memory says where the ring and completion word live (default:
	// 2 MiB hugepages, falling back to locked 4 KiB pages, and to pageable
	// ones on a DMA domain that accepts them, pci.AcceptsPageable).
	Memory hugepage.Options
	// Logger, when set, hears of what the driver works around without
	// failing: CHANERR bits that still read set after being cleared are
	// logged once each, at warning level. Nil logs nothing; Info
	// reports the same.
	Logger *slog.Logger
}

// DefaultOptions returns a 4096-entry ring without interrupts.
func DefaultOptions() Options {
	return Options{RingSize: 4096, ResetTimeout: 200 * time.Millisecond, StartTimeout: 100 * time.Millisecond, Watchdog: 2 * time.Second, Memory: hugepage.DefaultOptions()}
}

func (o *Options) fill() error {
	d := DefaultOptions()
	if o.RingSize == 0 {
		o.RingSize = d.RingSize
	}
	if o.ResetTimeout == 0 {
		o.ResetTimeout = d.ResetTimeout
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = d.StartTimeout
	}
	if o.Watchdog == 0 {
		o.Watchdog = d.Watchdog
	}
	if o.Index < 0 || o.Index > 31 {
		return fmt.Errorf("ioat: channel index %d: want 0..31 (CHANCNT is 5 bits): %w", o.Index, ErrBadRequest)
	}
	if o.Memory.PageSize == 0 {
		o.Memory = d.Memory
	}
	if o.RingSize < 16 || o.RingSize > 65536 || bits.OnesCount(uint(o.RingSize)) != 1 {
		return fmt.Errorf("ioat: ring size %d: want a power of two from 16 to 65536: %w", o.RingSize, ErrBadRequest)
	}
	return nil
}

// Info describes an open channel or DSA work queue.
type Info struct {
	// Addr is the PCI function the channel or work queue belongs to.
	Addr pci.Address
	// Index is the channel's number within its function; Channels is the
	// function's CHANCNT. For a DSA work queue: the WQ's number, and how
	// many WQs the device was configured with.
	Index, Channels int
	// Device is the function's PCI device ID.
	Device uint16
	// Platform names the CBDMA generation, or the DSA ("DSA (Sapphire
	// Rapids)").
	Platform hw.Platform
	// Version is CBVER as read; Effective is the version whose access
	// rules the driver follows (3.2 for SKX, whatever CBVER says). Both
	// are zero for a DSA.
	Version, Effective uint8
	// MaxTransfer is the largest transfer per descriptor (2^XFERCAP).
	MaxTransfer int
	// Fill says whether the engine can fill memory with a pattern
	// (DMACAP's fill bit; a DSA's OPCAP).
	Fill bool
	// Compare and CRC say whether the queue offers memory compare and
	// CRC generation (a DSA whose OPCAP has them; never CBDMA).
	Compare, CRC bool
	// RingSize is the descriptor ring's length in descriptors
	// (Options.RingSize).
	RingSize int
	// Interrupts says whether completions can be waited for on an
	// interrupt (Options.Interrupts, and the device gave one).
	Interrupts bool
	// WasInUse is set when CHANCTRL.IN_USE was already claimed at open
	// and Options.TakeOver took the channel over: a previous owner did not
	// release it (it crashed, or another driver holds it).
	WasInUse bool
	// ChanErrIntUnreadable is set when config-space CHANERR_INT (0x180,
	// cleared by the driver below CB 3.3) could not be read: the access
	// path exposes only the first 256 bytes, or reads all ones there. The
	// driver goes on without it, as Linux does.
	ChanErrIntUnreadable bool
	// MemoryDegraded is why ring memory is not on hugepages ("" if it is).
	MemoryDegraded string
	// StickyChanErr holds the CHANERR bits that still read set after the
	// driver wrote them back to clear them (write 1 to clear) when it
	// last started the channel: bits a part is slow to clear, or never
	// clears. The driver carries on, as Linux, SPDK and DPDK do, and
	// ignores them from then on; only bits that programming the channel
	// raises refuse it.
	StickyChanErr uint32
}

// Stats counts a channel's work.
type Stats struct {
	Submitted   uint64 // descriptors handed to the engine
	Completed   uint64 // descriptors completed
	Ops         uint64 // requests completed (success or failure)
	Failed      uint64 // requests failed
	Retried     uint64 // descriptors re-queued after a recovery
	Recoveries  uint64 // channel resets after an error
	Doorbells   uint64 // doorbell (descriptor count or portal) writes
	Interrupts  uint64 // interrupt waits that woke on a signal
	StallChecks uint64 // CHANSTS MMIO reads after the write-back did not move
	Watchdogs   uint64 // requests failed because the channel stopped completing
	// EnqRetries counts ENQCMDs a shared DSA work queue refused (full);
	// PageFaults the descriptors resumed after a page fault (the kernel
	// path, whose addresses are the process's).
	EnqRetries uint64
	PageFaults uint64 // descriptors resumed after a page fault
	// SpunWaits counts Engine.Wait calls that polled a request of this
	// channel (for up to EngineOptions.SpinWait) because it was not
	// complete at their first look. Engine.ChannelStats fills it;
	// Channel.Stats leaves it zero.
	SpunWaits uint64
	// BoundWakes counts Engine.Wait's sleeps on this channel's interrupt
	// that lasted their whole bound (a millisecond): a wake-up lost, or
	// held back by something that kept the waiter's processor busy. A
	// sleep woken by its copy's completion does not count.
	// Engine.ChannelStats fills it; Channel.Stats leaves it zero.
	BoundWakes uint64
	// Rate is the queue's completion rate in bytes per second as the
	// Adaptive policy measured it (a moving average over busy time; 0
	// under other policies or before the first completion).
	// Engine.ChannelStats fills it; Channel.Stats leaves it zero.
	Rate float64
}

// Completion reports one finished request.
type Completion struct {
	// Tag is the value given when the request was enqueued.
	Tag uint64
	// Err is nil on success, a *ChanError when the engine refused the
	// request, or ErrClosed when the channel closed first.
	Err error
	// Differ and Offset are the outcome of a compare (WQ.EnqueueCompare):
	// whether the buffers differ, and the offset of the first byte that
	// does. Both are zero for other requests.
	Differ bool
	Offset int
	// CRC is the CRC-32C of a CRC generation (WQ.EnqueueCRC); zero for
	// other requests.
	CRC uint32
}

// slot is the driver's record of one ring entry.
type slot struct {
	tag     uint64
	opFirst uint64 // ring index of the request's first descriptor
	last    bool   // last descriptor of its request
	op      uint8  // opCopy, opFill, opNull, opCompare, opCRC
	failed  error  // set when the request failed
	// A compare or CRC descriptor's part of its request: off is where
	// its bytes start in the request (plus the bytes a page fault's
	// partial completion already covered, for a compare), n how many it
	// covers, res its record's result (the first difference, or the CRC)
	// and differ the compare's verdict.
	off    uint64
	n      uint32
	res    uint32
	differ bool
}

// Slot kinds (slot.op).
const (
	opCopy = iota
	opFill
	opNull
	opCompare
	opCRC
)

var opNames = [...]string{"copy", "fill", "null", "compare", "crc"}

func (c *Channel) domain() pci.DMA { return c.dev.DMA() }

// Channel drives one CBDMA channel through the device contract.
//
// A Channel is not safe for concurrent use: like a DPDK dmadev queue it has
// one owner, who enqueues, submits and polls. Engine adds locking and
// scheduling on top.
type Channel struct {
	dev   pci.Device
	regs  pci.Registers
	base  int // channel register block
	info  Info
	split bool // 64-bit registers as two 32-bit accesses
	quirk hw.Quirks
	opts  Options

	mem      *hugepage.Region
	memMap   *pci.Mapping
	ring     []byte
	slotIOVA []uint64
	comp     []byte // 8-byte completion write-back word
	compIOVA uint64
	size     uint64
	mask     uint64
	maxXfer  int

	irq atomic.Pointer[pci.Interrupt]

	head      uint64 // next ring index to fill
	submitted uint64 // ring indexes below this were handed to the engine
	tail      uint64 // oldest ring index not yet completed
	restart   uint64 // ring index where the chain last (re)started
	lastSts   uint64 // last completion word processed
	wbFloor   uint64 // ring index the next write-back names at or after (see Free)
	stall     int    // polls without progress
	stallAt   time.Time
	rung      uint64 // ring index the doorbell last announced
	addr40    bool   // keep DMA addresses below 2^40 (Jasper Forest)
	slots     []slot
	reaped    uint64 // ops already delivered by Poll up to this ring index
	broken    error
	closed    bool
	stats     Stats
	failRun   int // recoveries in a row that failed no request
	// sticky holds CHANERR bits that read set although cleared (see
	// Info.StickyChanErr); logged holds those already logged.
	sticky, logged uint32
}

// Open brings up the CBDMA channel behind dev (spec §4.2): it checks the
// IDs and version, enables memory decoding and bus mastering, claims the
// channel, resets it, clears its errors, allocates and maps the descriptor
// ring and completion word, programs the channel and starts it with a null
// descriptor. Every step is undone if a later one fails.
func Open(dev pci.Device, o Options) (_ *Channel, err error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	addr := dev.Address()
	id, err := pci.ReadID(dev)
	if err != nil {
		return nil, err
	}
	model, ok := hw.Models[id.Device]
	if id.Vendor != hw.VendorIntel || !ok {
		return nil, opErr(addr, "probe", fmt.Errorf("%w: ID %04x:%04x is not in the CBDMA table (see `ioatctl list`)", ErrNotCBDMA, id.Vendor, id.Device))
	}
	regs, err := dev.BAR(0)
	if err != nil {
		return nil, err
	}
	if regs.Len() < 0x200 {
		return nil, opErr(addr, "BAR0", fmt.Errorf("%w: BAR0 is %d bytes, want at least 512", ErrNotCBDMA, regs.Len()))
	}
	c := &Channel{dev: dev, regs: regs, base: hw.ChannelBase(o.Index), quirk: model.Quirks, opts: o, addr40: model.Quirks&hw.QuirkAddr40 != 0}
	var undo rollback.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	if err := pci.SetCommand(dev, pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable); err != nil {
		return nil, err
	}
	undo = append(undo, func() {
		if c.info.Channels <= 1 {
			_ = pci.ClearCommand(dev, pci.CommandBusMaster)
		}
	})

	ver := regs.Read8(hw.RegCBVer)
	if ver < hw.Ver30 || ver == 0xFF {
		return nil, opErr(addr, "CBVER", fmt.Errorf("%w: CBVER %#x (legacy CB1/CB2 layouts are not supported; all ones means the device is gone)", ErrNotCBDMA, ver))
	}
	eff := ver
	if model.Quirks&hw.QuirkForceV32 != 0 {
		eff = hw.Ver32
	}
	c.split = eff < hw.Ver33
	nch := int(regs.Read8(hw.RegChanCnt) & 0x1F)
	switch {
	case nch == 0:
		return nil, opErr(addr, "CHANCNT", fmt.Errorf("%w: the function reports no channels", ErrNotCBDMA))
	case o.Index >= nch:
		return nil, opErr(addr, "CHANCNT", fmt.Errorf("channel %d of a function with %d (CHANCNT): %w", o.Index, nch, ErrBadRequest))
	case c.base+hw.ChanBlockSize > regs.Len():
		return nil, opErr(addr, "BAR0", fmt.Errorf("%w: channel %d's registers at %#x lie past the %d-byte BAR", ErrNotCBDMA, o.Index, c.base, regs.Len()))
	}
	xc := regs.Read8(hw.RegXferCap) & 0x1F
	switch {
	case xc == 0:
		c.maxXfer = 1 << 31 // 4 GiB, but the size field is 32 bits: keep it a power of two
	case xc < 12:
		return nil, opErr(addr, "XFERCAP", fmt.Errorf("%w: XFERCAP %d is invalid (minimum 12)", ErrNotCBDMA, xc))
	default:
		c.maxXfer = 1 << xc
		if xc > 31 {
			c.maxXfer = 1 << 31
		}
	}
	dmacap := regs.Read32(hw.RegDMACap)
	c.info = Info{
		Addr: addr, Index: o.Index, Channels: nch, Device: id.Device, Platform: model.Platform, Version: ver, Effective: eff,
		MaxTransfer: c.maxXfer, Fill: dmacap&hw.CapFill != 0, RingSize: o.RingSize,
	}

	// Claim the channel: the first read of CHANCTRL sets IN_USE. The
	// semaphore does not say who holds it; only that someone does.
	if regs.Read16(c.base+hw.ChanCtrl)&hw.CtrlInUse != 0 {
		if !o.TakeOver {
			return nil, opErr(addr, "CHANCTRL", fmt.Errorf("%w: channel %d's IN_USE claim is already set: another driver (a DPDK or SPDK process, the kernel's ioatdma) or an earlier process that never closed it owns the channel; the hardware does not record which. Stop that owner, or set Options.TakeOver to take the channel over", pci.ErrBusy, o.Index))
		}
		c.info.WasInUse = true
	}
	undo = append(undo, func() { c.regs.Write16(c.base+hw.ChanCtrl, 0) })

	if err := c.reset(); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = c.reset() })

	if o.Interrupts {
		// One vector per channel: the function's first channel opened
		// with interrupts enables them for all (see fnVectors).
		if err := acquireVector(c, nch); err != nil {
			return nil, err
		}
		c.info.Interrupts = true
		undo = append(undo, func() { releaseVector(c) })
	}

	if err := c.allocRing(); err != nil {
		return nil, err
	}
	undo = append(undo, c.freeRing)
	if c.addr40 {
		if top := c.slotIOVA[c.size-1] + hw.DescSize; top > hw.Addr40Limit || c.compIOVA+8 > hw.Addr40Limit {
			return nil, opErr(addr, "ring", fmt.Errorf("descriptor ring at IOVA %#x is beyond %s's 40-bit DMA reach: map DMA memory below 1 TiB: %w", c.slotIOVA[0], model.Platform, ErrBadRequest))
		}
	}
	if eff >= hw.Ver34 && nch == 1 {
		// Latency tolerance as Linux programs it: active while open,
		// idle once closed. (With several channels these registers would
		// overlap the next channel's block.)
		regs.Write32(c.base+hw.ChanLTRActive, hw.LTRActive)
		regs.Write32(c.base+hw.ChanLTRIdle, hw.LTRIdle)
		regs.Write8(c.base+hw.ChanLTRSwSel, hw.LTRSelActive)
	}

	if err := c.start(c.head); err != nil {
		return nil, err
	}
	if err := c.selfStart(); err != nil {
		return nil, err
	}
	return c, nil
}

// ChannelCount returns how many channels the CBDMA function behind dev
// has (CHANCNT): one on every Xeon, several on older parts. It enables
// memory decoding to read the register.
func ChannelCount(dev pci.Device) (int, error) {
	id, err := pci.ReadID(dev)
	if err != nil {
		return 0, err
	}
	if _, ok := hw.Models[id.Device]; id.Vendor != hw.VendorIntel || !ok {
		return 0, opErr(dev.Address(), "probe", fmt.Errorf("%w: ID %04x:%04x is not in the CBDMA table (see `ioatctl list`)", ErrNotCBDMA, id.Vendor, id.Device))
	}
	regs, err := dev.BAR(0)
	if err != nil {
		return 0, err
	}
	if err := pci.SetCommand(dev, pci.CommandMemory); err != nil {
		return 0, err
	}
	n := int(regs.Read8(hw.RegChanCnt) & 0x1F)
	if n == 0 {
		return 0, opErr(dev.Address(), "CHANCNT", fmt.Errorf("%w: the function reports no channels", ErrNotCBDMA))
	}
	return n, nil
}

// Info describes the channel.
func (c *Channel) Info() Info { return c.info }

// Stats returns the channel's counters.
func (c *Channel) Stats() Stats { return c.stats }

func (c *Channel) read64(off int) uint64 {
	if c.split {
		lo := c.regs.Read32(c.base + off)
		hi := c.regs.Read32(c.base + off + 4)
		return uint64(hi)<<32 | uint64(lo)
	}
	return c.regs.Read64(c.base + off)
}

func (c *Channel) write64(off int, v uint64) {
	if c.split {
		c.regs.Write32(c.base+off, uint32(v))
		c.regs.Write32(c.base+off+4, uint32(v>>32))
		return
	}
	c.regs.Write64(c.base+off, v)
}

func (c *Channel) state() hw.State { return hw.StatusState(c.read64(hw.ChanSts)) }

// A register wait's timeout counts the time its waiter ran, not wall
// time. A gap between two looks longer than waitSlack means the waiting
// thread did not run (its process descheduled on a loaded machine): the
// device was not watched meanwhile, and an emulated one, a goroutine of the
// same process, could not progress either, so the gap counts as waitSlack
// only. A device that is stuck still times out after the timeout of the
// waiter's running time, which on a machine that runs it is wall time.
const waitSlack = 2 * time.Millisecond

// waitClock is the time a wait has left (see waitSlack).
type waitClock struct {
	left time.Duration
	last time.Time
}

func startWait(timeout time.Duration) waitClock {
	return waitClock{left: timeout, last: time.Now()}
}

// expired charges the time since the last look, at most waitSlack, and
// reports whether the timeout is spent.
func (w *waitClock) expired() bool {
	now := time.Now()
	w.left -= min(now.Sub(w.last), waitSlack)
	w.last = now
	return w.left <= 0
}

// waitFor polls cond every few microseconds until it holds or the timeout
// passes (see waitSlack), and names the register in the error.
func (c *Channel) waitFor(reg string, timeout time.Duration, cond func() bool) error {
	w := startWait(timeout)
	for i := 0; ; i++ {
		if cond() {
			return nil
		}
		if w.expired() {
			return opErr(c.info.Addr, reg, fmt.Errorf("%w after %v (CHANSTS state %v, CHANERR %s)", ErrTimeout, timeout, c.state(), hw.ErrString(c.regs.Read32(c.base+hw.ChanErr))))
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(5 * time.Microsecond)
		}
	}
}

// clearErrors writes back CHANERR and, below CB 3.3, CHANERR_INT in config
// space (a channel refuses to leave HALTED otherwise), and returns both.
func (c *Channel) clearErrors() (chanerr, chanerrInt uint32, err error) {
	chanerr = c.regs.Read32(c.base + hw.ChanErr)
	c.regs.Write32(c.base+hw.ChanErr, chanerr)
	if c.split && !c.info.ChanErrIntUnreadable {
		chanerrInt, err = pci.ReadConfig32(c.dev, hw.CfgChanErrInt)
		if err != nil || chanerrInt == 0xFFFFFFFF {
			// Extended configuration space is out of reach (or reads all
			// ones): go on without CHANERR_INT, as Linux does.
			c.info.ChanErrIntUnreadable = true
			return chanerr, 0, nil
		}
		if chanerrInt != 0 {
			if err := pci.WriteConfig32(c.dev, hw.CfgChanErrInt, chanerrInt); err != nil {
				return 0, 0, fmt.Errorf("ioat: %s: clear CHANERR_INT (config 0x180): %w", c.info.Addr, err)
			}
		}
	}
	return chanerr, chanerrInt, nil
}

// settleErrors is called on a reset channel just before it is
// programmed. CHANERR was cleared by reset; any bit that still reads set
// is cleared once more, and a bit that survives that too is one the part
// is slow to clear (or never clears). Such bits are logged once each,
// reported in Info.StickyChanErr and ignored from then on, as Linux, SPDK
// and DPDK clear what they read and carry on. It returns the bits set
// before programming, for start to tell them from bits programming
// raises.
func (c *Channel) settleErrors() uint32 {
	e := c.regs.Read32(c.base + hw.ChanErr)
	if e == 0 {
		c.sticky = 0
		c.info.StickyChanErr = 0
		return 0
	}
	c.regs.Write32(c.base+hw.ChanErr, e)
	e = c.regs.Read32(c.base + hw.ChanErr)
	c.sticky = e
	c.info.StickyChanErr = e
	if fresh := e &^ c.logged; fresh != 0 {
		c.logged |= fresh
		if l := c.opts.Logger; l != nil {
			l.Warn("ioat: CHANERR bits still read set after being cleared; carrying on without them",
				"device", c.info.Addr.String(), "channel", c.info.Index, "chanerr", hw.ErrString(fresh))
		}
	}
	return e
}

// stickyNote explains, in an error, bits that read set before the
// channel was programmed.
func stickyNote(before uint32) string {
	if before == 0 {
		return ""
	}
	return fmt.Sprintf(" (CHANERR %s read set before, after being cleared, and was not counted)", hw.ErrString(before))
}

// reset quiesces the channel, clears its errors and resets it (spec §4.2,
// SPDK and Linux sequences). Afterwards the channel is HALTED and does no
// DMA.
func (c *Channel) reset() error {
	if s := c.state(); s == hw.StateActive || s == hw.StateIdle {
		c.regs.Write8(c.base+hw.ChanCmd, hw.CmdSuspend)
		// A channel that does not suspend in time is reset all the same:
		// RESET stops an active channel too, so the timeout is not an error.
		_ = c.waitFor("CHANSTS (suspend)", 20*time.Millisecond, func() bool {
			s := c.state()
			return s != hw.StateActive && s != hw.StateIdle
		})
	}
	if _, _, err := c.clearErrors(); err != nil {
		return err
	}
	if c.quirk&hw.QuirkTBGParity != 0 {
		_ = pci.WriteConfig32(c.dev, hw.CfgDMAUncErrSts, 0x10)
	}
	c.regs.Write8(c.base+hw.ChanCmd, hw.CmdReset)
	if err := c.waitFor("CHANCMD.RESET", c.opts.ResetTimeout, func() bool {
		return c.regs.Read8(c.base+hw.ChanCmd)&hw.CmdReset == 0
	}); err != nil {
		return err
	}
	if c.quirk&hw.QuirkMSIXResetWipe != 0 {
		// The reset wiped the MSI-X table: have the platform rewrite it
		// for every channel of the function that uses a vector.
		if err := rewireVectors(c.dev); err != nil {
			return err
		}
	}
	return nil
}

func (c *Channel) allocRing() error {
	ringBytes := c.opts.RingSize * hw.DescSize
	o := c.opts.Memory
	o.AllowPageable = o.AllowPageable || pci.AcceptsPageable(c.dev.DMA())
	mem, err := hugepage.Alloc(ringBytes+hw.DescSize, o)
	if err != nil {
		return fmt.Errorf("ioat: %s: descriptor ring: %w", c.info.Addr, err)
	}
	m, err := c.dev.DMA().Map(mem.Bytes())
	if err != nil {
		mem.Close()
		return fmt.Errorf("ioat: %s: map descriptor ring for DMA: %w", c.info.Addr, err)
	}
	c.mem, c.memMap = mem, m
	c.info.MemoryDegraded = mem.Degraded()
	b := mem.Bytes()
	c.ring = b[:ringBytes:ringBytes]
	c.comp = b[ringBytes : ringBytes+8 : ringBytes+8]
	c.size = uint64(c.opts.RingSize)
	c.mask = c.size - 1
	c.slotIOVA = make([]uint64, c.size)
	c.slots = make([]slot, c.size)
	for i := range c.slotIOVA {
		iova, contig, err := m.IOVA(i * hw.DescSize)
		if err != nil || contig < hw.DescSize || iova&(hw.DescSize-1) != 0 {
			c.freeRing()
			return fmt.Errorf("ioat: %s: ring slot %d is not a 64-byte aligned, contiguous IOVA (%#x): %w", c.info.Addr, i, iova, ErrBadRequest)
		}
		c.slotIOVA[i] = iova
	}
	if c.compIOVA, _, err = m.IOVA(ringBytes); err != nil {
		c.freeRing()
		return err
	}
	// Pre-link the ring: every descriptor points at the next, the last at
	// the first.
	var d hw.Descriptor
	for i := range c.slotIOVA {
		d.Next = c.slotIOVA[(i+1)%len(c.slotIOVA)]
		d.Encode(c.ring[i*hw.DescSize:])
	}
	return nil
}

func (c *Channel) freeRing() {
	if c.memMap != nil {
		_ = c.dev.DMA().Unmap(c.memMap)
		c.memMap = nil
	}
	if c.mem != nil {
		c.mem.Close()
		c.mem = nil
	}
}

// start programs a halted channel to run a chain that begins at ring index
// at: control, completion address, chain address. Descriptors from at up to
// c.submitted are handed to the engine with one doorbell.
func (c *Channel) start(at uint64) error {
	if c.info.Effective >= hw.Ver34 && c.info.Channels == 1 {
		c.regs.Write16(c.base+hw.ChanDRSCtl, c.drsctl())
	}
	ctrl := uint16(ctrlRun)
	if c.irq.Load() != nil {
		ctrl |= hw.CtrlIntRearm
		c.regs.Write8(hw.RegIntrCtrl, hw.IntrCtrlMSIXVector|hw.IntrCtrlMasterEnable)
	}
	c.regs.Write16(c.base+hw.ChanCtrl, ctrl)
	store64(c.comp, 0)
	c.lastSts = 0
	c.wbFloor = at
	before := c.settleErrors()
	c.write64(hw.ChanCmp, c.compIOVA)
	c.write64(hw.ChanChainAddr, c.slotIOVA[at&c.mask])
	// No wait for ARMED: Linux's registers define no such state and SPDK
	// rings the doorbell straight after CHAINADDR. A refused chain address
	// shows in CHANERR; anything later halts the chain and Poll recovers.
	// Only bits that programming the channel raised count: bits that read
	// set before it are a part slow to clear them, not a refusal.
	if raised := c.regs.Read32(c.base+hw.ChanErr) &^ before; raised != 0 {
		return opErr(c.info.Addr, "CHAINADDR", fmt.Errorf("%w: the channel refused chain address %#x: programming it raised CHANERR %s%s",
			ErrDescriptor, c.slotIOVA[at&c.mask], hw.ErrString(raised), stickyNote(before)))
	}
	c.restart = at
	c.rung = at
	c.ringTo(c.submitted)
	return nil
}

// drsctl is the v3.4 descriptor-ring-size hint for this ring: its size
// (4 KiB to 2 MiB) with prefetch auto-wrap when the ring is one
// IOVA-contiguous chunk, as Linux sets it; 0 (no hint) otherwise.
func (c *Channel) drsctl() uint16 {
	n := len(c.ring)
	if n < 4096 || n > 2<<20 {
		return 0
	}
	for i, iova := range c.slotIOVA {
		if iova != c.slotIOVA[0]+uint64(i*hw.DescSize) {
			return 0
		}
	}
	return uint16(bits.TrailingZeros(uint(n/4096))) | hw.DRSEnable | hw.DRSAutoWrap
}

// selfStart runs one null descriptor through the freshly started channel
// (SPDK and Linux do the same) and checks that it completes.
func (c *Channel) selfStart() error {
	if err := c.EnqueueNull(^uint64(0)); err != nil {
		return err
	}
	c.Submit()
	var out [1]Completion
	w := startWait(c.opts.StartTimeout) // see waitSlack
	for c.Poll(out[:]) == 0 {
		if w.expired() {
			return opErr(c.info.Addr, "start", fmt.Errorf("%w: the start-up null descriptor did not complete in %v (CHANSTS %#x, CHANERR %s)",
				ErrTimeout, c.opts.StartTimeout, c.read64(hw.ChanSts), hw.ErrString(c.regs.Read32(c.base+hw.ChanErr))))
		}
		time.Sleep(2 * time.Microsecond)
	}
	if out[0].Err != nil {
		return fmt.Errorf("ioat: %s: start-up null descriptor failed: %w", c.info.Addr, out[0].Err)
	}
	return nil
}

// Interrupt returns the channel's interrupt, nil when interrupts are off.
func (c *Channel) Interrupt() *pci.Interrupt { return c.irq.Load() }

// WaitInterrupt sleeps until the channel's interrupt fires, the timeout
// passes or ctx is done. It re-arms the interrupt first; a completion that
// happened while it was disarmed fires at once. Callers re-check their
// condition afterwards: a wake-up is a hint, not a promise.
func (c *Channel) WaitInterrupt(ctx context.Context, timeout time.Duration) error {
	irq := c.irq.Load()
	if irq == nil {
		return opErr(c.info.Addr, "wait", fmt.Errorf("interrupts are off (open the channel with Options.Interrupts): %w", pci.ErrNotSupported))
	}
	c.rearm()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := irq.Wait(tctx)
	if n > 0 {
		c.stats.Interrupts++
	}
	if err != nil && ctx.Err() == nil {
		return nil // timeout or a vector swapped by a reset: re-check
	}
	return err
}

func (c *Channel) countInterrupt() { c.stats.Interrupts++ }

// rearm writes CHANCTRL with INT_REARM so the next completion interrupts.
func (c *Channel) rearm() {
	c.regs.Write16(c.base+hw.ChanCtrl, ctrlRun|hw.CtrlIntRearm)
}

// ctrlRun is CHANCTRL while the channel runs: write the status back and
// interrupt on error, halt on any error, and keep the IN_USE claim.
const ctrlRun = hw.CtrlErrCmplEn | hw.CtrlAnyErrAbortEn | hw.CtrlErrIntEn | hw.CtrlInUse

// Close stops the channel and releases it. It suspends and resets the
// engine and waits for the reset to finish, so no DMA reaches the ring or
// any buffer after Close returns; only then is the ring unmapped and
// freed. Requests still outstanding complete with ErrClosed (Poll still
// reports them).
func (c *Channel) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.reset()
	if c.info.Effective >= hw.Ver34 && c.info.Channels == 1 {
		c.regs.Write8(c.base+hw.ChanLTRSwSel, hw.LTRSelIdle)
	}
	c.failAll(opErr(c.info.Addr, "request", ErrClosed))
	c.regs.Write16(c.base+hw.ChanCtrl, 0) // release IN_USE
	if c.irq.Load() != nil {
		releaseVector(c)
	}
	if c.info.Channels <= 1 {
		// With several channels in the function, the others may still run.
		_ = pci.ClearCommand(c.dev, pci.CommandBusMaster)
	}
	if err != nil {
		// The engine may still be running: leak the ring rather than let
		// it DMA into freed memory.
		return fmt.Errorf("ioat: %s: close: channel did not stop, ring memory left mapped: %w", c.info.Addr, err)
	}
	c.freeRing()
	return nil
}
