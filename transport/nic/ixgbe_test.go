package nic_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/nicpair"

	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// ixgbePair is two transports over the ixgbe driver on two cabled emulated
// 82599s.
func ixgbePair(t *testing.T, o ixgbe.Options) (a, b transport.Transport) {
	ts := nicpair.Transports(t, nicpair.IXGBE(t, o), nicpair.Raw)
	return ts[0], ts[1]
}

// The transport conformance suite over the 82599 driver and model: the nic
// transport is the same whatever driver is under it.
func TestConformance82599(t *testing.T) {
	for _, c := range []struct {
		name string
		o    func(*ixgbe.Options)
	}{
		{"polling", func(*ixgbe.Options) {}},
		{"interrupts", func(o *ixgbe.Options) { o.Interrupts = true }},
		{"four-queues", func(o *ixgbe.Options) { o.Queues = 4; o.RxRing, o.TxRing = 128, 128 }},
		{"jumbo", jumbo},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
				o := ixgbe.DefaultOptions()
				c.o(&o)
				if o.MaxFrame > 1518 {
					ts := nicpair.Transports(t, nicpair.IXGBE(t, o), func(int) nic.Options { return nic.Options{MTU: 9000} })
					if ts[0].MTU() != 9000 {
						t.Fatalf("MTU %d over a NIC opened for jumbo frames with Options.MTU 9000", ts[0].MTU())
					}
					return ts[0], ts[1]
				}
				return ixgbePair(t, o)
			}, transporttest.Options{MinData: 60 - 14, InPlace: true})
		})
	}
}

// jumbo opens the 82599 for 9000-byte MTU frames, each in one 16 KiB
// receive buffer.
func jumbo(o *ixgbe.Options) { o.MaxFrame, o.BufferSize, o.PoolBuffers = 9018, 16384, 2048 }

// TestMTU: Options.MTU raises the transport's MTU over a NIC opened for
// jumbo frames (less the UDP framing's headers with FramingUDP), a frame
// of that size crosses byte-exact, and an MTU the NIC's largest frame or
// its pool buffers cannot hold is refused, saying so.
func TestMTU(t *testing.T) {
	o := ixgbe.DefaultOptions()
	jumbo(&o)
	ts := nicpair.Transports(t, nicpair.IXGBE(t, o), func(int) nic.Options { return nic.Options{MTU: 9000} })
	a, b := ts[0], ts[1]
	defer a.Close()
	defer b.Close()
	if a.MTU() != 9000 {
		t.Fatalf("MTU %d, want 9000", a.MTU())
	}
	data := make([]byte, 9000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: data}}); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, b, 1)
	if !bytes.Equal(got[0].whole, data) {
		t.Fatalf("a 9000-byte frame arrived as %d bytes, not byte-exact", len(got[0].whole))
	}
	if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: make([]byte, 9001)}}); !errors.Is(err, transport.ErrTooBig) {
		t.Errorf("a 9001-byte frame: %v, want ErrTooBig", err)
	}

	u := nicpair.Transports(t, nicpair.IXGBE(t, o), func(i int) nic.Options {
		uo := nicpair.UDP(i)
		uo.MTU = 9000
		return uo
	})
	if u[0].MTU() != 9000-28 {
		t.Errorf("UDP framing, MTU 9000: transport MTU %d, want %d", u[0].MTU(), 9000-28)
	}
	u[0].Close()
	u[1].Close()

	for _, c := range []struct {
		name string
		o    func(*ixgbe.Options)
		mtu  int
	}{
		{"a 1518-byte NIC", func(*ixgbe.Options) {}, 9000},
		{"2 KiB pool buffers", func(o *ixgbe.Options) { o.MaxFrame = 9018 }, 9000},
		{"an MTU below the Ethernet minimum", jumbo, 40},
	} {
		o := ixgbe.DefaultOptions()
		c.o(&o)
		ns := nicpair.IXGBE(t, o)
		for _, n := range ns {
			if tr, err := nic.New(n, nic.Options{MTU: c.mtu}); err == nil {
				tr.Close()
				t.Errorf("%s, MTU %d: accepted", c.name, c.mtu)
			} else if !strings.Contains(err.Error(), "MTU") {
				t.Errorf("%s, MTU %d: %v, want it to name the MTU", c.name, c.mtu, err)
			}
			n.Close()
		}
	}
}
