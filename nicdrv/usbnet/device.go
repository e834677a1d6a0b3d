package usbnet

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/internal/sentinel"
)

// Device is the USB device as the driver uses it: the few operations of
// usbfs/libusb a CDC Ethernet function needs. Two implementations exist:
// the libusb one through github.com/google/gousb (OpenUSB, behind the usb
// build tag with cgo) and package usbnet/usbfake's device models, which the
// tests cable to each other. Implementations report the conditions a user
// must act on by wrapping ErrAccess, ErrBusy and ErrGone.
type Device interface {
	// String names the device for errors and Info, with its bus position
	// and IDs: "usb 3:7 (0525:a4a1)".
	String() string
	// Control performs one control transfer on endpoint 0. For an IN
	// request (requestType bit 7) it fills data and returns how many
	// bytes came; for an OUT request it sends data.
	Control(requestType, request uint8, value, index uint16, data []byte) (int, error)
	// ActiveConfig returns the active configuration's
	// bConfigurationValue.
	ActiveConfig() (int, error)
	// Claim makes config the active configuration if it is not, detaches
	// the kernel's driver from the given interfaces and claims them for
	// this process, each in alternate setting 0.
	Claim(config int, ifaces ...int) error
	// SetAlt selects an alternate setting of a claimed interface.
	SetAlt(iface, alt int) error
	// Release releases every claimed interface and gives each back to the
	// kernel driver that had it.
	Release() error
	// ReadStream starts reading IN endpoint ep (bulk or interrupt) with
	// count transfers of size bytes kept in flight.
	ReadStream(ep uint8, size, count int) (ReadStream, error)
	// Submit starts sending buf on OUT endpoint ep as one transfer and
	// returns without waiting for it to complete: buf is copied first, so
	// the caller may reuse it at once. The device receives transfers in
	// the order they were submitted, so several may be in flight; the
	// driver bounds how many (Options.OutFlight) and waits for each with
	// Transfer.Wait, oldest first. A transfer ends with a short packet:
	// when len(buf) is a multiple of the endpoint's packet size, a
	// zero-length packet follows it (an implementation may wait for that
	// one, and so for those before it, within Submit; ctx bounds that
	// wait).
	Submit(ctx context.Context, ep uint8, buf []byte) (Transfer, error)
	// SpeedMbps is the bus speed the device runs at (12, 480, 5000...),
	// the link speed the driver reports until the device says otherwise.
	SpeedMbps() int
}

// ReadStream is an IN endpoint with transfers in flight (Device.ReadStream).
type ReadStream interface {
	// Read waits for the oldest transfer to complete, copies its bytes
	// into buf (at least the stream's size) and resubmits it. One
	// transfer is one Read: transfer boundaries (an ECM frame, an NTB)
	// are kept.
	Read(ctx context.Context, buf []byte) (int, error)
	// Close cancels the transfers in flight and waits for them.
	Close() error
}

// Transfer is a bulk OUT transfer in flight (Device.Submit).
type Transfer interface {
	// Wait waits until the transfer is done and returns how many bytes
	// the device took. When ctx ends first, the transfer is cancelled
	// and Wait returns once it has stopped. Wait is called once.
	Wait(ctx context.Context) (int, error)
}

// Conditions a Device implementation reports by wrapping these, so the
// driver can say how to fix them.
var (
	// ErrAccess means the process may not open the device node
	// (/dev/bus/usb/BBB/DDD). It wraps the permission sentinel every gomx
	// package shares (xdp.ErrPermission matches it too).
	ErrAccess = fmt.Errorf("%w on the USB device node", sentinel.ErrPermission)
	// ErrBusy means another process, or a kernel driver that would not
	// let go, holds an interface. It wraps the busy sentinel every gomx
	// package shares (pci.ErrBusy and xdp.ErrBusy match it too).
	ErrBusy = fmt.Errorf("%w: interface claimed by another process", sentinel.ErrBusy)
	// ErrGone means the device was unplugged (or reset away).
	ErrGone = errors.New("USB device gone")
)
