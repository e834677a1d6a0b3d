//go:build usb && cgo

package usbnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/gousb"
)

// USBDevice is a USB device opened through libusb (github.com/google/gousb):
// the Device the driver runs on for real hardware. It is built only with
// the usb build tag and cgo (go build -tags usb, with libusb-1.0-0-dev).
//
// Interfaces are claimed with libusb's kernel driver auto-detach on, so
// cdc_ether or cdc_ncm lets go of them, and released with it on again, so
// the kernel's driver gets them back; in between, changing an alternate
// setting re-claims the interface with auto-detach off, which does not
// wake the kernel's driver.
//
// IN transfers are kept in flight by gousb's read stream; OUT transfers
// by one single-transfer write stream each (Submit says why).
type USBDevice struct {
	ctx  *gousb.Context
	dev  *gousb.Device
	name string

	mu    sync.Mutex
	cfg   *gousb.Config
	ifs   map[int]*gousb.Interface
	order []int // interfaces in the order claimed
	outs  map[uint8]*gousb.OutEndpoint
}

var _ Device = (*USBDevice)(nil)

// OpenUSB opens the device sel names. It fails with ErrAccess when the
// process may not open the device node, and says which devices exist when
// none matches.
func OpenUSB(sel Selector) (*USBDevice, error) {
	if _, err := os.Stat("/dev/bus/usb"); err != nil {
		return nil, fmt.Errorf("usbnet: open USB device %v: no /dev/bus/usb (%v): run on a host with USB, or give the container the bus (docker run --device /dev/bus/usb)", sel, err)
	}
	ctx, err := newContext()
	if err != nil {
		return nil, fmt.Errorf("usbnet: open USB device %v: libusb: %w", sel, err)
	}
	var seen []string
	devs, err := ctx.OpenDevices(func(d *gousb.DeviceDesc) bool {
		seen = append(seen, fmt.Sprintf("%d:%d (%s:%s)", d.Bus, d.Address, d.Vendor, d.Product))
		return sel.Matches(d.Bus, d.Address, uint16(d.Vendor), uint16(d.Product))
	})
	if len(devs) == 0 {
		ctx.Close()
		if err != nil {
			node := "its node under /dev/bus/usb"
			if sel.Bus > 0 {
				node = fmt.Sprintf("/dev/bus/usb/%03d/%03d", sel.Bus, sel.Address)
			}
			return nil, fmt.Errorf("usbnet: open USB device %v (%s): %w", sel, node, mapErr(err))
		}
		return nil, fmt.Errorf("usbnet: no USB device %v among %s: check lsusb", sel, strings.Join(seen, ", "))
	}
	for _, d := range devs[1:] {
		d.Close()
	}
	d := devs[0]
	// libusb waits forever on a control transfer without a timeout; five
	// seconds is what Linux's CDC drivers allow.
	d.ControlTimeout = 5 * time.Second
	u := &USBDevice{ctx: ctx, dev: d, ifs: map[int]*gousb.Interface{}, outs: map[uint8]*gousb.OutEndpoint{},
		name: fmt.Sprintf("usb %d:%d (%s:%s)", d.Desc.Bus, d.Desc.Address, d.Desc.Vendor, d.Desc.Product)}
	return u, nil
}

// newContext is gousb.NewContext, which panics when libusb cannot start,
// returning that as an error.
func newContext() (ctx *gousb.Context, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v: is usbfs mounted at /dev/bus/usb?", r)
		}
	}()
	return gousb.NewContext(), nil
}

// mapErr turns libusb's conditions into this package's: gousb often formats
// its errors with %v, so the codes are recognised by their text too.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range []struct {
		code error
		is   error
	}{
		{gousb.ErrorAccess, ErrAccess},
		{gousb.ErrorBusy, ErrBusy},
		{gousb.ErrorNoDevice, ErrGone},
		{gousb.TransferNoDevice, ErrGone},
	} {
		if errors.Is(err, c.code) || strings.Contains(err.Error(), c.code.Error()) {
			return fmt.Errorf("%v: %w", err, c.is)
		}
	}
	return err
}

