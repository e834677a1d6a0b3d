// Package pci is the device contract of gomx: the small, fixed set of things
// a user-space driver may use of one PCI function.
//
// A driver (ioat, nicdrv) never talks to VFIO or to a model directly. It is
// handed a [Device] and uses only:
//
//   - configuration space, read and written in 1, 2 or 4 byte units
//     ([Device.ReadConfig], [Device.WriteConfig] and the helpers
//     [ReadConfig16], [WriteConfig16], ...);
//   - memory BARs as register files ([Registers]): every Read32 or Write64 is
//     exactly one load or store of that width, as on a mapped BAR, so a driver
//     that needs split 32-bit accesses must do the split itself; and one
//     64-byte posted write ([Registers.WritePortal]), how descriptors reach a
//     DSA work-queue portal;
//   - DMA mapping ([DMA]): memory is made visible to the device at I/O virtual
//     addresses (IOVA) and the driver programs those addresses, never Go
//     pointers. A [Mapping] may be made of several IOVA-contiguous
//     [Segment]s (no-IOMMU mode hands out physical addresses, which are only
//     contiguous within a hugepage), and drivers split transfers at segment
//     edges;
//   - interrupts as eventfd-backed [Interrupt]s, one per MSI-X vector
//     (an emulated device's are local: its signal wakes the waiter itself);
//   - function reset.
//
// Two packages implement the contract: vfio (real devices behind the kernel's
// vfio-pci driver) and emulated (strict in-process models of the same
// registers). Devices opened from one VFIO container, or made by one emulated
// platform, share one [DMA] domain: a buffer mapped once is visible to all of
// them at the same IOVA, which is what a multi-channel engine relies on.
//
// # Errors
//
// Failures are reported as [*OpError], which names the operation (an ioctl, a
// register, a sysfs file) and the PCI address, and wraps one of the sentinels
// below or an errno, so callers use errors.Is and errors.As.
//
// Register accesses cannot fail, as on hardware: a device that has gone away
// reads as all ones. Drivers bound every register wait by a timeout.
package pci

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/internal/sentinel"
)

// Sentinel errors shared by every implementation of the contract.
// ErrNotSupported, ErrClosed and ErrBusy are the values every gomx package
// uses for these meanings (internal/sentinel), so an error that matches
// pci.ErrClosed also matches nicdrv.ErrClosed, transport.ErrClosed and the
// others, and the reverse.
var (
	// ErrNotSupported means the device or the platform lacks the feature
	// (an interrupt type, a reset method, an IOMMU mode).
	ErrNotSupported = sentinel.ErrNotSupported
	// ErrClosed means the device, mapping or interrupt was already closed.
	ErrClosed = sentinel.ErrClosed
	// ErrNotMapped means an IOVA or buffer has no DMA mapping.
	ErrNotMapped = errors.New("not mapped for DMA")
	// ErrNoSpace means the IOVA space or a device table is exhausted.
	ErrNoSpace = errors.New("no space left")
	// ErrBadRange means an offset or length falls outside a BAR, config
	// space or buffer.
	ErrBadRange = errors.New("out of range")
	// ErrBusy means the device is owned by someone else (another driver,
	// another process).
	ErrBusy = sentinel.ErrBusy
)

// OpError describes a failed operation on a PCI function.
type OpError struct {
	// Op names what failed: an ioctl ("VFIO_IOMMU_MAP_DMA"), a register
	// ("CHANSTS"), a file ("/sys/bus/pci/devices/.../driver_override").
	Op string
	// Addr is the PCI function, zero when the failure concerns no device.
	Addr Address
	// Err is the cause: a sentinel of this package, an errno, or another
	// error.
	Err error
}

