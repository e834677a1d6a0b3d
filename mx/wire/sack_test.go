package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// sackOracle reads the SACK extension of a TRUC header p straight from the
// layout documented in the package doc, with encoding/binary: present
// reports a well-formed extension, bad a magic with a wrong count or data
// length, short one cut off.
func sackOracle(p []byte, bo binary.ByteOrder) (blocks []SackBlock, present, bad, short bool) {
	if len(p) < 28 || p[4] <= 16 || len(p) < 36 || bo.Uint32(p[28:32]) != 0x676D736B {
		return nil, false, false, false
	}
	n := int(p[32])
	if n == 0 || n > 16 || int(p[4]) != 16+8+6*n {
		return nil, false, true, false
	}
	if len(p) < 36+6*n {
		return nil, false, false, true
	}
	for i := 0; i < n; i++ {
		q := p[36+6*i:]
		blocks = append(blocks, SackBlock{Seq: bo.Uint16(q[0:2]), Held: bo.Uint32(q[2:6])})
	}
	return blocks, true, false, false
}

func sackSeed(o Order, n int) []byte {
	h := Truc{DstEP: 1, SrcEP: 2, Session: 0xdead, AckUpTo: 100, AckNum: 7, SendSeq: 9, HasSack: n > 0}
	h.Sack.N = n
	for i := range n {
		h.Sack.Blocks[i] = SackBlock{Seq: uint16(101 + 2*i), Held: uint32(1)<<i | 1}
	}
	p := make([]byte, h.Len())
	h.Put(p, o)
	return p
}

// FuzzSack decodes arbitrary TRUC headers and checks the SACK extension
// against the oracle above; whatever decodes is encoded again and must give
// the same bytes (reserved bytes zero), and FrameLen must agree on the length.
func FuzzSack(f *testing.F) {
	for _, o := range []Order{BigEndian, LittleEndian} {
		for _, n := range []int{0, 1, 5, 16} {
			f.Add(sackSeed(o, n), o == LittleEndian)
		}
	}
	bad := sackSeed(BigEndian, 3)
	bad[32] = 17
	f.Add(bad, false)
	f.Add(sackSeed(BigEndian, 4)[:40], false)
	probe := sackSeed(LittleEndian, 2)
	probe[13] = 0xff // every probe bit, a tag and the undefined bit 3
	f.Add(probe, true)
	f.Fuzz(func(t *testing.T, p []byte, little bool) {
		o, bo := BigEndian, binary.ByteOrder(binary.BigEndian)
		if little {
			o, bo = LittleEndian, binary.LittleEndian
		}
		if len(p) > 0 {
			p[0] = byte(TypeTruc)
		}
		h, err := DecodeTruc(p, o, 0)
		if len(p) < TrucLen || p[4] < 16 || p[12] != TrucAck || bo.Uint32(p[8:12]) != bo.Uint32(p[16:20]) {
			if err == nil {
				t.Fatalf("accepted a TRUC the base checks reject: %x", p)
			}
			return
		}
		blocks, present, isBad, short := sackOracle(p, bo)
		switch {
		case isBad:
			if !errors.Is(err, ErrBadLength) {
				t.Fatalf("bad SACK count or length: err %v, want ErrBadLength", err)
			}
			return
		case short:
			if !errors.Is(err, ErrShort) {
				t.Fatalf("cut SACK: err %v, want ErrShort", err)
			}
			return
		case err != nil:
			t.Fatalf("rejected a valid TRUC: %v", err)
		}
		if h.HasSack != present || h.Sack.N != len(blocks) {
			t.Fatalf("HasSack %v N %d, oracle present %v with %d blocks", h.HasSack, h.Sack.N, present, len(blocks))
		}
		for i, bl := range blocks {
			if h.Sack.Blocks[i] != bl {
				t.Fatalf("block %d: %+v, oracle %+v", i, h.Sack.Blocks[i], bl)
			}
		}
		// Byte 13 is a pad unless the pair negotiated ExtAsk; then bits
		// 0-2 are the probe flags and 4-7 a question's tag (bit 3 is
		// undefined, read as zero), and the other fields do not change.
		if h.Probe != 0 {
			t.Fatalf("probe flags %#x read from a pad", h.Probe)
		}
		ha, err := DecodeTruc(p, o, ExtAsk)
		wantAsk := h
		wantAsk.Probe = p[13] & 0xf7
		if err != nil || ha != wantAsk {
			t.Fatalf("with ExtAsk: %+v %v; want %+v", ha, err, wantAsk)
		}
		n, err := FrameLen(append([]byte{0, 0}, p...), o)
		if err != nil || n != HeadLen+h.Len() {
			t.Fatalf("FrameLen = %d, %v; want %d", n, err, HeadLen+h.Len())
		}
		if !present {
			return
		}
		q := make([]byte, h.Len())
		h.Put(q, o)
		want := append([]byte{}, p[:h.Len()]...)
		// Open-MX pads and the reserved bytes are written as zero.
		for _, i := range []int{5, 6, 7, 13, 27, 33, 34, 35} {
			want[i] = 0
		}
		want[26] = q[26] // resent is a bool
		if !bytes.Equal(q[TrucLen:], want[TrucLen:]) {
			t.Fatalf("re-encoded SACK\n%x\nwant\n%x", q[TrucLen:], want[TrucLen:])
		}
	})
}

// TestTrucWithoutSackIsOpenMX checks that a TRUC without the extension is
// byte for byte the 28 bytes Open-MX sends: data length 16 and nothing after.
func TestTrucWithoutSackIsOpenMX(t *testing.T) {
	p := sackSeed(BigEndian, 0)
	if len(p) != TrucLen || p[4] != 16 {
		t.Fatalf("TRUC without SACK: %d bytes, data length %d; want 28 and 16", len(p), p[4])
	}
	q := sackSeed(BigEndian, 2)
	if !bytes.Equal(p[5:], q[5:TrucLen]) || q[4] != 16+8+12 {
		t.Fatalf("the SACK changed Open-MX's bytes:\n%x\n%x", p, q[:TrucLen])
	}
}

// TestTrucProbeFlags checks byte 13 of a TRUC: the probe flags round-trip
// between boards that negotiated ExtAsk, are written as Open-MX's zero pad
// when there are none, and a pad byte holding garbage (Open-MX does not
// clear its pads) decodes as no flags without ExtAsk.
func TestTrucProbeFlags(t *testing.T) {
	for _, probe := range []uint8{0, TrucAsk, TrucAnswer, TrucAsk | TrucPulls | 9<<TrucTagShift, TrucAnswer | TrucPulls | 0xf0} {
		h := Truc{DstEP: 1, SrcEP: 2, Session: 0xcafe, AckUpTo: 7, AckNum: 3, SendSeq: 9, Probe: probe}
		p := make([]byte, TrucLen)
		h.Put(p, BigEndian)
		if p[13] != probe {
			t.Fatalf("probe %#x written as byte 13 = %#x", probe, p[13])
		}
		if got, err := DecodeTruc(p, BigEndian, ExtAsk); err != nil || got != h {
			t.Fatalf("with ExtAsk: %+v %v; want %+v", got, err, h)
		}
		p[13] = 0xff // an Open-MX pad
		got, err := DecodeTruc(p, BigEndian, 0)
		h.Probe = 0
		if err != nil || got != h {
			t.Fatalf("without ExtAsk, pad 0xff: %+v %v; want %+v", got, err, h)
		}
	}
}