// String implements Device.
func (u *USBDevice) String() string { return u.name }

// Control implements Device.
func (u *USBDevice) Control(rt, req uint8, value, index uint16, data []byte) (int, error) {
	n, err := u.dev.Control(rt, req, value, index, data)
	return n, mapErr(err)
}

// ActiveConfig implements Device.
func (u *USBDevice) ActiveConfig() (int, error) {
	n, err := u.dev.ActiveConfigNum()
	return n, mapErr(err)
}

// Claim implements Device.
func (u *USBDevice) Claim(config int, ifaces ...int) (err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cfg != nil {
		return fmt.Errorf("configuration %d already claimed by this process: %w", u.cfg.Desc.Number, ErrBusy)
	}
	if err := u.dev.SetAutoDetach(true); err != nil {
		return mapErr(err)
	}
	defer func() { _ = u.dev.SetAutoDetach(false) }()
	cfg, err := u.dev.Config(config)
	if err != nil {
		return mapErr(err)
	}
	u.cfg = cfg
	for _, i := range ifaces {
		intf, err := cfg.Interface(i, 0)
		if err != nil {
			u.releaseLocked()
			return mapErr(err)
		}
		u.ifs[i] = intf
		u.order = append(u.order, i)
	}
	return nil
}

// SetAlt implements Device: gousb selects a setting when it claims, so the
// interface is released (its kernel driver stays detached) and claimed
// again in the new setting.
func (u *USBDevice) SetAlt(iface, alt int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	intf := u.ifs[iface]
	if intf == nil || u.cfg == nil {
		return fmt.Errorf("interface %d is not claimed", iface)
	}
	intf.Close()
	delete(u.ifs, iface)
	clear(u.outs)
	n, err := u.cfg.Interface(iface, alt)
	if err != nil {
		return mapErr(err)
	}
	u.ifs[iface] = n
	return nil
}

// Release implements Device.
func (u *USBDevice) Release() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.releaseLocked()
}

func (u *USBDevice) releaseLocked() error {
	if u.cfg == nil {
		return nil
	}
	err := u.dev.SetAutoDetach(true)
	// Last claimed first: the data interface must be free when the
	// control interface goes back, since the kernel's CDC driver, probing
	// the control interface, claims the data interface the union names.
	for k := len(u.order) - 1; k >= 0; k-- {
		if intf := u.ifs[u.order[k]]; intf != nil {
			intf.Close() // with auto-detach on, libusb re-attaches the kernel driver
		}
		delete(u.ifs, u.order[k])
	}
	u.order = u.order[:0]
	clear(u.outs)
	err = errors.Join(err, u.cfg.Close())
	u.cfg = nil
	return mapErr(errors.Join(err, u.dev.SetAutoDetach(false)))
}

// endpointOwner finds the claimed interface whose setting has endpoint ep.
func (u *USBDevice) endpointOwner(ep uint8) (*gousb.Interface, error) {
	for _, intf := range u.ifs {
		if _, ok := intf.Setting.Endpoints[gousb.EndpointAddress(ep)]; ok {
			return intf, nil
		}
	}
	return nil, fmt.Errorf("endpoint %#02x is in no claimed interface's current setting", ep)
}

// usbStream is gousb's read stream as a ReadStream.
type usbStream struct {
	s    *gousb.ReadStream
	size int
}

// ReadStream implements Device.
func (u *USBDevice) ReadStream(ep uint8, size, count int) (ReadStream, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	intf, err := u.endpointOwner(ep)
	if err != nil {
		return nil, err
	}
	in, err := intf.InEndpoint(int(ep & 0x0F))
	if err != nil {
		return nil, mapErr(err)
	}
	s, err := in.NewStream(size, count)
	if err != nil {
		return nil, mapErr(err)
	}
	return &usbStream{s: s, size: size}, nil
}

