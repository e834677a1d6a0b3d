package emulated

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
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
	// Channels is the number of PCI functions (default 8, at most 16).
	Channels int
	// ChannelsPerFunction is CHANCNT, the channels in each function
	// (default 1, as on every Xeon; at most 4, and 1 on CB 3.4, whose
	// channel registers reach past the 0x80 stride). Channel n of a
	// function has its register block at 0x80 x (n+1).
	ChannelsPerFunction int
	// Version is the CBVER value: hw.Ver32, hw.Ver33 (default) or hw.Ver34.
	Version uint8
	// DeviceID overrides the PCI device ID. The default matches the version:
	// 0x6F20 (Broadwell-EP, 3.2), 0x6F50 (Broadwell-DE, 3.3), 0x0B00 (Ice
	// Lake, 3.4).
	DeviceID uint16
	// XferCap is log2 of the largest transfer per descriptor (default 20,
	// 1 MiB, as on Jasper Forest; 12..31, the 5-bit field's range, or 0
	// for 4 GiB).
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
	// (default 250µs with CPUs of its own, 20µs without). Parking saves a
	// CPU; spinning saves the wake-up. A channel without CPUs polls on
	// the application's Ps, yielding between looks, and while it does a
	// P with nothing else to run never comes to look at Go's network
	// poller: on a process with one P (bound to one CPU), every goroutine
	// sleeping there (a receive loop on its socket or eventfd) waited for
	// the end of the spin after each batch of copies.
	Spin time.Duration
	// Scatter makes the IOMMU hand out one IOVA segment per 4 KiB page.
	Scatter bool
	// IOVABase is the first IOVA the IOMMU hands out (default 4 GiB).
	IOVABase uint64
	// HideArmed makes a channel report IDLE (Linux's "DONE") instead of
	// ARMED after CHAINADDR, as parts and models do that do not define
	// the ARMED state (Linux's registers.h has none).
	HideArmed bool
	// CPUs, when set, gives the channels' engine a processor of its own,
	// as a device has its own silicon: each channel's goroutine locks its
	// OS thread and binds it to these CPUs (sched_setaffinity), the way a
	// VMM pins a device model's I/O thread, so the copies it executes take
	// no time from the threads of the application that drives it. The
	// thread runs Go code: the process's GOMAXPROCS must leave it a P
	// (runtime.GOMAXPROCS counts threads running Go code, not CPUs).
	// NewCBDMA fails, naming the CPUs, if the kernel refuses the binding
	// (a CPU outside this process's cpuset). ChannelStats.CPUs reports
	// the binding each thread read back. Such a channel's goroutine holds
	// its P for as long as it runs, parked or not, as silicon is always
	// there: give GOMAXPROCS one P per pinned channel on top of what the
	// application needs.
	CPUs []int
	// ConfigSize is how much configuration space answers: 4096 (default,
	// PCIe extended space with CHANERR_INT at 0x180) or 256, as through
	// access paths that expose only the conventional header (spdk#484);
	// the channel then has no CHANERR_INT mirror to clear.
	ConfigSize int
	// SlowClear lists CHANERR bits that are slow to clear: after software
	// writes 1 to clear one, CHANERR keeps reading it as set for
	// SlowClearReads more reads of the register (for ever when
	// SlowClearReads is negative; 8 when it is 0), although the error
	// itself is gone at once: the channel arms and runs as usual. A
	// driver must clear what it read and carry on, as Linux, SPDK and
	// DPDK do, rather than refuse the channel while a bit still reads set.
	SlowClear uint32
	// SlowClearReads is how many reads of CHANERR a SlowClear bit
	// outlives its clear by.
	SlowClearReads int
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
		if len(o.CPUs) == 0 {
			o.Spin = unpinnedSpin
		}
	}
	if o.ChannelsPerFunction == 0 {
		o.ChannelsPerFunction = 1
	}
	if o.ConfigSize == 0 {
		o.ConfigSize = 4096
	}
	if o.SlowClear != 0 && o.SlowClearReads == 0 {
		o.SlowClearReads = 8
	}
	switch {
	case o.Channels < 1 || o.Channels > 16:
		return nil, fmt.Errorf("emulated cbdma: %d functions: want 1..16", o.Channels)
	case o.ChannelsPerFunction < 1 || o.ChannelsPerFunction > 4:
		return nil, fmt.Errorf("emulated cbdma: CHANCNT %d: want 1..4", o.ChannelsPerFunction)
	case o.ChannelsPerFunction > 1 && o.Version >= hw.Ver34:
		return nil, fmt.Errorf("emulated cbdma: CHANCNT %d on CB 3.4: its channel registers (DRSCTL 0xB6, LTR 0xBC-0xC7) reach past the 0x80 stride, so a 3.4 function has one channel", o.ChannelsPerFunction)
	case o.ConfigSize != 256 && o.ConfigSize != 4096:
		return nil, fmt.Errorf("emulated cbdma: config space of %d bytes: want 256 or 4096", o.ConfigSize)
	case o.Version != hw.Ver32 && o.Version != hw.Ver33 && o.Version != hw.Ver34:
		return nil, fmt.Errorf("emulated cbdma: CBVER %#x: want 0x32, 0x33 or 0x34", o.Version)
	case o.XferCap != 0 && (o.XferCap < 12 || o.XferCap > 31):
		return nil, fmt.Errorf("emulated cbdma: XFERCAP %d: want 12..31 (a 5-bit field), or 0 for 4 GiB", o.XferCap)
	case o.Bandwidth < 0:
		return nil, fmt.Errorf("emulated cbdma: negative bandwidth %d", o.Bandwidth)
	}
	var cpus *unix.CPUSet
	if len(o.CPUs) > 0 {
		cpus = new(unix.CPUSet)
		for _, c := range o.CPUs {
			if c < 0 || c >= cpuSetSize {
				return nil, fmt.Errorf("emulated cbdma: CPU %d for the channels' threads: want 0..%d (the CPU numbers of lscpu)", c, cpuSetSize-1)
			}
			cpus.Set(c)
		}
	}
	if o.DeviceID == 0 {
		o.DeviceID = map[uint8]uint16{hw.Ver32: 0x6F20, hw.Ver33: 0x6F50, hw.Ver34: 0x0B00}[o.Version]
	}
	model, known := hw.Models[o.DeviceID]
	if !known {
		return nil, fmt.Errorf("emulated cbdma: device ID %#04x is not a CBDMA ID", o.DeviceID)
	}
	p := &CBDMA{iommu: newIOMMU(o.IOVABase, o.Scatter)}
	caps := uint32(hw.CapPageBreak | hw.CapCmplTimeout)
	dcaOff := uint16(0)
	if o.Version < hw.Ver34 {
		// Linux turns DCA off from 3.4 on; below, the DCA registers sit
		// past every channel block.
		caps |= hw.CapDCA
		dcaOff = dcaOffset
	} else {
		caps |= hw.CapDPS
	}
	if !o.NoFill {
		caps |= hw.CapFill
	}
	for i := 0; i < o.Channels; i++ {
		f := &Function{
			addr:    pci.Address{Bus: uint8(i / 8 * 0x80), Device: 4, Function: uint8(i % 8)},
			dom:     p.iommu,
			nIRQ:    o.ChannelsPerFunction, // one MSI-X vector per channel
			cfgSize: o.ConfigSize,
		}
		f.bar = &bar{f: f, size: hw.BAR0Size}
		initCBDMAConfig(f, o.DeviceID, o.ChannelsPerFunction)
		fn := &cbFunction{f: f, ver: o.Version, xferCap: o.XferCap, caps: caps, dcaOff: dcaOff}
		for n := 0; n < o.ChannelsPerFunction; n++ {
			c := &cbChannel{
				f: f, fn: fn, idx: n, ver: o.Version, xferCap: o.XferCap, caps: caps,
				resetDelay: o.ResetDelay, bandwidth: o.Bandwidth, spin: o.Spin,
				wipeOnReset: model.Quirks&hw.QuirkMSIXResetWipe != 0,
				addr40:      model.Quirks&hw.QuirkAddr40 != 0,
				hideArmed:   o.HideArmed,
				slowClear:   o.SlowClear,
				slowReads:   o.SlowClearReads,
				wake:        make(chan struct{}, 1),
				done:        make(chan struct{}),
			}
			c.state = hw.StateHalted
			c.unarmed.Store(true)
			c.sts.Store(uint64(hw.StateHalted))
			c.winSeq = ^uint64(0)
			c.parkMax.Store(int64(defaultParkMax))
			fn.chans = append(fn.chans, c)
			p.chans = append(p.chans, c)
			started := make(chan error, 1)
			go c.run(cpus, started)
			if err := <-started; err != nil {
				f.m = fn
				p.fns = append(p.fns, f)
				p.Close()
				return nil, fmt.Errorf("emulated cbdma: binding channel %d's thread to CPUs %v: %w (name CPUs this process may run on: see taskset -p %d)", len(p.chans)-1, o.CPUs, err, unix.Getpid())
			}
		}
		f.m = fn
		p.fns = append(p.fns, f)
	}
	return p, nil
}

