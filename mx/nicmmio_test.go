package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/pci"
)

// TestPingPongMMIOBoards counts the register accesses of an mx ping-pong
// of 64 B messages between two busy-polling boards over the nic transport
// on emulated 82574Ls, as mxbench runs it over QEMU's (make peers-e1000e),
// where every access is a VM exit: no register read, and one TDT write per
// frame sent plus one RDT write per 32 received, as the raw ping through
// the same driver makes (transport/nic's TestPingPongMMIO): mx's waits and
// timers touch no register. (Its acks ride on the replies: on a quiet
// host a frame per message.) Exact counts, not times.
func TestPingPongMMIOBoards(t *testing.T) {
	p, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Hub(0, 1, 2); err != nil {
		p.Close()
		t.Fatal(err)
	}
	f := p.Functions()
	w := e1000eWire(t, "nic", [3]pci.Device{f[0], f[1], f[2]}, func() { p.Close() })
	o := DefaultBoardOptions()
	o.BusyPoll = true
	pr := newPairOn(t, w, o)
	ctx := testCtx(t, time.Minute)
	msg, got := pattern(64, 1), make([]byte, 64)
	round := func() {
		exchange(t, ctx, pr.a, pr.atob, pr.b, 7, ^uint64(0), [][]byte{msg}, [][]byte{got})
		exchange(t, ctx, pr.b, pr.btoa, pr.a, 7, ^uint64(0), [][]byte{msg}, [][]byte{got})
	}
	for range 100 {
		round()
	}
	p.ResetAccesses(0)
	p.ResetAccesses(1)
	before := [2]emulated.E1000EStats{p.Stats(0), p.Stats(1)}
	const rounds = 2000
	for range rounds {
		round()
	}
	for i := range 2 {
		a, st := p.Accesses(i), p.Stats(i)
		sent, got := st.TxFrames-before[i].TxFrames, st.RxFrames-before[i].RxFrames
		t.Logf("NIC %d, %d messages each way: %d frames sent, %d received; %d register reads %v, %d writes %v",
			i, rounds, sent, got, a.TotalReads(), a.Reads, a.TotalWrites(), a.Writes)
		if a.TotalReads() != 0 {
			t.Errorf("NIC %d: %d register reads (%v), want none", i, a.TotalReads(), a.Reads)
		}
		// A frame an ack timer sends (a loaded host can make one fire
		// before the reply that would carry the ack) is a frame like any
		// other: the count is per frame, not per message.
		if max := sent + got/32 + 1; a.TotalWrites() > max {
			t.Errorf("NIC %d: %d register writes (%v) for %d frames sent and %d received, want at most %d: TDT per frame sent, RDT per 32 received",
				i, a.TotalWrites(), a.Writes, sent, got, max)
		}
	}
}
