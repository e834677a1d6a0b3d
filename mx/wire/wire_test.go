package wire

import (
	"bytes"
	"errors"
	"testing"
)

// frame builds Data = peer index + header + payload + CRC.
func frame(put func(p []byte) int) []byte {
	b := make([]byte, 10000)
	PutPeerIndex(b, 7, BigEndian)
	n := HeadLen + put(b[HeadLen:])
	n = SealInPlace(b, n)
	return b[:n]
}

func TestVerifyAndPadding(t *testing.T) {
	msg := Msg{Type: TypeSmall, DstEP: 1, SrcEP: 2, Length: 100, Seq: 0x4001}
	f := frame(func(p []byte) int { msg.Put(p, BigEndian); return MsgLen + 100 })
	// Ethernet padding after the trailer must not matter.
	f = append(f, 0, 0, 0)
	g, err := Verify(f, BigEndian, true)
	if err != nil || len(g) != HeadLen+MsgLen+100 {
		t.Fatalf("verify: %d %v", len(g), err)
	}
	// Without the checksum, a trailer is just ignored bytes.
	if g2, err := Verify(f, BigEndian, false); err != nil || !bytes.Equal(g, g2) {
		t.Fatalf("verify without checksum: %v", err)
	}
}

func TestRejects(t *testing.T) {
	tiny := Msg{Type: TypeTiny, Length: 8}
	good := frame(func(p []byte) int { tiny.Put(p, BigEndian); return MsgLen + 8 })
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"head only", []byte{0, 0}, ErrShort},
		{"unknown type", []byte{0, 0, 99, 0, 0, 0}, ErrUnknownType},
		{"short header", good[:10], ErrShort},
		{"short payload", good[:HeadLen+MsgLen+4], ErrShort},
		{"no trailer", good[:len(good)-4], ErrShort},
		{"bit flip", func() []byte { b := bytes.Clone(good); b[HeadLen+20] ^= 1; return b }(), ErrChecksum},
		{"tiny too long", func() []byte {
			m := Msg{Type: TypeTiny, Length: 33}
			return frame(func(p []byte) int { m.Put(p, BigEndian); return MsgLen + 33 })
		}(), ErrBadLength},
	}
	for _, c := range cases {
		if _, err := Verify(c.data, BigEndian, true); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// Medium fragments that do not fit their message at a stride of 256.
	for _, m := range []Medium{
		{MsgLength: 1000, FragIndex: 4, FragLength: 1},     // index past the end
		{MsgLength: 1000, FragIndex: 0, FragLength: 255},   // wrong length
		{MsgLength: 1000, FragIndex: 3, FragLength: 256},   // the last one is shorter
		{MsgLength: 100000, FragIndex: 0, FragLength: 256}, // more than 32 fragments
	} {
		f := frame(func(p []byte) int { m.Put(p, BigEndian); return MediumLen + int(m.FragLength) })
		h, _, err := DecodeMedium(f[HeadLen:], BigEndian)
		if err == nil {
			err = h.Check(256)
		}
		if !errors.Is(err, ErrBadLength) {
			t.Errorf("medium %+v: %v", m, err)
		}
	}
	ok := Medium{MsgLength: 1000, FragIndex: 3, FragLength: 232}
	if err := ok.Check(256); err != nil || ok.Offset(256) != 768 || ok.Frags(256) != 4 {
		t.Errorf("last fragment: %v", err)
	}
	// A fragment longer than the message, an empty one.
	for _, m := range []Medium{{MsgLength: 10, FragLength: 11}, {MsgLength: 10}} {
		f := frame(func(p []byte) int { m.Put(p, BigEndian); return MediumLen + int(m.FragLength) })
		if _, _, err := DecodeMedium(f[HeadLen:], BigEndian); !errors.Is(err, ErrBadLength) {
			t.Errorf("medium %+v: %v", m, err)
		}
	}
	// An RNDV whose data length is below 8; a connect below 16.
	b := make([]byte, 64)
	(&Rndv{}).Put(b, BigEndian)
	b[5] = 7
	if _, err := DecodeRndv(b, BigEndian); !errors.Is(err, ErrBadLength) {
		t.Errorf("rndv length 7: %v", err)
	}
	b[5] = 9 // Open-MX accepts more than 8
	if _, err := DecodeRndv(b, BigEndian); err != nil {
		t.Errorf("rndv length 9: %v", err)
	}
	(&Connect{}).Put(b, BigEndian)
	b[4] = 15
	if _, err := DecodeConnect(b, BigEndian); !errors.Is(err, ErrBadLength) {
		t.Errorf("connect length 15: %v", err)
	}
}

// TestPullFrames checks Open-MX's frame geometry (omx_wire.h's pull
// protocol comment) on a worked example: L = 8968, the message at region
// offset 100, 20000 bytes: frame 0 is the 8868 bytes up to the first region
// boundary, frame 1 the next 8968, frame 2 the remaining 2164.
func TestPullFrames(t *testing.T) {
	g := PullFrames{Total: 20000, L: 8968, Skew: 100}
	if g.Count() != 3 {
		t.Fatalf("count %d", g.Count())
	}
	want := [][2]int{{0, 8868}, {8868, 17836}, {17836, 20000}}
	for k, w := range want {
		if g.Start(k) != w[0] || g.End(k) != w[1] || g.Index(w[0]) != k {
			t.Errorf("frame %d: [%d,%d) index %d, want %v", k, g.Start(k), g.End(k), g.Index(w[0]), w)
		}
	}
	for _, off := range []int{1, 8867, 8869, 20000, -1} {
		if g.Index(off) != -1 {
			t.Errorf("offset %d is not a frame start, got index %d", off, g.Index(off))
		}
	}
	if (PullFrames{Total: 8968, L: 8968}).Count() != 1 {
		t.Error("one exact frame")
	}
}

