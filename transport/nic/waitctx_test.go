package nic

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Recv wait's deadline context keeps the context contract without a
// timer of its own: Err is nil before the deadline and DeadlineExceeded
// after it, Done closes at the deadline for a caller that asks for it,
// the parent's cancel comes through, and the first error stays.
func TestDeadlineCtx(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		d := time.Now().Add(20 * time.Millisecond)
		c, release := withDeadline(context.Background(), d)
		defer release()
		if got, ok := c.Deadline(); !ok || !got.Equal(d) {
			t.Fatalf("Deadline() = %v, %v; want %v, true", got, ok, d)
		}
		if err := c.Err(); err != nil && time.Now().Before(d) {
			t.Fatalf("Err() before the deadline = %v", err)
		}
		select {
		case <-c.Done():
		case <-time.After(time.Minute):
			t.Fatal("Done not closed a minute past a 20 ms deadline")
		}
		if time.Now().Before(d) {
			t.Fatal("Done closed before the deadline")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err() past the deadline = %v; want DeadlineExceeded", err)
		}
	})
	t.Run("err without Done", func(t *testing.T) {
		d := time.Now().Add(time.Millisecond)
		c, release := withDeadline(context.Background(), d)
		defer release()
		for tries := 0; c.Err() == nil; tries++ {
			if tries > 1e6 || time.Since(d) > time.Minute {
				t.Fatal("Err still nil a minute past the deadline")
			}
			time.Sleep(100 * time.Microsecond)
		}
		if time.Now().Before(d) {
			t.Fatal("Err non-nil before the deadline")
		}
		if c.timed != nil {
			t.Fatal("a timer was made though nobody asked for Done")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		c, release := withDeadline(parent, time.Now().Add(time.Hour))
		defer release()
		done := c.Done()
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("Done not closed after the parent's cancel")
		}
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err() = %v; want Canceled", err)
		}
	})
	t.Run("first error stays", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		c, release := withDeadline(parent, time.Now().Add(-time.Second))
		defer release()
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err() past the deadline = %v; want DeadlineExceeded", err)
		}
		cancel()
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err() after a later cancel = %v; want DeadlineExceeded still", err)
		}
	})
	t.Run("done after release", func(t *testing.T) {
		c, release := withDeadline(context.Background(), time.Now().Add(time.Hour))
		release()
		select {
		case <-c.Done():
		default:
			t.Fatal("Done after release is not closed")
		}
	})
}
