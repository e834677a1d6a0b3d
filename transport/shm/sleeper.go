package shm

import (
	"time"

	"golang.org/x/sys/unix"
)

// ArmSleep prepares a sleep on the doorbell's eventfd outside Recv (see
// [transport.Sleeper]): it announces the sleep to producers, as Recv does
// before it sleeps, then looks once more (Pending). The caller serializes
// it with its own Recv calls, as for Pending.
func (t *Transport) ArmSleep() (fd int, sleep bool) {
	t.sleepFrom, t.sleepHeld = time.Now(), t.blocked.Load() != 0
	t.announceSleep(t.sleepHeld)
	if t.Pending() || t.wakeReq.Load() {
		return t.ev.fd, false
	}
	return t.ev.fd, true
}

// EndSleep ends a sleep ArmSleep prepared, and reads the eventfd's count
// when the caller's poll found it readable, so the next sleep sleeps.
func (t *Transport) EndSleep(readable bool) {
	t.awake(time.Since(t.sleepFrom), t.sleepHeld)
	if readable {
		var b [8]byte
		_, _ = unix.Read(t.ev.fd, b[:])
	}
}

// announceSleep raises the doorbell's sleeping flag, after writing when
// the sleep began (bellSinceOff, CLOCK_MONOTONIC ns) for one that awake
// will count (held: a waiter was blocked at its start), 0 for one it
// will not, so that a producer that sees the flag up sees how long a
// sleep still going on, in no total yet, has slept (PeerSleeps), and
// takes a loop asleep while its application computes for awake.
func (t *Transport) announceSleep(held bool) {
	var since uint64
	if held {
		since = uint64(monoNow())
	}
	u64At(t.bell.mem, bellSinceOff).Store(since)
	t.slp.Store(1)
}

// monoNow reads CLOCK_MONOTONIC, in ns: the clock every process of the
// host shares and no wall-clock step moves. 0 if it cannot be read.
func monoNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// MonoNow is CLOCK_MONOTONIC now, the clock of PeerSleep.Since.
func MonoNow() time.Duration { return time.Duration(monoNow()) }

// awake ends a sleep announced in the doorbell: it lowers the flag, then
// adds slept to the doorbell's total when a waiter was blocked at its
// start (held) and still is, a nanosecond otherwise, so that a producer
// sees a new sleep, or one called off (PeerSleeps). In that order, a
// reader that saw the flag up reads a total without this sleep.
func (t *Transport) awake(slept time.Duration, held bool) {
	t.slp.Store(0)
	if !held || t.blocked.Load() == 0 {
		slept = 1
	}
	t.slept.Add(uint64(max(slept, 1)))
}
