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
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/pci"
)

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
	iommu *IOMMU
	fns   []*Function
	devs  []*dsaDevice
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
	p := &DSA{iommu: newIOMMU(o.IOVABase, o.Scatter)}
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
	c := &f.cfg
	le := binary.LittleEndian
	le.PutUint16(c[pci.ConfigVendorID:], dsahw.VendorIntel)
	le.PutUint16(c[pci.ConfigDeviceID:], dev)
	le.PutUint16(c[pci.ConfigStatus:], pci.StatusCapList)
	c[pci.ConfigClass+1] = 0x80 // subclass: other system peripheral
	c[pci.ConfigClass+2] = 0x08 // class: base system peripheral
	le.PutUint32(c[pci.ConfigBAR0:], 0xC0000004)
	le.PutUint32(c[pci.ConfigBAR0+8:], 0xC1000004)
	c[pci.ConfigCapPtr] = 0x80
	c[0x80] = pci.CapMSIX
	le.PutUint16(c[0x82:], uint16(vectors-1))
	le.PutUint32(c[0x84:], 0x2000)
	le.PutUint32(c[0x88:], 0x3000)
	le.PutUint16(f.cfgW[pci.ConfigCommand:], pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable)
	le.PutUint16(f.cfgW[0x82:], 0xC000)
}

// Functions returns the platform's PCI functions.
func (p *DSA) Functions() []*Function { return p.fns }

// Devices returns the functions as pci.Devices.
func (p *DSA) Devices() []pci.Device {
	ds := make([]pci.Device, len(p.fns))
	for i, f := range p.fns {
		ds[i] = f
	}
	return ds
}

// IOMMU returns the platform's IOMMU (its DMA domain).
func (p *DSA) IOMMU() *IOMMU { return p.iommu }

// Close stops every function; no DMA happens after it returns.
func (p *DSA) Close() error {
	var errs []error
	for _, f := range p.fns {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
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
// notice.
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

	nDesc, nBytes, nErr, nIRQ, nDrop, nViol atomic.Uint64
	lastViol                                atomic.Pointer[string]
}

func newDSADevice(f *Function, o DSAOptions) *dsaDevice {
	d := &dsaDevice{f: f, o: o, wake: make(chan struct{}, 1), done: make(chan struct{})}
	d.resetLocked()
	return d
}

func (d *dsaDevice) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	d.lastViol.Store(&s)
	d.nViol.Add(1)
}

// resetLocked puts the device in its power-on state: disabled, tables
// cleared, queues emptied (their descriptors never complete).
func (d *dsaDevice) resetLocked() {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	d.state = dsahw.StateDisabled
	d.gencfg, d.genctrl, d.intcause = 0, 0, 0
	d.swerr = [4]uint64{}
	d.grp = make([][dsahw.GrpCfgSize / 8]uint64, d.o.Groups)
	d.wqs = make([]dsaWQ, d.o.WQs)
	d.perm = make([]uint32, 1+d.o.WQs)
	d.work.Store(0)
	d.inject = nil
}

func (d *dsaDevice) gencap() uint64 {
	return dsahw.GenCapOverlapCopy | dsahw.GenCapCacheControlMem | dsahw.GenCapConfigEn |
		uint64(d.o.MaxXferShift)<<dsahw.GenCapMaxXferShift | uint64(d.o.MaxBatchShift)<<dsahw.GenCapMaxBatchShift
}

func (d *dsaDevice) wqcap() uint64 {
	return uint64(d.o.TotalWQSize) | uint64(d.o.WQs)<<16 | dsahw.WQCapDedicated | dsahw.WQCapShared | dsahw.WQCapPriority
}

func (d *dsaDevice) opcap() [4]uint64 {
	v := uint64(1<<dsahw.OpNoop | 1<<dsahw.OpBatch | 1<<dsahw.OpDrain | 1<<dsahw.OpMemMove)
	if !d.o.NoFill {
		v |= 1 << dsahw.OpFill
	}
	if !d.o.NoCompare {
		v |= 1 << dsahw.OpCompare
	}
	if !d.o.NoCRC {
		v |= 1 << dsahw.OpCRCGen
	}
	return [4]uint64{v}
}

func (d *dsaDevice) read(off, w int) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.read64Locked(off &^ 7)
	if !ok {
		d.violation("read of %d bytes at BAR0 %#x: no register there", w, off)
		return ^uint64(0) >> (64 - 8*w)
	}
	v >>= 8 * uint(off&7)
	if w < 8 {
		v &= 1<<(8*w) - 1
	}
	return v
}

