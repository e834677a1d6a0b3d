package qemu

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLookup(t *testing.T) {
	all, err := Lookup("all")
	if err != nil || len(all) == 0 {
		t.Fatalf("Lookup(all) = %d configs, %v", len(all), err)
	}
	for _, c := range Configs {
		in := slices.ContainsFunc(all, func(a Config) bool { return a.Name == c.Name })
		if in == c.Optional {
			t.Errorf("configuration %s (optional %v) in all: %v", c.Name, c.Optional, in)
		}
	}
	if usb, err := Lookup("usb"); err != nil || len(usb) != 1 || !usb[0].USB {
		t.Errorf("Lookup(usb) = %+v, %v; want the usb configuration", usb, err)
	}
	two, err := Lookup("noiommu, iommu")
	if err != nil || len(two) != 2 || two[0].Name != "iommu" || two[1].Name != "noiommu" {
		t.Errorf("Lookup(noiommu, iommu) = %+v, %v; want iommu then noiommu", two, err)
	}
	if _, err := Lookup("iommu,kvm"); err == nil || !strings.Contains(err.Error(), "kvm") || !strings.Contains(err.Error(), "iommu-smp2") {
		t.Errorf("Lookup of an unknown name = %v; want an error naming it and the known ones", err)
	}
}

func TestQEMUArgs(t *testing.T) {
	for _, c := range Configs {
		t.Run(c.Name, func(t *testing.T) {
			args := c.QEMUArgs("/k", "/i")
			joined := strings.Join(args, " ")
			iommu := slices.Index(args, "intel-iommu,intremap=on,caching-mode=on")
			firstDev := slices.IndexFunc(args, func(s string) bool { return strings.HasPrefix(s, "e1000e,") })
			if c.NoIOMMU {
				if iommu >= 0 || strings.Contains(joined, "intel_iommu=on") {
					t.Errorf("no-IOMMU configuration has an IOMMU: %s", joined)
				}
				if !strings.Contains(joined, "edu,addr=03.0,dma_mask=0xffffffffffffffff") {
					t.Errorf("no-IOMMU edu without a 64-bit DMA mask: %s", joined)
				}
			} else {
				if iommu < 0 || iommu > firstDev {
					t.Errorf("intel-iommu must come before the devices: %s", joined)
				}
				if !strings.Contains(c.Append(), "intel_iommu=on") || !strings.Contains(joined, "pcie-pci-bridge") {
					t.Errorf("IOMMU configuration without intel_iommu=on or the bridge: %s", joined)
				}
			}
			for _, want := range []string{"-accel tcg", "-no-reboot", "-nodefaults", "-serial stdio", "-kernel /k", "-initrd /i", "romfile=,addr=01.0", "hubid=0"} {
				if !strings.Contains(joined, want) {
					t.Errorf("command line lacks %q: %s", want, joined)
				}
			}
			if c.ThirdNIC != strings.Contains(joined, "netdev=n2,mac=52:54:00:12:34:03,romfile=,addr=05.0") {
				t.Errorf("ThirdNIC %v but %s", c.ThirdNIC, joined)
			}
			if c.USB != strings.Contains(joined, "usb-net,id="+USBNetID+",netdev=u0,mac="+USBNetMAC+",bus=xhci.0") {
				t.Errorf("USB %v but %s", c.USB, joined)
			}
			if c.USB && (!strings.Contains(c.Append(), "-tests="+USBTestDir) || !strings.Contains(c.Append(), DeviceDelEnv+"="+USBNetID) ||
				!strings.Contains(c.Append(), "xhci_pci,cdc_ether")) {
				t.Errorf("usb configuration: kernel command line %q lacks its tests, its device_del permission or its modules", c.Append())
			}
			if (c.SMP > 1) != strings.Contains(joined, "thread=multi") {
				t.Errorf("SMP %d but %s", c.SMP, joined)
			}
			app := c.Append()
			if !strings.Contains(app, "console=ttyS0") || !strings.Contains(app, " -- -config="+c.Name) || !strings.Contains(app, "GOMX_REQUIRE_QEMU="+c.Require()) {
				t.Errorf("kernel command line %q", app)
			}
			if bound := 10 * time.Minute; c.Timeout <= 0 || c.Timeout > bound && !c.Optional || c.Timeout > 3*bound {
				t.Errorf("timeout %v: want a bound under 10 minutes (30 for a configuration all leaves out)", c.Timeout)
			}
		})
	}
}

func TestParseDepends(t *testing.T) {
	out := "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n  Recommends: firmware\n"
	if got, err := parseDepends(out); err != nil || got != "linux-image-6.1.0-57-amd64" {
		t.Errorf("parseDepends = %q, %v", got, err)
	}
	if _, err := parseDepends("linux-image-amd64\n"); err == nil {
		t.Error("parseDepends without a dependency succeeded")
	}
}
