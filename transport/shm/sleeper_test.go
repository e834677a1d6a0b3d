package shm

import (
	"os"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// TestPeerSleepsShowTheReceiver: a producer reads in the consumer's
// doorbell whether its receiver sleeps (a Recv out of spin, or ArmSleep),
// whether it does so while a waiter of the layer above is blocked
// (AddBlocked), and, once it woke, that the time slept so was added: a
// receiver asleep with a waiter blocked at two looks with the total
// unchanged is one that slept between them. A Recv asleep while no waiter
// is blocked (a receive loop whose application computes) is Sleeping but
// not Asleep, and adds a nanosecond a sleep. A ring whose consumer closed
// is left out.
func TestPeerSleepsShowTheReceiver(t *testing.T) {
	a, b := newTestPair(t, Options{Spin: time.Microsecond})
	defer a.Close()
	peer := b.nic
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	recvFrom(t, b, a.nic)
	look := func() PeerSleep {
		t.Helper()
		s := a.PeerSleeps(nil)
		if len(s) != 1 || s[0].Peer != peer || s[0].Pid != os.Getpid() {
			t.Fatalf("PeerSleeps %+v, want board %v of process %d", s, peer, os.Getpid())
		}
		return s[0]
	}
	if s := look(); s.Asleep || s.Sleeping {
		t.Fatal("a receiver that is not in Recv shows asleep")
	}
	frames := make([]transport.Frame, 4)
	recv := func() chan error {
		done := make(chan error, 1)
		go func() {
			_, err := b.Recv(frames, -1)
			done <- err
		}()
		return done
	}
	wake := func(done chan error) {
		t.Helper()
		if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("wake")}}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// No waiter blocked: the receive loop of a process that computes.
	s0 := look()
	done := recv()
	waitFor(t, "the receiver to sleep", func() bool { return look().Sleeping })
	if s := look(); s.Asleep {
		t.Fatalf("a receiver asleep with no waiter blocked shows Asleep: %+v", s)
	}
	wake(done)
	if s := look(); s.Sleeping || s.Asleep || s.Slept <= s0.Slept || s.Slept-s0.Slept >= time.Microsecond {
		t.Fatalf("woken: %+v after %+v, want awake with a nanosecond a sleep more slept", s, s0)
	}
	// A waiter blocked: asleep from one look to the next shows the same
	// total at both (a sleep may end at once for an old wake-up: then it
	// sleeps again and the next two looks agree), and the sleep, which
	// began before the first look and ends at the wake-up the send
	// writes, is added: at least the time from the first look to the
	// send's start (not to its return, which on a loaded host may come
	// long after the receiver woke).
	b.AddBlocked(1)
	done = recv()
	var s1 PeerSleep
	var looked time.Time
	waitFor(t, "two looks at the receiver asleep between them", func() bool {
		s1 = look()
		looked = time.Now()
		s2 := look()
		return s1.Asleep && s2.Asleep && s2.Slept == s1.Slept
	})
	least := time.Since(looked)
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("wake")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s3 := look()
	if s3.Asleep || s3.Sleeping || s3.Slept-s1.Slept < least {
		t.Fatalf("woken: %+v after %+v, want awake with at least %v more slept", s3, s1, least)
	}
	// A sleep prepared outside Recv (mx's waiters, which count
	// themselves blocked first) shows the same way, even one called off
	// at once.
	b.ArmSleep()
	if s := look(); !s.Asleep || s.Slept != s3.Slept {
		t.Fatalf("armed: %+v after %+v", s, s3)
	}
	b.EndSleep(false)
	s4 := look()
	if s4.Asleep || s4.Slept <= s3.Slept {
		t.Fatalf("ended: %+v after %+v", s4, s3)
	}
	b.AddBlocked(-1)
	b.ArmSleep()
	if s := look(); s.Asleep || !s.Sleeping {
		t.Fatalf("armed with no waiter blocked: %+v", s)
	}
	b.EndSleep(false)
	b.Close()
	waitFor(t, "the closed consumer's ring to go", func() bool { return len(a.PeerSleeps(nil)) == 0 })
}
