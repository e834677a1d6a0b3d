package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/sysfstest"
	"github.com/gomx-dev/gomx/pci"
)

// buildSysfs creates the tree described by testdata/sysfs.txt.
func buildSysfs(t *testing.T) string {
	t.Helper()
	return sysfstest.Build(t, "testdata/sysfs.txt")
}

func mustAddr(t testing.TB, s string) pci.Address {
	t.Helper()
	a, err := pci.ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fakeKernel plays the kernel's part behind the sysfs attributes that Bind
// and Unbind write, on the generated tree, and records every write.
type fakeKernel struct {
	t      *testing.T
	root   string
	native map[string]string // address -> driver that claims it without override
	refuse map[string]bool   // drivers whose probe fails
	writes []string          // "path: data", path relative to root
}

func newFakeKernel(t *testing.T, root string) *fakeKernel {
	return &fakeKernel{
		t:    t,
		root: root,
		native: map[string]string{
			"0000:00:04.0": "ioatdma", "0000:00:04.1": "ioatdma",
			"0000:00:04.2": "ioatdma", "0000:00:04.3": "ioatdma",
			"0000:02:00.0": "e1000e",
		},
		refuse: map[string]bool{},
	}
}

func (k *fakeKernel) sysfs() Sysfs { return Sysfs{Root: k.root, write: k.write} }

func (k *fakeKernel) write(name string, data []byte) error {
	rel, err := filepath.Rel(k.root, name)
	if err != nil {
		return err
	}
	k.writes = append(k.writes, rel+": "+string(data))
	parts := strings.Split(rel, string(filepath.Separator))
	switch {
	case len(parts) == 5 && parts[4] == "driver_override":
		v := strings.TrimSpace(string(data))
		if v == "" {
			v = "(null)"
		}
		return os.WriteFile(name, []byte(v+"\n"), 0o644)
	case len(parts) == 6 && parts[4] == "driver" && parts[5] == "unbind":
		if string(data) != parts[3] {
			return fmt.Errorf("unbind of %q through %s: %w", data, rel, fs.ErrInvalid)
		}
		return os.Remove(filepath.Join(k.root, "bus", "pci", "devices", parts[3], "driver"))
	case rel == filepath.Join("bus", "pci", "drivers_probe"):
		return k.probe(string(data))
	}
	return fmt.Errorf("fake kernel: unexpected write to %s", rel)
}

// probe binds the function to its override driver, or its native one, as
// the PCI core does for drivers_probe.
func (k *fakeKernel) probe(addr string) error {
	dev := filepath.Join(k.root, "bus", "pci", "devices", addr)
	devDir, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return err // ENODEV in the kernel
	}
	if _, err := os.Lstat(filepath.Join(devDir, "driver")); err == nil {
		return nil // already bound
	}
	ov, err := os.ReadFile(filepath.Join(devDir, "driver_override"))
	if err != nil {
		return err
	}
	drv := strings.TrimSpace(string(ov))
	if drv == "(null)" {
		drv = k.native[addr]
	}
	drvDir := filepath.Join(k.root, "bus", "pci", "drivers", drv)
	if drv == "" || k.refuse[drv] {
		return nil // no driver took it; drivers_probe still succeeds
	}
	if _, err := os.Stat(drvDir); err != nil {
		return nil
	}
	rootReal, err := filepath.EvalSymlinks(k.root)
	if err != nil {
		return err
	}
	target, err := filepath.Rel(devDir, filepath.Join(rootReal, "bus", "pci", "drivers", drv))
	if err != nil {
		return err
	}
	return os.Symlink(target, filepath.Join(devDir, "driver"))
}

func TestSysfsFunctions(t *testing.T) {
	s := Sysfs{Root: buildSysfs(t)}
	fns, err := s.Functions()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, f := range fns {
		addrs = append(addrs, f.Addr.String())
	}
	want := []string{"0000:00:00.0", "0000:00:04.0", "0000:00:04.1", "0000:00:04.2", "0000:00:04.3", "0000:00:1c.0", "0000:00:1f.3", "0000:02:00.0"}
	if !reflect.DeepEqual(addrs, want) {
		t.Fatalf("functions = %v, want %v", addrs, want)
	}
	for _, w := range []Function{
		{Addr: mustAddr(t, "0000:00:04.0"), Vendor: 0x8086, Device: 0x2021, Class: 0x088000, Revision: 4, Driver: "ioatdma", IOMMUGroup: 10, NUMANode: 0},
		{Addr: mustAddr(t, "0000:00:04.1"), Vendor: 0x8086, Device: 0x2021, Class: 0x088000, Revision: 4, Driver: "vfio-pci", IOMMUGroup: 11, NUMANode: 0},
		{Addr: mustAddr(t, "0000:00:00.0"), Vendor: 0x8086, Device: 0x2020, Class: 0x060000, Revision: 4, Driver: "", IOMMUGroup: 0, NUMANode: 0},
		{Addr: mustAddr(t, "0000:02:00.0"), Vendor: 0x8086, Device: 0x10d3, Class: 0x020000, Revision: 0, Driver: "e1000e", IOMMUGroup: 13, NUMANode: -1},
		{Addr: mustAddr(t, "0000:00:1f.3"), Vendor: 0x8086, Device: 0xa171, Class: 0x040300, Revision: 9, Driver: "snd_hda_intel", IOMMUGroup: -1, NUMANode: -1},
	} {
		got, err := s.Function(w.Addr)
		if err != nil {
			t.Errorf("Function(%s): %v", w.Addr, err)
			continue
		}
		if got != w {
			t.Errorf("Function(%s) = %+v, want %+v", w.Addr, got, w)
		}
	}
}

