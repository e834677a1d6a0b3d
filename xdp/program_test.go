package xdp

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gomx-dev/gomx/mx/wire"
)

// testFrames are frames the classifier must sort: ours (raw or UDP in the
// port range) or not.
func testFrames() []struct {
	name  string
	frame []byte
	ours  bool
} {
	raw := make([]byte, 64)
	PutEthHeader(raw, EthHeader{EtherType: EtherTypeOpenMX})
	other := make([]byte, 64)
	PutEthHeader(other, EthHeader{EtherType: 0x86dd})
	udp := func(port uint16, mod func(b []byte)) []byte {
		b := make([]byte, UDPHeadersLen+20)
		PutUDPHeaders(b, UDPHeader{SrcIP: [4]byte{10, 0, 0, 1}, DstIP: [4]byte{10, 0, 0, 2}, SrcPort: 1, DstPort: port}, 20)
		if mod != nil {
			mod(b)
		}
		return b
	}
	return []struct {
		name  string
		frame []byte
		ours  bool
	}{
		{"raw Open-MX", raw, true},
		{"raw, header only", raw[:14], true},
		{"runt", raw[:13], false},
		{"IPv6", other, false},
		{"UDP low end", udp(40000, nil), true},
		{"UDP high end", udp(40003, nil), true},
		{"UDP below range", udp(39999, nil), false},
		{"UDP above range", udp(40004, nil), false},
		{"UDP with IP options", udp(40000, func(b []byte) { b[14] = 0x46 }), false},
		{"TCP", udp(40000, func(b []byte) { b[23] = 6 }), false},
		{"UDP fragment", udp(40000, func(b []byte) { binary.BigEndian.PutUint16(b[20:22], 0x2000) }), false},
		{"UDP truncated", udp(40000, nil)[:UDPHeadersLen-1], false},
	}
}

// The program classifies frames as the Go decoders do: run it in the
// kernel (BPF_PROG_TEST_RUN) on each test frame, with no socket
// registered, and read which counter moved.
func TestProgramClassifies(t *testing.T) {
	requireXDP(t)
	o, err := ProgramOptions{Queues: 1, UDPPortLow: 40000, UDPPortHigh: 40003}.withDefaults("")
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(o.collectionSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	prog, counters := coll.Programs["steer"], coll.Maps["counters"]
	read := func() (unclaimed, passed uint64) {
		counters.Lookup(uint32(countUnclaimed), &unclaimed)
		counters.Lookup(uint32(countPassed), &passed)
		return
	}
	for _, tc := range testFrames() {
		u0, p0 := read()
		// The kernel pads test frames shorter than an Ethernet header
		// up to it, so the runt is judged by the Go decoder only.
		if len(tc.frame) >= EthHeaderLen {
			ret, err := prog.Run(&ebpf.RunOptions{Data: tc.frame})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if ret != actionPass {
				t.Errorf("%s: program returned %d with no socket registered, want XDP_PASS", tc.name, ret)
			}
			u1, p1 := read()
			if got := u1 == u0+1 && p1 == p0; got != tc.ours || (!tc.ours && p1 != p0+1) {
				t.Errorf("%s: counted as ours=%v (unclaimed +%d, passed +%d), want ours=%v", tc.name, got, u1-u0, p1-p0, tc.ours)
			}
		}
		if got := classify(tc.frame, o); got != tc.ours {
			t.Errorf("%s: Go classifier says ours=%v, want %v", tc.name, got, tc.ours)
		}
	}
}

// classify is the program's rule in Go, for comparison.
func classify(f []byte, o ProgramOptions) bool {
	h, _, err := ParseEthHeader(f)
	if err != nil {
		return false
	}
	if !o.NoEtherType && h.EtherType == o.EtherType {
		return true
	}
	if o.UDPPortLow == 0 || h.EtherType != 0x0800 || len(f) < UDPHeadersLen {
		return false
	}
	ip := f[14:34]
	port := binary.BigEndian.Uint16(f[36:38])
	return ip[0] == 0x45 && ip[9] == 17 && binary.BigEndian.Uint16(ip[6:8])&0x3fff == 0 &&
		port >= o.UDPPortLow && port <= o.UDPPortHigh
}

func TestProgramOptions(t *testing.T) {
	for _, tc := range []struct {
		o    ProgramOptions
		want string
	}{
		{ProgramOptions{Queues: 2000}, "Queues 2000"},
		{ProgramOptions{Queues: 1, Slots: 128}, "Slots 128"},
		{ProgramOptions{Queues: 1, UDPPortLow: 10, UDPPortHigh: 5}, "is empty"},
		{ProgramOptions{Queues: 1, NoEtherType: true}, "redirect nothing"},
		{ProgramOptions{Queues: 1, Mode: 7}, "AttachMode(7)"},
	} {
		_, err := tc.o.withDefaults("")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.o, err, tc.want)
		}
	}
	o, err := ProgramOptions{Queues: 3, UDPPortLow: 7}.withDefaults("")
	if err != nil || o.Slots != 1 || o.EtherType != 0x86DF || o.EndpointOffset != 3 || o.UDPPortHigh != 7 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// The PULL_REPLY rule the transport configures finds the puller's endpoint
// in the frames mx builds, in both byte orders.
func TestPullReplyRuleMatchesMX(t *testing.T) {
	for _, little := range []bool{false, true} {
		o := wire.BigEndian
		if little {
			o = wire.LittleEndian
		}
		typ, off, xor := PullReplyRule(little)
		for _, ep := range []uint32{0, 1, 7, 200, 255} {
			data := make([]byte, wire.HeadLen+wire.PullReplyLen)
			h := wire.PullReply{FrameLength: 1, Handle: 0xFFFFFFFF, Magic: ep ^ wire.PullMagicXor}
			h.Put(data[wire.HeadLen:], o)
			if data[typeOffset] != typ || uint32(data[off]^xor) != ep {
				t.Errorf("%v endpoint %d: type %#x, byte %d gives %d", o, ep, data[typeOffset], off, data[off]^xor)
			}
		}
	}
}