// cpuSetSize is how many CPUs a unix.CPUSet holds (glibc's CPU_SETSIZE).
const cpuSetSize = 1024

// cpuList returns the CPUs in set, in order.
func cpuList(set *unix.CPUSet) []int {
	var l []int
	for c := 0; c < cpuSetSize && len(l) < set.Count(); c++ {
		if set.IsSet(c) {
			l = append(l, c)
		}
	}
	return l
}

// dcaOffset is where DCAOFFSET says the DCA registers are: above the
// highest channel block a 16-channel function could have, below the MSI-X
// table.
const dcaOffset = 0x0E00

func initCBDMAConfig(f *Function, dev uint16, vectors int) {
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
	// MSI-X capability at 0x80: one vector per channel (Linux's
	// ioat_dma_setup_interrupts asks for CHANCNT of them), table at
	// BAR0+0x2000, PBA at BAR0+0x3000 (spec §2.3).
	c[0x80] = pci.CapMSIX
	c[0x81] = 0
	le.PutUint16(c[0x82:], uint16(vectors-1)) // table size, encoded N-1
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

// Functions returns the platform's PCI functions.
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

// Channel numbers in InjectError, InjectHang, SetBandwidth and Stats count
// every channel of the platform in order: function i's channel n is
// i*ChannelsPerFunction + n.

// InjectError makes channel ch fail the n-th descriptor it executes from now
// (0: the next one) with the given CHANERR bits, as if the hardware had hit
// that error there. The descriptor moves no data.
func (p *CBDMA) InjectError(ch, n int, chanerr uint32) {
	c := p.chans[ch]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject = append(c.inject, injection{at: c.executed + uint64(n), bits: chanerr})
}

// InjectHang makes channel ch stop at the n-th descriptor it executes from
// now: the descriptor never completes and the channel stays ACTIVE until
// it is reset or re-armed, as a channel that simply stops completing. A
// non-zero chanerr is latched in CHANERR (and the error interrupt raised)
// without halting: error bits without HALTED.
func (p *CBDMA) InjectHang(ch, n int, chanerr uint32) {
	c := p.chans[ch]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject = append(c.inject, injection{at: c.executed + uint64(n), bits: chanerr, hang: true})
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
	// Violations counts misprogramming real hardware would not honour or
	// would punish (see the package doc's table); LastViolation
	// describes the latest.
	Violations    uint64
	LastViolation string
	// CPUs lists the CPUs the channel's thread may run on, as the thread
	// read them back from the kernel after binding itself
	// (CBDMAOptions.CPUs); nil when it is not bound.
	CPUs []int
}

// Stats returns channel ch's counters.
func (p *CBDMA) Stats(ch int) ChannelStats {
	c := p.chans[ch]
	s := ChannelStats{
		Descriptors: c.nDesc.Load(), Bytes: c.nBytes.Load(), Errors: c.nErr.Load(),
		Interrupts: c.nIRQ.Load(), Violations: c.nViol.Load(),
		CPUs: c.cpus,
	}
	if v := c.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	return s
}

type injection struct {
	at   uint64
	bits uint32
	hang bool
}

// fetched is a descriptor as the engine read it from memory.
type fetched struct {
	addr  uint64
	d     hw.Descriptor
	ok    bool // the read succeeded
	first bool // the chain's first descriptor
}

// dbNone in lastDB means no doorbell since the chain was armed or reset.
const dbNone = 1 << 16

// cbChannel models one CBDMA channel. Register writes arrive on the
// caller's goroutine; descriptors execute on the channel's own goroutine.
// mu guards the control state and is held while a descriptor executes, so
// a RESET or SUSPEND takes effect between descriptors, as on hardware. The
// doorbell, CHANSTS and CHANERR are atomics, read without mu. With
// DMACAP.DPS (CB 3.4) descriptors are fetched when the doorbell rings,
// into a prefetch queue guarded by pfMu, so the doorbell fetches without
// waiting for a descriptor in progress.
type cbChannel struct {
	f           *Function
	fn          *cbFunction
	idx         int // channel number within the function
	ver         uint8
	xferCap     uint8
	caps        uint32
	resetDelay  time.Duration
	bandwidth   int64
	spin        time.Duration
	wipeOnReset bool
	addr40      bool
	hideArmed   bool
	slowClear   uint32 // CHANERR bits slow to clear (CBDMAOptions.SlowClear)
	slowReads   int    // reads they outlive their clear by; negative: for ever

	// ghostMu guards ghost and ghostLeft: SlowClear bits software cleared
	// that CHANERR still reads as set, for ghostLeft more reads.
	ghostMu   sync.Mutex
	ghost     uint32
	ghostLeft int

	dmacount atomic.Uint32 // doorbell, 16 bits
	lastDB   atomic.Uint32 // last doorbell value, or dbNone
	dbSeq    atomic.Uint64 // doorbell writes so far
	dbBack   atomic.Bool   // a doorbell moved DMACOUNT backwards
	unarmed  atomic.Bool   // reset and no CHAINADDR since
	sts      atomic.Uint64 // CHANSTS
	// stsMu makes a completion write-back and the CHANSTS value it carries
	// one event for register reads: it is held from the write-back to the
	// CHANSTS store, and by CHANSTS reads. Without it a driver could see
	// the write-back name descriptor n, then read CHANSTS still naming
	// n-1, as hardware never shows (CHANSTS changes before the write-back
	// of its value), while one that sees HALTED in CHANSTS must also see
	// the halt's write-back. It also guards the latched high dword.
	stsMu      sync.Mutex
	stsHi      uint32
	stsLatched bool
	chanerr    atomic.Uint32
	bwLimit    atomic.Int64
	parked     atomic.Bool
	// bell is the futex word a pinned channel (CBDMAOptions.CPUs) parks
	// on: a kick adds one and wakes its thread directly, as a doorbell
	// write reaches silicon (see idle).
	bell     atomic.Uint32
	pinned   bool          // its goroutine owns a thread bound to CPUs of its own
	parkMax  atomic.Int64  // bound of one park, ns (defaultParkMax)
	parks    atomic.Uint64 // parks so far
	armedPub atomic.Bool   // state is ARMED, ACTIVE or IDLE and not stopped
	cntPub   atomic.Uint32 // copy of cnt for the spin loop
	wake     chan struct{}
	done     chan struct{}
	stopping atomic.Bool

	pfMu    sync.Mutex
	pf      [256]fetched // ring of prefetched descriptors
	pfHead  int
	pfLen   int
	pfNext  uint64 // address of the next descriptor to prefetch
	pfCount uint16 // descriptors fetched since the chain was armed
	pfFirst bool
	pfStop  bool // a fetch failed: nothing more until re-armed
	pfHint  int

	mu         sync.Mutex
	state      hw.State
	ctrl       uint16
	inUse      bool
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
	stuck      bool // stopped without halting until reset or re-armed
	inject     []injection
	drsctl     uint16
	ltrSel     uint8
	ltrActive  uint32
	ltrIdle    uint32
	hint       int
	winSeq     uint64 // doorbell count when the current window began
	winStart   uint64 // first descriptor executed in the window
	winLen     int

	cpus []int // the CPUs its thread is bound to, as read back (nil: unbound)

	nDesc, nBytes, nErr, nIRQ, nViol atomic.Uint64
	lastViol                         atomic.Pointer[string]
	bwStart                          time.Time
	bwDue                            time.Time
	bwBytes                          int64
	gen                              uint64 // bumped by reset and arm
}

func (c *cbChannel) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if len(c.fn.chans) > 1 {
		s = fmt.Sprintf("channel %d: %s", c.idx, s)
	}
	c.nViol.Add(1)
	c.lastViol.Store(&s)
}

