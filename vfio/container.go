package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/rollback"
	"github.com/gomx-dev/gomx/pci"
)

// Options configures a Container. Start from DefaultOptions; the zero value
// of each field means its default.
type Options struct {
	// NoIOMMU opts in to vfio's unsafe no-IOMMU mode: devices reach all of
	// memory, DMA addresses are physical addresses of hugepage memory, and a
	// wrong address corrupts the machine. It needs vfio loaded with
	// enable_unsafe_noiommu_mode=1 (and a kernel built with
	// CONFIG_VFIO_NOIOMMU). It is never chosen automatically.
	NoIOMMU bool
	// IOVABase and IOVALimit bound the I/O virtual addresses that Map hands
	// out, [IOVABase, IOVALimit). Both must be multiples of 4 KiB. The
	// defaults, 4 GiB and 512 GiB, stay clear of the x86 MSI window below
	// 4 GiB and within a 39-bit IOMMU; the container further restricts them
	// to the ranges the IOMMU reports as usable. A device with a narrow DMA
	// mask (QEMU's edu device: 28 bits) needs a lower window. IOVA 0 is never
	// handed out.
	IOVABase, IOVALimit uint64
	// Sysfs is where the container looks up IOMMU groups and drivers.
	Sysfs Sysfs
	// DevVFIO is the directory holding the VFIO device nodes, "/dev/vfio".
	DevVFIO string
}

// Default IOVA window of a container.
const (
	DefaultIOVABase  = 1 << 32
	DefaultIOVALimit = 1 << 39
)

// DefaultOptions returns the options for an IOMMU-protected container on
// the real /sys and /dev/vfio.
func DefaultOptions() Options {
	return Options{
		IOVABase:  DefaultIOVABase,
		IOVALimit: DefaultIOVALimit,
		Sysfs:     DefaultSysfs(),
		DevVFIO:   "/dev/vfio",
	}
}

// withDefaults fills zero fields and validates the options before anything
// touches the kernel.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.IOVABase == 0 {
		o.IOVABase = d.IOVABase
	}
	if o.IOVALimit == 0 {
		o.IOVALimit = d.IOVALimit
	}
	if o.Sysfs.Root == "" {
		o.Sysfs.Root = d.Sysfs.Root
	}
	if o.DevVFIO == "" {
		o.DevVFIO = d.DevVFIO
	}
	const page = 4096
	switch {
	case o.IOVABase%page != 0 || o.IOVALimit%page != 0:
		return o, fmt.Errorf("vfio: IOVA window [%#x, %#x) is not 4 KiB aligned: %w", o.IOVABase, o.IOVALimit, pci.ErrBadRange)
	case o.IOVALimit <= o.IOVABase:
		return o, fmt.Errorf("vfio: IOVA window [%#x, %#x) is empty: %w", o.IOVABase, o.IOVALimit, pci.ErrBadRange)
	}
	return o, nil
}

// Container is a VFIO container: one DMA domain (an IOVA space, or in
// no-IOMMU mode physical addresses) shared by every device opened from it.
// It implements pci.DMA; every Device opened from it returns it from DMA.
// Its methods are safe for concurrent use.
type Container struct {
	opts Options

	mu        sync.Mutex
	fd        int // /dev/vfio/vfio, -1 once closed
	closed    bool
	iommuSet  bool // VFIO_SET_IOMMU done (needs a group in the container)
	iommuType int
	page      uint64 // DMA mapping granularity
	groups    map[int]*group
	devices   map[pci.Address]*Device
	iova      *iovaAllocator
	mappings  map[*mapping]struct{}
}

// group is one open /dev/vfio/N, attached to the container.
type group struct {
	n    int
	path string
	fd   int
}

// mapping is the Handle of a pci.Mapping made by a Container.
type mapping struct {
	c   *Container
	buf []byte // keeps the memory reachable while it is mapped
	// type1: the IOVA range given to VFIO_IOMMU_MAP_DMA.
	iova, size uint64
	// no-IOMMU: a physical mapping, nothing to undo in the kernel.
	phys bool
}

var _ pci.DMA = (*Container)(nil)

