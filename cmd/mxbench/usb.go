package main

import (
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/nic"
)

// usbFlags select the devices of a --transport usb run: both boards are in
// this process, each on one of two USB CDC Ethernet adapters cabled to each
// other and driven from user space by gomx's driver (package
// nicdrv/usbnet) through libusb, or on two pure-Go fake devices cabled in
// memory.
type usbFlags struct {
	devs string
}

func (u *usbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.devs, "usb", envOr("MXBENCH_USB", ""), "usb: two cabled USB CDC ECM/NCM adapters A,B, each BUS:ADDR (lsusb -s) or VID:PID (lsusb -d), e.g. 3:7,3:8 (needs an mxbench built with make build-usb); or fake / fake-ncm for two pure-Go fake devices (env MXBENCH_USB)")
}

// selectors parses --usb; nil for the fakes.
func (u *usbFlags) selectors() ([]usbnet.Selector, error) {
	if u.devs == "fake" || u.devs == "fake-ncm" {
		return nil, nil
	}
	return parsePair("--usb", u.devs, "two USB adapters A,B (BUS:ADDR or VID:PID each), or fake / fake-ncm", "adapters", usbnet.ParseSelector)
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
	if _, err := u.selectors(); err != nil {
		return usagef(cmd, "%v", err)
	}
	return nil
}

// transports opens the two adapters and a transport on each. Closing both
// transports closes the devices.
func (u *usbFlags) transports() (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	sels, err := u.selectors()
	if err != nil {
		return nil, nil, "", nil, err
	}
	var devs [2]usbnet.Device
	var closers []func() error
	release := func() error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
	if sels == nil {
		m := usbnet.ECM
		if u.devs == "fake-ncm" {
			m = usbnet.NCM
		}
		fa := usbfake.New(usbfake.Options{Model: m, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0x05, 0x01}, Address: 2})
		fb := usbfake.New(usbfake.Options{Model: m, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0x05, 0x02}, Address: 3})
		usbfake.Cable(fa, fb)
		devs[0], devs[1] = fa, fb
		what = fmt.Sprintf("usb: gomx's CDC %v driver on two fake devices (pure Go, cabled in memory)", m)
	} else {
		for i, s := range sels {
			d, closeDev, err := openUSB(s)
			if err != nil {
				release()
				return nil, nil, "", nil, fmt.Errorf("usb %v: %w", s, err)
			}
			closers = append(closers, closeDev)
			devs[i] = d
		}
		what = fmt.Sprintf("usb: gomx's CDC driver on %v <-> %v through libusb", devs[0], devs[1])
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
	for i, d := range devs {
		drv, err := usbnet.Open(d, usbnet.Options{})
		if err == nil {
			var t *nic.Transport
			if t, err = nic.New(drv, nic.Options{}); err == nil {
				ts[i] = &nicTransport{Transport: t, done: done}
				continue
			}
			drv.Close()
		}
		if i == 1 {
			ts[0].Close()
		} else {
			release()
		}
		return nil, nil, "", nil, err
	}
	if sels != nil {
		what = fmt.Sprintf("usb: gomx's CDC %v driver on %v <-> %v through libusb", ts[0].(*nicTransport).NIC().(*usbnet.NIC).Function().Model, devs[0], devs[1])
	}
	return ts[0], ts[1], what, nil, nil
}
