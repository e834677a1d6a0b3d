package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/xdp"
	"github.com/gomx-dev/gomx/xdp/xdptest"
)

// Which path a large message's pull replies take on each transport that
// takes a head in front of the application's bytes: in place (xdp from its
// UMEM), or copied once by the transport (xdp from elsewhere, the nic
// transport over usbnet), never gathered by mx.

// zcPaths sends large messages of a few sizes from memory src gives
// (filled with a pattern, then, as soon as each send completed, with a
// guard the receiver must never see) and checks each arrives byte-exact
// and what the sender's copy counters say: inPlace true wants every
// payload byte read in place, false every byte copied once by the
// transport; mx itself gathers none.
func zcPaths(t *testing.T, pr *pair, src func(n int) []byte, inPlace bool) {
	t.Helper()
	thr := pr.ba.RendezvousThreshold()
	for i, size := range []int{thr + 1, 100<<10 + 3, 1<<20 + 4097} {
		buf := src(size)
		for round := range 3 {
			want := pattern(size, uint64(10*i+round+1))
			copy(buf, want)
			dst := make([]byte, size)
			before, resent := pr.a.CopyStats(), retransmits(pr)
			exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 9, ^uint64(0), [][]byte{buf}, [][]byte{dst})
			if inPlace {
				// The send completed: the transport reads none of buf.
				ent, _, err := pr.ba.zc.cache.Get(buf)
				if err != nil {
					t.Fatal(err)
				}
				if p := ent.Mapping().Pending(); p != 0 {
					t.Fatalf("%d bytes: the send completed with %d in-place sends from its memory pending", size, p)
				}
				pr.ba.zc.cache.Put(ent)
			} else if s := pr.ba.ZeroCopyStats(); s.Registered != 0 {
				// A copying region maps nothing: the board drops it once
				// its send completed rather than keep the memory alive.
				t.Fatalf("%d bytes: registration cache %+v holds memory the transport copies", size, s)
			}
			for k := range buf {
				buf[k] = 0xEE
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("%d bytes, round %d: arrived changed", size, round)
			}
			c := pr.a.CopyStats().Sub(before)
			quiet := retransmits(pr) == resent
			switch {
			case c.SendGather != 0 && quiet:
				t.Errorf("%d bytes: mx gathered %d bytes; want none (the transport takes the header in front)", size, c.SendGather)
			case inPlace && (c.SendInPlace < uint64(size) || c.SendTransport != 0 && quiet):
				t.Errorf("%d bytes: %d in place, %d copied by the transport; want all in place", size, c.SendInPlace, c.SendTransport)
			case !inPlace && (c.SendInPlace != 0 || c.SendTransport < uint64(size)):
				t.Errorf("%d bytes: %d in place, %d copied by the transport; want all copied once, by the transport", size, c.SendInPlace, c.SendTransport)
			}
		}
	}
	s := pr.ba.ZeroCopyStats()
	if inPlace && (s.Misses == 0 || s.Hits == 0) {
		t.Errorf("registration cache %+v: want misses on first use, hits after", s)
	}
	if !inPlace && s.Misses == 0 {
		t.Errorf("registration cache %+v: the copying transport was never asked", s)
	}
}

// TestZeroCopyXDP: over AF_XDP, a large message from memory in the
// sender's UMEM (xdp.Transport.RegionMemory) goes out in place, and one
// from the Go heap is copied once, by the transport, into UMEM frames.
func TestZeroCopyXDP(t *testing.T) {
	for _, where := range []string{"umem", "heap"} {
		t.Run(where, func(t *testing.T) {
			checkLeaks(t)
			a, b := xdptest.PairWith(t, xdp.TransportOptions{Socket: xdp.Options{RegionFrames: 1024}}, xdp.TransportOptions{})
			pr := newPairOn(t, &wire2{a: a, b: b, close: func() {}}, zcOptions("on"))
			src := func(n int) []byte { return make([]byte, n) }
			if where == "umem" {
				src = func(n int) []byte {
					m, err := a.RegionMemory(n)
					if err != nil {
						t.Fatal(err)
					}
					return m
				}
			}
			zcPaths(t, pr, src, where == "umem")
		})
	}
}

// TestZeroCopyUSB: the usbnet driver copies what it sends into its bulk
// transfers, so the nic transport over it copies a pull reply's payload
// once, with mx's header in front, and counts it copied, not in place.
func TestZeroCopyUSB(t *testing.T) {
	checkLeaks(t)
	devs := [2]*usbfake.Device{
		usbfake.New(usbfake.Options{Model: usbnet.NCM, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0, 0x0A}, Address: 2}),
		usbfake.New(usbfake.Options{Model: usbnet.NCM, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0, 0x0B}, Address: 3}),
	}
	usbfake.Cable(devs[0], devs[1])
	var trs [2]transport.Transport
	for i, d := range devs {
		n, err := usbnet.Open(d, usbnet.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nic.New(n, nic.Options{})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		trs[i] = tr
	}
	pr := newPairOn(t, &wire2{a: trs[0], b: trs[1], close: func() {}}, zcOptions("on"))
	zcPaths(t, pr, func(n int) []byte { return make([]byte, n) }, false)
}
