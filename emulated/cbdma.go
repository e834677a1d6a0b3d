package emulated

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
	"golang.org/x/sys/unix"
)

// CBDMAOptions configures an emulated CBDMA platform.
type CBDMAOptions struct {
	// Channels is the number of PCI functions, one channel each, as on
	// Xeon (default 8, at most 16).
	Channels int
	// Version is the CBVER value: hw.Ver32, hw.Ver33 (default) or hw.Ver34.
	Version uint8
	// DeviceID overrides the PCI device ID. The default matches the version:
	// 0x6F20 (Broadwell-EP, 3.2), 0x6F50 (Broadwell-DE, 3.3), 0x0B00 (Ice
	// Lake, 3.4).
	DeviceID uint16
	// XferCap is log2 of the largest transfer per descriptor (default 20,
	// 1 MiB, as on Jasper Forest; 12..32, 0 meaning 4 GiB).
	XferCap uint8
	// NoFill hides the block-fill capability (DMACAPABILITY bit 6).
	NoFill bool
	// ResetDelay is how long CHANCMD.RESET stays set after it is written
	// (default 20µs).
	ResetDelay time.Duration
	// Bandwidth caps each channel's copy rate in bytes per second (0: as fast
	// as memory allows), so overlap experiments have a slow engine.
	Bandwidth int64
	// Spin is how long an idle channel polls its doorbell before it parks
	// (default 50µs). Parking saves a CPU; spinning saves the wake-up.
	Spin time.Duration
	// Scatter makes the IOMMU hand out one IOVA segment per 4 KiB page.
	Scatter bool
	// IOVABase is the first IOVA the IOMMU hands out (default 4 GiB).
	IOVABase uint64
}

// DefaultCBDMAOptions returns the options of an 8-channel CBVER 3.3
// platform with fill, 1 MiB transfer cap and no bandwidth cap.
func DefaultCBDMAOptions() CBDMAOptions {
	return CBDMAOptions{Channels: 8, Version: hw.Ver33, XferCap: 20, ResetDelay: 20 * time.Microsecond, Spin: 250 * time.Microsecond}
}

// CBDMA is an emulated platform of CBDMA functions behind one IOMMU.
type CBDMA struct {
	iommu *IOMMU
	fns   []*Function
	chans []*cbChannel
}

// NewCBDMA builds the platform and starts one goroutine per channel.
func NewCBDMA(o CBDMAOptions) (*CBDMA, error) {
	d := DefaultCBDMAOptions()
	if o.Channels == 0 {
		o.Channels = d.Channels
	}
	if o.Version == 0 {
		o.Version = d.Version
	}
	if o.XferCap == 0 && o.DeviceID == 0 {
		o.XferCap = d.XferCap
	}
	if o.ResetDelay == 0 {
		o.ResetDelay = d.ResetDelay
	}
	if o.Spin == 0 {
		o.Spin = d.Spin
	}
	switch {
	case o.Channels < 1 || o.Channels > 16:
		return nil, fmt.Errorf("emulated cbdma: %d channels: want 1..16", o.Channels)
	case o.Version != hw.Ver32 && o.Version != hw.Ver33 && o.Version != hw.Ver34:
		return nil, fmt.Errorf("emulated cbdma: CBVER %#x: want 0x32, 0x33 or 0x34", o.Version)
	case o.XferCap != 0 && (o.XferCap < 12 || o.XferCap > 32):
		return nil, fmt.Errorf("emulated cbdma: XFERCAP %d: want 12..32, or 0 for 4 GiB", o.XferCap)
	case o.Bandwidth < 0:
		return nil, fmt.Errorf("emulated cbdma: negative bandwidth %d", o.Bandwidth)
	}
	if o.DeviceID == 0 {
		o.DeviceID = map[uint8]uint16{hw.Ver32: 0x6F20, hw.Ver33: 0x6F50, hw.Ver34: 0x0B00}[o.Version]
	}
	model, known := hw.Models[o.DeviceID]
	if !known {
		return nil, fmt.Errorf("emulated cbdma: device ID %#04x is not a CBDMA ID", o.DeviceID)
	}
	p := &CBDMA{iommu: newIOMMU(o.IOVABase, o.Scatter)}
	for i := 0; i < o.Channels; i++ {
		f := &Function{
			addr: pci.Address{Bus: uint8(i / 8 * 0x80), Device: 4, Function: uint8(i % 8)},
			dom:  p.iommu,
			nIRQ: 1,
		}
		f.bar = &bar{f: f, size: hw.BAR0Size}
		initCBDMAConfig(f, o.DeviceID)
		c := &cbChannel{
			f: f, ver: o.Version, xferCap: o.XferCap, fill: !o.NoFill,
			resetDelay: o.ResetDelay, bandwidth: o.Bandwidth, spin: o.Spin,
			wipeOnReset: model.Quirks&hw.QuirkMSIXResetWipe != 0,
			wake:        make(chan struct{}, 1),
			done:        make(chan struct{}),
		}
		c.state = hw.StateHalted
		c.sts.Store(uint64(hw.StateHalted))
		f.m = c
		p.fns = append(p.fns, f)
		p.chans = append(p.chans, c)
		go c.run()
	}
	return p, nil
}

