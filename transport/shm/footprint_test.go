package shm

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport"
)

// mappedGomx sums the lengths of this process's mappings of gomx memfds, as
// the kernel lists them: the oracle of Footprint's count.
func mappedGomx(t *testing.T) int64 {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, "memfd:gomx-") {
			continue
		}
		r, _, _ := strings.Cut(l, " ")
		lo, hi, _ := strings.Cut(r, "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("a line of /proc/self/maps: %q", l)
		}
		n += int64(b - a)
	}
	return n
}

// allToAll has every board send one frame to every other and receive one
// from each.
func allToAll(t *testing.T, boards []*Transport) {
	for i, a := range boards {
		for j, b := range boards {
			if i == j {
				continue
			}
			if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: []byte{byte(i)}}}); err != nil {
				t.Fatalf("board %d to %d: %v", i, j, err)
			}
		}
	}
	rx := make([]transport.Frame, 8)
	for j, b := range boards {
		got := 0
		deadline := time.Now().Add(10 * time.Second)
		for got < len(boards)-1 && time.Now().Before(deadline) {
			n, err := b.Recv(rx, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if got != len(boards)-1 {
			t.Fatalf("board %d received %d frames, want %d", j, got, len(boards)-1)
		}
	}
}

// TestFootprintMatchesMappings checks the transport's count of the shared
// memory it maps against the kernel's list of the process's mappings, and
// the rings and peers it counts, in a job where every board talks to every
// other; after Close, nothing is counted and nothing is mapped.
func TestFootprintMatchesMappings(t *testing.T) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	base := mappedGomx(t)
	const n = 5
	var boards []*Transport
	for range n {
		b, err := Open(ringOpts(Options{Dir: dir, RingSize: 512 << 10, RingBudget: -1}))
		if err != nil {
			t.Fatal(err)
		}
		boards = append(boards, b)
		defer b.Close()
	}
	allToAll(t, boards)
	// Each pair asked for its lane with its first frame; the consumers
	// answer from their connections' watchers.
	for _, b := range boards {
		waitFor(t, "every lane mapped", func() bool { f := b.Footprint(); return f.RingsIn == n-1 && f.RingsOut == n-1 })
	}
	var mapped, owned int64
	for i, b := range boards {
		f := b.Footprint()
		if f.RingsOut != n-1 || f.RingsIn != n-1 || f.Peers != n-1 {
			t.Errorf("board %d: %d rings written, %d read, %d peers; want %d each", i, f.RingsOut, f.RingsIn, f.Peers, n-1)
		}
		if f.MappedBytes != f.RingBytes+f.PoolBytes || f.OwnedBytes > f.MappedBytes || f.PoolBytes != 0 {
			t.Errorf("board %d: an inconsistent footprint %+v", i, f)
		}
		mapped += f.MappedBytes
		owned += f.OwnedBytes
	}
	if got := mappedGomx(t) - base; got != mapped {
		t.Errorf("the boards count %d bytes mapped, the kernel lists %d", mapped, got)
	}
	// Each segment is owned by one board and mapped by two (a ring: its
	// producer and consumer; a doorbell: its consumer and every producer),
	// so the owned total is the node's memory: the rings once, and the
	// doorbells (with their receive queues) once.
	if want := int64(n*(n-1)*ringSegLen(512<<10) + n*queueSegLen(boards[0].opts.QueueSize)); owned != want {
		t.Errorf("the boards own %d bytes together, want %d", owned, want)
	}
	for _, b := range boards {
		b.Close()
		if f := b.Footprint(); f != (Footprint{}) {
			t.Errorf("after Close: %+v", f)
		}
	}
	if got := mappedGomx(t) - base; got != 0 {
		t.Errorf("after Close, %d bytes of gomx memfds are still mapped", got)
	}
}
