package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
)

// TestPingPongMMIOBoards counts the frames and register accesses of an mx
// ping-pong of 64 B messages between two busy-polling boards over the nic
// transport on emulated 82574Ls, as mxbench runs it over QEMU's (make
// peers-e1000e), where every access is a VM exit: a frame per message
// (each ack rides on the reply), no register read, and one TDT write per
// frame sent plus one RDT write per 32 received, as the raw ping through
// the same driver makes (transport/nic's TestPingPongMMIO): mx's waits
// touch no register. The ack, resend and tail-loss probe timers are an
// hour, so that a loaded host, which may keep a reply from coming before
// they fire, cannot add frames of their own. A reply that is only late
// may still draw a question (ask.go), and its answer: each is a frame of
// its own, counted apart (the endpoints' TailAsks and AsksAnswered) so
// that the data frames are exact, one a message, whatever the host's
// load; every frame sent, questions included, is held to its register
// writes.
func TestPingPongMMIOBoards(t *testing.T) {
	checkLeaks(t)
	p, w := nicModelWire(t)
	o := DefaultBoardOptions()
	o.BusyPoll = true
	o.AckDelay = time.Hour
	o.ResendDelay = time.Hour
	o.RTOMin = time.Hour
	pr := newPairOn(t, w, o)
	ctx := testCtx(t, time.Minute)
	msg, buf := pattern(64, 1), make([]byte, 64)
	round := func() {
		exchange(t, ctx, pr.a, pr.atob, pr.b, 7, ^uint64(0), [][]byte{msg}, [][]byte{buf})
		exchange(t, ctx, pr.b, pr.btoa, pr.a, 7, ^uint64(0), [][]byte{msg}, [][]byte{buf})
	}
	for range 100 {
		round()
	}
	eps := [2]*Endpoint{pr.a, pr.b} // on NICs 0 and 1
	// asked is the questions and answers endpoint i sent (ask.go): a
	// frame each, none of them a message's.
	asked := func(i int) uint64 {
		c := eps[i].Counters()
		return c.Get(TailAsks) + c.Get(AsksAnswered)
	}
	before := [2]emulated.E1000EStats{p.Stats(0), p.Stats(1)}
	asked0 := [2]uint64{asked(0), asked(1)}
	p.ResetAccesses(0)
	p.ResetAccesses(1)
	const rounds = 2000
	for range rounds {
		round()
	}
	for i := range 2 {
		a, st := p.Accesses(i), p.Stats(i)
		sent, received := st.TxFrames-before[i].TxFrames, st.RxFrames-before[i].RxFrames
		questions := asked(i) - asked0[i]
		t.Logf("NIC %d, %d messages each way: %d frames sent (%d questions and answers), %d received; %d register reads %v, %d writes %v",
			i, rounds, sent, questions, received, a.TotalReads(), a.Reads, a.TotalWrites(), a.Writes)
		if sent-questions != rounds {
			t.Errorf("NIC %d: %d frames sent besides %d questions and answers for %d messages, want one a message",
				i, sent-questions, questions, rounds)
		}
		if questions > rounds/10 {
			// A lossless ping-pong's replies come within the wait
			// but on a descheduled peer's rounds: a question on most
			// messages is a wait that no longer holds.
			t.Errorf("NIC %d: %d questions and answers for %d messages, want at most %d", i, questions, rounds, rounds/10)
		}
		if a.TotalReads() != 0 {
			t.Errorf("NIC %d: %d register reads (%v), want none", i, a.TotalReads(), a.Reads)
		}
		if most := sent + received/32 + 1; a.TotalWrites() > most {
			t.Errorf("NIC %d: %d register writes (%v) for %d frames sent and %d received, want at most %d: TDT per frame sent, RDT per 32 received",
				i, a.TotalWrites(), a.Writes, sent, received, most)
		}
	}
}
