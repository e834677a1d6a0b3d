package emulated

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/pci"
)

// The DSA (Intel Data Streaming Accelerator) model, split as the CBDMA
// model is: this file holds the platform (options, the PCI functions,
// fault injection, statistics) and each device's state with its work
// queues; dsa_regs.go the control path (registers, configuration,
// commands); dsa_exec.go execution (the portals, the engine, completion).

// DSAOptions configures an emulated DSA platform.
type DSAOptions struct {
	// Devices is the number of DSA functions (default 1, at most 8).
	Devices int
	// DeviceID is the PCI device ID (default dsahw.DeviceSPR, 0x0b25).
	DeviceID uint16
	// WQs is WQCAP.num_wqs (default 8, at most 16); TotalWQSize is
	// WQCAP.total_wq_size, the entries the WQs share (default 128).
	WQs, TotalWQSize int
	// Engines is ENGCAP.num_engines and Groups GRPCAP.num_groups (default
	// 4 each, at most 16).
	Engines, Groups int
	// MaxXferShift is GENCAP's log2 of the largest transfer (default 31,
	// 2 GiB, as on Sapphire Rapids; 12..31); MaxBatchShift its log2 of the
	// largest batch (default 10, 1024 descriptors; 1..15).
	MaxXferShift, MaxBatchShift uint
	// NoFill, NoCompare and NoCRC clear those operations from OPCAP.
	NoFill, NoCompare, NoCRC bool
	// CommandDelay is how long CMDSTS stays active after a command
	// (default 5µs).
	CommandDelay time.Duration
	// Spin is how long an idle device polls its WQs before it parks
	// (default 20µs).
	Spin time.Duration
	// Scatter makes the IOMMU hand out one IOVA segment per 4 KiB page.
	Scatter bool
	// IOVABase is the first IOVA the IOMMU hands out (default 4 GiB).
	IOVABase uint64
	// SVA makes the platform a DSA bound to the kernel's idxd driver with
	// shared virtual memory, as a process using its user work queues
	// sees it: the DMA domain is the process's address space (a mapping's
	// IOVA is its virtual address; IOMMU.MarkNotPresent makes pages fault
	// until IOMMU.Touch), descriptors carry no PASID of their own (the
	// WQ's, or the one ENQCMD stamps), ConfigureKernel plays the kernel's
	// part, and UserPortal hands out a WQ's portal page as the character
	// device's mmap would.
	SVA bool
	// Bandwidth caps each function's rate in bytes per second (0: as fast
	// as memory allows): its engines share one rate, as they share the
	// device's fabric. An engine busy with a capped transfer holds
	// register accesses until it ends, as a command waits for the
	// descriptors in flight.
	Bandwidth int64
	// IOMMU, when set, puts the functions behind an existing platform's
	// IOMMU (a CBDMA model's, from its IOMMU method) instead of a new
	// one, so one ioat.Engine can drive the channels of one and the work
	// queues of the other, mapping each buffer once for both. IOVABase
	// and Scatter are then that IOMMU's; SVA cannot be combined with it.
	IOMMU *IOMMU
}

// DefaultDSAOptions returns one Sapphire Rapids DSA with 8 WQs sharing 128
// entries, 4 engines in 4 groups, 2 GiB transfers and 1024-descriptor
// batches, and every operation the driver uses in OPCAP.
func DefaultDSAOptions() DSAOptions {
	return DSAOptions{Devices: 1, DeviceID: dsahw.DeviceSPR, WQs: 8, TotalWQSize: 128, Engines: 4, Groups: 4,
		MaxXferShift: 31, MaxBatchShift: 10, CommandDelay: 5 * time.Microsecond, Spin: unpinnedSpin}
}

// Model BAR geometry: tables at TABLEOFF x 0x100.
const (
	dsaBAR0Size   = 0x4000
	dsaGrpCfgOff  = 0x400 // 16 groups x 64 bytes
	dsaWQCfgOff   = 0x800 // 16 WQs x 32 bytes
	dsaMSIXPerm   = 0xA00
	dsaCfgStride  = 32
	dsaGenCfgMask = 0x10FF // token limit, user interrupt enable
)

// DSA is an emulated platform of DSA functions behind one IOMMU.
type DSA struct {
	platform
	devs []*dsaDevice
}

// DSAStats counts what a DSA function did.
type DSAStats struct {
	Descriptors uint64 // descriptors executed (batch members included)
	Bytes       uint64 // bytes moved, filled, compared or checksummed
	Errors      uint64 // completions with an error status, and SWERR entries
	Interrupts  uint64 // interrupts delivered
	Dropped     uint64 // portal writes dropped (WQ full or disabled)
	// Violations counts misprogramming the hardware would not honour or
	// that it drops without a trace (see the package doc); LastViolation
	// describes the latest.
	Violations    uint64
	LastViolation string
}

