package vfio

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/pci"
)

// openFDs counts the process's open file descriptors, for leak checks.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// checkNoFDLeak fails the test if it ends with more descriptors open than
// it started with.
func checkNoFDLeak(t *testing.T) {
	t.Helper()
	before := openFDs(t)
	t.Cleanup(func() {
		if after := openFDs(t); after > before {
			t.Errorf("leaked %d file descriptors", after-before)
		}
	})
}

func TestOpenContainerWithoutVFIO(t *testing.T) {
	checkNoFDLeak(t)
	o := DefaultOptions()
	o.DevVFIO = t.TempDir()
	o.Sysfs = Sysfs{Root: buildSysfs(t)}
	c, err := OpenContainer(o)
	if err == nil {
		c.Close()
		t.Fatal("OpenContainer without /dev/vfio/vfio succeeded")
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "modprobe vfio-pci") ||
		!strings.Contains(err.Error(), "intel_iommu=on") {
		t.Errorf("error %q; want fs.ErrNotExist saying `modprobe vfio-pci` and intel_iommu=on", err)
	}
}

func TestOpenContainerNoIOMMUNotAllowed(t *testing.T) {
	o := DefaultOptions()
	o.NoIOMMU = true
	o.DevVFIO = t.TempDir()
	o.Sysfs = Sysfs{Root: buildSysfs(t)} // enable_unsafe_noiommu_mode is N
	_, err := OpenContainer(o)
	if !errors.Is(err, pci.ErrNotSupported) || !strings.Contains(err.Error(), "modprobe vfio enable_unsafe_noiommu_mode=1") {
		t.Errorf("error %q; want ErrNotSupported naming `modprobe vfio enable_unsafe_noiommu_mode=1`", err)
	}
}

func TestOpenContainerNoAccess(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file permissions; run as a normal user to test the EACCES hint")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vfio"), nil, 0); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.DevVFIO = dir
	_, err := OpenContainer(o)
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "root") {
		t.Errorf("error %q; want a permission error saying VFIO needs root", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{IOVABase: 0x1800},
		{IOVABase: 1 << 32, IOVALimit: 1<<32 + 5},
		{IOVABase: 1 << 33, IOVALimit: 1 << 32},
	} {
		o.DevVFIO = t.TempDir()
		if _, err := OpenContainer(o); !errors.Is(err, pci.ErrBadRange) {
			t.Errorf("OpenContainer(%+v) = %v, want ErrBadRange before touching the kernel", o, err)
		}
	}
	o, err := Options{}.withDefaults()
	if err != nil || !reflect.DeepEqual(o, DefaultOptions()) {
		t.Errorf("zero Options with defaults = %+v, %v; want DefaultOptions", o, err)
	}
}

// fakeContainer is a Container that never opened /dev/vfio/vfio: enough to
// test the checks Open makes in sysfs before it touches VFIO.
func fakeContainer(t *testing.T, root string) *Container {
	o := DefaultOptions()
	o.Sysfs = Sysfs{Root: root}
	o.DevVFIO = t.TempDir()
	return &Container{
		opts:     o,
		fd:       -1,
		groups:   map[int]*group{},
		devices:  map[pci.Address]*Device{},
		mappings: map[*mapping]struct{}{},
		page:     4096,
	}
}

// In no-IOMMU mode vfio-pci makes a function's group only when it binds
// the function, so a function without a group that vfio-pci does not own
// must be bound, not given an IOMMU (the guest of hack/qemu found this).
func TestContainerOpenNoIOMMUUnbound(t *testing.T) {
	c := fakeContainer(t, buildSysfs(t))
	c.opts.NoIOMMU = true
	a := mustAddr(t, "0000:00:1f.3")
	d, err := c.Open(a)
	if err == nil {
		d.Close()
		t.Fatalf("Open(%s) succeeded", a)
	}
	if !errors.Is(err, pci.ErrBusy) || !strings.Contains(err.Error(), "bound to snd_hda_intel") ||
		!strings.Contains(err.Error(), "bind it to vfio-pci") || strings.Contains(err.Error(), "intel_iommu=on") {
		t.Errorf("Open(%s) in no-IOMMU mode = %v; want ErrBusy saying to bind it to vfio-pci, not to turn the IOMMU on", a, err)
	}
}

