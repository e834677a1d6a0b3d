package mx

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// The fine timer: retransmission deadlines to the microsecond.
//
// A lost frame that no later frame reveals (the only frame of a small
// message, the last one of a burst, a ping-pong's pong) comes back only when
// a timer fires, so the timer's precision is the cost of such a loss. Go's
// runtime sleeps in epoll_wait, whose timeout is in milliseconds: a Go timer
// set to 60 µs fires after about 1.1 ms on an idle Linux machine, and the
// progress goroutine, which waits for frames with the transport's Recv and
// a Go timer, cannot take a deadline closer than that. On a wire whose round
// trip is a few microseconds, that millisecond was the whole cost of a lost
// small frame.
//
// So every board has a second goroutine for deadlines closer than
// fineHorizon. The protocol notes each retransmission deadline it arms
// (noteDue: the unacked send's RTO or tail-loss probe timeout, a pull
// block's re-request timeout); the fine goroutine sleeps until the earliest
// with nanosleep(2) on its own OS thread, whose timer slack it lowers to
// fineSlack, then runs the board's timers. Farther deadlines it waits for
// with an ordinary Go timer that fires fineHorizon early. Nothing is
// pending on an idle board, and then the goroutine blocks on a channel:
// it costs a wakeup per armed deadline while traffic is unacked, and
// nothing otherwise. The progress goroutine keeps its own ticks, so the
// fine goroutine only ever makes a timer fire sooner.

const (
	// fineHorizon is how close a deadline must be for the fine goroutine
	// to sleep for it with nanosleep: about the granularity of Go timers.
	fineHorizon = 2 * time.Millisecond
	// fineSlack is the timer slack of the fine goroutine's thread (the
	// kernel's default is 50 µs).
	fineSlack = 5 * time.Microsecond
)

// noteDue records a retransmission deadline (board clock, ns): the fine
// goroutine runs the timers then. Called with b.mu held.
func (b *Board) noteDue(t int64) {
	if b.due != 0 && b.due <= t {
		return
	}
	b.due = t
	select {
	case b.fineWake <- struct{}{}:
	default:
	}
}

// fineTimer is the fine goroutine's loop (see above). It exits when the
// board closes; its thread, whose timer slack it changed, exits with it.
func (b *Board) fineTimer() {
	defer close(b.fineExited)
	// Never unlocked: the thread is dropped when the goroutine ends, so
	// no other goroutine inherits its timer slack.
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(fineSlack), 0, 0, 0) // best effort
	far := time.NewTimer(time.Hour)
	far.Stop()
	for {
		b.mu.Lock()
		due := b.due
		b.mu.Unlock()
		wait := due - b.clock()
		switch {
		case due == 0 || wait > int64(fineHorizon):
			var fire <-chan time.Time
			if due != 0 {
				far.Reset(time.Duration(wait) - fineHorizon)
				fire = far.C
			}
			select {
			case <-b.quit:
				return
			case <-b.fineWake:
			case <-fire:
			}
			far.Stop()
			continue
		case wait > 0:
			ts := unix.NsecToTimespec(wait)
			_ = unix.Nanosleep(&ts, nil) // EINTR: the loop looks again
		}
		select {
		case <-b.quit:
			return
		default:
		}
		b.mu.Lock()
		if b.due != 0 && b.clock() >= b.due {
			b.runTimersLocked()
		}
		b.unlock()
	}
}
