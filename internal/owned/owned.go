// Package owned has the counts a hot path keeps without a locked
// instruction.
//
// Go's sync/atomic has no relaxed or release store: on amd64 every atomic
// store is an XCHG, which, like a LOCK-prefixed add, drains the store
// buffer and costs about 20 cycles. A statistic that one goroutine at a
// time bumps (under a lock of its own, or on a path serialized otherwise)
// and that others only read does not need that: the writer owns the
// count, and a reader wants some recent value of it. Count is such a
// count: Inc is a plain load and store of one aligned word, which the Go
// memory model lets a racing reader observe only whole (a read of a word
// sees some write of it), and Load is an atomic load.
//
// Under the race detector Inc is an atomic store instead, so tests still
// catch two writers that are not serialized (their loads and stores of
// the word then race with each other, which the detector reports), and
// the reader's atomic load pairs with it.
//
// Count suits counts only: nothing may be ordered by a reader's
// observation of it.
package owned

import "sync/atomic"

// Count is a count with one writer at a time (see the package doc). The
// zero value is 0.
type Count struct {
	v uint64
}

// Load returns the count: any goroutine may call it.
func (c *Count) Load() uint64 { return atomic.LoadUint64(&c.v) }
