package ioat

import (
	"bytes"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
)

// TestCopyAsyncInvalidate: CopyAsync copies like ICopy; Invalidate drops
// the cached mappings over a buffer (the IOMMU holds none of them after),
// keeps registered buffers and the mappings of other memory, and the next
// copy maps again and still copies the right bytes.
func TestCopyAsyncInvalidate(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{}).open(t, 2)
	e, err := NewEngine(devs, offloadAll())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reg, err := e.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	src, dst := bytes.Repeat([]byte{1, 2, 3}, 100<<10), make([]byte, 300<<10)
	wait, err := e.CopyAsync(dst, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("CopyAsync: %v, equal %v", err, bytes.Equal(dst, src))
	}
	live := plat.IOMMU().Live()
	if st := e.CacheStats(); st.Entries != 3 || st.Misses != 2 {
		t.Fatalf("after one copy: %+v", st)
	}
	if n := e.Invalidate(src[1000:2000]); n != 1 {
		t.Fatalf("Invalidate(part of src) dropped %d mappings, want 1", n)
	}
	if got := plat.IOMMU().Live(); got != live-1 {
		t.Fatalf("IOMMU holds %d mappings after Invalidate, want %d", got, live-1)
	}
	if n := e.Invalidate(reg.Bytes()); n != 0 {
		t.Fatalf("Invalidate dropped %d registered buffers", n)
	}
	copy(src, bytes.Repeat([]byte{9}, len(src)))
	if err := e.Copy(dst, src); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("copy after Invalidate: %v", err)
	}
	if st := e.CacheStats(); st.Misses != 3 || st.Hits != 1 || st.Invalidations != 1 {
		t.Fatalf("after the second copy: %+v (want src mapped again, dst from the cache)", st)
	}
}
