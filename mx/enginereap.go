package mx

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Engine copies finished by the application's Tests.
//
// An engine copy's goroutine (offload.go) used to sleep on the engine's
// interrupt until the copy was in, then complete the receive: on the
// application's CPU, per message, the interrupt's wake-up, the Go
// scheduler's search for work before and after, and the re-arm of the
// interrupt. An application that tests its receive between slices of a
// computation (MPI_Test in a compute loop; mxbench overlap's availability
// run) looks at the request every few microseconds anyway, and a look at
// the engine's completion word costs next to nothing: the Test can finish
// the copy itself, and nobody needs to sleep or be woken.
//
// So a copy into a request that has been tested (Request.tested), with an
// engine that can tell without waiting whether a copy completed
// (copyWaitPoller: ioat.Engine), is handed off once it is started: its
// goroutine returns, and the next Test of any request the engine fills
// finishes every handed-off copy that is done (reapTested). The board's
// reaper goroutine makes sure they finish when the Tests stop: while Tests
// come it looks every testAway (one wake-up per testAway, not one per
// message), and with nothing to look after it sleeps until a hand-off,
// which gives the Tests testAway first; when a look finds no Test since
// the last, or a waiter is about to sleep on such a request (nudge), it
// waits for the oldest copy with the engine, as the copy's goroutine did,
// and finishes it. A copy is finished once: whoever finishes it claims it
// first (engineCopy.claimed), and a copy being waited for by the reaper is
// left to it. A copy handed off while the application tests costs the
// application's CPU a look at the engine's completion per Test, and the
// reaper's wake-up per testAway is shared by every message meanwhile.
type engineReaper struct {
	mu      sync.Mutex
	pending []*engineCopy // handed off, oldest first
	// tests counts the Tests of requests the engine fills (reapTested).
	tests atomic.Uint64
	// testing counts the Tests running now (beginTest); starts holds the
	// copies matched meanwhile into tested requests, which the Test
	// starts on its own goroutine when it ends (endTest) instead of a
	// goroutine per copy (b.mu; startsN counts them, for a look without
	// the lock).
	testing atomic.Int32
	starts  []*engineCopy
	startsN atomic.Int32
	// idle: the reaper sleeps with nothing to look after, and a hand-off
	// must wake it.
	idle atomic.Bool
	// away is how long the reaper leaves the copies to the Tests between
	// looks (testAway; tests lengthen it).
	away atomic.Int64
	// kick wakes an idle reaper for a hand-off (the Tests get their
	// time first); nudge wakes it for a waiter (it waits for the oldest
	// copy at once).
	kick, nudge chan struct{}
	quit        chan struct{}
	exited      chan struct{}
}

// startReaper starts the board's reaper when its engine can report a
// copy's completion without waiting (from engineHook).
func (b *Board) startReaper() {
	if _, ok := b.opts.Local.Engine.(copyWaitPoller); !ok {
		return
	}
	b.reaper = &engineReaper{kick: make(chan struct{}, 1), nudge: make(chan struct{}, 1), quit: make(chan struct{}), exited: make(chan struct{})}
	b.reaper.away.Store(int64(testAway))
	go b.reapEngine()
}

// stopReaper ends the reaper once every copy finished (Close, after
// b.copies.Wait).
func (b *Board) stopReaper() {
	if rp := b.reaper; rp != nil {
		close(rp.quit)
		<-rp.exited
	}
}

// handOff leaves the started copy c to the Tests and the reaper.
func (rp *engineReaper) handOff(c *engineCopy) {
	rp.mu.Lock()
	rp.pending = append(rp.pending, c)
	rp.mu.Unlock()
	if rp.idle.Load() {
		signal(rp.kick)
	}
}

// signal sends on a channel of one slot unless a signal is pending.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// nudge tells the reaper that a waiter is about to sleep on a request the
// engine fills: it stops leaving the copies to Tests that will not come.
func (b *Board) nudge() {
	if rp := b.reaper; rp != nil {
		signal(rp.nudge)
	}
}

