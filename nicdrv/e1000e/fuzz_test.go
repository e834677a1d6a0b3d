package e1000e

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// FuzzRxAccept feeds arbitrary descriptor write-backs (what a device, or a
// broken one, may write) to the driver's receive decision. The oracle is
// the 82574 datasheet's rule, restated: a frame is delivered only from a
// descriptor with EOP, none of the frame-error bits, a length from an
// Ethernet header up to the buffer size, and not in the middle of a frame
// being dropped; a descriptor without EOP is always followed by its frame's
// next one.
func FuzzRxAccept(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 60, 0, 0, 0}, false)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 8, 0, 0}, false)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0xff, 0xff, 0xff, 0, 0}, true)
	f.Fuzz(func(t *testing.T, raw []byte, discarding bool) {
		if len(raw) < hw.DescSize {
			return
		}
		wb := hw.DecodeRxWriteBack(raw)
		size, deliver, next := rxAccept(wb, discarding, 2048)
		status := raw[8]
		errs := raw[11]
		length := int(raw[12]) | int(raw[13])<<8
		eop := status&2 != 0
		frameErr := errs&(1<<0|1<<1|1<<2|1<<4|1<<7) != 0 // CE SE SEQ CXE RXE in bits 31:24
		if deliver && (!eop || frameErr || discarding || length < 14 || length > 2048 || size != length) {
			t.Fatalf("delivered %d bytes from % x (discarding %v)", size, raw[:16], discarding)
		}
		if !deliver && eop && !frameErr && !discarding && length >= 14 && length <= 2048 {
			t.Fatalf("dropped a good frame: % x", raw[:16])
		}
		if next != !eop {
			t.Fatalf("discardNext %v for EOP %v", next, eop)
		}
	})
}
