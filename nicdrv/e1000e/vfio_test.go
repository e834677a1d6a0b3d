package e1000e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
	"golang.org/x/sys/unix"
)

// vfioNICs finds two 82574L functions bound to vfio-pci and cabled to each
// other: the ones named in GOMX_E1000E_DEVICES (two comma-separated PCI
// addresses), or else the first two on the bus (QEMU's pair in the VM). It
// skips when there are none, and fails instead when the environment says
// there must be (GOMX_REQUIRE_QEMU names e1000e, as in `make qemu-test`).
func vfioNICs(t *testing.T) (vfio.Options, []pci.Address) {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if strings.Contains(os.Getenv("GOMX_REQUIRE_QEMU"), "e1000e") {
			t.Fatalf("GOMX_REQUIRE_QEMU=%s but %s", os.Getenv("GOMX_REQUIRE_QEMU"), why)
		}
		t.Skipf("%s: the suite ran on the emulated 82574L only (bind two cabled 82574Ls to vfio-pci, or name them in GOMX_E1000E_DEVICES)", why)
	}
	o := vfio.DefaultOptions()
	if _, err := os.Stat("/dev/vfio/vfio"); err != nil {
		skip("no VFIO (" + err.Error() + ")")
	}
	if m, _ := filepath.Glob("/dev/vfio/noiommu-*"); len(m) > 0 {
		o.NoIOMMU = true
	}
	var addrs []pci.Address
	if env := os.Getenv("GOMX_E1000E_DEVICES"); env != "" {
		for _, s := range strings.Split(env, ",") {
			a, err := pci.ParseAddress(strings.TrimSpace(s))
			if err != nil {
				t.Fatalf("GOMX_E1000E_DEVICES: %v", err)
			}
			addrs = append(addrs, a)
		}
	} else {
		fns, err := o.Sysfs.Functions()
		if err != nil {
			skip("no PCI sysfs (" + err.Error() + ")")
		}
		for _, f := range fns {
			if f.Vendor == hw.VendorIntel && (f.Device == hw.Device82574L || f.Device == hw.Device82574LA) && f.Driver == "vfio-pci" {
				addrs = append(addrs, f.Addr)
			}
		}
	}
	if len(addrs) < 2 {
		skip("fewer than two 82574L functions bound to vfio-pci")
	}
	return o, addrs[:2]
}

// vfioRig opens the driver on two real (or QEMU) 82574Ls in one container.
// In QEMU the host pulls the cables on request (GOMX_QEMU_SET_LINK); on
// real hardware the rig cannot (SetLink is nil). IOMMU faults are counted
// from the kernel log's DMAR fault reports (root reads it; without an
// IOMMU there are none to count, and Faults is nil).
func vfioRig(t *testing.T, c nictest.Config) *nictest.Rig {
	vo, addrs := vfioNICs(t)
	ctr, err := vfio.OpenContainer(vo)
	if err != nil {
		t.Fatal(err)
	}
	var devs []*vfio.Device
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("close %v: %v", d.Address(), err)
			}
		}
		if err := ctr.Close(); err != nil {
			t.Errorf("close container: %v", err)
		}
	})
	for _, a := range addrs {
		d, err := ctr.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
	}
	opts := e1000e.DefaultOptions()
	opts.Queues = c.Queues
	opts.Interrupts = c.Interrupts
	r := &nictest.Rig{}
	if !vo.NoIOMMU {
		if _, err := dmarFaults(); err == nil {
			r.Faults = func() uint64 { n, _ := dmarFaults(); return n }
		}
	}
	if netdevs := os.Getenv("GOMX_QEMU_SET_LINK"); netdevs != "" {
		// In `make qemu-test` the host pulls QEMU's cables (the monitor's
		// set_link) when asked on the console (hack/qemu/setlink.go).
		r.SetLink = func(up bool) error {
			state := "off"
			if up {
				state = "on"
			}
			for _, nd := range strings.Split(netdevs, ",") {
				fmt.Printf("GOMX-QEMU-SET-LINK %s %s\n", nd, state)
			}
			return nil
		}
	}
	r.Reopen = func(i int) (nicdrv.NIC, error) {
		if r.NICs[i] != nil {
			if err := r.NICs[i].Close(); err != nil {
				return nil, err
			}
			r.NICs[i] = nil
		}
		return e1000e.Open(devs[i], opts)
	}
	for i := range 2 {
		n, err := e1000e.Open(devs[i], opts)
		if err != nil {
			t.Fatal(err)
		}
		r.NICs[i] = n
	}
	return r
}

func TestConformanceVFIO(t *testing.T) {
	vfioNICs(t)
	nictest.Run(t, vfioRig)
}

func TestSelfTestVFIO(t *testing.T) {
	vo, addrs := vfioNICs(t)
	ctr, err := vfio.OpenContainer(vo)
	if err != nil {
		t.Fatal(err)
	}
	defer ctr.Close()
	d, err := ctr.Open(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, mode := range []e1000e.Loopback{e1000e.LoopbackMAC, e1000e.LoopbackPHY} {
		if err := e1000e.SelfTest(d, mode, e1000e.DefaultOptions()); err != nil {
			t.Errorf("%v loopback: %v", mode, err)
		}
	}
}

// dmarFaults counts the Intel IOMMU's DMA fault reports in the kernel log
// ("DMAR: [DMA Read" or "DMAR: [DMA Write"): a device that touches memory
// it has no mapping for shows up there.
func dmarFaults() (uint64, error) {
	size, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, size)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return 0, err
	}
	log := string(buf[:n])
	return uint64(strings.Count(log, "DMAR: [DMA Read") + strings.Count(log, "DMAR: [DMA Write")), nil
}
