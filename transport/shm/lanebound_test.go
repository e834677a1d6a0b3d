package shm

import (
	"testing"
)

// TestLaneBound: by default a job whose every pair can have a lane of
// 1 MiB or more within the budget gets one for every pair; a larger job,
// a Lanes given, or a budget that does not bound lanes keeps Lanes.
func TestLaneBound(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		lanes          int
		byJob          bool
		boards, budget int
		want           int
	}{
		{4, true, 8, 8 * mib, 7}, {4, true, 9, 8 * mib, 8}, {4, true, 10, 8 * mib, 4},
		{4, true, 16, 8 * mib, 4}, {4, true, 128, 8 * mib, 4}, {4, true, 3, 8 * mib, 4},
		{4, true, 5, 8 * mib, 4}, {4, true, 17, 16 * mib, 16}, {4, true, 8, 1 * mib, 4},
		{4, true, 8, -1, 4}, {4, false, 8, 8 * mib, 4}, {2, false, 8, 8 * mib, 2}, {0, false, 8, 8 * mib, 0},
	} {
		if got := laneBound(c.lanes, c.byJob, c.boards, c.budget); got != c.want {
			t.Errorf("laneBound(%d, %v, %d boards, budget %d) = %d, want %d", c.lanes, c.byJob, c.boards, c.budget, got, c.want)
		}
	}
}

// TestEveryPairOfASmallJobHasALane: among six boards with the default
// Lanes (four) and budget, every pair that keeps talking gets a lane of
// its own, more than Lanes a board, each within the budget's share: the
// frames of a small alltoall do not go through the receive queue.
func TestEveryPairOfASmallJobHasALane(t *testing.T) {
	const n = 6
	boards := openMany(t, n, Options{LaneAfter: -1, NoHugepages: true})
	done := false
	for round := 0; round < 200 && !done; round++ {
		allToAll(t, boards)
		done = true
		for _, b := range boards {
			if f := b.Footprint(); f.RingsOut < n-1 || f.RingsIn < n-1 {
				done = false
			}
		}
	}
	for i, b := range boards {
		f := b.Footprint()
		if f.RingsOut != n-1 || f.RingsIn != n-1 {
			t.Errorf("board %d writes %d lanes and reads %d, want %d each: a lane for every pair", i, f.RingsOut, f.RingsIn, n-1)
		}
		if bound := int64(2*DefaultRingBudget + n*queueSegLen(b.opts.QueueSize)); f.MappedBytes > bound {
			t.Errorf("board %d maps %d bytes, over twice the budget and the queues (%d)", i, f.MappedBytes, bound)
		}
	}
}
