// Package ioatdev opens the CBDMA channels a tool runs an ioat.Engine on:
// either the emulated CBDMA model (package emulated, CPU threads that
// behave like the registers and descriptors of the hardware) or real
// functions bound to vfio-pci, all opened through one VFIO container so
// that they share one DMA domain, as ioat.NewEngine requires.
//
// ioatctl and mxbench both open devices through here, so the checks a
// user meets (is the address a CBDMA function, is it bound to vfio-pci)
// and the advice they get are the same in both tools. The package only
// opens and closes devices; engine options stay with each tool.
package ioatdev

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// Set is a set of opened CBDMA functions in one DMA domain.
type Set struct {
	// Devs are the opened functions, in the order asked for.
	Devs []pci.Device
	// Emulated is true for the in-process model.
	Emulated bool
	// Name is "emulated" or the comma-separated PCI addresses.
	Name    string
	closers []func() error
}

// Close releases the devices, last opened first.
func (s *Set) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// IsCBDMA reports whether a sysfs function is a CBDMA channel the driver
// knows.
func IsCBDMA(f vfio.Function) bool {
	_, ok := hw.Models[f.Device]
	return f.Vendor == hw.VendorIntel && ok
}

// IsDSA reports whether a sysfs function is a DSA (Data Streaming
// Accelerator) the driver knows.
func IsDSA(f vfio.Function) bool {
	return f.Vendor == dsahw.VendorIntel && dsahw.Devices[f.Device] != ""
}

// DSAFunctions lists the DSA functions in sysfs.
func DSAFunctions(sys vfio.Sysfs) ([]vfio.Function, error) {
	all, err := sys.Functions()
	if err != nil {
		return nil, err
	}
	var out []vfio.Function
	for _, f := range all {
		if IsDSA(f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// OpenEmulatedDSA builds an emulated DSA platform with options o.
func OpenEmulatedDSA(o emulated.DSAOptions) (*Set, error) {
	p, err := emulated.NewDSA(o)
	if err != nil {
		return nil, err
	}
	return &Set{Devs: p.Devices(), Emulated: true, Name: "emulated-dsa", closers: []func() error{p.Close}}, nil
}

// CBDMAFunctions lists the CBDMA functions in sysfs.
func CBDMAFunctions(sys vfio.Sysfs) ([]vfio.Function, error) {
	all, err := sys.Functions()
	if err != nil {
		return nil, err
	}
	var out []vfio.Function
	for _, f := range all {
		if IsCBDMA(f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// OpenEmulated builds an emulated CBDMA platform with options o.
func OpenEmulated(o emulated.CBDMAOptions) (*Set, error) {
	p, err := emulated.NewCBDMA(o)
	if err != nil {
		return nil, err
	}
	return &Set{Devs: p.Devices(), Emulated: true, Name: "emulated", closers: []func() error{p.Close}}, nil
}

// OpenVFIO opens the functions at addrs through one VFIO container (VFIO
// nodes in devVFIO, "/dev/vfio" normally), after checking in sysfs that
// each is a CBDMA function bound to vfio-pci. Errors say what to run;
// emu is how the calling tool's user asks for the emulated engine instead
// (a flag such as "--device emulated"), for the advice.
func OpenVFIO(sys vfio.Sysfs, devVFIO string, addrs []pci.Address, emu string) (*Set, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no PCI address given: name CBDMA functions such as 0000:00:04.0 (see `ioatctl list`)")
	}
	for _, a := range addrs {
		f, err := sys.Function(a)
		if err != nil {
			return nil, fmt.Errorf("%w (see `ioatctl list`)", err)
		}
		if !IsCBDMA(f) && !IsDSA(f) {
			return nil, fmt.Errorf("%s is not a CBDMA function, nor a DSA (ID %04x:%04x; see `ioatctl list`)", a, f.Vendor, f.Device)
		}
		if f.Driver != "vfio-pci" && IsDSA(f) {
			return nil, fmt.Errorf("DSA %s is bound to %s, not vfio-pci: gomx drives a DSA through vfio-pci as SPDK and DPDK do; bind it with `sudo ioatctl bind %s` (Linux 6.9 and later refuse 8086:0b25 under vfio-pci unless booted with vfio-pci.disable_denylist=1; docs/dsa.md), or use %s-dsa", a, orNoDriver(f.Driver), a, emu)
		}
		if f.Driver != "vfio-pci" {
			drv := f.Driver
			if drv == "" {
				drv = "no driver"
			}
			return nil, fmt.Errorf("%s is bound to %s, not vfio-pci: run `sudo ioatctl bind %s`, or use %s", a, drv, a, emu)
		}
	}
	o := vfio.DefaultOptions()
	o.Sysfs = sys
	o.DevVFIO = devVFIO
	ctr, err := vfio.OpenContainer(o)
	if err != nil {
		return nil, fmt.Errorf("%w (or use %s)", err, emu)
	}
	s := &Set{closers: []func() error{ctr.Close}}
	var names []string
	for _, a := range addrs {
		d, err := ctr.Open(a)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("%w (see `ioatctl setup`; or use %s)", err, emu)
		}
		s.Devs = append(s.Devs, d)
		s.closers = append(s.closers, d.Close)
		names = append(names, a.String())
	}
	s.Name = strings.Join(names, ",")
	return s, nil
}

func orNoDriver(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}
