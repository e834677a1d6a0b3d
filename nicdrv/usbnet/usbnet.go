package usbnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
)

// The NIC's control path: options, finding and opening a function,
// bringing it up (NTB parameters, the pool and the rings, starting the
// pipes), the MAC address, the packet filter and statistics, the link
// state from the notification pipe, and closing. The data path (the bulk pipes, the
// RX ring, RxBatch, TxBatch, WaitRx) is in queue.go.

// Standard and class requests the driver sends.
const (
	reqGetDescriptor = 0x06

	reqSetMulticastFilters = 0x40 // SET_ETHERNET_MULTICAST_FILTERS
	reqSetPacketFilter     = 0x43 // SET_ETHERNET_PACKET_FILTER
	reqGetStatistic        = 0x44 // GET_ETHERNET_STATISTIC
	reqGetNTBParameters    = 0x80 // GET_NTB_PARAMETERS
	reqSetNTBFormat        = 0x84 // SET_NTB_FORMAT
	reqSetNTBInputSize     = 0x86 // SET_NTB_INPUT_SIZE

	rtDeviceIn = 0x80 // device to host, standard, device
	rtClassOut = 0x21 // host to device, class, interface
	rtClassIn  = 0xA1 // device to host, class, interface
)

// Packet filter bits of SET_ETHERNET_PACKET_FILTER (ECM 1.2 §6.2.4).
const (
	filterPromiscuous  = 0x01
	filterAllMulticast = 0x02
	filterDirected     = 0x04
	filterBroadcast    = 0x08
	filterMulticast    = 0x10
)

// Feature selectors of GET_ETHERNET_STATISTIC (ECM 1.2 §6.2.5).
const (
	statRcvError    = 4 // RCV_ERROR
	statRcvNoBuffer = 5 // RCV_NO_BUFFER
)

// fcs is the 4 bytes of FCS the byte counters include, as every nicdrv
// driver counts them, though a USB link carries none.
const fcs = 4

// Options configure Open.
type Options struct {
	// Function picks one of the device's CDC networking functions, in
	// the order of its configurations and interfaces (default 0).
	Function int
	// Queues must be 0 or 1: a USB function has one receive and one
	// transmit pipe.
	Queues int
	// HeaderSplit is refused with ErrNotSupported.
	HeaderSplit bool
	// RxRing is how many frames the driver holds for the caller, received
	// or ready to receive into (default 256). When all hold received
	// frames the driver stops reading the device until RxBatch takes
	// some: the device, not the driver, then drops.
	RxRing int
	// TxRing is how many frames TxBatch queues ahead of the bulk OUT
	// pipe (default 256).
	TxRing int
	// InFlight is how many bulk IN transfers are kept in flight (default
	// 4).
	InFlight int
	// OutFlight is how many bulk OUT transfers may be in flight at once
	// (default 4): each ECM frame or NCM NTB is one transfer, and the
	// next is submitted without waiting for those before it.
	OutFlight int
	// NTBSize is, for NCM, the largest NTB in either direction (default
	// 16384, lowered to what the device supports).
	NTBSize int
	// Pool is the buffer pool to use; nil makes one of PoolBuffers
	// buffers in Memory (default 4096 buffers). The pool must be mapped in
	// the DMA domain of DMA().
	Pool        *nicdrv.Pool
	PoolBuffers int
	Memory      hugepage.Options
}

// DefaultOptions returns the options Open uses for zero fields.
func DefaultOptions() Options {
	return Options{RxRing: 256, TxRing: 256, InFlight: 4, OutFlight: 4, NTBSize: 16384, PoolBuffers: 4096}
}

// Error is a failed driver operation: which device, which operation, why.
// Err wraps the nicdrv sentinels (ErrClosed, ErrTimeout...) or this
// package's (ErrNotCDC, ErrAccess...) for errors.Is.
type Error struct {
	// Dev names the device ("usb 3:7 (0525:a4a1)").
	Dev string
	// Op names the operation ("claim interfaces 0+1", "bulk IN").
	Op string
	// Err is the cause.
	Err error
}

