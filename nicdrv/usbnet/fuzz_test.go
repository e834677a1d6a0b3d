package usbnet

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf16"
)

// The oracles below are written apart from the code under test: small,
// plain decoders that follow the specifications' tables field by field.

// refNTB is a reference NTB16 decoder: NCM 1.0 §3.2.1 and §3.3.1 as a
// list of rules, with loops found by remembering visited tables.
func refNTB(b []byte) ([][]byte, bool) {
	le16 := func(o int) int { return int(b[o]) | int(b[o+1])<<8 }
	if len(b) < 12 || string(b[0:4]) != "NCMH" || le16(4) != 12 {
		return nil, false
	}
	blockLen := le16(8)
	if blockLen == 0 {
		blockLen = len(b)
	}
	if blockLen < 12 || blockLen > len(b) {
		return nil, false
	}
	var frames [][]byte
	visited := map[int]bool{}
	tables := 0
	for at := le16(10); ; {
		tables++
		if visited[at] || tables*16 > blockLen {
			return nil, false
		}
		visited[at] = true
		if at < 12 || at%4 != 0 || at+16 > blockLen || string(b[at:at+4]) != "NCM0" {
			return nil, false
		}
		length := le16(at + 4)
		if length < 16 || length%4 != 0 || at+length > blockLen {
			return nil, false
		}
		ended := false
		for e := 8; e+4 <= length; e += 4 {
			idx, n := le16(at+e), le16(at+e+2)
			if idx == 0 && n == 0 {
				ended = true
				break
			}
			if idx == 0 || n == 0 || idx < 12 || n < 14 || idx+n > blockLen {
				return nil, false
			}
			if (len(frames)+1)*14 > blockLen {
				return nil, false
			}
			frames = append(frames, b[idx:idx+n])
		}
		if !ended {
			return nil, false
		}
		if at = le16(at + 6); at == 0 {
			return frames, true
		}
	}
}

func FuzzParseNTB16(f *testing.F) {
	w := NewNTBWriter(4096, 0, 4, 0, 4)
	w.Reset(make([]byte, 4096))
	w.Add(bytes.Repeat([]byte{0xAA}, 60))
	w.Add(bytes.Repeat([]byte{0xBB}, 14), bytes.Repeat([]byte{0xCC}, 100))
	f.Add(append([]byte(nil), w.Finish(512)...))
	// Two tables chained, the second before the first.
	two := make([]byte, 200)
	copy(two, "NCMH")
	binary.LittleEndian.PutUint16(two[4:], 12)
	binary.LittleEndian.PutUint16(two[8:], 200)
	binary.LittleEndian.PutUint16(two[10:], 100)
	for _, t := range []struct{ at, next, idx, n int }{{100, 16, 40, 20}, {16, 0, 60, 30}} {
		copy(two[t.at:], "NCM0")
		binary.LittleEndian.PutUint16(two[t.at+4:], 16)
		binary.LittleEndian.PutUint16(two[t.at+6:], uint16(t.next))
		binary.LittleEndian.PutUint16(two[t.at+8:], uint16(t.idx))
		binary.LittleEndian.PutUint16(two[t.at+10:], uint16(t.n))
	}
	f.Add(two)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseNTB16(b, nil)
		want, ok := refNTB(b)
		if (err == nil) != ok {
			t.Fatalf("ParseNTB16 error %v, reference accepts: %v", err, ok)
		}
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("%d frames returned with an error", len(got))
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%d frames, reference %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d differs from the reference's", i)
			}
		}
	})
}

