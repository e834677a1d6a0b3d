package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/mx"
)

// A `--peer` client of a server on this host reaches it through shared
// memory, as `serve` reaches its clients: an 8 B ping-pong moves every
// message, both ways, as a lane record, straight into the posted receive
// or, when it came first, into the unexpected queue, and no message waits for a timer (no resend, no tail probe, no ack left
// for the delayed-ack timer but the last few). Read from the client's
// counters, so the test does not depend on how loaded the machine is.
func TestServeClientShm(t *testing.T) {
	t.Setenv("GOMX_SHM", "") // the default: on for UDP boards
	const iters, warmup = 300, 5
	var counted mx.Counters
	clientDone = func(ep *mx.Endpoint) { counted = ep.Counters() }
	t.Cleanup(func() { clientDone = nil })

	out, _ := serveAndRun(t, func(addr string) []string {
		return []string{"pingpong", "--transport", "udp", "--peer", addr, "--sizes", "8",
			"--iterations", fmt.Sprint(iters), "--warmup", fmt.Sprint(warmup), "--baseline=false", "--json", "--wait", "block"}
	})
	rows := jsonRows(t, out)
	if len(rows) != 1 || rows[0].Strategy != "eager" {
		t.Errorf("want one row whose messages took the shared-memory rings (strategy eager), got:\n%s", out)
	}
	var nonZero []string
	counted.NonZero(func(c mx.Counter, v uint64) { nonZero = append(nonZero, fmt.Sprintf("%v: %d", c, v)) })
	n := uint64(iters + warmup)
	if s := counted.Get(mx.LaneSends); s < n {
		t.Errorf("%v: %d, want at least one per ping-pong message (%d)", mx.LaneSends, s, n)
	}
	// A reply that comes before the client posted its receive (the client
	// descheduled between its send and its post) waits in the unexpected
	// queue, where a lane record goes without LaneRecvs counting it.
	if r, u := counted.Get(mx.LaneRecvs), counted.Get(mx.UnexpectedQueued); r+u < n {
		t.Errorf("%v: %d and %v: %d, want at least one of them per ping-pong message (%d)", mx.LaneRecvs, r, mx.UnexpectedQueued, u, n)
	}
	for _, c := range []mx.Counter{mx.Resends, mx.TimerRetransmits, mx.TailProbes, mx.FastRetransmits} {
		if counted.Get(c) != 0 {
			t.Errorf("%v: %d, want 0 on the rings", c, counted.Get(c))
		}
	}
	if d := counted.Get(mx.AcksDelayed); d > n/10 {
		t.Errorf("%v: %d of %d messages waited for the delayed-ack timer", mx.AcksDelayed, d, n)
	}
	if t.Failed() {
		t.Logf("the client's counters: %s", strings.Join(nonZero, "; "))
	}
}