// Error gives the operation, the device's address when known, and the
// cause.
func (e *OpError) Error() string {
	if e.Addr == (Address{}) {
		return e.Op + ": " + e.Err.Error()
	}
	return e.Addr.String() + ": " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Address is a PCI function address: domain, bus, device and function.
type Address struct {
	Domain   uint16
	Bus      uint8
	Device   uint8
	Function uint8
}

// ParseAddress parses "0000:00:04.0" or the short form "00:04.0".
func ParseAddress(s string) (Address, error) {
	bad := func(why string) (Address, error) {
		return Address{}, fmt.Errorf("pci: bad address %q: %s (want DDDD:BB:DD.F, e.g. 0000:00:04.0)", s, why)
	}
	parts := strings.Split(s, ":")
	var a Address
	switch len(parts) {
	case 3:
		d, err := strconv.ParseUint(parts[0], 16, 16)
		if err != nil || len(parts[0]) != 4 {
			return bad("domain must be 4 hex digits")
		}
		a.Domain = uint16(d)
		parts = parts[1:]
	case 2:
	default:
		return bad("wrong number of ':'")
	}
	b, err := strconv.ParseUint(parts[0], 16, 8)
	if err != nil || len(parts[0]) != 2 {
		return bad("bus must be 2 hex digits")
	}
	a.Bus = uint8(b)
	df := strings.Split(parts[1], ".")
	if len(df) != 2 {
		return bad("missing '.' before the function")
	}
	d, err := strconv.ParseUint(df[0], 16, 8)
	if err != nil || len(df[0]) != 2 || d > 31 {
		return bad("device must be 2 hex digits, at most 1f")
	}
	f, err := strconv.ParseUint(df[1], 16, 8)
	if err != nil || len(df[1]) != 1 || f > 7 {
		return bad("function must be one digit 0-7")
	}
	a.Device, a.Function = uint8(d), uint8(f)
	return a, nil
}

// String formats the address as sysfs does: "0000:00:04.0".
func (a Address) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// Registers is a memory BAR seen as a register file. Offsets are in bytes
// from the start of the BAR and must be naturally aligned for the access
// width; an implementation panics on an out-of-range or misaligned offset,
// because that is a bug in the driver, not a condition to handle.
//
// Each method is exactly one access of its width.
type Registers interface {
	// Len is the size of the BAR in bytes.
	Len() int
	Read8(off int) uint8
	Read16(off int) uint16
	Read32(off int) uint32
	Read64(off int) uint64
	Write8(off int, v uint8)
	Write16(off int, v uint16)
	Write32(off int, v uint32)
	Write64(off int, v uint64)
	// WritePortal writes the 64-byte record rec at off (64-byte aligned) as
	// one posted write: MOVDIR64B on a real BAR, the way a descriptor is
	// submitted to a DSA work-queue portal, which drops writes of any other
	// size. Like every register access it cannot fail; a device that takes
	// no such write ignores it (a model records a violation).
	WritePortal(off int, rec *[64]byte)
}

// Device is one PCI function as a driver may use it. Implementations are
// safe for concurrent use; a driver serialises its own register sequences.
type Device interface {
	// Address is the function's PCI address.
	Address() Address
	// ReadConfig reads len(b) bytes of configuration space at off. Accesses
	// of 1, 2 and 4 bytes are single accesses of that width.
	ReadConfig(off int, b []byte) error
	// WriteConfig writes b to configuration space at off.
	WriteConfig(off int, b []byte) error
	// BAR returns memory BAR i as a register file. It fails with
	// ErrNotSupported for an I/O or absent BAR.
	BAR(i int) (Registers, error)
	// DMA is the DMA domain the device sits in. Devices sharing a domain
	// return the same value.
	DMA() DMA
	// EnableInterrupts enables n interrupt vectors (MSI-X, or MSI where the
	// function has no MSI-X and n is 1) and returns one Interrupt per vector,
	// signalled by the device. The Interrupts stay owned by the device and
	// are closed by DisableInterrupts or Close.
	EnableInterrupts(n int) ([]*Interrupt, error)
	// DisableInterrupts disables every vector and closes its Interrupt.
	DisableInterrupts() error
	// Reset resets the function (FLR or whatever reset the platform offers).
	// ErrNotSupported when the function offers none.
	Reset() error
	// Close releases the device. Interrupts are disabled; DMA mappings belong
	// to the domain and are not touched.
	Close() error
}

// DMA is a DMA domain: an IOVA space shared by the devices that sit in it.
type DMA interface {
	// Map makes buf visible to the devices of the domain and returns where.
	// buf must stay alive and unmoved until Unmap: use memory from package
	// hugepage, or heap memory that the caller keeps referenced.
	Map(buf []byte) (*Mapping, error)
	// Unmap removes a mapping returned by Map. After Unmap returns, no
	// device of the domain can reach the memory.
	Unmap(m *Mapping) error
}

// Segment is one IOVA-contiguous piece of a Mapping.
type Segment struct {
	// IOVA is the device address of the first byte.
	IOVA uint64
	// Len is the length in bytes.
	Len int
}

// Mapping is a buffer as a device sees it: its bytes and the IOVA segments
// that cover them in order.
type Mapping struct {
	// Buf is the mapped memory.
	Buf []byte
	// Segments cover Buf in order; their lengths add up to len(Buf).
	Segments []Segment
	// Handle is private to the DMA implementation that made the mapping.
	Handle any
}

// IOVA translates offset off in the mapped buffer to a device address and
// returns how many bytes from there are IOVA-contiguous (up to the end of
// the segment). It returns ErrBadRange for an offset outside the buffer.
func (m *Mapping) IOVA(off int) (iova uint64, contig int, err error) {
	if off < 0 || off >= len(m.Buf) {
		return 0, 0, fmt.Errorf("pci: offset %d outside mapping of %d bytes: %w", off, len(m.Buf), ErrBadRange)
	}
	if len(m.Segments) == 1 {
		s := m.Segments[0]
		return s.IOVA + uint64(off), s.Len - off, nil
	}
	for _, s := range m.Segments {
		if off < s.Len {
			return s.IOVA + uint64(off), s.Len - off, nil
		}
		off -= s.Len
	}
	return 0, 0, fmt.Errorf("pci: mapping segments shorter than buffer: %w", ErrBadRange)
}

// Contains reports whether IOVA range [iova, iova+n) lies inside one segment
// of the mapping, and if so at which buffer offset it starts.
func (m *Mapping) Contains(iova uint64, n int) (off int, ok bool) {
	if n < 0 || iova+uint64(n) < iova {
		return 0, false
	}
	base := 0
	for _, s := range m.Segments {
		if iova >= s.IOVA && iova-s.IOVA+uint64(n) <= uint64(s.Len) {
			return base + int(iova-s.IOVA), true
		}
		base += s.Len
	}
	return 0, false
}
