package nic_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/transport/transporttest"
	"github.com/gomx-dev/gomx/vfio"
)

// vfioWant asks for two cabled 82574Ls bound to vfio-pci.
var vfioWant = nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 2,
	Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }}

// vfioPair opens transports on two cabled 82574Ls bound to vfio-pci (named
// in GOMX_E1000E_DEVICES, or the first two found: QEMU's pair in `make
// qemu-test`). It skips without them, and fails when GOMX_REQUIRE_QEMU names
// e1000e.
func vfioPair(t *testing.T) (a, b transport.Transport) {
	t.Helper()
	v := nictest.OpenVFIO(t, vfioWant)
	var ts [2]transport.Transport
	for i, d := range v.Devices {
		n, err := e1000e.Open(d, e1000e.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if ts[i], err = nic.New(n, nic.Options{}); err != nil {
			n.Close()
			t.Fatal(err)
		}
	}
	return ts[0], ts[1]
}

func TestConformanceVFIO(t *testing.T) {
	nictest.FindVFIO(t, vfioWant) // skip once, not in every subtest
	transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) { return vfioPair(t) },
		transporttest.Options{MinData: 60 - 14, Lossy: true})
}

// TestMXSizeClasses sends every mx size class, eager to rendezvous, byte-exact
// across the NIC transport: over the model always, over VFIO NICs when
// present.
func TestMXSizeClasses(t *testing.T) {
	for _, w := range []struct {
		name string
		pair func(t *testing.T) (a, b transport.Transport)
	}{
		{"model", func(t *testing.T) (a, b transport.Transport) { return modelPair(t, e1000e.DefaultOptions()) }},
		{"vfio", vfioPair},
	} {
		t.Run(w.name, func(t *testing.T) {
			ta, tb := w.pair(t)
			o := mx.DefaultBoardOptions()
			o.ResendDelay = 20 * time.Millisecond
			o.PullTimeout = 20 * time.Millisecond
			ba, err := mx.NewBoard(ta, o)
			if err != nil {
				t.Fatal(err)
			}
			defer ba.Close()
			bb, err := mx.NewBoard(tb, o)
			if err != nil {
				t.Fatal(err)
			}
			defer bb.Close()
			ea, err := ba.OpenEndpoint(1, 0x600D)
			if err != nil {
				t.Fatal(err)
			}
			eb, err := bb.OpenEndpoint(2, 0x600D)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			atob, err := ea.Connect(ctx, bb.NICID(), 2, 0x600D)
			if err != nil {
				t.Fatal(err)
			}
			th := ba.RendezvousThreshold()
			for i, n := range []int{0, 1, 8, 32, 128, 1000, 8192, th - 1, th, th + 1, 100000, 1 << 20} {
				msg := make([]byte, n)
				for j := range msg {
					msg[j] = byte(j*7 + i)
				}
				got := make([]byte, n)
				rr, err := eb.IRecv([][]byte{got}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				sr, err := ea.ISend([][]byte{msg}, atob, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				st, err := rr.Wait(ctx)
				if err != nil || st.XferLength != uint32(n) || !bytes.Equal(got, msg) {
					t.Fatalf("%d bytes: %v %+v, byte-exact %v", n, err, st, bytes.Equal(got, msg))
				}
				if _, err := sr.Wait(ctx); err != nil {
					t.Fatal(fmt.Errorf("send of %d bytes: %w", n, err))
				}
			}
		})
	}
}