// NewDSA builds the platform and starts one engine goroutine per function.
func NewDSA(o DSAOptions) (*DSA, error) {
	d := DefaultDSAOptions()
	if o.Devices == 0 {
		o.Devices = d.Devices
	}
	if o.DeviceID == 0 {
		o.DeviceID = d.DeviceID
	}
	if o.WQs == 0 {
		o.WQs = d.WQs
	}
	if o.TotalWQSize == 0 {
		o.TotalWQSize = d.TotalWQSize
	}
	if o.Engines == 0 {
		o.Engines = d.Engines
	}
	if o.Groups == 0 {
		o.Groups = d.Groups
	}
	if o.MaxXferShift == 0 {
		o.MaxXferShift = d.MaxXferShift
	}
	if o.MaxBatchShift == 0 {
		o.MaxBatchShift = d.MaxBatchShift
	}
	if o.CommandDelay == 0 {
		o.CommandDelay = d.CommandDelay
	}
	if o.Spin == 0 {
		o.Spin = d.Spin
	}
	switch {
	case o.Devices < 1 || o.Devices > 8:
		return nil, fmt.Errorf("emulated dsa: %d functions: want 1..8", o.Devices)
	case dsahw.Devices[o.DeviceID] == "":
		return nil, fmt.Errorf("emulated dsa: device ID %#04x is not a DSA ID (0x0b25, 0x11fb, 0x1212)", o.DeviceID)
	case o.WQs < 1 || o.WQs > 16:
		return nil, fmt.Errorf("emulated dsa: %d WQs: want 1..16", o.WQs)
	case o.TotalWQSize < o.WQs || o.TotalWQSize > 0xFFFF:
		return nil, fmt.Errorf("emulated dsa: total WQ size %d: want %d..65535 (at least one entry per WQ)", o.TotalWQSize, o.WQs)
	case o.Engines < 1 || o.Engines > 16 || o.Groups < 1 || o.Groups > 16:
		return nil, fmt.Errorf("emulated dsa: %d engines in %d groups: want 1..16 of each", o.Engines, o.Groups)
	case o.MaxXferShift < 12 || o.MaxXferShift > 31:
		return nil, fmt.Errorf("emulated dsa: max_xfer_shift %d: want 12..31", o.MaxXferShift)
	case o.MaxBatchShift < 1 || o.MaxBatchShift > 15:
		return nil, fmt.Errorf("emulated dsa: max_batch_shift %d: want 1..15", o.MaxBatchShift)
	}
	if o.Bandwidth < 0 {
		return nil, fmt.Errorf("emulated dsa: negative bandwidth %d", o.Bandwidth)
	}
	if o.IOMMU != nil && (o.SVA || o.Scatter || o.IOVABase != 0) {
		return nil, fmt.Errorf("emulated dsa: IOMMU with SVA, Scatter or IOVABase: a shared IOMMU keeps its own address space; drop them")
	}
	if o.SVA && o.Scatter {
		return nil, fmt.Errorf("emulated dsa: SVA and Scatter: a process address space has no IOVA segments to scatter")
	}
	p := &DSA{platform: platform{iommu: o.IOMMU}}
	if p.iommu == nil {
		p.iommu = newIOMMU(o.IOVABase, o.Scatter)
		p.iommu.sva = o.SVA
	}
	for i := 0; i < o.Devices; i++ {
		f := &Function{
			addr:    pci.Address{Bus: 0x6a + uint8(i)*0x10, Device: 1, Function: 0},
			dom:     p.iommu,
			nIRQ:    1 + o.WQs,
			cfgSize: 4096,
		}
		f.bar = &bar{f: f, size: dsaBAR0Size}
		f.bar2 = &bar{f: f, size: o.WQs * dsahw.PortalStride, idx: 2}
		initDSAConfig(f, o.DeviceID, 1+o.WQs)
		dv := newDSADevice(f, o)
		f.m = dv
		p.fns = append(p.fns, f)
		p.devs = append(p.devs, dv)
		go dv.run()
	}
	return p, nil
}

func initDSAConfig(f *Function, dev uint16, vectors int) {
	// A base system peripheral (class 08h, subclass 80h: other) with
	// 64-bit memory BARs 0 (registers) and 2 (portals) and MSI-X at 0x80.
	baseConfig{vendor: dsahw.VendorIntel, device: dev, class: 0x08, subclass: 0x80, bar0: 0xC0000004,
		msix: 0x80, vectors: vectors, table: 0x2000, pba: 0x3000}.init(f)
	binary.LittleEndian.PutUint32(f.cfg[pci.ConfigBAR0+8:], 0xC1000004)
}

