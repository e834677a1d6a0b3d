package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/pci"
)

// DeviceFlags are the flags VFIO reports for a device.
type DeviceFlags uint32

// Device flags.
const (
	// DeviceReset means the device supports VFIO_DEVICE_RESET (FLR, a PM
	// reset or a bus reset the kernel can do for this function alone).
	DeviceReset DeviceFlags = _VFIO_DEVICE_FLAGS_RESET
	// DevicePCI means the device is a vfio-pci device.
	DevicePCI DeviceFlags = _VFIO_DEVICE_FLAGS_PCI
	// DeviceHasCaps means the device info has a capability chain.
	DeviceHasCaps DeviceFlags = _VFIO_DEVICE_FLAGS_CAPS
)

// RegionFlags say how a region can be accessed.
type RegionFlags uint32

// Region flags.
const (
	RegionReadable RegionFlags = _VFIO_REGION_INFO_FLAG_READ
	RegionWritable RegionFlags = _VFIO_REGION_INFO_FLAG_WRITE
	// RegionMappable means the region can be mmapped (BAR fast path).
	RegionMappable RegionFlags = _VFIO_REGION_INFO_FLAG_MMAP
	// RegionHasCaps means the region info has a capability chain (for
	// example sparse mmap areas).
	RegionHasCaps RegionFlags = _VFIO_REGION_INFO_FLAG_CAPS
)

// Region indexes of a vfio-pci device; BAR i is region i.
const (
	RegionBAR0   = _VFIO_PCI_BAR0_REGION_INDEX
	RegionBAR5   = _VFIO_PCI_BAR5_REGION_INDEX
	RegionROM    = _VFIO_PCI_ROM_REGION_INDEX
	RegionConfig = _VFIO_PCI_CONFIG_REGION_INDEX
	RegionVGA    = _VFIO_PCI_VGA_REGION_INDEX
)

// IRQFlags describe an interrupt index.
type IRQFlags uint32

// Interrupt flags.
const (
	IRQEventfd    IRQFlags = _VFIO_IRQ_INFO_EVENTFD
	IRQMaskable   IRQFlags = _VFIO_IRQ_INFO_MASKABLE
	IRQAutomasked IRQFlags = _VFIO_IRQ_INFO_AUTOMASKED
	IRQNoResize   IRQFlags = _VFIO_IRQ_INFO_NORESIZE
)

// Interrupt indexes of a vfio-pci device.
const (
	IRQIndexINTx = _VFIO_PCI_INTX_IRQ_INDEX
	IRQIndexMSI  = _VFIO_PCI_MSI_IRQ_INDEX
	IRQIndexMSIX = _VFIO_PCI_MSIX_IRQ_INDEX
	IRQIndexErr  = _VFIO_PCI_ERR_IRQ_INDEX
	IRQIndexReq  = _VFIO_PCI_REQ_IRQ_INDEX
)

// Region is one region of a device: a BAR, the ROM, config space.
type Region struct {
	// Index is the region index (RegionBAR0 ... RegionVGA, then
	// device-specific regions).
	Index int
	// Flags say how the region can be accessed; 0 for an absent region.
	Flags RegionFlags
	// Size is the region size in bytes, 0 when absent.
	Size uint64
	// Offset is where the region starts in the device file, for pread,
	// pwrite and mmap.
	Offset uint64
}

// IRQ describes one interrupt index of a device.
type IRQ struct {
	// Index is the interrupt index (IRQIndexINTx ...).
	Index int
	// Flags describe what the index supports.
	Flags IRQFlags
	// Count is the number of vectors, 0 when the function lacks the
	// capability.
	Count int
}

// Info is what VFIO reports about an open device.
type Info struct {
	// Flags are the device flags (DeviceReset, DevicePCI, ...).
	Flags DeviceFlags
	// Regions are indexed by region index: BARs 0-5, ROM, config, VGA,
	// then device-specific regions.
	Regions []Region
	// IRQs are indexed by interrupt index: INTx, MSI, MSI-X, ERR, REQ.
	IRQs []IRQ
}

