package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestPingPongAllocatesNothing: once warm, an 8-byte ping-pong allocates
// nothing per message over the in-process wire and over AF_XDP (where the
// test can open it), whether the waiters busy-poll or block: requests,
// frames, acks and the round-trip bookkeeping all come from what the
// boards keep. One goroutine drives both boards, as BenchmarkMessageCost
// does, so a wait never needs the other side's goroutine; the receiver
// looks once before the send, as one already waiting would (which also
// hands the in-process wire's slot back, so the sender reuses its first
// slot instead of walking the ring and filling each slot's buffer).
func TestPingPongAllocatesNothing(t *testing.T) {
	for _, tf := range []transportFactory{{name: "loopback", new: newLoopbackWire}, {name: "xdp", new: newXDPWire}} {
		for _, busy := range []bool{true, false} {
			name := tf.name + "/block"
			if busy {
				name = tf.name + "/busypoll"
			}
			t.Run(name, func(t *testing.T) {
				o := DefaultBoardOptions()
				o.BusyPoll = busy
				pr := newPair(t, tf, o, loopback.Faults{})
				ctx := testCtx(t, time.Minute)
				msg, bufA, bufB := []byte("8 bytes!"), make([]byte, 8), make([]byte, 8)
				ssegs, asegs, bsegs := [][]byte{msg}, [][]byte{bufA}, [][]byte{bufB}
				one := func(src *Endpoint, to Addr, dst *Endpoint, rsegs [][]byte) {
					r, err := dst.IRecv(rsegs, 1, ^uint64(0), nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, ok := r.Test(); ok {
						t.Fatal("a receive completed before its message was sent")
					}
					s, err := src.ISend(ssegs, to, 1, nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := s.Wait(ctx); err != nil {
						t.Fatal(err)
					}
					if _, err := r.Wait(ctx); err != nil {
						t.Fatal(err)
					}
				}
				round := func() {
					one(pr.a, pr.atob, pr.b, bsegs)
					one(pr.b, pr.btoa, pr.a, asegs)
				}
				for range 200 {
					round()
				}
				if string(bufA) != string(msg) || string(bufB) != string(msg) {
					t.Fatalf("received %q and %q, sent %q", bufA, bufB, msg)
				}
				if allocs := testing.AllocsPerRun(2000, round); allocs != 0 {
					t.Errorf("%v allocations per round trip", allocs)
				}
			})
		}
	}
}
