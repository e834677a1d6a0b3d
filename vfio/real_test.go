package vfio

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/pci"
)

// requireEnv names the variable that turns the real-device skips into
// failures, for the environments (QEMU runs, CI with VFIO) that must have
// devices.
const requireEnv = "GOMX_REQUIRE_VFIO"

// skipWithoutVFIO skips the test with a hint saying how to set VFIO up, or
// fails it when GOMX_REQUIRE_VFIO=1.
func skipWithoutVFIO(t *testing.T, why string) {
	t.Helper()
	msg := why + "; to run this test: modprobe vfio-pci, boot with intel_iommu=on, bind a function to vfio-pci " +
		"(Sysfs.Bind, or echo vfio-pci > /sys/bus/pci/devices/ADDR/driver_override and drivers_probe), run as root"
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s (%s=1 requires VFIO)", msg, requireEnv)
	}
	t.Skip(msg + "; " + requireEnv + "=1 makes this a failure")
}

// realSetup finds the functions bound to vfio-pci and the options to open
// them with, or skips.
func realSetup(t *testing.T) (Options, []Function) {
	t.Helper()
	o := DefaultOptions()
	if _, err := os.Stat(filepath.Join(o.DevVFIO, "vfio")); err != nil {
		skipWithoutVFIO(t, "no VFIO: "+err.Error())
	}
	all, err := o.Sysfs.Functions()
	if err != nil {
		t.Fatal(err)
	}
	var fns []Function
	for _, f := range all {
		if f.Driver == vfioDriver {
			fns = append(fns, f)
		}
	}
	if len(fns) == 0 {
		skipWithoutVFIO(t, "no PCI function is bound to vfio-pci")
	}
	// No-IOMMU groups show up as /dev/vfio/noiommu-N; use that mode only
	// when the machine is set up for it.
	if m, _ := filepath.Glob(filepath.Join(o.DevVFIO, "noiommu-*")); len(m) > 0 {
		o.NoIOMMU = true
	}
	return o, fns
}

// TestRealDevices is the conformance pass over every function bound to
// vfio-pci: open, config space, BAR0, command register, interrupts, reset.
func TestRealDevices(t *testing.T) {
	o, fns := realSetup(t)
	c, _ := openAll(t, o)
	for _, f := range fns {
		t.Run(f.Addr.String(), func(t *testing.T) {
			if err := o.Sysfs.CheckViable(f.Addr); err != nil {
				t.Skipf("group not viable, skipping this function: %v", err)
			}
			d, err := c.Open(f.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := d.Close(); err != nil {
					t.Errorf("Device.Close: %v", err)
				}
				if err := d.Close(); err != nil {
					t.Errorf("second Device.Close: %v", err)
				}
			}()
			if _, err := c.Open(f.Addr); !errors.Is(err, pci.ErrBusy) {
				t.Errorf("second Open = %v, want ErrBusy", err)
			}
			if d.DMA() != pci.DMA(c) {
				t.Error("DMA() is not the container")
			}
			info := d.Info()
			if info.Flags&DevicePCI == 0 || len(info.Regions) <= RegionConfig || info.Regions[RegionConfig].Size < 256 {
				t.Fatalf("info %+v: want a PCI device with a config region of at least 256 bytes", info)
			}
			id, err := pci.ReadID(d)
			if err != nil {
				t.Fatal(err)
			}
			if id.Vendor != f.Vendor || id.Device != f.Device || id.Class != f.Class {
				t.Errorf("config space says %04x:%04x class %06x, sysfs %04x:%04x class %06x",
					id.Vendor, id.Device, id.Class, f.Vendor, f.Device, f.Class)
			}
			if err := d.ReadConfig(int(info.Regions[RegionConfig].Size), make([]byte, 1)); !errors.Is(err, pci.ErrBadRange) {
				t.Errorf("config read past the end = %v, want ErrBadRange", err)
			}

			if err := pci.SetCommand(d, pci.CommandMemory|pci.CommandBusMaster); err != nil {
				t.Fatal(err)
			}
			if cmd, err := pci.ReadConfig16(d, pci.ConfigCommand); err != nil || cmd&pci.CommandBusMaster == 0 {
				t.Errorf("command = %#x, %v; want bus master set", cmd, err)
			}

			if info.Regions[0].Size > 0 {
				regs, err := d.BAR(0)
				switch {
				case errors.Is(err, pci.ErrNotSupported):
					t.Logf("BAR0: %v", err)
				case err != nil:
					t.Fatal(err)
				default:
					if regs.Len() != int(info.Regions[0].Size) {
						t.Errorf("BAR0 Len = %d, region size %d", regs.Len(), info.Regions[0].Size)
					}
					t.Logf("BAR0 %#x bytes (%T), register 0 = %#x", regs.Len(), regs, regs.Read32(0))
					if again, _ := d.BAR(0); again != regs {
						t.Error("BAR(0) returned a different register file the second time")
					}
				}
			}
			if _, err := d.BAR(6); !errors.Is(err, pci.ErrBadRange) {
				t.Errorf("BAR(6) = %v, want ErrBadRange", err)
			}

			msix, msi := info.IRQs[IRQIndexMSIX].Count, info.IRQs[IRQIndexMSI].Count
			irqs, err := d.EnableInterrupts(1)
			if msix+msi == 0 {
				if !errors.Is(err, pci.ErrNotSupported) {
					t.Errorf("EnableInterrupts on a function without MSI = %v, want ErrNotSupported", err)
				}
			} else {
				if err != nil || len(irqs) != 1 {
					t.Fatalf("EnableInterrupts(1) = %v, %v (MSI-X %d, MSI %d)", irqs, err, msix, msi)
				}
				if _, err := d.EnableInterrupts(1); !errors.Is(err, pci.ErrBusy) {
					t.Errorf("second EnableInterrupts = %v, want ErrBusy", err)
				}
				if err := d.DisableInterrupts(); err != nil {
					t.Errorf("DisableInterrupts: %v", err)
				}
				if err := irqs[0].Signal(); !errors.Is(err, pci.ErrClosed) {
					t.Errorf("Signal after DisableInterrupts = %v, want ErrClosed", err)
				}
			}

			err = d.Reset()
			if info.Flags&DeviceReset == 0 {
				if !errors.Is(err, pci.ErrNotSupported) {
					t.Errorf("Reset without the reset flag = %v, want ErrNotSupported", err)
				}
			} else if err != nil {
				t.Errorf("Reset: %v", err)
			}
		})
	}
}

