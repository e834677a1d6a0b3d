package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/vfio"
)

// usbFlags select the devices of a --transport usb run: both boards are in
// this process, each on one of two USB CDC Ethernet adapters cabled to each
// other and driven from user space by gomx's driver (package
// nicdrv/usbnet) through libusb, or on two pure-Go fake devices cabled in
// memory. One of the two may instead be a NIC bound to vfio-pci, driven by
// gomx's e1000e or ixgbe driver, that the other side's adapter is cabled to
// (a machine with one USB adapter, such as QEMU's usb-net beside its
// e1000e).
type usbFlags struct {
	devs string
}

func (u *usbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.devs, "usb", envOr("MXBENCH_USB", ""), "usb: two cabled USB CDC ECM/NCM adapters A,B, each BUS:ADDR (lsusb -s) or VID:PID (lsusb -d), e.g. 3:7,3:8 (needs an mxbench built with make build-usb); one of them may be the PCI address of the NIC bound to vfio-pci the other is cabled to (0525:a4a2,0000:00:02.0); or fake / fake-ncm for two pure-Go fake devices (env MXBENCH_USB)")
}

// usbEnd is one side of --usb: a USB adapter, or (with a PCI address) a
// NIC bound to vfio-pci.
type usbEnd struct {
	usb   usbnet.Selector
	nic   pci.Address
	isNIC bool
}

func (e usbEnd) String() string {
	if e.isNIC {
		return e.nic.String()
	}
	return e.usb.String()
}

// parseUSBEnd reads a USB selector, or a PCI address (which has a '.'
// before its function, and a USB selector never has).
func parseUSBEnd(s string) (usbEnd, error) {
	if strings.Contains(s, ".") {
		a, err := pci.ParseAddress(s)
		return usbEnd{nic: a, isNIC: true}, err
	}
	sel, err := usbnet.ParseSelector(s)
	return usbEnd{usb: sel}, err
}

// ends parses --usb; nil for the fakes.
func (u *usbFlags) ends() ([]usbEnd, error) {
	if u.devs == "fake" || u.devs == "fake-ncm" {
		return nil, nil
	}
	e, err := parsePair("--usb", u.devs, "two USB adapters A,B (BUS:ADDR or VID:PID each, or one of them the PCI address of a NIC bound to vfio-pci), or fake / fake-ncm", "adapters", parseUSBEnd)
	if err == nil && e[0].isNIC && e[1].isNIC {
		return nil, fmt.Errorf("--usb %q names two PCI NICs: use --transport nic --nic %s", u.devs, u.devs)
	}
	return e, err
}

func (u *usbFlags) validate(cmd, tr, peer string) error {
	if tr != "usb" {
		if u.devs != "" {
			return usagef(cmd, "--usb needs --transport usb")
		}
		return nil
	}
	if peer != "" {
		return usagef(cmd, "--transport usb runs both sides in this process on two cabled USB adapters: drop --peer")
	}
	if u.devs == "" {
		return usagef(cmd, "--transport usb needs --usb A,B (two cabled USB CDC adapters, BUS:ADDR or VID:PID) or --usb fake")
	}
	if _, err := u.ends(); err != nil {
		return usagef(cmd, "%v", err)
	}
	return nil
}

// transports opens the two sides and a transport on each. Closing both
// transports closes the devices (and the VFIO container of a PCI side).
func (u *usbFlags) transports() (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	ends, err := u.ends()
	if err != nil {
		return nil, nil, "", nil, err
	}
	var nics [2]nicdrv.NIC
	var closers []func() error
	release := func() error {
		var errs []error
		for k := len(closers) - 1; k >= 0; k-- {
			errs = append(errs, closers[k]())
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (transport.Transport, transport.Transport, string, *loopback.Network, error) {
		for _, n := range nics {
			if n != nil {
				n.Close()
			}
		}
		release()
		return nil, nil, "", nil, err
	}
	var names [2]string
	if ends == nil {
		m := usbnet.ECM
		if u.devs == "fake-ncm" {
			m = usbnet.NCM
		}
		fa := usbfake.New(usbfake.Options{Model: m, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0x05, 0x01}, Address: 2})
		fb := usbfake.New(usbfake.Options{Model: m, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0x05, 0x02}, Address: 3})
		usbfake.Cable(fa, fb)
		for i, d := range []usbnet.Device{fa, fb} {
			drv, err := usbnet.Open(d, usbnet.Options{})
			if err != nil {
				return fail(err)
			}
			nics[i] = drv
		}
		what = fmt.Sprintf("usb: gomx's CDC %v driver on two fake devices (pure Go, cabled in memory)", m)
	} else {
		for i, e := range ends {
			if e.isNIC {
				c, err := vfio.OpenContainer(vfio.DefaultOptions())
				if err != nil {
					return fail(fmt.Errorf("nic %v: %w", e.nic, err))
				}
				closers = append(closers, c.Close)
				d, err := c.Open(e.nic)
				if err != nil {
					return fail(fmt.Errorf("nic %v: %w (is it bound to vfio-pci?)", e.nic, err))
				}
				closers = append(closers, d.Close)
				if nics[i], err = openDriver(d, optBool{}, 0, false, 1500, false); err != nil {
					return fail(fmt.Errorf("nic %v: %w", e.nic, err))
				}
				names[i] = fmt.Sprintf("gomx's %s driver on %v (VFIO)", driverName(d), e.nic)
				continue
			}
			d, closeDev, err := openUSB(e.usb)
			if err != nil {
				return fail(fmt.Errorf("usb %v: %w", e.usb, err))
			}
			closers = append(closers, closeDev)
			drv, err := usbnet.Open(d, usbnet.Options{})
			if err != nil {
				return fail(err)
			}
			nics[i] = drv
			names[i] = fmt.Sprintf("gomx's CDC %v driver on %v (libusb)", drv.Function().Model, d)
		}
		what = fmt.Sprintf("usb: %s <-> %s", names[0], names[1])
	}
	var once sync.Once
	var mu sync.Mutex
	left := 2
	done := func() error {
		mu.Lock()
		left--
		last := left == 0
		mu.Unlock()
		var err error
		if last {
			once.Do(func() { err = release() })
		}
		return err
	}
	var ts [2]transport.Transport
	for i, drv := range nics {
		t, err := nic.New(drv, nic.Options{})
		if err != nil {
			if i == 1 {
				nics[0] = nil
				ts[0].Close()
				nics[1].Close()
				release()
				return nil, nil, "", nil, err
			}
			return fail(err)
		}
		ts[i] = &nicTransport{Transport: t, done: done}
	}
	return ts[0], ts[1], what, nil, nil
}
