package mx

import "time"

// Silence is timed on the board's own running time.
//
// The budgets that declare a peer or a pull dead (an unacked request's
// ResendDelay*(resend limit+1), a pull's ResendDelay*ResendMax without
// progress, a large send's notify timeout) are silences of the peer. Wall
// time also counts the time this board could not run at all: its process
// descheduled on a loaded node, stopped, or its goroutines starved. The
// peer had no chance to be heard then (often it shares the CPU and was
// starved too), so that time says nothing about its health, and counting
// it declared live peers dead whenever a stall outlasted a short budget.
//
// So each timer run measures the gap since the previous one. A running
// board runs its timers at least every tick (the receive loop never waits
// longer), so the part of a gap beyond liveClock.slack is a stall of the board
// itself. An idle board, which stretches its ticks (progress.go), plans a
// longer gap: what it planned is not a stall either. Stalls are summed, and noted with the time they ended; overdue
// takes from a silence the stalls that ended during it. Only the verdicts
// use it: resends and round-trip samples keep wall time (a stall makes
// its resends due at once, as before), and a verdict that was due before
// a stall is not undone by it. A peer that is gone is still found: this
// board runs, its ticks come on time, and the budget passes as before. A
// connect counts resends, one per tick at most, so it needs no discount.

// maxStallMarks bounds the stalls remembered. When more come, the older
// half is forgotten (liveClock.base keeps their total), and a silence that
// began before the oldest remembered stall is discounted less than it
// could be: its verdict may come sooner, never later.
const maxStallMarks = 64

// liveClock is what a board knows of its own stalls (b.mu held): the
// longest gap between two timer runs of a board that runs, the last
// timer run, the stalls' total, the recent ones, and the total of those
// forgotten.
type liveClock struct {
	slack   int64
	planned int64 // how much later than a tick an idle board planned its next run (progress.go)
	lastRun int64
	stalled int64
	marks   []stallMark
	base    int64
}

// stallMark notes the end of a stall: when it ended (board clock) and the
// total of all stalls up to then.
type stallMark struct{ at, total int64 }

// stallSlackFor is the longest gap between two timer runs of a running
// board with tick period tick: a Recv that waits for nextTick, scheduling
// noise, and a batch handled in between.
func stallSlackFor(tick time.Duration) int64 {
	return int64(max(4*tick, 5*time.Millisecond))
}

// noteTimerRun records a timer run at now and, when the gap since the
// previous run exceeded the slack, the stall it reveals (b.mu held).
func (b *Board) noteTimerRun(now int64) {
	l := &b.live
	if l.lastRun != 0 {
		if s := now - l.lastRun - l.slack - l.planned; s > 0 {
			l.stalled += s
			b.cnt[BoardStalls]++
			if len(l.marks) == maxStallMarks {
				l.base = l.marks[maxStallMarks/2-1].total
				l.marks = l.marks[:copy(l.marks, l.marks[maxStallMarks/2:])]
			}
			l.marks = append(l.marks, stallMark{at: now, total: l.stalled})
		}
	}
	l.lastRun = max(l.lastRun, now)
	l.planned = 0
}

// overdue reports whether budget has passed since since on the board's
// running time: wall time less the stalls that ended after since (b.mu
// held). The wall-time test comes first, so a silence shorter than its
// budget costs nothing more than before.
func (b *Board) overdue(now, since, budget int64) bool {
	if now-since < budget {
		return false
	}
	l := &b.live
	before := l.base // the stalls up to since, at most
	for i := len(l.marks) - 1; i >= 0; i-- {
		if m := l.marks[i]; m.at <= since {
			before = m.total
			break
		}
	}
	return now-since-(l.stalled-before) >= budget
}