// Error gives the device, the operation and the cause.
func (e *Error) Error() string { return "usbnet " + e.Dev + ": " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// NIC is an open CDC ECM or NCM function. It implements nicdrv.NIC.
type NIC struct {
	dev      Device
	fn       Function
	name     string
	mac      nicdrv.MAC
	opts     Options
	pool     *nicdrv.Pool
	ownPool  bool
	maxFrame int
	ntbIn    int // NCM: the NTB size the device sends at most
	ntbOut   NTBParams

	ctx      context.Context
	cancel   context.CancelFunc
	closed   atomic.Bool
	closedCh chan struct{}
	wg       sync.WaitGroup
	fault    atomic.Pointer[Error] // the pipe's error that stopped the NIC
	streams  []ReadStream

	rx  rxState
	tx  txState
	lk  linkState
	flt filterState
	st  counters
}

// counters are the driver's own statistics, and the device's at Open.
type counters struct {
	rxFrames, rxBytes, txFrames, txBytes atomic.Uint64
	rxBroadcast, rxMulticast             atomic.Uint64
	rxErrors, rxDropped                  atomic.Uint64
	rxNoBuffer, txRingFull, txRejected   atomic.Uint64
	wakeups                              atomic.Uint64
	baseNoBuffer, baseRcvError           uint32 // the device's counters at Open
}

// rxState is the receive side: buffers ready to receive into (spare) and
// received frames waiting for RxBatch (ready, a FIFO), RxRing in all.
type rxState struct {
	mu    sync.Mutex
	room  *sync.Cond // the reader waits here for a spare buffer
	spare []*nicdrv.Buffer
	ready []*nicdrv.Buffer // ring of cap RxRing
	head  int
	n     int
	kick  chan struct{} // WaitRx
}

// txState is the transmit side: frames TxBatch queued (a FIFO) and sent
// frames with attachments waiting for TxBatch to reclaim them.
type txState struct {
	mu      sync.Mutex
	work    *sync.Cond
	q       []*nicdrv.Buffer
	head, n int
	sent    []*nicdrv.Buffer
	scratch []*nicdrv.Buffer
	// inFlight counts the bulk OUT transfers submitted and not settled.
	inFlight atomic.Int32
}

// linkState is what the notifications said.
type linkState struct {
	mu      sync.Mutex
	link    nicdrv.Link
	changed chan struct{} // closed and replaced at each change
}

// filterState is the receive filter, applied in the driver as well as
// asked of the device, since devices filter imperfectly or not at all.
type filterState struct {
	mu      sync.Mutex
	promisc bool
	groups  []nicdrv.MAC
	bits    uint16
}

var _ nicdrv.NIC = (*NIC)(nil)

func (n *NIC) errorf(op string, err error) *Error { return &Error{Dev: n.name, Op: op, Err: err} }

// Open finds the CDC ECM or NCM function of dev, takes its interfaces from
// the kernel's driver, programs it and starts its pipes. The link state
// starts as up at the bus speed and then follows the device's
// notifications. Close gives the interfaces back to the kernel.
func Open(dev Device, o Options) (*NIC, error) {
	d := DefaultOptions()
	if o.RxRing == 0 {
		o.RxRing = d.RxRing
	}
	if o.TxRing == 0 {
		o.TxRing = d.TxRing
	}
	if o.InFlight == 0 {
		o.InFlight = d.InFlight
	}
	if o.OutFlight == 0 {
		o.OutFlight = d.OutFlight
	}
	if o.NTBSize == 0 {
		o.NTBSize = d.NTBSize
	}
	if o.PoolBuffers == 0 {
		o.PoolBuffers = d.PoolBuffers
	}
	n := &NIC{dev: dev, name: dev.String(), opts: o, closedCh: make(chan struct{})}
	switch {
	case o.Queues > 1:
		return nil, n.errorf("open", fmt.Errorf("%d queues: a USB function has one: %w", o.Queues, nicdrv.ErrNotSupported))
	case o.HeaderSplit:
		return nil, n.errorf("open", fmt.Errorf("header split: the device delivers whole frames: %w", nicdrv.ErrNotSupported))
	case o.RxRing < 2 || o.RxRing > 1<<16 || o.TxRing < 2 || o.TxRing > 1<<16 || o.InFlight < 1 || o.InFlight > 64 || o.OutFlight < 1 || o.OutFlight > 64:
		return nil, n.errorf("open", fmt.Errorf("RxRing %d, TxRing %d, InFlight %d, OutFlight %d: want rings of 2..65536 and 1..64 transfers in flight", o.RxRing, o.TxRing, o.InFlight, o.OutFlight))
	case o.NTBSize < 2048 || o.NTBSize > 65535:
		return nil, n.errorf("open", fmt.Errorf("NTBSize %d: want 2048..65535 (NTB16)", o.NTBSize))
	}
	fns, err := Functions(dev)
	if err != nil {
		return nil, n.errorf("read descriptors", withFix(err, dev))
	}
	if o.Function < 0 || o.Function >= len(fns) {
		return nil, n.errorf("open", fmt.Errorf("function %d of %d CDC functions", o.Function, len(fns)))
	}
	n.fn = fns[o.Function]
	n.name = fmt.Sprintf("%s %v", dev.String(), n.fn.Model)
	if n.mac, err = readMAC(dev, n.fn.MACString); err != nil {
		return nil, n.errorf("read iMACAddress", withFix(err, dev))
	}
	if err := dev.Claim(n.fn.Config, n.fn.Control, n.fn.Data); err != nil {
		return nil, n.errorf(fmt.Sprintf("claim interfaces %d+%d", n.fn.Control, n.fn.Data), withFix(err, dev))
	}
	if err := n.bringUp(); err != nil {
		_ = dev.Release()
		return nil, err
	}
	return n, nil
}

// Functions reads the device's descriptors and returns its CDC ECM and
// NCM functions, in configuration and interface order. A device with none
// fails with ErrNotCDC, naming the interfaces it has.
func Functions(dev Device) ([]Function, error) {
	b := make([]byte, 18)
	k, err := dev.Control(rtDeviceIn, reqGetDescriptor, descDevice<<8, 0, b)
	if err != nil {
		return nil, withFix(fmt.Errorf("device descriptor: %w", err), dev)
	}
	dd, err := ParseDeviceDescriptor(b[:k])
	if err != nil {
		return nil, err
	}
	var fns []Function
	var seen []string
	for i := range dd.Configs {
		hdr := make([]byte, 9)
		k, err := dev.Control(rtDeviceIn, reqGetDescriptor, descConfig<<8|uint16(i), 0, hdr)
		if err != nil {
			return nil, withFix(fmt.Errorf("configuration descriptor %d: %w", i, err), dev)
		}
		total, err := ConfigTotalLength(hdr[:k])
		if err != nil {
			return nil, err
		}
		all := make([]byte, total)
		if k, err = dev.Control(rtDeviceIn, reqGetDescriptor, descConfig<<8|uint16(i), 0, all); err != nil {
			return nil, withFix(fmt.Errorf("configuration descriptor %d: %w", i, err), dev)
		}
		if k != total {
			return nil, fmt.Errorf("configuration %d: wTotalLength %d but the device returned %d bytes: %w", i, total, k, ErrBadDescriptor)
		}
		f, err := ParseConfig(all)
		if err != nil {
			return nil, err
		}
		fns = append(fns, f...)
		seen = append(seen, describeInterfaces(all))
	}
	if len(fns) == 0 {
		return nil, fmt.Errorf("%w: device %04x:%04x has interfaces (class/subclass/protocol) %q; use an adapter that offers CDC ECM or NCM (or switch it to that mode, e.g. with usb_modeswitch)",
			ErrNotCDC, dd.Vendor, dd.Product, seen)
	}
	return fns, nil
}

// withFix adds to an error of the device the one thing a user can do.
func withFix(err error, dev Device) error {
	switch {
	case errors.Is(err, ErrAccess):
		return fmt.Errorf("%w: run as root, or give your user the device node with a udev rule (SUBSYSTEM==\"usb\", ATTR{idVendor}==..., MODE=\"0660\", GROUP=\"plugdev\")", err)
	case errors.Is(err, ErrBusy):
		return fmt.Errorf("%w: stop the process that holds %s (fuser -v /dev/bus/usb/...) and retry", err, dev)
	case errors.Is(err, ErrGone):
		return fmt.Errorf("%w: the device was unplugged; plug it back and open it again", err)
	case errors.Is(err, ErrBadDescriptor):
		return fmt.Errorf("%w: the device's firmware describes it wrongly; update the firmware or use another adapter", err)
	}
	return err
}

// readMAC reads the iMACAddress string in the device's first language.
func readMAC(dev Device, idx int) (nicdrv.MAC, error) {
	lang := uint16(0x0409)
	b := make([]byte, 255)
	if k, err := dev.Control(rtDeviceIn, reqGetDescriptor, descString<<8, 0, b); err == nil && k >= 4 && b[1] == descString {
		lang = binary.LittleEndian.Uint16(b[2:])
	}
	k, err := dev.Control(rtDeviceIn, reqGetDescriptor, descString<<8|uint16(idx), lang, b)
	if err != nil {
		return nicdrv.MAC{}, withFix(fmt.Errorf("string descriptor %d: %w", idx, err), dev)
	}
	s, err := ParseString(b[:k])
	if err != nil {
		return nicdrv.MAC{}, err
	}
	return ParseMAC(s)
}

// bringUp programs the claimed function, makes the pool and the rings and
// starts the pipes. On failure it undoes what it did (but not the claim).
func (n *NIC) bringUp() (err error) {
	f, o, dev := n.fn, n.opts, n.dev
	ctrl := uint16(f.Control)
	n.maxFrame = min(f.MaxSegment, nicdrv.BufferSize)
	rxSize := alignUp(n.maxFrame, f.BulkIn.MaxPacket)
	if f.Model == NCM {
		pb := make([]byte, 28)
		k, err := dev.Control(rtClassIn, reqGetNTBParameters, 0, ctrl, pb)
		if err != nil {
			return n.errorf("GET_NTB_PARAMETERS", err)
		}
		if n.ntbOut, err = ParseNTBParams(pb[:k]); err != nil {
			return n.errorf("GET_NTB_PARAMETERS", withFix(err, dev))
		}
		if n.ntbOut.Formats&2 != 0 {
			if _, err := dev.Control(rtClassOut, reqSetNTBFormat, 0, ctrl, nil); err != nil {
				return n.errorf("SET_NTB_FORMAT NTB16", err)
			}
		}
		n.ntbIn = min(o.NTBSize, n.ntbOut.InMaxSize)
		var size [4]byte
		binary.LittleEndian.PutUint32(size[:], uint32(n.ntbIn))
		if _, err := dev.Control(rtClassOut, reqSetNTBInputSize, 0, ctrl, size[:]); err != nil {
			return n.errorf("SET_NTB_INPUT_SIZE", err)
		}
		rxSize = alignUp(n.ntbIn, f.BulkIn.MaxPacket)
		// A frame must fit an OUT NTB on its own: header, the worst
		// placement padding, an NDP16 with one entry at its alignment.
		room := min(o.NTBSize, n.ntbOut.OutMaxSize) - nth16Len - max(n.ntbOut.OutDivisor, 4) - max(n.ntbOut.OutAlign, 4) - ndpSize(1)
		if room < 60 {
			return n.errorf("GET_NTB_PARAMETERS", withFix(fmt.Errorf("dwNtbOutMaxSize %d leaves room for frames of %d bytes: %w", n.ntbOut.OutMaxSize, room, ErrBadDescriptor), dev))
		}
		n.maxFrame = min(n.maxFrame, room)
	}
	// Setting 0 first resets the data interface (and, for NCM, is where
	// the NTB parameters had to be set); the data setting starts traffic.
	if err := dev.SetAlt(f.Data, 0); err != nil {
		return n.errorf(fmt.Sprintf("interface %d alternate setting 0", f.Data), withFix(err, dev))
	}
	if err := dev.SetAlt(f.Data, f.DataAlt); err != nil {
		return n.errorf(fmt.Sprintf("interface %d alternate setting %d", f.Data, f.DataAlt), withFix(err, dev))
	}
	n.flt.bits = filterDirected | filterBroadcast
	if err := n.programFilter(); err != nil {
		return err
	}
	n.st.baseRcvError, _ = n.statistic(statRcvError)
	n.st.baseNoBuffer, _ = n.statistic(statRcvNoBuffer)

	if o.Pool != nil {
		n.pool = o.Pool
		if _, ok := o.Pool.DMA().(*hostDMA); !ok {
			return n.errorf("pool", errors.New("the pool is not in the driver's DMA domain: make it with nicdrv.NewPool(usbnet.DMA(), ...)"))
		}
	} else {
		p, err := nicdrv.NewPool(DMA(), nicdrv.PoolOptions{Buffers: o.PoolBuffers, Memory: o.Memory})
		if err != nil {
			return n.errorf("pool", err)
		}
		n.pool, n.ownPool = p, true
	}
	defer func() {
		if err != nil {
			n.releaseBuffers()
		}
	}()
	n.rx.room = sync.NewCond(&n.rx.mu)
	n.rx.spare = make([]*nicdrv.Buffer, o.RxRing)
	n.rx.ready = make([]*nicdrv.Buffer, o.RxRing)
	n.rx.kick = make(chan struct{}, 1)
	if k, err := n.pool.Alloc(n.rx.spare); err != nil {
		n.rx.spare = n.rx.spare[:k] // given back by releaseBuffers
		return n.errorf("fill RX ring", fmt.Errorf("%w: give the pool more buffers than RxRing", err))
	}
	n.tx.work = sync.NewCond(&n.tx.mu)
	n.tx.q = make([]*nicdrv.Buffer, o.TxRing)
	n.tx.sent = make([]*nicdrv.Buffer, 0, o.TxRing)
	n.tx.scratch = make([]*nicdrv.Buffer, 0, o.TxRing)
	n.lk.link = nicdrv.Link{Up: true, SpeedMbps: dev.SpeedMbps(), FullDuplex: true}
	n.lk.changed = make(chan struct{})

	in, err := dev.ReadStream(f.BulkIn.Address, rxSize, o.InFlight)
	if err != nil {
		return n.errorf("bulk IN", withFix(err, dev))
	}
	n.streams = append(n.streams, in)
	var notify ReadStream
	// Room for a speed change and a connection in one transfer, in whole
	// packets.
	notifySize := alignUp(64, max(f.Notify.MaxPacket, 1))
	if f.Notify.Address != 0 {
		if notify, err = dev.ReadStream(f.Notify.Address, notifySize, 1); err != nil {
			_ = in.Close()
			n.streams = nil
			return n.errorf("interrupt IN", withFix(err, dev))
		}
		n.streams = append(n.streams, notify)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(3) // the receiver, the transmitter and its settler
	go n.receive(in, rxSize)
	go n.transmit()
	if notify != nil {
		n.wg.Add(1)
		go n.watchLink(notify, notifySize)
	}
	return nil
}

// statistic reads one GET_ETHERNET_STATISTIC counter the device keeps.
func (n *NIC) statistic(sel int) (uint32, bool) {
	if n.fn.Statistics&(1<<(sel-1)) == 0 {
		return 0, false
	}
	var b [4]byte
	k, err := n.dev.Control(rtClassIn, reqGetStatistic, uint16(sel), uint16(n.fn.Control), b[:])
	if err != nil || k != 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[:]), true
}

// programFilter sends the filter state to the device: the multicast list
// when the device has room for it, then the packet filter. An NCM function
// without the packet filter capability is filtered by the driver alone.
func (n *NIC) programFilter() error {
	f := n.fn
	if f.Model == NCM && f.NCMCapabilities&NCMCapPacketFilter == 0 {
		return nil
	}
	ctrl := uint16(f.Control)
	bits := n.flt.bits &^ (filterMulticast | filterAllMulticast | filterPromiscuous)
	if n.flt.promisc {
		bits |= filterPromiscuous | filterAllMulticast
	}
	if g := n.flt.groups; len(g) > 0 {
		if len(g) <= f.MulticastFilters {
			list := make([]byte, 0, 6*len(g))
			for _, m := range g {
				list = append(list, m[:]...)
			}
			if _, err := n.dev.Control(rtClassOut, reqSetMulticastFilters, uint16(len(g)), ctrl, list); err != nil {
				return n.errorf("SET_ETHERNET_MULTICAST_FILTERS", err)
			}
			bits |= filterMulticast
		} else {
			bits |= filterAllMulticast
		}
	}
	if _, err := n.dev.Control(rtClassOut, reqSetPacketFilter, uint16(bits), ctrl, nil); err != nil {
		return n.errorf(fmt.Sprintf("SET_ETHERNET_PACKET_FILTER %#02x", bits), err)
	}
	n.flt.bits = bits
	return nil
}

// fail records the error that stopped a pipe and wakes every waiter; the
// first error wins.
func (n *NIC) fail(op string, err error) {
	if n.closed.Load() {
		return
	}
	n.fault.CompareAndSwap(nil, n.errorf(op, withFix(err, n.dev)))
	n.rx.mu.Lock()
	n.rx.room.Broadcast()
	n.rx.mu.Unlock()
	select {
	case n.rx.kick <- struct{}{}:
	default:
	}
	n.lk.mu.Lock()
	n.lk.link = nicdrv.Link{}
	close(n.lk.changed)
	n.lk.changed = make(chan struct{})
	n.lk.mu.Unlock()
}

// watchLink follows the link notifications.
func (n *NIC) watchLink(s ReadStream, size int) {
	defer n.wg.Done()
	buf := make([]byte, size)
	var ns []Notification
	for {
		k, err := s.Read(n.ctx, buf)
		if err != nil {
			if n.ctx.Err() == nil {
				n.fail("interrupt IN", err)
			}
			return
		}
		ns, err = ParseNotifications(buf[:k], ns[:0])
		if err != nil {
			continue
		}
		for _, x := range ns {
			n.lk.mu.Lock()
			l := n.lk.link
			switch x.Code {
			case NotifyNetworkConnection:
				l.Up = x.Connected()
				if l.Up && l.SpeedMbps == 0 {
					l.SpeedMbps = n.dev.SpeedMbps()
				}
			case NotifyConnectionSpeedChange:
				if s := int(x.Down / 1000000); s > 0 {
					l.SpeedMbps = s
				}
			}
			l.FullDuplex = true
			if l != n.lk.link {
				n.lk.link = l
				close(n.lk.changed)
				n.lk.changed = make(chan struct{})
			}
			n.lk.mu.Unlock()
		}
	}
}

// Info implements nicdrv.NIC. Addr is zero: the device is on a USB bus,
// named in Model.
func (n *NIC) Info() nicdrv.Info {
	return nicdrv.Info{
		Driver: "usbnet", Model: n.name, Queues: 1,
		RxRing: n.opts.RxRing, TxRing: n.opts.TxRing, MaxFrame: n.maxFrame,
		// WaitRx sleeps until the receive goroutine delivers a frame.
		Interrupts: true,
		// The transfer goroutine copies every frame, attachment included,
		// into its bulk transfer.
		TxAttachCopied: true,
	}
}

// Function is the CDC function the NIC drives.
func (n *NIC) Function() Function { return n.fn }

// MAC implements nicdrv.NIC: the address of the iMACAddress string.
func (n *NIC) MAC() nicdrv.MAC { return n.mac }

// Pool implements nicdrv.NIC: the one queue's pool (nil for another
// queue).
func (n *NIC) Pool(q int) *nicdrv.Pool {
	if q != 0 {
		return nil
	}
	return n.pool
}

// check returns the error of a call on a closed or failed NIC.
func (n *NIC) check(q int, op string) error {
	if n.closed.Load() {
		return n.errorf(op, nicdrv.ErrClosed)
	}
	if q != 0 {
		return n.errorf(op, fmt.Errorf("queue %d of 1: %w", q, nicdrv.ErrBadQueue))
	}
	return nil
}

// Link implements nicdrv.NIC: the state the last notifications gave.
func (n *NIC) Link() nicdrv.Link {
	n.lk.mu.Lock()
	defer n.lk.mu.Unlock()
	return n.lk.link
}

// WaitLink implements nicdrv.NIC.
func (n *NIC) WaitLink(want bool, timeout time.Duration) (nicdrv.Link, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		n.lk.mu.Lock()
		l, ch := n.lk.link, n.lk.changed
		n.lk.mu.Unlock()
		if l.Up == want {
			return l, nil
		}
		if f := n.fault.Load(); f != nil {
			return l, f
		}
		select {
		case <-ch:
		case <-t.C:
			return l, n.errorf("WaitLink", fmt.Errorf("link %v after %v, want up=%v: %w", l, timeout, want, nicdrv.ErrTimeout))
		case <-n.closedCh:
			return l, n.errorf("WaitLink", nicdrv.ErrClosed)
		}
	}
}