// OpenContainer opens /dev/vfio/vfio and checks that the kernel speaks the
// VFIO API and offers the IOMMU model the options ask for: type1v2 (or
// type1) normally, no-IOMMU only with Options.NoIOMMU. Errors say what to do
// about a missing module, a disabled IOMMU or missing permissions.
func OpenContainer(o Options) (*Container, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.NoIOMMU && !o.Sysfs.NoIOMMUEnabled() {
		return nil, &pci.OpError{Op: "open VFIO container", Err: fmt.Errorf(
			"%w: no-IOMMU mode asked for but vfio does not allow it: run `modprobe vfio enable_unsafe_noiommu_mode=1` "+
				"(the kernel needs CONFIG_VFIO_NOIOMMU; %s is not Y)",
			pci.ErrNotSupported, filepath.Join(o.Sysfs.root(), noIOMMUParam))}
	}
	path := filepath.Join(o.DevVFIO, "vfio")
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &pci.OpError{Op: "open " + path, Err: openHint(err)}
	}
	c := &Container{
		opts:     o,
		fd:       fd,
		groups:   make(map[int]*group),
		devices:  make(map[pci.Address]*Device),
		mappings: make(map[*mapping]struct{}),
		page:     uint64(os.Getpagesize()),
	}
	if err := c.checkAPI(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return c, nil
}

// openHint adds what to do to the errors of opening a VFIO node.
func openHint(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: VFIO is not available: run `modprobe vfio-pci`; is the IOMMU on (intel_iommu=on)?", err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: VFIO needs root, or read-write access to the nodes in /dev/vfio", err)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%w: %w: another process has the IOMMU group open", pci.ErrBusy, err)
	}
	return err
}

func (c *Container) checkAPI() error {
	v, err := ioctlValue(c.fd, _VFIO_GET_API_VERSION, 0)
	if err != nil {
		return &pci.OpError{Op: "VFIO_GET_API_VERSION", Err: err}
	}
	if v != _VFIO_API_VERSION {
		return &pci.OpError{Op: "VFIO_GET_API_VERSION", Err: fmt.Errorf("%w: kernel VFIO API version %d, want %d", pci.ErrNotSupported, v, _VFIO_API_VERSION)}
	}
	if c.opts.NoIOMMU {
		if ok, err := c.checkExtension(_VFIO_NOIOMMU_IOMMU); err != nil {
			return err
		} else if !ok {
			return &pci.OpError{Op: "VFIO_CHECK_EXTENSION", Err: fmt.Errorf(
				"%w: the kernel's vfio has no no-IOMMU support (CONFIG_VFIO_NOIOMMU); load vfio with enable_unsafe_noiommu_mode=1", pci.ErrNotSupported)}
		}
		c.iommuType = _VFIO_NOIOMMU_IOMMU
		return nil
	}
	for _, t := range []int{_VFIO_TYPE1v2_IOMMU, _VFIO_TYPE1_IOMMU} {
		ok, err := c.checkExtension(t)
		if err != nil {
			return err
		}
		if ok {
			c.iommuType = t
			return nil
		}
	}
	return &pci.OpError{Op: "VFIO_CHECK_EXTENSION", Err: fmt.Errorf(
		"%w: no type1 IOMMU: load vfio_iommu_type1 and turn the IOMMU on (intel_iommu=on), or opt in to Options.NoIOMMU", pci.ErrNotSupported)}
}

func (c *Container) checkExtension(ext int) (bool, error) {
	r, err := ioctlValue(c.fd, _VFIO_CHECK_EXTENSION, uintptr(ext))
	if err != nil {
		return false, &pci.OpError{Op: "VFIO_CHECK_EXTENSION", Err: err}
	}
	return r > 0, nil
}

// NoIOMMU reports whether the container runs in no-IOMMU mode, where
// mapped IOVAs are physical addresses.
func (c *Container) NoIOMMU() bool { return c.opts.NoIOMMU }