func TestSysfsUnknownFunction(t *testing.T) {
	s := Sysfs{Root: buildSysfs(t)}
	a := mustAddr(t, "0000:09:00.0")
	_, err := s.Function(a)
	var oe *pci.OpError
	if !errors.As(err, &oe) || oe.Addr != a || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Function(unknown) = %v; want an OpError for %s wrapping fs.ErrNotExist", err, a)
	}
	if err := s.Bind(a); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Bind(unknown) = %v, want fs.ErrNotExist", err)
	}
	if err := s.Unbind(a); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Unbind(unknown) = %v, want fs.ErrNotExist", err)
	}
}

func TestSysfsCorruptAttribute(t *testing.T) {
	root := buildSysfs(t)
	s := Sysfs{Root: root}
	p := filepath.Join(root, "devices/pci0000:00/0000:00:04.0/vendor")
	if err := os.WriteFile(p, []byte("0x18086\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Function(mustAddr(t, "0000:00:04.0")); err == nil || !strings.Contains(err.Error(), "vendor") {
		t.Errorf("Function with a 17-bit vendor ID = %v, want an error naming the vendor file", err)
	}
	if _, err := s.Functions(); err == nil {
		t.Error("Functions with a corrupt function succeeded")
	}
}

func TestSysfsBindUnbind(t *testing.T) {
	root := buildSysfs(t)
	k := newFakeKernel(t, root)
	s := k.sysfs()
	a := mustAddr(t, "0000:00:04.0")

	if err := s.Bind(a); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	wantWrites := []string{
		"bus/pci/devices/0000:00:04.0/driver_override: vfio-pci\n",
		"bus/pci/devices/0000:00:04.0/driver/unbind: 0000:00:04.0",
		"bus/pci/drivers_probe: 0000:00:04.0",
	}
	if !reflect.DeepEqual(k.writes, wantWrites) {
		t.Errorf("Bind wrote\n%q\nwant\n%q", k.writes, wantWrites)
	}
	if f, _ := s.Function(a); f.Driver != "vfio-pci" {
		t.Errorf("after Bind, driver = %q, want vfio-pci", f.Driver)
	}

	k.writes = nil
	if err := s.Bind(a); err != nil || k.writes != nil {
		t.Errorf("second Bind = %v with writes %q; want nil and no writes", err, k.writes)
	}

	if err := s.Unbind(a); err != nil {
		t.Fatalf("Unbind: %v", err)
	}
	wantWrites = []string{
		"bus/pci/devices/0000:00:04.0/driver_override: \n",
		"bus/pci/devices/0000:00:04.0/driver/unbind: 0000:00:04.0",
		"bus/pci/drivers_probe: 0000:00:04.0",
	}
	if !reflect.DeepEqual(k.writes, wantWrites) {
		t.Errorf("Unbind wrote\n%q\nwant\n%q", k.writes, wantWrites)
	}
	if f, _ := s.Function(a); f.Driver != "ioatdma" {
		t.Errorf("after Unbind, driver = %q, want ioatdma back", f.Driver)
	}

	// Unbinding a function vfio-pci does not own changes nothing.
	k.writes = nil
	if err := s.Unbind(mustAddr(t, "0000:02:00.0")); err != nil || k.writes != nil {
		t.Errorf("Unbind of an e1000e function = %v with writes %q; want nil and no writes", err, k.writes)
	}
}

func TestSysfsBindUnboundFunction(t *testing.T) {
	root := buildSysfs(t)
	k := newFakeKernel(t, root)
	s := k.sysfs()
	a := mustAddr(t, "0000:00:00.0") // no driver: nothing to unbind
	if err := s.Bind(a); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	want := []string{
		"bus/pci/devices/0000:00:00.0/driver_override: vfio-pci\n",
		"bus/pci/drivers_probe: 0000:00:00.0",
	}
	if !reflect.DeepEqual(k.writes, want) {
		t.Errorf("Bind wrote %q, want %q", k.writes, want)
	}
}

func TestSysfsBindWithoutVFIOModule(t *testing.T) {
	root := buildSysfs(t)
	if err := os.RemoveAll(filepath.Join(root, "bus/pci/drivers/vfio-pci")); err != nil {
		t.Fatal(err)
	}
	k := newFakeKernel(t, root)
	err := k.sysfs().Bind(mustAddr(t, "0000:00:04.0"))
	if err == nil || !strings.Contains(err.Error(), "modprobe vfio-pci") || !errors.Is(err, pci.ErrNotSupported) {
		t.Fatalf("Bind without vfio-pci loaded = %v; want ErrNotSupported saying `modprobe vfio-pci`", err)
	}
	if k.writes != nil {
		t.Errorf("Bind wrote %q before failing; want no writes", k.writes)
	}
}

func TestSysfsBindRefusedRollsBack(t *testing.T) {
	root := buildSysfs(t)
	k := newFakeKernel(t, root)
	k.refuse["vfio-pci"] = true
	s := k.sysfs()
	a := mustAddr(t, "0000:00:04.0")
	err := s.Bind(a)
	if err == nil || !strings.Contains(err.Error(), "vfio-pci did not take the function") {
		t.Fatalf("Bind refused by vfio-pci = %v, want an error saying so", err)
	}
	f, ferr := s.Function(a)
	if ferr != nil || f.Driver != "ioatdma" {
		t.Errorf("after failed Bind: %+v, %v; want the function back with ioatdma", f, ferr)
	}
	if ov, _ := s.driverOverride(a); ov != "" {
		t.Errorf("after failed Bind, driver_override = %q, want cleared", ov)
	}
}

func TestSysfsCheckViable(t *testing.T) {
	s := Sysfs{Root: buildSysfs(t)}
	if err := s.CheckViable(mustAddr(t, "0000:00:04.1")); err != nil {
		t.Errorf("group 11 (vfio-pci only): %v", err)
	}
	err := s.CheckViable(mustAddr(t, "0000:00:04.2"))
	if !errors.Is(err, pci.ErrBusy) || !strings.Contains(err.Error(), "0000:00:04.3 is bound to ioatdma") {
		t.Errorf("group 12 = %v; want ErrBusy naming 0000:00:04.3 and ioatdma", err)
	}
	err = s.CheckViable(mustAddr(t, "0000:02:00.0"))
	if !errors.Is(err, pci.ErrBusy) || !strings.Contains(err.Error(), "0000:02:00.0 is bound to e1000e") ||
		strings.Contains(err.Error(), "00:1c.0") {
		t.Errorf("group 13 = %v; want ErrBusy naming the NIC but not its root port", err)
	}
	err = s.CheckViable(mustAddr(t, "0000:00:1f.3"))
	if !errors.Is(err, pci.ErrNotSupported) || !strings.Contains(err.Error(), "intel_iommu=on") {
		t.Errorf("function without group = %v; want ErrNotSupported mentioning intel_iommu=on", err)
	}
	g, err := s.Group(13)
	if err != nil || len(g) != 2 || g[0].Addr.String() != "0000:00:1c.0" || g[1].Addr.String() != "0000:02:00.0" {
		t.Errorf("Group(13) = %+v, %v; want the root port and the NIC", g, err)
	}
	if _, err := s.Group(99); err == nil {
		t.Error("Group(99) of a missing group succeeded")
	}
}

func TestSysfsNoIOMMUEnabled(t *testing.T) {
	root := buildSysfs(t)
	s := Sysfs{Root: root}
	if s.NoIOMMUEnabled() {
		t.Error("NoIOMMUEnabled with parameter N = true")
	}
	if err := os.WriteFile(filepath.Join(root, noIOMMUParam), []byte("Y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !s.NoIOMMUEnabled() {
		t.Error("NoIOMMUEnabled with parameter Y = false")
	}
	if (Sysfs{Root: t.TempDir()}).NoIOMMUEnabled() {
		t.Error("NoIOMMUEnabled without the vfio module = true")
	}
}

func TestDefaultSysfs(t *testing.T) {
	if DefaultSysfs().root() != "/sys" || (Sysfs{}).root() != "/sys" {
		t.Errorf("default root = %q, zero root = %q; want /sys", DefaultSysfs().root(), Sysfs{}.root())
	}
}

func TestParseAttrs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits int
		want uint64
		ok   bool
	}{
		{"0x8086\n", 16, 0x8086, true},
		{"0x088000\n", 24, 0x088000, true},
		{"0x04", 8, 4, true},
		{"8086", 16, 0x8086, true},
		{"0x18086\n", 16, 0, false},
		{"0x\n", 16, 0, false},
		{"", 16, 0, false},
		{"0x-1", 16, 0, false},
		{"0x+1", 16, 0, false},
		{"zz", 8, 0, false},
	} {
		got, err := parseHexAttr([]byte(tc.in), tc.bits)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseHexAttr(%q, %d) = %#x, %v; want %#x, ok=%v", tc.in, tc.bits, got, err, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"-1\n", -1, true}, {"1\n", 1, true}, {"x", 0, false}, {"", 0, false}} {
		got, err := parseDecAttr([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseDecAttr(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"", -1, true}, {"10", 10, true}, {"noiommu", -1, false}, {"-3", -1, false}} {
		got, err := parseGroup(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseGroup(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
