//go:build cabi && cgo

package main

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gomx-dev/gomx/mx"
)

// TestSlotsConcurrent takes and frees slots from many goroutines at once
// and checks no slot is ever held twice, that every handle names its own
// slot while held, and that the free stack loses nothing.
func TestSlotsConcurrent(t *testing.T) {
	const workers, rounds, hold = 8, 2000, 4
	e := &endpoint{}
	var holders sync.Map // *slot -> worker
	var dup atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held := make([]*slot, 0, hold)
			for r := range rounds {
				for len(held) < hold {
					s := newSlot(e, uintptr(w))
					if s == nil {
						t.Error("newSlot: no slot")
						return
					}
					if _, loaded := holders.LoadOrStore(s, w); loaded {
						dup.Add(1)
					}
					held = append(held, s)
				}
				s := held[r%len(held)]
				if got := slotNamed(s.handle); got != s || s.uctx != uintptr(w) {
					t.Errorf("handle %#x: slot %p, want %p of worker %d", s.handle, got, s, w)
					return
				}
				holders.Delete(s)
				freeSlot(s, true)
				held = append(held[:r%len(held)], held[r%len(held)+1:]...)
			}
			for _, s := range held {
				holders.Delete(s)
				freeSlot(s, true)
			}
		}()
	}
	wg.Wait()
	if n := dup.Load(); n != 0 {
		t.Fatalf("%d slots were given to two holders at once", n)
	}
	// Every slot made is on the free stack again, once.
	slots.mu.Lock()
	made := slots.n
	slots.mu.Unlock()
	seen := map[uint32]bool{}
	for i := uint32(0); i < made; i++ {
		s := popFree()
		if s == nil {
			t.Fatalf("free stack holds %d slots, %d were made", i, made)
		}
		if seen[s.idx] {
			t.Fatalf("slot %d is on the free stack twice", s.idx)
		}
		seen[s.idx] = true
	}
	if s := popFree(); s != nil {
		t.Fatalf("free stack holds slot %d beyond the %d made", s.idx, made)
	}
	for i := range made {
		pushFree(slotAt(i))
	}
}

// BenchmarkSlot is a request's slot taken and given back, as every post
// and completion does.
func BenchmarkSlot(b *testing.B) {
	e := &endpoint{}
	b.ReportAllocs()
	for b.Loop() {
		freeSlot(newSlot(e, 0), true)
	}
}

// TestSlotHandlesWrap checks that a slot's handle names it however often
// the slot was used (its generation wraps), and that the handle of its
// previous use does not.
func TestSlotHandlesWrap(t *testing.T) {
	e := &endpoint{}
	s := newSlot(e, 0)
	if s == nil {
		t.Fatal("newSlot: no slot")
	}
	freeSlot(s, true)
	for _, gen := range []uint32{1<<31 - 2, 1<<31 - 1, 1 << 31, 1<<32 - 1} {
		s.gen = gen
		got := newSlot(e, 0)
		if got != s {
			t.Fatalf("newSlot took slot %p, want the one just freed %p", got, s)
		}
		got.r = new(mx.Request) // what publish records
		if slotOf(got.handle) != got {
			t.Errorf("generation %#x: handle %#x does not name its slot", gen+1, got.handle)
		}
		if old := uintptr(gen)<<32 | uintptr(got.idx+1); slotOf(old) != nil {
			t.Errorf("generation %#x: the previous use's handle %#x still names the slot", gen+1, old)
		}
		freeSlot(got, true)
	}
}
