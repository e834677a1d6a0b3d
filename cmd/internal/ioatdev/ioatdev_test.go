package ioatdev

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/internal/sysfstest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// The fake machine of ioatctl's tests: CBDMA functions 00:04.0 (ioatdma),
// 00:04.1 (vfio-pci) and 80:04.0 (no driver), and a NIC at 02:00.0.
func fakeSysfs(t *testing.T) vfio.Sysfs {
	return vfio.Sysfs{Root: sysfstest.Build(t, "../../ioatctl/testdata/sysfs.txt")}
}

func addr(t *testing.T, s string) pci.Address {
	a, err := pci.ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// CBDMAFunctions lists the CBDMA functions and nothing else.
func TestCBDMAFunctions(t *testing.T) {
	fns, err := CBDMAFunctions(fakeSysfs(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fns {
		got = append(got, f.Addr.String())
	}
	for _, want := range []string{"0000:00:04.0", "0000:00:04.1", "0000:80:04.0"} {
		if !slices.Contains(got, want) {
			t.Errorf("CBDMA functions %v lack %s", got, want)
		}
	}
	if slices.Contains(got, "0000:02:00.0") {
		t.Errorf("CBDMA functions %v include the NIC", got)
	}
}

// OpenVFIO refuses what cannot work, saying what to do, with the caller's
// way of asking for the emulated engine.
func TestOpenVFIOErrors(t *testing.T) {
	sys := fakeSysfs(t)
	for _, c := range []struct {
		addrs []string
		want  []string
	}{
		{nil, []string{"no PCI address given"}},
		{[]string{"0000:02:00.0"}, []string{"not a CBDMA function", "ioatctl list"}},
		{[]string{"0000:00:04.0"}, []string{"bound to ioatdma, not vfio-pci", "ioatctl bind 0000:00:04.0", "--my-emulated"}},
		{[]string{"0000:80:04.0"}, []string{"bound to no driver"}},
		{[]string{"0000:00:04.1"}, []string{"--my-emulated"}}, // bound, but no VFIO nodes here
	} {
		var as []pci.Address
		for _, s := range c.addrs {
			as = append(as, addr(t, s))
		}
		s, err := OpenVFIO(sys, t.TempDir(), as, "--my-emulated")
		if err == nil {
			s.Close()
			t.Errorf("%v: opened", c.addrs)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want it to say %q", c.addrs, err, w)
			}
		}
	}
}

// OpenEmulated gives the model's channels, which Close releases.
func TestOpenEmulated(t *testing.T) {
	s, err := OpenEmulated(emulated.CBDMAOptions{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Emulated || s.Name != "emulated" || len(s.Devs) != 2 {
		t.Errorf("set %+v", s)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
