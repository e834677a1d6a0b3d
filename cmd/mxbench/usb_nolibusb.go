//go:build !(usb && cgo)

package main

import (
	"errors"

	"github.com/gomx-dev/gomx/nicdrv/usbnet"
)

// openUSB is the stand-in of a build without libusb.
func openUSB(usbnet.Selector) (usbnet.Device, func() error, error) {
	return nil, nil, errors.New("this mxbench was built without libusb: build it with make build-usb (go build -tags usb, cgo and libusb-1.0-0-dev), or use --usb fake")
}
