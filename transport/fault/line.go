package fault

import (
	"sync"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// Line is an [Injector] shared by goroutines that send concurrently: a lock
// under which every decision is drawn (so the pattern follows the order in
// which frames took the lock), and one goroutine that delivers held and
// delayed frames when they are due, started when the options first need it
// and ended by Close. The zero value is not usable: call [NewLine].
type Line[T any] struct {
	mu      sync.Mutex
	in      *Injector[T]
	late    func(Item[T]) // delivers due frames, called with mu held
	running bool          // the timer goroutine is started
	stopped bool

	kick     chan struct{} // the earliest due time changed
	quit     chan struct{}
	finished chan struct{}
}

// NewLine returns a line applying o. late delivers the frames the line
// releases from its goroutine when they are due; it is called with the
// line's lock held, so it must not call the line's methods.
func NewLine[T any](o Options, late func(Item[T])) *Line[T] {
	l := &Line[T]{
		in:       NewInjector[T](Options{}),
		late:     late,
		kick:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	l.SetOptions(o)
	return l
}

// Lock takes the line's lock, for a run of Frame calls.
func (l *Line[T]) Lock() { l.mu.Lock() }

// Unlock releases the lock Lock took.
func (l *Line[T]) Unlock() { l.mu.Unlock() }

// Frame is [Injector.Frame] for a caller holding the lock; emit is called
// with the lock held.
func (l *Line[T]) Frame(now time.Time, tag T, peer transport.NICID, data []byte, emit func(Item[T])) {
	before, had := l.in.Next()
	l.in.Frame(now, tag, peer, data, emit)
	if after, ok := l.in.Next(); ok && (!had || after.Before(before)) {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// HoldsBack reports, for a caller holding the lock, whether the line may
// hold frames back: the options in force reorder or delay, or frames it
// held are still due. Frames its Frame calls let through must then be
// delivered before the lock is released, so they keep their order with
// those the timer goroutine releases; otherwise they may be delivered
// after it, by a caller that keeps its own order.
func (l *Line[T]) HoldsBack() bool {
	_, held := l.in.Next()
	return held || l.in.o.needsTimer()
}

// SetOptions applies o (clamped) to frames offered from now on and
// reseeds the PRNG; frames already held or delayed are still delivered.
func (l *Line[T]) SetOptions(o Options) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.in.Reset(o)
	if l.in.o.needsTimer() && !l.running && !l.stopped {
		l.running = true
		go l.run()
	}
}

// Options returns the options in force (clamped).
func (l *Line[T]) Options() Options {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.in.o
}

// Counts returns what the line did so far.
func (l *Line[T]) Counts() Counts { return l.in.Counts() }

// run is the timer goroutine: it delivers held and delayed frames when they
// are due.
func (l *Line[T]) run() {
	defer close(l.finished)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		now := time.Now()
		l.in.Due(now, l.late)
		wait := time.Duration(-1)
		if next, ok := l.in.Next(); ok {
			wait = next.Sub(now)
		}
		l.mu.Unlock()
		if wait >= 0 {
			t.Reset(wait)
		} else {
			t.Stop()
		}
		select {
		case <-t.C:
		case <-l.kick:
		case <-l.quit:
			return
		}
	}
}

// Close ends the timer goroutine, waiting for it, and drops what the line
// holds; later frames are no longer held or delayed. It is safe to call
// more than once.
func (l *Line[T]) Close() {
	l.mu.Lock()
	running := l.running && !l.stopped
	l.stopped = true
	l.in.Stop()
	l.mu.Unlock()
	if running {
		close(l.quit)
		<-l.finished
	}
}
