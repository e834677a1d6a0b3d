package nic_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated/nicpair"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// The conformance suite over UDP framing, on both drivers. The UDP length
// trims the Ethernet padding, so short frames arrive exactly as sent.
func TestConformanceUDP(t *testing.T) {
	for _, c := range []struct {
		name string
		nics func(t *testing.T) [2]nicdrv.NIC
	}{
		{"e1000e", func(t *testing.T) [2]nicdrv.NIC { return nicpair.E1000E(t, e1000e.DefaultOptions()) }},
		{"e1000e-two-queues", func(t *testing.T) [2]nicdrv.NIC {
			o := e1000e.DefaultOptions()
			o.Queues = 2
			return nicpair.E1000E(t, o)
		}},
		{"82599-four-queues", func(t *testing.T) [2]nicdrv.NIC {
			o := ixgbe.DefaultOptions()
			o.Queues, o.RxRing, o.TxRing = 4, 128, 128
			return nicpair.IXGBE(t, o)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
				ts := nicpair.Transports(t, c.nics(t), nicpair.UDP)
				return ts[0], ts[1]
			}, transporttest.Options{InPlace: true})
		})
	}
}

// wireUDP is an independent reading of an Ethernet/IPv4/UDP frame, field
// by field from RFC 791 and RFC 768, for checking what the transport puts
// on the wire and for the fuzzer's oracle: the payload, the addresses, and
// whether a receiver must accept it as one whole unfragmented datagram.
type wireUDP struct {
	dstMAC, srcMAC   [6]byte
	srcIP, dstIP     [4]byte
	srcPort, dstPort uint16
	payload          []byte
}

// readWireUDP returns the datagram of fr, or false when an Open-MX UDP
// receiver must drop it.
func readWireUDP(fr []byte) (w wireUDP, ok bool) {
	if len(fr) < 14+20+8 || fr[12] != 0x08 || fr[13] != 0x00 {
		return w, false
	}
	ip := fr[14:34]
	version, words := ip[0]>>4, ip[0]&0x0f
	fragOff := binary.BigEndian.Uint16(ip[6:]) & 0x1fff
	moreFrags := ip[6]&0x20 != 0
	if version != 4 || words != 5 || ip[9] != 17 || fragOff != 0 || moreFrags {
		return w, false
	}
	// The one's complement sum over the whole header, checksum included,
	// is all ones when the checksum is right.
	var sum uint64
	for i := 0; i < 20; i += 2 {
		sum += uint64(ip[i])<<8 + uint64(ip[i+1])
	}
	for sum>>16 != 0 {
		sum = sum>>16 + sum&0xffff
	}
	if sum != 0xffff {
		return w, false
	}
	total := int(ip[2])<<8 + int(ip[3])
	ulen := int(fr[38])<<8 + int(fr[39])
	if total < 28 || 14+total > len(fr) || ulen < 8 || ulen > total-20 {
		return w, false
	}
	copy(w.dstMAC[:], fr[0:6])
	copy(w.srcMAC[:], fr[6:12])
	copy(w.srcIP[:], ip[12:16])
	copy(w.dstIP[:], ip[16:20])
	w.srcPort = uint16(fr[34])<<8 | uint16(fr[35])
	w.dstPort = uint16(fr[36])<<8 | uint16(fr[37])
	w.payload = fr[42 : 34+ulen]
	return w, true
}

// rawPeer is a driver of its own on the model NIC the transport is cabled
// to, sending and receiving whole frames.
type rawPeer struct {
	n nicdrv.NIC
}

func (r rawPeer) send(t testing.TB, fr []byte) {
	t.Helper()
	b, err := r.n.Pool(0).Get()
	if err != nil {
		t.Fatal(err)
	}
	copy(b.SetLen(len(fr)), fr)
	if n, err := r.n.TxBatch(0, []*nicdrv.Buffer{b}); n != 1 || err != nil {
		t.Fatalf("raw send: %d, %v", n, err)
	}
}

func (r rawPeer) recv(t testing.TB) []byte {
	t.Helper()
	bufs := make([]*nicdrv.Buffer, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		q, err := r.n.WaitRx(ctx, time.Time{})
		if err != nil {
			t.Fatalf("no frame reached the raw peer: %v", err)
		}
		if n, err := r.n.RxBatch(q, bufs); err != nil {
			t.Fatal(err)
		} else if n == 1 {
			fr := append([]byte(nil), bufs[0].Data...)
			_ = r.n.Pool(q).Free(bufs[0])
			return fr
		}
	}
}