// Stats implements nicdrv.NIC: the driver's counts of frames it moved,
// and, where the device keeps them (bmEthernetStatistics), its receive
// errors and frames it dropped for lack of buffers.
func (n *NIC) Stats() (nicdrv.Stats, error) {
	s := &n.st
	st := nicdrv.Stats{
		RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(),
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(),
		RxBroadcast: s.rxBroadcast.Load(), RxMulticast: s.rxMulticast.Load(),
		RxErrors: s.rxErrors.Load(), RxDropped: s.rxDropped.Load(),
		RxNoBuffer: s.rxNoBuffer.Load(), TxRingFull: s.txRingFull.Load(),
		TxRejected: s.txRejected.Load(), Interrupts: s.wakeups.Load(),
	}
	if n.closed.Load() {
		return st, n.errorf("Stats", nicdrv.ErrClosed)
	}
	if v, ok := n.statistic(statRcvNoBuffer); ok {
		st.RxMissed = uint64(v - s.baseNoBuffer)
	}
	if v, ok := n.statistic(statRcvError); ok {
		st.RxErrors += uint64(v - s.baseRcvError)
	}
	return st, nil
}

// SetPromiscuous implements nicdrv.NIC with SET_ETHERNET_PACKET_FILTER.
func (n *NIC) SetPromiscuous(on bool) error {
	if n.closed.Load() {
		return n.errorf("SetPromiscuous", nicdrv.ErrClosed)
	}
	n.flt.mu.Lock()
	defer n.flt.mu.Unlock()
	n.flt.promisc = on
	return n.programFilter()
}

