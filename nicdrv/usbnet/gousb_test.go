//go:build usb && cgo

package usbnet_test

import (
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/usbnet"
)

// TestOpenUSBMissing opens a device no bus has: the error is one line that
// says what is there, or that there is no USB at all.
func TestOpenUSBMissing(t *testing.T) {
	d, err := usbnet.OpenUSB(usbnet.Selector{Bus: 255, Address: 127})
	if err == nil {
		d.Close()
		t.Fatal("opened a device at 255:127")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !(strings.Contains(msg, "no /dev/bus/usb") || strings.Contains(msg, "no USB device 255:127 among")) {
		t.Errorf("error %q: want one line saying there is no such device or no USB", msg)
	}
	t.Log(err)
}
