package qemu

import (
	"compress/gzip"
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/u-root/mkuimage/cpio"
	"github.com/u-root/mkuimage/uimage/initramfs"
)

// cpioEntry is one entry read back from a newc archive.
type cpioEntry struct {
	name         string
	mode         uint32
	data         []byte
	rmajor, rmin uint32
}

// readNewc parses a newc archive as the kernel's initramfs unpacker does
// (an oracle independent of the writer under test),
// checking the magic and the 4-byte alignment of headers and data.
func readNewc(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header at %d field %d: %v", off, i, err)
		}
		return uint32(v)
	}
	for n := 0; n < 1000; n++ {
		if off%4 != 0 || off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at offset %d", off)
		}
		mode, size, rmaj, rmin, namesize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		if b[off+110+int(namesize)-1] != 0 {
			t.Fatalf("name %q not NUL-terminated", name)
		}
		data := (off + 110 + int(namesize) + 3) &^ 3
		if name == "TRAILER!!!" {
			return out
		}
		out = append(out, cpioEntry{name: name, mode: mode, data: b[data : data+int(size)], rmajor: rmaj, rmin: rmin})
		off = (data + int(size) + 3) &^ 3
	}
	t.Fatal("no trailer")
	return nil
}

// The initramfs the kernel unpacks: /dev/console as a device node, files
// and trees from the host at their archive paths with their contents and
// permissions, every parent directory before its children, and a trailer.
func TestWriteInitramfs(t *testing.T) {
	src := t.TempDir()
	write := func(name, data string, perm os.FileMode) string {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	initBin := write("init", "\x7fELF...", 0o755)
	write("testdata/sysfs.txt", "hello", 0o644)
	write("testdata/sub/deep.txt", "deeper", 0o644)

	files := initramfs.NewFiles()
	for _, r := range []cpio.Record{cpio.Directory("proc", 0o755), cpio.CharDev("dev/console", 0o600, 5, 1)} {
		if err := files.AddRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := files.AddFile(initBin, "init"); err != nil {
		t.Fatal(err)
	}
	if err := files.AddFile(filepath.Join(src, "testdata"), "tests/vfio/testdata"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "initramfs.cpio.gz")
	if err := WriteInitramfs(path, files); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cpioEntry{}
	seen := map[string]bool{}
	for _, e := range readNewc(t, raw) {
		if parent := filepath.Dir(e.name); parent != "." && !seen[parent] {
			t.Errorf("%s comes before its directory %s: the kernel would drop it", e.name, parent)
		}
		seen[e.name] = true
		got[e.name] = e
	}
	const (
		dir  = 0o040000
		file = 0o100000
		chr  = 0o020000
	)
	want := []struct {
		name string
		mode uint32
		data string
	}{
		{"dev", dir | 0o755, ""},
		{"dev/console", chr | 0o600, ""},
		{"init", file | 0o755, "\x7fELF..."},
		{"proc", dir | 0o755, ""},
		{"tests", dir | 0o755, ""},
		{"tests/vfio", dir | 0o755, ""},
		{"tests/vfio/testdata/sysfs.txt", file | 0o644, "hello"},
		{"tests/vfio/testdata/sub/deep.txt", file | 0o644, "deeper"},
	}
	for _, w := range want {
		g, ok := got[w.name]
		if !ok {
			t.Errorf("%s missing from the archive (has %v)", w.name, slices.Sorted(maps.Keys(got)))
			continue
		}
		if g.mode != w.mode || string(g.data) != w.data {
			t.Errorf("%s: mode %o data %q, want mode %o data %q", w.name, g.mode, g.data, w.mode, w.data)
		}
	}
	if c := got["dev/console"]; c.rmajor != 5 || c.rmin != 1 {
		t.Errorf("dev/console is %d:%d, want 5:1", c.rmajor, c.rmin)
	}
}

// ResolveModules names every .ko the guest modules need, once each, and
// nothing else, from a modules.dep such as depmod writes.
func TestResolveModules(t *testing.T) {
	root := t.TempDir()
	k := Kernel{Release: "6.1.0-test", Modules: filepath.Join(root, "lib", "modules", "6.1.0-test")}
	dep := `kernel/drivers/vfio/vfio.ko:
kernel/virt/lib/irqbypass.ko:
kernel/drivers/vfio/vfio_virqfd.ko:
kernel/drivers/vfio/pci/vfio-pci-core.ko: kernel/drivers/vfio/vfio.ko kernel/drivers/vfio/vfio_virqfd.ko kernel/virt/lib/irqbypass.ko
kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/pci/vfio-pci-core.ko kernel/drivers/vfio/vfio.ko kernel/drivers/vfio/vfio_virqfd.ko kernel/virt/lib/irqbypass.ko
kernel/drivers/vfio/vfio_iommu_type1.ko: kernel/drivers/vfio/vfio.ko
kernel/drivers/uio/uio.ko:
kernel/drivers/uio/uio_pci_generic.ko: kernel/drivers/uio/uio.ko
kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko:
`
	if err := os.MkdirAll(k.Modules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(k.Modules, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ResolveModules(context.Background(), k, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, p := range m.Paths {
		r, err := filepath.Rel(k.Modules, p)
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	want := []string{
		"kernel/drivers/uio/uio.ko",
		"kernel/drivers/uio/uio_pci_generic.ko",
		"kernel/drivers/vfio/pci/vfio-pci-core.ko",
		"kernel/drivers/vfio/pci/vfio-pci.ko",
		"kernel/drivers/vfio/vfio.ko",
		"kernel/drivers/vfio/vfio_iommu_type1.ko",
		"kernel/drivers/vfio/vfio_virqfd.ko",
		"kernel/virt/lib/irqbypass.ko",
	}
	if !slices.Equal(rel, want) {
		t.Errorf("modules\n%s\nwant\n%s", strings.Join(rel, "\n"), strings.Join(want, "\n"))
	}

	// A module that modules.dep does not list is an error naming it.
	if err := os.WriteFile(filepath.Join(k.Modules, "modules.dep"), []byte("kernel/drivers/uio/uio.ko:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveModules(context.Background(), k, io.Discard); err == nil || !strings.Contains(err.Error(), "vfio-pci") {
		t.Errorf("ResolveModules without vfio-pci in modules.dep = %v; want an error naming it", err)
	}
}
