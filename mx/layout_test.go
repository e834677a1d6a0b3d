package mx

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/gomx-dev/gomx/internal/layouttest"
)

// requestSink keeps TestHotLines' requests on the heap.
var requestSink [16]*Request

// TestHotLines checks that the fields an 8-byte message through a lane
// reads and writes in a Board, a partner, an Endpoint and a Request stay
// on the few cache lines their structs' comments name: on a CPU that
// other ranks' turns share (an oversubscribed alltoall), every line a
// message touches is a miss (BenchmarkMessageCost/shm/evict).
func TestHotLines(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the hot lines are laid out for 64-bit pointers")
	}
	// Board, partner and Endpoint are more than 512 bytes with pointers:
	// each starts 8 bytes into a line, after the runtime's header
	// (layouttest.HeaderNote), and their groups are laid out for that.
	// Board: from mu (every look and send takes it), 544 bytes in and so
	// 40 into a line, to the first endpoints.
	layouttest.HotLines(t, new(Board), 40, 5, "mu", "closed", "freeReqs", "late", "nowv", "nowOK", "seen", "rxWaiter", "rxTook",
		"readWants", "rxRings", "laneRec", "draining", "selfq", "lout", "cmaq", "ackOwed", "toStamp", "ackHeld", "laneHdr", "pcopies",
		"shortOff", "host")
	layouttest.HotLines(t, new(partner), 8, 4, "ep", "nic", "rsession", "epID", "rknown", "dead", "lean", "lane", "laneMed",
		"inHandler", "ackStale", "owed", "ackLazy", "stampQ", "sackOpen", "peerIdx", "sendSeq", "ackPoint", "recvSeq",
		"fullSeq", "notAcked", "ackDeadline", "oooFrames", "ringsTr", "ringsGen", "local", "unacked", "waitq", "early",
		"partials", "held", "rttSkip", "probeAt", "stride")
	layouttest.HotLines(t, new(Endpoint), 8, 4, "b", "session", "key", "id", "closed", "engCopies", "zombies", "evWaiters",
		"unexpBytes", "progOff", "lanes", "handler", "posted", "doneq", "resq", "unexp")
	// The lane path's counts (laneTally) at the start of a line, those
	// every message adds to on it, laneUnexp's on the next.
	layouttest.HotLines(t, new(Endpoint), 0, 2, "lanes")
	tally := reflect.TypeOf(laneTally{})
	for _, name := range []string{"lean", "lanes", "recv", "piggybacked"} {
		f, _ := tally.FieldByName(name)
		if f.Offset+f.Type.Size() > layouttest.Line {
			t.Errorf("laneTally.%s at offset %d (%d bytes): want it on the tally's first line", name, f.Offset, f.Type.Size())
		}
	}
	// What an eager message's request touches (reqHot, cleared for
	// each use, its links, buffers and channel) on its first four lines,
	// reqCold after them: a lean send's or a lane record's request
	// leaves reqCold alone (narrow). Its size class must be whole lines,
	// no more than six.
	layouttest.HotLines(t, new(Request), 0, 4, "reqHot", "q", "d", "segsBuf", "ch")
	if s := unsafe.Sizeof(Request{}); s > 384 {
		t.Errorf("Request is %d bytes, want at most 384 (six lines; its next size class, 416, is not 64-byte aligned)", s)
	}
	for i := range requestSink {
		requestSink[i] = new(Request) // on the heap, as getReq's
		if a := uintptr(unsafe.Pointer(requestSink[i])); a%64 != 0 {
			t.Errorf("a Request at %#x: not at the start of a cache line (%s)", a, layouttest.HeaderNote)
		}
	}
}
