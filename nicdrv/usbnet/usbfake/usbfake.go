// Package usbfake models USB CDC Ethernet devices in pure Go, for the tests
// of package usbnet: an ECM device and an NCM device that implement
// usbnet.Device and can be cabled to each other, so the driver runs its
// whole protocol (descriptors, interface claims, alternate settings, class
// requests, bulk frames or NTBs, link notifications) with no hardware and
// no cgo.
//
// A Device behaves as a conforming device does, and records what a
// conforming device would refuse (a transfer before the data interface is
// in its data setting, NTB parameters set while traffic runs, a request to
// an unclaimed interface, an NTB that lies about its lengths) as
// violations, which Check reports. It filters received frames by the packet
// filter and multicast list the host set, drops frames when the host does
// not read them fast enough (counted as RCV_NO_BUFFER), and can be
// unplugged, denied to the process, or held by another process, to test the
// driver's errors.
package usbfake

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
)

// Endpoint addresses of the modelled function.
const (
	EPBulkIn  = 0x81
	EPBulkOut = 0x02
	EPNotify  = 0x83
)

const (
	ifControl = 0
	ifData    = 1
	macString = 3
)

// Options configure a Device.
type Options struct {
	// Model is usbnet.ECM or usbnet.NCM.
	Model usbnet.Model
	// MAC is the address the iMACAddress string gives.
	MAC nicdrv.MAC
	// Vendor and Product are the IDs (default 0x0525:0xa4a1).
	Vendor, Product uint16
	// Bus and Address place the device ("usb 1:Address").
	Bus, Address int
	// MaxPacket is the bulk endpoints' packet size (default 512).
	MaxPacket int
	// MulticastFilters is wNumberMCFilters (default 4).
	MulticastFilters int
	// Queue is how many received frames the device holds for the host
	// before it drops (default 2048).
	Queue int
	// NTBInMax and NTBOutMax are NCM's dwNtbInMaxSize and dwNtbOutMaxSize
	// (default 32768 and 16384); OutDivisor is wNdpOutDivisor (default 4).
	NTBInMax, NTBOutMax, OutDivisor int
	// Config, when set, replaces the configuration descriptor set the
	// device returns (to model a device that is not CDC, or lies).
	Config []byte
}

// Device is a modelled CDC ECM or NCM device. It implements usbnet.Device.
type Device struct {
	o      Options
	config []byte
	device []byte

	mu                  sync.Mutex
	cond                *sync.Cond
	peer                *Device
	gone                bool
	denied              bool
	heldBy              string
	claimed             bool
	kernel              bool // the kernel's driver has the interfaces
	alt                 int  // data interface setting
	link                bool
	filter              uint16
	groups              []nicdrv.MAC
	ntbIn               int
	toHost              [][]byte
	notes               [][]byte
	noBuffer            uint32
	inFrames            uint64 // frames the host sent
	inXfers             uint64 // bulk OUT transfers the host sent
	outFrames, outXfers uint64 // frames and bulk IN transfers to the host
	viol                []string
	claims              int
	pending             []*outXfer // bulk OUT transfers in flight
	maxPending          int
	holdOut, draining   bool
}

// New makes a device; it starts bound to the kernel's driver, link up.
func New(o Options) *Device {
	if o.Vendor == 0 && o.Product == 0 {
		o.Vendor, o.Product = 0x0525, 0xa4a1
	}
	if o.MaxPacket == 0 {
		o.MaxPacket = 512
	}
	if o.MulticastFilters == 0 {
		o.MulticastFilters = 4
	}
	if o.Queue == 0 {
		o.Queue = 2048
	}
	if o.NTBInMax == 0 {
		o.NTBInMax = 32768
	}
	if o.NTBOutMax == 0 {
		o.NTBOutMax = 16384
	}
	if o.OutDivisor == 0 {
		o.OutDivisor = 4
	}
	if o.Bus == 0 {
		o.Bus = 1
	}
	d := &Device{o: o, kernel: true, link: true, ntbIn: o.NTBInMax}
	d.cond = sync.NewCond(&d.mu)
	d.device = deviceDescriptor(o)
	d.config = o.Config
	if d.config == nil {
		d.config = ConfigDescriptor(o.Model, o.MaxPacket, o.MulticastFilters)
	}
	return d
}

