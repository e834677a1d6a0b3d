package mx

import (
	"reflect"
	"testing"
	"unsafe"
)

// hotLines is how many cache lines the fields names of the struct *v
// (allocated as the package allocates it) span, and the names of any
// fields it lacks.
func hotLines(v any, names []string) (lines int, missing []string) {
	rv := reflect.ValueOf(v).Elem()
	seen := map[uintptr]bool{}
	for _, name := range names {
		f := rv.FieldByName(name)
		if !f.IsValid() {
			missing = append(missing, name)
			continue
		}
		a := f.UnsafeAddr()
		for l := a / 64; l <= (a+f.Type().Size()-1)/64; l++ {
			seen[l] = true
		}
	}
	return len(seen), missing
}

// requestSink keeps TestHotLines' requests on the heap.
var requestSink [16]*Request

// TestHotLines checks that the fields an 8-byte message through a lane
// reads and writes in a Board, a partner and a Request stay on the few
// cache lines their structs' comments name: on a CPU that other ranks'
// turns share (an oversubscribed alltoall), every line a message touches
// is a miss (BenchmarkMessageCost/shm/evict).
func TestHotLines(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the hot lines are laid out for 64-bit pointers")
	}
	cases := []struct {
		v     any
		names []string
		lines int
	}{
		// From mu (every look and send takes it) to the first endpoints.
		{new(Board), []string{"mu", "closed", "freeReqs", "late", "nowv", "nowOK", "seen", "rxWaiter", "rxTook", "readWants",
			"rxRings", "laneRec", "draining", "selfq", "lout", "cmaq", "ackOwed", "toStamp", "laneHdr", "pcopies", "shortOff", "host"}, 5},
		{new(partner), []string{"ep", "nic", "rsession", "epID", "rknown", "dead", "lean", "lane", "laneMed", "inHandler",
			"ackStale", "owed", "ackLazy", "stampQ", "sackOpen", "peerIdx", "sendSeq", "ackPoint", "recvSeq", "fullSeq",
			"notAcked", "ackDeadline", "oooFrames", "ringsTr", "ringsGen", "local", "unacked", "waitq", "early", "partials",
			"held", "rttSkip", "probeAt", "stride"}, 4},
		{new(Endpoint), []string{"b", "session", "id", "closed", "key", "engCopies", "zombies", "evWaiters", "unexpBytes",
			"lanes", "handler", "posted", "doneq", "resq", "unexp"}, 4},
		{new(Endpoint), []string{"lanes"}, 1},
	}
	for _, c := range cases {
		lines, missing := hotLines(c.v, c.names)
		if len(missing) > 0 {
			t.Errorf("%T has no fields %v", c.v, missing)
		}
		if lines > c.lines {
			t.Errorf("%T's lane-path fields span %d cache lines, want %d: keep them together at the struct's start", c.v, lines, c.lines)
		}
	}
	// A Request is cleared whole for each use (reqState) and touched
	// whole by a message: its size class must be whole lines, no more
	// than six.
	if s := unsafe.Sizeof(Request{}); s > 384 {
		t.Errorf("Request is %d bytes, want at most 384 (six lines; its next size class, 416, is not 64-byte aligned)", s)
	}
	for i := range requestSink {
		requestSink[i] = new(Request) // on the heap, as getReq's
		if a := uintptr(unsafe.Pointer(requestSink[i])); a%64 != 0 {
			t.Errorf("a Request at %#x: not at the start of a cache line", a)
		}
	}
}
