package drv

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
)

// Device is what a driver holds of its PCI function: the function, its
// register file (BAR0), the bound on every wait on a register, and the
// NIC's control-path state (Control).
type Device struct {
	Dev  pci.Device
	Addr pci.Address
	Regs pci.Registers
	// RegisterTimeout bounds WaitReg.
	RegisterTimeout time.Duration
	// Control follows Regs, so that Control.Closed, which every batch
	// reads, shares a cache line with the register file every batch
	// writes through.
	Control
}

// Identity says which PCI functions a driver takes.
type Identity struct {
	// Match reports whether vendor:device is one of the driver's NICs.
	Match func(vendor, device uint16) bool
	// Want names them for an error ("8086:10d3 (82574L) or 8086:10f6").
	Want string
	// Model names the NIC ("82574").
	Model string
	// BAR0Size is the least size of the register BAR.
	BAR0Size int
}

// Errorf wraps err as a nicdrv.Error of this NIC and operation.
func (d *Device) Errorf(op string, err error) error {
	return &nicdrv.Error{Addr: d.Addr, Op: op, Err: err}
}

// Attach identifies the function as one of id's, checks that pool (when
// given) is mapped in the function's DMA domain, maps BAR0 into Regs and
// turns memory decoding on with INTx off. Bus mastering stays as it was:
// the driver turns it on once its rings are valid.
func (d *Device) Attach(id Identity, pool *nicdrv.Pool) error {
	vid, err := pci.ReadConfig16(d.Dev, pci.ConfigVendorID)
	if err != nil {
		return d.Errorf("read vendor ID", err)
	}
	did, err := pci.ReadConfig16(d.Dev, pci.ConfigDeviceID)
	if err != nil {
		return d.Errorf("read device ID", err)
	}
	if !id.Match(vid, did) {
		return d.Errorf("identify", fmt.Errorf("PCI ID %04x:%04x, want %s: %w", vid, did, id.Want, nicdrv.ErrNotNIC))
	}
	if pool != nil && pool.DMA() != d.Dev.DMA() {
		return d.Errorf("pool", errors.New("the pool is mapped in another DMA domain than the NIC: make it with nicdrv.NewPool(dev.DMA(), ...)"))
	}
	if d.Regs, err = d.Dev.BAR(0); err != nil {
		return d.Errorf("map BAR0", err)
	}
	if d.Regs.Len() < id.BAR0Size {
		return d.Errorf("map BAR0", fmt.Errorf("BAR0 is %d bytes, the %s has %d: %w", d.Regs.Len(), id.Model, id.BAR0Size, nicdrv.ErrNotNIC))
	}
	cmd, err := pci.ReadConfig16(d.Dev, pci.ConfigCommand)
	if err != nil {
		return d.Errorf("read COMMAND", err)
	}
	if err := pci.WriteConfig16(d.Dev, pci.ConfigCommand, cmd|pci.CommandMemory|pci.CommandINTxDisable); err != nil {
		return d.Errorf("write COMMAND", err)
	}
	return nil
}

// WaitReg polls register reg (named name) until cond holds, at most
// RegisterTimeout; the error names the register and the value it last
// read.
func (d *Device) WaitReg(name string, reg int, cond func(uint32) bool) error {
	deadline := time.Now().Add(d.RegisterTimeout)
	for i := 0; ; i++ {
		v := d.Regs.Read32(reg)
		if cond(v) {
			return nil
		}
		if time.Now().After(deadline) {
			return d.Errorf(name, fmt.Errorf("%#08x after %v: %w", v, d.RegisterTimeout, nicdrv.ErrTimeout))
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// WaitLink is nicdrv.NIC.WaitLink over a driver's closed flag and link
// reading: it polls every millisecond, at most timeout. reg names the
// link register for the timeout's error.
func (d *Device) WaitLink(closed func() bool, link func() nicdrv.Link, reg string, want bool, timeout time.Duration) (nicdrv.Link, error) {
	deadline := time.Now().Add(timeout)
	for {
		if closed() {
			return nicdrv.Link{}, d.Errorf("wait for link", nicdrv.ErrClosed)
		}
		l := link()
		if l.Up == want {
			return l, nil
		}
		if !time.Now().Before(deadline) {
			return l, d.Errorf(reg, fmt.Errorf("link still %v after %v: %w", l, timeout, nicdrv.ErrTimeout))
		}
		time.Sleep(time.Millisecond)
	}
}

// Default sets *v to d when *v is the zero value: how a driver's Options
// take their defaults field by field.
func Default[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// MulticastTable is the 4096-bit multicast table (128 registers of 32
// bits, as the 82574L and the 82599 both keep it) that admits groups, each
// placed by hash (the NIC's hw.MTAHash). A hash match may let other groups
// through, which the layer above filters. An address that is not a group
// address is refused, naming it.
func MulticastTable(groups []nicdrv.MAC, hash func([6]byte) (reg, bit int)) ([128]uint32, error) {
	var mta [128]uint32
	for _, g := range groups {
		if !g.IsMulticast() {
			return mta, fmt.Errorf("%v is not a group address (bit 0 of the first byte is clear)", g)
		}
		r, b := hash(g)
		mta[r] |= 1 << b
	}
	return mta, nil
}