func TestContainerOpenErrors(t *testing.T) {
	checkNoFDLeak(t)
	c := fakeContainer(t, buildSysfs(t))
	for _, tc := range []struct {
		addr string
		is   error
		says []string
	}{
		{"0000:00:1f.3", pci.ErrNotSupported, []string{"no IOMMU group", "intel_iommu=on", "enable_unsafe_noiommu_mode=1"}},
		{"0000:00:04.0", pci.ErrBusy, []string{"bound to ioatdma", "vfio-pci"}},
		{"0000:00:00.0", pci.ErrNotSupported, []string{"no driver", "vfio-pci"}},
		{"0000:09:00.0", fs.ErrNotExist, []string{"0000:09:00.0"}},
		{"0000:00:04.1", fs.ErrNotExist, []string{"/11", "modprobe vfio-pci"}}, // no /dev/vfio/11
	} {
		a := mustAddr(t, tc.addr)
		d, err := c.Open(a)
		if err == nil {
			d.Close()
			t.Errorf("Open(%s) succeeded", a)
			continue
		}
		if !errors.Is(err, tc.is) {
			t.Errorf("Open(%s) = %v, want it to wrap %v", a, err, tc.is)
		}
		var oe *pci.OpError
		if !errors.As(err, &oe) || oe.Addr != a {
			t.Errorf("Open(%s) = %v, want a *pci.OpError naming the address", a, err)
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Open(%s) = %q, want it to say %q", a, err, s)
			}
		}
	}
	if len(c.groups) != 0 || len(c.devices) != 0 {
		t.Errorf("failed opens left %d groups and %d devices behind", len(c.groups), len(c.devices))
	}
}

func TestContainerStateErrors(t *testing.T) {
	c := fakeContainer(t, buildSysfs(t))
	buf := make([]byte, 4096)
	if _, err := c.Map(buf); !errors.Is(err, pci.ErrNotSupported) || !strings.Contains(err.Error(), "open a device") {
		t.Errorf("Map before any device = %v, want ErrNotSupported saying to open a device first", err)
	}
	if _, err := c.Map(nil); !errors.Is(err, pci.ErrBadRange) {
		t.Errorf("Map(nil) = %v, want ErrBadRange", err)
	}
	if err := c.Unmap(nil); !errors.Is(err, pci.ErrNotMapped) {
		t.Errorf("Unmap(nil) = %v, want ErrNotMapped", err)
	}
	other := fakeContainer(t, c.opts.Sysfs.Root)
	foreign := &pci.Mapping{Buf: buf, Handle: &mapping{c: other}}
	if err := c.Unmap(foreign); !errors.Is(err, pci.ErrNotMapped) {
		t.Errorf("Unmap(mapping of another container) = %v, want ErrNotMapped", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close of an empty container = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := c.Open(mustAddr(t, "0000:00:04.1")); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Open after Close = %v, want ErrClosed", err)
	}
	if _, err := c.Map(buf); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Map after Close = %v, want ErrClosed", err)
	}
}

