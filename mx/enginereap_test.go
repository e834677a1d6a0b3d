package mx

import (
	"bytes"
	"testing"
	"time"
)

// TestEngineCopiesFinishedByTests: receives the application tests while the
// copy engine fills them are finished by its Tests, byte-exact, and the
// senders' sends complete; a receive tested once and then left alone, or
// tested and then waited for, still completes (the board's reaper finishes
// it), and so does a receive nobody ever tested.
func TestEngineCopiesFinishedByTests(t *testing.T) {
	g := newEngineRig(t, LargeEngine, nil, nil)
	msg, err := g.a.AllocShared(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer g.a.FreeShared(msg)
	ctx := testCtx(t, time.Minute)
	// exchange sends message i into a fresh receive that finish completes
	// (or leaves alone: then, once the send completed, its receive must
	// have too).
	exchange := func(i int, finish func(r *Request) (consumed bool)) {
		t.Helper()
		copy(msg, pattern(len(msg), uint64(i)))
		buf := make([]byte, len(msg))
		r, err := g.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, done := r.Test(); done {
			t.Fatalf("message %d: its receive completed before it was sent", i)
		}
		copies := g.b.Counters().Get(RecvEngine)
		s, err := g.a.ISend([][]byte{msg}, g.atob, uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		consumed := finish(r)
		mustWait(t, s, time.Minute)
		if !consumed {
			// The receiving board sends the NOTIFY that completes the
			// send first, then completes the receive, under one hold
			// of its lock: once its counters (read under that lock)
			// count the copy, the receive is done too.
			waitUntil(t, "the copy counted", func() bool { return g.b.Counters().Get(RecvEngine) > copies })
			if _, done := r.Test(); !done {
				t.Fatalf("message %d: its send completed, its receive did not", i)
			}
		}
		if !bytes.Equal(buf, pattern(len(msg), uint64(i))) {
			t.Fatalf("message %d: wrong bytes", i)
		}
	}
	testUntilDone := func(r *Request) bool {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			if st, done := r.Test(); done {
				if st.Code != nil || st.XferLength != uint32(len(msg)) {
					t.Fatalf("status %v, %d bytes", st.Code, st.XferLength)
				}
				return true
			}
			if time.Now().After(deadline) {
				t.Fatal("a tested receive did not complete in a minute")
			}
		}
	}
	// The reaper leaves the copies to the Tests for a minute: every one is
	// finished by a Test, however the host schedules this goroutine.
	g.bb.reaper.away.Store(int64(time.Minute))
	const tested = 16
	before := g.b.Counters()
	for i := range tested {
		exchange(i, testUntilDone)
	}
	c := countersSinceTest(before, g.b.Counters())
	if c[RecvEngine] != tested || c[EngineByTests] != tested {
		t.Fatalf("%d messages tested to completion: %d engine copies, %d finished by Tests; want %d of each", tested, c[RecvEngine], c[EngineByTests], tested)
	}
	g.bb.reaper.away.Store(int64(testAway))
	g.bb.nudge() // out of its minute
	// Tested once, then left alone: the sender's send completes (above),
	// so the reaper finished the copy; the receive is then done.
	exchange(tested, func(r *Request) bool { return false })
	// Tested once, then waited for.
	exchange(tested+1, func(r *Request) bool {
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return true
	})
	// Never tested: its copy's goroutine waits for the engine.
	copy(msg, pattern(len(msg), 99))
	g.send(t, msg, 3, 99)
	if got := g.b.Counters().Get(RecvEngine) - before.Get(RecvEngine); got != tested+3 {
		t.Fatalf("%d engine copies, want %d", got, tested+3)
	}
}

// countersSinceTest returns the counters of now less those of then.
func countersSinceTest(then, now Counters) map[Counter]uint64 {
	m := make(map[Counter]uint64)
	for c := Counter(0); c < numCounters; c++ {
		m[c] = now.Get(c) - then.Get(c)
	}
	return m
}
