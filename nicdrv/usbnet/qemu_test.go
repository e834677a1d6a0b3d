//go:build usb && cgo

package usbnet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/vfio"
)

// The tests in this file run gomx's USB driver on a real CDC ECM function
// (QEMU's usb-net in `make qemu-test QEMU_CONFIG=usb`) against gomx's
// e1000e driver on an 82574L bound to vfio-pci cabled to it.

// usbDeviceEnv names the USB Ethernet function the tests open (VID:PID or
// BUS:ADDR); hack/qemu sets it in the usb configuration.
const usbDeviceEnv = "GOMX_USBNET_DEVICE"

// deviceDelEnv lists the QEMU devices a test may ask the host to unplug
// (hack/qemu's DeviceDelEnv).
const deviceDelEnv = "GOMX_QEMU_DEVICE_DEL"

// framesEnv overrides how many frames TestQEMUFrames sends each way
// (100 000).
const framesEnv = "GOMX_USBNET_FRAMES"

// e1000eWant asks for one 82574L bound to vfio-pci, cabled to the USB
// function: the one named in GOMX_E1000E_DEVICES (NIC B in QEMU), or else
// the first on the bus.
var e1000eWant = nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 1,
	Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }}

// usbSelector returns the function usbDeviceEnv names. It skips without
// it, with a hint, and fails instead when GOMX_REQUIRE_QEMU names usbnet.
func usbSelector(t *testing.T) usbnet.Selector {
	t.Helper()
	s := os.Getenv(usbDeviceEnv)
	if s == "" {
		if req := os.Getenv("GOMX_REQUIRE_QEMU"); strings.Contains(req, "usbnet") {
			t.Fatalf("GOMX_REQUIRE_QEMU=%s but %s is unset", req, usbDeviceEnv)
		}
		t.Skipf("%s is unset: name a CDC ECM/NCM adapter (VID:PID or BUS:ADDR) cabled to an 82574L bound to vfio-pci, or run `make qemu-test QEMU_CONFIG=usb`", usbDeviceEnv)
	}
	sel, err := usbnet.ParseSelector(s)
	if err != nil {
		t.Fatalf("%s: %v", usbDeviceEnv, err)
	}
	return sel
}

// openUSB opens the USB device and the driver on it; the device is closed
// when the test ends, after the NIC.
func openUSB(t *testing.T, sel usbnet.Selector) (*usbnet.USBDevice, *usbnet.NIC) {
	t.Helper()
	dev, err := usbnet.OpenUSB(sel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil && !errors.Is(err, usbnet.ErrGone) {
			t.Errorf("close %v: %v", dev, err)
		}
	})
	n, err := usbnet.Open(dev, usbnet.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return dev, n
}

// qemuRig is the conformance rig of one USB function and one 82574L.
func qemuRig(t *testing.T, c nictest.Config) *nictest.Rig {
	sel := usbSelector(t)
	v := nictest.OpenVFIO(t, e1000eWant)
	if c.HeaderSplit {
		t.Skip("a USB function delivers whole frames: header split is refused at Open")
	}
	eo := e1000e.DefaultOptions()
	eo.Queues = c.Queues
	eo.Interrupts = c.Interrupts
	dev, u := openUSB(t, sel)
	r := &nictest.Rig{Faults: v.Faults()}
	r.NICs[0] = u
	e, err := e1000e.Open(v.Devices[0], eo)
	if err != nil {
		u.Close()
		t.Fatal(err)
	}
	r.NICs[1] = e
	r.Reopen = func(i int) (nicdrv.NIC, error) {
		if r.NICs[i] != nil {
			if err := r.NICs[i].Close(); err != nil {
				return nil, err
			}
			r.NICs[i] = nil
		}
		if i == 1 {
			return e1000e.Open(v.Devices[0], eo)
		}
		// Close gave the interfaces back to cdc_ether; the driver takes
		// them again on the same device, which stays open until the test
		// ends (after the suite closed the NICs).
		return usbnet.Open(dev, usbnet.DefaultOptions())
	}
	return r
}

