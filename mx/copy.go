package mx

// Every byte the message layer moves between frames and application buffers
// goes through these helpers, so a copy engine (for example ioat.Engine for
// large pull replies) can be plugged in at one place.

// gather appends the concatenation of segs to dst.
func gather(dst []byte, segs [][]byte) []byte {
	for _, s := range segs {
		dst = append(dst, s...)
	}
	return dst
}

// gatherAt copies len(dst) bytes of the concatenation of segs, starting at
// off, into dst, and returns how many it copied.
func gatherAt(dst []byte, segs [][]byte, off int) int {
	n := 0
	for _, s := range segs {
		if off >= len(s) {
			off -= len(s)
			continue
		}
		c := copy(dst[n:], s[off:])
		n += c
		off = 0
		if n == len(dst) {
			break
		}
	}
	return n
}

// scatterAt copies src into the concatenation of segs at offset off,
// dropping what falls past the end (truncation), and returns how many bytes
// it stored.
func scatterAt(segs [][]byte, off int, src []byte) int {
	if len(segs) == 1 { // the common case
		s := segs[0]
		if off >= len(s) {
			return 0
		}
		return copy(s[off:], src)
	}
	n := 0
	for _, s := range segs {
		if len(src) == 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		c := copy(s[off:], src)
		n += c
		src = src[c:]
		off = 0
	}
	return n
}

// totalLen returns the total length of segs.
func totalLen(segs [][]byte) int {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n
}
