package ioat

import (
	"context"
	"errors"
	"hash/crc32"
	"math/rand"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/pci"
)

var castagnoliTab = crc32.MakeTable(crc32.Castagnoli)

// runOne enqueues one request, submits it and waits for its completion.
func runOne(t testing.TB, q *WQ, enq func() error) Completion {
	t.Helper()
	if err := enq(); err != nil {
		t.Fatal(err)
	}
	q.Submit()
	return drain(t, q, 1)[0]
}

// TestCRC32CCombine checks the combination of two CRCs against
// hash/crc32 over the concatenation.
func TestCRC32CCombine(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		a, b := make([]byte, r.Intn(3000)), make([]byte, r.Intn(3000))
		r.Read(a)
		r.Read(b)
		seed := r.Uint32()
		want := crc32.Update(seed, castagnoliTab, append(append([]byte{}, a...), b...))
		got := crc32cCombine(crc32.Update(seed, castagnoliTab, a), crc32.Update(0, castagnoliTab, b), uint64(len(b)))
		if got != want {
			t.Fatalf("combine of %d+%d bytes: %#x, want %#x", len(a), len(b), got, want)
		}
	}
}

// TestDSACompareCRC compares equal buffers and buffers differing at one
// random byte, and generates CRC-32C over random sizes against
// hash/crc32, on a model whose IOMMU scatters pages and whose transfer
// limit is 16 KiB, so requests run as several descriptors.
func TestDSACompareCRC(t *testing.T) {
	q, _, _, _ := openDSAWQ(t, emulated.DSAOptions{Scatter: true, MaxXferShift: 14}, Options{RingSize: 512})
	const size = 1 << 20
	a, b := make([]byte, size), make([]byte, size)
	r := rand.New(rand.NewSource(2))
	r.Read(a)
	am, err := q.domain().Map(a)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := q.domain().Map(b)
	if err != nil {
		t.Fatal(err)
	}
	defer q.domain().Unmap(am)
	defer q.domain().Unmap(bm)
	for i := 0; i < 40; i++ {
		n := r.Intn(size + 1)
		if i == 0 {
			n = 0
		}
		off := r.Intn(size - n + 1)
		copy(b, a)
		c := runOne(t, q, func() error { return q.EnqueueCompare(am, off, bm, off, n, uint64(i)) })
		if c.Err != nil || c.Differ {
			t.Fatalf("equal %d bytes at %d: differ %v at %d, err %v", n, off, c.Differ, c.Offset, c.Err)
		}
		if n > 0 {
			at := r.Intn(n)
			b[off+at] ^= byte(1 + r.Intn(255))
			c = runOne(t, q, func() error { return q.EnqueueCompare(am, off, bm, off, n, uint64(i)) })
			if c.Err != nil || !c.Differ || c.Offset != at {
				t.Fatalf("%d bytes at %d differing at %d: differ %v at %d, err %v", n, off, at, c.Differ, c.Offset, c.Err)
			}
		}
		seed := r.Uint32()
		if i%2 == 0 {
			seed = 0
		}
		c = runOne(t, q, func() error { return q.EnqueueCRC(am, off, n, seed, uint64(i)) })
		if want := crc32.Update(seed, castagnoliTab, a[off:off+n]); c.Err != nil || c.CRC != want {
			t.Fatalf("CRC of %d bytes at %d from %#x: %#x, want %#x (err %v)", n, off, seed, c.CRC, want, c.Err)
		}
	}
	// Results stay with their requests among copies in one submission.
	copy(b, a)
	b[5000] ^= 1
	_ = q.EnqueueCopy(bm, 100000, am, 100000, 4096, 1)
	_ = q.EnqueueCompare(am, 0, bm, 0, 8192, 2)
	_ = q.EnqueueCRC(am, 7, 70000, 0, 3)
	_ = q.EnqueueCopy(bm, 200000, am, 200000, 4096, 4)
	q.Submit()
	res := drain(t, q, 4)
	if res[1].Tag != 2 || !res[1].Differ || res[1].Offset != 5000 || res[2].CRC != crc32.Checksum(a[7:70007], castagnoliTab) || res[0].Differ || res[3].CRC != 0 {
		t.Fatalf("mixed submission: %+v", res)
	}
}

// TestDSAOpcapLacks: a DSA whose OPCAP lacks compare or CRC generation,
// and a CBDMA channel, refuse them with pci.ErrNotSupported.
func TestDSAOpcapLacks(t *testing.T) {
	q, _, sm, dm := openDSAWQ(t, emulated.DSAOptions{NoCompare: true, NoCRC: true}, Options{})
	if info := q.Info(); info.Compare || info.CRC {
		t.Fatalf("Info says compare %v, CRC %v on a DSA without them", info.Compare, info.CRC)
	}
	if err := q.EnqueueCompare(sm, 0, dm, 0, 64, 1); !errors.Is(err, pci.ErrNotSupported) {
		t.Fatalf("compare without OPCAP: %v, want ErrNotSupported", err)
	}
	if err := q.EnqueueCRC(sm, 0, 64, 0, 1); !errors.Is(err, pci.ErrNotSupported) {
		t.Fatalf("CRC without OPCAP: %v, want ErrNotSupported", err)
	}
	var c Channel
	if err := c.EnqueueCompare(sm, 0, dm, 0, 64, 1); !errors.Is(err, pci.ErrNotSupported) {
		t.Fatalf("CBDMA compare: %v, want ErrNotSupported", err)
	}
	if err := c.EnqueueCRC(sm, 0, 64, 0, 1); !errors.Is(err, pci.ErrNotSupported) {
		t.Fatalf("CBDMA CRC: %v, want ErrNotSupported", err)
	}
	if q.Outstanding() != 0 {
		t.Fatal("a refused request left descriptors behind")
	}
}

