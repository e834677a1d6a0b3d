package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestLaneRoundTrip: a header and payload put with PutLane decode to the
// same fields and bytes, in the documented layout.
func TestLaneRoundTrip(t *testing.T) {
	h := Lane{DstEP: 3, SrcEP: 200, Seq: 0x4abc, Ack: 0x4001, Length: 5, Session: 0xdeadbeef, Match: 0x0102030405060708}
	rec := make([]byte, LaneLen+5)
	PutLane(rec, &h)
	copy(rec[LaneLen:], "hello")
	want := []byte{0, 0, byte(TypeLane), 0, 3, 200, 0xbc, 0x4a, 0x01, 0x40, 5, 0, 0xef, 0xbe, 0xad, 0xde,
		8, 7, 6, 5, 4, 3, 2, 1}
	if !bytes.Equal(rec[:LaneLen], want) {
		t.Fatalf("header % x, want % x", rec[:LaneLen], want)
	}
	var got Lane
	pl, err := DecodeLane(rec, &got)
	if err != nil || got != h || string(pl) != "hello" {
		t.Fatalf("DecodeLane = %+v %q %v, want %+v \"hello\"", got, pl, err, h)
	}
	// A medium of one fragment, up to LaneMediumMax.
	for _, n := range []int{LaneMax + 1, 4096, LaneMediumMax} {
		h.Length = uint16(n)
		rec = make([]byte, LaneLen+n)
		PutLane(rec, &h)
		for i := LaneLen; i < len(rec); i++ {
			rec[i] = byte(i)
		}
		pl, err = DecodeLane(rec, &got)
		if err != nil || got != h || !bytes.Equal(pl, rec[LaneLen:]) {
			t.Fatalf("DecodeLane of %d bytes = %+v %v, want %+v and the payload", n, got, err, h)
		}
	}
}

// TestLaneRejects: records another process could have written wrong are
// refused with the error that names the field.
func TestLaneRejects(t *testing.T) {
	good := func(n int) []byte {
		rec := make([]byte, LaneLen+n)
		PutLane(rec, &Lane{Length: uint16(n)})
		return rec
	}
	cases := []struct {
		name string
		rec  []byte
		err  error
	}{
		{"short", good(0)[:LaneLen-1], ErrShort},
		{"type", func() []byte { r := good(0); r[2] = byte(TypeTiny); return r }(), ErrUnknownType},
		{"reserved", func() []byte { r := good(0); r[3] = 1; return r }(), ErrUnknownType},
		{"length past the record", func() []byte { r := good(4); r[10] = 5; return r }(), ErrBadLength},
		{"length short of the record", func() []byte { r := good(4); r[10] = 3; return r }(), ErrBadLength},
		{"above LaneMediumMax", func() []byte {
			r := make([]byte, LaneLen+LaneMediumMax+1)
			PutLane(r, &Lane{Length: LaneMediumMax + 1})
			return r
		}(), ErrBadLength},
	}
	for _, c := range cases {
		var h Lane
		if _, err := DecodeLane(c.rec, &h); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
}

// FuzzDecodeLane: whatever bytes a ring record holds, DecodeLane never
// panics, and what it accepts agrees field by field with the layout read
// independently, its payload being exactly the bytes after the header.
func FuzzDecodeLane(f *testing.F) {
	rec := make([]byte, LaneLen+8)
	PutLane(rec, &Lane{DstEP: 1, SrcEP: 2, Seq: 3, Ack: 4, Length: 8, Session: 5, Match: 6})
	f.Add(rec)
	f.Add(rec[:LaneLen])
	big := make([]byte, LaneLen+LaneMediumMax)
	PutLane(big, &Lane{Length: LaneMediumMax})
	f.Add(big)
	f.Add([]byte{0, 0, byte(TypeLane)})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Lane
		pl, err := DecodeLane(data, &h)
		if err != nil {
			return
		}
		le := binary.LittleEndian
		if data[2] != byte(TypeLane) || h.DstEP != data[4] || h.SrcEP != data[5] || h.Seq != le.Uint16(data[6:]) ||
			h.Ack != le.Uint16(data[8:]) || h.Session != le.Uint32(data[12:]) || h.Match != le.Uint64(data[16:]) {
			t.Fatalf("decoded %+v from % x", h, data)
		}
		if int(h.Length) > LaneMediumMax || !bytes.Equal(pl, data[24:]) || int(h.Length) != len(pl) {
			t.Fatalf("length %d, payload %d bytes of a %d-byte record", h.Length, len(pl), len(data))
		}
	})
}
