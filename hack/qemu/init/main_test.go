package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/hack/qemu"
)

// The init must understand every argument the host side passes it.
func TestParseFlagsFromConfigs(t *testing.T) {
	for _, c := range qemu.Configs {
		o, err := parseFlags(c.InitArgs())
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if o.config != c.Name || o.hugepages != c.Hugepages || o.nonviable == c.NoIOMMU {
			t.Errorf("%s: parsed %+v", c.Name, o)
		}
		if !slices.Contains(o.env, "GOMX_REQUIRE_VFIO=1") || !slices.Contains(o.env, "GOMX_REQUIRE_QEMU="+c.Require()) {
			t.Errorf("%s: env %q", c.Name, o.env)
		}
		mods := qemu.GuestModules
		if c.USB {
			mods = append(slices.Clone(mods), qemu.USBGuestModules...)
		}
		if o.modprobe != strings.Join(mods, ",") {
			t.Errorf("%s: -modprobe %q, want the guest modules %q", c.Name, o.modprobe, mods)
		}
		if c.NoIOMMU != (len(o.insmod) == 1 && strings.HasPrefix(o.insmod[0], qemu.NoIOMMUVfioPath+":")) {
			t.Errorf("%s: -insmod %q: the rebuilt vfio.ko must come first exactly when there is no IOMMU", c.Name, o.insmod)
		}
		if want := []qemu.USBWait{{Vendor: 0x0525, Product: 0xa4a2, Driver: "cdc_ether"}}; c.USB != slices.Equal(o.waitUSB, want) {
			t.Errorf("%s: -wait-usb %v; the usb configurations must wait for %v", c.Name, o.waitUSB, want)
		}
		if o.testTimeout <= 10*time.Second {
			t.Errorf("%s: test timeout %v leaves no room for -test.timeout", c.Name, o.testTimeout)
		}
	}
	if _, err := parseFlags([]string{"-env=NOEQUALS"}); err == nil {
		t.Error("-env without = accepted")
	}
	if _, err := parseFlags([]string{"-wait-usb=0525"}); err == nil {
		t.Error("-wait-usb without a product ID accepted")
	}
	if _, err := parseFlags([]string{"-insmod=mods/vfio.ko"}); err == nil {
		t.Error("-insmod with a relative path accepted")
	}
}

// A configuration with Run gets its program and arguments, and the VM's
// time less the boot's as the program's bound.
func TestParseFlagsRun(t *testing.T) {
	c := qemu.Configs[0]
	c.Run = []string{"/bin/guest", "-runs=3", "-testpmd="}
	c.Timeout = 10 * time.Minute
	o, err := parseFlags(c.InitArgs())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.run, c.Run) || o.testTimeout != 9*time.Minute {
		t.Errorf("-run %q, timeout %v; want %q, 9m", o.run, o.testTimeout, c.Run)
	}
	if o, _ := parseFlags(qemu.Configs[0].InitArgs()); o.run != nil {
		t.Errorf("a test configuration runs %q instead of its tests", o.run)
	}
	if _, err := parseFlags([]string{"-run=bin/guest"}); err == nil {
		t.Error("-run with a relative path accepted")
	}
}
