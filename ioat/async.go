package ioat

import "context"

// CopyAsync starts copying src into dst like ICopy and returns a function
// that waits for the copy (as Wait with no deadline) and reports its
// error: the shape of a copy engine that a user without the ioat types
// (mx.CopyEngine) calls.
func (e *Engine) CopyAsync(dst, src []byte) (wait func() error, err error) {
	c, err := e.ICopy(dst, src)
	if err != nil {
		return nil, err
	}
	return func() error { return e.Wait(context.Background(), c) }, nil
}

// Invalidate drops the registration cache's mappings of memory that
// overlaps mem (buffers registered with Register or Alloc are kept). Call
// it before that memory is unmapped or handed to something else: a cached
// mapping of an address range that is later mapped again would point the
// engine at the old pages. A mapping in use by an outstanding request is
// unmapped when that request completes. It reports how many mappings it
// dropped.
func (e *Engine) Invalidate(mem []byte) int {
	if len(mem) == 0 {
		return 0
	}
	return e.cache.invalidate(addrOf(mem), len(mem))
}
