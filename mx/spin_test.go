package mx

import (
	"testing"
	"time"
)

// A busy-polling waiter reads a cheap clock every clockEvery looks, and
// one that costs a system call (a TCG guest's HPET: microseconds) every
// slowClockEvery looks; the stride keeps the look counter's mask form.
func TestClockStride(t *testing.T) {
	for _, c := range []struct {
		cost time.Duration
		want int
	}{
		{20 * time.Nanosecond, clockEvery},     // TSC through the vDSO
		{slowClock, clockEvery},                // the boundary stays cheap
		{2 * time.Microsecond, slowClockEvery}, // HPET in a VM
	} {
		got := clockStride(c.cost)
		if got != c.want {
			t.Errorf("clockStride(%v) = %d, want %d", c.cost, got, c.want)
		}
		if got&(got-1) != 0 {
			t.Errorf("clockStride(%v) = %d: not a power of two, so not a mask", c.cost, got)
		}
	}
}