// direction is one way of TestQEMUFrames: frames [next, end) sent from
// from to to, at most window in flight, each checked byte for byte against
// the frame nictest.Frame builds for its sequence number, in order.
type direction struct {
	from, to   nicdrv.NIC
	first      uint64
	next, want uint64
	end        uint64
	tx, rx     []*nicdrv.Buffer
	expect     []byte
}

// step sends what the window allows and checks what arrived; it reports
// whether anything moved.
func (d *direction) step(t *testing.T, window int) bool {
	moved := false
	if k := min(window-int(d.next-d.want), int(d.end-d.next), len(d.tx)); k > 0 {
		bufs := d.tx[:k]
		got, err := d.from.Pool(0).Alloc(bufs)
		if err != nil && got == 0 {
			t.Fatalf("%v: alloc: %v", d.from.MAC(), err)
		}
		bufs = bufs[:got]
		for i, b := range bufs {
			seq := d.next + uint64(i)
			nictest.Frame(b.SetLen(2048), d.to.MAC(), d.from.MAC(), seq, nictest.Size(seq))
			b.SetLen(nictest.Size(seq))
		}
		sent, err := d.from.TxBatch(0, bufs)
		if err != nil {
			t.Fatalf("%v: TxBatch: %v", d.from.MAC(), err)
		}
		if sent < len(bufs) {
			d.from.Pool(0).Free(bufs[sent:]...)
		}
		d.next += uint64(sent)
		moved = sent > 0
	}
	n, err := d.to.RxBatch(0, d.rx)
	if err != nil {
		t.Fatalf("%v: RxBatch: %v", d.to.MAC(), err)
	}
	for _, b := range d.rx[:n] {
		want := nictest.Frame(d.expect, d.to.MAC(), d.from.MAC(), d.want, nictest.Size(d.want))
		if !bytes.Equal(b.Data, want) {
			t.Fatalf("%v -> %v: frame %d: got %d bytes, want %d bytes byte-exact (first bytes % x)", d.from.MAC(), d.to.MAC(), d.want-d.first, len(b.Data), len(want), b.Data[:min(len(b.Data), 24)])
		}
		d.want++
	}
	if err := d.to.Pool(0).Free(d.rx[:n]...); err != nil {
		t.Fatal(err)
	}
	return moved || n > 0
}

