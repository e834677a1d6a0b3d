package mx

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
)

var shmFactory = transportFactory{name: "shm", new: newShmWire}

// waitUntil polls cond until it holds; the bound only keeps a broken build
// from hanging.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func shmCounter(tr *shm.Transport, name string) uint64 {
	for _, c := range tr.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestWaitPollsTheRings: a Wait on a shared-memory board polls the rings
// itself, and the message that arrives while it does completes it on the
// waiting goroutine: it never sleeps.
func TestWaitPollsTheRings(t *testing.T) {
	o := fastOptions()
	o.Spin = time.Hour // the message comes whenever the machine lets it
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	st0 := pr.ba.WaitStats() // the connects
	ctx := testCtx(t, time.Minute)
	buf := make([]byte, 8)
	r, err := pr.a.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := r.Wait(ctx)
		errc <- err
	}()
	waitUntil(t, "the waiter to poll", func() bool { return pr.ba.WaitStats().Spinning == 1 })
	s, err := pr.b.ISend([][]byte{[]byte("8 bytes!")}, pr.btoa, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, time.Minute)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if string(buf) != "8 bytes!" {
		t.Fatalf("received %q", buf)
	}
	st := pr.ba.WaitStats()
	if st.Polled != st0.Polled+1 || st.Slept != st0.Slept || st.Spinning != 0 {
		t.Fatalf("wait stats %+v: want one wait completed while polling", st)
	}
}

// TestIdleWaiterSleeps: a waiter whose message does not come polls for its
// budget only, then sleeps, and so does the board's receive loop (the
// rings' futex); the message that comes later still wakes it.
func TestIdleWaiterSleeps(t *testing.T) {
	o := fastOptions()
	o.Spin = 100 * time.Microsecond
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	st0 := pr.ba.WaitStats() // the connects
	ctx := testCtx(t, time.Minute)
	buf := make([]byte, 100)
	r, err := pr.a.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := r.Wait(ctx)
		errc <- err
	}()
	waitUntil(t, "the waiter to give up polling", func() bool {
		st := pr.ba.WaitStats()
		return st.Slept == st0.Slept+1 && st.Spinning == 0
	})
	tr := pr.ba.tr.(*shm.Transport)
	sleeps := shmCounter(tr, "shm receiver sleeps")
	waitUntil(t, "the receive loop to sleep", func() bool { return shmCounter(tr, "shm receiver sleeps") > sleeps })
	msg := pattern(100, 3)
	s, err := pr.b.ISend([][]byte{msg}, pr.btoa, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, time.Minute)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, msg) {
		t.Fatal("the message differs")
	}
	if st := pr.ba.WaitStats(); st.Polled != st0.Polled || st.Slept != st0.Slept+1 {
		t.Fatalf("wait stats %+v: want the one wait to have slept", st)
	}
}

// TestTestPollsTheRings: Test alone (no Wait) completes a receive whose
// message sits in the rings, and a Wait on a board that may not spin
// sleeps at once.
func TestTestPollsTheRings(t *testing.T) {
	o := fastOptions()
	o.Spin = -1
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	st0 := pr.ba.WaitStats()
	if len(pr.ba.waitSources()) != 0 {
		t.Fatal("a board with Spin < 0 polls in Wait")
	}
	buf := make([]byte, 8)
	r, _ := pr.a.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	s, _ := pr.b.ISend([][]byte{[]byte("12345678")}, pr.btoa, 1, nil)
	mustWait(t, s, time.Minute)
	deadline := time.Now().Add(time.Minute)
	for {
		if st, ok := r.Test(); ok {
			if st.Code != nil || string(buf) != "12345678" {
				t.Fatalf("status %v, data %q", st.Code, buf)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Test never reported the message")
		}
	}
	if st := pr.ba.WaitStats(); st != st0 || st.Polled != 0 || st.Slept != 0 {
		t.Fatalf("wait stats %+v without a Wait", st)
	}
}

// TestSpinOption: GOMX_SPIN sets the budget of boards that leave Spin at
// zero; 0 turns polling off, a bad value is refused with an error naming
// the variable.
func TestSpinOption(t *testing.T) {
	open := func() (*Board, error) {
		port, err := loopback.NewNetwork(loopback.Options{}).Attach(1)
		if err != nil {
			t.Fatal(err)
		}
		return NewBoard(port, fastOptions())
	}
	for _, c := range []struct {
		env  string
		want time.Duration
	}{{"", DefaultSpin}, {"20us", 20 * time.Microsecond}, {"0", -1}} {
		t.Setenv("GOMX_SPIN", c.env)
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Options().Spin; got != c.want {
			t.Errorf("GOMX_SPIN=%q: Spin %v, want %v", c.env, got, c.want)
		}
		b.Close()
	}
	t.Setenv("GOMX_SPIN", "soon")
	if _, err := open(); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("GOMX_SPIN=soon: %v, want ErrBadOptions", err)
	}
}