// Stats returns function i's counters.
func (p *DSA) Stats(i int) DSAStats {
	d := p.devs[i]
	s := DSAStats{Descriptors: d.nDesc.Load(), Bytes: d.nBytes.Load(), Errors: d.nErr.Load(),
		Interrupts: d.nIRQ.Load(), Dropped: d.nDrop.Load(), Violations: d.nViol.Load()}
	if v := d.lastViol.Load(); v != nil {
		s.LastViolation = *v
	}
	return s
}

// SetBandwidth changes function i's rate cap (bytes/s, 0 for none).
func (p *DSA) SetBandwidth(i int, bytesPerSec int64) {
	p.devs[i].bwLimit.Store(bytesPerSec)
}

// InjectStatus makes function i complete the n-th descriptor it executes
// from now (0: the next) with status instead of running it, as if the
// hardware had hit that error there. A page-fault status completes half
// the transfer first (bytes completed and fault address say where).
func (p *DSA) InjectStatus(i, n int, status uint8) {
	d := p.devs[i]
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inject = append(d.inject, dsaInjection{at: d.executed + uint64(n), status: status})
}

// InjectHang makes function i swallow the n-th descriptor it executes
// from now: it runs nothing and writes neither a completion record nor
// SWERR, as a device that stops completing, so a driver's watchdog must
// notice. A descriptor an abort discards before an engine takes it is not
// executed and does not count: the hang waits for the next one, so a test
// lets the watchdog fire only once the descriptor has been taken
// (DSAStats.Descriptors counts it).
func (p *DSA) InjectHang(i, n int) {
	d := p.devs[i]
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inject = append(d.inject, dsaInjection{at: d.executed + uint64(n), hang: true})
}

type dsaInjection struct {
	at     uint64
	status uint8
	hang   bool
}

// dsaWQ is one work queue: its configuration (WQCFG) and, once enabled,
// its queue of descriptors.
type dsaWQ struct {
	cfg     [dsaCfgStride / 4]uint32
	enabled bool
	// The queue: descriptors written to the portal that no engine has
	// taken yet. A driver cannot see when an engine takes one, only when
	// it completes, so it must count an entry taken until then; one that
	// counts less overfills the WQ whenever the engines fall behind.
	q          [][dsahw.DescSize]byte
	qHead, qN  int
	size       int
	dedicated  bool
	xferShift  uint
	batchShift uint
}

// dsaDevice models one DSA function: registers on the caller's goroutine,
// descriptors on the device's own (run), which serves the enabled WQs in
// turn. mu guards everything but the counters; descriptors execute under
// it, so a command (disable, reset) takes effect between descriptors.
// qmu guards what a portal write touches (the WQ queues, whether the
// device and each WQ are enabled), so a write does not wait for a
// descriptor in progress; whoever changes those holds both, mu first.
type dsaDevice struct {
	f *Function
	o DSAOptions

	mu          sync.Mutex
	qmu         sync.Mutex
	state       uint32 // GENSTS state
	gencfg      uint32
	genctrl     uint32
	intcause    uint32
	cmdsts      uint32
	activeUntil time.Time
	swerr       [4]uint64
	grp         [][dsahw.GrpCfgSize / 8]uint64
	wqs         []dsaWQ
	perm        []uint32
	executed    uint64
	inject      []dsaInjection
	next        int    // WQ the engine looks at next
	list        []byte // a batch's descriptor list as read
	hint        int

	work     atomic.Int32 // descriptors queued over all WQs
	paused   atomic.Bool  // tests: the engine takes nothing from the WQs
	wake     chan struct{}
	stopping atomic.Bool
	done     chan struct{}

	bwLimit atomic.Int64 // SetBandwidth's cap; 0: the option's
	bw      pacer

	nDesc, nBytes, nErr, nIRQ, nDrop, nViol atomic.Uint64
	lastViol                                atomic.Pointer[string]
}

func newDSADevice(f *Function, o DSAOptions) *dsaDevice {
	d := &dsaDevice{f: f, o: o, wake: make(chan struct{}, 1), done: make(chan struct{})}
	d.resetLocked()
	return d
}

func (d *dsaDevice) configWrite(off, n int) {}

func (d *dsaDevice) flr() {
	d.mu.Lock()
	d.resetLocked()
	d.mu.Unlock()
}

func (d *dsaDevice) close() {
	if d.stopping.Swap(true) {
		return
	}
	d.kick()
	<-d.done
	// Holding mu after the goroutine ended guarantees no DMA is in flight.
	d.mu.Lock()
	d.qmu.Lock()
	d.state = dsahw.StateDisabled
	d.qmu.Unlock()
	d.mu.Unlock()
}
