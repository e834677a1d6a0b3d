package owned

import (
	"sync"
	"testing"
)

// TestCountSerializedWriters: writers on several goroutines that take
// turns under a lock count every increment, and a reader that loads the
// count meanwhile (the race detector watches) sees it only grow.
func TestCountSerializedWriters(t *testing.T) {
	const writers, each = 4, 2000
	var (
		c  Count
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				mu.Lock()
				if i%2 == 0 {
					c.Inc()
				} else {
					c.Add(1)
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	last := uint64(0)
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		v := c.Load()
		if v < last || v > writers*each {
			t.Fatalf("read %d after %d: a count of %d increments only grows", v, last, writers*each)
		}
		last = v
	}
	if v := c.Load(); v != writers*each {
		t.Fatalf("count %d, want %d", v, writers*each)
	}
}