// Device is one PCI function opened through VFIO. It implements pci.Device;
// its methods are safe for concurrent use.
//
// A Device stays usable until Close or the Close of its Container. Using a
// register file after that panics, like any other access to unmapped
// memory, but with a message that says so.
type Device struct {
	c    *Container
	addr pci.Address
	info Info
	cfg  Region

	mu       sync.RWMutex // held for reading around uses of fd
	fd       int
	closed   bool
	gone     atomic.Bool // set before the BARs are unmapped
	bars     [6]pci.Registers
	mmaps    [][]byte
	irqs     []*pci.Interrupt
	irqIndex uint32
}

var _ pci.Device = (*Device)(nil)

// newDevice reads the device's info, regions and interrupts. It takes
// ownership of fd only on success.
func newDevice(c *Container, a pci.Address, fd int) (*Device, error) {
	di, err := deviceGetInfo(fd)
	if err != nil {
		return nil, &pci.OpError{Op: "VFIO_DEVICE_GET_INFO", Addr: a, Err: err}
	}
	if di.Flags&_VFIO_DEVICE_FLAGS_PCI == 0 || di.NumRegions <= _VFIO_PCI_CONFIG_REGION_INDEX {
		return nil, &pci.OpError{Op: "VFIO_DEVICE_GET_INFO", Addr: a, Err: fmt.Errorf(
			"%w: not a vfio-pci device (flags %#x, %d regions)", pci.ErrNotSupported, di.Flags, di.NumRegions)}
	}
	d := &Device{c: c, addr: a, fd: fd, info: Info{Flags: DeviceFlags(di.Flags)}}
	for i := uint32(0); i < di.NumRegions; i++ {
		ri, err := deviceGetRegionInfo(fd, i)
		if err != nil {
			if i <= _VFIO_PCI_CONFIG_REGION_INDEX {
				return nil, &pci.OpError{Op: fmt.Sprintf("VFIO_DEVICE_GET_REGION_INFO %d", i), Addr: a, Err: err}
			}
			ri = vfioRegionInfo{} // an optional region (VGA) the kernel will not describe
		}
		d.info.Regions = append(d.info.Regions, Region{Index: int(i), Flags: RegionFlags(ri.Flags), Size: ri.Size, Offset: ri.Offset})
	}
	for i := uint32(0); i < di.NumIRQs; i++ {
		ii, err := deviceGetIRQInfo(fd, i)
		if err != nil {
			if i <= _VFIO_PCI_MSIX_IRQ_INDEX {
				return nil, &pci.OpError{Op: "VFIO_DEVICE_GET_IRQ_INFO " + irqName(i), Addr: a, Err: err}
			}
			// Some kernels (6.1 among them) count the ERR index in
			// num_irqs but refuse to describe it for a conventional
			// (non-PCIe) function, such as QEMU's edu device.
			ii = vfioIRQInfo{}
		}
		d.info.IRQs = append(d.info.IRQs, IRQ{Index: int(i), Flags: IRQFlags(ii.Flags), Count: int(ii.Count)})
	}
	d.cfg = d.info.Regions[_VFIO_PCI_CONFIG_REGION_INDEX]
	if d.cfg.Size == 0 || d.cfg.Flags&(RegionReadable|RegionWritable) != RegionReadable|RegionWritable {
		return nil, &pci.OpError{Op: "VFIO_DEVICE_GET_REGION_INFO config", Addr: a, Err: fmt.Errorf(
			"%w: config region not read-write (flags %#x, size %d)", pci.ErrNotSupported, d.cfg.Flags, d.cfg.Size)}
	}
	return d, nil
}

// Address is the function's PCI address.
func (d *Device) Address() pci.Address { return d.addr }