// Open opens the function at a, which must be bound to vfio-pci (see
// Sysfs.Bind). It attaches the function's IOMMU group to the container
// (every function of the group must be bound to vfio-pci or unbound), sets
// the IOMMU model when the group is the first, and reads the device's
// regions and interrupts. A failure undoes every step. The error wraps
// pci.ErrBusy when the group is not viable, already used by another process,
// or the device is already open in this container.
func (c *Container) Open(a pci.Address) (*Device, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &pci.OpError{Op: "open device", Addr: a, Err: pci.ErrClosed}
	}
	if _, ok := c.devices[a]; ok {
		return nil, &pci.OpError{Op: "open device", Addr: a, Err: fmt.Errorf("%w: already open in this container", pci.ErrBusy)}
	}
	f, err := c.opts.Sysfs.Function(a)
	if err != nil {
		return nil, err
	}
	// Without a group, vfio-pci cannot take the function: say why first.
	// In no-IOMMU mode, though, vfio-pci makes the function's (fake) group
	// when it binds, so an unbound function has none yet, and the fix is to
	// bind it.
	if f.IOMMUGroup < 0 && (!c.opts.NoIOMMU || f.Driver == vfioDriver) {
		return nil, &pci.OpError{Op: "find IOMMU group", Addr: a, Err: errNoGroup}
	}
	switch f.Driver {
	case vfioDriver:
	case "":
		return nil, &pci.OpError{Op: "open device", Addr: a, Err: fmt.Errorf(
			"%w: the function is bound to no driver; bind it to vfio-pci first (Sysfs.Bind)", pci.ErrNotSupported)}
	default:
		return nil, &pci.OpError{Op: "open device", Addr: a, Err: fmt.Errorf(
			"%w: the function is bound to %s, not vfio-pci; bind it to vfio-pci first (Sysfs.Bind)", pci.ErrBusy, f.Driver)}
	}

	var undo rollback.Stack
	g, ok := c.groups[f.IOMMUGroup]
	if !ok {
		if g, err = c.attachGroup(a, f.IOMMUGroup); err != nil {
			return nil, err
		}
		undo = append(undo, func() { _ = c.detachGroup(g) })
	}
	devfd, err := groupGetDeviceFD(g.fd, a.String())
	if err != nil {
		undo.Run()
		return nil, &pci.OpError{Op: "VFIO_GROUP_GET_DEVICE_FD", Addr: a, Err: err}
	}
	undo = append(undo, func() { _ = unix.Close(devfd) })
	d, err := newDevice(c, a, devfd)
	if err != nil {
		undo.Run()
		return nil, err
	}
	c.devices[a] = d
	return d, nil
}

// attachGroup opens /dev/vfio/N (noiommu-N in no-IOMMU mode), checks that it
// is viable, adds it to the container and, for the first group, sets the
// IOMMU model. Called with c.mu held.
func (c *Container) attachGroup(a pci.Address, n int) (*group, error) {
	name := strconv.Itoa(n)
	if c.opts.NoIOMMU {
		name = "noiommu-" + name
	}
	path := filepath.Join(c.opts.DevVFIO, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && !c.opts.NoIOMMU && c.opts.Sysfs.NoIOMMUEnabled() {
			err = fmt.Errorf("%w (vfio is in no-IOMMU mode: set Options.NoIOMMU)", err)
		}
		return nil, &pci.OpError{Op: "open " + path, Addr: a, Err: openHint(err)}
	}
	g := &group{n: n, path: path, fd: fd}
	st, err := groupStatus(fd)
	if err != nil {
		unix.Close(fd)
		return nil, &pci.OpError{Op: "VFIO_GROUP_GET_STATUS", Addr: a, Err: err}
	}
	if st&_VFIO_GROUP_FLAGS_VIABLE == 0 {
		unix.Close(fd)
		if verr := c.opts.Sysfs.CheckViable(a); verr != nil {
			return nil, verr
		}
		return nil, &pci.OpError{Op: "VFIO_GROUP_GET_STATUS", Addr: a, Err: fmt.Errorf(
			"%w: IOMMU group %d is not viable: bind every function of %s to vfio-pci",
			pci.ErrBusy, n, c.opts.Sysfs.groupDevicesDir(n))}
	}
	if err := groupSetContainer(fd, c.fd); err != nil {
		unix.Close(fd)
		return nil, &pci.OpError{Op: "VFIO_GROUP_SET_CONTAINER", Addr: a, Err: err}
	}
	if !c.iommuSet {
		if _, err := ioctlValue(c.fd, _VFIO_SET_IOMMU, uintptr(c.iommuType)); err != nil {
			_, _ = ioctlValue(fd, _VFIO_GROUP_UNSET_CONTAINER, 0)
			unix.Close(fd)
			return nil, &pci.OpError{Op: "VFIO_SET_IOMMU", Addr: a, Err: err}
		}
		if err := c.setupIOVA(); err != nil {
			// Leaving the last group resets the container's IOMMU model.
			_, _ = ioctlValue(fd, _VFIO_GROUP_UNSET_CONTAINER, 0)
			unix.Close(fd)
			return nil, &pci.OpError{Op: "VFIO_IOMMU_GET_INFO", Addr: a, Err: err}
		}
		c.iommuSet = true
	}
	c.groups[n] = g
	return g, nil
}