// Cable connects two devices: what one sends the other receives.
func Cable(a, b *Device) {
	a.mu.Lock()
	a.peer = b
	a.mu.Unlock()
	b.mu.Lock()
	b.peer = a
	b.mu.Unlock()
}

func deviceDescriptor(o Options) []byte {
	b := []byte{18, 0x01, 0x00, 0x02, 0x02, 0x00, 0x00, 64, 0, 0, 0, 0, 0x00, 0x01, 1, 2, 0, 1}
	binary.LittleEndian.PutUint16(b[8:], o.Vendor)
	binary.LittleEndian.PutUint16(b[10:], o.Product)
	return b
}

// ConfigDescriptor builds the configuration descriptor set of a CDC ECM or
// NCM function: a communications interface with its header, union,
// Ethernet (and NCM) functional descriptors and an interrupt endpoint, and
// a data interface whose setting 1 has the bulk endpoints.
func ConfigDescriptor(m usbnet.Model, maxPacket, mcFilters int) []byte {
	sub, proto := byte(0x06), byte(0)
	if m == usbnet.NCM {
		sub, proto = 0x0D, 1
	}
	b := []byte{9, 0x02, 0, 0, 2, 1, 0, 0x80, 50}
	b = append(b, 9, 0x04, ifControl, 0, 1, 0x02, sub, 0, 0)
	b = append(b, 5, 0x24, 0x00, 0x20, 0x01)
	b = append(b, 5, 0x24, 0x06, ifControl, ifData)
	eth := []byte{13, 0x24, 0x0F, macString, 0x18, 0, 0, 0, 0xEA, 0x05, 0, 0, 0}
	// bmEthernetStatistics: RCV_ERROR and RCV_NO_BUFFER (bits 3, 4).
	binary.LittleEndian.PutUint16(eth[10:], uint16(mcFilters))
	b = append(b, eth...)
	if m == usbnet.NCM {
		b = append(b, 6, 0x24, 0x1A, 0x00, 0x01, usbnet.NCMCapPacketFilter)
	}
	b = append(b, 7, 0x05, EPNotify, 0x03, 16, 0, 9)
	b = append(b, 9, 0x04, ifData, 0, 0, 0x0A, 0, proto, 0)
	b = append(b, 9, 0x04, ifData, 1, 2, 0x0A, 0, proto, 0)
	b = append(b, 7, 0x05, EPBulkIn, 0x02, byte(maxPacket), byte(maxPacket>>8), 0)
	b = append(b, 7, 0x05, EPBulkOut, 0x02, byte(maxPacket), byte(maxPacket>>8), 0)
	binary.LittleEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// String implements usbnet.Device.
func (d *Device) String() string {
	return fmt.Sprintf("usb %d:%d (%04x:%04x)", d.o.Bus, d.o.Address, d.o.Vendor, d.o.Product)
}

// SpeedMbps implements usbnet.Device: high speed.
func (d *Device) SpeedMbps() int { return 480 }

// errStall is a request the device refuses.
var errStall = errors.New("pipe stalled (request refused)")

func (d *Device) violate(format string, args ...any) {
	if len(d.viol) < 100 {
		d.viol = append(d.viol, fmt.Sprintf(format, args...))
	}
}

// Control implements usbnet.Device.
func (d *Device) Control(rt, req uint8, value, index uint16, data []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return 0, usbnet.ErrGone
	}
	if d.denied {
		return 0, usbnet.ErrAccess
	}
	if rt == 0x80 && req == 0x06 {
		var desc []byte
		switch value >> 8 {
		case 1:
			desc = d.device
		case 2:
			if value&0xFF != 0 {
				return 0, errStall
			}
			desc = d.config
		case 3:
			switch value & 0xFF {
			case 0:
				desc = []byte{4, 3, 0x09, 0x04}
			case macString:
				desc = stringDescriptor(fmt.Sprintf("%02X%02X%02X%02X%02X%02X", d.o.MAC[0], d.o.MAC[1], d.o.MAC[2], d.o.MAC[3], d.o.MAC[4], d.o.MAC[5]))
			default:
				return 0, errStall
			}
		default:
			return 0, errStall
		}
		return copy(data, desc), nil
	}
	if rt&0x60 != 0x20 || rt&0x1F != 1 || index != ifControl {
		return 0, errStall
	}
	if !d.claimed {
		d.violate("class request %#02x to an interface the host has not claimed", req)
		return 0, errStall
	}
	switch req {
	case 0x43: // SET_ETHERNET_PACKET_FILTER
		d.filter = value
		return 0, nil
	case 0x40: // SET_ETHERNET_MULTICAST_FILTERS
		if int(value) > d.o.MulticastFilters || len(data) != 6*int(value) {
			d.violate("SET_ETHERNET_MULTICAST_FILTERS of %d addresses in %d bytes, the device filters %d", value, len(data), d.o.MulticastFilters)
			return 0, errStall
		}
		d.groups = d.groups[:0]
		for i := 0; i+6 <= len(data); i += 6 {
			d.groups = append(d.groups, nicdrv.MAC(data[i:i+6]))
		}
		return 0, nil
	case 0x44: // GET_ETHERNET_STATISTIC
		var v uint32
		switch value {
		case 4:
		case 5:
			v = d.noBuffer
		default:
			return 0, errStall
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], v)
		return copy(data, b[:]), nil
	}
	if d.o.Model != usbnet.NCM {
		return 0, errStall
	}
	switch req {
	case 0x80: // GET_NTB_PARAMETERS
		b := make([]byte, 28)
		binary.LittleEndian.PutUint16(b[0:], 28)
		binary.LittleEndian.PutUint16(b[2:], 1)
		binary.LittleEndian.PutUint32(b[4:], uint32(d.o.NTBInMax))
		binary.LittleEndian.PutUint16(b[8:], 4)
		binary.LittleEndian.PutUint16(b[12:], 4)
		binary.LittleEndian.PutUint32(b[16:], uint32(d.o.NTBOutMax))
		binary.LittleEndian.PutUint16(b[20:], uint16(d.o.OutDivisor))
		binary.LittleEndian.PutUint16(b[22:], 0)
		binary.LittleEndian.PutUint16(b[24:], 4)
		return copy(data, b), nil
	case 0x86: // SET_NTB_INPUT_SIZE
		if d.alt != 0 {
			d.violate("SET_NTB_INPUT_SIZE with the data interface in setting %d (NCM 1.0 allows it only in setting 0)", d.alt)
		}
		if len(data) < 4 {
			return 0, errStall
		}
		v := int(binary.LittleEndian.Uint32(data))
		if v < 2048 || v > d.o.NTBInMax {
			d.violate("SET_NTB_INPUT_SIZE %d outside 2048..%d", v, d.o.NTBInMax)
			return 0, errStall
		}
		d.ntbIn = v
		return 0, nil
	}
	return 0, errStall
}

