package nic_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated/nicpair"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
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

	// The bound: MaxFrame less the Ethernet header, on either NIC (the
	// 82599 with JUMBOEN passes MaxFrame untagged; the 82574L, without
	// RCTL.LPE, frames of 1522 bytes with FCS), byte-exact; 1 more is
	// refused.
	for _, c := range []struct {
		name string
		ns   func() [2]nicdrv.NIC
	}{
		{"82599", func() [2]nicdrv.NIC { return nicpair.IXGBE(t, ixgbe.DefaultOptions()) }},
		{"82574L", func() [2]nicdrv.NIC { return nicpair.E1000E(t, e1000e.DefaultOptions()) }},
	} {
		ns := c.ns()
		max := ns[0].Info().MaxFrame - 14
		if _, err := nic.New(ns[0], nic.Options{MTU: max + 1}); err == nil || !strings.Contains(err.Error(), "MTU") {
			t.Errorf("%s, MTU %d: %v, want it refused", c.name, max+1, err)
		}
		ts := nicpair.Transports(t, ns, func(int) nic.Options { return nic.Options{MTU: max} })
		data := bytes.Repeat([]byte{0x5A, 0xC3, 0x17}, max/3+1)[:max]
		if _, err := ts[0].Send([]transport.Frame{{Peer: ts[1].Addr(), Data: data}}); err != nil {
			t.Fatalf("%s, MTU %d: %v", c.name, max, err)
		}
		if got := recvN(t, ts[1], 1); !bytes.Equal(got[0].whole, data) {
			t.Errorf("%s: a %d-byte frame (MTU %d) arrived as %d bytes, not byte-exact", c.name, max, max, len(got[0].whole))
		}
		ts[0].Close()
		ts[1].Close()
	}

	for _, c := range []struct {
		name string
		o    func(*ixgbe.Options)
		mtu  int
		want string
	}{
		{"a 1518-byte NIC", func(*ixgbe.Options) {}, 9000, "MTU"},
		{"2 KiB pool buffers", func(o *ixgbe.Options) { o.MaxFrame = 9018 }, 1500, "BufferSize of at least 9022"},
		{"an MTU below the Ethernet minimum", jumbo, 40, "MTU"},
	} {
		o := ixgbe.DefaultOptions()
		c.o(&o)
		ns := nicpair.IXGBE(t, o)
		for _, n := range ns {
			if tr, err := nic.New(n, nic.Options{MTU: c.mtu}); err == nil {
				tr.Close()
				t.Errorf("%s, MTU %d: accepted", c.name, c.mtu)
			} else if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, MTU %d: %v, want it to say %q", c.name, c.mtu, err, c.want)
			}
			n.Close()
		}
	}
}

// TestChainedFrameDropped: over an 82599 whose largest frame (2048)
// fills its 2 KiB buffers, a VLAN-tagged frame 4 bytes longer, which the
// NIC admits and chains over two buffers, is dropped whole and counted
// (nic_chained_frames), not handed up cut to its first buffer; the frame
// after it arrives.
func TestChainedFrameDropped(t *testing.T) {
	p, err := emulated.NewIXGBE(emulated.DefaultIXGBEOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The sender's 4 KiB buffers hold the long frame; the receiver's 2 KiB
	// ones chain it.
	o := ixgbe.DefaultOptions()
	o.MaxFrame = 2048
	a, rx := nictest.OpenPair(t, func(i int) (*ixgbe.NIC, error) {
		oi := o
		if i == 0 {
			oi.BufferSize = 4096
		}
		return ixgbe.Open(p.Functions()[i], oi)
	})
	ns := [2]*ixgbe.NIC{a, rx}
	defer ns[0].Close()
	b, err := nic.New(ns[1], nicpair.Raw(1))
	if err != nil {
		ns[1].Close()
		t.Fatal(err)
	}
	defer b.Close()
	dst, src := ns[1].MAC(), ns[0].MAC()
	frame := func(n int, tagged bool) []byte {
		fr := make([]byte, n)
		copy(fr, dst[:])
		copy(fr[6:], src[:])
		h := 12
		if tagged {
			fr[12], fr[13], fr[15] = 0x81, 0x00, 7
			h = 16
		}
		fr[h], fr[h+1] = 0x86, 0xDF
		for i := h + 2; i < n; i++ {
			fr[i] = byte(i)
		}
		return fr
	}
	long, short := frame(o.MaxFrame+4, true), frame(200, false)
	bufs := make([]*nicdrv.Buffer, 2)
	if k, err := ns[0].Pool(0).Alloc(bufs); k != 2 {
		t.Fatalf("alloc: %d: %v", k, err)
	}
	copy(bufs[0].SetLen(len(long)), long)
	copy(bufs[1].SetLen(len(short)), short)
	if k, err := ns[0].TxBatch(0, bufs); k != 2 || err != nil {
		t.Fatalf("TX: %d sent: %v", k, err)
	}
	got := recvN(t, b, 1)
	if !bytes.Equal(got[0].whole, short[14:]) {
		t.Fatalf("received %d bytes, want the %d-byte frame after the chained one", len(got[0].whole), len(short)-14)
	}
	if c := counter(b, "nic_chained_frames"); c != 1 {
		t.Errorf("nic_chained_frames %d, want 1", c)
	}
}