// read64Locked returns the aligned 64-bit word at off.
func (d *dsaDevice) read64Locked(off int) (uint64, bool) {
	switch {
	case off == dsahw.RegVersion:
		return 0x100, true
	case off == dsahw.RegGenCap:
		return d.gencap(), true
	case off == dsahw.RegWQCap:
		return d.wqcap(), true
	case off == dsahw.RegGrpCap:
		return uint64(d.o.Groups), true
	case off == dsahw.RegEngCap:
		return uint64(d.o.Engines), true
	case off >= dsahw.RegOpCap && off < dsahw.RegOpCap+32:
		return d.opcap()[(off-dsahw.RegOpCap)/8], true
	case off == dsahw.RegTableOff:
		return dsaGrpCfgOff/dsahw.TableUnit | dsaWQCfgOff/dsahw.TableUnit<<dsahw.TableWQCfgShift | dsaMSIXPerm/dsahw.TableUnit<<dsahw.TableMSIXPermShift, true
	case off == dsahw.RegTableOff+8, off == 0x18, off == 0x28, off == dsahw.RegCmdCap, off == 0x70, off == 0x78:
		return 0, true
	case off == dsahw.RegGenCfg:
		return uint64(d.gencfg), true
	case off == dsahw.RegGenCtrl:
		return uint64(d.genctrl), true
	case off == dsahw.RegGenSts:
		return uint64(d.state), true
	case off == dsahw.RegIntCause:
		return uint64(d.intcause), true
	case off == dsahw.RegCmd:
		return 0, true
	case off == dsahw.RegCmdSts:
		v := d.cmdsts
		if time.Now().Before(d.activeUntil) {
			v |= dsahw.CmdStsActive
		}
		return uint64(v), true
	case off >= dsahw.RegSWErr && off < dsahw.RegSWErr+32:
		return d.swerr[(off-dsahw.RegSWErr)/8], true
	case off >= dsaGrpCfgOff && off < dsaGrpCfgOff+d.o.Groups*dsahw.GrpCfgSize:
		g := (off - dsaGrpCfgOff) / dsahw.GrpCfgSize
		return d.grp[g][(off-dsaGrpCfgOff)%dsahw.GrpCfgSize/8], true
	case off >= dsaWQCfgOff && off < dsaWQCfgOff+d.o.WQs*dsaCfgStride:
		wq := &d.wqs[(off-dsaWQCfgOff)/dsaCfgStride]
		i := (off - dsaWQCfgOff) % dsaCfgStride / 4
		cfg := wq.cfg
		if wq.enabled {
			cfg[dsahw.WQCfgState/4] |= dsahw.WQStateEnable << dsahw.WQStateShift
		}
		return uint64(cfg[i]) | uint64(cfg[i+1])<<32, true
	case off >= dsaMSIXPerm && off < dsaMSIXPerm+8*len(d.perm):
		return uint64(d.perm[(off-dsaMSIXPerm)/8]), true
	}
	return 0, false
}

func (d *dsaDevice) write(off, w int, v uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case off == dsahw.RegCmd && w == 4:
		d.commandLocked(uint32(v))
	case off == dsahw.RegGenCfg && w == 4:
		if d.state != dsahw.StateDisabled {
			d.violation("GENCFG written while the device is %s: it is read-only once enabled", dsahw.StateName(d.state))
			return
		}
		d.gencfg = uint32(v) & dsaGenCfgMask
	case off == dsahw.RegGenCtrl && w == 4:
		d.genctrl = uint32(v) & dsahw.GenCtrlSoftErrIntEn
	case off == dsahw.RegIntCause && w == 4:
		d.intcause &^= uint32(v)
	case off >= dsahw.RegSWErr && off < dsahw.RegSWErr+32:
		if off == dsahw.RegSWErr {
			// Writing valid and overflow back clears the entry.
			if v&(dsahw.SWErrValid|dsahw.SWErrOverflow) != 0 {
				d.swerr = [4]uint64{}
			}
			return
		}
		d.violation("write to SWERR+%#x: only the first word's valid and overflow bits are writable", off-dsahw.RegSWErr)
	case off >= dsaGrpCfgOff && off < dsaGrpCfgOff+d.o.Groups*dsahw.GrpCfgSize:
		if d.state != dsahw.StateDisabled {
			d.violation("GRPCFG written while the device is %s: configuration is read-only once the device is enabled", dsahw.StateName(d.state))
			return
		}
		d.tableWrite(d.grp[(off-dsaGrpCfgOff)/dsahw.GrpCfgSize][:], (off-dsaGrpCfgOff)%dsahw.GrpCfgSize, w, v)
	case off >= dsaWQCfgOff && off < dsaWQCfgOff+d.o.WQs*dsaCfgStride:
		wq := &d.wqs[(off-dsaWQCfgOff)/dsaCfgStride]
		if wq.enabled {
			d.violation("WQCFG of WQ %d written while the WQ is enabled: disable it first", (off-dsaWQCfgOff)/dsaCfgStride)
			return
		}
		o := (off - dsaWQCfgOff) % dsaCfgStride
		for i := 0; i < w; i += 4 {
			if (o+i)/4 == dsahw.WQCfgState/4 || (o+i)/4 == 7 {
				continue // state and reserved: read-only
			}
			wq.cfg[(o+i)/4] = uint32(v >> (8 * i))
		}
	case off >= dsaMSIXPerm && off < dsaMSIXPerm+8*len(d.perm) && w == 4:
		d.perm[(off-dsaMSIXPerm)/8] = uint32(v)
	default:
		d.violation("write of %d bytes (%#x) at BAR0 %#x: no writable register of that width there", w, v, off)
	}
}