func stringDescriptor(s string) []byte {
	b := []byte{byte(2 + 2*len(s)), 3}
	for _, c := range s {
		b = binary.LittleEndian.AppendUint16(b, uint16(c))
	}
	return b
}

// ActiveConfig implements usbnet.Device.
func (d *Device) ActiveConfig() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return 0, usbnet.ErrGone
	}
	return 1, nil
}

// Claim implements usbnet.Device.
func (d *Device) Claim(config int, ifaces ...int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.gone:
		return usbnet.ErrGone
	case d.denied:
		return fmt.Errorf("open /dev/bus/usb/%03d/%03d: %w", d.o.Bus, d.o.Address, usbnet.ErrAccess)
	case d.heldBy != "":
		return fmt.Errorf("held by %s: %w", d.heldBy, usbnet.ErrBusy)
	case d.claimed:
		return fmt.Errorf("already claimed: %w", usbnet.ErrBusy)
	case config != 1:
		return fmt.Errorf("configuration %d: %w", config, errStall)
	}
	d.claimed, d.kernel, d.alt = true, false, 0
	d.claims++
	return nil
}

// SetAlt implements usbnet.Device. Selecting the data setting makes the
// device report its link (a speed change, then the connection), as ECM
// devices do; setting 0 flushes its queues.
func (d *Device) SetAlt(iface, alt int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return usbnet.ErrGone
	}
	if !d.claimed {
		d.violate("SetAlt(%d, %d) on an unclaimed interface", iface, alt)
		return errStall
	}
	if iface != ifData || alt > 1 {
		return errStall
	}
	d.alt = alt
	d.toHost = d.toHost[:0]
	d.notes = d.notes[:0]
	if alt == 1 {
		d.notifyLink()
	}
	d.cond.Broadcast()
	return nil
}