func (c *cbChannel) kick() {
	if c.parked.Load() {
		c.unpark()
	}
}

// unpark wakes the channel's goroutine from its park: a pinned channel's
// thread through its futex, without the Go scheduler; any other through
// its wake channel.
func (c *cbChannel) unpark() {
	if c.pinned {
		c.bell.Add(1)
		futexWake(&c.bell)
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *cbChannel) inReset() bool {
	return !c.resetUntil.IsZero() && time.Now().Before(c.resetUntil)
}

func (c *cbChannel) dps() bool { return c.caps&hw.CapDPS != 0 }

// read serves a read at channel offset r.
func (c *cbChannel) read(r, w int) uint64 {
	switch {
	case r == hw.ChanSts && w == 8:
		return c.loadSts()
	case r == hw.ChanSts && w == 4:
		// Reading the low dword latches the high one, so a driver that
		// reads the halves low first never pairs two different values.
		c.stsMu.Lock()
		v := c.sts.Load()
		c.stsHi, c.stsLatched = uint32(v>>32), true
		c.stsMu.Unlock()
		return v & 0xFFFFFFFF
	case r == hw.ChanSts+4 && w == 4:
		c.stsMu.Lock()
		defer c.stsMu.Unlock()
		if c.stsLatched {
			c.stsLatched = false
			return uint64(c.stsHi)
		}
		return c.sts.Load() >> 32
	case r == hw.ChanErr && w == 4:
		return uint64(c.chanerr.Load() | c.readGhost())
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
		return c.chain
	case r == hw.ChanChainAddr && w == 4:
		return c.chain & 0xFFFFFFFF
	case r == hw.ChanChainAddr+4 && w == 4:
		return c.chain >> 32
	case r == hw.ChanCmp && w == 8:
		return c.cmp
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

// readGhost returns the cleared SlowClear bits CHANERR still reads as
// set, and counts the read against them.
func (c *cbChannel) readGhost() uint32 {
	if c.slowClear == 0 {
		return 0
	}
	c.ghostMu.Lock()
	defer c.ghostMu.Unlock()
	g := c.ghost
	if g != 0 && c.ghostLeft > 0 {
		c.ghostLeft--
		if c.ghostLeft == 0 {
			c.ghost = 0
		}
	}
	return g
}

// loadSts reads CHANSTS for a register read (see stsMu).
func (c *cbChannel) loadSts() uint64 {
	c.stsMu.Lock()
	defer c.stsMu.Unlock()
	return c.sts.Load()
}

// write serves a write at channel offset r. Writes made while RESET is
// still set land as well (DPDK writes CHAINADDR, CHANCTRL and CHANCMP
// right after RESET without polling it): the model's reset takes effect
// at once, only the bit's self-clearing is delayed.
func (c *cbChannel) write(r, w int, v uint64) {
	// The doorbell is the fast path: no lock.
	if r == hw.ChanDMACount && w == 2 {
		c.doorbell(uint32(v & 0xFFFF))
		return
	}
	if r == hw.ChanErr && w == 4 {
		old := c.chanerr.And(^uint32(v))
		if slow := old & uint32(v) & c.slowClear; slow != 0 {
			c.ghostMu.Lock()
			c.ghost |= slow
			c.ghostLeft = c.slowReads
			c.ghostMu.Unlock()
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
		c.arm(v)
	case r == hw.ChanChainAddr && w == 4:
		c.chainLo = uint32(v)
	case r == hw.ChanChainAddr+4 && w == 4:
		c.arm(v<<32 | uint64(c.chainLo))
	case r == hw.ChanCmp && w == 8:
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

// doorbell takes a DMACOUNT write. A value behind the previous one (by
// 32768 or more, mod 2^16) moves the count backwards: the engine halts
// with the descriptor-count error instead of running ~65535 stray
// descriptors.
func (c *cbChannel) doorbell(v uint32) {
	// The doorbell count moves first: an engine that sees the new DMACOUNT
	// must also see a new window (execOne).
	c.dbSeq.Add(1)
	c.dmacount.Store(v)
	prev := c.lastDB.Swap(v)
	if prev&dbNone == 0 && (v-prev)&0xFFFF >= 0x8000 {
		c.dbBack.Store(true)
	}
	if c.unarmed.Load() {
		c.violation("doorbell (DMACOUNT=%d) rung before CHAINADDR after a reset: write CHAINADDR first; the count is dropped when the chain is armed", v)
	}
	if c.dps() && c.armedPub.Load() {
		c.pfMu.Lock()
		c.prefetchLocked(uint16(v))
		c.pfMu.Unlock()
	}
	c.kick()
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
			c.stuck = false
			c.setState(hw.StateSuspended)
		}
	case v&hw.CmdResume != 0:
		if c.state == hw.StateSuspended {
			c.setState(hw.StateIdle)
			c.kick()
		}
	}
}

// clearPrefetch empties the prefetch queue; the next fetch starts at addr.
func (c *cbChannel) clearPrefetch(addr uint64) {
	c.pfMu.Lock()
	c.pfHead, c.pfLen, c.pfNext, c.pfCount, c.pfFirst, c.pfStop = 0, 0, addr, 0, true, false
	c.pfMu.Unlock()
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
	c.lastDB.Store(dbNone)
	c.dbBack.Store(false)
	c.unarmed.Store(true)
	c.irqPending = false
	c.stuck = false
	c.winSeq = ^uint64(0)
	c.drsctl = 0
	c.clearPrefetch(0)
	c.setState(hw.StateHalted)
	c.sts.Store(uint64(hw.StateHalted))
	if c.wipeOnReset {
		c.f.wipeInterrupts()
	}
}

func (c *cbChannel) setState(s hw.State) {
	c.state = s
	c.armedPub.Store(!c.stuck && (s == hw.StateArmed || s == hw.StateActive || s == hw.StateIdle))
	if s == hw.StateArmed && c.hideArmed {
		s = hw.StateIdle
	}
	c.sts.Store(c.lastDone | uint64(s))
}

// arm takes a new chain address. A channel accepts one only when halted,
// suspended or armed, with no error outstanding. Zero is accepted (DPDK's
// probe writes it while waiting for RESET to clear): the chain faults
// only if a doorbell runs it. The internal count restarts at 0 and the
// doorbell register with it, so nothing runs until DMACOUNT is written.
func (c *cbChannel) arm(addr uint64) {
	switch {
	case c.state == hw.StateActive || c.state == hw.StateIdle:
		c.violation("CHAINADDR written while the channel is %v (suspend or reset it first)", c.state)
		c.haltLocked(hw.ErrChainAddr)
		return
	case c.chanerr.Load() != 0:
		c.violation("CHAINADDR written with CHANERR=%s outstanding: the channel stays HALTED", hw.ErrString(c.chanerr.Load()))
		return
	case c.ver < hw.Ver33 && c.f.hasConfig(hw.CfgChanErrInt) && c.f.config32(hw.CfgChanErrInt) != 0:
		c.violation("CHAINADDR written with CHANERR_INT (config 0x180) not cleared: below CB 3.3 the channel stays HALTED")
		return
	case addr&(hw.DescSize-1) != 0 || c.addr40 && addr >= 1<<40:
		c.haltLocked(hw.ErrChainAddr)
		return
	}
	c.gen++
	c.chain = addr
	c.next = addr
	c.first = true
	c.cnt = 0
	c.cntPub.Store(0)
	c.dmacount.Store(0)
	c.lastDB.Store(dbNone)
	c.dbBack.Store(false)
	c.unarmed.Store(false)
	c.stuck = false
	c.winSeq = ^uint64(0)
	c.lastDone = 0
	c.clearPrefetch(addr)
	c.setState(hw.StateArmed)
	c.kick()
}

// latch records error bits in CHANERR and, below CB 3.3, in CHANERR_INT.
func (c *cbChannel) latch(bits uint32) {
	c.chanerr.Or(bits)
	if c.ver < hw.Ver33 && c.f.hasConfig(hw.CfgChanErrInt) {
		c.f.orConfig32(hw.CfgChanErrInt, bits)
	}
}

// haltLocked stops the channel on an error. The status write-back lands
// before CHANSTS changes, so whoever sees HALTED in CHANSTS also sees the
// write-back.
func (c *cbChannel) haltLocked(bits uint32) {
	c.latch(bits)
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

// stopLocked stops the channel without halting it: it stays in its state
// and runs nothing until reset or re-armed.
func (c *cbChannel) stopLocked() {
	c.stuck = true
	c.armedPub.Store(false)
}

// descError handles an error found while executing a descriptor, as
// CHANERRMSK and CHANCTRL.ANY_ERR_ABORT_EN say, and reports whether the
// descriptor completes all the same (a masked error).
func (c *cbChannel) descError(bits uint32) bool {
	if bits&^c.errMask == 0 {
		c.latch(bits)
		c.violation("CHANERR %s masked by CHANERRMSK: the descriptor moved no data yet completes (no reference driver masks copy errors)", hw.ErrString(bits))
		return true
	}
	if c.ctrl&hw.CtrlAnyErrAbortEn == 0 {
		// Without abort-on-error the channel does not halt: it latches
		// the error and stops where it is.
		c.latch(bits)
		c.nErr.Add(1)
		c.stopLocked()
		if c.ctrl&hw.CtrlErrIntEn != 0 {
			c.interruptLocked()
		}
		return false
	}
	c.haltLocked(bits)
	return false
}

// writeCompletion writes status v to the CHANCMP address; a failure halts
// the channel with a completion address error.
func (c *cbChannel) writeCompletion(v uint64) bool {
	if c.cmp&7 != 0 || c.cmp == 0 || !c.f.busMaster() || c.addr40 && c.cmp >= 1<<40 {
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
	c.latch(hw.ErrCmplAddr)
	if c.state != hw.StateHalted {
		c.nErr.Add(1)
	}
	c.setState(hw.StateHalted)
}

// interruptLocked raises the channel's interrupt, or leaves it pending
// until software re-arms it with CHANCTRL.INT_REARM.
func (c *cbChannel) interruptLocked() {
	vec, ok := c.fn.interrupt(c.idx)
	if !ok {
		return
	}
	if c.ctrl&hw.CtrlIntRearm == 0 {
		c.irqPending = true
		return
	}
	c.ctrl &^= hw.CtrlIntRearm
	if c.f.raise(vec) {
		c.nIRQ.Add(1)
	}
}

func (c *cbChannel) flr() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked()
	c.chanerr.Store(0)
	c.ghostMu.Lock()
	c.ghost, c.ghostLeft = 0, 0
	c.ghostMu.Unlock()
	c.inUse = false
	c.errMask, c.dcaCtrl = 0, 0
}

func (c *cbChannel) close() {
	if c.stopping.Swap(true) {
		return
	}
	c.unpark()
	<-c.done
	// Holding mu after the goroutine ended guarantees no DMA is in flight.
	c.mu.Lock()
	c.setState(hw.StateHalted)
	c.mu.Unlock()
}

// runnable reports whether the channel has descriptors to execute (or a
// doorbell error to raise).
func (c *cbChannel) runnable() bool {
	switch c.state {
	case hw.StateArmed, hw.StateActive, hw.StateIdle:
		return !c.stuck && (c.dbBack.Load() || uint16(c.dmacount.Load()) != c.cnt)
	}
	return false
}

// run is the channel's engine: it waits for the doorbell and executes
// descriptors in order. With cpus, it first binds its own thread to them
// for good (the thread is never unlocked, so it exits with the goroutine
// and no other goroutine inherits the binding); it reports on started
// whether it could, and runs only if so.
func (c *cbChannel) run(cpus *unix.CPUSet, started chan<- error) {
	defer close(c.done)
	if cpus != nil {
		runtime.LockOSThread()
		if err := unix.SchedSetaffinity(0, cpus); err != nil {
			c.stopping.Store(true)
			started <- err
			return
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &got); err != nil {
			c.stopping.Store(true)
			started <- err
			return
		}
		c.cpus = cpuList(&got)
		c.pinned = true
	}
	started <- nil
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
// A channel bound to CPUs of its own (CBDMAOptions.CPUs) polls without
// giving its P back between looks, as silicon would: its goroutine is
// locked to its thread, and every runtime.Gosched would hand the P over
// and wake another thread to take it back, futex calls and
// inter-processor wake-ups charged to the driving process's CPUs. It
// yields its CPU to the kernel instead (sched_yield, keeping the P), so a
// thread that shares that CPU with it (on a small machine, the process
// the engine's interrupt just woke) runs at once rather than after the
// spin; and it parks on a futex the doorbell wakes directly.
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
			if c.pinned {
				osYield()
			} else {
				runtime.Gosched()
			}
		}
	}
	c.parked.Store(true)
	bell := c.bell.Load()
	// Re-check after announcing we park: a doorbell between the check and
	// the store would otherwise be missed.
	c.mu.Lock()
	work := c.runnable()
	c.mu.Unlock()
	// A bounded sleep: state changes that do not kick (a config write
	// racing the park) are still picked up.
	parkMax := time.Duration(c.parkMax.Load())
	switch {
	case work || c.stopping.Load():
	case c.pinned:
		c.parks.Add(1)
		// The thread sleeps in the kernel and the doorbell's futex wake
		// runs it at once on its own CPU. Parked in the Go scheduler
		// instead, the locked goroutine was readied onto the ringing
		// goroutine's P and started only when that P scheduled, then
		// handed its P over to this thread: hundreds of microseconds on
		// a loaded machine between a doorbell and its first descriptor,
		// and two wake-ups on the application's CPU. A kick after the
		// bell was read changes the word, and the wait returns at once.
		futexWait(&c.bell, bell, parkMax)
	default:
		c.parks.Add(1)
		select {
		case <-c.wake:
		case <-time.After(parkMax):
		}
	}
	c.parked.Store(false)
}

// unpinnedSpin is the default Spin of channels without CPUs of their own
// (see CBDMAOptions.Spin): long enough for the next chunk's doorbell of a
// driver that submits a message chunk by chunk, short beside the wake-ups
// a longer poll on the application's Ps holds back.
const unpinnedSpin = 20 * time.Microsecond

// defaultParkMax bounds one park of an idle channel.
const defaultParkMax = 10 * time.Millisecond

// peekWork tells, without the lock, whether the channel seems to have
// work (for the spin loop; a stale answer costs one more loop).
func (c *cbChannel) peekWork() bool {
	return c.armedPub.Load() && (uint16(c.dmacount.Load()) != uint16(c.cntPub.Load()) || c.dbBack.Load())
}

// pace holds a descriptor of n bytes until the channel's bandwidth cap
// says its transfer is over; the data lands after it, so a driver that
// reads the destination before the completion sees the old bytes. It
// releases mu while it sleeps, so register writes (a RESET) go through; it
// reports false when the channel was reset or stopped meanwhile, and the
// descriptor must not complete.
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
	return gen == c.gen && c.state == hw.StateActive && !c.stuck && !c.stopping.Load()
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
	if c.dbBack.Swap(false) {
		c.violation("DMACOUNT moved backwards (to %d): it only ever grows, mod 2^16, by the descriptors added", c.dmacount.Load())
		c.haltLocked(hw.ErrDescCount)
		return
	}
	if c.state != hw.StateActive {
		c.setState(hw.StateActive)
	}
	for i := 0; i < 64 && c.state == hw.StateActive && !c.stuck; i++ {
		target := uint16(c.dmacount.Load())
		if target == c.cnt {
			break
		}
		c.execOne(target)
	}
	if c.state == hw.StateActive && !c.stuck && uint16(c.dmacount.Load()) == c.cnt {
		c.setState(hw.StateIdle)
	}
}

// prefetchLocked fetches descriptors ahead of execution, up to the
// prefetch limit and the doorbell count target. Called with pfMu held.
// The target may be stale: the engine reads DMACOUNT before it fetches,
// and a doorbell in between may already have fetched past that value.
// Only a target ahead of what was fetched (a 16-bit distance below 2^15,
// as drivers ring it) fetches more; anything else would read ring slots
// the driver has not written yet.
func (c *cbChannel) prefetchLocked(target uint16) {
	limit := c.fn.prefetchLimit()
	dom := c.f.dom
	for c.pfLen < limit && ahead(target, c.pfCount) && !c.pfStop && c.f.busMaster() {
		e := &c.pf[(c.pfHead+c.pfLen)%len(c.pf)]
		*e = fetched{addr: c.pfNext, first: c.pfFirst}
		dom.rlock()
		raw, ok := dom.translate(e.addr, hw.DescSize, false, &c.pfHint)
		if ok {
			e.d.Decode(raw)
		}
		dom.runlock()
		e.ok = ok
		c.pfLen++
		c.pfCount++
		c.pfFirst = false
		if !ok {
			c.pfStop = true
			return
		}
		c.pfNext = e.d.Next
	}
}

// ahead reports whether the 16-bit doorbell count target lies ahead of
// count.
func ahead(target, count uint16) bool {
	d := target - count
	return d != 0 && d < 0x8000
}

// fetch reads the next descriptor: from the prefetch queue with DPS, else
// from memory now.
func (c *cbChannel) fetch(target uint16) fetched {
	if c.dps() {
		c.pfMu.Lock()
		defer c.pfMu.Unlock()
		if c.pfLen == 0 {
			c.prefetchLocked(target)
		}
		if c.pfLen == 0 {
			return fetched{addr: c.pfNext, first: c.pfFirst}
		}
		e := c.pf[c.pfHead]
		c.pfHead = (c.pfHead + 1) % len(c.pf)
		c.pfLen--
		// The engine keeps fetching ahead while it executes.
		c.prefetchLocked(target)
		return e
	}
	e := fetched{addr: c.next, first: c.first}
	dom := c.f.dom
	dom.rlock()
	raw, ok := dom.translate(e.addr, hw.DescSize, false, &c.hint)
	if ok {
		e.d.Decode(raw)
	}
	dom.runlock()
	e.ok = ok
	return e
}

// execOne fetches, checks and executes the next descriptor.
func (c *cbChannel) execOne(target uint16) {
	e := c.fetch(target)
	if !e.ok {
		if e.first {
			c.haltLocked(hw.ErrChainAddr)
		} else {
			c.haltLocked(hw.ErrNextAddr)
		}
		return
	}
	c.first = false
	addr, d := e.addr, &e.d
	// A ring run past its end comes back to where the doorbell's window
	// began before a new doorbell arrives. A self-linked descriptor is
	// exempt: repeating it is legal (Linux's VFIO selftest does so).
	if seq := c.dbSeq.Load(); seq != c.winSeq {
		c.winSeq, c.winStart, c.winLen = seq, addr, 0
	} else if addr == c.winStart && c.winLen > 1 {
		c.violation("DMACOUNT ran past the ring: descriptor %#x came round again after %d descriptors within one doorbell", addr, c.winLen)
		c.haltLocked(hw.ErrDescCount)
		return
	}
	c.winLen++
	if bits := d.Validate(c.xferCap, c.caps) | c.addrCheck(d); bits != 0 {
		if c.descError(bits) {
			c.completeOne(addr, d, target)
		}
		return
	}
	if len(c.inject) > 0 && c.inject[0].at == c.executed {
		in := c.inject[0]
		c.inject = c.inject[1:]
		c.executed++
		if in.hang {
			if in.bits != 0 {
				c.latch(in.bits)
				c.nErr.Add(1)
				if c.ctrl&hw.CtrlErrIntEn != 0 {
					c.interruptLocked()
				}
			}
			c.stopLocked()
			return
		}
		if c.descError(in.bits) {
			c.completeOne(addr, d, target)
		}
		return
	}
	c.executed++
	if d.Ctl&hw.CtlNull == 0 {
		if !c.pace(int(d.Size)) {
			return
		}
		bits, ok := c.transferUnlocked(d)
		if !ok {
			return
		}
		if bits != 0 {
			if c.descError(bits) {
				c.completeOne(addr, d, target)
			}
			return
		}
		c.nBytes.Add(uint64(d.Size))
	}
	c.completeOne(addr, d, target)
}

// completeOne records descriptor d at addr as done: CHANSTS, the
// write-back if asked for, the interrupt if asked for.
func (c *cbChannel) completeOne(addr uint64, d *hw.Descriptor, target uint16) {
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

// transferUnlocked runs transfer with mu released, as pace sleeps: the
// copy is the silicon at work, and the registers stay live meanwhile. A
// driver that re-armed the interrupt (a CHANCTRL write) while a large
// descriptor was being copied waited for the whole copy, spinning then
// sleeping on the lock on the application's CPU, and was woken again when
// the copy let go: two wake-ups per re-arm that no device costs. It
// reports false, and the descriptor must not complete, when the channel
// was reset, re-armed or stopped meanwhile (a real engine aborts it).
// Only the channel's goroutine runs descriptors, so the translation hint
// transfer uses is its own. Called with mu held.
func (c *cbChannel) transferUnlocked(d *hw.Descriptor) (uint32, bool) {
	gen := c.gen
	c.mu.Unlock()
	bits := c.transfer(d)
	c.mu.Lock()
	return bits, gen == c.gen && c.state == hw.StateActive && !c.stuck && !c.stopping.Load()
}

// addrCheck refuses addresses beyond a Jasper Forest channel's 40 bits.
func (c *cbChannel) addrCheck(d *hw.Descriptor) uint32 {
	if !c.addr40 {
		return 0
	}
	const lim = 1 << 40
	switch {
	case d.Next >= lim:
		return hw.ErrNextAddr
	case d.Ctl&hw.CtlNull != 0:
		return 0
	case d.Op() == hw.OpCopy && (d.Src+uint64(d.Size) > lim || d.Ctl&hw.CtlSrcPageBreak != 0 && d.NextSrc >= lim):
		return hw.ErrSrcAddr
	case d.Dst+uint64(d.Size) > lim || d.Ctl&hw.CtlDstPageBreak != 0 && d.NextDst >= lim:
		return hw.ErrDstAddr
	}
	return 0
}

// transfer moves the data of a copy or fill descriptor through the IOMMU,
// in up to two pieces per side when the page-break bits say so.
func (c *cbChannel) transfer(d *hw.Descriptor) uint32 {
	dom := c.f.dom
	n := d.Size
	dom.rlock()
	defer dom.runlock()
	var src [2][]byte
	if d.Op() == hw.OpCopy {
		l, next := hw.Pieces(d.Src, d.NextSrc, n, d.Ctl&hw.CtlSrcPageBreak != 0)
		var ok bool
		if src[0], ok = dom.translate(d.Src, int(l), false, &c.hint); !ok {
			return hw.ErrReadData // the engine reads before it writes
		}
		if l < n {
			if src[1], ok = dom.translate(next, int(n-l), false, &c.hint); !ok {
				return hw.ErrReadData
			}
		}
	}
	var dst [2][]byte
	l, next := hw.Pieces(d.Dst, d.NextDst, n, d.Ctl&hw.CtlDstPageBreak != 0)
	var ok bool
	if dst[0], ok = dom.translate(d.Dst, int(l), true, &c.hint); !ok {
		return hw.ErrWriteData
	}
	if l < n {
		if dst[1], ok = dom.translate(next, int(n-l), true, &c.hint); !ok {
			return hw.ErrWriteData
		}
	}
	if d.Op() == hw.OpFill {
		hw.FillPattern(dst[0], d.Src)
		if dst[1] != nil {
			hw.FillPattern(dst[1], bits.RotateLeft64(d.Src, -8*int(l%8)))
		}
		return 0
	}
	if src[1] == nil && dst[1] == nil {
		copy(dst[0], src[0])
		return 0
	}
	// Two pieces on either side: copy piece by piece.
	si, so := 0, 0
	for di := 0; di < 2; di++ {
		for do := 0; do < len(dst[di]); {
			k := copy(dst[di][do:], src[si][so:])
			do += k
			so += k
			if so == len(src[si]) {
				si, so = si+1, 0
			}
		}
	}
	return 0
}
