package vfio

// Tests that need the devices of the QEMU test machine (hack/qemu): QEMU's
// edu device (a toy DMA engine with MSI) and two e1000e NICs on one wire,
// all bound to vfio-pci, plus, with an IOMMU, an IOMMU group that is not
// viable because one of its two edu functions is bound to uio_pci_generic.
// Outside that machine they skip and say how to run them; the VM runner sets
// GOMX_REQUIRE_QEMU to the features it provides, which turns those skips
// into failures.

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/pci"
)

// qemuEnv lists the QEMU test machine's features that must be present:
// edu, e1000e, nonviable, iommu, noiommu.
const qemuEnv = "GOMX_REQUIRE_QEMU"

// PCI IDs of the QEMU devices.
const (
	eduVendor, eduDevice       = 0x1234, 0x11e8
	e1000eVendor, e1000eDevice = 0x8086, 0x10d3
)

// qemuRequired reports whether GOMX_REQUIRE_QEMU names feature.
func qemuRequired(feature string) bool {
	for _, f := range strings.Split(os.Getenv(qemuEnv), ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// skipWithoutQEMU skips with a hint, or fails when GOMX_REQUIRE_QEMU names
// the feature.
func skipWithoutQEMU(t *testing.T, feature, why string) {
	t.Helper()
	msg := why + "; this test runs on the QEMU test machine: `make qemu-test` (see hack/qemu)"
	if qemuRequired(feature) {
		t.Fatalf("%s (%s=%s requires %s)", msg, qemuEnv, os.Getenv(qemuEnv), feature)
	}
	t.Skip(msg)
}

// qemuFunctions returns the functions with the given IDs that are bound to
// vfio-pci in viable groups, and the options to open them with; it skips
// (or fails) when there are fewer than n.
func qemuFunctions(t *testing.T, feature string, vendor, device uint16, n int) (Options, []Function) {
	t.Helper()
	o, fns := qemuSetup(t, feature)
	var out []Function
	for _, f := range fns {
		if f.Vendor == vendor && f.Device == device && o.Sysfs.CheckViable(f.Addr) == nil {
			out = append(out, f)
		}
	}
	if len(out) < n {
		skipWithoutQEMU(t, feature, "fewer than "+strconv.Itoa(n)+" "+feature+" functions bound to vfio-pci")
	}
	return o, out[:n]
}

// qemuSetup is realSetup with the QEMU hint: outside VFIO it skips, or
// fails when GOMX_REQUIRE_QEMU names the feature (or GOMX_REQUIRE_VFIO=1).
func qemuSetup(t *testing.T, feature string) (Options, []Function) {
	t.Helper()
	if _, err := os.Stat("/dev/vfio/vfio"); err != nil {
		skipWithoutQEMU(t, feature, "no VFIO ("+err.Error()+")")
	}
	return realSetup(t)
}

// openAll opens a container and the functions at addrs (none: the
// container alone), and closes them when the test ends, failing it if the
// container reports a leak.
func openAll(t *testing.T, o Options, addrs ...pci.Address) (*Container, []*Device) {
	t.Helper()
	checkNoFDLeak(t)
	c, err := OpenContainer(o)
	if err != nil {
		t.Fatal(err)
	}
	var devs []*Device
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("Device.Close: %v", err)
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("Container.Close: %v", err)
		}
	})
	for _, a := range addrs {
		d, err := c.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
		if err := pci.SetCommand(d, pci.CommandMemory|pci.CommandBusMaster); err != nil {
			t.Fatal(err)
		}
	}
	return c, devs
}

// TestQEMUGroupNotViable opens a function whose IOMMU group has another
// function bound to a kernel driver (uio_pci_generic): VFIO refuses the
// group, and the error names the function in the way.
func TestQEMUGroupNotViable(t *testing.T) {
	o, fns := qemuSetup(t, "nonviable")
	var bad *Function
	for i, f := range fns {
		if o.Sysfs.CheckViable(f.Addr) != nil {
			bad = &fns[i]
			break
		}
	}
	if bad == nil {
		skipWithoutQEMU(t, "nonviable", "no function bound to vfio-pci sits in a non-viable IOMMU group")
	}
	c, _ := openAll(t, o)
	d, err := c.Open(bad.Addr)
	if err == nil {
		d.Close()
		t.Fatalf("Open(%s) in a non-viable group succeeded", bad.Addr)
	}
	if !errors.Is(err, pci.ErrBusy) || !strings.Contains(err.Error(), "not viable") || !strings.Contains(err.Error(), "uio_pci_generic") {
		t.Errorf("Open(%s) = %v; want ErrBusy saying the group is not viable because of the uio_pci_generic function", bad.Addr, err)
	}
	// The other member, bound to uio_pci_generic, is not VFIO's to open.
	members, err := o.Sysfs.Group(bad.IOMMUGroup)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Driver == "uio_pci_generic" {
			if _, err := c.Open(m.Addr); !errors.Is(err, pci.ErrBusy) || !strings.Contains(err.Error(), "bound to uio_pci_generic") {
				t.Errorf("Open(%s) bound to uio_pci_generic = %v; want ErrBusy naming the driver", m.Addr, err)
			}
		}
	}
}

