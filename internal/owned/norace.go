//go:build !race

package owned

// Inc adds 1 to the count: a plain load and store, for the count's one
// writer at a time.
func (c *Count) Inc() { c.v++ }

// Add adds n to the count, as Inc.
func (c *Count) Add(n uint64) { c.v += n }