// notifyLink queues the link notifications, each its own interrupt
// transfer: a speed change when the link is up, then the connection.
func (d *Device) notifyLink() {
	if d.link {
		d.notes = append(d.notes, usbnet.AppendNotification(nil, usbnet.Notification{Code: usbnet.NotifyConnectionSpeedChange, Interface: ifControl, Down: 1e9, Up: 1e9}))
	}
	d.notes = append(d.notes, usbnet.AppendNotification(nil, usbnet.Notification{Code: usbnet.NotifyNetworkConnection, Value: b2u(d.link), Interface: ifControl}))
	d.cond.Broadcast()
}

func b2u(v bool) uint16 {
	if v {
		return 1
	}
	return 0
}

// Release implements usbnet.Device: the interfaces go back to the kernel.
func (d *Device) Release() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return usbnet.ErrGone
	}
	if !d.claimed {
		return errors.New("release: nothing claimed")
	}
	d.claimed, d.kernel, d.alt = false, true, 0
	d.filter, d.groups = 0, d.groups[:0]
	d.cond.Broadcast()
	return nil
}

// stream is a fake ReadStream.
type stream struct {
	d      *Device
	ep     uint8
	size   int
	closed bool
	w      *usbnet.NTBWriter
}

// ReadStream implements usbnet.Device.
func (d *Device) ReadStream(ep uint8, size, count int) (usbnet.ReadStream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return nil, usbnet.ErrGone
	}
	if !d.claimed || (ep != EPBulkIn && ep != EPNotify) || count < 1 {
		d.violate("ReadStream(%#02x, %d, %d) on an unclaimed interface or a wrong endpoint", ep, size, count)
		return nil, errStall
	}
	if size%d.o.MaxPacket != 0 && ep == EPBulkIn {
		d.violate("bulk IN transfers of %d bytes, not a multiple of the packet size %d (a babble would overflow them)", size, d.o.MaxPacket)
	}
	s := &stream{d: d, ep: ep, size: size}
	if d.o.Model == usbnet.NCM && ep == EPBulkIn {
		s.w = usbnet.NewNTBWriter(d.ntbIn, 0, 4, 0, 4)
	}
	return s, nil
}

// Read implements usbnet.ReadStream.
func (s *stream) Read(ctx context.Context, buf []byte) (int, error) {
	d := s.d
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		switch {
		case d.gone:
			return 0, usbnet.ErrGone
		case s.closed:
			return 0, errors.New("stream closed")
		case ctx.Err() != nil:
			return 0, ctx.Err()
		}
		if s.ep == EPNotify && len(d.notes) > 0 {
			if len(buf) < len(d.notes[0]) {
				d.violate("interrupt IN buffer of %d bytes for a notification of %d", len(buf), len(d.notes[0]))
			}
			n := copy(buf, d.notes[0])
			d.notes = d.notes[1:]
			return n, nil
		}
		if s.ep == EPBulkIn && len(d.toHost) > 0 && d.alt == 1 {
			if s.w == nil {
				fr := d.toHost[0]
				d.toHost = d.toHost[1:]
				if len(fr) > len(buf) {
					d.violate("bulk IN buffer of %d bytes for a frame of %d", len(buf), len(fr))
					return 0, errors.New("babble: transfer overflow")
				}
				d.outXfers++
				d.outFrames++
				return copy(buf, fr), nil
			}
			s.w.Reset(buf[:min(len(buf), d.ntbIn)])
			k := 0
			for k < len(d.toHost) && s.w.Add(d.toHost[k]) {
				k++
			}
			d.toHost = d.toHost[k:]
			d.outXfers++
			d.outFrames += uint64(k)
			return len(s.w.Finish(d.o.MaxPacket)), nil
		}
		d.cond.Wait()
	}
}

