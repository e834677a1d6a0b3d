package emulated

import "testing"

// TestFrameLimitVLAN: the 82599 model admits a frame with a VLAN tag
// (EtherType 0x8100) 4 bytes past MAXFRS.MFS, and nothing longer; an
// untagged frame, or one with another EtherType, stays at MFS.
func TestFrameLimitVLAN(t *testing.T) {
	fr := make([]byte, 14)
	for _, c := range []struct {
		etype      [2]byte
		mfs, limit int
	}{
		{[2]byte{0x81, 0x00}, 1518, 1522},
		{[2]byte{0x81, 0x00}, 9018, 9022},
		{[2]byte{0x08, 0x00}, 1518, 1518},
		{[2]byte{0x88, 0xA8}, 9018, 9018},
	} {
		fr[12], fr[13] = c.etype[0], c.etype[1]
		if got := frameLimit(fr, c.mfs, 0x8100); got != c.limit {
			t.Errorf("EtherType %#x with MFS %d: limit %d, want %d", c.etype, c.mfs, got, c.limit)
		}
	}
	fr[12], fr[13] = 0x88, 0xA8
	if got := frameLimit(fr, 1518, 0x88A8); got != 1522 {
		t.Errorf("EtherType 0x88a8 with VLNCTRL.VET 0x88a8: limit %d, want 1522", got)
	}
	if got := frameLimit(fr[:12], 1518, 0x8100); got != 1518 {
		t.Errorf("12-byte frame: limit %d, want 1518", got)
	}
}
