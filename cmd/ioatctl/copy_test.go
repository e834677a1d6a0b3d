package main

import "testing"

func TestSweepSizes(t *testing.T) {
	s := sweepSizes()
	if len(s) != 12 || s[0] != 4<<10 || s[len(s)-1] != 8<<20 {
		t.Errorf("sweepSizes() = %v, want 4 KiB to 8 MiB doubling", s)
	}
}