// A frame the transport sends is the datagram transport/udp would send
// from the same address: read back by an independent parser, the UDP
// payload is Data byte for byte, the ports and addresses are the NIC ids',
// and the IPv4 header is whole and valid. And a datagram as a kernel sends
// it (an IP ID, a UDP checksum, Ethernet padding) arrives as its payload,
// from the NIC id ip<<16|port.
func TestUDPFramingOnTheWire(t *testing.T) {
	ns := nicpair.E1000E(t, e1000e.DefaultOptions())
	raw := rawPeer{ns[0]}
	defer raw.n.Close()
	tr, err := nic.New(ns[1], nicpair.UDP(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	peerAP := netip.MustParseAddrPort("10.0.0.1:39999")
	peer, _ := transport.UDPNICID(peerAP)
	for _, size := range []int{0, 1, 17, 18, 100, tr.MTU()} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + size)
		}
		if _, err := tr.Send([]transport.Frame{{Peer: peer, Data: data}}); err != nil {
			t.Fatal(err)
		}
		w, ok := readWireUDP(raw.recv(t))
		if !ok {
			t.Fatalf("%d bytes: the frame on the wire is not a valid IPv4/UDP datagram", size)
		}
		if !bytes.Equal(w.payload, data) || w.srcIP != [4]byte{10, 0, 0, 2} || w.dstIP != [4]byte{10, 0, 0, 1} ||
			w.srcPort != 40000 || w.dstPort != 39999 || w.srcMAC != tr.NIC().MAC() {
			t.Fatalf("%d bytes: on the wire %+v", size, w)
		}
	}
	if tr.MTU() != 1500-20-8 {
		t.Errorf("MTU %d, want transport/udp's default %d", tr.MTU(), 1500-20-8)
	}

	// The other way: a kernel-built datagram, with its checksum and ID.
	payload := []byte("open-mx over udp")
	fr := kernelDatagram(raw.n.MAC(), tr.NIC().MAC(), peerAP, nicpair.UDPAddr(1), payload)
	raw.send(t, fr)
	frames := make([]transport.Frame, 2)
	n, err := tr.Recv(frames, 5*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if frames[0].Peer != peer || !bytes.Equal(frames[0].Data, payload) {
		t.Fatalf("received %v % x, want %v % x", frames[0].Peer, frames[0].Data, peer, payload)
	}
	// The reply goes to the MAC the datagram came from, learned.
	if _, err := tr.Send([]transport.Frame{{Peer: peer, Data: []byte("ack")}}); err != nil {
		t.Fatal(err)
	}
	if w, _ := readWireUDP(raw.recv(t)); w.dstMAC != raw.n.MAC() {
		t.Errorf("reply to %x, want the sender's MAC %x", w.dstMAC, raw.n.MAC())
	}
}

// kernelDatagram builds an Ethernet/IPv4/UDP frame the way a Linux host
// sends one: an IP ID, DF, a UDP checksum over the pseudo-header, and the
// frame padded to the Ethernet minimum.
func kernelDatagram(src, dst nicdrv.MAC, from, to netip.AddrPort, payload []byte) []byte {
	fr := make([]byte, 42+len(payload), max(60, 42+len(payload)))
	copy(fr[0:], dst[:])
	copy(fr[6:], src[:])
	fr[12], fr[13] = 0x08, 0x00
	ip := fr[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	s, d := from.Addr().As4(), to.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(0, ip)))
	udp := fr[34:]
	binary.BigEndian.PutUint16(udp[0:], from.Port())
	binary.BigEndian.PutUint16(udp[2:], to.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(udp[8:], payload)
	ps := sum16(sum16(0, s[:]), d[:]) + 17 + uint32(8+len(payload))
	c := ^fold(sum16(ps, udp))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return fr[:max(60, len(fr))]
}