// Read implements ReadStream.
func (s *usbStream) Read(ctx context.Context, buf []byte) (int, error) {
	n, err := s.s.ReadContext(ctx, buf[:min(len(buf), s.size)])
	return n, mapErr(err)
}

// Close implements ReadStream: after gousb's Close the stream hands back
// what its transfers in flight still bring, one per Read; reading them
// with a cancelled context cancels them instead. Each Read consumes one
// transfer, so the loop ends.
func (s *usbStream) Close() error {
	_ = s.s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	buf := make([]byte, s.size)
	for range 1 << 10 {
		if _, err := s.s.ReadContext(ctx, buf); err != nil {
			return nil
		}
	}
	return errors.New("usbnet: the read stream did not stop")
}

// outEndpoint returns the OUT endpoint ep of the claimed interfaces.
func (u *USBDevice) outEndpoint(ep uint8) (*gousb.OutEndpoint, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if out := u.outs[ep]; out != nil {
		return out, nil
	}
	intf, err := u.endpointOwner(ep)
	if err != nil {
		return nil, err
	}
	out, err := intf.OutEndpoint(int(ep & 0x0F))
	if err != nil {
		return nil, mapErr(err)
	}
	u.outs[ep] = out
	return out, nil
}

// usbTransfer is one OUT transfer in flight: a gousb write stream of one
// transfer of exactly its length, which the stream's Write submitted and
// its Close waits for.
type usbTransfer struct {
	s *gousb.WriteStream
}

// Submit implements Device. gousb's synchronous WriteContext would keep
// one transfer in flight; its write stream submits a transfer and returns,
// but sends every transfer at the stream's whole size. So each transfer
// is a stream of its own, of one transfer of exactly len(buf) bytes:
// Submit allocates and submits it (libusb copies nothing: gousb copies
// buf into the transfer's C buffer), and Wait closes the stream, which
// waits for the transfer and frees it. Transfers go to usbfs, which queues
// them on the endpoint, in the order Submit is called. The zero-length
// packet after a transfer that ends on a packet boundary is a synchronous
// transfer (a stream cannot send zero bytes), so Submit waits for it, and
// for the transfers before it.
func (u *USBDevice) Submit(ctx context.Context, ep uint8, buf []byte) (Transfer, error) {
	out, err := u.outEndpoint(ep)
	if err != nil {
		return nil, err
	}
	s, err := out.NewStream(len(buf), 1)
	if err != nil {
		return nil, mapErr(err)
	}
	if _, err := s.WriteContext(ctx, buf); err != nil {
		_ = s.CloseContext(ctx)
		return nil, mapErr(err)
	}
	t := &usbTransfer{s: s}
	if mp := out.Desc.MaxPacketSize; mp > 0 && len(buf)%mp == 0 {
		if _, err := out.WriteContext(ctx, buf[:0]); err != nil {
			// The frame may be sent but not ended: report it lost.
			_, _ = t.Wait(ctx)
			return nil, mapErr(err)
		}
	}
	return t, nil
}

// Wait implements Transfer.
func (t *usbTransfer) Wait(ctx context.Context) (int, error) {
	err := t.s.CloseContext(ctx)
	return t.s.Written(), mapErr(err)
}

// SpeedMbps implements Device.
func (u *USBDevice) SpeedMbps() int {
	switch u.dev.Desc.Speed {
	case gousb.SpeedLow:
		return 1
	case gousb.SpeedFull:
		return 12
	case gousb.SpeedHigh:
		return 480
	case gousb.SpeedSuper:
		return 5000
	}
	return 0
}

// Close releases what is still claimed and closes the device and the
// libusb context. Close the NIC first.
func (u *USBDevice) Close() error {
	err := u.Release()
	err = errors.Join(err, u.dev.Close())
	return errors.Join(err, u.ctx.Close())
}
