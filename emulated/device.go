package emulated

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/pci"
)

// model is what a device model plugs into a Function: its BAR0 register
// behaviour and its reactions to configuration writes.
type model interface {
	read(off, width int) uint64
	write(off, width int, v uint64)
	// configWrite is called after a write to configuration space changed
	// bytes [off, off+n).
	configWrite(off, n int)
	// flr resets the function's model state (function-level reset).
	flr()
	// close stops the model's goroutines.
	close()
}

// platform is the PCI functions of one emulated platform and the IOMMU
// their DMA goes through. Every platform (CBDMA, DSA, and the NICs' through
// nicPlatform) embeds it.
type platform struct {
	iommu *IOMMU
	fns   []*Function
}

// Functions returns the platform's PCI functions.
func (p *platform) Functions() []*Function { return p.fns }

// Devices returns the functions as pci.Devices.
func (p *platform) Devices() []pci.Device {
	ds := make([]pci.Device, len(p.fns))
	for i, f := range p.fns {
		ds[i] = f
	}
	return ds
}

// IOMMU returns the platform's IOMMU (its DMA domain).
func (p *platform) IOMMU() *IOMMU { return p.iommu }

// Close stops every function; no DMA happens after it returns.
func (p *platform) Close() error {
	var errs []error
	for _, f := range p.fns {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// baseConfig is the configuration space every model's function starts
// from: vendor and device IDs, class, BAR0, and one capability, MSI-X.
// What a driver may write there is the command register's memory,
// bus-master and INTx-disable bits and MSI-X's enable and function mask.
// A model adds what is its own (a revision, a second BAR, error registers)
// after init.
type baseConfig struct {
	vendor, device  uint16
	class, subclass byte   // base class and subclass
	bar0            uint32 // BAR0's address with its type bits
	msix            int    // offset of the MSI-X capability
	vectors         int    // MSI-X table size
	table, pba      uint32 // MSI-X table and PBA: BAR offset | BIR
}

// init writes b into f's configuration space and its writable mask.
func (b baseConfig) init(f *Function) {
	c := &f.cfg
	le := binary.LittleEndian
	le.PutUint16(c[pci.ConfigVendorID:], b.vendor)
	le.PutUint16(c[pci.ConfigDeviceID:], b.device)
	le.PutUint16(c[pci.ConfigStatus:], pci.StatusCapList)
	c[pci.ConfigClass+1] = b.subclass
	c[pci.ConfigClass+2] = b.class
	le.PutUint32(c[pci.ConfigBAR0:], b.bar0)
	c[pci.ConfigCapPtr] = byte(b.msix)
	c[b.msix] = pci.CapMSIX
	le.PutUint16(c[b.msix+2:], uint16(b.vectors-1)) // table size, encoded N-1
	le.PutUint32(c[b.msix+4:], b.table)
	le.PutUint32(c[b.msix+8:], b.pba)
	le.PutUint16(f.cfgW[pci.ConfigCommand:], pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable)
	le.PutUint16(f.cfgW[b.msix+2:], 0xC000) // MSI-X enable and function mask
}

// Function is one emulated PCI function. It implements pci.Device over a
// model of the device's registers.
type Function struct {
	addr pci.Address
	dom  *IOMMU
	m    model

	cfgMu   sync.Mutex
	cfgSize int // bytes of configuration space that answer (256 or 4096)
	cfg     [4096]byte
	cfgW    [4096]byte // writable bits
	cfgW1C  [4096]byte // write-1-to-clear bits
	cmd     atomic.Uint32

	bar  *bar
	bar2 *bar // BAR2 (DSA portals), nil when the model has none

	// irqMu serialises enabling and disabling the vectors; irqs is the
	// enabled ones, which raise loads without a lock, so two queues
	// raising their vectors at once share no lock (a vector closed under a
	// raise in flight reports pci.ErrClosed to it, and the message is
	// lost, as one sent to a disabled vector is).
	irqMu  sync.Mutex
	irqs   atomic.Pointer[[]*pci.Interrupt]
	nIRQ   int // vectors the function offers
	closed atomic.Bool
}

var _ pci.Device = (*Function)(nil)

// Address implements pci.Device.
func (f *Function) Address() pci.Address { return f.addr }

// DMA implements pci.Device: every function of one emulated platform shares
// its IOMMU.
func (f *Function) DMA() pci.DMA { return f.dom }

// IOMMU returns the platform IOMMU the function sits behind.
func (f *Function) IOMMU() *IOMMU { return f.dom }

func (f *Function) checkCfg(off, n int) error {
	if f.closed.Load() {
		return &pci.OpError{Op: "config access", Addr: f.addr, Err: pci.ErrClosed}
	}
	if off < 0 || n <= 0 || off+n > f.cfgSize {
		return &pci.OpError{Op: fmt.Sprintf("config access at %#x+%d (the function has %d bytes of configuration space)", off, n, f.cfgSize), Addr: f.addr, Err: pci.ErrBadRange}
	}
	return nil
}

// ReadConfig implements pci.Device.
func (f *Function) ReadConfig(off int, b []byte) error {
	if err := f.checkCfg(off, len(b)); err != nil {
		return err
	}
	f.cfgMu.Lock()
	copy(b, f.cfg[off:])
	f.cfgMu.Unlock()
	return nil
}

// WriteConfig implements pci.Device. Read-only bits keep their value,
// write-1-to-clear bits clear where a 1 is written.
func (f *Function) WriteConfig(off int, b []byte) error {
	if err := f.checkCfg(off, len(b)); err != nil {
		return err
	}
	f.cfgMu.Lock()
	for i, v := range b {
		o := off + i
		cur := f.cfg[o]
		cur = cur&^f.cfgW[o] | v&f.cfgW[o]
		cur &^= v & f.cfgW1C[o]
		f.cfg[o] = cur
	}
	f.cmd.Store(uint32(binary.LittleEndian.Uint16(f.cfg[pci.ConfigCommand:])))
	f.cfgMu.Unlock()
	f.m.configWrite(off, len(b))
	return nil
}

// hasConfig tells whether configuration register off exists.
func (f *Function) hasConfig(off int) bool { return off+4 <= f.cfgSize }

// config32 and orConfig32 let the model read and set its own registers.
func (f *Function) config32(off int) uint32 {
	f.cfgMu.Lock()
	defer f.cfgMu.Unlock()
	return binary.LittleEndian.Uint32(f.cfg[off:])
}

func (f *Function) orConfig32(off int, v uint32) {
	f.cfgMu.Lock()
	defer f.cfgMu.Unlock()
	binary.LittleEndian.PutUint32(f.cfg[off:], binary.LittleEndian.Uint32(f.cfg[off:])|v)
}

func (f *Function) busMaster() bool  { return f.cmd.Load()&pci.CommandBusMaster != 0 }
func (f *Function) memEnabled() bool { return f.cmd.Load()&pci.CommandMemory != 0 }

// BAR implements pci.Device: BAR0, and BAR2 where the model has portals
// (DSA).
func (f *Function) BAR(i int) (pci.Registers, error) {
	if f.closed.Load() {
		return nil, &pci.OpError{Op: fmt.Sprintf("BAR%d", i), Addr: f.addr, Err: pci.ErrClosed}
	}
	if i == 2 && f.bar2 != nil {
		return f.bar2, nil
	}
	if i != 0 {
		return nil, &pci.OpError{Op: fmt.Sprintf("BAR%d", i), Addr: f.addr, Err: pci.ErrNotSupported}
	}
	return f.bar, nil
}

// EnableInterrupts implements pci.Device: the model offers the vectors
// its MSI-X capability announces (a CBDMA function one per channel).
func (f *Function) EnableInterrupts(n int) ([]*pci.Interrupt, error) {
	if f.closed.Load() {
		return nil, &pci.OpError{Op: "enable MSI-X", Addr: f.addr, Err: pci.ErrClosed}
	}
	if n < 1 || n > f.nIRQ {
		return nil, &pci.OpError{Op: fmt.Sprintf("enable %d MSI-X vectors (function has %d)", n, f.nIRQ), Addr: f.addr, Err: pci.ErrNotSupported}
	}
	f.irqMu.Lock()
	defer f.irqMu.Unlock()
	f.disableLocked()
	irqs := make([]*pci.Interrupt, n)
	for i := range irqs {
		irq, err := pci.NewLocalInterrupt()
		if err != nil {
			for _, q := range irqs[:i] {
				q.Close()
			}
			return nil, err
		}
		irqs[i] = irq
	}
	f.irqs.Store(&irqs)
	return append([]*pci.Interrupt(nil), irqs...), nil
}

// DisableInterrupts implements pci.Device.
func (f *Function) DisableInterrupts() error {
	f.irqMu.Lock()
	defer f.irqMu.Unlock()
	f.disableLocked()
	return nil
}

func (f *Function) disableLocked() {
	if irqs := f.irqs.Swap(nil); irqs != nil {
		for _, q := range *irqs {
			q.Close()
		}
	}
}

// raise signals vector v; it reports whether an interrupt was delivered.
func (f *Function) raise(v int) bool {
	irqs := f.irqs.Load()
	if irqs == nil || v >= len(*irqs) {
		return false
	}
	return (*irqs)[v].Signal() == nil
}

// wipeInterrupts models a reset that clears the MSI-X table: the vectors
// stay allocated but deliver nothing until re-enabled.
func (f *Function) wipeInterrupts() {
	f.irqMu.Lock()
	defer f.irqMu.Unlock()
	f.disableLocked()
}

// Reset implements pci.Device: a function-level reset.
func (f *Function) Reset() error {
	if f.closed.Load() {
		return &pci.OpError{Op: "reset", Addr: f.addr, Err: pci.ErrClosed}
	}
	f.m.flr()
	_ = f.WriteConfig(pci.ConfigCommand, []byte{0, 0})
	return nil
}

// Close implements pci.Device. The model stops, so no DMA happens after
// Close returns.
func (f *Function) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	f.m.close()
	return f.DisableInterrupts()
}

// portalModel is a model with work-queue portals in BAR2 (DSA): it takes
// 64-byte posted writes, and sees register-width accesses to BAR2.
type portalModel interface {
	portalWrite(bar, off int, rec *[64]byte)
	portalAccess(off, w int, write bool) uint64
}

// bar is BAR0 (or, for a model with portals, BAR2) of an emulated
// function: a register file whose accesses go to the model, one call per
// access.
type bar struct {
	f    *Function
	size int
	idx  int // BAR number
}

func (b *bar) check(off, w int) {
	if off < 0 || off+w > b.size || off%w != 0 {
		panic(fmt.Sprintf("emulated %s: BAR%d access of %d bytes at %#x: out of range or misaligned (BAR is %#x bytes)", b.f.addr, b.idx, w, off, b.size))
	}
}

func (b *bar) read(off, w int) uint64 {
	b.check(off, w)
	if !b.f.memEnabled() {
		return ^uint64(0) >> (64 - 8*w) // memory decode off: all ones
	}
	if b.idx != 0 {
		return b.f.m.(portalModel).portalAccess(off, w, false)
	}
	return b.f.m.read(off, w)
}

func (b *bar) write(off, w int, v uint64) {
	b.check(off, w)
	if !b.f.memEnabled() {
		return
	}
	if b.idx != 0 {
		b.f.m.(portalModel).portalAccess(off, w, true)
		return
	}
	b.f.m.write(off, w, v)
}

// WritePortal implements pci.Registers: the record goes to the model as
// one call, as MOVDIR64B delivers it as one write. A model without portals
// (CBDMA) ignores it.
func (b *bar) WritePortal(off int, rec *[64]byte) {
	b.check(off, 64)
	if !b.f.memEnabled() {
		return
	}
	if pm, ok := b.f.m.(portalModel); ok {
		pm.portalWrite(b.idx, off, rec)
	}
}

func (b *bar) Len() int                  { return b.size }
func (b *bar) Read8(off int) uint8       { return uint8(b.read(off, 1)) }
func (b *bar) Read16(off int) uint16     { return uint16(b.read(off, 2)) }
func (b *bar) Read32(off int) uint32     { return uint32(b.read(off, 4)) }
func (b *bar) Read64(off int) uint64     { return b.read(off, 8) }
func (b *bar) Write8(off int, v uint8)   { b.write(off, 1, uint64(v)) }
func (b *bar) Write16(off int, v uint16) { b.write(off, 2, uint64(v)) }
func (b *bar) Write32(off int, v uint32) { b.write(off, 4, uint64(v)) }
func (b *bar) Write64(off int, v uint64) { b.write(off, 8, v) }
