package shm

import (
	"os"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// TestPeerSleepsShowTheReceiver: a producer reads in the consumer's
// doorbell whether its receiver sleeps (a Recv out of spin, or ArmSleep)
// and, once it woke, that the time slept was added: asleep at two looks
// with the total unchanged is a receiver that slept between them. A ring
// whose consumer closed is left out.
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
	if s := look(); s.Asleep {
		t.Fatal("a receiver that is not in Recv shows asleep")
	}
	done := make(chan error, 1)
	frames := make([]transport.Frame, 4)
	go func() {
		_, err := b.Recv(frames, -1)
		done <- err
	}()
	// A receiver asleep from one look to the next shows the same total
	// at both (a sleep may end at once for an old wake-up: then it sleeps
	// again and the next two looks agree).
	var s1 PeerSleep
	waitFor(t, "two looks at the receiver asleep between them", func() bool {
		s1 = look()
		s2 := look()
		return s1.Asleep && s2.Asleep && s2.Slept == s1.Slept
	})
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("wake")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s3 := look()
	if s3.Asleep || s3.Slept <= s1.Slept {
		t.Fatalf("woken: %+v after %+v, want awake with more slept", s3, s1)
	}
	// A sleep prepared outside Recv (mx's waiters) shows the same way,
	// even one called off at once.
	b.ArmSleep()
	if s := look(); !s.Asleep || s.Slept != s3.Slept {
		t.Fatalf("armed: %+v after %+v", s, s3)
	}
	b.EndSleep(false)
	if s := look(); s.Asleep || s.Slept <= s3.Slept {
		t.Fatalf("ended: %+v after %+v", s, s3)
	}
	b.Close()
	waitFor(t, "the closed consumer's ring to go", func() bool { return len(a.PeerSleeps(nil)) == 0 })
}