func initCBDMAConfig(f *Function, dev uint16) {
	c := &f.cfg
	le := binary.LittleEndian
	le.PutUint16(c[pci.ConfigVendorID:], hw.VendorIntel)
	le.PutUint16(c[pci.ConfigDeviceID:], dev)
	le.PutUint16(c[pci.ConfigStatus:], pci.StatusCapList)
	c[pci.ConfigRevision] = 0x07
	c[pci.ConfigClass+1] = 0x80                  // subclass: other system peripheral
	c[pci.ConfigClass+2] = 0x08                  // class: base system peripheral
	le.PutUint32(c[pci.ConfigBAR0:], 0xFBD00004) // 64-bit memory BAR
	c[pci.ConfigCapPtr] = 0x80
	// MSI-X capability at 0x80: one vector, table at BAR0+0x2000, PBA at
	// BAR0+0x3000 (spec §2.3).
	c[0x80] = pci.CapMSIX
	c[0x81] = 0
	le.PutUint16(c[0x82:], 0) // table size 1 (encoded N-1)
	le.PutUint32(c[0x84:], 0x2000)
	le.PutUint32(c[0x88:], 0x3000)
	// Writable: command register memory, bus master and INTx disable.
	le.PutUint16(f.cfgW[pci.ConfigCommand:], pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable)
	le.PutUint16(f.cfgW[0x82:], 0xC000) // MSI-X enable and function mask
	for _, off := range []int{hw.CfgDMAUncErrSts, hw.CfgChanErrInt} {
		le.PutUint32(f.cfgW1C[off:], 0xFFFFFFFF)
	}
	for _, off := range []int{hw.CfgDMAUncErrMsk, hw.CfgDMAUncErrSev, hw.CfgChanErrMskInt, hw.CfgChanErrSevInt} {
		le.PutUint32(f.cfgW[off:], 0xFFFFFFFF)
	}
}

// Functions returns the platform's PCI functions, one channel each.
func (p *CBDMA) Functions() []*Function { return p.fns }

// Devices returns the functions as pci.Devices.
func (p *CBDMA) Devices() []pci.Device {
	ds := make([]pci.Device, len(p.fns))
	for i, f := range p.fns {
		ds[i] = f
	}
	return ds
}

// IOMMU returns the platform's IOMMU (its DMA domain).
func (p *CBDMA) IOMMU() *IOMMU { return p.iommu }

