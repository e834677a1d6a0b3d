package ioat

import (
	"os"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// The conformance suite also runs on real CBDMA channels: the functions
// named in GOMX_IOAT_DEVICES (comma-separated PCI addresses), or else every
// CBDMA function and DSA bound to vfio-pci (the engine opens a DSA's work
// queues where a CBDMA function gives channels). With GOMX_REQUIRE_IOAT=1 a machine
// without any fails instead of running the emulated backends only.
func init() {
	realBackendsHook = func() []backend {
		addrs := vfioCBDMA()
		if len(addrs) == 0 {
			return nil
		}
		return []backend{{name: "vfio", open: func(t testing.TB, channels int) ([]pci.Device, *testPlatform) {
			if channels > len(addrs) {
				channels = len(addrs)
			}
			c, err := vfio.OpenContainer(vfio.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			var devs []pci.Device
			for _, a := range addrs[:channels] {
				d, err := c.Open(a)
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				devs = append(devs, d)
			}
			t.Cleanup(func() {
				for _, d := range devs {
					d.Close()
				}
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			})
			return devs, nil
		}}}
	}
}

func vfioCBDMA() []pci.Address {
	var addrs []pci.Address
	if env := os.Getenv("GOMX_IOAT_DEVICES"); env != "" {
		for _, s := range strings.Split(env, ",") {
			a, err := pci.ParseAddress(strings.TrimSpace(s))
			if err == nil {
				addrs = append(addrs, a)
			}
		}
		return addrs
	}
	fns, err := vfio.DefaultSysfs().Functions()
	if err != nil {
		return nil
	}
	for _, f := range fns {
		_, cbdma := hw.Models[f.Device]
		if (cbdma || dsahw.Devices[f.Device] != "") && f.Vendor == hw.VendorIntel && f.Driver == "vfio-pci" {
			addrs = append(addrs, f.Addr)
		}
	}
	return addrs
}

// TestRealHardwarePresent fails under GOMX_REQUIRE_IOAT=1 when no real
// CBDMA channel is available, so a CI job meant to test hardware cannot
// silently pass on the emulated model alone.
func TestRealHardwarePresent(t *testing.T) {
	if len(vfioCBDMA()) > 0 {
		return
	}
	if os.Getenv("GOMX_REQUIRE_IOAT") == "1" {
		t.Fatal("GOMX_REQUIRE_IOAT=1 but no CBDMA function is bound to vfio-pci: run `ioatctl bind --all` (or set GOMX_IOAT_DEVICES)")
	}
	t.Skip("no CBDMA function bound to vfio-pci: the suite ran on the emulated engine only (bind channels with `ioatctl bind --all` to include real ones)")
}
