package nic_test

import (
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// TestPingPongMMIO counts what an mx ping-pong over the transport costs
// each NIC per frame on QEMU's e1000e, on the model: no register read, and
// one register write per frame sent (TDT) plus one RDT write per 32
// received, where DPDK's em driver under testpmd writes RDT on every
// received burst as well (nicdrv/e1000e's TestReflectorMMIO). Exact
// counts, not times.
func TestPingPongMMIO(t *testing.T) {
	p, ts := modelTransports(t)
	msg := make([]byte, 64)
	in := make([]transport.Frame, 8)
	hop := func(from, to int) {
		out := []transport.Frame{{Peer: ts[to].Addr(), Data: msg}}
		if n, err := ts[from].Send(out); n != 1 || err != nil {
			t.Fatalf("send %d->%d: %d, %v", from, to, n, err)
		}
		// The model delivers on the TDT write: the frame is there.
		if n, err := ts[to].Recv(in, 0); n != 1 || err != nil || len(in[0].Data) != len(msg) {
			t.Fatalf("recv %d->%d: %d, %v", from, to, n, err)
		}
	}
	for range 64 {
		hop(0, 1)
		hop(1, 0)
	}
	p.ResetAccesses(0)
	p.ResetAccesses(1)
	const rounds = 32 * 32
	for range rounds {
		hop(0, 1)
		hop(1, 0)
	}
	for i := range 2 {
		a := p.Accesses(i)
		reads, writes := float64(a.TotalReads())/rounds, float64(a.TotalWrites())/rounds
		t.Logf("NIC %d per frame sent and received: %.3f register reads %v, %.3f writes %v", i, reads, a.Reads, writes, a.Writes)
		if reads != 0 {
			t.Errorf("NIC %d: %.3f register reads per round (%v), want none on the fast path", i, reads, a.Reads)
		}
		if max := 1 + 1.0/32 + 1.0/rounds; writes > max {
			t.Errorf("NIC %d: %.3f register writes per round (%v), want at most %.3f: TDT per frame sent, RDT per 32 received", i, writes, a.Writes, max)
		}
	}
}

// modelTransports opens the transport on both NICs of a cabled pair of
// emulated 82574Ls, closed (transports, then the model) at the end of tb.
func modelTransports(tb testing.TB) (*emulated.E1000E, [2]*nic.Transport) {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	var ts [2]*nic.Transport
	for i := range ts {
		n, err := e1000e.Open(p.Functions()[i], e1000e.DefaultOptions())
		if err != nil {
			tb.Fatal(err)
		}
		if ts[i], err = nic.New(n, nic.Options{}); err != nil {
			n.Close()
			tb.Fatal(err)
		}
		tb.Cleanup(func() { ts[i].Close() })
	}
	return p, ts
}