// FuzzNTBRoundTrip builds NTBs from frames cut out of the input with
// varied placement rules and checks that parsing gives the frames back,
// in order, byte for byte, and that the reference decoder agrees.
func FuzzNTBRoundTrip(f *testing.F) {
	f.Add([]byte("some frames of bytes, cut into pieces of varied sizes for the writer"), uint8(2), uint8(1), uint8(0), uint16(2048))
	f.Add(bytes.Repeat([]byte{1, 2, 3}, 2000), uint8(5), uint8(3), uint8(4), uint16(16384))
	f.Fuzz(func(t *testing.T, data []byte, divLog, rem, alignLog uint8, size uint16) {
		div := 1 << (divLog % 8)
		align := 1 << (alignLog % 8)
		max := 64 + int(size)%(65535-64)
		w := NewNTBWriter(max, 0, div, int(rem)%div, align)
		buf := make([]byte, max)
		w.Reset(buf)
		var sent [][]byte
		for len(data) > 0 {
			n := min(len(data), 14+int(data[0])*7)
			if n < 14 {
				break
			}
			if !w.Add(data[:n]) {
				break
			}
			sent = append(sent, data[:n])
			data = data[n:]
		}
		ntb := w.Finish(64)
		got, err := ParseNTB16(ntb, nil)
		if err != nil {
			t.Fatalf("parse a built NTB of %d frames: %v", len(sent), err)
		}
		if ref, ok := refNTB(ntb); !ok || len(ref) != len(sent) {
			t.Fatalf("the reference decoder rejects a built NTB (ok %v, %d frames)", ok, len(ref))
		}
		if len(got) != len(sent) {
			t.Fatalf("%d frames back of %d", len(got), len(sent))
		}
		for i := range got {
			if !bytes.Equal(got[i], sent[i]) {
				t.Fatalf("frame %d changed", i)
			}
			if off := cap(buf) - cap(got[i]); div >= 4 && off%div != int(rem)%div {
				t.Fatalf("frame %d at offset %d, want %d mod %d", i, off, int(rem)%div, div)
			}
		}
		if len(ntb) > max {
			t.Fatalf("NTB of %d bytes, limit %d", len(ntb), max)
		}
	})
}

// refNotes is a reference notification decoder (CDC 1.2 §6.3).
func refNotes(b []byte) ([]Notification, bool) {
	var out []Notification
	for len(b) > 0 {
		if len(b) < 8 || b[0] != 0xA1 {
			return nil, false
		}
		code := b[1]
		l := int(b[6]) | int(b[7])<<8
		if len(b) < 8+l {
			return nil, false
		}
		n := Notification{Code: code, Value: uint16(b[2]) | uint16(b[3])<<8, Interface: uint16(b[4]) | uint16(b[5])<<8}
		if code == 0x2A {
			if l != 8 {
				return nil, false
			}
			n.Down = uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16 | uint32(b[11])<<24
			n.Up = uint32(b[12]) | uint32(b[13])<<8 | uint32(b[14])<<16 | uint32(b[15])<<24
		}
		out = append(out, n)
		b = b[8+l:]
	}
	return out, true
}

func FuzzParseNotifications(f *testing.F) {
	f.Add(AppendNotification(AppendNotification(nil, Notification{Code: NotifyConnectionSpeedChange, Down: 1e8, Up: 1e8}), Notification{Code: NotifyNetworkConnection, Value: 1}))
	f.Add([]byte{0xA1, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})
	f.Add([]byte{0xA1, 0x2A, 0, 0, 0, 0, 4, 0, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseNotifications(b, nil)
		want, ok := refNotes(b)
		if (err == nil) != ok {
			t.Fatalf("error %v, reference accepts: %v", err, ok)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%d notifications, reference %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("notification %d: %+v, reference %+v", i, got[i], want[i])
			}
			if re := AppendNotification(nil, got[i]); got[i].Code == NotifyNetworkConnection || got[i].Code == NotifyConnectionSpeedChange {
				back, err := ParseNotifications(re, nil)
				if err != nil || len(back) != 1 || back[0] != got[i] {
					t.Fatalf("re-encoded notification %+v comes back as %+v, %v", got[i], back, err)
				}
			}
		}
	})
}

// refWalk splits a configuration set into descriptors with the plainest
// loop, or reports that the lengths do not add up.
func refWalk(b []byte) ([][]byte, bool) {
	var ds [][]byte
	for i := 0; i < len(b); {
		if i+2 > len(b) || b[i] < 2 || i+int(b[i]) > len(b) {
			return nil, false
		}
		ds = append(ds, b[i:i+int(b[i])])
		i += int(b[i])
	}
	return ds, true
}

