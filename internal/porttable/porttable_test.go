package porttable

import (
	"sync"
	"testing"
)

// Ports set and deleted are what lookups see, a map loaded before a
// change keeps what it held, and readers race writers cleanly.
func TestTable(t *testing.T) {
	var tb Table
	if _, ok := tb.Lookup(1); ok || tb.Len() != 0 {
		t.Fatal("a new table is not empty")
	}
	tb.Set(1, 0)
	tb.Set(2, 1)
	before := tb.Load()
	tb.Set(1, 3)
	tb.Delete(2)
	if q, ok := tb.Lookup(1); !ok || q != 3 {
		t.Errorf("port 1: queue %d, %v; want 3", q, ok)
	}
	if _, ok := tb.Lookup(2); ok || tb.Len() != 1 {
		t.Errorf("port 2 still steered, or %d ports, want 1", tb.Len())
	}
	if before[1] != 0 || before[2] != 1 || len(before) != 2 {
		t.Errorf("a map loaded earlier changed: %v", before)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				p := uint16(1000 + 100*w + i%50)
				tb.Set(p, w)
				if q, ok := tb.Lookup(p); ok && q != w {
					t.Errorf("port %d: queue %d, want %d", p, q, w)
					return
				}
				tb.Delete(p)
			}
		}()
	}
	wg.Wait()
	if tb.Len() != 1 {
		t.Errorf("%d ports left, want 1", tb.Len())
	}
}
