package nic_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/transport/transporttest"
	"github.com/gomx-dev/gomx/vfio"
)

// vfioPair opens transports on two cabled 82574Ls bound to vfio-pci (named
// in GOMX_E1000E_DEVICES, or the first two found: QEMU's pair in `make
// qemu-test`). It skips without them, and fails when GOMX_REQUIRE_QEMU names
// e1000e.
func vfioPair(t *testing.T) (a, b transport.Transport) {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if strings.Contains(os.Getenv("GOMX_REQUIRE_QEMU"), "e1000e") {
			t.Fatalf("GOMX_REQUIRE_QEMU=%s but %s", os.Getenv("GOMX_REQUIRE_QEMU"), why)
		}
		t.Skipf("%s (bind two cabled 82574Ls to vfio-pci, or name them in GOMX_E1000E_DEVICES)", why)
	}
	o := vfio.DefaultOptions()
	if _, err := os.Stat("/dev/vfio/vfio"); err != nil {
		skip("no VFIO")
	}
	if m, _ := filepath.Glob("/dev/vfio/noiommu-*"); len(m) > 0 {
		o.NoIOMMU = true
	}
	var addrs []pci.Address
	if env := os.Getenv("GOMX_E1000E_DEVICES"); env != "" {
		for _, s := range strings.Split(env, ",") {
			a, err := pci.ParseAddress(strings.TrimSpace(s))
			if err != nil {
				t.Fatalf("GOMX_E1000E_DEVICES: %v", err)
			}
			addrs = append(addrs, a)
		}
	} else if fns, err := o.Sysfs.Functions(); err == nil {
		for _, f := range fns {
			if f.Vendor == hw.VendorIntel && (f.Device == hw.Device82574L || f.Device == hw.Device82574LA) && f.Driver == "vfio-pci" {
				addrs = append(addrs, f.Addr)
			}
		}
	}
	if len(addrs) < 2 {
		skip("fewer than two 82574Ls bound to vfio-pci")
	}
	ctr, err := vfio.OpenContainer(o)
	if err != nil {
		t.Fatal(err)
	}
	var devs []*vfio.Device
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
		if err := ctr.Close(); err != nil {
			t.Errorf("close container: %v", err)
		}
	})
	var ts [2]transport.Transport
	for i, a := range addrs[:2] {
		d, err := ctr.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
		n, err := e1000e.Open(d, e1000e.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if ts[i], err = nic.New(n, nic.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	return ts[0], ts[1]
}

func TestConformanceVFIO(t *testing.T) {
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
