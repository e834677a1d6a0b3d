package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/cmd/internal/cache"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/ioat"
)

// coldFallback is how much memory per side the cold-cache pattern rotates
// over when the last-level cache cannot be told: more than the last-level
// cache of most Xeons with CBDMA.
const coldFallback = 64 << 20

// bufSet is a source and a destination buffer, registered with the engine,
// cut into equal slots. Copy k of a run goes from source slot k mod n to
// destination slot k mod n: the same pair every time when hot (n = 1),
// rotating over at least twice the last-level cache per side when cold, so
// the data is not in the caches when a copy reads or writes it.
type bufSet struct {
	src, dst *ioat.Buffer
	cold     bool
	// coldNote says how the cold set was sized, for the header.
	coldNote string
	// short is set when the cold set is smaller than twice the last-level
	// cache.
	short bool
	// memNote says what memory the buffers are, for the header.
	memNote string
}

// coldPlan sizes the cold set per side for copies of up to maxSize bytes:
// twice the last-level cache the CPU reports (all its instances together),
// within budget bytes for both sides. It returns the bytes per side, the
// header's cache line, and whether the set falls short of twice the cache.
func coldPlan(maxSize int, budget int64) (int, string, bool) {
	llc, err := cache.Last()
	want := int64(coldFallback)
	why := ""
	if err == nil {
		want = 2 * llc.Total
		why = "2 x the last-level cache, " + llc.String()
	} else {
		why = fmt.Sprintf("the last-level cache is unknown (%v), so %s", err, units.Format(coldFallback))
	}
	want = max(want, 2*int64(slotStride(maxSize)))
	if budget > 0 && want > budget/2 {
		got := max(budget/2, int64(slotStride(maxSize)))
		return int(got), fmt.Sprintf("NOT cold: %s per side is less than %s (%s); the memory budget allows %s for both sides: raise --memory",
			units.Format(got), units.Format(want), why, units.Format(budget)), true
	}
	return int(want), "cold: " + units.Format(want) + " per side, " + why, false
}

// memoryBudget is the default of --memory: a quarter of the memory
// available (MemAvailable), 0 when unknown.
func memoryBudget() int64 { return int64(memAvailable() / 4) }

// newBufSet allocates the buffers for copies of up to maxSize bytes on r:
// one slot when hot, the cold plan's bytes per side when cold.
func newBufSet(r *rig, maxSize int, cold bool, budget int64) (*bufSet, error) {
	total := slotStride(maxSize)
	b := &bufSet{cold: cold}
	if cold {
		total, b.coldNote, b.short = coldPlan(maxSize, budget)
	}
	src, err := r.alloc(total)
	if err != nil {
		return nil, fmt.Errorf("allocate a %s source buffer: %w (try a smaller --size or --memory, or --hot)", units.Format(int64(total)), err)
	}
	dst, err := r.alloc(total)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("allocate a %s destination buffer: %w (try a smaller --size or --memory, or --hot)", units.Format(int64(total)), err)
	}
	fillRandom(src.Bytes(), 1)
	b.src, b.dst, b.memNote = src, dst, r.memoryNote(src)
	return b, nil
}

// slotStride is the distance between slots for copies of size bytes: the
// size rounded up to 64 bytes, a cache line.
func slotStride(size int) int { return (size + 63) &^ 63 }

// slots returns how many slots of copies of size bytes the buffers hold.
func (b *bufSet) slots(size int) int {
	if !b.cold {
		return 1
	}
	return len(b.src.Bytes()) / slotStride(size)
}

// slot returns slot k of buf for copies of size bytes.
func slot(buf []byte, k, size int) []byte {
	off := k * slotStride(size)
	return buf[off : off+size : off+size]
}

// perSide is the bytes per side the copies of size bytes rotate over.
func (b *bufSet) perSide(size int) int { return b.slots(size) * slotStride(size) }

// close unregisters and frees the buffers. Requests on them must be done.
func (b *bufSet) close() error {
	return errors.Join(b.src.Close(), b.dst.Close())
}

// poisonByte is what a destination holds before a verified run.
const poisonByte = 0xA5

// poison sets the first n bytes of buf to poisonByte.
func poison(buf []byte, n int) {
	fillByte(buf[:n], poisonByte)
}

// fillByte sets every byte of b to v, doubling copies.
func fillByte(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for done := 1; done < len(b); done *= 2 {
		copy(b[done:], b[:done])
	}
}

// fillRandom fills b with pseudo-random bytes from seed: a random block of
// an odd length repeated, so that slots at different offsets hold different
// data (a copy to the wrong slot is caught) without generating every byte.
func fillRandom(b []byte, seed uint64) {
	const block = 256<<10 + 8
	var key [32]byte
	for i := range 4 {
		for j := range 8 {
			key[i*8+j] = byte((seed + uint64(i)) >> (8 * j))
		}
	}
	g := rand.NewChaCha8(key)
	n := min(block, len(b))
	_, _ = g.Read(b[:n])
	for done := n; done < len(b); done += n {
		copy(b[done:], b[:n])
	}
}

// memAvailable returns MemAvailable from /proc/meminfo in bytes, 0 when
// unknown.
func memAvailable() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// firstDiff returns the index of the first byte where a and b differ, or
// -1 when they are equal (they must have the same length).
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
