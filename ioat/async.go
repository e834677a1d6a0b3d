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
	return e.cache.invalidate(mem)
}

// CopyPoll starts copying src into dst like ICopy and returns a function
// that reports, without waiting, whether the copy has completed (as Check)
// and its error: the shape a user without the ioat types (mx) polls while
// it does other work.
func (e *Engine) CopyPoll(dst, src []byte) (poll func() (bool, error), err error) {
	c, err := e.ICopy(dst, src)
	if err != nil {
		return nil, err
	}
	return func() (bool, error) { return e.Check(c) }, nil
}

// CopyWaitPoll starts copying src into dst like ICopy and returns both a
// function that waits for the copy (as CopyAsync's) and one that reports,
// without waiting, whether it has completed and its error (as CopyPoll's):
// a user that polls while the application tests its requests, and sleeps
// on the engine only when nobody does (mx). One goroutine at a time may
// call them.
func (e *Engine) CopyWaitPoll(dst, src []byte) (wait func() error, poll func() (bool, error), err error) {
	c, err := e.ICopy(dst, src)
	if err != nil {
		return nil, nil, err
	}
	return func() error { return e.Wait(context.Background(), c) }, func() (bool, error) { return e.Check(c) }, nil
}

// Pin maps mem for DMA until unpin is called, like Register, for a user
// that knows the engine only through an interface: mx pins the long-lived
// memory a transport receives into (a NIC's packet pool, an AF_XDP UMEM),
// so copies out of any part of it find their mapping. mem must stay mapped
// until unpin.
func (e *Engine) Pin(mem []byte) (unpin func() error, err error) {
	b, err := e.Register(mem)
	if err != nil {
		return nil, err
	}
	return b.Close, nil
}
