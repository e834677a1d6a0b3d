package wire

import (
	"encoding/binary"
	"testing"
)

// FuzzDecode feeds arbitrary headers, in either byte order, to the decoder
// of the packet type they name. The oracle is independent of the decoders:
// a second spelling of omx_wire.h's layouts as (offset, size) tables, read
// with encoding/binary. Whatever a decoder accepts must agree field by field
// with the table, and its verdict (error or value) must not change when
// every pad byte is flipped: pads are garbage from an Open-MX peer.

type field struct {
	name      string
	off, size int
}

var layouts = map[Type]struct {
	fields []field
	pads   []int
}{
	TypeTiny:      {msgFields, []int{6, 7}},
	TypeSmall:     {msgFields, []int{6, 7}},
	TypeMedium:    {mediumFields, []int{27, 28, 29, 30, 31}},
	TypeRndv:      {append(append([]field{}, msgFields[:6]...), msgFields[7:]...), []int{6, 7}},
	TypePull:      {pullFields, []int{18, 19}},
	TypePullReply: {[]field{{"seq", 1, 1}, {"flen", 2, 2}, {"off", 4, 4}, {"handle", 8, 4}, {"magic", 12, 4}}, nil},
	TypeNotify: {[]field{{"dst", 1, 1}, {"src", 2, 1}, {"gen", 3, 1}, {"session", 4, 4}, {"total", 8, 4},
		{"rid", 12, 1}, {"rseq", 13, 1}, {"seq", 18, 2}, {"ack", 20, 2}}, []int{14, 15, 16, 17, 22, 23}},
	TypeTruc: {[]field{{"dst", 1, 1}, {"src", 2, 1}, {"gen", 3, 1}, {"session", 8, 4}, {"ack", 14, 2},
		{"acknum", 20, 4}, {"sendseq", 24, 2}}, []int{5, 6, 7, 13, 27}},
	TypeNackLib: {[]field{{"src", 1, 1}, {"gen", 2, 1}, {"kind", 3, 1}, {"dst", 9, 1}, {"peer", 10, 2},
		{"seq", 12, 2}}, []int{4, 5, 6, 7, 8, 14, 15}},
	TypeNackMCP: {[]field{{"src", 1, 1}, {"gen", 2, 1}, {"kind", 3, 1}, {"handle", 8, 4}, {"magic", 12, 4}},
		[]int{4, 5, 6, 7}},
	TypeHostQuery: {[]field{{"peer", 2, 2}, {"magic", 8, 4}}, []int{1, 4, 5, 6, 7, 12, 13, 14, 15}},
	TypeConnect: {[]field{{"dst", 1, 1}, {"src", 2, 1}, {"gen", 3, 1}, {"peer", 10, 2}, {"ssess", 16, 4},
		{"word2", 20, 4}, {"next", 24, 2}, {"attempt", 27, 1}}, []int{5, 6, 7, 8, 9, 12, 13, 14, 15}},
}

var msgFields = []field{{"dst", 1, 1}, {"src", 2, 1}, {"gen", 3, 1}, {"seq", 8, 2}, {"ack", 10, 2},
	{"session", 20, 4}, {"len", 4, 2}, {"match_a", 12, 4}, {"match_b", 16, 4}}

var mediumFields = []field{{"dst", 1, 1}, {"src", 2, 1}, {"gen", 3, 1}, {"seq", 8, 2}, {"ack", 10, 2},
	{"session", 20, 4}, {"len", 4, 4}, {"match_a", 12, 4}, {"match_b", 16, 4}, {"flen", 24, 2}, {"fidx", 26, 1}}

var pullFields = []field{{"dst", 1, 1}, {"src", 2, 1}, {"gen", 3, 1}, {"session", 4, 4}, {"total", 8, 4},
	{"rid", 12, 4}, {"rseq", 16, 1}, {"rpad", 17, 1}, {"roff", 20, 4}, {"handle", 24, 4}, {"magic", 28, 4},
	{"ffo", 32, 4}, {"blen", 36, 4}, {"fidx", 40, 4}}

func oracle(p []byte, bo binary.ByteOrder, fs []field) map[string]uint64 {
	m := make(map[string]uint64, len(fs))
	for _, f := range fs {
		switch f.size {
		case 1:
			m[f.name] = uint64(p[f.off])
		case 2:
			m[f.name] = uint64(bo.Uint16(p[f.off:]))
		case 4:
			m[f.name] = uint64(bo.Uint32(p[f.off:]))
		}
	}
	return m
}

