package mx

import (
	"testing"
	"time"
)

// The receive loop's lockLoop returns holding the board's lock: at once
// when it is free, and, when another goroutine holds it, only after that
// goroutine releases it, however long it keeps it (past the spins, it
// waits on the lock).
func TestLockLoopTakesBoardLock(t *testing.T) {
	var b Board
	b.lockLoop()
	if b.mu.TryLock() {
		t.Fatal("lockLoop on a free lock returned without holding it")
	}
	// b.mu is held here, as by an application goroutine in a send.
	started, got := make(chan struct{}), make(chan struct{})
	go func() {
		close(started)
		b.lockLoop()
		close(got)
	}()
	<-started
	select {
	case <-got:
		t.Fatal("lockLoop took a lock another goroutine holds")
	default:
	}
	b.mu.Unlock()
	ctx := testCtx(t, 10*time.Second)
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("lockLoop did not take the lock once it was released")
	}
	if b.mu.TryLock() {
		t.Fatal("lockLoop returned without holding the released lock")
	}
	b.mu.Unlock()
}