// TestPullReplyPad: a PULL's reply pad is byte 17, written by Put and read
// by DecodePull only between boards that negotiated ExtReplyPad (Open-MX
// leaves that byte, its pad, unwritten).
func TestPullReplyPad(t *testing.T) {
	for _, o := range []Order{BigEndian, LittleEndian} {
		h := Pull{DstEP: 1, SrcEP: 2, BlockLength: 100, ReplyPad: 32}
		p := make([]byte, PullLen)
		h.Put(p, o)
		if p[17] != 32 || p[18] != 0 || p[19] != 0 {
			t.Fatalf("bytes 17..19 = % x, want 20 00 00", p[17:20])
		}
		if g, err := DecodePull(p, o, ExtReplyPad, 0); err != nil || g != h {
			t.Errorf("negotiated: got %+v %v, want %+v", g, err, h)
		}
		if g, err := DecodePull(p, o, 0, 0); err != nil || g.ReplyPad != 0 {
			t.Errorf("not negotiated: got ReplyPad %d %v, want 0", g.ReplyPad, err)
		}
	}
}

// TestPullLane: a PULL's reply lane is byte 18, read only between boards
// that negotiated ExtPlaceLane (a pad of Open-MX's otherwise).
func TestPullLane(t *testing.T) {
	for _, o := range []Order{BigEndian, LittleEndian} {
		h := Pull{DstEP: 1, SrcEP: 2, BlockLength: 100, ReplyPad: 32, Lane: 3}
		p := make([]byte, PullLen)
		h.Put(p, o)
		if p[17] != 32 || p[18] != 3 || p[19] != 0 {
			t.Fatalf("bytes 17..19 = % x, want 20 03 00", p[17:20])
		}
		if g, err := DecodePull(p, o, ExtReplyPad, ExtPlaceLane); err != nil || g != h {
			t.Errorf("negotiated: got %+v %v, want %+v", g, err, h)
		}
		if g, err := DecodePull(p, o, ExtReplyPad, 0); err != nil || g.Lane != 0 {
			t.Errorf("not negotiated: got Lane %d %v, want 0", g.Lane, err)
		}
	}
}

// TestPullAlignEnd: a PULL's AlignEnd is bit 0 of byte 19, read only
// between boards that negotiated ExtPullAlign (a pad of Open-MX's
// otherwise), and AlignEnd's geometry ends on a full frame.
func TestPullAlignEnd(t *testing.T) {
	for _, o := range []Order{BigEndian, LittleEndian} {
		h := Pull{DstEP: 1, SrcEP: 2, BlockLength: 100, ReplyPad: 32, Lane: 3, AlignEnd: true}
		p := make([]byte, PullLen)
		h.Put(p, o)
		if p[17] != 32 || p[18] != 3 || p[19] != 1 {
			t.Fatalf("bytes 17..19 = % x, want 20 03 01", p[17:20])
		}
		if g, err := DecodePull(p, o, ExtReplyPad, ExtPlaceLane|ExtPullAlign); err != nil || g != h {
			t.Errorf("negotiated: got %+v %v, want %+v", g, err, h)
		}
		if g, err := DecodePull(p, o, ExtReplyPad, ExtPlaceLane); err != nil || g.AlignEnd {
			t.Errorf("not negotiated: got AlignEnd %v %v, want false", g.AlignEnd, err)
		}
	}
	for _, c := range []struct{ total, L, first int }{{1 << 20, 1450, 226}, {1<<20 + 1, 1450, 227}, {2900, 1450, 1450}, {100, 1450, 100}} {
		g := PullFrames{Total: c.total, L: c.L, Skew: AlignEnd(c.total, c.L)}
		n := g.Count()
		if g.End(0) != c.first || g.Start(n-1) != c.total-c.L && n > 1 || g.End(n-1) != c.total || n != (c.total+c.L-1)/c.L {
			t.Errorf("%d bytes in frames of %d: %d frames, the first [0,%d), the last [%d,%d); want %d frames, the first %d bytes, the last full",
				c.total, c.L, n, g.End(0), g.Start(n-1), g.End(n-1), (c.total+c.L-1)/c.L, c.first)
		}
	}
}

// TestConnectExtMore: the second block of the connect extension is
// written only with More flags (so a board without them sends the 24 data
// bytes an older gomx board reads), and read only when the data length
// says it is there.
func TestConnectExtMore(t *testing.T) {
	for _, more := range []uint8{0, ExtPlaceLane} {
		h := Connect{DstEP: 1, HasExt: true, Ext: ConnectExt{Version: ConnectExtVersion, Flags: ExtAsk, MaxFrame: 1500, More: more}}
		p := make([]byte, ConnectLen+ConnectExtLen+ConnectExtMoreLen)
		h.Put(p, BigEndian)
		want := ConnectLen + ConnectExtLen
		if more != 0 {
			want += ConnectExtMoreLen
		}
		if h.Len() != want || int(p[4])+16 != want {
			t.Fatalf("More %#x: Len %d, data length %d, want %d", more, h.Len(), p[4], want)
		}
		g, err := DecodeConnect(p[:want], BigEndian)
		if err != nil || g != h {
			t.Errorf("More %#x: got %+v %v, want %+v", more, g, err, h)
		}
		f := append(make([]byte, HeadLen), p[:want]...)
		if n, err := FrameLen(f, BigEndian); err != nil || n != HeadLen+want {
			t.Errorf("More %#x: FrameLen %d %v, want %d", more, n, err, HeadLen+want)
		}
	}
}
