package mx

import (
	"math/big"
	"testing"
)

// FuzzSharedEntry checks the receiver's check of a shared-table entry,
// which another process writes, against arbitrary-precision arithmetic: it
// accepts exactly the entries whose buffer lies in the segment and covers
// the message, and the range it returns lies in the segment.
func FuzzSharedEntry(f *testing.F) {
	f.Add(uint64(0), uint64(4096), uint16(0), uint32(4096), 4096)
	f.Add(uint64(4096), uint64(1<<20), uint16(100), uint32(1<<20-100), 2<<20)
	f.Add(^uint64(0), uint64(2), uint16(0), uint32(1), 8192)
	f.Add(uint64(10), ^uint64(0)-5, uint16(1), uint32(1), 8192)
	f.Fuzz(func(t *testing.T, off, n uint64, refOff uint16, total uint32, segLen int) {
		if segLen < 0 {
			segLen = -segLen
			if segLen < 0 {
				segLen = 0
			}
		}
		start, end, ok := sharedSource(off, n, refOff, total, segLen)
		bi := func(v uint64) *big.Int { return new(big.Int).SetUint64(v) }
		bufEnd := new(big.Int).Add(bi(off), bi(n))
		msgEnd := new(big.Int).Add(bi(uint64(refOff)), bi(uint64(total)))
		want := bufEnd.Cmp(big.NewInt(int64(segLen))) <= 0 && msgEnd.Cmp(bi(n)) <= 0
		if ok != want {
			t.Fatalf("sharedSource(%d, %d, %d, %d, %d) ok = %v, want %v", off, n, refOff, total, segLen, ok, want)
		}
		if ok && (end-start != uint64(total) || end > uint64(segLen) || start != off+uint64(refOff)) {
			t.Fatalf("sharedSource(%d, %d, %d, %d, %d) = [%d, %d)", off, n, refOff, total, segLen, start, end)
		}
	})
}
