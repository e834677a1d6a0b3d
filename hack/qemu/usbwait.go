package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// USBWait names a USB device the guest's init waits for before it runs
// anything, and the kernel driver that must hold one of its interfaces
// ("" for none). Loading xhci_pci returns before the controller has
// enumerated what is plugged into it: a test that opened the device at
// once would meet it half set up (failed control transactions) or not at
// all.
type USBWait struct {
	Vendor, Product uint16
	Driver          string
}

// USBReadyTimeout bounds the init's wait for a USBWait device; enumerating
// QEMU's usb-net and binding cdc_ether takes well under a second under TCG.
const USBReadyTimeout = 20 * time.Second

// ParseUSBWait reads a USBWait written as String writes it:
// VENDOR:PRODUCT in hex, optionally followed by /DRIVER.
func ParseUSBWait(s string) (USBWait, error) {
	id, drv, _ := strings.Cut(s, "/")
	v, p, ok := strings.Cut(id, ":")
	vv, err1 := strconv.ParseUint(v, 16, 16)
	pp, err2 := strconv.ParseUint(p, 16, 16)
	if !ok || err1 != nil || err2 != nil {
		return USBWait{}, fmt.Errorf("USB device %q: want VENDOR:PRODUCT in hex, optionally /DRIVER", s)
	}
	return USBWait{Vendor: uint16(vv), Product: uint16(pp), Driver: drv}, nil
}

// String writes w as ParseUSBWait reads it: VENDOR:PRODUCT in hex, then
// /DRIVER when one is set.
func (w USBWait) String() string {
	s := fmt.Sprintf("%04x:%04x", w.Vendor, w.Product)
	if w.Driver != "" {
		s += "/" + w.Driver
	}
	return s
}

// Missing returns "" when the device is ready in the sysfs tree under sys
// and the device nodes under dev ("/sys" and "/dev" in the guest), and
// otherwise what it still lacks. Ready means: a device with the IDs is
// listed under bus/usb/devices, it has an active configuration, the node
// libusb opens (dev/bus/usb/BUS/ADDR) exists, and Driver, if set, holds
// one of its interfaces.
func (w USBWait) Missing(sys, dev string) string {
	devs := filepath.Join(sys, "bus", "usb", "devices")
	ents, err := os.ReadDir(devs)
	if err != nil {
		return fmt.Sprintf("no USB bus (%v); is the host controller's driver loaded?", err)
	}
	attr := func(d, name string) string {
		b, _ := os.ReadFile(filepath.Join(devs, d, name))
		return strings.TrimSpace(string(b))
	}
	id := fmt.Sprintf("%04x:%04x", w.Vendor, w.Product)
	var seen []string
	for _, e := range ents {
		d := e.Name()
		if strings.Contains(d, ":") { // an interface, not a device
			continue
		}
		got := attr(d, "idVendor") + ":" + attr(d, "idProduct")
		if got != id {
			seen = append(seen, d+" ("+got+")")
			continue
		}
		if attr(d, "bConfigurationValue") == "" {
			return fmt.Sprintf("USB device %s at %s has no active configuration yet", id, d)
		}
		bus, _ := strconv.Atoi(attr(d, "busnum"))
		addr, _ := strconv.Atoi(attr(d, "devnum"))
		node := filepath.Join(dev, "bus", "usb", fmt.Sprintf("%03d", bus), fmt.Sprintf("%03d", addr))
		if _, err := os.Stat(node); err != nil {
			return fmt.Sprintf("USB device %s at %s has no device node yet (%v)", id, d, err)
		}
		if w.Driver == "" {
			return ""
		}
		ifs, _ := filepath.Glob(filepath.Join(devs, d+":*"))
		var held []string
		for _, i := range ifs {
			l, err := os.Readlink(filepath.Join(i, "driver"))
			if err == nil && filepath.Base(l) == w.Driver {
				return ""
			}
			if err == nil {
				held = append(held, filepath.Base(i)+" by "+filepath.Base(l))
			}
		}
		return fmt.Sprintf("%s holds no interface of USB device %s at %s yet (interfaces %d, held %v)", w.Driver, id, d, len(ifs), held)
	}
	return fmt.Sprintf("no USB device %s yet (devices: %s)", id, strings.Join(seen, ", "))
}

// Wait polls Missing until the device is ready, ctx ends or timeout
// passes; the error says what never appeared.
func (w USBWait) Wait(ctx context.Context, sys, dev string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		m := w.Missing(sys, dev)
		if m == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("USB device %s not ready within %v: %s", w, timeout, m)
		case <-tick.C:
		}
	}
}
