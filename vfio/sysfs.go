package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/pci"
)

// vfioDriver is the name of the kernel's vfio-pci driver in sysfs.
const vfioDriver = "vfio-pci"

// Sysfs reads and changes the kernel's view of PCI functions through sysfs:
// which functions exist, which driver owns each, which IOMMU group each sits
// in. Root is where sysfs is mounted, "/sys" normally; tests point it at a
// recorded tree. The zero Sysfs uses "/sys".
type Sysfs struct {
	// Root is the sysfs mount point; "" means "/sys".
	Root string

	// write, when set, replaces writing a sysfs attribute; tests use it to
	// play the kernel's part in Bind and Unbind.
	write func(name string, data []byte) error
}

// DefaultSysfs returns a Sysfs rooted at /sys.
func DefaultSysfs() Sysfs { return Sysfs{Root: "/sys"} }

// Function describes one PCI function as sysfs shows it.
type Function struct {
	// Addr is the function's PCI address.
	Addr pci.Address
	// Vendor and Device are the PCI IDs.
	Vendor, Device uint16
	// Class is the 24-bit class code (class, subclass, prog-if), for example
	// 0x088000 for a CBDMA channel.
	Class uint32
	// Revision is the revision ID.
	Revision uint8
	// Driver is the name of the bound kernel driver, "" when none.
	Driver string
	// IOMMUGroup is the IOMMU group number, -1 when the function has none
	// (the IOMMU is off and vfio's no-IOMMU mode is not in use).
	IOMMUGroup int
	// NUMANode is the NUMA node of the function, -1 when unknown.
	NUMANode int
}

func (s Sysfs) root() string {
	if s.Root == "" {
		return "/sys"
	}
	return s.Root
}

func (s Sysfs) devicesDir() string { return filepath.Join(s.root(), "bus", "pci", "devices") }

func (s Sysfs) deviceDir(a pci.Address) string { return filepath.Join(s.devicesDir(), a.String()) }

func (s Sysfs) driversDir() string { return filepath.Join(s.root(), "bus", "pci", "drivers") }

func (s Sysfs) groupDevicesDir(group int) string {
	return filepath.Join(s.root(), "kernel", "iommu_groups", strconv.Itoa(group), "devices")
}

// noIOMMUParam is the vfio module parameter that allows no-IOMMU mode.
const noIOMMUParam = "module/vfio/parameters/enable_unsafe_noiommu_mode"

// Functions lists every PCI function, sorted by address.
func (s Sysfs) Functions() ([]Function, error) {
	return s.functionsIn(s.devicesDir(), "list PCI functions")
}

// functionsIn reads the function of every entry of dir named by a PCI
// address (other entries are passed over), sorted by address; op names
// the listing in the error when dir cannot be read.
func (s Sysfs) functionsIn(dir, op string) ([]Function, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, &pci.OpError{Op: op, Err: err}
	}
	var out []Function
	for _, e := range ents {
		a, err := pci.ParseAddress(e.Name())
		if err != nil {
			continue // not a function directory
		}
		f, err := s.Function(a)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	sortFunctions(out)
	return out, nil
}

func sortFunctions(fs []Function) {
	sort.Slice(fs, func(i, j int) bool { return addrLess(fs[i].Addr, fs[j].Addr) })
}

func addrLess(a, b pci.Address) bool {
	if a.Domain != b.Domain {
		return a.Domain < b.Domain
	}
	if a.Bus != b.Bus {
		return a.Bus < b.Bus
	}
	if a.Device != b.Device {
		return a.Device < b.Device
	}
	return a.Function < b.Function
}

// Function describes the function at a. It fails with an error wrapping
// fs.ErrNotExist when there is no such function.
func (s Sysfs) Function(a pci.Address) (Function, error) {
	dir := s.deviceDir(a)
	if _, err := os.Stat(dir); err != nil {
		return Function{}, &pci.OpError{Op: "find PCI function", Addr: a, Err: fmt.Errorf("%w (is the address right? see lspci -D)", err)}
	}
	f := Function{Addr: a}
	hex := []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{"vendor", 16, func(v uint64) { f.Vendor = uint16(v) }},
		{"device", 16, func(v uint64) { f.Device = uint16(v) }},
		{"class", 24, func(v uint64) { f.Class = uint32(v) }},
		{"revision", 8, func(v uint64) { f.Revision = uint8(v) }},
	}
	for _, h := range hex {
		p := filepath.Join(dir, h.name)
		b, err := os.ReadFile(p)
		if err != nil {
			return Function{}, &pci.OpError{Op: "read " + p, Addr: a, Err: err}
		}
		v, err := parseHexAttr(b, h.bits)
		if err != nil {
			return Function{}, &pci.OpError{Op: "parse " + p, Addr: a, Err: err}
		}
		h.set(v)
	}
	var err error
	if f.Driver, err = linkBase(filepath.Join(dir, "driver")); err != nil {
		return Function{}, &pci.OpError{Op: "read driver link", Addr: a, Err: err}
	}
	group, err := linkBase(filepath.Join(dir, "iommu_group"))
	if err != nil {
		return Function{}, &pci.OpError{Op: "read iommu_group link", Addr: a, Err: err}
	}
	if f.IOMMUGroup, err = parseGroup(group); err != nil {
		return Function{}, &pci.OpError{Op: "read iommu_group link", Addr: a, Err: err}
	}
	f.NUMANode = -1
	p := filepath.Join(dir, "numa_node")
	switch b, err := os.ReadFile(p); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return Function{}, &pci.OpError{Op: "read " + p, Addr: a, Err: err}
	default:
		if f.NUMANode, err = parseDecAttr(b); err != nil {
			return Function{}, &pci.OpError{Op: "parse " + p, Addr: a, Err: err}
		}
	}
	return f, nil
}

