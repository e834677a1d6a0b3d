package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeUSB is a sysfs and devfs tree as the guest's kernel lays them out.
type fakeUSB struct {
	t        *testing.T
	sys, dev string
}

func newFakeUSB(t *testing.T) *fakeUSB {
	root := t.TempDir()
	f := &fakeUSB{t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev")}
	f.mkdir(filepath.Join(f.sys, "bus", "usb", "devices"))
	// The root hubs are there as soon as xhci_pci is loaded.
	f.device("usb1", "1d6b", "0002", "1", 1, 1)
	f.node(1, 1)
	return f
}

func (f *fakeUSB) mkdir(p string) {
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeUSB) write(p, s string) {
	f.mkdir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// device lists a USB device; config "" is one not configured yet.
func (f *fakeUSB) device(name, vid, pid, config string, bus, addr int) {
	d := filepath.Join(f.sys, "bus", "usb", "devices", name)
	f.write(filepath.Join(d, "idVendor"), vid)
	f.write(filepath.Join(d, "idProduct"), pid)
	f.write(filepath.Join(d, "bConfigurationValue"), config)
	f.write(filepath.Join(d, "busnum"), strconv.Itoa(bus))
	f.write(filepath.Join(d, "devnum"), strconv.Itoa(addr))
}

func (f *fakeUSB) node(bus, addr int) {
	f.write(filepath.Join(f.dev, "bus", "usb", fmt.Sprintf("%03d", bus), fmt.Sprintf("%03d", addr)), "")
}

// bind makes driver hold interface iface of device name.
func (f *fakeUSB) bind(iface, driver string) {
	drv := filepath.Join(f.sys, "bus", "usb", "drivers", driver)
	f.mkdir(drv)
	i := filepath.Join(f.sys, "bus", "usb", "devices", iface)
	f.mkdir(i)
	if err := os.Symlink(drv, filepath.Join(i, "driver")); err != nil {
		f.t.Fatal(err)
	}
}

// The device is ready only once every stage of its enumeration is done,
// and until then Missing names the stage it is at.
func TestUSBWaitMissing(t *testing.T) {
	w, err := ParseUSBWait(USBNetSelector + "/cdc_ether")
	if err != nil || w != (USBWait{Vendor: 0x0525, Product: 0xa4a2, Driver: "cdc_ether"}) || w.String() != "0525:a4a2/cdc_ether" {
		t.Fatalf("ParseUSBWait = %+v (%s), %v", w, w, err)
	}
	f := newFakeUSB(t)
	stages := []struct {
		do   func()
		want string
	}{
		{func() {}, "no USB device 0525:a4a2 yet (devices: usb1 (1d6b:0002))"},
		{func() { f.device("1-1", "0525", "a4a2", "", 1, 2) }, "no active configuration"},
		{func() { f.device("1-1", "0525", "a4a2", "1", 1, 2) }, "no device node"},
		{func() { f.node(1, 2); f.mkdir(filepath.Join(f.sys, "bus", "usb", "devices", "1-1:1.1")) }, "cdc_ether holds no interface of USB device 0525:a4a2 at 1-1 yet (interfaces 1"},
		{func() { f.bind("1-1:1.0", "cdc_ether") }, ""},
	}
	for i, s := range stages {
		s.do()
		if got := w.Missing(f.sys, f.dev); !strings.Contains(got, s.want) || (s.want == "") != (got == "") {
			t.Errorf("stage %d: Missing = %q, want %q", i, got, s.want)
		}
	}
	if got := (USBWait{Vendor: 0x0525, Product: 0xa4a2}).Missing(f.sys, f.dev); got != "" {
		t.Errorf("without a driver: Missing = %q on a configured device with its node", got)
	}
	if got := w.Missing(filepath.Join(f.sys, "nowhere"), f.dev); !strings.Contains(got, "no USB bus") {
		t.Errorf("without a USB bus: Missing = %q", got)
	}
	for _, bad := range []string{"", "0525", "0525:zz", "10000:1", "0525-a4a2"} {
		if _, err := ParseUSBWait(bad); err == nil {
			t.Errorf("ParseUSBWait(%q) succeeded", bad)
		}
	}
}

// Wait returns once the device turns up, and otherwise fails naming what
// never appeared.
func TestUSBWaitWait(t *testing.T) {
	w := USBWait{Vendor: 0x0525, Product: 0xa4a2}
	f := newFakeUSB(t)
	err := w.Wait(context.Background(), f.sys, f.dev, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "USB device 0525:a4a2 not ready") || !strings.Contains(err.Error(), "no USB device 0525:a4a2 yet") {
		t.Fatalf("Wait on an absent device = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait(context.Background(), f.sys, f.dev, time.Minute) }()
	f.device("1-1", "0525", "a4a2", "1", 1, 2)
	f.node(1, 2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after the device appeared")
	}
}
