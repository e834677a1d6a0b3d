package usbnet_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
)

// oneLine checks that err is a single line that contains every want.
func oneLine(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	mac := nicdrv.MAC{0x02, 0, 0, 0, 0, 1}
	massStorage := []byte{9, 2, 32, 0, 1, 1, 0, 0x80, 50,
		9, 4, 0, 0, 2, 0x08, 0x06, 0x50, 0,
		7, 5, 0x81, 2, 0, 2, 0,
		7, 5, 0x02, 2, 0, 2, 0}
	lie := func(edit func(b []byte)) []byte {
		b := usbfake.ConfigDescriptor(usbnet.ECM, 512, 4)
		edit(b)
		return b
	}
	const ethAt = 9 + 9 + 5 + 5 // the Ethernet functional descriptor
	for _, tc := range []struct {
		name  string
		o     usbfake.Options
		setup func(d *usbfake.Device)
		is    error
		says  []string
	}{
		{"not CDC", usbfake.Options{Config: massStorage}, nil, usbnet.ErrNotCDC, []string{"08/06/50", "CDC ECM or NCM"}},
		{"descriptor runs past the set", usbfake.Options{Config: lie(func(b []byte) { b[ethAt] = 200 })}, nil, usbnet.ErrBadDescriptor, []string{"bLength 200", "firmware"}},
		{"wTotalLength lies", usbfake.Options{Config: lie(func(b []byte) { binary.LittleEndian.PutUint16(b[2:], 300) })}, nil, usbnet.ErrBadDescriptor, []string{"wTotalLength 300"}},
		{"bNumEndpoints lies", usbfake.Options{Config: lie(func(b []byte) { b[9+4] = 3 })}, nil, usbnet.ErrBadDescriptor, []string{"bNumEndpoints 3"}},
		{"union names no data interface", usbfake.Options{Config: lie(func(b []byte) { b[9+9+5+4] = 7 })}, nil, usbnet.ErrBadDescriptor, []string{"data interface 7"}},
		{"claimed by another process", usbfake.Options{}, func(d *usbfake.Device) { d.HoldBy("pid 4242") }, usbnet.ErrBusy, []string{"claimed by another process", "stop the process"}},
		{"no permission", usbfake.Options{}, func(d *usbfake.Device) { d.Deny(true) }, usbnet.ErrAccess, []string{"permission denied", "run as root", "udev rule"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Model, tc.o.MAC = usbnet.ECM, mac
			d := usbfake.New(tc.o)
			if tc.setup != nil {
				tc.setup(d)
			}
			n, err := usbnet.Open(d, usbnet.Options{})
			if err == nil {
				n.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v, want %v", err, tc.is)
			}
			oneLine(t, err, tc.says...)
			t.Log(err)
			if !d.KernelBound() {
				t.Error("a failed Open left the interfaces away from the kernel")
			}
		})
	}
}

