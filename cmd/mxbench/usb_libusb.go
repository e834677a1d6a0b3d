//go:build usb && cgo

package main

import "github.com/gomx-dev/gomx/nicdrv/usbnet"

// openUSB opens a USB adapter through libusb.
func openUSB(s usbnet.Selector) (usbnet.Device, func() error, error) {
	d, err := usbnet.OpenUSB(s)
	if err != nil {
		return nil, nil, err
	}
	return d, d.Close, nil
}