// SetMulticast implements nicdrv.NIC with SET_ETHERNET_MULTICAST_FILTERS
// when the device filters that many groups, else by asking for every
// multicast frame; the driver's own filter keeps exactly the groups asked.
func (n *NIC) SetMulticast(groups []nicdrv.MAC) error {
	if n.closed.Load() {
		return n.errorf("SetMulticast", nicdrv.ErrClosed)
	}
	for _, g := range groups {
		if !g.IsMulticast() {
			return n.errorf("SetMulticast", fmt.Errorf("%v is not a group address", g))
		}
	}
	n.flt.mu.Lock()
	defer n.flt.mu.Unlock()
	n.flt.groups = append(n.flt.groups[:0], groups...)
	return n.programFilter()
}

// AddRule implements nicdrv.NIC: a USB function has one receive pipe and
// no steering, so every rule is refused with ErrNotSupported.
func (n *NIC) AddRule(r nicdrv.Rule) (nicdrv.RuleID, error) {
	return 0, n.errorf("AddRule", fmt.Errorf("rule %v: a USB CDC function has one queue and no steering: %w", r, nicdrv.ErrNotSupported))
}

// RemoveRule implements nicdrv.NIC: no rule is ever installed, so every
// ID is unknown (ErrNoRule).
func (n *NIC) RemoveRule(id nicdrv.RuleID) error {
	return n.errorf("RemoveRule", fmt.Errorf("rule %#x: %w", uint32(id), nicdrv.ErrNoRule))
}