// linkBase returns the last element of the target of symlink p, or "" when
// p does not exist.
func linkBase(p string) (string, error) {
	t, err := os.Readlink(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Base(t), nil
}

// parseGroup parses the last element of an iommu_group link ("10"); "" (no
// link) is group -1.
func parseGroup(s string) (int, error) {
	if s == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return -1, fmt.Errorf("vfio: IOMMU group %q is not a number", s)
	}
	return n, nil
}

// parseHexAttr parses a sysfs attribute that holds one hexadecimal number,
// as the kernel prints vendor, device, class and revision ("0x8086\n"), and
// checks that it fits in bits bits.
func parseHexAttr(b []byte, bits int) (uint64, error) {
	s := strings.TrimSpace(string(b))
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if digits == "" || strings.HasPrefix(digits, "+") || strings.HasPrefix(digits, "-") {
		return 0, fmt.Errorf("vfio: %q is not a hexadecimal number", s)
	}
	v, err := strconv.ParseUint(digits, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("vfio: %q is not a %d-bit hexadecimal number", s, bits)
	}
	return v, nil
}

// parseDecAttr parses a sysfs attribute that holds one signed decimal
// number, such as numa_node ("-1\n").
func parseDecAttr(b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("vfio: %q is not a decimal number", s)
	}
	return int(v), nil
}

// Group lists the functions in IOMMU group n, sorted by address.
func (s Sysfs) Group(n int) ([]Function, error) {
	return s.functionsIn(s.groupDevicesDir(n), fmt.Sprintf("list IOMMU group %d", n))
}

// groupSafeDriver reports whether a function bound to driver d lets its
// IOMMU group be used through VFIO, as the kernel decides viability: unbound
// functions, vfio-pci itself, pci-stub, and PCIe ports (bridges do no DMA).
func groupSafeDriver(d string) bool {
	switch d {
	case "", vfioDriver, "pci-stub", "pcieport":
		return true
	}
	return false
}