// decoded decodes p with the decoder of its type and returns the fields it
// found under the oracle's names, or an error.
func decoded(p []byte, o Order) (map[string]uint64, any, error) {
	u := func(v ...uint64) []uint64 { return v }
	names := func(fs []field, vals []uint64) map[string]uint64 {
		m := make(map[string]uint64)
		for i, f := range fs {
			m[f.name] = vals[i]
		}
		return m
	}
	switch Type(p[0]) {
	case TypeTiny, TypeSmall:
		h, _, err := DecodeMsg(p, o)
		return names(msgFields, u(uint64(h.DstEP), uint64(h.SrcEP), uint64(h.Gen), uint64(h.Seq), uint64(h.Ack),
			uint64(h.Session), uint64(h.Length), h.Match>>32, h.Match&0xffffffff)), h, err
	case TypeMedium:
		h, _, err := DecodeMedium(p, o)
		return names(mediumFields, u(uint64(h.DstEP), uint64(h.SrcEP), uint64(h.Gen), uint64(h.Seq), uint64(h.Ack),
			uint64(h.Session), uint64(h.MsgLength), h.Match>>32, h.Match&0xffffffff, uint64(h.FragLength),
			uint64(h.FragIndex))), h, err
	case TypeRndv:
		h, err := DecodeRndv(p, o)
		return map[string]uint64{"dst": uint64(h.DstEP), "src": uint64(h.SrcEP), "gen": uint64(h.Gen),
			"seq": uint64(h.Seq), "ack": uint64(h.Ack), "session": uint64(h.Session),
			"match_a": h.Match >> 32, "match_b": h.Match & 0xffffffff}, h, err
	case TypePull:
		h, err := DecodePull(p, o, ExtReplyPad, 0)
		return names(pullFields, u(uint64(h.DstEP), uint64(h.SrcEP), uint64(h.Gen), uint64(h.Session),
			uint64(h.TotalLength), uint64(h.RegionID), uint64(h.RegionSeq), uint64(h.ReplyPad), uint64(h.RegionOffset),
			uint64(h.Handle), uint64(h.Magic), uint64(h.FirstFrameOffset), uint64(h.BlockLength),
			uint64(h.FirstFrame))), h, err
	case TypePullReply:
		h, _, err := DecodePullReply(p, o)
		return map[string]uint64{"seq": uint64(h.FrameSeq), "flen": uint64(h.FrameLength), "off": uint64(h.Offset),
			"handle": uint64(h.Handle), "magic": uint64(h.Magic)}, h, err
	case TypeNotify:
		h, err := DecodeNotify(p, o, 0) // as from an Open-MX peer: byte 14 is a pad
		return map[string]uint64{"dst": uint64(h.DstEP), "src": uint64(h.SrcEP), "gen": uint64(h.Gen),
			"session": uint64(h.Session), "total": uint64(h.PulledLength), "rid": uint64(h.RegionID),
			"rseq": uint64(h.RegionSeq), "seq": uint64(h.Seq), "ack": uint64(h.Ack)}, h, err
	case TypeTruc:
		h, err := DecodeTruc(p, o, 0) // as from an Open-MX peer: byte 13 is a pad
		return map[string]uint64{"dst": uint64(h.DstEP), "src": uint64(h.SrcEP), "gen": uint64(h.Gen),
			"session": uint64(h.Session), "ack": uint64(h.AckUpTo), "acknum": uint64(h.AckNum),
			"sendseq": uint64(h.SendSeq)}, h, err
	case TypeNackLib:
		h, err := DecodeNackLib(p, o)
		return map[string]uint64{"src": uint64(h.SrcEP), "gen": uint64(h.Gen), "kind": uint64(h.Kind),
			"dst": uint64(h.DstEP), "peer": uint64(h.PeerIndex), "seq": uint64(h.Seq)}, h, err
	case TypeNackMCP:
		h, err := DecodeNackMCP(p, o)
		return map[string]uint64{"src": uint64(h.SrcEP), "gen": uint64(h.Gen), "kind": uint64(h.Kind),
			"handle": uint64(h.Handle), "magic": uint64(h.Magic)}, h, err
	case TypeHostQuery:
		h, err := DecodeHostQuery(p, o)
		return map[string]uint64{"peer": uint64(h.YourIndex), "magic": uint64(h.Magic)}, h, err
	case TypeConnect:
		h, err := DecodeConnect(p, o)
		w2 := uint64(h.Key)
		if h.IsReply {
			w2 = uint64(h.DstSession)
		}
		return map[string]uint64{"dst": uint64(h.DstEP), "src": uint64(h.SrcEP), "gen": uint64(h.Gen),
			"peer": uint64(h.YourIndex), "ssess": uint64(h.SrcSession), "word2": w2,
			"next": uint64(h.NextRecvSeq), "attempt": uint64(h.Attempt)}, h, err
	case TypeHostReply:
		h, err := DecodeHostReply(p, o)
		return nil, h, err
	}
	return nil, nil, ErrUnknownType
}

