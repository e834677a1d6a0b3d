//go:build cabi && cgo

package main

import (
	"sync"
	"testing"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// TestPeers checks the table of connected peers: a peer keeps its index,
// a new connection replaces its entry, and an index that names another
// peer or an old session, or none, gives the address back unchanged.
func TestPeers(t *testing.T) {
	var tab peers
	a := mx.Addr{NIC: 0x1234, Endpoint: 3, Session: 7}
	b := mx.Addr{NIC: 0x1234, Endpoint: 4, Session: 9}
	na, nb := tab.remember(a), tab.remember(b)
	if na != 1 || nb != 2 {
		t.Fatalf("indexes %d, %d: want 1, 2", na, nb)
	}
	if got := lookup(&tab, mx.Addr{NIC: 0x1234, Endpoint: 3, Session: 7}, na); got != a {
		t.Errorf("lookup of a: %+v, want %+v", got, a)
	}
	// b's index with a's address: the entry names another peer.
	if got := lookup(&tab, a, nb); got != a {
		t.Errorf("lookup of a with b's index: %+v", got)
	}
	for _, n := range []int{0, -1, 3, 1 << 16, peerChunk + 1} {
		if got := lookup(&tab, a, n); got != a {
			t.Errorf("lookup with index %d: %+v", n, got)
		}
	}
	// A reconnection: same index, the new session; the old one misses.
	a2 := a
	a2.Session = 8
	if n := tab.remember(a2); n != na {
		t.Errorf("reconnection's index %d, want %d", n, na)
	}
	if got := lookup(&tab, a2, na); got != a2 {
		t.Errorf("lookup after reconnection: %+v", got)
	}
	old := a
	if got := lookup(&tab, old, na); got != old {
		t.Errorf("lookup of the old session: %+v", got)
	}
}

// TestPeersFull fills the table: the last index fits 16 bits, and a peer
// past it gets 0 (its sends take mx's lookup).
func TestPeersFull(t *testing.T) {
	var tab peers
	var last int
	for i := 0; ; i++ {
		n := tab.remember(mx.Addr{NIC: transport.NICID(i >> 8), Endpoint: uint8(i)})
		if n == 0 {
			break
		}
		last = n
		if i > peerChunk*peerChunks {
			t.Fatal("the table never filled")
		}
	}
	if last != peerChunk*peerChunks-1 || last >= 1<<16 {
		t.Fatalf("last index + 1 %d: want %d", last, peerChunk*peerChunks-1)
	}
}

// TestPeersConcurrent looks peers up while they are remembered (run with
// -race: entries are read without a lock), then checks every entry.
func TestPeersConcurrent(t *testing.T) {
	var tab peers
	const n = 2 * peerChunk
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			tab.remember(mx.Addr{NIC: transport.NICID(i), Session: 1})
		}
	}()
	for range 20 {
		for i := range n {
			a := mx.Addr{NIC: transport.NICID(i), Session: 1}
			if got := lookup(&tab, a, i+1); got != a {
				t.Fatalf("peer %d: %+v", i, got)
			}
		}
	}
	wg.Wait()
	for i := range n {
		k := tab.chunks[i/peerChunk].Load()[i%peerChunk].Load()
		if k == nil || k.NIC != transport.NICID(i) {
			t.Fatalf("entry %d: %+v", i, k)
		}
	}
}

// lookup is what a send to a, its address carrying index + 1 n, sends to.
func lookup(t *peers, a mx.Addr, n int) mx.Addr {
	return t.dest(uint64(a.NIC)&nicMask|uint64(a.Endpoint)<<48, uint64(a.Session)|uint64(uint16(n))<<48)
}
