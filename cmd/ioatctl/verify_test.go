package main

import (
	"errors"
	"strings"
	"testing"
)

// TestVerifyCatchesCorruption feeds verify's checks destinations that the
// "engine" got wrong in each way verify promises to notice.
func TestVerifyCatchesCorruption(t *testing.T) {
	src := make([]byte, verifyBuf)
	fillRandom(src, 3)
	for _, tc := range []struct {
		name    string
		op      vop
		corrupt func(dst []byte, op vop)
		want    string
	}{
		{"copy wrong byte", vop{srcOff: 100, dstOff: 9000, n: 5000},
			func(dst []byte, op vop) { dst[op.dstOff+17] ^= 1 }, "inside the range"},
		{"copy past the end", vop{srcOff: 0, dstOff: 20000, n: 4096},
			func(dst []byte, op vop) { dst[op.dstOff+op.n] ^= 0xFF }, "in the guard bytes"},
		{"fill before the start", vop{fill: true, dstOff: 4096 * 3, n: 64, pattern: 0x0102030405060708},
			func(dst []byte, op vop) { dst[op.dstOff-1] = 0x08 }, "in the guard bytes"},
		{"fill wrong phase", vop{fill: true, dstOff: 8192 + 3, n: 64, pattern: 0x0102030405060708},
			func(dst []byte, op vop) { patternFill(dst[op.dstOff+8:op.dstOff+op.n], 0x0807060504030201) }, "inside the range"},
		{"engine error", vop{dstOff: 0, n: 10, err: errors.New("CHANERR=0x100 (read data)")},
			func([]byte, vop) {}, "read data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What a correct engine would have done (checkOp applies
			// the operation to its expectation, here dst itself)...
			dst := make([]byte, verifyBuf)
			good := tc.op
			good.err = nil
			checkOp(&good, src, dst, dst, &verifyStats{})
			// ...then the fault, checked against a fresh expectation.
			tc.corrupt(dst, tc.op)
			want := make([]byte, verifyBuf)
			var st verifyStats
			op := tc.op
			checkOp(&op, src, dst, want, &st)
			if st.failed() != 1 || !strings.Contains(st.First, tc.want) {
				t.Errorf("failures %d, first %q; want 1 failure mentioning %q", st.failed(), st.First, tc.want)
			}
			// The failure is reported once: the whole-buffer check that
			// follows finds the expectation resynchronised.
			checkWhole(dst, want, &st)
			if st.StrayWrites != 0 {
				t.Errorf("the same fault was counted again as a stray write")
			}
		})
	}

	// A write far from every operation is a stray write.
	dst, want := make([]byte, verifyBuf), make([]byte, verifyBuf)
	dst[verifyBuf-1] = 1
	var st verifyStats
	checkWhole(dst, want, &st)
	if st.StrayWrites != 1 || !strings.Contains(st.First, "outside every operation") {
		t.Errorf("stray write: %+v", st)
	}
}

// TestCheckSlots checks that copy --verify finds a wrong byte in a slot.
func TestCheckSlots(t *testing.T) {
	b := make([]byte, 4*slotStride(100))
	d := make([]byte, len(b))
	fillRandom(b, 9)
	for k := range 4 {
		copy(slot(d, k, 100), slot(b, k, 100))
	}
	if err := checkSlots(b, d, 100, 4); err != nil {
		t.Fatalf("equal slots: %v", err)
	}
	slot(d, 2, 100)[99] ^= 1
	if err := checkSlots(b, d, 100, 4); err == nil || !strings.Contains(err.Error(), "slot 2, byte 99") {
		t.Errorf("corrupt slot: %v", err)
	}
}
