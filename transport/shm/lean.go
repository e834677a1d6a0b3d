package shm

// FramesDropped returns how many frames Send has dropped so far because a
// peer's ring stayed full for Options.FullWait (its consumer made no
// progress: it is stuck or gone). Send reports such a drop as success, as
// the layer above resends lost frames anyway; a caller that keeps no copy
// of a frame it sent (mx's lean path for ring peers) reads this before and
// after its Send to learn that the frame did not reach the ring.
func (t *Transport) FramesDropped() uint64 { return t.cnt.dropFull.Load() }
