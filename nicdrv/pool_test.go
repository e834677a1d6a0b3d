package nicdrv_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
)

func newPool(t *testing.T, n int) (*nicdrv.Pool, *emulated.E1000E) {
	t.Helper()
	p, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pool, err := nicdrv.NewPool(p.IOMMU(), nicdrv.PoolOptions{Buffers: n})
	if err != nil {
		t.Fatal(err)
	}
	return pool, p
}

func TestPool(t *testing.T) {
	pool, plat := newPool(t, 64)
	if pool.Len() != 64 || pool.Available() != 64 || pool.BufferSize() != nicdrv.BufferSize {
		t.Fatalf("pool of %d, %d free, %d bytes", pool.Len(), pool.Available(), pool.BufferSize())
	}
	bufs := make([]*nicdrv.Buffer, 100)
	n, err := pool.Alloc(bufs)
	if n != 64 || !errors.Is(err, nicdrv.ErrPoolExhausted) {
		t.Fatalf("alloc of 100 from 64: %d, %v", n, err)
	}
	seen := map[uint64]bool{}
	for _, b := range bufs[:n] {
		if len(b.Data) != nicdrv.BufferSize || b.Cap() != nicdrv.BufferSize {
			t.Fatalf("buffer Data %d bytes, cap %d", len(b.Data), b.Cap())
		}
		if seen[b.IOVA()] || b.IOVA()%64 != 0 {
			t.Fatalf("IOVA %#x repeated or unaligned", b.IOVA())
		}
		seen[b.IOVA()] = true
		if b.Pool() != pool {
			t.Fatal("buffer names another pool")
		}
	}
	if _, err := pool.Get(); !errors.Is(err, nicdrv.ErrPoolExhausted) {
		t.Errorf("Get from an empty pool: %v", err)
	}
	if err := pool.Close(); err == nil {
		t.Error("Close with every buffer out succeeded: the NIC could still write into them")
	}
	if err := pool.Free(bufs[:n]...); err != nil {
		t.Fatal(err)
	}
	if err := pool.Free(bufs[0]); !errors.Is(err, nicdrv.ErrNotPooled) {
		t.Errorf("double free: %v", err)
	}
	other, _ := newPool(t, 1)
	ob, _ := other.Get()
	if err := pool.Free(ob); err != nil {
		t.Errorf("freeing another pool's buffer through this one: %v", err)
	}
	if other.Available() != 1 {
		t.Errorf("another pool's buffer freed through this one: its pool has %d free, want 1", other.Available())
	}
	if err := other.Free(ob); !errors.Is(err, nicdrv.ErrNotPooled) {
		t.Errorf("double free through its own pool: %v", err)
	}
	b, _ := pool.Get()
	if d := b.SetLen(60); len(d) != 60 || len(b.Data) != 60 {
		t.Errorf("SetLen(60) gave %d bytes", len(d))
	}
	pool.Free(b)
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Get(); !errors.Is(err, nicdrv.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if live := plat.IOMMU().Live(); live != 0 {
		t.Errorf("%d mappings left after Close", live)
	}
}

func TestPoolOptions(t *testing.T) {
	p, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, o := range []nicdrv.PoolOptions{{Buffers: -1}, {BufferSize: 100}, {BufferSize: 3000}, {BufferSize: 32768}} {
		if pool, err := nicdrv.NewPool(p.IOMMU(), o); err == nil {
			pool.Close()
			t.Errorf("options %+v accepted", o)
		}
	}
	// A 16 KiB buffer (a jumbo frame whole) where the domain maps the
	// memory in one piece: every buffer whole, IOVA-contiguous.
	pool, err := nicdrv.NewPool(p.IOMMU(), nicdrv.PoolOptions{Buffers: 8, BufferSize: 16384})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Get()
	if err != nil || len(b.Data) != 16384 {
		t.Fatalf("Get from a pool of 16 KiB buffers: %v, %d bytes", err, len(b.Data))
	}
	_ = pool.Free(b)
	pool.Close()
	// Where each 4 KiB page is a segment of its own (no IOMMU, no
	// hugepages), a buffer above a page would straddle segments: refused.
	c, err := emulated.NewCBDMA(emulated.CBDMAOptions{Scatter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if pool, err := nicdrv.NewPool(c.IOMMU(), nicdrv.PoolOptions{Buffers: 8, BufferSize: 16384}); err == nil || !strings.Contains(err.Error(), "straddles") || !strings.Contains(err.Error(), "16384 bytes") || !strings.Contains(err.Error(), "reserve hugepages or use an IOMMU") {
		if err == nil {
			pool.Close()
		}
		t.Errorf("16 KiB buffers in 4 KiB IOVA segments: %v, want a refusal naming the buffer size and the fix", err)
	}
}

// A header-split frame is a chain: it reads whole and frees whole.
func TestPoolChain(t *testing.T) {
	pool, _ := newPool(t, 4)
	bufs := make([]*nicdrv.Buffer, 3)
	if _, err := pool.Alloc(bufs); err != nil {
		t.Fatal(err)
	}
	copy(bufs[0].SetLen(3), "hdr")
	copy(bufs[1].SetLen(4), "body")
	bufs[0].Next = bufs[1]
	if got := string(bufs[0].AppendFrame(nil)); got != "hdrbody" || bufs[0].FrameLen() != 7 || bufs[0].Segments() != 2 {
		t.Fatalf("chain reads %q, %d bytes in %d buffers", got, bufs[0].FrameLen(), bufs[0].Segments())
	}
	if err := pool.Free(bufs[0], bufs[2]); err != nil {
		t.Fatal(err)
	}
	if pool.Available() != 4 {
		t.Fatalf("%d of 4 free after freeing a chain of 2 and one more", pool.Available())
	}
	if bufs[0].Next != nil {
		t.Error("a freed buffer keeps its chain")
	}
	if err := pool.Free(bufs[1]); !errors.Is(err, nicdrv.ErrNotPooled) {
		t.Errorf("freeing a chained buffer again: %v, want ErrNotPooled", err)
	}
	b, err := pool.Get()
	if err != nil || b.Next != nil {
		t.Fatalf("Get: %v, Next %v", err, b.Next)
	}
	_ = pool.Free(b)
}

// A Buffer is one cache line: the fields the fast path touches per frame
// share it, and a pool's Buffers sit one per line.
func TestBufferIsOneCacheLine(t *testing.T) {
	if sz := reflect.TypeFor[nicdrv.Buffer]().Size(); sz != 64 {
		t.Errorf("nicdrv.Buffer is %d bytes, want 64 (one cache line): move what the fast path does not touch per frame into the Pool's arrays", sz)
	}
}