// detachGroup takes a group out of the container and closes it. Once the
// last group leaves, the kernel drops the container's IOMMU model and every
// DMA mapping with it. Called with c.mu held.
func (c *Container) detachGroup(g *group) error {
	delete(c.groups, g.n)
	var errs []error
	if _, err := ioctlValue(g.fd, _VFIO_GROUP_UNSET_CONTAINER, 0); err != nil {
		errs = append(errs, &pci.OpError{Op: "VFIO_GROUP_UNSET_CONTAINER " + g.path, Err: err})
	}
	if err := unix.Close(g.fd); err != nil {
		errs = append(errs, &pci.OpError{Op: "close " + g.path, Err: err})
	}
	if len(c.groups) == 0 {
		c.iommuSet = false
		c.iova = nil
	}
	return errors.Join(errs...)
}

// setupIOVA reads the IOMMU's page sizes and usable IOVA ranges and makes the
// allocator. In no-IOMMU mode there is no IOVA space.
func (c *Container) setupIOVA() error {
	if c.opts.NoIOMMU {
		return nil
	}
	info, err := c.iommuInfo()
	if err != nil {
		return err
	}
	if info.pgsizes != 0 {
		minPage := info.pgsizes & -info.pgsizes
		c.page = max(uint64(os.Getpagesize()), minPage)
	}
	c.iova = newIOVAAllocator(c.opts.IOVABase, c.opts.IOVALimit)
	if info.ranges != nil {
		c.iova.restrict(info.ranges)
	}
	if c.iova.available() == 0 {
		return fmt.Errorf("%w: the IOVA window [%#x, %#x) lies outside every range the IOMMU can translate %v",
			pci.ErrNoSpace, c.opts.IOVABase, c.opts.IOVALimit, info.ranges)
	}
	return nil
}

// iommuInfo issues VFIO_IOMMU_GET_INFO, twice when the kernel has
// capabilities to report that do not fit the first buffer.
func (c *Container) iommuInfo() (iommuInfo, error) {
	b := make([]byte, 256)
	for {
		binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
		if _, err := ioctlBytes(c.fd, _VFIO_IOMMU_GET_INFO, b); err != nil {
			return iommuInfo{}, err
		}
		need := binary.NativeEndian.Uint32(b[0:])
		if int(need) <= len(b) || len(b) >= 1<<20 {
			return parseIOMMUInfo(b)
		}
		b = make([]byte, need)
	}
}

// iommuInfo is the part of VFIO_IOMMU_GET_INFO's answer the container uses.
type iommuInfo struct {
	pgsizes uint64      // bitmap of supported IOMMU page sizes, 0 if unknown
	ranges  []iovaRange // usable IOVA ranges, nil if not reported
}

// parseIOMMUInfo decodes a struct vfio_iommu_type1_info followed by its
// capability chain, as the kernel filled it in. It tolerates unknown
// capabilities and rejects a chain that points outside the buffer or loops.
func parseIOMMUInfo(b []byte) (iommuInfo, error) {
	ne := binary.NativeEndian
	if len(b) < vfioIOMMUType1InfoSize {
		return iommuInfo{}, fmt.Errorf("vfio: IOMMU info of %d bytes is too short", len(b))
	}
	var info iommuInfo
	flags := ne.Uint32(b[4:])
	if flags&_VFIO_IOMMU_INFO_PGSIZES != 0 {
		info.pgsizes = ne.Uint64(b[8:])
	}
	if flags&_VFIO_IOMMU_INFO_CAPS == 0 {
		return info, nil
	}
	argsz := int(ne.Uint32(b[0:]))
	end := min(argsz, len(b))
	const hdr = 8 // sizeof(struct vfio_info_cap_header)
	off := int(ne.Uint32(b[16:]))
	for off != 0 {
		if off < vfioIOMMUType1InfoSize || off > end-hdr {
			return info, fmt.Errorf("vfio: IOMMU info capability at %d outside %d bytes", off, end)
		}
		id := ne.Uint16(b[off:])
		next := int(ne.Uint32(b[off+4:]))
		if next != 0 && next <= off {
			return info, fmt.Errorf("vfio: IOMMU info capability chain loops at %d", off)
		}
		if id == _VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
			if off+16 > end {
				return info, fmt.Errorf("vfio: IOVA range capability at %d truncated", off)
			}
			n := int(ne.Uint32(b[off+8:]))
			p := off + 16
			if n < 0 || n > (end-p)/16 {
				return info, fmt.Errorf("vfio: IOVA range capability claims %d ranges, room for %d", n, (end-p)/16)
			}
			info.ranges = make([]iovaRange, 0, n)
			for i := 0; i < n; i++ {
				s, e := ne.Uint64(b[p:]), ne.Uint64(b[p+8:])
				p += 16
				if e < s {
					return info, fmt.Errorf("vfio: IOVA range [%#x, %#x] is reversed", s, e)
				}
				if e == ^uint64(0) {
					e-- // [s, 2^64) does not fit a half-open range; lose the top byte
				}
				info.ranges = append(info.ranges, iovaRange{s, e + 1})
			}
		}
		off = next
	}
	return info, nil
}