// tableWrite stores a write of w bytes at byte offset o into a table of
// 64-bit words.
func (d *dsaDevice) tableWrite(t []uint64, o, w int, v uint64) {
	i, sh := o/8, uint(o%8)*8
	mask := ^uint64(0)
	if w < 8 {
		mask = (1<<(8*w) - 1) << sh
	}
	t[i] = t[i]&^mask | v<<sh&mask
}

// commandLocked runs a CMD write (dsahw.Cmd*). The command takes effect
// at once; CMDSTS stays active for CommandDelay, during which a second
// command is a violation and is ignored.
func (d *dsaDevice) commandLocked(v uint32) {
	now := time.Now()
	if now.Before(d.activeUntil) {
		d.violation("CMD %#x written while CMDSTS is still active: poll CMDSTS.active clear before the next command", v)
		return
	}
	cmd, operand := v>>dsahw.CmdShift&0x1F, v&0xFFFFF
	code := d.runCommand(cmd, operand)
	d.cmdsts = uint32(code)
	d.activeUntil = now.Add(d.o.CommandDelay)
	if v&dsahw.CmdIntReq != 0 {
		d.intcause |= dsahw.IntCauseCommand
		d.raise(0)
	}
}

func (d *dsaDevice) runCommand(cmd, operand uint32) uint8 {
	switch cmd {
	case dsahw.CmdEnableDevice:
		return d.enableDevice()
	case dsahw.CmdDisableDevice:
		if d.state != dsahw.StateEnabled {
			return dsahw.CmdErrDisDevEnabled
		}
		d.drainLocked(-1)
		d.qmu.Lock()
		for i := range d.wqs {
			d.wqs[i].enabled = false
		}
		d.state = dsahw.StateDisabled
		d.qmu.Unlock()
	case dsahw.CmdDrainAll:
		d.drainLocked(-1)
	case dsahw.CmdAbortAll:
		for i := range d.wqs {
			d.abortLocked(i)
		}
	case dsahw.CmdResetDevice:
		d.resetLocked()
	case dsahw.CmdEnableWQ:
		return d.enableWQ(int(operand))
	case dsahw.CmdDisableWQ, dsahw.CmdDrainWQ, dsahw.CmdAbortWQ, dsahw.CmdResetWQ:
		base := int(operand>>16) * 16
		mask := operand & 0xFFFF
		if mask == 0 {
			return dsahw.CmdErrInvalWQIdx
		}
		for m := mask; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros32(m)
			if i >= len(d.wqs) {
				return dsahw.CmdErrInvalWQIdx
			}
			if cmd != dsahw.CmdResetWQ && !d.wqs[i].enabled {
				return dsahw.CmdErrWQNotEnabled
			}
		}
		for m := mask; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros32(m)
			switch cmd {
			case dsahw.CmdDisableWQ:
				d.drainLocked(i)
				d.qmu.Lock()
				d.wqs[i].enabled = false
				d.qmu.Unlock()
			case dsahw.CmdDrainWQ:
				d.drainLocked(i)
			case dsahw.CmdAbortWQ:
				d.abortLocked(i)
			case dsahw.CmdResetWQ:
				d.abortLocked(i)
				d.qmu.Lock()
				d.wqs[i] = dsaWQ{}
				d.qmu.Unlock()
			}
		}
	default:
		d.violation("CMD %d: no such command", cmd)
		return dsahw.CmdErrInvalCmd
	}
	return dsahw.CmdOK
}

