package e1000e_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
)

// The hash and queue the NIC reports for UDP/IPv4 datagrams are the ones
// Info().RSS predicts (nicdrv.Toeplitz, our own implementation), under the
// driver's destination key and under Microsoft's: over the model always,
// and over QEMU's 82574 in `make qemu-test`, so the prediction that
// transport/nic steers queues by is checked against the NIC QEMU models.
// Under the destination key every sender's datagrams to one address share
// a queue; under Microsoft's the sender moves them.
func TestRSSPrediction(t *testing.T) {
	for _, w := range []struct {
		name    string
		devices func(t *testing.T) [2]pci.Device
	}{
		{"model", func(t *testing.T) [2]pci.Device {
			p := newModel(t, emulated.DefaultE1000EOptions())
			return [2]pci.Device{p.Functions()[0], p.Functions()[1]}
		}},
		{"vfio", func(t *testing.T) [2]pci.Device {
			d := nictest.OpenVFIO(t, vfioWant).Devices
			return [2]pci.Device{d[0], d[1]}
		}},
	} {
		t.Run(w.name, func(t *testing.T) {
			devs := w.devices(t)
			for _, k := range []struct {
				name string
				key  [hw.RSSKeyLen]byte
			}{{"destination", e1000e.DestinationRSSKey}, {"microsoft", e1000e.MicrosoftRSSKey}} {
				t.Run(k.name, func(t *testing.T) { rssPrediction(t, devs, k.key, k.name == "destination") })
			}
		})
	}
}

func rssPrediction(t *testing.T, devs [2]pci.Device, key [hw.RSSKeyLen]byte, byDest bool) {
	o := e1000e.DefaultOptions()
	o.Queues, o.RSSKey, o.RxRing, o.TxRing = 2, &key, 64, 64
	var ns [2]nicdrv.NIC
	for i := range 2 {
		n, err := e1000e.Open(devs[i], o)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		ns[i] = n
	}
	a, b := ns[0], ns[1]
	rss := b.Info().RSS
	if rss == nil || string(rss.Key) != string(key[:]) || len(rss.Table) != hw.RETAEntries {
		t.Fatalf("Info().RSS = %+v: want the programmed key and a %d-entry table", rss, hw.RETAEntries)
	}
	// Destinations 10.1.0.0..15, each from eight senders.
	perQueue := [2]int{}
	moved := 0
	rx := make([]*nicdrv.Buffer, 1)
	for d := range 16 {
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(d)}), 40001)
		first := -1
		for s := range 8 {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(s * 37), byte(d*11 + s)}), uint16(40000+s))
			bufs := make([]*nicdrv.Buffer, 1)
			if _, err := a.Pool(0).Alloc(bufs); err != nil {
				t.Fatal(err)
			}
			fr := nictest.UDPFrame(bufs[0].SetLen(2048), b.MAC(), a.MAC(), dst.Port(), 0, uint64(d*8+s), 80)
			ip := fr[14:34]
			s4, d4 := src.Addr().As4(), dst.Addr().As4()
			copy(ip[12:16], s4[:])
			copy(ip[16:20], d4[:])
			binary.BigEndian.PutUint16(ip[10:], 0)
			binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
			binary.BigEndian.PutUint16(fr[34:], src.Port())
			bufs[0].SetLen(80)
			if n, err := a.TxBatch(0, bufs); n != 1 || err != nil {
				t.Fatalf("TxBatch = %d, %v", n, err)
			}
			q, hash := recvOne(t, b, rx)
			if want := rss.HashUDP4(src, dst); hash != want {
				t.Errorf("%v -> %v: the NIC's hash %#08x, predicted %#08x", src, dst, hash, want)
			}
			if want := rss.QueueUDP4(src, dst); q != want {
				t.Errorf("%v -> %v: arrived on queue %d, predicted %d", src, dst, q, want)
			}
			if dq, err := rss.DestQueue(dst); byDest && (err != nil || dq != q) {
				t.Errorf("%v -> %v: queue %d, DestQueue says %d, %v", src, dst, q, dq, err)
			}
			if first < 0 {
				first = q
			} else if q != first {
				moved++
			}
			perQueue[q]++
		}
	}
	switch {
	case perQueue[0] == 0 || perQueue[1] == 0:
		t.Errorf("datagrams per queue %v: 16 destinations should reach both", perQueue)
	case byDest && moved != 0:
		t.Errorf("%d datagrams left their destination's queue: the source reached the index", moved)
	case !byDest && moved == 0:
		t.Error("under Microsoft's key no sender moved a destination's datagrams: the source should count")
	}
}

// recvOne waits for one frame on either queue of n and returns its queue
// and RSS hash.
func recvOne(t *testing.T, n nicdrv.NIC, rx []*nicdrv.Buffer) (int, uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for q := range 2 {
			k, err := n.RxBatch(q, rx[:1])
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				b := rx[0]
				defer n.Pool(q).Free(b)
				if b.Queue != q {
					t.Errorf("a frame of queue %d says queue %d", q, b.Queue)
				}
				return q, b.Hash
			}
		}
	}
	t.Fatal("a datagram did not arrive in 10s")
	return 0, 0
}

// ipChecksum is the IPv4 header checksum of h (its checksum field zero).
func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}