// Map makes buf visible to the devices of the container and returns where.
//
// With an IOMMU, buf is mapped with VFIO_IOMMU_MAP_DMA at a fresh IOVA, as
// one segment. VFIO maps whole pages: when buf does not start or end on a
// page boundary, the enclosing pages are mapped and the segment starts at
// the buffer's offset within its first page, so the device can also reach
// the bytes that share those pages. Use hugepage memory or page-aligned
// buffers to map exactly buf. Mappings of 2 MiB or more get 2 MiB aligned
// IOVAs. The kernel pins the pages, within RLIMIT_MEMLOCK.
//
// In no-IOMMU mode the IOVAs are physical addresses from
// hugepage.Translate, and a segment ends wherever the physical memory stops
// being contiguous. buf is mlocked so that its pages stay resident; Unmap
// does not unlock it, because locks do not nest and the memory's owner
// (package hugepage locks its base-page regions) may rely on the lock.
//
// A device must have been opened from the container first (the IOMMU model
// is set when the first group joins). buf stays referenced by the Mapping
// until Unmap.
func (c *Container) Map(buf []byte) (*pci.Mapping, error) {
	if len(buf) == 0 {
		return nil, &pci.OpError{Op: "map DMA", Err: fmt.Errorf("empty buffer: %w", pci.ErrBadRange)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &pci.OpError{Op: "map DMA", Err: pci.ErrClosed}
	}
	if c.opts.NoIOMMU {
		return c.mapPhys(buf)
	}
	if !c.iommuSet {
		return nil, &pci.OpError{Op: "VFIO_IOMMU_MAP_DMA", Err: fmt.Errorf(
			"%w: the container has no IOMMU yet: open a device from it before mapping memory", pci.ErrNotSupported)}
	}
	vaddr, size, off := span(addrOf(buf), len(buf), c.page)
	iova, err := c.iova.alloc(size, iovaAlign(size, c.page))
	if err != nil {
		return nil, &pci.OpError{Op: "VFIO_IOMMU_MAP_DMA", Err: err}
	}
	if err := iommuMapDMA(c.fd, uintptr(vaddr), iova, size); err != nil {
		_ = c.iova.release(iova, size)
		if errors.Is(err, unix.ENOMEM) {
			err = fmt.Errorf("%w: cannot pin %d bytes: raise RLIMIT_MEMLOCK (ulimit -l)", err, size)
		}
		return nil, &pci.OpError{Op: "VFIO_IOMMU_MAP_DMA", Err: err}
	}
	h := &mapping{c: c, buf: buf, iova: iova, size: size}
	c.mappings[h] = struct{}{}
	return &pci.Mapping{
		Buf:      buf,
		Segments: []pci.Segment{{IOVA: iova + off, Len: len(buf)}},
		Handle:   h,
	}, nil
}

// mapPhys maps buf in no-IOMMU mode. Called with c.mu held.
func (c *Container) mapPhys(buf []byte) (*pci.Mapping, error) {
	if err := unix.Mlock(buf); err != nil {
		return nil, &pci.OpError{Op: "mlock", Err: fmt.Errorf("%w: raise RLIMIT_MEMLOCK (ulimit -l)", err)}
	}
	ranges, err := hugepage.Translate(buf)
	if err != nil {
		return nil, &pci.OpError{Op: "translate to physical addresses", Err: err}
	}
	segs, err := physSegments(ranges, len(buf))
	if err != nil {
		return nil, &pci.OpError{Op: "translate to physical addresses", Err: err}
	}
	h := &mapping{c: c, buf: buf, phys: true}
	c.mappings[h] = struct{}{}
	return &pci.Mapping{Buf: buf, Segments: segs, Handle: h}, nil
}

// physSegments turns the physical ranges of a buffer of n bytes into
// segments, merging ranges that are physically contiguous. The ranges must
// cover the buffer in order.
func physSegments(ranges []hugepage.PhysRange, n int) ([]pci.Segment, error) {
	var segs []pci.Segment
	off := 0
	for _, r := range ranges {
		if r.Off != off || r.Len <= 0 {
			return nil, fmt.Errorf("vfio: physical range at offset %d (len %d) does not follow offset %d: %w", r.Off, r.Len, off, pci.ErrBadRange)
		}
		if k := len(segs) - 1; k >= 0 && segs[k].IOVA+uint64(segs[k].Len) == r.Phys {
			segs[k].Len += r.Len
		} else {
			segs = append(segs, pci.Segment{IOVA: r.Phys, Len: r.Len})
		}
		off += r.Len
	}
	if off != n {
		return nil, fmt.Errorf("vfio: physical ranges cover %d of %d bytes: %w", off, n, pci.ErrBadRange)
	}
	return segs, nil
}

// Unmap removes a mapping made by Map. With an IOMMU the IOVA range is
// unmapped (after which no device can reach the memory) and returned to the
// allocator. In no-IOMMU mode nothing can stop a device from reaching
// physical memory: the mapping is only forgotten, and the driver must have
// stopped the device's DMA first. A mapping that is not from this
// container, or already unmapped, gives an error wrapping pci.ErrNotMapped.
func (c *Container) Unmap(m *pci.Mapping) error {
	var h *mapping
	if m != nil {
		h, _ = m.Handle.(*mapping)
	}
	if h == nil || h.c != c {
		return &pci.OpError{Op: "VFIO_IOMMU_UNMAP_DMA", Err: fmt.Errorf("mapping not made by this container: %w", pci.ErrNotMapped)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mappings[h]; !ok {
		return &pci.OpError{Op: "VFIO_IOMMU_UNMAP_DMA", Err: fmt.Errorf("already unmapped: %w", pci.ErrNotMapped)}
	}
	return c.unmapLocked(h)
}

func (c *Container) unmapLocked(h *mapping) error {
	if h.phys {
		delete(c.mappings, h)
		return nil
	}
	n, err := iommuUnmapDMA(c.fd, h.iova, h.size)
	if err != nil {
		return &pci.OpError{Op: "VFIO_IOMMU_UNMAP_DMA", Err: err}
	}
	if n != h.size {
		return &pci.OpError{Op: "VFIO_IOMMU_UNMAP_DMA", Err: fmt.Errorf("unmapped %#x of %#x bytes at IOVA %#x", n, h.size, h.iova)}
	}
	delete(c.mappings, h)
	if c.iova != nil {
		return c.iova.release(h.iova, h.size)
	}
	return nil
}

// Close releases the container: devices still open are closed, remaining
// mappings are unmapped, groups leave the container and are closed, and
// /dev/vfio/vfio is closed. Leftover devices or mappings are a leak in the
// caller; Close releases them anyway and reports how many there were.
// Closing twice does nothing.
func (c *Container) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	devs := make([]*Device, 0, len(c.devices))
	for _, d := range c.devices {
		devs = append(devs, d)
	}
	c.mu.Unlock()

	var errs []error
	// Devices first: each stops its interrupts and DMA before the memory it
	// may still reach is unmapped.
	for _, d := range devs {
		errs = append(errs, d.release())
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.devices = nil
	nmaps := len(c.mappings)
	for h := range c.mappings {
		errs = append(errs, c.unmapLocked(h))
	}
	c.mappings = nil
	for _, g := range c.groups {
		errs = append(errs, c.detachGroup(g))
	}
	if c.fd >= 0 {
		if err := unix.Close(c.fd); err != nil {
			errs = append(errs, &pci.OpError{Op: "close /dev/vfio/vfio", Err: err})
		}
		c.fd = -1
	}
	if len(devs) > 0 || nmaps > 0 {
		errs = append([]error{fmt.Errorf("vfio: container closed with %d device(s) still open and %d DMA mapping(s) still mapped; released them", len(devs), nmaps)}, errs...)
	}
	return errors.Join(errs...)
}

// forget removes a closed device from the container.
func (c *Container) forget(d *Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.devices[d.addr] == d {
		delete(c.devices, d.addr)
	}
}