// enableDevice checks the group configuration as the hardware does.
func (d *dsaDevice) enableDevice() uint8 {
	if d.state == dsahw.StateEnabled {
		return dsahw.CmdErrDevEnabled
	}
	if !d.f.busMaster() {
		d.violation("ENABLE_DEVICE with bus mastering off")
		return dsahw.CmdErrBusMaster
	}
	total := 0
	for i := range d.wqs {
		total += int(d.wqs[i].cfg[0] & 0xFFFF)
	}
	if total > d.o.TotalWQSize {
		d.violation("ENABLE_DEVICE with WQ sizes adding up to %d, over WQCAP's total %d", total, d.o.TotalWQSize)
		return dsahw.CmdErrWQSizeERange
	}
	var wqOwner, engOwner uint64
	for g := range d.grp {
		wqs := d.grp[g][0] | d.grp[g][1] | d.grp[g][2] | d.grp[g][3]
		engs := d.grp[g][dsahw.GrpCfgEngines/8]
		if d.grp[g][1]|d.grp[g][2]|d.grp[g][3] != 0 || wqs>>uint(d.o.WQs) != 0 || engs>>uint(d.o.Engines) != 0 {
			d.violation("ENABLE_DEVICE: group %d names a WQ or engine beyond WQCAP/ENGCAP (WQs %#x, engines %#x)", g, wqs, engs)
			return dsahw.CmdErrGrpConfig4
		}
		if wqs != 0 && engs == 0 {
			d.violation("ENABLE_DEVICE: group %d has WQs %#x and no engine", g, wqs)
			return dsahw.CmdErrGrpConfig
		}
		if engOwner&engs != 0 {
			d.violation("ENABLE_DEVICE: engines %#x in two groups", engOwner&engs)
			return dsahw.CmdErrGrpConfig2
		}
		if wqOwner&wqs != 0 {
			d.violation("ENABLE_DEVICE: WQs %#x in two groups", wqOwner&wqs)
			return dsahw.CmdErrGrpConfig3
		}
		engOwner |= engs
		wqOwner |= wqs
	}
	d.qmu.Lock()
	d.state = dsahw.StateEnabled
	d.qmu.Unlock()
	return dsahw.CmdOK
}

func (d *dsaDevice) inGroup(wq int) bool {
	for g := range d.grp {
		if d.grp[g][0]>>uint(wq)&1 != 0 && d.grp[g][dsahw.GrpCfgEngines/8] != 0 {
			return true
		}
	}
	return false
}

// enableWQ checks a WQ's configuration as the hardware does.
func (d *dsaDevice) enableWQ(i int) uint8 {
	if i >= len(d.wqs) {
		d.violation("ENABLE_WQ %d: the device has %d WQs", i, len(d.wqs))
		return dsahw.CmdErrInvalWQIdx
	}
	if d.state != dsahw.StateEnabled {
		d.violation("ENABLE_WQ %d with the device %s: enable the device first", i, dsahw.StateName(d.state))
		return dsahw.CmdErrDevNotEnabled
	}
	wq := &d.wqs[i]
	if wq.enabled {
		return dsahw.CmdErrWQEnabled
	}
	size := int(wq.cfg[0] & 0xFFFF)
	mode := wq.cfg[dsahw.WQCfgMode/4]
	lim := wq.cfg[dsahw.WQCfgLimits/4]
	xs, bs := uint(lim&0x1F), uint(lim>>5&0xF)
	switch {
	case size == 0:
		d.violation("ENABLE_WQ %d with size 0", i)
		return dsahw.CmdErrWQSize
	case size+d.enabledSize() > d.o.TotalWQSize:
		d.violation("ENABLE_WQ %d of size %d with %d entries already in enabled WQs: over WQCAP's total %d", i, size, d.enabledSize(), d.o.TotalWQSize)
		return dsahw.CmdErrWQSize
	case mode>>dsahw.WQPrioShift&0xF == 0:
		d.violation("ENABLE_WQ %d with priority 0", i)
		return dsahw.CmdErrWQPriority
	case mode&dsahw.WQModeDedic == 0 && mode>>28&1 == 0:
		d.violation("ENABLE_WQ %d in shared mode without PASID: a shared WQ needs PASID (kernel SVA); use dedicated mode", i)
		return dsahw.CmdErrPASIDEn
	case mode&dsahw.WQModeBOF != 0:
		d.violation("ENABLE_WQ %d with block-on-fault, which GENCAP does not offer", i)
		return dsahw.CmdErrBOFEn
	case xs > d.o.MaxXferShift || xs == 0:
		d.violation("ENABLE_WQ %d with max_xfer_shift %d (GENCAP allows 1..%d)", i, xs, d.o.MaxXferShift)
		return dsahw.CmdErrMaxXferSize
	case bs > d.o.MaxBatchShift || bs == 0:
		d.violation("ENABLE_WQ %d with max_batch_shift %d (GENCAP allows 1..%d)", i, bs, d.o.MaxBatchShift)
		return dsahw.CmdErrMaxBatchSize
	case !d.inGroup(i):
		d.violation("ENABLE_WQ %d: the WQ is in no group with an engine", i)
		return dsahw.CmdErrConfig
	}
	d.qmu.Lock()
	wq.enabled, wq.dedicated = true, true
	wq.size, wq.xferShift, wq.batchShift = size, xs, bs
	wq.q = make([][dsahw.DescSize]byte, size)
	wq.qHead, wq.qN = 0, 0
	d.qmu.Unlock()
	return dsahw.CmdOK
}

