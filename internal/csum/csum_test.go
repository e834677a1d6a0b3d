package csum

import (
	"encoding/binary"
	"testing"
)

// The IPv4 header of the usual worked example (192.168.0.1 to
// 192.168.0.199, UDP) has the checksum 0xb861, computed by hand; written
// into its field, it makes the header fold to 0xFFFF.
func TestChecksumIPv4Header(t *testing.T) {
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	c := Checksum(h)
	if c != 0xb861 {
		t.Fatalf("Checksum = %#04x, want 0xb861", c)
	}
	binary.BigEndian.PutUint16(h[10:], c)
	if got := Fold(Add(0, h)); got != 0xFFFF {
		t.Fatalf("a header with its checksum folds to %#04x, want 0xffff", got)
	}
}

// Add in parts is Add of the whole, where every part but the last has an
// even length, and an odd last byte counts as the high byte of a word.
func TestAddParts(t *testing.T) {
	b := make([]byte, 1001)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	var want uint32
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		want += w
	}
	if got := Add(Add(0, b[:500]), b[500:]); got != want {
		t.Fatalf("Add in two parts = %#x, want %#x", got, want)
	}
	if got := Pseudo([]byte{10, 0, 0, 1, 10, 0, 0, 2}, 17, 28); got != 0x0a00+0x0001+0x0a00+0x0002+17+28 {
		t.Fatalf("Pseudo = %#x", got)
	}
}

// Fold keeps folding until no carry is left: 0x1FFFF folds to 0x10000 and
// then to 1.
func TestFold(t *testing.T) {
	for _, c := range []struct {
		s    uint32
		want uint16
	}{{0, 0}, {0xFFFF, 0xFFFF}, {0x10000, 1}, {0x1FFFF, 1}, {0xFFFFFFFF, 0xFFFF}} {
		if got := Fold(c.s); got != c.want {
			t.Errorf("Fold(%#x) = %#x, want %#x", c.s, got, c.want)
		}
	}
}
