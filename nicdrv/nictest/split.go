package nictest

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// OpenMXEtherType is the EtherType of Open-MX frames, which no NIC splits.
const OpenMXEtherType = 0x86DF

// Kinds of frame in the header split stream (SplitFrame).
const (
	kindOpenMX      = iota // Open-MX EtherType: not split
	kindSuite              // the suite's own EtherType: not split
	kindIPv4UDP            // split after the UDP header
	kindIPv4TCPOpt         // TCP with 12 bytes of options: split after them
	kindIPv6UDP            // split after the UDP header
	kindIPv6TCPHop         // hop-by-hop extension header, then TCP
	kindIPv4Frag           // an IPv4/UDP first fragment: not split
	kindIPv4ICMPOpt        // IPv4 with options carrying ICMP: may split after IP
	numKinds
)

// SplitFrame writes frame seq of the header split stream from src to dst
// into b (of at least 1514 bytes) and returns it, with the length of the
// headers a NIC with header split puts in the first buffer: hdr > 0 for a
// frame that must be split there, 0 for one that must arrive whole, -1 for
// one that may be either (IP that is neither TCP nor UDP). The kind of
// frame cycles with seq; the size is Size(seq), raised to the headers'
// length where it is shorter. Every byte past the headers derives from
// seq.
func SplitFrame(b []byte, dst, src nicdrv.MAC, seq uint64) (fr []byte, hdr int) {
	kind := int(seq % numKinds)
	size := Size(seq)
	var l2type uint16
	var h []byte // headers after the Ethernet header
	switch kind {
	case kindOpenMX, kindSuite:
		l2type = OpenMXEtherType
		if kind == kindSuite {
			l2type = EtherType
		}
	case kindIPv4UDP, kindIPv4Frag:
		l2type = 0x0800
		h = make([]byte, 28)
		h[0], h[8], h[9] = 0x45, 64, 17
		if kind == kindIPv4Frag {
			binary.BigEndian.PutUint16(h[6:], 0x2000) // more fragments
		}
	case kindIPv4TCPOpt:
		l2type = 0x0800
		h = make([]byte, 20+32)
		h[0], h[8], h[9] = 0x45, 64, 6
		h[20+12] = 8 << 4 // data offset: 32 bytes
		for i := 40; i < 52; i++ {
			h[i] = 1 // NOP options
		}
	case kindIPv6UDP:
		l2type = 0x86DD
		h = make([]byte, 48)
		h[0], h[6], h[7] = 0x60, 17, 64
	case kindIPv6TCPHop:
		l2type = 0x86DD
		h = make([]byte, 40+8+20)
		h[0], h[6], h[7] = 0x60, 0, 64 // next: hop-by-hop
		h[40], h[41] = 6, 0            // then TCP; 8 bytes long
		h[48+12] = 5 << 4
	case kindIPv4ICMPOpt:
		l2type = 0x0800
		h = make([]byte, 24+8)
		h[0], h[8], h[9] = 0x46, 64, 1
	}
	size = max(size, 14+len(h))
	fr = b[:size]
	clear(fr)
	copy(fr[0:6], dst[:])
	copy(fr[6:12], src[:])
	binary.BigEndian.PutUint16(fr[12:], l2type)
	copy(fr[14:], h)
	ip := fr[14:]
	switch l2type {
	case 0x0800:
		binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
		copy(ip[12:20], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		ihl := int(ip[0]&0xF) * 4
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip[:ihl])))
		l4 := ip[ihl:]
		switch ip[9] {
		case 17:
			binary.BigEndian.PutUint16(l4[0:], uint16(seq))
			binary.BigEndian.PutUint16(l4[2:], 7000)
			binary.BigEndian.PutUint16(l4[4:], uint16(size-14-ihl))
		case 6:
			binary.BigEndian.PutUint16(l4[0:], uint16(seq))
			binary.BigEndian.PutUint16(l4[2:], 7000)
		}
	case 0x86DD:
		binary.BigEndian.PutUint16(ip[4:], uint16(size-14-40))
		ip[8+15], ip[24+15] = 1, 2
		if ip[6] == 17 {
			binary.BigEndian.PutUint16(ip[40:], uint16(seq))
			binary.BigEndian.PutUint16(ip[42:], 7000)
			binary.BigEndian.PutUint16(ip[44:], uint16(size-14-40))
		}
	}
	x := seq*0x9E3779B97F4A7C15 | 1
	for i := 14 + len(h); i < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		fr[i] = byte(x)
	}
	if l2type != 0x0800 && l2type != 0x86DD {
		binary.BigEndian.PutUint64(fr[14:], seq)
	}
	switch kind {
	case kindOpenMX, kindSuite, kindIPv4Frag:
		return fr, 0
	case kindIPv4ICMPOpt:
		return fr, -1
	}
	return fr, 14 + len(h)
}

