package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestLateRunGrace checks the grace a late timer run gives the peer
// (finetimer.go): none for a run on time, the lateness again for a run
// schedFloor or more late (retransmissions held until then, its end noted
// as a deadline), none of its own for a deadline that fell within a grace
// (a machine where every run is late puts a resend off once), and at most
// RTOMax.
func TestLateRunGrace(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	opts := fastOptions()
	opts.RTOMax = 50 * time.Millisecond
	b, err := NewBoard(w.a, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); w.close() })
	b.mu.Lock()
	defer b.mu.Unlock()
	const us = int64(time.Microsecond)
	base := b.clock() + int64(time.Hour) // far past any deadline the board notes itself
	run := func(due, now int64) {
		b.due.Store(due)
		b.lateRun(now)
	}

	run(base, base+5*us) // on time
	if b.holdUntil != 0 || b.held(base+5*us) {
		t.Fatalf("a run 5 µs after its deadline held resends until %d", b.holdUntil)
	}
	run(base+1000*us, base+1300*us) // 300 µs late
	if want := base + 1600*us; b.holdUntil != want {
		t.Fatalf("a run 300 µs late held resends until %+d µs, want %+d µs", (b.holdUntil-base)/us, (want-base)/us)
	}
	b.due.Store(0)
	if !b.held(base+1400*us) || b.due.Load() != base+1600*us {
		t.Fatalf("within the grace: held %v, deadline noted %+d µs, want the grace's end", b.held(base+1400*us), (b.due.Load()-base)/us)
	}
	run(base+1600*us, base+2100*us) // the grace's own end, served 500 µs late
	if b.holdUntil != base+1600*us || b.held(base+2100*us) {
		t.Fatalf("the run at the grace's end, late itself, held resends again until %+d µs", (b.holdUntil-base)/us)
	}
	run(base+3000*us, base+3000*us+int64(time.Second)) // a second late: at most RTOMax
	if want := base + 3000*us + int64(time.Second) + int64(opts.RTOMax); b.holdUntil != want {
		t.Fatalf("a run a second late held resends for %v, want RTOMax %v", time.Duration(b.holdUntil-base-3000*us-int64(time.Second)), opts.RTOMax)
	}
	b.due.Store(0)
}
