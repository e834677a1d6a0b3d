package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

func TestAckPolicy(t *testing.T) {
	opts := fastOptions()
	opts.AckDelay = 5 * time.Millisecond
	opts.ResendDelay = time.Second // only the acks under test complete sends
	opts.ZombieSends = -1          // sends complete on their ack
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	// One message and no traffic back: only the delayed ack completes it.
	s, _ := pr.a.ISend([][]byte{[]byte("x")}, pr.atob, 1, nil)
	if _, done := s.Test(); done {
		t.Fatal("a send completed before its ack")
	}
	mustWait(t, s, 10*time.Second)
	if pr.b.Counters().Get(AcksDelayed) == 0 {
		t.Fatal("no delayed ack")
	}
	// NotAckedMax messages in a row: acked at once.
	var rs []*Request
	for i := 0; i < opts.NotAckedMax; i++ {
		r, _ := pr.a.ISend(nil, pr.atob, 2, nil)
		rs = append(rs, r)
	}
	for _, r := range rs {
		mustWait(t, r, 10*time.Second)
	}
	if pr.b.Counters().Get(AcksImmediate) == 0 {
		t.Fatal("no immediate ack")
	}
	// A reply carries the ack.
	r, _ := pr.b.IRecv(nil, 3, ^uint64(0), nil)
	s, _ = pr.a.ISend(nil, pr.atob, 3, nil)
	mustWait(t, r, 10*time.Second)
	back, _ := pr.b.ISend(nil, pr.btoa, 4, nil)
	mustWait(t, s, 10*time.Second)
	back.Forget()
	if pr.b.Counters().Get(AcksPiggybacked) == 0 {
		t.Fatal("no piggybacked ack")
	}
}

func TestEagerSendsCompleteAtOnce(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	for _, size := range []int{0, 32, 128, 20000} {
		msg := pattern(size, 1)
		s, _ := pr.a.ISend([][]byte{msg}, pr.atob, 1, nil)
		if _, done := s.Test(); !done {
			t.Fatalf("eager send of %d bytes did not complete once copied", size)
		}
		clear(msg) // the stack copied it
		buf := make([]byte, size)
		r, _ := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
		mustWait(t, r, 10*time.Second)
		if string(buf) != string(pattern(size, 1)) {
			t.Fatalf("%d bytes: payload changed after the send completed", size)
		}
	}
	// Synchronous sends wait for the receiver.
	s, _ := pr.a.ISSend([][]byte{[]byte("sync")}, pr.atob, 2, nil)
	time.Sleep(10 * time.Millisecond)
	if _, done := s.Test(); done {
		t.Fatal("issend completed before the receiver matched")
	}
	r, _ := pr.b.IRecv([][]byte{make([]byte, 4)}, 2, ^uint64(0), nil)
	mustWait(t, r, 10*time.Second)
	mustWait(t, s, 10*time.Second)
}
