package cpuclock

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// A locked thread's clock read by itself and by its id is one clock: it
// advances while the thread works, and the two readings agree in order.
func TestThreadAndOfThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := int32(unix.Gettid())
	before := Thread()
	if before <= 0 {
		t.Skip("the kernel gives no thread CPU clock")
	}
	by := OfThread(tid)
	// Spin until the clock moves by a millisecond, bounded.
	x := 0
	for i := 0; i < 1e9 && Thread()-before < 1e6; i++ {
		x += i
	}
	after := OfThread(tid)
	if by < before || after-before < 1e6 {
		t.Errorf("thread %d: own clock %v, by id %v then %v (x %d): want one clock that advanced 1ms", tid, before, by, after, x)
	}
}
