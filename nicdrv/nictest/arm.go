package nictest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// WaitArmed waits, 20 s at most, until register reg has been written more
// than past times, as writes counts them (a model's count of the writes to
// a register of the port under test: emulated's Accesses), yielding
// between looks. A test counts the writes to a queue's mask register,
// starts a WaitRx, and waits here for the write that arms the queue's
// vector before it sends a frame or cancels: what comes next then meets a
// sleeping waiter. If the write does not come it fails t with a message
// that begins with what (which wait: "frame 3 on queue 2") and names the
// register.
func WaitArmed(t testing.TB, what string, writes func(reg string) uint64, reg string, past uint64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); writes(reg) <= past; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: WaitRx did not arm its vector: no %s write past the %d counted in 20 s", what, reg, past)
		}
		runtime.Gosched()
	}
}

// LatchedCause is a NIC under test, opened with interrupts on, and what
// CheckArmClearsLatchedCause needs of its driver's test to drive it.
type LatchedCause struct {
	// NIC receives, on queue 0.
	NIC nicdrv.NIC
	// Writes returns the model's count of writes to a register of NIC's
	// port.
	Writes func(reg string) uint64
	// Mask names the register whose write arms queue 0's vector (IMS,
	// EIMS_EX0).
	Mask string
	// Interrupts returns how many interrupts the model raised on NIC's
	// port.
	Interrupts func() uint64
	// Send sends frame i to NIC's queue 0.
	Send func(i int)
	// Take waits (bounded) until the count frames sent since the check
	// began have come in on queue 0, and frees them.
	Take func(count int)
}

// CheckArmClearsLatchedCause checks that frames taken while queue 0's
// vector was masked (it fired, and masked itself, for the first of them)
// leave no interrupt behind: the WaitRx that next sleeps on the emptied
// ring clears the cause they latched as it arms, so the arming raises no
// interrupt and the sleep ends only at its cancellation. Without the
// clear the model sends the latched cause at the arming write: one
// interrupt, for frames already taken.
func CheckArmClearsLatchedCause(t testing.TB, c LatchedCause) {
	t.Helper()
	wait := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.NIC.WaitRx(ctx, time.Time{}, 0)
			done <- err
		}()
		return done
	}
	interrupts := func() uint64 {
		t.Helper()
		s, err := c.NIC.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.Interrupts
	}
	// The first frame wakes a sleeping WaitRx: the vector fires and masks
	// itself; three more come while it is masked.
	// Bounded, so a driver that never takes the interrupt fails here.
	first, cancelFirst := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelFirst()
	count := c.Writes(c.Mask)
	done := wait(first)
	WaitArmed(t, "the first frame", c.Writes, c.Mask, count)
	c.Send(0)
	if err := <-done; err != nil {
		t.Fatalf("WaitRx for the first frame (20 s at most): %v", err)
	}
	for i := 1; i < 4; i++ {
		c.Send(i)
	}
	c.Take(4) // every frame in the ring, its cause latched, and taken
	before, consumed := c.Interrupts(), interrupts()
	// An interrupt the vector raised before it masked itself (a frame
	// right behind the first, which a slow machine, QEMU's TCG, lets
	// through) may still wait in its eventfd: the next wait takes it,
	// and it is no cause the arming left latched.
	pending := uint64(0)
	if before > consumed {
		pending = before - consumed
	}
	ctx, cancel := context.WithCancel(context.Background())
	count = c.Writes(c.Mask)
	done = wait(ctx)
	WaitArmed(t, "the emptied ring", c.Writes, c.Mask, count)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitRx on the emptied ring, cancelled: %v, want context.Canceled", err)
	}
	if got := c.Interrupts() - before; got != 0 {
		t.Errorf("arming queue 0 for a sleep on its emptied ring raised %d interrupts, want 0: the cause the frames taken while it was masked latched was not cleared", got)
	}
	if got := interrupts() - consumed; got > pending {
		t.Errorf("WaitRx on the emptied ring consumed %d interrupts, want at most the %d raised before it and not yet taken", got, pending)
	}
}
