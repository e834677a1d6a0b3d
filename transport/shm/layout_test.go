package shm

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/gomx-dev/gomx/internal/layouttest"
)

// fieldOffset is the offset of the field name (perhaps promoted from an
// embedded struct) in struct type t.
func fieldOffset(t *testing.T, typ reflect.Type, name string) uintptr {
	t.Helper()
	off, ok := layouttest.Offset(typ, name)
	if !ok {
		t.Fatalf("%v has no field %s", typ, name)
	}
	return off
}

// TestHotLines checks that the fields a lane message's send, look and
// take read and write stay on the cache lines their structs' comments
// name (two of outRing, two of Transport, one of inRing for a look and
// another for a take), and that the structs' allocations are 64-byte
// aligned, so those lines are whole lines: on a CPU that other processes
// share, every line a message touches is a miss.
func TestHotLines(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the hot lines are laid out for 64-bit pointers")
	}
	// Allocated as the transport allocates them, each group's first
	// field at the start of a line.
	layouttest.HotLines(t, new(outRing), 0, 2, "data", "cur", "clear", "lap", "headSeen", "peer", "mtu", "dead", "blOn",
		"retireAsk", "shut", "sent", "notify", "sum", "slp", "mu")
	layouttest.HotLines(t, new(Transport), 0, 2, "hot", "rr", "peeked", "peekedAt", "peekedLen", "toCommit", "peekedQ",
		"recvd", "peekedQR", "peekedQN", "mtu", "nLanes", "fullScan") // and q's cursor, below
	layouttest.HotLines(t, new(inRing), 0, 1, "wordAt", "dead", "gone", "data", "cur", "pos", "peer")
	layouttest.HotLines(t, new(inRing), 0, 2, "wordAt", "pubHead", "pubEvery", "head")
	// The receive queue's cursor, its word and broken: on Transport's
	// second hot line, with q.
	q := reflect.TypeOf(qConsumer{})
	for _, name := range []string{"cur", "wordAt", "broken"} {
		if off := fieldOffset(t, reflect.TypeOf(Transport{}), "q") + fieldOffset(t, q, name) - fieldOffset(t, reflect.TypeOf(Transport{}), "hot"); off >= 128 {
			t.Errorf("Transport.q.%s at %d bytes past hot: want it on the second hot line", name, off)
		}
	}
}

// TestDoorbellLayout checks the doorbell's words at the offsets its
// comment (ring.go) gives, which other processes' builds read: the flag,
// the waiters blocked and the total slept at 64, 68, 72, the start of a
// sleep going on at 80, each aligned for its atomic and none overlapping,
// all before the summary word's line (128), and the receive queue's
// header from 192.
func TestDoorbellLayout(t *testing.T) {
	words := []struct {
		name      string
		off, want int
		size      int
	}{
		{"sleeping", bellSleepOff, 64, 4},
		{"blocked", bellBlockOff, 68, 4},
		{"slept", bellSleptOff, 72, 8},
		{"since", bellSinceOff, 80, 8},
		{"summary", bellSumOff, 128, 8},
		{"queue tail", qTailOff, 192, 8},
	}
	for i, w := range words {
		if w.off != w.want {
			t.Errorf("doorbell %s at %d, want %d", w.name, w.off, w.want)
		}
		if w.off%w.size != 0 {
			t.Errorf("doorbell %s at %d: not aligned for a %d-byte atomic", w.name, w.off, w.size)
		}
		if i > 0 && words[i-1].off+words[i-1].size > w.off {
			t.Errorf("doorbell %s at %d overlaps %s", w.name, w.off, words[i-1].name)
		}
	}
	if bellSinceOff+8 > bellSumOff {
		t.Errorf("since ends at %d, past the summary's line at %d", bellSinceOff+8, bellSumOff)
	}
	if qTailOff < bellSumOff+64 {
		t.Errorf("the queue header at %d is not past the summary's line", qTailOff)
	}
}