// clocksource is the guest kernel's current clocksource: under TCG, tsc
// reads cost nothing, while hpet (which the kernel's watchdog falls back
// to when it finds the TSC skewed, as it may on a loaded host) makes every
// clock read, and the Go runtime reads the clock often, an exit into QEMU.
func clocksource() string {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

// TestQEMUFrames sends 100 000 frames (or GOMX_USBNET_FRAMES) of mixed
// sizes (60 to 1514 bytes) each way at once between the USB function and
// the 82574L, every frame checked byte for byte and in order, with
// progress and rate on the log.
func TestQEMUFrames(t *testing.T) {
	sel := usbSelector(t)
	v := nictest.OpenVFIO(t, e1000eWant)
	_, u := openUSB(t, sel)
	defer u.Close()
	e, err := e1000e.Open(v.Devices[0], e1000e.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, n := range []nicdrv.NIC{u, e} {
		if _, err := n.WaitLink(true, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	count := uint64(100000)
	if s := os.Getenv(framesEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			t.Fatalf("%s=%q: want a positive number of frames", framesEnv, s)
		}
		count = n
	}
	mk := func(from, to nicdrv.NIC, first uint64) *direction {
		return &direction{from: from, to: to, first: first, next: first, want: first, end: first + count,
			tx: make([]*nicdrv.Buffer, 32), rx: make([]*nicdrv.Buffer, 64), expect: make([]byte, 2048)}
	}
	ds := []*direction{mk(u, e, 0), mk(e, u, 1<<40)}
	window := min(u.Info().RxRing, u.Info().TxRing, e.Info().RxRing, e.Info().TxRing) / 2
	start, last, logged := time.Now(), time.Now(), time.Now()
	mostOut := 0 // the most bulk OUT transfers seen in flight at once
	for ds[0].want < ds[0].end || ds[1].want < ds[1].end {
		for _, d := range ds {
			if d.want < d.end && d.step(t, window) {
				last = time.Now()
			}
		}
		mostOut = max(mostOut, u.OutInFlight())
		if time.Since(last) > 20*time.Second {
			t.Fatalf("no frame moved for 20 s: USB -> e1000e %d of %d, e1000e -> USB %d of %d", ds[0].want, count, ds[1].want-ds[1].first, count)
		}
		if time.Since(logged) > 15*time.Second {
			logged = time.Now()
			t.Logf("%.0f s: USB -> e1000e %d, e1000e -> USB %d frames", time.Since(start).Seconds(), ds[0].want, ds[1].want-ds[1].first)
		}
	}
	el := time.Since(start)
	t.Logf("%d frames each way byte-exact in %.1f s (%.0f frames/s each way; up to %d bulk OUT transfers in flight; guest clocksource %s)", count, el.Seconds(), float64(count)/el.Seconds(), mostOut, clocksource())
	// The USB transmitter counts a frame when its transfer completes,
	// which the host controller may report after the frame has arrived at
	// the other end: poll, bounded, for the counters to catch up.
	var su, se nicdrv.Stats
	for deadline := time.Now().Add(20 * time.Second); ; {
		su, _ = u.Stats()
		se, _ = e.Stats()
		ok := su.TxFrames >= count && su.RxFrames >= count && se.TxFrames >= count && se.RxFrames >= count
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("statistics count fewer than %d frames each way: USB %+v, e1000e %+v", count, su, se)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQEMUConformance runs the nictest suite with the USB function as NIC 0
// and the 82574L as NIC 1. Under TCG, `make qemu-test` runs its subtests
// other than Frames (TestQEMUFrames moves as many frames, with progress on
// the log): pool exhaustion, a restart that gives the function back to the
// kernel's cdc_ether and takes it again, filters, WaitRx, attached memory.
func TestQEMUConformance(t *testing.T) {
	usbSelector(t)
	nictest.FindVFIO(t, e1000eWant)
	nictest.Run(t, qemuRig)
}

// transports opens the NIC transport on the USB function and on the
// 82574L.
func transports(t *testing.T) (usb, eth transport.Transport, dev *usbnet.USBDevice) {
	t.Helper()
	sel := usbSelector(t)
	v := nictest.OpenVFIO(t, e1000eWant)
	dev, u := openUSB(t, sel)
	e, err := e1000e.Open(v.Devices[0], e1000e.DefaultOptions())
	if err != nil {
		u.Close()
		t.Fatal(err)
	}
	if usb, err = nic.New(u, nic.Options{}); err != nil {
		u.Close()
		e.Close()
		t.Fatal(err)
	}
	if eth, err = nic.New(e, nic.Options{}); err != nil {
		usb.Close()
		e.Close()
		t.Fatal(err)
	}
	return usb, eth, dev
}

// kernelBound lists the USB interfaces the kernel's cdc_ether driver holds
// ("1-1:1.0"), from sysfs.
func kernelBound() []string {
	m, _ := filepath.Glob("/sys/bus/usb/drivers/cdc_ether/*-*:*")
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// TestQEMUKernelDriver checks, where the kernel's cdc_ether driver is
// loaded and holds the function (the QEMU guest), that opening the driver
// takes the function from cdc_ether and closing it gives the function
// back.
func TestQEMUKernelDriver(t *testing.T) {
	sel := usbSelector(t)
	before := kernelBound()
	if len(before) == 0 {
		t.Skip("cdc_ether holds no USB interface here (modprobe cdc_ether, or the adapter is not ECM)")
	}
	dev, u := openUSB(t, sel)
	if now := kernelBound(); len(now) >= len(before) {
		t.Errorf("cdc_ether still holds %v with the driver open (before: %v)", now, before)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	// cdc_ether probes the interfaces it got back on its own time; wait,
	// bounded, for it.
	for deadline := time.Now().Add(20 * time.Second); len(kernelBound()) < len(before); {
		if time.Now().After(deadline) {
			t.Fatalf("after Close cdc_ether holds %v, before Open it held %v", kernelBound(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%v: cdc_ether held %v, gave it up while the driver was open, and took it back", dev, before)
}

// TestQEMUPingPong runs an mx ping-pong between the USB function and the
// 82574L: messages of every size class, eager to rendezvous, byte-exact
// there and back.
func TestQEMUPingPong(t *testing.T) {
	tu, te, _ := transports(t)
	o := mx.DefaultBoardOptions()
	o.ResendDelay = 50 * time.Millisecond
	o.PullTimeout = 50 * time.Millisecond
	bu, err := mx.NewBoard(tu, o)
	if err != nil {
		t.Fatal(err)
	}
	defer bu.Close()
	be, err := mx.NewBoard(te, o)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	eu, err := bu.OpenEndpoint(1, 0x600D)
	if err != nil {
		t.Fatal(err)
	}
	ee, err := be.OpenEndpoint(2, 0x600D)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	toE, err := eu.Connect(ctx, be.NICID(), 2, 0x600D)
	if err != nil {
		t.Fatal(err)
	}
	toU, err := ee.Connect(ctx, bu.NICID(), 1, 0x600D)
	if err != nil {
		t.Fatal(err)
	}
	th := bu.RendezvousThreshold()
	sizes := []int{0, 1, 60, 1000, 8192, th - 1, th, th + 1, 100000, 1 << 20}
	// send posts a receive on to and sends msg from from; it returns the
	// received bytes.
	send := func(from, to *mx.Endpoint, addr mx.Addr, tag uint64, msg []byte) []byte {
		got := make([]byte, len(msg))
		rr, err := to.IRecv([][]byte{got}, tag, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := from.ISend([][]byte{msg}, addr, tag, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := rr.Wait(ctx)
		if err != nil || st.XferLength != uint32(len(msg)) {
			t.Fatalf("%d bytes, tag %#x: %v %+v", len(msg), tag, err, st)
		}
		if _, err := sr.Wait(ctx); err != nil {
			t.Fatalf("send of %d bytes: %v", len(msg), err)
		}
		return got
	}
	for i, n := range sizes {
		for round := range 4 {
			msg := make([]byte, n)
			for j := range msg {
				msg[j] = byte(j*7 + i + round)
			}
			tag := uint64(i<<8 | round)
			back := send(eu, ee, toE, tag, msg)
			if !bytes.Equal(back, msg) {
				t.Fatalf("%d bytes USB -> e1000e, round %d: not byte-exact", n, round)
			}
			pong := send(ee, eu, toU, tag, back)
			if !bytes.Equal(pong, msg) {
				t.Fatalf("%d bytes e1000e -> USB, round %d: not byte-exact", n, round)
			}
		}
	}
}

// TestQEMUUnplug asks the host to unplug the USB function (QEMU's
// device_del) while frames flow both ways: the driver's calls end with
// ErrGone, WaitRx does not hang, and Close returns.
func TestQEMUUnplug(t *testing.T) {
	sel := usbSelector(t)
	id := os.Getenv(deviceDelEnv)
	if id == "" {
		t.Skipf("%s is unset: only `make qemu-test QEMU_CONFIG=usb` can unplug the device", deviceDelEnv)
	}
	v := nictest.OpenVFIO(t, e1000eWant)
	_, u := openUSB(t, sel)
	defer u.Close()
	e, err := e1000e.Open(v.Devices[0], e1000e.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := u.WaitLink(true, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitLink(true, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	frame := func(n nicdrv.NIC, dst nicdrv.MAC, seq uint64) []*nicdrv.Buffer {
		bufs := make([]*nicdrv.Buffer, 1)
		if _, err := n.Pool(0).Alloc(bufs); err != nil {
			return nil
		}
		nictest.Frame(bufs[0].SetLen(2048), dst, n.MAC(), seq, nictest.Size(seq))
		bufs[0].SetLen(nictest.Size(seq))
		return bufs
	}
	rx := make([]*nicdrv.Buffer, 32)
	drain := func(n nicdrv.NIC) (int, error) {
		k, err := n.RxBatch(0, rx)
		if k > 0 {
			n.Pool(0).Free(rx[:k]...)
		}
		return k, err
	}
	// Traffic both ways until the USB side has received some frames, so
	// the unplug lands in a running pipe.
	var got int
	deadline := time.Now().Add(60 * time.Second)
	for seq := uint64(0); got < 200; seq++ {
		if time.Now().After(deadline) {
			t.Fatalf("only %d frames reached the USB function in 60 s", got)
		}
		if b := frame(e, u.MAC(), seq); b != nil {
			if k, _ := e.TxBatch(0, b); k == 0 {
				e.Pool(0).Free(b...)
			}
		}
		if b := frame(u, e.MAC(), seq); b != nil {
			if k, err := u.TxBatch(0, b); err != nil {
				t.Fatal(err)
			} else if k == 0 {
				u.Pool(0).Free(b...)
			}
		}
		k, err := drain(u)
		if err != nil {
			t.Fatal(err)
		}
		got += k
		drain(e)
	}
	fmt.Printf("GOMX-QEMU-DEVICE-DEL %s\n", id)
	// Keep sending and receiving until the driver reports the unplug.
	var gone error
	deadline = time.Now().Add(60 * time.Second)
	for seq := uint64(1 << 40); gone == nil; seq++ {
		if time.Now().After(deadline) {
			t.Fatal("the USB function still works 60 s after device_del: no error reported")
		}
		if b := frame(u, e.MAC(), seq); b != nil {
			if k, err := u.TxBatch(0, b); err != nil {
				gone = err
				u.Pool(0).Free(b...)
				break
			} else if k == 0 {
				u.Pool(0).Free(b...)
			}
		}
		if _, err := drain(u); err != nil {
			gone = err
		}
		if b := frame(e, u.MAC(), seq); b != nil {
			if k, _ := e.TxBatch(0, b); k == 0 {
				e.Pool(0).Free(b...)
			}
		}
		drain(e)
	}
	t.Logf("after device_del: %v", gone)
	if !errors.Is(gone, usbnet.ErrGone) {
		t.Errorf("after device_del: %v, want ErrGone", gone)
	}
	// RxBatch hands over what had arrived, then the error; a bounded loop,
	// since the ring holds at most RxRing frames.
	var rxErr error
	for range u.Info().RxRing + 1 {
		if _, rxErr = drain(u); rxErr != nil {
			break
		}
	}
	if !errors.Is(rxErr, usbnet.ErrGone) {
		t.Errorf("RxBatch after device_del and the frames before it: %v, want ErrGone", rxErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := u.WaitRx(ctx, time.Time{}, 0); !errors.Is(err, usbnet.ErrGone) {
		t.Errorf("WaitRx after device_del: %v, want ErrGone at once", err)
	}
	if _, err := u.TxBatch(0, nil); !errors.Is(err, usbnet.ErrGone) {
		t.Errorf("TxBatch after device_del: %v, want ErrGone", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- u.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close after device_del: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close after device_del did not return in 30 s")
	}
	// The e1000e is unaffected.
	if _, err := e.Stats(); err != nil {
		t.Error(err)
	}
}
