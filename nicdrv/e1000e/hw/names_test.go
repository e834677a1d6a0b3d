package hw

import "testing"

func TestRegName(t *testing.T) {
	for off, want := range map[int]string{
		Q(RDT, 0): "RDT0", Q(TDT, 1): "TDT1", ICR: "ICR", STATUS: "STATUS", EITR(2): "EITR2",
		RAH(1): "RAH1", MTA + 20: "MTA[5]", GPRC: "stats 0x4074", 0x1F000: "0x1f000",
	} {
		if got := RegName(off); got != want {
			t.Errorf("RegName(%#x) = %q, want %q", off, got, want)
		}
	}
}