// checkSplit tells what is wrong with a received frame of the header split
// stream, "" if nothing: reassembled it must equal the frame sent, and it
// must be split where SplitFrame says.
func checkSplit(got *nicdrv.Buffer, want []byte, hdr int, scratch []byte) string {
	whole := got.AppendFrame(scratch[:0])
	if string(whole) != string(want) {
		n := min(len(whole), len(want))
		at := n
		for i := 0; i < n; i++ {
			if whole[i] != want[i] {
				at = i
				break
			}
		}
		return fmt.Sprintf("reassembled %d bytes in %d buffers (first %d), want %d: first difference at byte %d", len(whole), got.Segments(), len(got.Data), len(want), at)
	}
	if got.Segments() > 2 {
		return fmt.Sprintf("%d buffers for a %d-byte frame", got.Segments(), len(want))
	}
	switch {
	case hdr == 0 && got.Next != nil:
		return fmt.Sprintf("a frame that is not split (EtherType %#04x) came in %d + %d bytes", binary.BigEndian.Uint16(want[12:]), len(got.Data), len(got.Next.Data))
	case hdr > 0 && len(got.Data) != hdr:
		return fmt.Sprintf("headers of %d bytes, but the first buffer holds %d of the %d-byte frame", hdr, len(got.Data), len(want))
	}
	return ""
}

// splitStream sends count frames of the header split stream from a to b
// and checks each as it arrives, in order; it returns how many arrived
// split.
func splitStream(t *testing.T, a, b nicdrv.NIC, first, count uint64) int {
	t.Helper()
	win := min(window(a, b), 64)
	rx := make([]*nicdrv.Buffer, 64)
	want := make([]byte, 2048)
	scratch := make([]byte, 0, 4096)
	next, exp, end := first, first, first+count
	split := 0
	last := time.Now()
	for exp < end {
		if k := min(win-int(next-exp), int(end-next)); k > 0 {
			bufs := alloc(t, a, k)
			for i, bf := range bufs {
				fr, _ := SplitFrame(bf.SetLen(2048), b.MAC(), a.MAC(), next+uint64(i))
				bf.SetLen(len(fr))
			}
			sendAll(t, a, 0, bufs)
			next += uint64(k)
		}
		n, err := b.RxBatch(0, rx)
		if err != nil {
			t.Fatalf("RxBatch: %v", err)
		}
		for _, bf := range rx[:n] {
			fr, hdr := SplitFrame(want, b.MAC(), a.MAC(), exp)
			if bad := checkSplit(bf, fr, hdr, scratch); bad != "" {
				t.Fatalf("frame %d (kind %d): %s", exp, exp%numKinds, bad)
			}
			if bf.Next != nil {
				split++
			}
			exp++
		}
		if err := b.Pool(0).Free(rx[:n]...); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			last = time.Now()
		} else if time.Since(last) > hang {
			t.Fatalf("sent up to %d, received up to %d of %d: no frame for %v", next, exp, end, hang)
		}
	}
	return split
}

func (s *suite) headerSplit(t *testing.T) {
	r := s.rig(t, Config{Queues: 1, HeaderSplit: true})
	a, b := r.NICs[0], r.NICs[1]
	for i, n := range r.NICs {
		if !n.Info().HeaderSplit {
			t.Fatalf("NIC %d opened with HeaderSplit, but its Info says it does not split", i)
		}
	}
	count := uint64(4000)
	if testing.Short() {
		count = 800
	}
	ab := splitStream(t, a, b, 0, count)
	ba := splitStream(t, b, a, 1<<40, count)
	t.Logf("%d frames each way byte-exact; %d and %d of them arrived split", count, ab, ba)
	// Five kinds in eight must split (each frame was checked above); this
	// guards against a stream that never exercised the split path.
	if min(ab, ba) < int(count)/2 {
		t.Errorf("only %d and %d of %d frames each way arrived split", ab, ba, count)
	}
	for i, n := range r.NICs {
		st, err := n.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.RxDropped != 0 || st.RxErrors != 0 {
			t.Errorf("NIC %d: drops or errors on a clean run: %+v", i, st)
		}
	}
	// A received chain cannot be transmitted as it is: TxBatch refuses it
	// rather than sending the headers alone.
	bufs := alloc(t, a, 2)
	Frame(bufs[0].SetLen(60), b.MAC(), a.MAC(), 0, 60)
	bufs[0].Next = bufs[1]
	bufs[1].SetLen(10)
	if k, err := a.TxBatch(0, bufs[:1]); k != 0 || err == nil {
		t.Errorf("TxBatch of a chained buffer: took %d, %v; want it refused", k, err)
	}
	if err := a.Pool(0).Free(bufs[0]); err != nil {
		t.Fatal(err)
	}
	// Both directions still move frames (the same rings, after the
	// refusal).
	roundTrip(t, a, b, 2<<40)
}
