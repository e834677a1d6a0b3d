package shm

import (
	"os"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// sleepPair is a producer a and its consumer b, connected by a first
// frame, and look, which reads b's doorbell as a sees it (PeerSleeps).
func sleepPair(t *testing.T) (a, b *Transport, look func() PeerSleep) {
	a, b = newTestPair(t, Options{Spin: time.Microsecond})
	if _, err := a.Send([]transport.Frame{{Peer: b.nic, Data: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	recvFrom(t, b, a.nic)
	return a, b, func() PeerSleep {
		t.Helper()
		s := a.PeerSleeps(nil)
		if len(s) != 1 || s[0].Peer != b.nic || s[0].Pid != os.Getpid() {
			t.Fatalf("PeerSleeps %+v, want board %v of process %d", s, b.nic, os.Getpid())
		}
		return s[0]
	}
}

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
	a, b, look := sleepPair(t)
	defer a.Close()
	peer := b.nic
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

// TestPeerSleepsShowWhenTheSleepBegan: a receiver asleep with a waiter
// blocked shows when its sleep began (Since, on CLOCK_MONOTONIC: between
// the Recv's call and the look), none once awake, none for a sleep with
// no waiter blocked (a receive loop while its application computes, which
// the layer above counts as competing for a CPU), and none from a
// receiver whose build writes no start (the word left 0).
func TestPeerSleepsShowWhenTheSleepBegan(t *testing.T) {
	a, b, look := sleepPair(t)
	defer a.Close()
	defer b.Close()
	peer := b.nic
	frames := make([]transport.Frame, 4)
	b.AddBlocked(1)
	before := MonoNow()
	done := make(chan error, 1)
	go func() {
		_, err := b.Recv(frames, -1)
		done <- err
	}()
	var s PeerSleep
	waitFor(t, "the receiver asleep", func() bool { s = look(); return s.Asleep })
	if now := MonoNow(); s.Since == 0 || s.Since < before || s.Since > now {
		t.Fatalf("asleep since %v: want within [%v, %v] (the Recv's call, the look)", s.Since, before, now)
	}
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("wake")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := look(); s.Asleep || s.Since != 0 {
		t.Fatalf("woken: %+v, want not Asleep and no Since", s)
	}
	// A receiver whose build writes no start (the word 0): Asleep, no
	// Since.
	b.ArmSleep()
	u64At(b.bell.mem, bellSinceOff).Store(0)
	if s := look(); !s.Asleep || s.Since != 0 {
		t.Fatalf("asleep with the word 0: %+v, want Asleep and no Since", s)
	}
	b.EndSleep(false)
	// No waiter blocked: sleeping, not Asleep, and the word 0.
	b.AddBlocked(-1)
	b.ArmSleep()
	if s := look(); !s.Sleeping || s.Asleep || s.Since != 0 || u64At(b.bell.mem, bellSinceOff).Load() != 0 {
		t.Fatalf("armed with no waiter blocked: %+v, word %d: want Sleeping, no Since, the word 0", s, u64At(b.bell.mem, bellSinceOff).Load())
	}
	b.EndSleep(false)
}