// claimOldest claims the oldest handed-off copy nobody is looking at, and
// reports how many are pending.
func (rp *engineReaper) claimOldest() (*engineCopy, int) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for _, c := range rp.pending {
		if c.claimed.CompareAndSwap(false, true) {
			return c, len(rp.pending)
		}
	}
	return nil, len(rp.pending)
}

// remove drops the claimed copy c from the pending list.
func (rp *engineReaper) remove(c *engineCopy) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for i, p := range rp.pending {
		if p == c {
			rp.pending = append(rp.pending[:i], rp.pending[i+1:]...)
			return
		}
	}
}

// beginTest and endTest bracket a Test's look at the rings: an engine copy
// into a tested request matched meanwhile (by this Test or any other
// goroutine) is started by endTest on the Test's goroutine, without the
// goroutine, its wake-up and its exit that a copy costs otherwise. A copy
// is counted (startsN) before its look at testing, and a Test looks at the
// count after its decrement: a copy queued because it saw testing above
// zero was counted before the last Test's decrement, which then sees the
// count and takes the queue under b.mu, after the queueing goroutine let
// go of it.
func (b *Board) beginTest() {
	if rp := b.reaper; rp != nil {
		rp.testing.Add(1)
	}
}

func (b *Board) endTest() {
	rp := b.reaper
	if rp == nil {
		return
	}
	rp.testing.Add(-1)
	if rp.startsN.Load() == 0 {
		return
	}
	var buf [4]*engineCopy
	b.mu.Lock()
	q := append(buf[:0], rp.starts...)
	clear(rp.starts)
	rp.starts = rp.starts[:0]
	rp.startsN.Add(-int32(len(q)))
	b.unlockKick()
	for _, c := range q {
		c.run() // starts it and hands it off (offload.go)
	}
}

// reapTested is a Test's look at the handed-off copies: it finishes those
// the engine is done with (no lock held).
func (b *Board) reapTested() {
	rp := b.reaper
	if rp == nil {
		return
	}
	rp.tests.Add(1)
	var buf [4]*engineCopy
	done := buf[:0]
	rp.mu.Lock()
	for i := 0; i < len(rp.pending); {
		c := rp.pending[i]
		if c.claimed.CompareAndSwap(false, true) {
			if c.job.done() {
				rp.pending = append(rp.pending[:i], rp.pending[i+1:]...)
				done = append(done, c)
				continue
			}
			c.claimed.Store(false)
		}
		i++
	}
	rp.mu.Unlock()
	for _, c := range done {
		c.byTest = true
		c.finish(true, b.offloadFinish(c.job)) // its waits return at once
	}
}

// count reports how many copies are handed off.
func (rp *engineReaper) count() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.pending)
}

// reapEngine is the reaper's goroutine (see engineReaper).
func (b *Board) reapEngine() {
	rp := b.reaper
	defer close(rp.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	seen := rp.tests.Load()
	testing := false
	for {
		if t := rp.tests.Load(); t != seen || testing {
			// The Tests finish what is done; look again in testAway,
			// or at once when a waiter is about to sleep.
			seen, testing = t, false
			timer.Reset(time.Duration(rp.away.Load()))
			select {
			case <-timer.C:
			case <-rp.nudge:
				timer.Stop()
				seen = rp.tests.Load() // a waiter sleeps: do not wait for Tests
			case <-rp.quit:
				return
			}
			continue
		}
		c, n := rp.claimOldest()
		switch {
		case c != nil:
			// Nobody tests: wait for it with the engine.
			err := b.offloadFinish(c.job)
			rp.remove(c)
			c.finish(true, err)
		case n > 0:
			// Every pending copy is claimed by a Test looking at it.
			runtime.Gosched()
		default:
			rp.idle.Store(true)
			if rp.count() > 0 {
				// A hand-off between the look and the store saw the
				// reaper busy and did not wake it.
				rp.idle.Store(false)
				continue
			}
			select {
			case <-rp.kick:
				// A copy into a tested request: its Tests get their
				// time first.
				testing = true
			case <-rp.nudge:
			case <-rp.quit:
				return
			}
			rp.idle.Store(false)
			seen = rp.tests.Load()
		}
	}
}
