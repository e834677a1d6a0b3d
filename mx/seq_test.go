package mx

import "testing"

func TestSeqArithmetic(t *testing.T) {
	cases := []struct {
		a, b   uint16
		before bool // a before b
	}{
		{0x0000, 0x0001, true},
		{0x3FFF, 0x0000, true}, // wraps inside the 14 bits
		{0x7FFF, 0x4000, true}, // same with session bits 01
		{0x4005, 0x4005, false},
		{0x0001, 0x0000, false},
		{0x0000, 0x2000, false}, // half the space away: not "before"
	}
	for _, c := range cases {
		if got := seqBefore(c.a, c.b); got != c.before {
			t.Errorf("seqBefore(%#x, %#x) = %v", c.a, c.b, got)
		}
	}
	if seqNext(0x7FFF) != 0x4000 || seqNext(0x0005) != 0x0006 {
		t.Error("seqNext must wrap inside the 14 sequence bits")
	}
	if bumpSess(0xC123) != 0x0123 || bumpSess(0x0123) != 0x4123 {
		t.Error("bumpSess must change only the session bits")
	}
	if sameSess(0x4000, 0x8000) || !sameSess(0x4000, 0x7FFF) {
		t.Error("sameSess")
	}
}
