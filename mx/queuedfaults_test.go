package mx

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/transport/fault"
)

// queuedFaultMessages is how many messages TestQueuedFaultyWire sends in
// all: 100 000, as `make test-queued-faults` runs it; a tenth under -race
// or -short, where the same paths run many times slower (the race suite,
// make test). GOMX_MX_QUEUED_FAULT_MESSAGES sets another count.
func queuedFaultMessages() int {
	if s, err := strconv.Atoi(os.Getenv("GOMX_MX_QUEUED_FAULT_MESSAGES")); err == nil && s > 0 {
		return s
	}
	if raceEnabled || testing.Short() {
		return 10000
	}
	return 100000
}

// TestQueuedFaultyWire runs the whole stack over a bad wire: the endpoints
// of two queued boards, one endpoint per queue of four, over transport/nic
// in UDP framing on the 82599 driver and two emulated 82599s, each pair's
// frames steered by the NICs' rules to its own queues; between the models
// a cable that loses 5% of frames, reorders 5%, duplicates 2% and corrupts
// 1% (the receiving model finds the bad FCS, counts it and drops the
// frame). Every pair streams its share of the messages, of mixed sizes
// (tiny to past the rendezvous threshold), and each must arrive once, in
// order, byte for byte, while the link goes down and comes up again. When
// the test ends the boards are closed and nicpair's check finds no model
// violation, no DMA fault (no DMA after Close) and no mapping left; no
// goroutine outlives the boards.
func TestQueuedFaultyWire(t *testing.T) {
	const queues, window = 4, 32
	n := queuedFaultMessages()
	faults := fault.Options{Loss: 0.05, Reorder: 0.05, Duplicate: 0.02, Corrupt: 0.01, Seed: 42}
	if s, err := strconv.ParseInt(os.Getenv("GOMX_MX_FAULT_SEED"), 10, 64); err == nil {
		faults.Seed = s
	}
	checkLeaks(t)
	ts, plat := queuedNICs(t, queues, emulated.CableOptions{Faults: faults})
	opts := fastOptions()
	opts.ResendDelay = 2 * time.Millisecond
	opts.PullTimeout = 2 * time.Millisecond
	// A partner is declared unreachable after 30 s without an ack, not
	// fastOptions' 4 s: eight streams and the models share two cores
	// here, slower still under -race, and what this test asks is that
	// every message arrives, not how soon a dead peer is given up.
	opts.ResendMax = 15000
	opts.Local = overNIC.Local
	var qbs [2]*QueuedBoard
	for i := range 2 {
		qb, err := NewQueuedBoard(ts[i], QueuedOptions{Board: opts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := qb.Close(); err != nil {
				t.Error(err)
			}
		})
		qbs[i] = qb
	}
	ctx := testCtx(t, time.Hour)
	var from, to [queues]*Endpoint
	var dest [queues]Addr
	for k := range queues {
		for i, e := range []**Endpoint{&from[k], &to[k]} {
			var err error
			if *e, err = qbs[i].OpenEndpoint(AnyEndpoint, testKey); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if dest[k], err = from[k].Connect(ctx, to[k].Addr().NIC, to[k].ID(), testKey); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		var used []int
		for _, e := range [2][queues]*Endpoint{from, to}[i] {
			used = append(used, slices.Index(qbs[i].Boards(), e.Board()))
		}
		if slices.Sort(used); !slices.Equal(used, []int{0, 1, 2, 3}) {
			t.Fatalf("board %d's endpoints are on queues %v, want one on each", i, used)
		}
	}
	th := to[0].Board().RendezvousThreshold()
	per := n / queues
	errc := make(chan error, 2*queues)
	for k := range queues {
		go func() { errc <- sendStream(ctx, from[k], dest[k], per, window, mixedSizes(th)) }()
		go func() { errc <- recvStream(ctx, to[k], per, window, mixedSizes(th)) }()
	}
	// The link goes down early in the run and comes back once frames
	// were lost to it.
	flap := make(chan error, 1)
	go func() { flap <- flapLink(plat, uint64(n)) }()
	var errs []error
	for range 2 * queues {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	if err := <-flap; err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	w := plat.WireFaults(0)
	var bad uint64
	for i := range 2 {
		bad += plat.Stats(i).RxBadFCS
	}
	t.Logf("%d messages over %d queue pairs; wire: %+v; bad FCS counted by the models: %d", per*queues, queues, w, bad)
	if w.Dropped == 0 || w.Reordered == 0 || w.Duplicated == 0 || w.Corrupted == 0 || bad == 0 {
		t.Errorf("a fault never happened (wire %+v, bad FCS %d): is the cable's fault model on?", w, bad)
	}
	for k := range queues {
		if c := from[k].Counters(); c.Get(Resends)+to[k].Counters().Get(PullFramesRerequested) == 0 {
			t.Errorf("pair %d: every message arrived over a lossy wire and no counter shows a recovery", k)
		}
	}
}

// flapLink takes port 0's link down once the wire has carried 2n/3 frames
// (early in the run: a message takes several frames, acks included), keeps
// it down until port 0 has sent 32 frames into the dead link (the model
// counts what it takes off its TX ring, link or not), and brings it up
// again. Every wait is bounded.
func flapLink(p *emulated.IXGBE, n uint64) error {
	waitFor := func(what string, d time.Duration, cond func() bool) error {
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				return fmt.Errorf("link flap: %s: not after %v", what, d)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	if err := waitFor("2n/3 frames on the wire", 30*time.Minute, func() bool { return p.WireFaults(0).Frames >= n*2/3 }); err != nil {
		return err
	}
	before := p.Stats(0).TxFrames
	p.SetLink(0, false)
	err := waitFor("32 frames sent into the link down", time.Minute, func() bool { return p.Stats(0).TxFrames >= before+32 })
	p.SetLink(0, true)
	return err
}
