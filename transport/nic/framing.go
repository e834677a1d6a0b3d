package nic

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/framing"
)

// Framing is the link framing a transport puts around each frame's Data.
type Framing int

const (
	// FramingEthernet is raw Open-MX framing: an Ethernet header with
	// EtherType 0x86DF; the NIC id is the MAC address.
	FramingEthernet Framing = iota
	// FramingUDP is Open-MX over UDP, as transport/udp speaks it:
	// Ethernet, IPv4 and UDP headers, the Data as the UDP payload; the
	// NIC id is ip<<16 | port. A NIC's IP filters (Flow Director, 5-tuple,
	// RSS) can steer these frames by UDP port.
	FramingUDP
)

// String names the framing.
func (f Framing) String() string {
	switch f {
	case FramingEthernet:
		return "ethernet"
	case FramingUDP:
		return "udp"
	}
	return fmt.Sprintf("Framing(%d)", int(f))
}

// broadcast is where a frame to an IPv4 peer whose MAC is not known goes.
var broadcast = nicdrv.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ipFraming is the state of UDP framing: the board's IPv4 address and the
// transport's port, and the neighbour table its transports share.
type ipFraming struct {
	ip    [4]byte
	port  uint16
	neigh *neighbours
	c     *ipCounters
}

// ipCounters count what UDP framing drops or does, per transport.
type ipCounters struct {
	notUDP, otherDest, bad, unresolved atomic.Uint64
}

// neighbours maps IPv4 peers to MAC addresses: read without a lock on the
// fast path (a copy-on-write map behind an atomic pointer), written only
// when a peer is learned or moves, under mu.
type neighbours struct {
	m  atomic.Pointer[map[[4]byte]nicdrv.MAC]
	mu sync.Mutex
}

// lookup returns the MAC of ip, or the broadcast address and false.
func (n *neighbours) lookup(ip [4]byte) (nicdrv.MAC, bool) {
	if mac, ok := (*n.m.Load())[ip]; ok {
		return mac, true
	}
	return broadcast, false
}

