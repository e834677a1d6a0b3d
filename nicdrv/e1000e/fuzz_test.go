package e1000e

import (
	"slices"
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

// FuzzPSAccept feeds arbitrary 32-byte packet split write-backs to the
// driver's receive decision for header split. The oracle reads the bytes
// itself, at the offsets of Linux's union e1000_rx_desc_packet_split
// (status at 8, length0 at 12, header status at 16, lengths of buffers 1
// to 3 at 18, 20, 22), and restates the rule: deliver only a whole frame
// (EOP, no frame error, not inside a frame being dropped) whose buffer 0
// holds at least an Ethernet header, whose buffers 0 and 1 fit the
// driver's 2 KiB buffers, which uses no buffer 2 or 3 (the driver gave
// none), and whose header length, when HDRSP says it was split, is buffer
// 0's length; then deliver exactly those lengths.
func FuzzPSAccept(f *testing.F) {
	split := make([]byte, 32)
	split[8], split[12], split[16], split[17], split[18], split[19] = 3, 42, 42, 0x80, 0xE8, 0x03
	f.Add(split, false)
	whole := make([]byte, 32)
	whole[8], whole[12], whole[13] = 3, 0xEA, 0x05
	f.Add(whole, false)
	over := slices.Clone(whole)
	over[13] = 0x08 // 2282 bytes in buffer 0
	f.Add(over, false)
	f.Add(split, true)
	f.Fuzz(func(t *testing.T, raw []byte, discarding bool) {
		if len(raw) < hw.PSDescSize {
			return
		}
		le := func(i int) int { return int(raw[i]) | int(raw[i+1])<<8 }
		eop := raw[8]&2 != 0
		frameErr := raw[11]&(1<<0|1<<1|1<<2|1<<4|1<<7) != 0
		l0, l1, l2, l3 := le(12), le(18), le(20), le(22)
		hdrSplit, hdrLen := raw[17]&0x80 != 0, le(16)&0x3FF
		good := eop && !frameErr && !discarding && l0 >= 14 && l0 <= 2048 && l1 <= 2048 && l2 == 0 && l3 == 0 && (!hdrSplit || hdrLen == l0)
		hdr, pay, deliver, next := psAccept(hw.DecodeRxPSWriteBack(raw), discarding, 2048)
		if deliver != good {
			t.Fatalf("deliver %v, want %v for % x (discarding %v)", deliver, good, raw[:32], discarding)
		}
		if deliver && (hdr != l0 || pay != l1) {
			t.Fatalf("delivered %d + %d bytes, the descriptor says %d + %d", hdr, pay, l0, l1)
		}
		if next != !eop {
			t.Fatalf("discardNext %v for EOP %v", next, eop)
		}
	})
}

// FuzzPlaceAccept feeds arbitrary written-back packet split descriptors
// to a placing queue's acceptance, for a placement or a pool buffer (a
// buffer 1 of payCap bytes). The oracle reads the descriptor bytes itself:
// deliver exactly when EOP is set, no frame error, not discarding, buffer
// 0 holds an Ethernet header and at most the 128-byte header buffer,
// buffer 1 at most payCap, buffers 2 and 3 nothing, and either HDRSP with
// the header length equal to buffer 0's, or no HDRSP with buffer 0 full
// whenever buffer 1 holds anything; then deliver exactly those lengths.
func FuzzPlaceAccept(f *testing.F) {
	placed := make([]byte, 32)
	placed[8], placed[12], placed[18], placed[19] = 3, 128, 0x6A, 0x05 // 128 + 1386
	f.Add(placed, false, uint16(1488))
	small := make([]byte, 32)
	small[8], small[12] = 3, 60
	f.Add(small, false, uint16(1488))
	split := make([]byte, 32)
	split[8], split[12], split[16], split[17], split[18], split[19] = 3, 42, 42, 0x80, 0xC0, 0x05
	f.Add(split, false, uint16(1920))
	short := slices.Clone(placed)
	short[12] = 100 // buffer 1 written before buffer 0 was full
	f.Add(short, false, uint16(1488))
	f.Add(placed, true, uint16(1000))
	f.Fuzz(func(t *testing.T, raw []byte, discarding bool, payCap uint16) {
		if len(raw) < hw.PSDescSize {
			return
		}
		le := func(i int) int { return int(raw[i]) | int(raw[i+1])<<8 }
		eop := raw[8]&2 != 0
		frameErr := raw[11]&(1<<0|1<<1|1<<2|1<<4|1<<7) != 0
		l0, l1, l2, l3 := le(12), le(18), le(20), le(22)
		hdrSplit, hdrLen := raw[17]&0x80 != 0, le(16)&0x3FF
		layout := hdrSplit && hdrLen == l0 || !hdrSplit && (l1 == 0 || l0 == 128)
		good := eop && !frameErr && !discarding && l0 >= 14 && l0 <= 128 && l1 <= int(payCap) && l2 == 0 && l3 == 0 && layout
		hdr, pay, deliver, next := placeAccept(hw.DecodeRxPSWriteBack(raw), discarding, 128, int(payCap))
		if deliver != good {
			t.Fatalf("deliver %v, want %v for % x (discarding %v, payCap %d)", deliver, good, raw[:32], discarding, payCap)
		}
		if deliver && (hdr != l0 || pay != l1) {
			t.Fatalf("delivered %d + %d bytes, the descriptor says %d + %d", hdr, pay, l0, l1)
		}
		if next != !eop {
			t.Fatalf("discardNext %v for EOP %v", next, eop)
		}
	})
}
