package emulated

import "sync/atomic"

// rxResult is what a model NIC's receive path did with a frame.
type rxResult int

const (
	rxDone    rxResult = iota // written to the ring
	rxDropped                 // dropped (counted by the model)
	rxNoRoom                  // the ring had no free descriptor
)

// rxHold is a model NIC's receive packet buffer, the same for every model:
// a frame that finds no free descriptor waits here, behind the frames
// already waiting, in arrival order, and goes to the ring as soon as the
// driver gives descriptors (flush). A frame that finds the hold full is
// missed: the model counts it in its missed-packets register.
//
// The hold is the model's (under its lock); waiting can be read without
// it. A model whose queues take frames without that lock (the 82599's)
// delivers straight into a ring while waiting reads 0, and otherwise
// offers the frame under the lock. So that a frame held just as a refill
// made room is not left waiting for the next refill, offer counts the
// frame in waiting before it first tries the ring: a refill that looks at
// waiting after its tail moved either finds the frame counted, and
// flushes, or was seen by offer's try.
type rxHold struct {
	frames [][]byte
	max    int
	n      atomic.Int64 // waiting frames, and a frame being offered
}

// offer delivers fr when nothing waits before it, and otherwise (or when
// the ring has no room) holds a copy of it; it reports false when the hold
// is full and the frame is missed. fr stays the caller's.
func (h *rxHold) offer(fr []byte, deliver func([]byte) rxResult) bool {
	h.n.Add(1)
	defer func() { h.n.Store(int64(len(h.frames))) }()
	if len(h.frames) == 0 && deliver(fr) != rxNoRoom {
		return true
	}
	if len(h.frames) >= h.max {
		return false
	}
	h.frames = append(h.frames, append([]byte(nil), fr...))
	return true
}

// waiting reports how many frames wait (or are being offered); it may be
// read without the hold's lock.
func (h *rxHold) waiting() int64 { return h.n.Load() }

// flush delivers waiting frames, oldest first, while the ring has room.
func (h *rxHold) flush(deliver func([]byte) rxResult) {
	i := 0
	for ; i < len(h.frames); i++ {
		if deliver(h.frames[i]) == rxNoRoom {
			break
		}
	}
	if i > 0 {
		k := copy(h.frames, h.frames[i:])
		clear(h.frames[k:])
		h.frames = h.frames[:k]
		h.n.Store(int64(k))
	}
}

// len is the number of frames waiting.
func (h *rxHold) len() int { return len(h.frames) }

// drop forgets every waiting frame (a reset, a close).
func (h *rxHold) drop() {
	clear(h.frames)
	h.frames = h.frames[:0]
	h.n.Store(0)
}