// enabledSize is the entries the enabled WQs hold.
func (d *dsaDevice) enabledSize() int {
	n := 0
	for i := range d.wqs {
		if d.wqs[i].enabled {
			n += d.wqs[i].size
		}
	}
	return n
}

// drainLocked waits (bounded) for WQ i's descriptors, or every WQ's with
// i < 0, to complete; the engine runs them meanwhile.
func (d *dsaDevice) drainLocked(i int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		pending := 0
		d.qmu.Lock()
		for j := range d.wqs {
			if i < 0 || i == j {
				pending += d.wqs[j].qN
			}
		}
		d.qmu.Unlock()
		if pending == 0 {
			return
		}
		// Run them here: the engine goroutine waits on mu.
		d.stepLocked()
	}
}

func (d *dsaDevice) abortLocked(i int) {
	d.qmu.Lock()
	wq := &d.wqs[i]
	d.work.Add(-int32(wq.qN))
	wq.qHead, wq.qN = 0, 0
	d.qmu.Unlock()
}

// portalWrite takes a 64-byte write at BAR2 offset off.
func (d *dsaDevice) portalWrite(bar, off int, rec *[64]byte) {
	if bar != 2 {
		d.violation("64-byte write to BAR%d %#x: descriptors go to the BAR2 portals", bar, off)
		return
	}
	wqi, page := off/dsahw.PortalStride, off%dsahw.PortalStride/dsahw.PortalPage
	d.qmu.Lock()
	defer d.qmu.Unlock()
	if page != 0 {
		d.nDrop.Add(1)
		d.violation("descriptor written to WQ %d's portal page %d: the model offers only the unlimited portal (page 0)", wqi, page)
		return
	}
	wq := &d.wqs[wqi]
	switch {
	case d.state != dsahw.StateEnabled || !wq.enabled:
		d.nDrop.Add(1)
		d.violation("descriptor written to WQ %d's portal with the device %s and the WQ %s: dropped", wqi, dsahw.StateName(d.state), map[bool]string{true: "enabled", false: "disabled"}[wq.enabled])
		return
	case !wq.dedicated:
		d.nDrop.Add(1)
		d.violation("MOVDIR64B to shared WQ %d: shared WQs take ENQCMD only; dropped", wqi)
		return
	case wq.qN == wq.size:
		// A posted write past the WQ's free entries is dropped without a
		// trace on hardware; the model records it.
		d.nDrop.Add(1)
		d.violation("descriptor written to full dedicated WQ %d (%d entries in flight): dropped; keep at most the WQ size outstanding", wqi, wq.size)
		return
	}
	wq.q[(wq.qHead+wq.qN)%wq.size] = *rec
	wq.qN++
	if d.work.Add(1) == 1 {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// portalAccess is a register-width access to BAR2: the portals take only
// 64-byte writes.
func (d *dsaDevice) portalAccess(off, w int, write bool) uint64 {
	if write {
		d.nDrop.Add(1)
		d.violation("%d-byte write to portal BAR2 %#x: portals take 64-byte writes (MOVDIR64B) only; dropped", w, off)
		return 0
	}
	return ^uint64(0) >> (64 - 8*w)
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
	select {
	case d.wake <- struct{}{}:
	default:
	}
	<-d.done
	// Holding mu after the goroutine ended guarantees no DMA is in flight.
	d.mu.Lock()
	d.qmu.Lock()
	d.state = dsahw.StateDisabled
	d.qmu.Unlock()
	d.mu.Unlock()
}

// run is the device's engine: it executes queued descriptors, spinning a
// while when idle, then parking until a portal write wakes it.
func (d *dsaDevice) run() {
	defer close(d.done)
	for !d.stopping.Load() {
		if d.work.Load() > 0 && !d.paused.Load() {
			d.mu.Lock()
			for n := 0; n < 64 && d.stepLocked(); n++ {
			}
			d.mu.Unlock()
			continue
		}
		deadline := time.Now().Add(d.o.Spin)
		for i := 0; (d.work.Load() == 0 || d.paused.Load()) && !d.stopping.Load(); i++ {
			if i&63 == 63 {
				if time.Now().After(deadline) {
					select {
					case <-d.wake:
					case <-time.After(defaultParkMax):
					}
					break
				}
				runtime.Gosched()
			}
		}
	}
}

// stepLocked executes one descriptor from the next WQ that has one, and
// reports whether there was one.
func (d *dsaDevice) stepLocked() bool {
	if d.state != dsahw.StateEnabled {
		return false
	}
	d.qmu.Lock()
	for k := 0; k < len(d.wqs); k++ {
		i := (d.next + k) % len(d.wqs)
		wq := &d.wqs[i]
		if !wq.enabled || wq.qN == 0 {
			continue
		}
		d.next = i + 1
		var desc dsahw.Descriptor
		desc.Decode(wq.q[wq.qHead][:])
		// The entry frees when an engine takes the descriptor, as on
		// hardware (WQ occupancy counts what waits for an engine), so
		// it is free before the completion record says so.
		wq.qHead = (wq.qHead + 1) % wq.size
		wq.qN--
		d.work.Add(-1)
		d.qmu.Unlock()
		d.execute(i, wq, &desc, false)
		return true
	}
	d.qmu.Unlock()
	return false
}

// allowedFlags are the descriptor flags the model accepts.
const allowedFlags = dsahw.FlagFence | dsahw.FlagCRAV | dsahw.FlagRCR | dsahw.FlagRCI | dsahw.FlagCC

// execute runs one descriptor of WQ wqi and writes its completion record;
// it returns the status. inBatch marks a member of a batch.
func (d *dsaDevice) execute(wqi int, wq *dsaWQ, desc *dsahw.Descriptor, inBatch bool) uint8 {
	d.nDesc.Add(1)
	d.executed++
	c := dsahw.Completion{Status: dsahw.StatusSuccess}
	injected := false
	for k, in := range d.inject {
		if in.at == d.executed-1 {
			d.inject = append(d.inject[:k], d.inject[k+1:]...)
			if in.hang {
				return dsahw.StatusNone
			}
			c.Status = in.status
			injected = true
			break
		}
	}
	switch {
	case injected:
		if c.Status == dsahw.StatusPageFault && desc.Op == dsahw.OpMemMove {
			half := desc.Size / 2
			d.move(desc.Dst, desc.Src, int(half), &c)
			c.Status, c.Bytes, c.Fault = dsahw.StatusPageFault, half, desc.Src+uint64(half)
		}
	case desc.Flags&^allowedFlags != 0 || desc.Flags&dsahw.FlagRCR != 0 && desc.Flags&dsahw.FlagCRAV == 0:
		c.Status = dsahw.StatusInvalidFlags
	case desc.Op > 0x3F || !dsahw.HasOp(d.opcap(), desc.Op) || inBatch && desc.Op == dsahw.OpBatch:
		c.Status = dsahw.StatusBadOpcode
	case desc.PASID != 0:
		c.Status = dsahw.StatusNonZeroRsvd // no PASID under VFIO
	case desc.Flags&dsahw.FlagCRAV != 0 && desc.Compl%dsahw.ComplAlign != 0:
		// The record cannot be written where asked: the error goes to
		// SWERR instead.
		d.swError(wqi, desc, dsahw.StatusCRAAlign, 0, inBatch)
		return dsahw.StatusCRAAlign
	default:
		d.run1(wqi, wq, desc, &c)
	}
	if !c.OK() {
		d.nErr.Add(1)
	}
	d.complete(wqi, desc, c, inBatch)
	return c.Status
}

// run1 executes a well-formed descriptor's operation into c.
func (d *dsaDevice) run1(wqi int, wq *dsaWQ, desc *dsahw.Descriptor, c *dsahw.Completion) {
	needsSize := desc.Op == dsahw.OpMemMove || desc.Op == dsahw.OpFill || desc.Op == dsahw.OpCompare || desc.Op == dsahw.OpCRCGen
	if needsSize && (desc.Size == 0 || uint64(desc.Size) > 1<<wq.xferShift) {
		c.Status = dsahw.StatusXferERange
		return
	}
	switch desc.Op {
	case dsahw.OpNoop, dsahw.OpDrain:
	case dsahw.OpMemMove:
		d.move(desc.Dst, desc.Src, int(desc.Size), c)
	case dsahw.OpFill:
		d.fill(desc.Dst, desc.Src, int(desc.Size), c)
	case dsahw.OpCompare:
		d.compare(desc.Src, desc.Dst, int(desc.Size), c)
	case dsahw.OpCRCGen:
		d.crc(desc.Src, int(desc.Size), binary.LittleEndian.Uint32(desc.OpSpec[:4]), c)
	case dsahw.OpBatch:
		d.batch(wqi, wq, desc, c)
	}
}

// span translates [iova, iova+n) page by page; it returns the memory of
// the first piece, or how many bytes from iova are reachable when the
// range faults (ok false).
func (d *dsaDevice) span(iova uint64, n int, write bool) ([]byte, int, bool) {
	if b, ok := d.f.dom.translate(iova, n, write, &d.hint); ok {
		return b, n, true
	}
	done := 0
	for done < n {
		l := min(n-done, int(pageSize-(iova+uint64(done))%pageSize))
		if _, ok := d.f.dom.translate(iova+uint64(done), l, write, &d.hint); !ok {
			return nil, done, false
		}
		done += l
	}
	return nil, done, false // reachable page by page but not one mapping: treat the seam as a fault
}

// pageFault records a page fault: the first bytes done, then the address that
// failed.
func pageFault(c *dsahw.Completion, done int, at uint64, write bool) {
	c.Status, c.Bytes, c.Fault, c.Write = dsahw.StatusPageFault, uint32(done), at, write
}

func (d *dsaDevice) move(dst, src uint64, n int, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	s, sok, sOK := d.span(src, n, false)
	t, tok, tOK := d.span(dst, n, true)
	if sOK && tOK {
		copy(t, s)
		d.nBytes.Add(uint64(n))
		return
	}
	// Partial completion: the bytes both sides reach, page by page, then
	// the fault where the first of them stops.
	k := min(sok, tok)
	for done := 0; done < k; {
		l := min(k-done, int(pageSize-(src+uint64(done))%pageSize), int(pageSize-(dst+uint64(done))%pageSize))
		ps, _ := d.f.dom.translate(src+uint64(done), l, false, &d.hint)
		pt, _ := d.f.dom.translate(dst+uint64(done), l, true, &d.hint)
		copy(pt, ps)
		done += l
	}
	if sok <= tok {
		pageFault(c, k, src+uint64(k), false)
	} else {
		pageFault(c, k, dst+uint64(k), true)
	}
	d.nBytes.Add(uint64(k))
}

func (d *dsaDevice) fill(dst, pattern uint64, n int, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	t, tok, ok := d.span(dst, n, true)
	if !ok {
		pageFault(c, 0, dst+uint64(tok&^(pageSize-1)), true)
		return
	}
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], pattern)
	for i := 0; i < len(t); i += copy(t[i:], p[:]) {
	}
	d.nBytes.Add(uint64(n))
}

