//go:build race

package owned

import "sync/atomic"

// Inc adds 1 to the count: under the race detector an atomic store, which
// pairs with Load (see the package doc).
func (c *Count) Inc() { atomic.StoreUint64(&c.v, c.v+1) }

// Add adds n to the count, as Inc.
func (c *Count) Add(n uint64) { atomic.StoreUint64(&c.v, c.v+n) }