// Info returns what VFIO reported about the device when it was opened.
func (d *Device) Info() Info {
	in := d.info
	in.Regions = append([]Region(nil), d.info.Regions...)
	in.IRQs = append([]IRQ(nil), d.info.IRQs...)
	return in
}

// DMA returns the device's Container.
func (d *Device) DMA() pci.DMA { return d.c }

// ReadConfig reads len(b) bytes of configuration space at off through the
// config region. Reads of 1, 2 or 4 aligned bytes are single accesses. VFIO
// virtualises parts of config space (BARs, MSI and MSI-X capabilities).
func (d *Device) ReadConfig(off int, b []byte) error {
	if err := d.checkConfig("read config", off, len(b)); err != nil {
		return err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return &pci.OpError{Op: "read config", Addr: d.addr, Err: pci.ErrClosed}
	}
	return d.configIO(false, off, b)
}

// WriteConfig writes b to configuration space at off through the config
// region.
func (d *Device) WriteConfig(off int, b []byte) error {
	if err := d.checkConfig("write config", off, len(b)); err != nil {
		return err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return &pci.OpError{Op: "write config", Addr: d.addr, Err: pci.ErrClosed}
	}
	return d.configIO(true, off, b)
}

func (d *Device) checkConfig(op string, off, n int) error {
	if off < 0 || n <= 0 || uint64(off)+uint64(n) > d.cfg.Size {
		return &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf(
			"%d bytes at %#x outside %#x bytes of config space: %w", n, off, d.cfg.Size, pci.ErrBadRange)}
	}
	return nil
}

// configIO does one pread or pwrite on the config region. Called with d.mu
// held and d open.
func (d *Device) configIO(write bool, off int, b []byte) error {
	pos := int64(d.cfg.Offset) + int64(off)
	var n int
	var err error
	op := fmt.Sprintf("read config %#x", off)
	if write {
		op = fmt.Sprintf("write config %#x", off)
		n, err = unix.Pwrite(d.fd, b, pos)
	} else {
		n, err = unix.Pread(d.fd, b, pos)
	}
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
		if !write {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		return &pci.OpError{Op: op, Addr: d.addr, Err: err}
	}
	return nil
}