// Close stops every channel; no DMA happens after it returns.
func (p *CBDMA) Close() error {
	var errs []error
	for _, f := range p.fns {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// InjectError makes channel ch fail the n-th descriptor it executes from now
// (0: the next one) with the given CHANERR bits, as if the hardware had hit
// that error there. The descriptor moves no data.
func (p *CBDMA) InjectError(ch, n int, chanerr uint32) {
	c := p.chans[ch]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject = append(c.inject, injection{at: c.executed + uint64(n), bits: chanerr})
}

// SetBandwidth changes channel ch's copy-rate cap (bytes/s, 0 for none).
func (p *CBDMA) SetBandwidth(ch int, bytesPerSec int64) {
	p.chans[ch].bwLimit.Store(bytesPerSec)
}

// ChannelStats counts what a channel did.
type ChannelStats struct {
	Descriptors uint64 // descriptors executed
	Bytes       uint64 // bytes copied or filled
	Errors      uint64 // halts on error
	Interrupts  uint64 // interrupts delivered
	// Violations counts register accesses that real hardware would not
	// honour (wrong width, writes during reset, 64-bit accesses below CB
	// 3.3, obsolete commands); LastViolation describes the latest.
	Violations    uint64
	LastViolation string
}

// Stats returns channel ch's counters.
func (p *CBDMA) Stats(ch int) ChannelStats {
	c := p.chans[ch]
	s := ChannelStats{
		Descriptors: c.nDesc.Load(), Bytes: c.nBytes.Load(), Errors: c.nErr.Load(),
		Interrupts: c.nIRQ.Load(), Violations: c.nViol.Load(),
	}
	if v := c.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	return s
}

type injection struct {
	at   uint64
	bits uint32
}

// cbChannel models one CBDMA channel (one PCI function). Register writes
// arrive on the caller's goroutine; descriptors execute on the channel's own
// goroutine. mu guards the control state and is held while a descriptor
// executes, so a RESET or SUSPEND takes effect between descriptors, as on
// hardware. The doorbell, CHANSTS and CHANERR are atomics, read without mu.
type cbChannel struct {
	f           *Function
	ver         uint8
	xferCap     uint8
	fill        bool
	resetDelay  time.Duration
	bandwidth   int64
	spin        time.Duration
	wipeOnReset bool

	dmacount atomic.Uint32 // doorbell, 16 bits
	sts      atomic.Uint64 // CHANSTS
	// stsMu makes a completion write-back and the CHANSTS value it carries
	// one event for register reads: it is held from the write-back to the
	// CHANSTS store, and by CHANSTS reads. Without it a driver could see
	// the write-back name descriptor n, then read CHANSTS still naming
	// n-1, as hardware never shows (CHANSTS changes before the write-back
	// of its value), while one that sees HALTED in CHANSTS must also see
	// the halt's write-back.
	stsMu    sync.Mutex
	chanerr  atomic.Uint32
	bwLimit  atomic.Int64
	parked   atomic.Bool
	armedPub atomic.Bool   // state is ARMED, ACTIVE or IDLE
	cntPub   atomic.Uint32 // copy of cnt for the spin loop
	wake     chan struct{}
	done     chan struct{}
	stopping atomic.Bool

	mu         sync.Mutex
	state      hw.State
	ctrl       uint16
	inUse      bool
	intrCtrl   uint8
	intrDelay  uint16
	attn       uint32
	chainLo    uint32
	chain      uint64 // armed chain address
	cmpLo      uint32
	cmp        uint64
	errMask    uint32
	dcaCtrl    uint32
	resetUntil time.Time
	cnt        uint16 // descriptors executed since CHAINADDR
	next       uint64 // address of the next descriptor to fetch
	first      bool   // next fetch is the chain's first
	lastDone   uint64 // address of the last completed descriptor
	executed   uint64 // descriptors executed since creation
	irqPending bool
	inject     []injection
	drsctl     uint16
	ltrSel     uint8
	ltrActive  uint32
	ltrIdle    uint32
	prefLimit  uint8
	hint       int

	nDesc, nBytes, nErr, nIRQ, nViol atomic.Uint64
	lastViol                         atomic.Pointer[string]
	bwStart                          time.Time
	bwDue                            time.Time
	bwBytes                          int64
	gen                              uint64 // bumped by reset and arm
}

func (c *cbChannel) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	c.nViol.Add(1)
	c.lastViol.Store(&s)
}

func (c *cbChannel) kick() {
	if c.parked.Load() {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

func (c *cbChannel) inReset() bool {
	return !c.resetUntil.IsZero() && time.Now().Before(c.resetUntil)
}

// split64 tells whether a 64-bit access must be made as two 32-bit ones.
func (c *cbChannel) split64() bool { return c.ver < hw.Ver33 }

func (c *cbChannel) read(off, w int) uint64 {
	base := hw.ChannelBase(0)
	if off >= 0x1000 {
		return 0 // MSI-X table and PBA are owned by the platform (VFIO)
	}
	if off < base {
		return c.readGlobal(off, w)
	}
	r := off - base
	switch {
	case r == hw.ChanSts && w == 8:
		if c.split64() {
			c.violation("64-bit read of CHANSTS below CB 3.3 (read two 32-bit halves, low first)")
			return c.loadSts() & 0xFFFFFFFF
		}
		return c.loadSts()
	case r == hw.ChanSts && w == 4:
		return c.loadSts() & 0xFFFFFFFF
	case r == hw.ChanSts+4 && w == 4:
		return c.loadSts() >> 32
	case r == hw.ChanErr && w == 4:
		return uint64(c.chanerr.Load())
	case r == hw.ChanDMACount && w == 2:
		return uint64(c.dmacount.Load() & 0xFFFF)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r == hw.ChanCtrl && w == 2:
		v := c.ctrl
		if c.inUse {
			v |= hw.CtrlInUse
		}
		c.inUse = true // read-to-claim semaphore
		return uint64(v)
	case r == hw.ChanDMAComp && w == 2:
		return 0x3 // compatible with v1 and v2 software interfaces
	case r == hw.ChanCmd && w == 1:
		if c.inReset() {
			return hw.CmdReset
		}
		return 0
	case r == hw.ChanChainAddr && w == 8:
		return c.chain64()
	case r == hw.ChanChainAddr && w == 4:
		return c.chain & 0xFFFFFFFF
	case r == hw.ChanChainAddr+4 && w == 4:
		return c.chain >> 32
	case r == hw.ChanCmp && w == 8:
		return c.cmp64()
	case r == hw.ChanCmp && w == 4:
		return c.cmp & 0xFFFFFFFF
	case r == hw.ChanCmp+4 && w == 4:
		return c.cmp >> 32
	case r == hw.ChanCDAR && w == 8:
		return c.next
	case r == hw.ChanErrMask && w == 4:
		return uint64(c.errMask)
	case r == hw.ChanDCACtrl && w == 4:
		return uint64(c.dcaCtrl)
	case r == hw.ChanDRSCtl && w == 2 && c.ver >= hw.Ver34:
		return uint64(c.drsctl)
	case r == hw.ChanLTRSwSel && w == 1 && c.ver >= hw.Ver34:
		return uint64(c.ltrSel)
	case r == hw.ChanLTRActive && w == 4 && c.ver >= hw.Ver34:
		return uint64(c.ltrActive)
	case r == hw.ChanLTRIdle && w == 4 && c.ver >= hw.Ver34:
		return uint64(c.ltrIdle)
	}
	c.violation("read of %d bytes at channel offset %#x: no such register", w, r)
	return 0
}

// loadSts reads CHANSTS for a register read (see stsMu).
func (c *cbChannel) loadSts() uint64 {
	c.stsMu.Lock()
	defer c.stsMu.Unlock()
	return c.sts.Load()
}

func (c *cbChannel) chain64() uint64 {
	if c.split64() {
		c.violation("64-bit access to CHAINADDR below CB 3.3")
		return c.chain & 0xFFFFFFFF
	}
	return c.chain
}

func (c *cbChannel) cmp64() uint64 {
	if c.split64() {
		c.violation("64-bit access to CHANCMP below CB 3.3")
		return c.cmp & 0xFFFFFFFF
	}
	return c.cmp
}

func (c *cbChannel) readGlobal(off, w int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case off == hw.RegChanCnt && w == 1:
		return 1
	case off == hw.RegXferCap && w == 1:
		return uint64(c.xferCap)
	case off == hw.RegGenCtrl && w == 1:
		return 0
	case off == hw.RegIntrCtrl && w == 1:
		v := c.intrCtrl
		if c.attn != 0 {
			v |= hw.IntrCtrlStatus
			if v&hw.IntrCtrlMasterEnable != 0 {
				v |= hw.IntrCtrlStatusMaster
			}
		}
		return uint64(v)
	case off == hw.RegAttnStatus && w == 4:
		v := c.attn
		c.attn = 0 // read clears
		return uint64(v)
	case off == hw.RegCBVer && w == 1:
		return uint64(c.ver)
	case off == hw.RegIntrDelay && w == 2:
		return uint64(c.intrDelay) | 1<<15
	case off == hw.RegCSStatus && w == 2:
		return 1 << 3 // address remapping (IOMMU) on
	case off == hw.RegDMACap && w == 4:
		v := uint32(hw.CapPageBreak | hw.CapDCA | hw.CapCmplTimeout)
		if c.fill {
			v |= hw.CapFill
		}
		if c.ver >= hw.Ver34 {
			v |= hw.CapDPS
		}
		return uint64(v)
	case off == hw.RegDCAOffset && w == 2:
		return 0x0100
	case off == hw.RegChWPrefLimit && w == 1 && c.ver >= hw.Ver34:
		return uint64(c.prefLimit)
	}
	c.violation("read of %d bytes at BAR0 offset %#x: no such register", w, off)
	return 0
}

func (c *cbChannel) write(off, w int, v uint64) {
	base := hw.ChannelBase(0)
	if off >= 0x1000 {
		c.violation("write to MSI-X table/PBA at %#x: owned by the platform, use EnableInterrupts", off)
		return
	}
	if off < base {
		c.writeGlobal(off, w, v)
		return
	}
	r := off - base
	// The doorbell is the fast path: no lock.
	if r == hw.ChanDMACount && w == 2 {
		c.dmacount.Store(uint32(v & 0xFFFF))
		c.kick()
		return
	}
	if r == hw.ChanErr && w == 4 {
		c.chanerr.And(^uint32(v))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inReset() && r != hw.ChanCmd {
		c.violation("write to channel offset %#x while CHANCMD.RESET is still set (poll it until it clears)", r)
		return
	}
	switch {
	case r == hw.ChanCtrl && w == 2:
		c.ctrl = uint16(v) &^ hw.CtrlInUse
		c.inUse = v&hw.CtrlInUse != 0
		if c.ctrl&hw.CtrlIntRearm != 0 && c.irqPending {
			c.irqPending = false
			c.interruptLocked()
		}
	case r == hw.ChanCmd && w == 1:
		c.command(uint8(v))
	case r == hw.ChanChainAddr && w == 8:
		if c.split64() {
			c.violation("64-bit write to CHAINADDR below CB 3.3: only the low dword lands")
			v &= 0xFFFFFFFF
		}
		c.arm(v)
	case r == hw.ChanChainAddr && w == 4:
		c.chainLo = uint32(v)
	case r == hw.ChanChainAddr+4 && w == 4:
		c.arm(v<<32 | uint64(c.chainLo))
	case r == hw.ChanCmp && w == 8:
		if c.split64() {
			c.violation("64-bit write to CHANCMP below CB 3.3: only the low dword lands")
			v &= 0xFFFFFFFF
		}
		c.cmp = v
	case r == hw.ChanCmp && w == 4:
		c.cmpLo = uint32(v)
		c.cmp = c.cmp&^0xFFFFFFFF | v
	case r == hw.ChanCmp+4 && w == 4:
		c.cmp = v<<32 | uint64(c.cmpLo)
	case r == hw.ChanErrMask && w == 4:
		c.errMask = uint32(v)
	case r == hw.ChanDCACtrl && w == 4:
		c.dcaCtrl = uint32(v)
	case r == hw.ChanDRSCtl && w == 2 && c.ver >= hw.Ver34:
		c.drsctl = uint16(v)
	case r == hw.ChanLTRSwSel && w == 1 && c.ver >= hw.Ver34:
		c.ltrSel = uint8(v)
	case r == hw.ChanLTRActive && w == 4 && c.ver >= hw.Ver34:
		c.ltrActive = uint32(v)
	case r == hw.ChanLTRIdle && w == 4 && c.ver >= hw.Ver34:
		c.ltrIdle = uint32(v)
	default:
		c.violation("write of %d bytes at channel offset %#x: no such writable register", w, r)
	}
}

func (c *cbChannel) writeGlobal(off, w int, v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case off == hw.RegIntrCtrl && w == 1:
		c.intrCtrl = uint8(v) & (hw.IntrCtrlMasterEnable | hw.IntrCtrlMSIXVector)
		if v&hw.IntrCtrlStatus != 0 {
			c.attn = 0
		}
	case off == hw.RegGenCtrl && w == 1:
	case off == hw.RegIntrDelay && w == 2:
		c.intrDelay = uint16(v) & 0x3FFF
	case off == hw.RegChWPrefLimit && w == 1 && c.ver >= hw.Ver34:
		c.prefLimit = uint8(v)
	default:
		c.violation("write of %d bytes at BAR0 offset %#x: read-only or no such register", w, off)
	}
}

// command executes a CHANCMD write. Called with mu held, so it happens
// between two descriptors.
func (c *cbChannel) command(v uint8) {
	if v&(hw.CmdStart|hw.CmdAppend) != 0 {
		c.violation("CHANCMD START/APPEND are CB1 commands; CB3 starts a chain with CHAINADDR and DMACOUNT")
		c.haltLocked(hw.ErrChanCmd)
		return
	}
	switch {
	case v&hw.CmdReset != 0:
		c.resetLocked()
		c.resetUntil = time.Now().Add(c.resetDelay)
	case v&hw.CmdAbort != 0:
		c.setState(hw.StateHalted)
	case v&hw.CmdSuspend != 0:
		if c.state == hw.StateActive || c.state == hw.StateIdle {
			c.setState(hw.StateSuspended)
		}
	case v&hw.CmdResume != 0:
		if c.state == hw.StateSuspended {
			c.setState(hw.StateIdle)
			c.kick()
		}
	}
}

// resetLocked returns the channel to HALTED with an empty chain. CHANERR is
// kept: drivers clear it themselves, and below CB 3.3 so must CHANERR_INT.
func (c *cbChannel) resetLocked() {
	c.gen++
	c.ctrl = 0
	c.chain, c.chainLo, c.cmp, c.cmpLo = 0, 0, 0, 0
	c.cnt, c.next, c.lastDone = 0, 0, 0
	c.cntPub.Store(0)
	c.dmacount.Store(0)
	c.irqPending = false
	c.drsctl = 0
	c.setState(hw.StateHalted)
	c.sts.Store(uint64(hw.StateHalted))
	if c.wipeOnReset {
		c.f.wipeInterrupts()
	}
}

func (c *cbChannel) setState(s hw.State) {
	c.state = s
	c.armedPub.Store(s == hw.StateArmed || s == hw.StateActive || s == hw.StateIdle)
	c.sts.Store(c.lastDone | uint64(s))
}

// arm takes a new chain address. A channel accepts one only when halted,
// suspended or armed, with no error outstanding.
func (c *cbChannel) arm(addr uint64) {
	switch {
	case c.state == hw.StateActive || c.state == hw.StateIdle:
		c.violation("CHAINADDR written while the channel is %v (suspend or reset it first)", c.state)
		c.haltLocked(hw.ErrChainAddr)
		return
	case c.chanerr.Load() != 0:
		c.violation("CHAINADDR written with CHANERR=%s outstanding: the channel stays HALTED", hw.ErrString(c.chanerr.Load()))
		return
	case c.ver < hw.Ver33 && c.f.config32(hw.CfgChanErrInt) != 0:
		c.violation("CHAINADDR written with CHANERR_INT (config 0x180) not cleared: below CB 3.3 the channel stays HALTED")
		return
	case addr == 0 || addr&(hw.DescSize-1) != 0:
		c.haltLocked(hw.ErrChainAddr)
		return
	}
	c.gen++
	c.chain = addr
	c.next = addr
	c.first = true
	c.cnt = 0
	c.cntPub.Store(0)
	c.lastDone = 0
	c.setState(hw.StateArmed)
	c.kick()
}

// haltLocked stops the channel on an error. The status write-back lands
// before CHANSTS changes, so whoever sees HALTED in CHANSTS also sees the
// write-back.
func (c *cbChannel) haltLocked(bits uint32) {
	c.chanerr.Or(bits)
	if c.ver < hw.Ver33 {
		c.f.orConfig32(hw.CfgChanErrInt, bits)
	}
	c.nErr.Add(1)
	v := c.lastDone | uint64(hw.StateHalted)
	c.stsMu.Lock()
	if c.ctrl&hw.CtrlErrCmplEn != 0 {
		c.writeCompletion(v)
	}
	c.setState(hw.StateHalted)
	c.stsMu.Unlock()
	if c.ctrl&hw.CtrlErrIntEn != 0 {
		c.interruptLocked()
	}
}

// writeCompletion writes status v to the CHANCMP address; a failure halts
// the channel with a completion address error.
func (c *cbChannel) writeCompletion(v uint64) bool {
	if c.cmp&7 != 0 || c.cmp == 0 || !c.f.busMaster() {
		c.failCompletion()
		return false
	}
	c.f.dom.rlock()
	b, ok := c.f.dom.translate(c.cmp, 8, true, &c.hint)
	if ok {
		dmasync.Publish()
		store64(b, v)
	}
	c.f.dom.runlock()
	if !ok {
		c.failCompletion()
	}
	return ok
}

func (c *cbChannel) failCompletion() {
	c.chanerr.Or(hw.ErrCmplAddr)
	if c.ver < hw.Ver33 {
		c.f.orConfig32(hw.CfgChanErrInt, hw.ErrCmplAddr)
	}
	if c.state != hw.StateHalted {
		c.nErr.Add(1)
	}
	c.setState(hw.StateHalted)
}

// interruptLocked raises the channel's interrupt, or leaves it pending
// until software re-arms it with CHANCTRL.INT_REARM.
func (c *cbChannel) interruptLocked() {
	c.attn |= 1
	if c.intrCtrl&(hw.IntrCtrlMasterEnable|hw.IntrCtrlMSIXVector) == 0 {
		return
	}
	if c.ctrl&hw.CtrlIntRearm == 0 {
		c.irqPending = true
		return
	}
	c.ctrl &^= hw.CtrlIntRearm
	if c.f.raise(0) {
		c.nIRQ.Add(1)
	}
}

func (c *cbChannel) configWrite(off, n int) {
	if off <= pci.ConfigCommand+1 && off+n > pci.ConfigCommand {
		c.mu.Lock()
		c.kick() // bus mastering may have been enabled
		c.mu.Unlock()
	}
}

func (c *cbChannel) flr() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked()
	c.chanerr.Store(0)
	c.intrCtrl = 0
	c.inUse = false
	c.f.cfgMu.Lock()
	binary.LittleEndian.PutUint32(c.f.cfg[hw.CfgChanErrInt:], 0)
	c.f.cfgMu.Unlock()
}

func (c *cbChannel) close() {
	if c.stopping.Swap(true) {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
	// Holding mu after the goroutine ended guarantees no DMA is in flight.
	c.mu.Lock()
	c.setState(hw.StateHalted)
	c.mu.Unlock()
}

// runnable reports whether the channel has descriptors to execute.
func (c *cbChannel) runnable() bool {
	switch c.state {
	case hw.StateArmed, hw.StateActive, hw.StateIdle:
		return uint16(c.dmacount.Load()) != c.cnt
	}
	return false
}

// run is the channel's engine: it waits for the doorbell and executes
// descriptors in order.
func (c *cbChannel) run() {
	defer close(c.done)
	for !c.stopping.Load() {
		c.mu.Lock()
		work := c.runnable()
		if work {
			c.execBatch()
		}
		c.mu.Unlock()
		if !work {
			c.idle()
		}
	}
}

// idle polls for the doorbell for the spin time, then parks until kicked.
func (c *cbChannel) idle() {
	deadline := time.Now().Add(c.spin)
	for i := 0; ; i++ {
		if c.stopping.Load() {
			return
		}
		if c.peekWork() {
			return
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	c.parked.Store(true)
	// Re-check after announcing we park: a doorbell between the check and
	// the store would otherwise be missed.
	c.mu.Lock()
	work := c.runnable()
	c.mu.Unlock()
	if !work && !c.stopping.Load() {
		select {
		case <-c.wake:
		case <-time.After(10 * time.Millisecond):
			// A bounded sleep: state changes that do not kick (a config
			// write racing the park) are still picked up.
		}
	}
	c.parked.Store(false)
}

// peekWork tells, without the lock, whether the channel seems to have
// work (for the spin loop; a stale answer costs one more loop).
func (c *cbChannel) peekWork() bool {
	return c.armedPub.Load() && uint16(c.dmacount.Load()) != uint16(c.cntPub.Load())
}

// pace holds a descriptor of n bytes until the channel's bandwidth cap
// says its transfer is over. It releases mu while it sleeps, so register
// writes (a RESET) go through; it reports false when the channel was reset
// or stopped meanwhile, and the descriptor must not complete.
func (c *cbChannel) pace(n int) bool {
	limit := c.bwLimit.Load()
	if limit == 0 {
		limit = c.bandwidth
	}
	if limit <= 0 {
		return true
	}
	now := time.Now()
	if c.bwDue.Before(now) {
		// The channel was idle or behind: no credit for lost time, a new
		// transfer starts now.
		c.bwStart, c.bwBytes = now, 0
	}
	c.bwBytes += int64(n)
	due := c.bwStart.Add(time.Duration(float64(c.bwBytes) / float64(limit) * float64(time.Second)))
	c.bwDue = due
	d := due.Sub(now)
	if d <= 0 {
		return true
	}
	gen := c.gen
	c.mu.Unlock()
	// Go's timers are coarse (about a millisecond here): sleep for the bulk
	// in nanosleep, which blocks only this thread and is precise to tens of
	// microseconds, then yield-spin to the due time. Sleeping rather than
	// spinning leaves the CPU (and its SMT sibling) to the application,
	// which is the point of an offload engine.
	if d > 60*time.Microsecond {
		ts := unix.NsecToTimespec(int64(d - 40*time.Microsecond))
		_ = unix.Nanosleep(&ts, nil)
	}
	for time.Now().Before(due) && !c.stopping.Load() {
		runtime.Gosched()
	}
	c.mu.Lock()
	return gen == c.gen && c.state == hw.StateActive && !c.stopping.Load()
}

// execBatch executes descriptors up to the doorbell, at most 64 before it
// lets register writers in. Called with mu held.
func (c *cbChannel) execBatch() {
	if !c.f.busMaster() {
		// DMA with bus mastering off never reaches memory: the fetch fails.
		c.violation("doorbell rung with PCI bus mastering disabled (set COMMAND.BME)")
		c.haltLocked(hw.ErrNextAddr)
		return
	}
	if c.state != hw.StateActive {
		c.setState(hw.StateActive)
	}
	for i := 0; i < 64 && c.state == hw.StateActive; i++ {
		target := uint16(c.dmacount.Load())
		if target == c.cnt {
			break
		}
		c.execOne(target)
	}
	if c.state == hw.StateActive && uint16(c.dmacount.Load()) == c.cnt {
		c.setState(hw.StateIdle)
	}
}

// execOne fetches, checks and executes the descriptor at c.next.
func (c *cbChannel) execOne(target uint16) {
	dom := c.f.dom
	addr := c.next
	var d hw.Descriptor
	dom.rlock()
	raw, ok := dom.translate(addr, hw.DescSize, false, &c.hint)
	if ok {
		d.Decode(raw)
	}
	dom.runlock()
	if !ok {
		if c.first {
			c.haltLocked(hw.ErrChainAddr)
		} else {
			c.haltLocked(hw.ErrNextAddr)
		}
		return
	}
	c.first = false
	if bits := d.Validate(c.xferCap, c.fill); bits != 0 {
		c.haltLocked(bits)
		return
	}
	if len(c.inject) > 0 && c.inject[0].at == c.executed {
		bits := c.inject[0].bits
		c.inject = c.inject[1:]
		c.executed++
		c.haltLocked(bits)
		return
	}
	c.executed++
	if d.Ctl&hw.CtlNull == 0 {
		if bits := c.transfer(&d); bits != 0 {
			c.haltLocked(bits)
			return
		}
		c.nBytes.Add(uint64(d.Size))
		if !c.pace(int(d.Size)) {
			return
		}
	}
	c.nDesc.Add(1)
	c.cnt++
	c.cntPub.Store(uint32(c.cnt))
	c.lastDone = addr
	c.next = d.Next
	st := hw.StateActive
	if c.cnt == target {
		st = hw.StateIdle
	}
	v := addr | uint64(st)
	// The write-back and CHANSTS change together (see stsMu).
	c.stsMu.Lock()
	if d.Ctl&hw.CtlComplWrite != 0 {
		if !c.writeCompletion(v) {
			c.stsMu.Unlock()
			return
		}
	}
	dmasync.Publish()
	c.sts.Store(v)
	c.stsMu.Unlock()
	if d.Ctl&hw.CtlIntEn != 0 {
		c.interruptLocked()
	}
}

// transfer moves the data of a copy or fill descriptor through the IOMMU.
func (c *cbChannel) transfer(d *hw.Descriptor) uint32 {
	dom := c.f.dom
	n := int(d.Size)
	dom.rlock()
	defer dom.runlock()
	var src []byte
	if d.Op() == hw.OpCopy {
		var ok bool
		if src, ok = dom.translate(d.Src, n, false, &c.hint); !ok {
			return hw.ErrReadData // the engine reads before it writes
		}
	}
	dst, ok := dom.translate(d.Dst, n, true, &c.hint)
	if !ok {
		return hw.ErrWriteData
	}
	if d.Op() == hw.OpFill {
		hw.FillPattern(dst, d.Src)
		return 0
	}
	copy(dst, src)
	return 0
}