// Close implements usbnet.ReadStream.
func (s *stream) Close() error {
	s.d.mu.Lock()
	s.closed = true
	s.d.cond.Broadcast()
	s.d.mu.Unlock()
	return nil
}

// outXfer is a bulk OUT transfer the host submitted: its bytes, and done,
// closed once the device took it (n bytes) or refused it (err).
type outXfer struct {
	buf  []byte
	done chan struct{}
	n    int
	err  error
}

// Submit implements usbnet.Device: the host sends one ECM frame or one
// NTB. The device takes transfers in the order submitted; while HoldOut
// holds the pipe they wait, in flight, as behind a device that NAKs.
func (d *Device) Submit(ctx context.Context, ep uint8, buf []byte) (usbnet.Transfer, error) {
	d.mu.Lock()
	switch {
	case d.gone:
		d.mu.Unlock()
		return nil, usbnet.ErrGone
	case ep != EPBulkOut || !d.claimed || d.alt != 1:
		d.violate("bulk OUT to %#02x with the data interface in setting %d (claimed %v)", ep, d.alt, d.claimed)
		d.mu.Unlock()
		return nil, errStall
	}
	x := &outXfer{buf: append([]byte(nil), buf...), done: make(chan struct{})}
	d.pending = append(d.pending, x)
	d.maxPending = max(d.maxPending, len(d.pending))
	d.mu.Unlock()
	d.drainOut()
	return &transfer{d: d, x: x}, nil
}

// drainOut takes the pending OUT transfers, oldest first, unless the pipe
// is held; one goroutine at a time takes them, so frames keep their order.
func (d *Device) drainOut() {
	d.mu.Lock()
	if d.draining {
		d.mu.Unlock()
		return
	}
	d.draining = true
	for len(d.pending) > 0 && !d.holdOut {
		x := d.pending[0]
		d.pending = d.pending[1:]
		if d.gone {
			x.err = usbnet.ErrGone
			close(x.done)
			continue
		}
		frames := d.takeOut(x.buf)
		peer, link := d.peer, d.link
		d.mu.Unlock()
		if link && peer != nil {
			for _, f := range frames {
				peer.fromWire(f)
			}
		}
		x.n = len(x.buf)
		close(x.done)
		d.mu.Lock()
	}
	d.draining = false
	d.mu.Unlock()
}

// takeOut checks one OUT transfer and returns its frames. d.mu is held.
func (d *Device) takeOut(buf []byte) [][]byte {
	var frames [][]byte
	if d.o.Model == usbnet.NCM {
		var err error
		if len(buf) > d.o.NTBOutMax {
			d.violate("NTB of %d bytes, dwNtbOutMaxSize %d", len(buf), d.o.NTBOutMax)
		}
		if frames, err = usbnet.ParseNTB16(buf, nil); err != nil {
			d.violate("host sent a bad NTB: %v", err)
		}
		for _, f := range frames {
			off := cap(buf) - cap(f)
			if off%d.o.OutDivisor != 0 {
				d.violate("datagram at offset %d, wNdpOutDivisor %d", off, d.o.OutDivisor)
			}
		}
	} else {
		if len(buf) < 14 || len(buf) > 1514 {
			d.violate("ECM frame of %d bytes", len(buf))
		} else {
			frames = [][]byte{buf}
		}
	}
	d.inFrames += uint64(len(frames))
	d.inXfers++
	return frames
}

// transfer is a fake usbnet.Transfer.
type transfer struct {
	d *Device
	x *outXfer
}

// Wait implements usbnet.Transfer. A transfer cancelled while it still
// waits in the device's queue is taken out of it.
func (t *transfer) Wait(ctx context.Context) (int, error) {
	select {
	case <-t.x.done:
		return t.x.n, t.x.err
	case <-ctx.Done():
	}
	d := t.d
	d.mu.Lock()
	for i, x := range d.pending {
		if x == t.x {
			d.pending = append(d.pending[:i], d.pending[i+1:]...)
			x.err = errors.New("transfer cancelled")
			close(x.done)
			break
		}
	}
	d.mu.Unlock()
	<-t.x.done
	return t.x.n, t.x.err
}