// RuleCapacity implements nicdrv.NIC: 0 for every kind.
func (n *NIC) RuleCapacity(nicdrv.RuleKind) int { return 0 }

// Close implements nicdrv.NIC: it stops the pipes, puts the data
// interface back in setting 0 (no traffic), releases the interfaces to the
// kernel's driver and gives every buffer back. It does not close the
// Device, which may be opened again.
func (n *NIC) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(n.closedCh)
	n.cancel()
	n.rx.mu.Lock()
	n.rx.room.Broadcast()
	n.rx.mu.Unlock()
	n.tx.mu.Lock()
	n.tx.work.Broadcast()
	n.tx.mu.Unlock()
	// The pipes' goroutines see the cancelled context and leave; only
	// then are their streams closed, which a stream's Read must not race.
	n.wg.Wait()
	var errs []error
	for _, s := range n.streams {
		if err := s.Close(); err != nil && !errors.Is(err, ErrGone) {
			errs = append(errs, err)
		}
	}
	if err := n.dev.SetAlt(n.fn.Data, 0); err != nil && !errors.Is(err, ErrGone) {
		errs = append(errs, fmt.Errorf("data interface to setting 0: %w", err))
	}
	if err := n.dev.Release(); err != nil && !errors.Is(err, ErrGone) {
		errs = append(errs, fmt.Errorf("give the interfaces back to the kernel: %w", err))
	}
	errs = append(errs, n.releaseBuffers())
	if err := errors.Join(errs...); err != nil {
		return n.errorf("Close", err)
	}
	return nil
}

// releaseBuffers gives back every buffer the driver holds, and closes the
// pool it made.
func (n *NIC) releaseBuffers() error {
	if n.pool == nil {
		return nil
	}
	_ = n.pool.Free(n.rx.spare...)
	n.rx.spare = n.rx.spare[:0]
	for ; n.rx.n > 0; n.rx.n-- {
		_ = n.pool.Free(n.rx.ready[n.rx.head])
		n.rx.ready[n.rx.head] = nil
		n.rx.head = (n.rx.head + 1) % len(n.rx.ready)
	}
	for ; n.tx.n > 0; n.tx.n-- {
		_ = n.pool.Free(n.tx.q[n.tx.head])
		n.tx.q[n.tx.head] = nil
		n.tx.head = (n.tx.head + 1) % len(n.tx.q)
	}
	_ = n.pool.Free(n.tx.sent...)
	n.tx.sent = n.tx.sent[:0]
	if n.ownPool {
		return n.pool.Close()
	}
	return nil
}
