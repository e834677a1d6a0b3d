package emulated

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
	"golang.org/x/sys/unix"
)

// The CBDMA (Intel I/OAT) model, split as its driver (package ioat) is:
// this file holds the platform (options, the PCI functions and their
// channels, fault injection, statistics) and each channel's state;
// cbfunction.go the function-level registers; cbdma_regs.go a channel's
// control path (registers, reset, arm and halt, interrupts); cbdma_exec.go
// its execution (descriptor fetch, the copy itself, completion).

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
	platform
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
	p := &CBDMA{platform: platform{iommu: newIOMMU(o.IOVABase, o.Scatter)}}
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
	// A base system peripheral (class 08h, subclass 80h: other) with a
	// 64-bit memory BAR0 and MSI-X at 0x80: one vector per channel
	// (Linux's ioat_dma_setup_interrupts asks for CHANCNT of them), table
	// at BAR0+0x2000, PBA at BAR0+0x3000 (spec §2.3).
	baseConfig{vendor: hw.VendorIntel, device: dev, class: 0x08, subclass: 0x80, bar0: 0xFBD00004,
		msix: 0x80, vectors: vectors, table: 0x2000, pba: 0x3000}.init(f)
	le := binary.LittleEndian
	f.cfg[pci.ConfigRevision] = 0x07
	for _, off := range []int{hw.CfgDMAUncErrSts, hw.CfgChanErrInt} {
		le.PutUint32(f.cfgW1C[off:], 0xFFFFFFFF)
	}
	for _, off := range []int{hw.CfgDMAUncErrMsk, hw.CfgDMAUncErrSev, hw.CfgChanErrMskInt, hw.CfgChanErrSevInt} {
		le.PutUint32(f.cfgW[off:], 0xFFFFFFFF)
	}
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
	bw                               pacer
	gen                              uint64 // bumped by reset and arm
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