func TestCloseGivesBackToKernel(t *testing.T) {
	for _, m := range []usbnet.Model{usbnet.ECM, usbnet.NCM} {
		devs := pair(m)
		n, err := usbnet.Open(devs[0], usbnet.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if devs[0].KernelBound() {
			t.Fatalf("%v: the kernel driver still has the interfaces while the NIC is open", m)
		}
		// A second opener finds the interfaces taken.
		if _, err := usbnet.Open(devs[0], usbnet.Options{}); !errors.Is(err, usbnet.ErrBusy) {
			t.Errorf("%v: second Open: %v, want ErrBusy", m, err)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		if !devs[0].KernelBound() {
			t.Errorf("%v: Close did not give the interfaces back to the kernel", m)
		}
		if _, err := n.RxBatch(0, make([]*nicdrv.Buffer, 1)); !errors.Is(err, nicdrv.ErrClosed) {
			t.Errorf("%v: RxBatch after Close: %v, want ErrClosed", m, err)
		}
	}
}

// TestUnplug pulls the device out in the middle of a stream: the driver
// reports it, in one line that says what happened, and nothing hangs.
func TestUnplug(t *testing.T) {
	for _, m := range []usbnet.Model{usbnet.ECM, usbnet.NCM} {
		t.Run(m.String(), func(t *testing.T) {
			devs := pair(m)
			nics := openPair(t, devs, usbnet.Options{})
			a, b := nics[0], nics[1]
			waiting := make(chan error, 1)
			go func() {
				_, err := b.WaitRx(context.Background(), time.Time{}, 0)
				waiting <- err
			}()
			// Frames flow, then the device goes.
			bufs := make([]*nicdrv.Buffer, 32)
			if _, err := a.Pool(0).Alloc(bufs); err != nil {
				t.Fatal(err)
			}
			for i, bf := range bufs {
				nictest.Frame(bf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), 100)
				bf.SetLen(100)
			}
			if k, err := a.TxBatch(0, bufs); k != len(bufs) || err != nil {
				t.Fatalf("TxBatch: %d, %v", k, err)
			}
			if err := <-waiting; err != nil {
				t.Fatalf("WaitRx before the unplug: %v", err)
			}
			devs[1].Unplug()
			deadline := time.Now().Add(20 * time.Second)
			var err error
			rx := make([]*nicdrv.Buffer, 64)
			for err == nil && time.Now().Before(deadline) {
				var k int
				k, err = b.RxBatch(0, rx)
				_ = b.Pool(0).Free(rx[:k]...)
			}
			if !errors.Is(err, usbnet.ErrGone) {
				t.Fatalf("RxBatch after the unplug: %v, want ErrGone", err)
			}
			oneLine(t, err, "gone", "plug it back")
			t.Log(err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := b.WaitRx(ctx, time.Time{}, 0); !errors.Is(err, usbnet.ErrGone) {
				t.Errorf("WaitRx after the unplug: %v, want ErrGone", err)
			}
			if _, err := b.TxBatch(0, nil); !errors.Is(err, usbnet.ErrGone) {
				t.Errorf("TxBatch after the unplug: %v, want ErrGone", err)
			}
			if err := b.Close(); err != nil {
				t.Errorf("Close of an unplugged NIC: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNCMPacks checks that NCM puts several frames in one transfer both
// ways: the point of NCM.
func TestNCMPacks(t *testing.T) {
	devs := pair(usbnet.NCM)
	nics := openPair(t, devs, usbnet.Options{})
	defer nics[0].Close()
	defer nics[1].Close()
	a, b := nics[0], nics[1]
	const frames = 100
	bufs := make([]*nicdrv.Buffer, frames)
	if _, err := a.Pool(0).Alloc(bufs); err != nil {
		t.Fatal(err)
	}
	for i, bf := range bufs {
		nictest.Frame(bf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), 200)
		bf.SetLen(200)
	}
	if k, err := a.TxBatch(0, bufs); k != frames || err != nil {
		t.Fatalf("TxBatch: %d, %v", k, err)
	}
	rx := make([]*nicdrv.Buffer, frames)
	got := 0
	deadline := time.Now().Add(20 * time.Second)
	for got < frames && time.Now().Before(deadline) {
		k, err := b.RxBatch(0, rx)
		if err != nil {
			t.Fatal(err)
		}
		got += k
		_ = b.Pool(0).Free(rx[:k]...)
	}
	if got != frames {
		t.Fatalf("%d of %d frames arrived", got, frames)
	}
	outX, outF := devs[0].Transfers()
	inX, inF := devs[1].HostTransfers()
	t.Logf("OUT: %d frames in %d NTBs; IN: %d frames in %d NTBs", outF, outX, inF, inX)
	if outX >= outF || inX >= inF {
		t.Errorf("NTBs carried one frame each (OUT %d/%d, IN %d/%d)", outF, outX, inF, inX)
	}
}

// TestFilterRequests checks what the driver asks of the device: the
// packet filter for promiscuous mode, the multicast list while it fits the
// device's filters and all-multicast beyond, with the driver's own filter
// still keeping exactly the groups asked for.
func TestFilterRequests(t *testing.T) {
	devs := pair(usbnet.ECM)
	nics := openPair(t, devs, usbnet.Options{})
	defer nics[0].Close()
	defer nics[1].Close()
	a, b := nics[0], nics[1]
	if got := devs[1].PacketFilter(); got != 0x0C {
		t.Errorf("packet filter after Open %#x, want directed|broadcast (0x0c)", got)
	}
	if err := b.SetPromiscuous(true); err != nil {
		t.Fatal(err)
	}
	if got := devs[1].PacketFilter(); got&0x01 == 0 {
		t.Errorf("packet filter %#x in promiscuous mode, want bit 0", got)
	}
	if err := b.SetPromiscuous(false); err != nil {
		t.Fatal(err)
	}
	groups := []nicdrv.MAC{{1, 0, 0x5E, 0, 0, 1}, {1, 0, 0x5E, 0, 0, 2}, {1, 0, 0x5E, 0, 0, 3}, {1, 0, 0x5E, 0, 0, 4}, {1, 0, 0x5E, 0, 0, 5}}
	if err := b.SetMulticast(groups[:4]); err != nil {
		t.Fatal(err)
	}
	if got, list := devs[1].PacketFilter(), devs[1].Groups(); got&0x10 == 0 || len(list) != 4 {
		t.Errorf("4 groups on a device filtering 4: filter %#x, list %v; want the multicast bit and the list", got, list)
	}
	if err := b.SetMulticast(groups[:3]); err != nil {
		t.Fatal(err)
	}
	// Five groups: more than the device filters, so it passes all
	// multicast, and the driver drops the groups not asked for.
	if err := b.SetMulticast(groups); err != nil {
		t.Fatal(err)
	}
	if got := devs[1].PacketFilter(); got&0x02 == 0 {
		t.Errorf("5 groups on a device filtering 4: filter %#x, want all-multicast", got)
	}
	send := func(dst nicdrv.MAC, seq uint64) {
		bf, err := a.Pool(0).Get()
		if err != nil {
			t.Fatal(err)
		}
		nictest.Frame(bf.SetLen(2048), dst, a.MAC(), seq, 64)
		bf.SetLen(64)
		if k, err := a.TxBatch(0, []*nicdrv.Buffer{bf}); k != 1 || err != nil {
			t.Fatalf("TxBatch: %d, %v", k, err)
		}
	}
	send(nicdrv.MAC{1, 0, 0x5E, 0, 0, 9}, 1) // a group not asked for
	send(groups[4], 2)
	rx := make([]*nicdrv.Buffer, 4)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		k, err := b.RxBatch(0, rx)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			continue
		}
		if seq := binary.BigEndian.Uint64(rx[0].Data[14:]); seq != 2 {
			t.Errorf("frame %d arrived first: the group not asked for passed the driver's filter", seq)
		}
		_ = b.Pool(0).Free(rx[:k]...)
		return
	}
	t.Fatal("the subscribed group's frame did not arrive")
}

// TestStatsDeviceCounters checks that frames the device dropped because
// the host did not read them show up as RxMissed.
func TestStatsDeviceCounters(t *testing.T) {
	a := usbfake.New(usbfake.Options{Model: usbnet.ECM, MAC: nicdrv.MAC{2, 0, 0, 0, 0, 1}, Queue: 4})
	b := usbfake.New(usbfake.Options{Model: usbnet.ECM, MAC: nicdrv.MAC{2, 0, 0, 0, 0, 2}, Queue: 4})
	usbfake.Cable(a, b)
	na, err := usbnet.Open(a, usbnet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer na.Close()
	nb, err := usbnet.Open(b, usbnet.Options{RxRing: 2, InFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	bufs := make([]*nicdrv.Buffer, 64)
	if _, err := na.Pool(0).Alloc(bufs); err != nil {
		t.Fatal(err)
	}
	for i, bf := range bufs {
		nictest.Frame(bf.SetLen(2048), nb.MAC(), na.MAC(), uint64(i), 100)
		bf.SetLen(100)
	}
	if k, err := na.TxBatch(0, bufs); k != len(bufs) || err != nil {
		t.Fatalf("TxBatch: %d, %v", k, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.Dropped() == 0 && time.Now().Before(deadline) {
		na.TxBatch(0, nil)
	}
	// The device may still be dropping the last frames while Stats asks
	// it: compare a reading taken while its count stood still.
	for {
		before := uint64(b.Dropped())
		st, err := nb.Stats()
		if err != nil {
			t.Fatal(err)
		}
		after := uint64(b.Dropped())
		if before == after && st.RxMissed != 0 && st.RxMissed == after {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RxMissed %d, the device dropped %d (%d before the reading)", st.RxMissed, after, before)
		}
		na.TxBatch(0, nil)
	}
}

// TestOpenPoolTooSmall: a pool smaller than the RX ring fails Open, says
// so, and gives back the buffers it took.
func TestOpenPoolTooSmall(t *testing.T) {
	d := usbfake.New(usbfake.Options{Model: usbnet.NCM, MAC: nicdrv.MAC{2, 0, 0, 0, 0, 1}})
	p, err := nicdrv.NewPool(usbnet.DMA(), nicdrv.PoolOptions{Buffers: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = usbnet.Open(d, usbnet.Options{Pool: p, RxRing: 16})
	if !errors.Is(err, nicdrv.ErrPoolExhausted) {
		t.Fatalf("Open with 8 buffers for a ring of 16: %v, want ErrPoolExhausted", err)
	}
	oneLine(t, err, "more buffers than RxRing")
	if p.Available() != 8 {
		t.Errorf("%d of 8 buffers back in the pool after a failed Open", p.Available())
	}
	if !d.KernelBound() {
		t.Error("a failed Open left the interfaces away from the kernel")
	}
}