func TestPhysSegments(t *testing.T) {
	const M = 2 << 20
	for _, tc := range []struct {
		name   string
		ranges []hugepage.PhysRange
		n      int
		want   []pci.Segment
		ok     bool
	}{
		{"one page", []hugepage.PhysRange{{Phys: 0x40000000, Off: 0, Len: M}}, M,
			[]pci.Segment{{IOVA: 0x40000000, Len: M}}, true},
		{"contiguous pages merge", []hugepage.PhysRange{{Phys: 0x40000000, Off: 0, Len: M}, {Phys: 0x40000000 + M, Off: M, Len: M}}, 2 * M,
			[]pci.Segment{{IOVA: 0x40000000, Len: 2 * M}}, true},
		{"discontiguous pages split", []hugepage.PhysRange{{Phys: 0x80000000, Off: 0, Len: M}, {Phys: 0x40000000, Off: M, Len: M}}, 2 * M,
			[]pci.Segment{{IOVA: 0x80000000, Len: M}, {IOVA: 0x40000000, Len: M}}, true},
		{"gap", []hugepage.PhysRange{{Phys: 0x80000000, Off: 0, Len: 4096}, {Phys: 0x40000000, Off: 8192, Len: 4096}}, 12288, nil, false},
		{"short", []hugepage.PhysRange{{Phys: 0x80000000, Off: 0, Len: 4096}}, 8192, nil, false},
		{"empty range", []hugepage.PhysRange{{Phys: 0x80000000, Off: 0, Len: 0}}, 0, nil, false},
	} {
		got, err := physSegments(tc.ranges, tc.n)
		if (err == nil) != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: physSegments = %v, %v; want %v, ok=%v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

// iommuInfoBytes builds what the kernel returns for VFIO_IOMMU_GET_INFO:
// the info struct, an unknown capability, then an IOVA range capability.
func iommuInfoBytes(pgsizes uint64, ranges [][2]uint64) []byte {
	ne := binary.NativeEndian
	b := make([]byte, vfioIOMMUType1InfoSize+12+16+16*len(ranges))
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[4:], _VFIO_IOMMU_INFO_PGSIZES|_VFIO_IOMMU_INFO_CAPS)
	ne.PutUint64(b[8:], pgsizes)
	ne.PutUint32(b[16:], vfioIOMMUType1InfoSize)
	// Unknown capability (DMA_AVAIL, id 3): header + u32.
	off := vfioIOMMUType1InfoSize
	ne.PutUint16(b[off:], 3)
	ne.PutUint16(b[off+2:], 1)
	ne.PutUint32(b[off+4:], uint32(off+12))
	ne.PutUint32(b[off+8:], 65535)
	off += 12
	ne.PutUint16(b[off:], _VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE)
	ne.PutUint16(b[off+2:], 1)
	ne.PutUint32(b[off+4:], 0)
	ne.PutUint32(b[off+8:], uint32(len(ranges)))
	for i, r := range ranges {
		ne.PutUint64(b[off+16+16*i:], r[0])
		ne.PutUint64(b[off+24+16*i:], r[1])
	}
	return b
}

func TestParseIOMMUInfo(t *testing.T) {
	b := iommuInfoBytes(0x40201000, [][2]uint64{{0, 0xfedfffff}, {0xfef00000, 1<<39 - 1}})
	info, err := parseIOMMUInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	want := iommuInfo{pgsizes: 0x40201000, ranges: []iovaRange{{0, 0xfee00000}, {0xfef00000, 1 << 39}}}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("parseIOMMUInfo = %+v, want %+v", info, want)
	}

	// Without caps only the page sizes count.
	nocaps := append([]byte(nil), b[:vfioIOMMUType1InfoSize]...)
	binary.NativeEndian.PutUint32(nocaps[4:], _VFIO_IOMMU_INFO_PGSIZES)
	if info, err := parseIOMMUInfo(nocaps); err != nil || info.ranges != nil || info.pgsizes != 0x40201000 {
		t.Errorf("without caps: %+v, %v", info, err)
	}

	// A range ending at the top of the address space.
	top := iommuInfoBytes(0x1000, [][2]uint64{{0x1000, ^uint64(0)}})
	if info, err := parseIOMMUInfo(top); err != nil || info.ranges[0] != (iovaRange{0x1000, ^uint64(0)}) {
		t.Errorf("top range: %+v, %v", info, err)
	}

	for name, mutate := range map[string]func([]byte) []byte{
		"short":         func(b []byte) []byte { return b[:10] },
		"cap outside":   func(b []byte) []byte { binary.NativeEndian.PutUint32(b[16:], 4096); return b },
		"cap in header": func(b []byte) []byte { binary.NativeEndian.PutUint32(b[16:], 8); return b },
		"chain loops": func(b []byte) []byte {
			binary.NativeEndian.PutUint32(b[vfioIOMMUType1InfoSize+4:], vfioIOMMUType1InfoSize)
			return b
		},
		"too many": func(b []byte) []byte { binary.NativeEndian.PutUint32(b[vfioIOMMUType1InfoSize+12+8:], 1000); return b },
		"reversed range": func(b []byte) []byte {
			binary.NativeEndian.PutUint64(b[vfioIOMMUType1InfoSize+12+16:], 1<<40)
			return b
		},
		"truncated": func(b []byte) []byte { return b[:vfioIOMMUType1InfoSize+12+12] },
	} {
		bad := mutate(append([]byte(nil), b...))
		if _, err := parseIOMMUInfo(bad); err == nil {
			t.Errorf("%s: parseIOMMUInfo accepted a malformed buffer", name)
		}
	}
}

// TestMMIORegs runs the mmap register file on anonymous memory: widths,
// little-endian layout, and the panics that catch driver bugs.
func TestMMIORegs(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var d Device
	r := &mmioRegs{mem: mem[:256], gone: &d.gone, bar: 0}
	if r.Len() != 256 {
		t.Fatalf("Len = %d", r.Len())
	}
	r.Write64(0x10, 0x0807060504030201)
	if got := mem[0x10 : 0x10+8]; !reflect.DeepEqual(got, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("Write64 laid out %v, want little-endian", got)
	}
	if r.Read32(0x14) != 0x08070605 || r.Read16(0x12) != 0x0403 || r.Read8(0x11) != 2 || r.Read64(0x10) != 0x0807060504030201 {
		t.Error("reads do not return what Write64 stored")
	}
	r.Write32(0x20, 0xdeadbeef)
	r.Write16(0x24, 0xcafe)
	r.Write8(0x26, 0x5a)
	if r.Read32(0x20) != 0xdeadbeef || r.Read16(0x24) != 0xcafe || r.Read8(0x26) != 0x5a {
		t.Error("narrow writes did not read back")
	}
	for name, f := range map[string]func(){
		"misaligned 32":   func() { r.Read32(2) },
		"misaligned 64":   func() { r.Write64(4, 0) },
		"misaligned 16":   func() { r.Write16(1, 0) },
		"past the end":    func() { r.Read32(256) },
		"straddling end":  func() { r.Read64(252) },
		"negative offset": func() { r.Read8(-1) },
	} {
		if !panics(f) {
			t.Errorf("%s: no panic", name)
		}
	}
	d.gone.Store(true)
	if !panics(func() { r.Read32(0) }) {
		t.Error("access after Close did not panic")
	}
}

func panics(f func()) (did bool) {
	defer func() { did = recover() != nil }()
	f()
	return false
}
