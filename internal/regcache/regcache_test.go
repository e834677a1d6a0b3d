package regcache

import (
	"errors"
	"testing"
)

// book is a fake device domain: it records what is mapped.
type book struct {
	live  map[int]bool
	next  int
	fails bool
}

func (b *book) mapFn(mem []byte) (int, error) {
	if b.fails {
		return 0, errors.New("refused")
	}
	b.next++
	b.live[b.next] = true
	return b.next, nil
}

func (b *book) unmapFn(m int) error {
	if !b.live[m] {
		return errors.New("unmapped twice")
	}
	delete(b.live, m)
	return nil
}

func newBook(limit int64) (*book, *Cache[int]) {
	b := &book{live: map[int]bool{}}
	return b, New(b.mapFn, b.unmapFn, limit)
}

// TestHitsAndContainment: memory inside a cached mapping reuses it, at its
// offset; memory reaching past it gets a mapping of its own.
func TestHitsAndContainment(t *testing.T) {
	bk, c := newBook(1 << 20)
	mem := make([]byte, 8192)
	e, off, err := c.Get(mem)
	if err != nil || off != 0 {
		t.Fatal(off, err)
	}
	c.Put(e)
	e2, off, err := c.Get(mem[100:200])
	if err != nil || e2 != e || off != 100 {
		t.Fatalf("a slice inside a cached buffer: entry %p (want %p), offset %d (want 100), %v", e2, e, off, err)
	}
	c.Put(e2)
	big := mem[:cap(mem)]
	if _, _, err := c.Get(append(big[:0:0], big...)); err != nil { // other memory
		t.Fatal(err)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 2 || len(bk.live) != 2 {
		t.Errorf("stats %+v, %d live mappings; want 1 hit, 2 misses, 2 live", s, len(bk.live))
	}
}

// TestInvalidate: an invalidated idle entry is unmapped at once; one in
// use is never found again and is unmapped by its last Put; memory mapped
// again at the same address gets a fresh mapping.
func TestInvalidate(t *testing.T) {
	bk, c := newBook(1 << 20)
	mem := make([]byte, 4096)
	e, _, _ := c.Get(mem)
	first := e.Mapping()
	if n := c.Invalidate(mem[10:20]); n != 1 {
		t.Fatalf("Invalidate dropped %d entries, want 1", n)
	}
	if !bk.live[first] {
		t.Fatal("a mapping in use was unmapped by Invalidate")
	}
	e2, _, _ := c.Get(mem)
	if e2 == e || e2.Mapping() == first {
		t.Fatal("Get found the invalidated mapping")
	}
	c.Put(e)
	if bk.live[first] {
		t.Fatal("the last Put of an invalidated entry did not unmap it")
	}
	c.Put(e2)
	c.Invalidate(mem)
	if len(bk.live) != 0 {
		t.Fatalf("%d mappings live after invalidating everything", len(bk.live))
	}
}

// TestEvictionAndClose: idle entries beyond the limit are unmapped oldest
// first, entries in use never; Close unmaps everything, reports entries
// still in use, and refuses later mappings.
func TestEvictionAndClose(t *testing.T) {
	bk, c := newBook(8192)
	a, b, d := make([]byte, 4096), make([]byte, 4096), make([]byte, 4096)
	ea, _, _ := c.Get(a)
	c.Put(ea)
	eb, _, _ := c.Get(b) // in use
	ed, _, _ := c.Get(d)
	c.Put(ed)
	if s := c.Stats(); s.Evictions != 1 || bk.live[ea.Mapping()] || !bk.live[eb.Mapping()] {
		t.Fatalf("stats %+v: want the idle oldest entry evicted, the one in use kept", s)
	}
	r, err := c.Register(make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Evictions != 1 || !bk.live[r.Mapping()] {
		t.Fatalf("stats %+v: a registration evicted or was evicted", s)
	}
	if err := c.Close(); err == nil {
		t.Error("Close with an entry in use reported nothing")
	}
	if len(bk.live) != 0 {
		t.Errorf("%d mappings live after Close", len(bk.live))
	}
	if _, _, err := c.Get(a); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if err := c.Unregister(r); err != nil {
		t.Errorf("Unregister after Close: %v, want nil (Close unmapped it)", err)
	}
}

// TestMapFailure: a refused mapping is an error and caches nothing.
func TestMapFailure(t *testing.T) {
	bk, c := newBook(1 << 20)
	bk.fails = true
	if _, _, err := c.Get(make([]byte, 10)); err == nil {
		t.Fatal("Get succeeded though the mapping failed")
	}
	if s := c.Stats(); s.Entries != 0 {
		t.Errorf("%d entries after a failed mapping", s.Entries)
	}
}
