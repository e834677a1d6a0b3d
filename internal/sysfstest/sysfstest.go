// Package sysfstest builds fake sysfs and procfs trees for tests from a
// plain-text description, so tests of PCI enumeration, driver binding and
// interrupt affinity run without the real /sys and /proc.
//
// Each line of the description is one entry, relative to the tree's root:
//
//	dir  bus/pci/drivers/vfio-pci
//	file bus/pci/devices/0000:00:04.0/vendor 0x8086
//	link bus/pci/devices/0000:00:04.0/driver ../../../bus/pci/drivers/ioatdma
//	line interrupts 41: 0 12 PCI-MSIX-0000:01:00.0 1-edge ens5-TxRx-0
//
// A file holds its content and a newline; line appends its content and a
// newline to a file, creating it, for files of several lines (procfs
// tables). Blank lines and lines starting with # are ignored. Real sysfs
// uses symlinks for drivers and IOMMU groups; the tree has them too.
package sysfstest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Build creates the tree described by the file at desc in a temporary
// directory and returns its root.
func Build(t testing.TB, desc string) string {
	t.Helper()
	root := t.TempDir()
	f, err := os.Open(desc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			t.Fatalf("%s:%d: bad line %q", desc, n, line)
		}
		p := filepath.Join(root, fields[1])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch fields[0] {
		case "dir":
			err = os.MkdirAll(p, 0o755)
		case "file":
			content := ""
			if len(fields) > 2 {
				content = strings.Join(fields[2:], " ") + "\n"
			}
			err = os.WriteFile(p, []byte(content), 0o644)
		case "line":
			err = appendLine(p, strings.Join(fields[2:], " "))
		case "link":
			if len(fields) != 3 {
				t.Fatalf("%s:%d: link needs a target", desc, n)
			}
			err = os.Symlink(fields[2], p)
		default:
			t.Fatalf("%s:%d: unknown kind %q", desc, n, fields[0])
		}
		if err != nil {
			t.Fatalf("%s:%d: %v", desc, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return root
}

// appendLine appends line and a newline to the file at p, creating it.
func appendLine(p, line string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