func (d *dsaDevice) compare(a, b uint64, n int, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	x, xok, ok1 := d.span(a, n, false)
	y, yok, ok2 := d.span(b, n, false)
	if !ok1 || !ok2 {
		if xok <= yok {
			pageFault(c, 0, a, false)
		} else {
			pageFault(c, 0, b, false)
		}
		return
	}
	for i := range x {
		if x[i] != y[i] {
			c.Result, c.Bytes = 1, uint32(i)
			d.nBytes.Add(uint64(i))
			return
		}
	}
	d.nBytes.Add(uint64(n))
}

func (d *dsaDevice) crc(src uint64, n int, seed uint32, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	s, _, ok := d.span(src, n, false)
	if !ok {
		pageFault(c, 0, src, false)
		return
	}
	c.CRC = uint64(dsahw.CRC32C(seed, s))
	d.nBytes.Add(uint64(n))
}

// batch runs the descriptor list of a batch descriptor in order. Its own
// record reports the descriptors completed and, when any failed,
// StatusBatchFail.
func (d *dsaDevice) batch(wqi int, wq *dsaWQ, desc *dsahw.Descriptor, c *dsahw.Completion) {
	n := int(desc.Size)
	if n < 2 || n > 1<<wq.batchShift {
		c.Status = dsahw.StatusDescCntERange
		return
	}
	if desc.Src%dsahw.DescSize != 0 {
		c.Status = dsahw.StatusDescListAlign
		return
	}
	d.f.dom.rlock()
	l, ok := d.f.dom.translate(desc.Src, n*dsahw.DescSize, false, &d.hint)
	if ok {
		// The device reads the list once; later writes to it do not count.
		if cap(d.list) < len(l) {
			d.list = make([]byte, len(l))
		}
		copy(d.list[:len(l)], l)
	}
	list := d.list
	d.f.dom.runlock()
	if !ok {
		c.Status, c.Fault = dsahw.StatusBatchPageFlt, desc.Src
		return
	}
	failed := false
	var m dsahw.Descriptor
	for i := 0; i < n; i++ {
		m.Decode(list[i*dsahw.DescSize:])
		if m.Flags&dsahw.FlagFence != 0 && failed {
			// A fence stops the rest of the batch after a failure.
			c.Bytes = uint32(i)
			c.Status = dsahw.StatusBatchFail
			return
		}
		if s := d.execute(wqi, wq, &m, true); s != dsahw.StatusSuccess && s != dsahw.StatusSuccessPred {
			failed = true
		}
	}
	c.Bytes = uint32(n)
	if failed {
		c.Status = dsahw.StatusBatchFail
	}
}