// HoldOut holds (true) the bulk OUT pipe: transfers the host submits stay
// in flight, as behind a device that NAKs, until HoldOut(false) takes them
// in order.
func (d *Device) HoldOut(hold bool) {
	d.mu.Lock()
	d.holdOut = hold
	d.mu.Unlock()
	if !hold {
		d.drainOut()
	}
}

// OutPending is how many bulk OUT transfers are in flight at the device
// now, and the most there have been at once.
func (d *Device) OutPending() (now, most int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending), d.maxPending
}

// fromWire takes a frame from the cable, filters it as the host asked and
// queues it for the host.
func (d *Device) fromWire(f []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone || !d.claimed || d.alt != 1 || !d.link || !d.accepts(f) {
		return
	}
	if len(d.toHost) >= d.o.Queue {
		d.noBuffer++
		return
	}
	d.toHost = append(d.toHost, append([]byte(nil), f...))
	d.cond.Broadcast()
}

func (d *Device) accepts(f []byte) bool {
	dst := nicdrv.MAC(f[0:6])
	switch {
	case d.filter&0x01 != 0:
		return true
	case dst == d.o.MAC:
		return d.filter&0x04 != 0
	case dst == nicdrv.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}:
		return d.filter&0x08 != 0
	case dst.IsMulticast():
		if d.filter&0x02 != 0 {
			return true
		}
		if d.filter&0x10 != 0 {
			for _, g := range d.groups {
				if g == dst {
					return true
				}
			}
		}
	}
	return false
}

// SetLink plugs (true) or pulls (false) the cable at this device: both
// ends notify their hosts.
func (d *Device) SetLink(up bool) {
	for _, x := range []*Device{d, d.peerOf()} {
		if x == nil {
			continue
		}
		x.mu.Lock()
		x.link = up
		if x.alt == 1 {
			x.notifyLink()
		}
		x.mu.Unlock()
	}
}

func (d *Device) peerOf() *Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peer
}

// Unplug removes the device: every call and every read in progress fails
// with usbnet.ErrGone.
func (d *Device) Unplug() {
	d.mu.Lock()
	d.gone = true
	for _, x := range d.pending {
		x.err = usbnet.ErrGone
		close(x.done)
	}
	d.pending = nil
	d.cond.Broadcast()
	d.mu.Unlock()
}

// Deny makes the device node unreadable to the process (ErrAccess).
func (d *Device) Deny(denied bool) {
	d.mu.Lock()
	d.denied = denied
	d.mu.Unlock()
}

// HoldBy makes another process hold the interfaces ("" lets go).
func (d *Device) HoldBy(who string) {
	d.mu.Lock()
	d.heldBy = who
	d.mu.Unlock()
}

// KernelBound tells whether the kernel's driver has the interfaces.
func (d *Device) KernelBound() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.kernel
}

// Transfers is how many bulk OUT transfers the host sent and how many
// frames they held.
func (d *Device) Transfers() (xfers, frames uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inXfers, d.inFrames
}

// HostTransfers is how many bulk IN transfers the device gave the host and
// how many frames they held.
func (d *Device) HostTransfers() (xfers, frames uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outXfers, d.outFrames
}

// PacketFilter is the last SET_ETHERNET_PACKET_FILTER the host sent.
func (d *Device) PacketFilter() uint16 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.filter
}

// Groups is the multicast list the host set.
func (d *Device) Groups() []nicdrv.MAC {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]nicdrv.MAC(nil), d.groups...)
}

// Dropped is how many frames the device dropped because the host did not
// read them.
func (d *Device) Dropped() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.noBuffer
}

// Check reports the protocol violations the device saw.
func (d *Device) Check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.viol) == 0 {
		return nil
	}
	return fmt.Errorf("%v: %d protocol violations, the first: %s", d, len(d.viol), d.viol[0])
}