func FuzzParseConfig(f *testing.F) {
	// A mass storage set; testdata holds the fake devices' CDC sets.
	f.Add([]byte{9, 2, 32, 0, 1, 1, 0, 0x80, 50, 9, 4, 0, 0, 2, 0x08, 0x06, 0x50, 0, 7, 5, 0x81, 2, 0, 2, 0, 7, 5, 0x02, 2, 0, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fns, err := ParseConfig(b)
		ds, ok := refWalk(b)
		if !ok || len(b) < 9 || b[1] != 2 || b[0] < 9 || int(binary.LittleEndian.Uint16(b[2:])) != len(b) {
			if err == nil {
				t.Fatalf("a set whose lengths do not add up parsed: %d functions", len(fns))
			}
			return
		}
		if err != nil {
			return // a rule above the lengths (counts, missing descriptors): checked by the unit tests
		}
		// Every function the parser found is there in the descriptors:
		// its control interface with the model's subclass and its three
		// functional descriptors, its data interface's setting with both
		// bulk endpoints.
		comm := 0
		for _, d := range ds {
			if d[1] == 4 && len(d) >= 9 && d[3] == 0 && d[5] == 2 && (d[6] == 6 || d[6] == 0x0D) {
				comm++
			}
		}
		if comm != len(fns) {
			t.Fatalf("%d CDC networking interfaces in the set, %d functions parsed", comm, len(fns))
		}
		for _, fn := range fns {
			var iface []byte
			var inData, inCtrl bool
			var haveIn, haveOut, haveEth bool
			for _, d := range ds {
				if d[1] == 4 && len(d) >= 9 {
					iface = d
					inCtrl = int(d[2]) == fn.Control && d[3] == 0
					inData = int(d[2]) == fn.Data && int(d[3]) == fn.DataAlt
					continue
				}
				if iface == nil {
					continue
				}
				if inCtrl && d[1] == 0x24 && len(d) >= 13 && d[2] == 0x0F && int(d[3]) == fn.MACString {
					haveEth = true
				}
				if inData && d[1] == 5 && len(d) >= 7 && d[3]&3 == 2 {
					mp := int(binary.LittleEndian.Uint16(d[4:]) & 0x7FF)
					if d[2] == fn.BulkIn.Address && mp == fn.BulkIn.MaxPacket && d[2]&0x80 != 0 {
						haveIn = true
					}
					if d[2] == fn.BulkOut.Address && mp == fn.BulkOut.MaxPacket && d[2]&0x80 == 0 {
						haveOut = true
					}
				}
			}
			if !haveIn || !haveOut || !haveEth {
				t.Fatalf("function %v: bulk IN found %v, OUT %v, Ethernet descriptor %v", fn, haveIn, haveOut, haveEth)
			}
		}
	})
}

// FuzzParseMACString checks the string descriptor and MAC decoders against
// the standard library's UTF-16 and hex decoders.
func FuzzParseMACString(f *testing.F) {
	f.Add([]byte{26, 3, '0', 0, '2', 0, '0', 0, '0', 0, '0', 0, '0', 0, '0', 0, '0', 0, '0', 0, '0', 0, '0', 0, 'A', 0})
	f.Add([]byte{4, 3, 0x09, 0x04})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseString(b)
		valid := len(b) >= 2 && b[1] == 3 && b[0] >= 2 && b[0]%2 == 0 && int(b[0]) <= len(b)
		if (err == nil) != valid {
			t.Fatalf("ParseString error %v, descriptor valid: %v", err, valid)
		}
		if err != nil {
			return
		}
		u := make([]uint16, 0)
		for i := 2; i < int(b[0]); i += 2 {
			u = append(u, uint16(b[i])|uint16(b[i+1])<<8)
		}
		if want := string(utf16.Decode(u)); s != want {
			t.Fatalf("string %q, want %q", s, want)
		}
		m, err := ParseMAC(s)
		raw, herr := hex.DecodeString(s)
		good := herr == nil && len(raw) == 6 && raw[0]&1 == 0 && !bytes.Equal(raw, make([]byte, 6)) && !strings.ContainsAny(s, "+- ")
		if (err == nil) != good {
			t.Fatalf("ParseMAC(%q) error %v, hex decoding says valid: %v", s, err, good)
		}
		if err == nil && !bytes.Equal(m[:], raw) {
			t.Fatalf("ParseMAC(%q) = %v, hex gives % x", s, m, raw)
		}
	})
}
