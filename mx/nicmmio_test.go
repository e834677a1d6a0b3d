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
// where every access is a VM exit: per message sent, no register read and
// one TDT write, plus one RDT write per 32 received, as the raw ping
// through the same driver makes (transport/nic's TestPingPongMMIO): mx's
// acks ride on the replies, and its waits and timers touch no register.
// Exact counts, not times.
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
	const rounds = 2000
	for range rounds {
		round()
	}
	for i := range 2 {
		a := p.Accesses(i)
		reads, writes := float64(a.TotalReads())/rounds, float64(a.TotalWrites())/rounds
		t.Logf("NIC %d per message sent and received: %.3f register reads %v, %.3f writes %v", i, reads, a.Reads, writes, a.Writes)
		if reads != 0 {
			t.Errorf("NIC %d: %.3f register reads per message (%v), want none", i, reads, a.Reads)
		}
		if max := 1 + 1.0/32 + 1.0/rounds; writes > max {
			t.Errorf("NIC %d: %.3f register writes per message (%v), want at most %.3f: TDT per frame sent, RDT per 32 received", i, writes, a.Writes, max)
		}
	}
}
