// Package porttable is the table of UDP ports steered to queues in
// software that the queued transports (transport/nic, xdp) share between
// their queues.
//
// Every queue's receive path reads the table for each frame it might hand
// over, while ports are steered and released rarely (an endpoint opening
// or closing). So the table is copy-on-write: a reader loads the current
// map with one atomic load and never locks; a writer copies the map under
// a mutex, changes the copy and publishes it. A map once published is
// never written again.
package porttable

import (
	"sync"
	"sync/atomic"
)

// Table maps UDP destination ports to queue indices. The zero value is an
// empty table ready for use.
type Table struct {
	mu  sync.Mutex // orders writers
	cur atomic.Pointer[map[uint16]int]
}

// Load returns the current map, which the caller must not modify; nil
// (an empty map to read) before the first Set.
func (t *Table) Load() map[uint16]int {
	if m := t.cur.Load(); m != nil {
		return *m
	}
	return nil
}

// Lookup returns the queue port is steered to.
func (t *Table) Lookup(port uint16) (q int, ok bool) {
	q, ok = t.Load()[port]
	return q, ok
}

// Len returns how many ports are steered.
func (t *Table) Len() int { return len(t.Load()) }

// Set steers port to queue q, in place of any queue it was steered to.
func (t *Table) Set(port uint16, q int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.Load()
	next := make(map[uint16]int, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[port] = q
	t.cur.Store(&next)
}

// Delete takes port out of the table.
func (t *Table) Delete(port uint16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.Load()
	next := make(map[uint16]int, len(cur))
	for k, v := range cur {
		if k != port {
			next[k] = v
		}
	}
	t.cur.Store(&next)
}
