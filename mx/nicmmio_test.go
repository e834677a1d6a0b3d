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
// they fire, cannot add frames of their own: the counts are exact, not
// times.
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
	before := [2]emulated.E1000EStats{p.Stats(0), p.Stats(1)}
	p.ResetAccesses(0)
	p.ResetAccesses(1)
	const rounds = 2000
	for range rounds {
		round()
	}
	for i := range 2 {
		a, st := p.Accesses(i), p.Stats(i)
		sent, received := st.TxFrames-before[i].TxFrames, st.RxFrames-before[i].RxFrames
		t.Logf("NIC %d, %d messages each way: %d frames sent, %d received; %d register reads %v, %d writes %v",
			i, rounds, sent, received, a.TotalReads(), a.Reads, a.TotalWrites(), a.Writes)
		if sent != rounds {
			t.Errorf("NIC %d: %d frames sent for %d messages, want one a message", i, sent, rounds)
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