// CheckViable checks that the IOMMU group of the function at a can be used
// through VFIO: every function of the group must be bound to vfio-pci or to
// no driver (or be a bridge). The error wraps pci.ErrBusy and names the
// functions that stand in the way and their drivers.
func (s Sysfs) CheckViable(a pci.Address) error {
	f, err := s.Function(a)
	if err != nil {
		return err
	}
	if f.IOMMUGroup < 0 {
		return &pci.OpError{Op: "find IOMMU group", Addr: a, Err: errNoGroup}
	}
	members, err := s.Group(f.IOMMUGroup)
	if err != nil {
		return err
	}
	var bad []string
	for _, m := range members {
		if !groupSafeDriver(m.Driver) {
			bad = append(bad, m.Addr.String()+" is bound to "+m.Driver)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &pci.OpError{Op: "check IOMMU group", Addr: a, Err: fmt.Errorf(
		"%w: IOMMU group %d is not viable: %s (bind every function of the group to vfio-pci, or unbind it)",
		pci.ErrBusy, f.IOMMUGroup, strings.Join(bad, ", "))}
}

// errNoGroup explains a function without an IOMMU group.
var errNoGroup = fmt.Errorf("%w: the function has no IOMMU group: the IOMMU is off "+
	"(boot with intel_iommu=on or amd_iommu=on), or, without an IOMMU, use Options.NoIOMMU "+
	"after `modprobe vfio enable_unsafe_noiommu_mode=1`", pci.ErrNotSupported)

// NoIOMMUEnabled reports whether the vfio module allows no-IOMMU mode
// (its parameter enable_unsafe_noiommu_mode is Y). It is false when the
// kernel lacks CONFIG_VFIO_NOIOMMU or vfio is not loaded.
func (s Sysfs) NoIOMMUEnabled() bool {
	b, err := os.ReadFile(filepath.Join(s.root(), noIOMMUParam))
	if err != nil {
		return false
	}
	v := strings.TrimSpace(string(b))
	return v == "Y" || v == "1"
}

// writeAttr writes data to the sysfs attribute p, as one write(2): sysfs
// acts on each write, and reports the driver's answer as its error.
func (s Sysfs) writeAttr(a pci.Address, p string, data string) error {
	var err error
	if s.write != nil {
		err = s.write(p, []byte(data))
	} else {
		err = writeFileNoCreate(p, []byte(data))
	}
	if err != nil {
		return &pci.OpError{Op: "write " + p, Addr: a, Err: err}
	}
	return nil
}

func writeFileNoCreate(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// driverOverride reads the function's driver_override ("" when unset).
func (s Sysfs) driverOverride(a pci.Address) (string, error) {
	p := filepath.Join(s.deviceDir(a), "driver_override")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", &pci.OpError{Op: "read " + p, Addr: a, Err: err}
	}
	v := strings.TrimSpace(string(b))
	if v == "(null)" {
		v = ""
	}
	return v, nil
}

// Bind hands the function at a to vfio-pci, the way the kernel documents
// it: set the function's driver_override to vfio-pci, unbind it from its
// current driver, and ask the PCI core to probe it again. The vfio-pci
// module must be loaded. Binding a function that vfio-pci owns already does
// nothing. When vfio-pci does not take the function, Bind undoes the
// override, lets the previous driver take the function back, and returns an
// error.
//
// Bind needs root. It does not bind the other functions of the IOMMU group;
// see CheckViable.
func (s Sysfs) Bind(a pci.Address) error {
	f, err := s.Function(a)
	if err != nil {
		return err
	}
	if f.Driver == vfioDriver {
		return nil
	}
	if _, err := os.Stat(filepath.Join(s.driversDir(), vfioDriver)); err != nil {
		return &pci.OpError{Op: "find driver vfio-pci", Addr: a, Err: fmt.Errorf(
			"%w: the vfio-pci driver is not loaded (run `modprobe vfio-pci`): %w", pci.ErrNotSupported, err)}
	}
	dev := s.deviceDir(a)
	if err := s.writeAttr(a, filepath.Join(dev, "driver_override"), vfioDriver+"\n"); err != nil {
		return err
	}
	undo := func(cause error) error {
		errs := []error{cause}
		errs = append(errs, s.writeAttr(a, filepath.Join(dev, "driver_override"), "\n"))
		if g, err := s.Function(a); err == nil && g.Driver == "" {
			errs = append(errs, s.writeAttr(a, filepath.Join(s.root(), "bus", "pci", "drivers_probe"), a.String()))
		}
		return errors.Join(errs...)
	}
	if f.Driver != "" {
		if err := s.writeAttr(a, filepath.Join(dev, "driver", "unbind"), a.String()); err != nil {
			return undo(err)
		}
	}
	if err := s.writeAttr(a, filepath.Join(s.root(), "bus", "pci", "drivers_probe"), a.String()); err != nil {
		return undo(err)
	}
	g, err := s.Function(a)
	if err != nil {
		return undo(err)
	}
	if g.Driver != vfioDriver {
		hint := "see dmesg"
		if g.IOMMUGroup < 0 {
			hint = errNoGroup.Error()
		}
		return undo(&pci.OpError{Op: "bind to vfio-pci", Addr: a, Err: fmt.Errorf(
			"vfio-pci did not take the function (driver now %q): %s", g.Driver, hint)})
	}
	return nil
}

// Unbind gives the function at a back to the kernel: it clears a
// driver_override of vfio-pci, unbinds the function from vfio-pci, and asks
// the PCI core to probe it again so that its kernel driver (if any is
// loaded) takes it. A function that vfio-pci does not own is left bound to
// whatever owns it. Unbind needs root; the function must not be open
// through VFIO, or the kernel waits for it to be closed.
func (s Sysfs) Unbind(a pci.Address) error {
	f, err := s.Function(a)
	if err != nil {
		return err
	}
	dev := s.deviceDir(a)
	ov, err := s.driverOverride(a)
	if err != nil {
		return err
	}
	if ov == vfioDriver {
		if err := s.writeAttr(a, filepath.Join(dev, "driver_override"), "\n"); err != nil {
			return err
		}
	}
	if f.Driver != vfioDriver {
		return nil
	}
	if err := s.writeAttr(a, filepath.Join(dev, "driver", "unbind"), a.String()); err != nil {
		return err
	}
	return s.writeAttr(a, filepath.Join(s.root(), "bus", "pci", "drivers_probe"), a.String())
}