func sum16(s uint32, b []byte) uint32 {
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// Bad UDP framing options are refused with what to set.
func TestUDPFramingOptions(t *testing.T) {
	for _, o := range []nic.Options{
		{Framing: nic.FramingUDP},
		{Framing: nic.FramingUDP, UDP: netip.MustParseAddrPort("10.0.0.1:0")},
		{Framing: nic.FramingUDP, UDP: netip.MustParseAddrPort("[::1]:5")},
		{Framing: nic.FramingUDP, UDP: netip.MustParseAddrPort("0.0.0.0:5")},
		{UDP: netip.MustParseAddrPort("10.0.0.1:5")},
		{Framing: 7},
	} {
		ns := nicpair.E1000E(t, e1000e.DefaultOptions())
		if tr, err := nic.New(ns[0], o); err == nil {
			tr.Close()
			t.Errorf("New(%+v) accepted", o)
		}
		ns[0].Close()
		ns[1].Close()
	}
}

// udpFuzzRig is a raw driver on one model NIC, cabled to a UDP-framed
// transport on the other, built once per fuzzing process.
var udpFuzzRig struct {
	once sync.Once
	raw  rawPeer
	tr   *nic.Transport
	err  error
}

// FuzzReceiveUDP puts arbitrary IPv4 datagrams on the wire at a UDP-framed
// transport. The oracle is readWireUDP, an independent reading of RFC 791
// and 768: a frame arrives iff it is a valid unfragmented IPv4/UDP datagram
// to the board's address and port from a non-zero port; it then arrives
// with Peer = source ip<<16|port and Data = the UDP payload (the Ethernet
// padding trimmed by the UDP length). The selector fixes up the IPv4 header
// checksum and the addresses (so deep paths are reached), or leaves the
// fuzzer's bytes. A marker datagram after each input tells "not delivered"
// from "late". Frames are padded to the Ethernet minimum first, as the
// wire does.
func FuzzReceiveUDP(f *testing.F) {
	good := kernelDatagram(nicdrv.MAC{2}, nicdrv.MAC{2}, netip.MustParseAddrPort("10.0.0.1:7"), nicpair.UDPAddr(1), []byte("hello"))
	f.Add(byte(7), good[12:])
	f.Add(byte(0), good[12:])
	f.Add(byte(3), good[12:30])
	// An IP datagram longer than its UDP datagram (the UDP length bounds
	// the checksum, RFC 768): the NIC's checksum over the whole IP payload
	// is wrong, the datagram is not.
	long := append([]byte(nil), good[12:]...)
	long[2+3] += 4 // IP total length, into the Ethernet padding
	f.Add(byte(5), long)
	f.Fuzz(func(t *testing.T, sel byte, rest []byte) {
		rig := &udpFuzzRig
		rig.once.Do(func() {
			p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
			if err != nil {
				rig.err = err
				return
			}
			raw, err := e1000e.Open(p.Functions()[0], e1000e.DefaultOptions())
			if err != nil {
				rig.err = err
				return
			}
			rig.raw = rawPeer{raw}
			n, err := e1000e.Open(p.Functions()[1], e1000e.DefaultOptions())
			if err == nil {
				rig.tr, err = nic.New(n, nicpair.UDP(1))
			}
			rig.err = err
		})
		if rig.err != nil {
			t.Fatal(rig.err)
		}
		raw, tr := rig.raw, rig.tr
		if len(rest) < 2 || len(rest) > 1514-12 {
			return
		}
		mac, src := tr.NIC().MAC(), raw.n.MAC()
		frame := append(append(append([]byte(nil), mac[:]...), src[:]...), rest...)
		for len(frame) < 60 { // as the wire pads it
			frame = append(frame, 0)
		}
		me := nicpair.UDPAddr(1).Addr().As4()
		if sel&1 != 0 { // to the board's address and port
			copy(frame[30:34], me[:])
			binary.BigEndian.PutUint16(frame[36:], nicpair.UDPAddr(1).Port())
		}
		if sel&2 != 0 { // no UDP checksum to be wrong
			frame[40], frame[41] = 0, 0
		}
		if sel&4 != 0 { // a right header checksum
			frame[24], frame[25] = 0, 0
			binary.BigEndian.PutUint16(frame[24:], ^fold(sum16(0, frame[14:34])))
		}
		w, ok := readWireUDP(frame)
		want := ok && w.dstIP == me && w.dstPort == nicpair.UDPAddr(1).Port() && w.srcPort != 0
		if want && binary.BigEndian.Uint16(frame[40:]) != 0 {
			// A UDP checksum the NIC may check: compute what it should be
			// over the datagram as the UDP length bounds it, and expect
			// delivery only when it is right.
			udp := append([]byte(nil), frame[34:34+8+len(w.payload)]...)
			udp[6], udp[7] = 0, 0
			ps := sum16(sum16(0, w.srcIP[:]), w.dstIP[:]) + 17 + uint32(len(udp))
			c := ^fold(sum16(ps, udp))
			if c == 0 {
				c = 0xffff
			}
			if c != binary.BigEndian.Uint16(frame[40:]) {
				return // the NIC may or may not check it: no verdict
			}
		}
		raw.send(t, frame)
		from := netip.MustParseAddrPort("10.0.0.1:9")
		raw.send(t, kernelDatagram(src, mac, from, nicpair.UDPAddr(1), []byte("marker")))
		markerPeer, _ := transport.UDPNICID(from)

		var sawFrame bool
		frames := make([]transport.Frame, 4)
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := tr.Recv(frames, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, fr := range frames[:n] {
				if fr.Peer == markerPeer && string(fr.Data) == "marker" && !(want && !sawFrame) {
					if want != sawFrame {
						t.Fatalf("frame % x: delivered %v, want %v", frame, sawFrame, want)
					}
					return
				}
				if !want || sawFrame {
					t.Fatalf("unexpected frame delivered: %v % x (input % x)", fr.Peer, fr.Data, frame)
				}
				ip := uint64(binary.BigEndian.Uint32(w.srcIP[:]))
				if uint64(fr.Peer) != ip<<16|uint64(w.srcPort) || !bytes.Equal(fr.Data, w.payload) {
					t.Fatalf("delivered %v % x, want %x:%d % x", fr.Peer, fr.Data, w.srcIP, w.srcPort, w.payload)
				}
				sawFrame = true
			}
			if time.Now().After(deadline) {
				t.Fatal("the marker datagram never arrived")
			}
		}
	})
}