// TestDSACompareNoAllocs: compares and CRCs, submitted and reaped,
// allocate nothing.
func TestDSACompareNoAllocs(t *testing.T) {
	q, _, sm, dm := openDSAWQ(t, emulated.DSAOptions{}, Options{RingSize: 256})
	var out [64]Completion
	allocs := testing.AllocsPerRun(50, func() {
		for i := 0; i < 16; i++ {
			if err := q.EnqueueCompare(dm, i*64, sm, i*64, 64, uint64(i)); err != nil {
				t.Fatal(err)
			}
			if err := q.EnqueueCRC(sm, i*64, 64, 0, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		q.Submit()
		for got := 0; got < 32; {
			got += q.Poll(out[:])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 16 compares and 16 CRCs", allocs)
	}
}

// TestUserWQCompareCRCFault: on the kernel path, a compare and a CRC
// whose pages fault resume after the page is touched and report the
// right result.
func TestUserWQCompareCRCFault(t *testing.T) {
	k := newKernelDSA(t)
	q := k.open(t, "wq0.0")
	defer func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	}()
	dma := k.plat.IOMMU()
	const n = 64 << 10
	a, b := pageBuf(n), pageBuf(n)
	for i := range a {
		a[i] = byte(i*7 + 3)
	}
	copy(b, a)
	b[50000] ^= 0x40
	am, _ := dma.Map(a)
	bm, _ := dma.Map(b)
	defer dma.Unmap(am)
	defer dma.Unmap(bm)
	before := q.Stats().PageFaults
	dma.MarkNotPresent(a[8192 : 8192+1])
	dma.MarkNotPresent(b[40960 : 40960+1])
	c := runOne(t, q, func() error { return q.EnqueueCompare(am, 1, bm, 1, n-1, 1) })
	if c.Err != nil || !c.Differ || c.Offset != 49999 {
		t.Fatalf("compare after faults: differ %v at %d, err %v; want the difference at 49999", c.Differ, c.Offset, c.Err)
	}
	dma.MarkNotPresent(a[20000 : 20000+1])
	c = runOne(t, q, func() error { return q.EnqueueCRC(am, 3, n-3, 0x1234, 2) })
	if want := crc32.Update(0x1234, castagnoliTab, a[3:]); c.Err != nil || c.CRC != want {
		t.Fatalf("CRC after a fault: %#x, want %#x (err %v)", c.CRC, want, c.Err)
	}
	if f := q.Stats().PageFaults - before; f < 2 {
		t.Errorf("PageFaults grew by %d, want at least 2", f)
	}
}

// TestEngineCompareCRC runs Compare and CRC32C (and their I-variants)
// through an Engine over DSA work queues, then over one whose OPCAP lacks
// them and over CBDMA channels, where the CPU computes them; the results
// agree with bytes and hash/crc32 everywhere.
func TestEngineCompareCRC(t *testing.T) {
	for _, c := range []struct {
		name    string
		b       backend
		offload bool
	}{
		{"dsa", dsaBackend(emulated.DSAOptions{}), true},
		{"dsa-without", dsaBackend(emulated.DSAOptions{NoCompare: true, NoCRC: true}), false},
		{"cbdma", emulatedBackend(emulated.CBDMAOptions{}), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, c.b, 2, offloadAll())
			r := rand.New(rand.NewSource(3))
			a := make([]byte, 1<<20)
			r.Read(a)
			b := make([]byte, len(a))
			cpu := e.CPUCopies()
			for i := 0; i < 12; i++ {
				n := 1 + r.Intn(len(a))
				copy(b, a)
				want := -1
				if i%3 != 0 {
					want = r.Intn(n)
					b[want] ^= 0x80
				}
				got, err := e.Compare(a[:n], b[:n])
				if err != nil || got != want {
					t.Fatalf("Compare of %d bytes: %d, %v; want %d", n, got, err, want)
				}
				seed := r.Uint32()
				crc, err := e.CRC32C(seed, a[:n])
				if w := crc32.Update(seed, castagnoliTab, a[:n]); err != nil || crc != w {
					t.Fatalf("CRC32C of %d bytes: %#x, %v; want %#x", n, crc, err, w)
				}
				ck, err := e.ICRC32C(0, b[:n])
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Wait(context.Background(), ck); err != nil || ck.CRC() != crc32.Checksum(b[:n], castagnoliTab) {
					t.Fatalf("ICRC32C: %#x, %v", ck.CRC(), err)
				}
			}
			if used := e.CPUCopies() - cpu; c.offload != (used == 0) {
				t.Fatalf("the CPU computed %d of the requests (offload expected: %v)", used, c.offload)
			}
			if _, err := e.Compare(a[:10], b[:11]); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("Compare of unequal lengths: %v, want ErrBadRequest", err)
			}
		})
	}
}