// learn records that ip sends from mac, when that is news.
func (n *neighbours) learn(ip [4]byte, mac nicdrv.MAC) {
	if old, ok := (*n.m.Load())[ip]; (ok && old == mac) || mac.IsMulticast() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := *n.m.Load()
	next := make(map[[4]byte]nicdrv.MAC, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[ip] = mac
	n.m.Store(&next)
}

// newFraming checks the framing options and returns the UDP framing state
// (zero for Ethernet framing), the link header length and the board's NIC
// id.
func newFraming(o Options, mac nicdrv.MAC, info nicdrv.Info) (ipFraming, int, transport.NICID, error) {
	switch o.Framing {
	case FramingEthernet:
		if o.UDP.IsValid() || len(o.Neighbors) > 0 || o.QueueAddrs.IsValid() {
			return ipFraming{}, 0, 0, errors.New("transport/nic: UDP, Neighbors or QueueAddrs set with Ethernet framing: set Framing to FramingUDP, or leave them empty")
		}
		return ipFraming{}, headerLen, transport.MACNICID(mac), nil
	case FramingUDP:
	default:
		return ipFraming{}, 0, 0, fmt.Errorf("transport/nic: unknown framing %v: want FramingEthernet or FramingUDP", o.Framing)
	}
	if o.QueueAddrs.IsValid() && !o.QueueAddrs.Addr().Is4() {
		return ipFraming{}, 0, 0, fmt.Errorf("transport/nic: QueueAddrs %v is not an IPv4 prefix: give a block such as 10.0.1.0/28", o.QueueAddrs)
	}
	id, err := transport.UDPNICID(o.UDP)
	if err != nil || o.UDP.Port() == 0 || o.UDP.Addr().Unmap().IsUnspecified() {
		return ipFraming{}, 0, 0, fmt.Errorf("transport/nic: UDP framing needs the board's IPv4 address and a non-zero port in Options.UDP, not %v", o.UDP)
	}
	if info.HeaderSplit {
		return ipFraming{}, 0, 0, fmt.Errorf("transport/nic: UDP framing over a %s NIC opened with header split: open it without (the transport reads each datagram from one buffer)", info.Driver)
	}
	m := map[[4]byte]nicdrv.MAC{}
	for a, mac := range o.Neighbors {
		if !a.Unmap().Is4() {
			return ipFraming{}, 0, 0, fmt.Errorf("transport/nic: neighbour %v is not an IPv4 address", a)
		}
		m[a.Unmap().As4()] = mac
	}
	f := ipFraming{ip: o.UDP.Addr().Unmap().As4(), port: o.UDP.Port(), neigh: &neighbours{}, c: &ipCounters{}}
	f.neigh.m.Store(&m)
	return f, framing.UDPHeadersLen, id, nil
}

// reachable checks that peer is a NIC id the framing can address.
func (t *Transport) reachable(peer transport.NICID) error {
	if t.hdr == headerLen {
		return nil
	}
	if peer>>16 == 0 || uint16(peer) == 0 || peer > transport.NICIDMask {
		return fmt.Errorf("transport/nic: NIC id %#x is not an IPv4 address and non-zero port (UDP framing): %w", uint64(peer), transport.ErrUnreachable)
	}
	return nil
}

// header writes the Ethernet, IPv4 and UDP headers of a frame of n bytes
// of Data to peer, whose MAC comes from the neighbour table.
func (f *ipFraming) header(b []byte, mac nicdrv.MAC, peer transport.NICID, n int) {
	ap := peer.UDPAddr()
	dip := ap.Addr().As4()
	dst, ok := f.neigh.lookup(dip)
	if !ok {
		f.c.unresolved.Add(1)
	}
	framing.PutUDPHeaders(b, framing.UDPHeader{
		Eth:   framing.EthHeader{Dst: dst, Src: mac},
		SrcIP: f.ip, DstIP: dip, SrcPort: f.port, DstPort: ap.Port(),
	}, n)
}

// decode checks a received frame's IPv4/UDP headers: an unfragmented
// datagram to the board's address and this transport's port, from a
// non-zero port, with right checksums. It learns the sender's MAC, and
// returns the sender and the UDP payload.
//
// A NIC's verdict of a bad UDP checksum is checked again in software, as
// Linux does: a NIC sums over the IP payload, and a datagram whose UDP
// length is shorter than that is right by RFC 768 when the NIC says it is
// wrong. Its verdict of a right one is trusted.
func (f *ipFraming) decode(b *nicdrv.Buffer) (transport.NICID, []byte, bool) {
	if b.Flags&nicdrv.FlagIPChecksumBad != 0 {
		f.c.bad.Add(1)
		return 0, nil, false
	}
	h, data, err := framing.ParseUDP(b.Data)
	if err != nil {
		f.c.notUDP.Add(1)
		return 0, nil, false
	}
	if b.Flags&nicdrv.FlagL4ChecksumBad != 0 && !framing.UDPChecksumOK(b.Data) {
		f.c.bad.Add(1)
		return 0, nil, false
	}
	if h.DstIP != f.ip || h.DstPort != f.port || h.SrcPort == 0 {
		f.c.otherDest.Add(1)
		return 0, nil, false
	}
	f.neigh.learn(h.SrcIP, h.Eth.Src)
	ip := uint32(h.SrcIP[0])<<24 | uint32(h.SrcIP[1])<<16 | uint32(h.SrcIP[2])<<8 | uint32(h.SrcIP[3])
	return transport.NICID(ip)<<16 | transport.NICID(h.SrcPort), data, true
}

// counters appends UDP framing's counters, when the transport uses it.
func (f *ipFraming) counters(c []transport.Counter) []transport.Counter {
	if f.c == nil {
		return c
	}
	return append(c,
		transport.Counter{Name: "nic_udp_not_udp", Value: f.c.notUDP.Load()},
		transport.Counter{Name: "nic_udp_other_dest", Value: f.c.otherDest.Load()},
		transport.Counter{Name: "nic_udp_checksum_bad", Value: f.c.bad.Load()},
		transport.Counter{Name: "nic_udp_unresolved", Value: f.c.unresolved.Load()},
	)
}
