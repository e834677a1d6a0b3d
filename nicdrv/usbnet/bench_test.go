package usbnet_test

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/usbnet"
)

// BenchmarkNTB16 builds and parses NTBs of ten 1514-byte frames, the NCM
// driver's per-transfer framing work; it must not allocate.
func BenchmarkNTB16(b *testing.B) {
	frame := make([]byte, 1514)
	buf := make([]byte, 16384)
	w := usbnet.NewNTBWriter(len(buf), 0, 4, 0, 4)
	out := make([][]byte, 0, 16)
	b.ReportAllocs()
	b.SetBytes(10 * 1514)
	for b.Loop() {
		w.Reset(buf)
		for range 10 {
			w.Add(frame)
		}
		got, err := usbnet.ParseNTB16(w.Finish(512), out[:0])
		if err != nil || len(got) != 10 {
			b.Fatalf("%d frames, %v", len(got), err)
		}
	}
}
