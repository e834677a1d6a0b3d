package mx

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// After a run that sent frames (here a question about a message the wire
// lost), the fine timer's goroutine yields its P before it sets the
// timerfd again. A deadline noted meanwhile costs its noter no
// timerfd_settime and is set by the goroutine as it goes back to sleep; a
// Close meanwhile ends the goroutine.
func TestFineYieldLeavesArmToTimer(t *testing.T) {
	for _, closing := range []bool{false, true} {
		t.Run(map[bool]string{false: "noted", true: "closed"}[closing], func(t *testing.T) {
			pr := newPair(t, transportFactory{name: "loopback", new: newLoopbackWire}, fastOptions(), loopback.Faults{})
			b := pr.ba
			if b.fine == nil {
				t.Skip("no timerfd on this system: the board keeps its ticks alone")
			}
			ctx := testCtx(t, 20*time.Second)
			type seen struct {
				arms  uint64
				awake bool
				armed int64
			}
			got := make(chan seen, 1)
			closed := make(chan error, 1)
			hook := func(hb *Board) {
				if hb != b {
					return
				}
				fineYieldHook.Store(nil) // once
				if closing {
					go func() { closed <- b.Close() }()
					for { // until Close has marked the board closed
						b.mu.Lock()
						c := b.closed
						b.mu.Unlock()
						if c || ctx.Err() != nil {
							return
						}
						time.Sleep(time.Microsecond)
					}
				}
				b.mu.Lock()
				arms := b.cnt[FineArms]
				b.armFine(b.clock() + int64(time.Microsecond)) // as noteDue would
				got <- seen{b.cnt[FineArms] - arms, b.fineAwake, b.armed}
				b.mu.Unlock()
			}
			// Round trips measured first: the question's deadline is
			// then tens of microseconds after the send, the fine
			// timer's and not the receive loop's tick.
			msg := make([]byte, 8)
			exchangeCounted(t, pr, msg, make([]byte, 8), 64)
			fineYieldHook.Store(&hook)
			t.Cleanup(func() { fineYieldHook.Store(nil) })
			pr.w.faults(loopback.Faults{Loss: 1}) // every frame from now on
			if _, err := pr.a.ISend([][]byte{msg}, pr.atob, 99, nil); err != nil {
				t.Fatal(err)
			}
			if closing {
				select {
				case err := <-closed:
					if err != nil {
						t.Fatalf("Close in the fine timer's yield: %v", err)
					}
				case <-ctx.Done():
					t.Fatal("Close in the fine timer's yield did not return")
				}
				return
			}
			var sn seen
			select {
			case sn = <-got:
			case <-ctx.Done():
				c := b.Counters()
				t.Fatalf("the fine timer never ran the timers for the lost message: firings %d idle %d arms %d asks %d probes %d resends %d", c.Get(FineFirings), c.Get(FineIdle), c.Get(FineArms), c.Get(TailAsks), c.Get(TailProbes), c.Get(TimerRetransmits))
			}
			if sn.arms != 0 || sn.armed != 0 || !sn.awake {
				t.Fatalf("a deadline noted in the yield: %d arms, armed for %d (awake %v); want none, the goroutine up", sn.arms, sn.armed, sn.awake)
			}
			for {
				b.mu.Lock()
				awake, armed, due := b.fineAwake, b.armed, b.due.Load()
				b.mu.Unlock()
				if !awake && armed != 0 {
					// Set, and no later than the earliest deadline
					// pending (runs since may have moved it).
					if due != 0 && armed > due {
						t.Fatalf("back to sleep, the timer was set for %d, after the earliest deadline %d", armed, due)
					}
					return
				}
				if ctx.Err() != nil {
					t.Fatalf("the fine timer's goroutine did not set the timerfd again (awake %v, armed %d)", awake, armed)
				}
				time.Sleep(10 * time.Microsecond)
			}
		})
	}
}

// BenchmarkTimerfdSettime is what a fine timer's setting costs the thread
// that makes it: due within the CPU's next timer event (40 µs ahead) it
// reprograms the local APIC timer, which a virtual machine's guest does
// through its hypervisor; set behind the tick (1 ms ahead) it does not.
// A plain system call is the baseline (docs/loss-recovery.md).
func BenchmarkTimerfdSettime(b *testing.B) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		b.Skip("no timerfd:", err)
	}
	defer unix.Close(fd)
	for _, ahead := range []time.Duration{40 * time.Microsecond, time.Millisecond} {
		b.Run(ahead.String()+" ahead", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(ahead) + int64(i%7)*1000)}
				if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("getppid", func(b *testing.B) {
		for b.Loop() {
			unix.Getppid()
		}
	})
}
