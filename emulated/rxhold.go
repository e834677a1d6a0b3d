package emulated

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
type rxHold struct {
	frames [][]byte
	max    int
}

// offer delivers fr when nothing waits before it, and otherwise (or when
// the ring has no room) holds a copy of it; it reports false when the hold
// is full and the frame is missed. fr stays the caller's.
func (h *rxHold) offer(fr []byte, deliver func([]byte) rxResult) bool {
	if len(h.frames) == 0 && deliver(fr) != rxNoRoom {
		return true
	}
	if len(h.frames) >= h.max {
		return false
	}
	h.frames = append(h.frames, append([]byte(nil), fr...))
	return true
}

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
	}
}

// len is the number of frames waiting.
func (h *rxHold) len() int { return len(h.frames) }

// drop forgets every waiting frame (a reset, a close).
func (h *rxHold) drop() {
	clear(h.frames)
	h.frames = h.frames[:0]
}