// BAR returns memory BAR i as a register file. When VFIO allows it the BAR
// is mmapped and every access is one load or store of its width on the
// mapping; otherwise (no mmap flag, or a BAR whose MSI-X table the kernel
// will not let us map) every access is one pread or pwrite of its width on
// the device file, which the kernel turns into one access of that width
// (kernels before 6.9 split 64-bit accesses into two 32-bit ones there).
// The same Registers is returned on every call; it is unmapped by Close.
//
// BAR fails with an error wrapping pci.ErrBadRange for i outside 0-5 and
// pci.ErrNotSupported for an absent or I/O BAR (or the upper half of a
// 64-bit BAR).
func (d *Device) BAR(i int) (pci.Registers, error) {
	op := fmt.Sprintf("BAR%d", i)
	if i < 0 || i > _VFIO_PCI_BAR5_REGION_INDEX {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("BAR index %d: %w", i, pci.ErrBadRange)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: pci.ErrClosed}
	}
	if d.bars[i] != nil {
		return d.bars[i], nil
	}
	r := d.info.Regions[i]
	if r.Size == 0 {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("%w: BAR%d is absent (or the upper half of a 64-bit BAR)", pci.ErrNotSupported, i)}
	}
	var reg [4]byte
	if err := d.configIO(false, pci.ConfigBAR0+4*i, reg[:]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(reg[:])&1 != 0 {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("%w: BAR%d is an I/O BAR", pci.ErrNotSupported, i)}
	}
	if r.Size > math.MaxInt32 || r.Flags&(RegionReadable|RegionWritable) != RegionReadable|RegionWritable {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("%w: BAR%d of %#x bytes with flags %#x cannot be used as registers", pci.ErrNotSupported, i, r.Size, r.Flags)}
	}
	size := int(r.Size)
	var regs pci.Registers
	if r.Flags&RegionMappable != 0 {
		page := os.Getpagesize()
		mem, err := unix.Mmap(d.fd, int64(r.Offset), (size+page-1)&^(page-1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err == nil {
			d.mmaps = append(d.mmaps, mem)
			regs = &mmioRegs{mem: mem[:size], gone: &d.gone, addr: d.addr, bar: i}
		}
		// On failure (for example a BAR whose MSI-X table is excluded from
		// mmap) fall through to the pread/pwrite path, which always works.
	}
	if regs == nil {
		regs = &fileRegs{d: d, base: int64(r.Offset), n: size, bar: i}
	}
	d.bars[i] = regs
	return regs, nil
}

// checkReg panics unless [off, off+width) lies in a register file of n
// bytes and off is a multiple of width: an offset bug in a driver.
func checkReg(addr pci.Address, bar, off, width, n int) {
	if off < 0 || off > n-width || off%width != 0 {
		panic(fmt.Sprintf("vfio: %s BAR%d: %d-byte register access at %#x outside %#x bytes or misaligned", addr, bar, width, off, n))
	}
}

// fileRegs is a BAR accessed with pread and pwrite on the device file.
type fileRegs struct {
	d    *Device
	base int64
	n    int
	bar  int
}

func (r *fileRegs) Len() int { return r.n }

func (r *fileRegs) read(off int, b []byte) {
	checkReg(r.d.addr, r.bar, off, len(b), r.n)
	r.d.mu.RLock()
	defer r.d.mu.RUnlock()
	if r.d.closed {
		panic(fmt.Sprintf("vfio: %s BAR%d: register read after Device.Close", r.d.addr, r.bar))
	}
	if n, err := unix.Pread(r.d.fd, b, r.base+int64(off)); err != nil || n != len(b) {
		for i := range b {
			b[i] = 0xff // a failed read looks like a device that went away
		}
	}
}

func (r *fileRegs) write(off int, b []byte) {
	checkReg(r.d.addr, r.bar, off, len(b), r.n)
	r.d.mu.RLock()
	defer r.d.mu.RUnlock()
	if r.d.closed {
		panic(fmt.Sprintf("vfio: %s BAR%d: register write after Device.Close", r.d.addr, r.bar))
	}
	_, _ = unix.Pwrite(r.d.fd, b, r.base+int64(off)) // writes to a vanished device are dropped, as on hardware
}

func (r *fileRegs) Read8(off int) uint8 {
	var b [1]byte
	r.read(off, b[:])
	return b[0]
}

func (r *fileRegs) Read16(off int) uint16 {
	var b [2]byte
	r.read(off, b[:])
	return binary.LittleEndian.Uint16(b[:])
}

func (r *fileRegs) Read32(off int) uint32 {
	var b [4]byte
	r.read(off, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func (r *fileRegs) Read64(off int) uint64 {
	var b [8]byte
	r.read(off, b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func (r *fileRegs) Write8(off int, v uint8) { r.write(off, []byte{v}) }

func (r *fileRegs) Write16(off int, v uint16) {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	r.write(off, b[:])
}

func (r *fileRegs) Write32(off int, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	r.write(off, b[:])
}

// WritePortal writes rec with one pwrite on the region: vfio-pci splits it
// into 8-byte accesses, so this path suits registers, not a DSA portal,
// which wants the mapped BAR's MOVDIR64B.
func (r *fileRegs) WritePortal(off int, rec *[64]byte) { r.write(off, rec[:]) }

func (r *fileRegs) Write64(off int, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	r.write(off, b[:])
}

// EnableInterrupts enables n MSI-X vectors, or one MSI vector when the
// function has no MSI-X, each signalling its own eventfd-backed Interrupt
// (VFIO_DEVICE_SET_IRQS with DATA_EVENTFD|ACTION_TRIGGER). The error wraps
// pci.ErrNotSupported when the function cannot give n vectors, and
// pci.ErrBusy when interrupts are already enabled.
func (d *Device) EnableInterrupts(n int) ([]*pci.Interrupt, error) {
	const op = "VFIO_DEVICE_SET_IRQS"
	if n <= 0 {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("%d vectors: %w", n, pci.ErrBadRange)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: pci.ErrClosed}
	}
	if d.irqs != nil {
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("%w: %d interrupts already enabled; call DisableInterrupts first", pci.ErrBusy, len(d.irqs))}
	}
	index, err := d.pickIRQ(n)
	if err != nil {
		return nil, err
	}
	irqs := make([]*pci.Interrupt, 0, n)
	closeAll := func() {
		for _, q := range irqs {
			_ = q.Close()
		}
	}
	fds := make([]int32, 0, n)
	for range n {
		q, err := pci.NewInterrupt()
		if err != nil {
			closeAll()
			return nil, err
		}
		irqs = append(irqs, q)
		fds = append(fds, int32(q.FD()))
	}
	b := marshalIRQSet(_VFIO_IRQ_SET_DATA_EVENTFD|_VFIO_IRQ_SET_ACTION_TRIGGER, index, fds)
	if _, err := ioctlBytes(d.fd, _VFIO_DEVICE_SET_IRQS, b); err != nil {
		closeAll()
		return nil, &pci.OpError{Op: op, Addr: d.addr, Err: fmt.Errorf("%s, %d vectors: %w", irqName(index), n, err)}
	}
	d.irqs, d.irqIndex = irqs, index
	return append([]*pci.Interrupt(nil), irqs...), nil
}

// pickIRQ chooses MSI-X, else MSI for a single vector.
func (d *Device) pickIRQ(n int) (uint32, error) {
	count := func(index uint32) (int, error) {
		ii, err := deviceGetIRQInfo(d.fd, index)
		if errors.Is(err, unix.EINVAL) {
			return 0, nil // index beyond what the device has
		}
		if err != nil {
			return 0, &pci.OpError{Op: "VFIO_DEVICE_GET_IRQ_INFO " + irqName(index), Addr: d.addr, Err: err}
		}
		if ii.Flags&_VFIO_IRQ_INFO_EVENTFD == 0 {
			return 0, nil
		}
		return int(ii.Count), nil
	}
	msix, err := count(_VFIO_PCI_MSIX_IRQ_INDEX)
	if err != nil {
		return 0, err
	}
	if msix >= n {
		return _VFIO_PCI_MSIX_IRQ_INDEX, nil
	}
	msi := 0
	if msix == 0 && n == 1 {
		if msi, err = count(_VFIO_PCI_MSI_IRQ_INDEX); err != nil {
			return 0, err
		}
		if msi >= 1 {
			return _VFIO_PCI_MSI_IRQ_INDEX, nil
		}
	}
	return 0, &pci.OpError{Op: "VFIO_DEVICE_GET_IRQ_INFO", Addr: d.addr, Err: fmt.Errorf(
		"%w: %d vectors asked for, the function has %d MSI-X vectors and %d MSI", pci.ErrNotSupported, n, msix, msi)}
}

func irqName(index uint32) string {
	switch index {
	case _VFIO_PCI_INTX_IRQ_INDEX:
		return "INTx"
	case _VFIO_PCI_MSI_IRQ_INDEX:
		return "MSI"
	case _VFIO_PCI_MSIX_IRQ_INDEX:
		return "MSI-X"
	case _VFIO_PCI_ERR_IRQ_INDEX:
		return "ERR"
	case _VFIO_PCI_REQ_IRQ_INDEX:
		return "REQ"
	}
	return fmt.Sprintf("IRQ index %d", index)
}

// marshalIRQSet lays out a struct vfio_irq_set followed by one int32 eventfd
// per vector, as VFIO_DEVICE_SET_IRQS expects.
func marshalIRQSet(flags, index uint32, fds []int32) []byte {
	ne := binary.NativeEndian
	b := make([]byte, vfioIRQSetSize+4*len(fds))
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[4:], flags)
	ne.PutUint32(b[8:], index)
	ne.PutUint32(b[12:], 0) // start
	ne.PutUint32(b[16:], uint32(len(fds)))
	for i, fd := range fds {
		ne.PutUint32(b[vfioIRQSetSize+4*i:], uint32(fd))
	}
	return b
}

// DisableInterrupts disables every vector (VFIO_DEVICE_SET_IRQS with
// DATA_NONE|ACTION_TRIGGER and count 0) and closes their Interrupts, which
// wakes their waiters with pci.ErrClosed. With no interrupts enabled it
// does nothing.
func (d *Device) DisableInterrupts() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	return d.disableIRQsLocked()
}

func (d *Device) disableIRQsLocked() error {
	if d.irqs == nil {
		return nil
	}
	var errs []error
	b := marshalIRQSet(_VFIO_IRQ_SET_DATA_NONE|_VFIO_IRQ_SET_ACTION_TRIGGER, d.irqIndex, nil)
	if _, err := ioctlBytes(d.fd, _VFIO_DEVICE_SET_IRQS, b); err != nil {
		errs = append(errs, &pci.OpError{Op: "VFIO_DEVICE_SET_IRQS", Addr: d.addr, Err: fmt.Errorf("disable %s: %w", irqName(d.irqIndex), err)})
	}
	for _, q := range d.irqs {
		errs = append(errs, q.Close())
	}
	d.irqs = nil
	return errors.Join(errs...)
}

// Reset resets the function with VFIO_DEVICE_RESET. The error wraps
// pci.ErrNotSupported when VFIO offers no reset for the function (its info
// lacks DeviceReset). A reset clears the command register: the driver
// enables memory decoding and bus mastering again.
func (d *Device) Reset() error {
	const op = "VFIO_DEVICE_RESET"
	if d.info.Flags&DeviceReset == 0 {
		return &pci.OpError{Op: op, Addr: d.addr, Err: pci.ErrNotSupported}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return &pci.OpError{Op: op, Addr: d.addr, Err: pci.ErrClosed}
	}
	if _, err := ioctlValue(d.fd, _VFIO_DEVICE_RESET, 0); err != nil {
		return &pci.OpError{Op: op, Addr: d.addr, Err: err}
	}
	return nil
}

// Close releases the device: it disables interrupts, clears bus mastering
// so the function stops DMA, unmaps the BARs and closes the device file.
// The IOMMU group stays in the container and DMA mappings are not touched;
// they belong to the Container. Closing twice does nothing.
func (d *Device) Close() error {
	err := d.release()
	d.c.forget(d)
	return err
}

// release tears the device down in the reverse order of use; the
// Container calls it for devices left open.
func (d *Device) release() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	var errs []error
	errs = append(errs, d.disableIRQsLocked())
	var cmd [2]byte
	if err := d.configIO(false, pci.ConfigCommand, cmd[:]); err != nil {
		errs = append(errs, err)
	} else if v := binary.LittleEndian.Uint16(cmd[:]); v&pci.CommandBusMaster != 0 {
		binary.LittleEndian.PutUint16(cmd[:], v&^pci.CommandBusMaster)
		errs = append(errs, d.configIO(true, pci.ConfigCommand, cmd[:]))
	}
	d.closed = true
	d.gone.Store(true)
	for _, m := range d.mmaps {
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, &pci.OpError{Op: "munmap BAR", Addr: d.addr, Err: err})
		}
	}
	d.mmaps = nil
	d.bars = [6]pci.Registers{}
	if err := unix.Close(d.fd); err != nil {
		errs = append(errs, &pci.OpError{Op: "close device", Addr: d.addr, Err: err})
	}
	d.fd = -1
	return errors.Join(errs...)
}