// TestRealDMA maps hugepage memory and an unaligned heap buffer in the
// container of the first usable function.
func TestRealDMA(t *testing.T) {
	o, fns := realSetup(t)
	c, _ := openAll(t, o)
	var d *Device
	var err error
	for _, f := range fns {
		if d, err = c.Open(f.Addr); err == nil {
			break
		}
		t.Logf("%s: %v", f.Addr, err)
	}
	if d == nil {
		t.Fatal("no function bound to vfio-pci could be opened")
	}
	defer d.Close()

	region, err := hugepage.Alloc(4<<20, hugepage.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	if s := region.Degraded(); s != "" {
		t.Log(s)
	}
	buf := region.Bytes()
	m, err := c.Map(buf)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range m.Segments {
		total += s.Len
	}
	if total != len(buf) {
		t.Errorf("segments cover %d of %d bytes", total, len(buf))
	}
	if !c.NoIOMMU() {
		iova := m.Segments[0].IOVA
		if len(m.Segments) != 1 || iova%hugeAlign != 0 || iova < o.IOVABase || iova+uint64(len(buf)) > o.IOVALimit {
			t.Errorf("type1 mapping %+v: want one 2 MiB aligned segment inside [%#x, %#x)", m.Segments, o.IOVABase, o.IOVALimit)
		}
	}
	if _, _, err := m.IOVA(len(buf) - 1); err != nil {
		t.Error(err)
	}
	if err := c.Unmap(m); err != nil {
		t.Fatal(err)
	}
	if err := c.Unmap(m); !errors.Is(err, pci.ErrNotMapped) {
		t.Errorf("second Unmap = %v, want ErrNotMapped", err)
	}

	if !c.NoIOMMU() {
		heap := make([]byte, 10000)
		sub := heap[100:5100]
		m, err := c.Map(sub)
		if err != nil {
			t.Fatal(err)
		}
		page := uint64(os.Getpagesize())
		if len(m.Segments) != 1 || m.Segments[0].Len != len(sub) || m.Segments[0].IOVA%page != uint64(addrOf(sub))%page {
			t.Errorf("heap mapping %+v: want one segment at the buffer's offset in its page", m.Segments)
		}
		// Left mapped on purpose: Container.Close must release it and say so.
		c2err := c.Close()
		if c2err == nil || !strings.Contains(c2err.Error(), "1 DMA mapping") || !strings.Contains(c2err.Error(), "1 device") {
			t.Errorf("Container.Close with a device and a mapping left = %v; want it to report both", c2err)
		}
		if err := d.ReadConfig(0, make([]byte, 2)); !errors.Is(err, pci.ErrClosed) {
			t.Errorf("device use after Container.Close = %v, want ErrClosed", err)
		}
	}
}
