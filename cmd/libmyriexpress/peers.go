//go:build cabi && cgo

package main

/*
#include "shim.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// A send names its destination by an mx_endpoint_addr_t, which holds the
// peer's NIC id, endpoint id and session but no Go pointer, so mx would
// find its record of the peer by a map lookup on every send. mx_connect
// therefore keeps the mx.Addr it got (which carries that record) in the
// endpoint's table of peers and writes the entry's index + 1 into bits
// 48-63 of the address's stuff[1]: a send through such an address loads
// the entry and uses it when it names the same peer and session, as a Go
// program's Addr from Connect does. An address from elsewhere (a status's
// source, an index from another endpoint, a stale session) misses and
// takes the lookup.

const (
	peerChunk  = 256
	peerChunks = 256 // index + 1 fits the 16 bits an address has for it
)

// peers is an endpoint's table of connected peers. Entries are added
// under mu and read without a lock; a peer keeps its index for the
// endpoint's life, a new connection to it replaces the entry.
type peers struct {
	mu     sync.Mutex
	index  map[peerKey]int // under mu
	chunks [peerChunks]atomic.Pointer[[peerChunk]atomic.Pointer[mx.Addr]]
}

type peerKey struct {
	nic transport.NICID
	eid uint8
}

// remember records a, an address mx_connect returned, and returns its
// index + 1, or 0 when the table is full (sends to a then take the
// lookup).
func (t *peers) remember(a mx.Addr) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := peerKey{a.NIC, a.Endpoint}
	i, ok := t.index[k]
	if !ok {
		i = len(t.index)
		if i >= peerChunk*peerChunks-1 {
			return 0
		}
		if t.index == nil {
			t.index = make(map[peerKey]int)
		}
		t.index[k] = i
		if i%peerChunk == 0 {
			t.chunks[i/peerChunk].Store(new([peerChunk]atomic.Pointer[mx.Addr]))
		}
	}
	t.chunks[i/peerChunk].Load()[i%peerChunk].Store(&a)
	return i + 1
}

// entry returns the remembered address at index + 1 n, or nil.
func (t *peers) entry(n int) *mx.Addr {
	i := n - 1
	if i < 0 || i >= peerChunk*peerChunks {
		return nil
	}
	c := t.chunks[i/peerChunk].Load()
	if c == nil {
		return nil
	}
	return c[i%peerChunk].Load()
}

// putConnected writes the address mx_connect returned: putAddr's, with
// the index of e's entry for it.
func putConnected(dst *C.mx_endpoint_addr_t, a mx.Addr, e *endpoint) {
	putAddr(dst, a, e)
	dst.stuff[1] |= C.uint64_t(e.peers.remember(a)) << 48
}

// dest decodes a send's destination from an address's two words: the
// remembered address the index in bits 48-63 of a1 names when it is the
// same peer and session, else the address as it is (mx finds its peer
// then). The entry is compared with the words themselves, so the common
// case builds no Addr of its own and looks up no endpoint.
func (t *peers) dest(a0, a1 uint64) mx.Addr {
	nic, eid, sess := transport.NICID(a0&nicMask), uint8(a0>>48), uint32(a1)
	if k := t.entry(int(a1 >> 48)); k != nil && k.NIC == nic && k.Endpoint == eid && k.Session == sess {
		return *k
	}
	return mx.Addr{NIC: nic, Endpoint: eid, Session: sess}
}

// destOf decodes a send's destination address for e.
func destOf(e *endpoint, a0, a1 C.uint64_t) mx.Addr {
	return e.peers.dest(uint64(a0), uint64(a1))
}
