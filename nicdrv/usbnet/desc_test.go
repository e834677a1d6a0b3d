package usbnet_test

import (
	"errors"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
)

func TestParseConfigFake(t *testing.T) {
	for _, tc := range []struct {
		m     usbnet.Model
		mp    int
		proto uint8
	}{{usbnet.ECM, 512, 0}, {usbnet.NCM, 64, 1}} {
		fns, err := usbnet.ParseConfig(usbfake.ConfigDescriptor(tc.m, tc.mp, 4))
		if err != nil || len(fns) != 1 {
			t.Fatalf("%v: %v, %d functions", tc.m, err, len(fns))
		}
		f := fns[0]
		want := usbnet.Function{
			Model: tc.m, Config: 1, Control: 0, Data: 1, DataAlt: 1,
			BulkIn: usbnet.Endpoint{Address: 0x81, MaxPacket: tc.mp}, BulkOut: usbnet.Endpoint{Address: 0x02, MaxPacket: tc.mp},
			Notify: usbnet.Endpoint{Address: 0x83, MaxPacket: 16}, MACString: 3, Statistics: 0x18,
			MaxSegment: 1514, MulticastFilters: 4, CDCVersion: 0x0120,
		}
		if tc.m == usbnet.NCM {
			want.NCMVersion, want.NCMCapabilities = 0x0100, usbnet.NCMCapPacketFilter
		}
		if f != want {
			t.Errorf("%v:\n got %+v\nwant %+v", tc.m, f, want)
		}
	}
}

func TestParseMAC(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want nicdrv.MAC
		ok   bool
	}{
		{"0200000000AB", nicdrv.MAC{2, 0, 0, 0, 0, 0xAB}, true},
		{"40525400aa01", nicdrv.MAC{0x40, 0x52, 0x54, 0, 0xAA, 1}, true},
		{"0100000000AB", nicdrv.MAC{}, false}, // multicast
		{"000000000000", nicdrv.MAC{}, false},
		{"0200000000A", nicdrv.MAC{}, false},
		{"02:00:00:00:00:01", nicdrv.MAC{}, false},
		{"02000000000G", nicdrv.MAC{}, false},
	} {
		m, err := usbnet.ParseMAC(tc.s)
		if (err == nil) != tc.ok || (tc.ok && m != tc.want) {
			t.Errorf("ParseMAC(%q) = %v, %v", tc.s, m, err)
		}
		if err != nil && !errors.Is(err, usbnet.ErrBadDescriptor) {
			t.Errorf("ParseMAC(%q): %v does not wrap ErrBadDescriptor", tc.s, err)
		}
	}
}

func TestNTBWriterPlacement(t *testing.T) {
	// A device asking for datagrams at 2 mod 16 and the NDP on 32.
	w := usbnet.NewNTBWriter(4096, 3, 16, 2, 32)
	buf := make([]byte, 4096)
	w.Reset(buf)
	frames := [][]byte{make([]byte, 60), make([]byte, 61), make([]byte, 100), make([]byte, 70)}
	for i := range frames[0] {
		frames[0][i] = byte(i)
	}
	added := 0
	for _, f := range frames {
		if w.Add(f) {
			added++
		}
	}
	if added != 3 {
		t.Fatalf("added %d frames with a limit of 3", added)
	}
	ntb := w.Finish(512)
	got, err := usbnet.ParseNTB16(ntb, nil)
	if err != nil || len(got) != 3 {
		t.Fatalf("%d frames, %v", len(got), err)
	}
	for i, g := range got {
		if off := cap(buf) - cap(g); off%16 != 2 {
			t.Errorf("frame %d at offset %d, want 2 mod 16", i, off)
		}
		if len(g) != len(frames[i]) || string(g) != string(frames[i]) {
			t.Errorf("frame %d differs", i)
		}
	}
	if ndp := int(ntb[10]) | int(ntb[11])<<8; ndp%32 != 0 {
		t.Errorf("NDP at %d, want a multiple of 32", ndp)
	}
	// An NTB that would end on a packet boundary gets a byte more.
	for size := 14; size < 600; size++ {
		w.Reset(buf)
		w.Add(make([]byte, size))
		if n := len(w.Finish(64)); n%64 == 0 {
			t.Fatalf("frame of %d bytes: NTB of %d bytes ends on a packet boundary", size, n)
		}
	}
}

func TestParseNotifications(t *testing.T) {
	b := usbnet.AppendNotification(nil, usbnet.Notification{Code: usbnet.NotifyConnectionSpeedChange, Down: 425984000, Up: 425984000})
	b = usbnet.AppendNotification(b, usbnet.Notification{Code: usbnet.NotifyNetworkConnection, Value: 1})
	ns, err := usbnet.ParseNotifications(b, nil)
	if err != nil || len(ns) != 2 || ns[0].Down != 425984000 || !ns[1].Connected() {
		t.Fatalf("%+v, %v", ns, err)
	}
	for _, bad := range [][]byte{
		{0xA1, 0x00, 1, 0, 0, 0, 0},             // short header
		{0x21, 0x00, 1, 0, 0, 0, 0, 0},          // wrong request type
		{0xA1, 0x2A, 0, 0, 0, 0, 8, 0, 1, 2, 3}, // wLength past the transfer
		{0xA1, 0x2A, 0, 0, 0, 0, 2, 0, 1, 2},    // speed change of 2 bytes
	} {
		if _, err := usbnet.ParseNotifications(bad, nil); !errors.Is(err, usbnet.ErrBadNotification) {
			t.Errorf("% x: %v, want ErrBadNotification", bad, err)
		}
	}
}