func FuzzDecode(f *testing.F) {
	for _, v := range vectorSeeds() {
		f.Add(v, false)
		f.Add(v, true)
	}
	f.Fuzz(func(t *testing.T, p []byte, little bool) {
		if len(p) == 0 {
			return
		}
		o, bo := BigEndian, binary.ByteOrder(binary.BigEndian)
		if little {
			o, bo = LittleEndian, binary.LittleEndian
		}
		got, h, err := decoded(p, o)
		lay, known := layouts[Type(p[0])]
		if known && err == nil {
			want := oracle(p, bo, lay.fields)
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("%v field %s: decoded %#x, the layout says %#x", Type(p[0]), k, got[k], v)
				}
			}
		}
		if !known {
			return
		}
		q := append([]byte(nil), p...)
		for _, i := range lay.pads {
			if i < len(q) {
				q[i] ^= 0xA5
			}
		}
		_, h2, err2 := decoded(q, o)
		if (err == nil) != (err2 == nil) || (err == nil && h != h2) {
			t.Fatalf("pads changed the decode: %+v %v vs %+v %v", h, err, h2, err2)
		}
		if Type(p[0]) == TypeNotify && err == nil {
			// Between boards that negotiated ExtPullStatus, byte 14 is
			// the pull status and every other field reads as from
			// Open-MX.
			x, err := DecodeNotify(p, o, ExtPullStatus)
			want := h.(Notify)
			want.Failed = p[14]
			if err != nil || x != want {
				t.Fatalf("NOTIFY with ExtPullStatus: %+v %v, want %+v", x, err, want)
			}
		}
		if Type(p[0]) == TypePull && err == nil {
			// Between boards that negotiated ExtPlaceLane and
			// ExtPullAlign, byte 18 is the lane and bit 0 of byte 19
			// AlignEnd; byte 19's other bits stay a pad.
			x, err := DecodePull(p, o, ExtReplyPad, ExtPlaceLane|ExtPullAlign)
			want := h.(Pull)
			want.Lane, want.AlignEnd = p[18], p[19]&1 != 0
			if err != nil || x != want {
				t.Fatalf("PULL with ExtPlaceLane|ExtPullAlign: %+v %v, want %+v", x, err, want)
			}
			q := append([]byte(nil), p...)
			q[19] ^= 0xFE
			if y, err := DecodePull(q, o, ExtReplyPad, ExtPlaceLane|ExtPullAlign); err != nil || y != x {
				t.Fatalf("byte 19's bits 1..7 changed the decode: %+v %v vs %+v", y, err, x)
			}
			// ExtPullAlign without ExtPlaceLane: byte 19's bit 0 is
			// AlignEnd, byte 18 a pad.
			want.Lane = 0
			if y, err := DecodePull(p, o, ExtReplyPad, ExtPullAlign); err != nil || y != want {
				t.Fatalf("PULL with ExtPullAlign only: %+v %v, want %+v", y, err, want)
			}
		}
		// The frame length never exceeds the data.
		d := append([]byte{0, 0}, p...)
		if n, err := FrameLen(d, o); err == nil && n > len(d) {
			t.Fatalf("FrameLen %d past %d bytes", n, len(d))
		}
	})
}

// FuzzFrame checks Verify on arbitrary Data with and without the trailer.
func FuzzFrame(f *testing.F) {
	for _, v := range vectorSeeds() {
		d := append([]byte{0, 7}, v...)
		f.Add(Seal(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, o := range []Order{BigEndian, LittleEndian} {
			g, err := Verify(data, o, true)
			if err == nil && len(g)+ChecksumLen > len(data) {
				t.Fatal("verified frame overlaps its trailer")
			}
			if g, err := Verify(data, o, false); err == nil && len(g) > len(data) {
				t.Fatal("frame longer than data")
			}
		}
	})
}