// TestQEMUUnboundDevice unbinds a function from vfio-pci with Sysfs.Unbind
// (no kernel driver takes QEMU's edu), checks that Open refuses it and says
// to bind it, binds it again with Sysfs.Bind and opens it.
func TestQEMUUnboundDevice(t *testing.T) {
	o, fns := qemuFunctions(t, "edu", eduVendor, eduDevice, 1)
	a := fns[0].Addr
	if err := o.Sysfs.Unbind(a); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := o.Sysfs.Bind(a); err != nil {
			t.Errorf("binding %s back to vfio-pci: %v", a, err)
		}
	})
	f, err := o.Sysfs.Function(a)
	if err != nil {
		t.Fatal(err)
	}
	if f.Driver != "" {
		t.Fatalf("after Unbind %s is bound to %q, want no driver", a, f.Driver)
	}
	c, _ := openAll(t, o)
	if d, err := c.Open(a); err == nil {
		d.Close()
		t.Fatalf("Open(%s) of an unbound function succeeded", a)
	} else if !errors.Is(err, pci.ErrNotSupported) || !strings.Contains(err.Error(), "bind it to vfio-pci") {
		t.Errorf("Open(%s) unbound = %v; want ErrNotSupported saying to bind it to vfio-pci", a, err)
	}
	if err := o.Sysfs.Bind(a); err != nil {
		t.Fatal(err)
	}
	d, err := c.Open(a)
	if err != nil {
		t.Fatalf("Open after Bind: %v", err)
	}
	if id, err := pci.ReadID(d); err != nil || id.Vendor != eduVendor || id.Device != eduDevice {
		t.Errorf("ReadID after rebinding = %+v, %v", id, err)
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
}

// kmsg reads kernel log records from /dev/kmsg, from the moment it was
// opened on.
type kmsg struct{ fd int }

func openKmsg(t *testing.T) *kmsg {
	t.Helper()
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/kmsg: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
		t.Fatalf("seek /dev/kmsg: %v", err)
	}
	return &kmsg{fd: fd}
}

// waitFor returns the first new kernel message that match accepts, or ""
// when none comes within timeout.
func (k *kmsg) waitFor(match func(string) bool, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 8192)
	for time.Now().Before(deadline) {
		n, err := unix.Read(k.fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			time.Sleep(10 * time.Millisecond)
			continue
		case errors.Is(err, unix.EPIPE): // records overwritten: read on
			continue
		case err != nil || n <= 0:
			return ""
		}
		// A record is "prio,seq,time,flags;message\n" plus continuation lines.
		rec := string(buf[:n])
		if _, msg, ok := strings.Cut(rec, ";"); ok {
			msg, _, _ = strings.Cut(msg, "\n")
			if match(msg) {
				return msg
			}
		}
	}
	return ""
}

// TestQEMUIOMMUMode checks that the machine runs the IOMMU mode the VM
// runner booted: type1 behind the emulated Intel IOMMU, or vfio's no-IOMMU
// mode with /dev/vfio/noiommu-N groups, so that a configuration cannot pass
// by silently testing the other mode.
func TestQEMUIOMMUMode(t *testing.T) {
	var want string
	switch {
	case qemuRequired("iommu"):
		want = "iommu"
	case qemuRequired("noiommu"):
		want = "noiommu"
	default:
		skipWithoutQEMU(t, "iommu", "GOMX_REQUIRE_QEMU names no IOMMU mode to check")
	}
	o, fns := qemuSetup(t, want)
	c, devs := openAll(t, o, fns[0].Addr)
	if got := map[bool]string{true: "noiommu", false: "iommu"}[c.NoIOMMU()]; got != want {
		t.Fatalf("the container runs in %s mode, the VM was booted for %s", got, want)
	}
	if want == "iommu" {
		if c.iommuType != _VFIO_TYPE1v2_IOMMU {
			t.Errorf("IOMMU model %d, want type1v2 (%d)", c.iommuType, _VFIO_TYPE1v2_IOMMU)
		}
		return
	}
	g := fns[0].IOMMUGroup
	if _, err := os.Stat("/dev/vfio/noiommu-" + strconv.Itoa(g)); err != nil {
		t.Errorf("no-IOMMU group node of %s: %v", devs[0].Address(), err)
	}
	if !o.Sysfs.NoIOMMUEnabled() {
		t.Error("vfio's enable_unsafe_noiommu_mode is not Y")
	}
}