// complete writes the completion record (when the descriptor asks for it
// or failed with an address to write to) and raises the interrupt.
func (d *dsaDevice) complete(wqi int, desc *dsahw.Descriptor, c dsahw.Completion, inBatch bool) {
	wantRec := desc.Flags&dsahw.FlagRCR != 0 || !c.OK() && desc.Flags&dsahw.FlagCRAV != 0
	if wantRec {
		d.f.dom.rlock()
		rec, ok := d.f.dom.translate(desc.Compl, dsahw.ComplSize, true, &d.hint)
		if ok {
			var b [dsahw.ComplSize]byte
			dsahw.EncodeCompletion(b[:], c)
			copy(rec[4:], b[4:])
			// The status word last, in one store: the driver polls it.
			// Publish comes first: a driver that sees the status must
			// find the release it acquires already made.
			dmasync.Publish()
			store32(rec, binary.LittleEndian.Uint32(b[:4]))
		}
		d.f.dom.runlock()
		if !ok {
			d.swError(wqi, desc, dsahw.StatusCRAXlat, desc.Compl, inBatch)
			return
		}
	} else if !c.OK() {
		// An error nobody asked a record for goes to SWERR.
		d.swError(wqi, desc, c.Status, c.Fault, inBatch)
		return
	}
	if desc.Flags&dsahw.FlagRCI != 0 {
		if desc.IntH == 0 || int(desc.IntH) > d.o.WQs {
			d.violation("completion interrupt handle %d: the vectors for completions are 1..%d (0 is for errors)", desc.IntH, d.o.WQs)
			return
		}
		d.raise(int(desc.IntH))
	}
}

// swError logs an error in SWERR (setting overflow if an entry is still
// valid) and raises vector 0 when GENCTRL asks.
func (d *dsaDevice) swError(wqi int, desc *dsahw.Descriptor, status uint8, addr uint64, inBatch bool) {
	d.nErr.Add(1)
	if d.swerr[0]&dsahw.SWErrValid != 0 {
		d.swerr[0] |= dsahw.SWErrOverflow
	} else {
		v := uint64(dsahw.SWErrValid|dsahw.SWErrDescValid|dsahw.SWErrWQIdxValid) | uint64(status)<<dsahw.SWErrCodeShift |
			uint64(wqi)<<dsahw.SWErrWQShift | uint64(desc.Op)<<dsahw.SWErrOpShift
		if inBatch {
			v |= dsahw.SWErrBatch
		}
		d.swerr = [4]uint64{v, 0, addr, 0}
	}
	d.intcause |= dsahw.IntCauseError
	if d.genctrl&dsahw.GenCtrlSoftErrIntEn != 0 {
		d.raise(0)
	}
}

func (d *dsaDevice) raise(v int) {
	if d.f.raise(v) {
		d.nIRQ.Add(1)
	}
}
