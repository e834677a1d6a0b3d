package mx

import "math/bits"

// Free lists for the receive path's slow-path objects, guarded by b.mu:
// unexpected entries and their payload buffers (by power-of-two size
// class), and partial medium messages. They keep a streaming receiver that
// falls behind from allocating per message.

const (
	minPoolShift = 6        // 64 bytes
	maxPoolShift = 20       // 1 MiB: above that buffers are not kept
	poolDepth    = 4096     // objects kept per list
	poolBytes    = 16 << 20 // payload bytes kept per size class
)

type pools struct {
	unexps   []*unexp
	partials []*partial
	bufs     [maxPoolShift + 1][][]byte
}

func sizeClass(n int) int {
	if n <= 1<<minPoolShift {
		return minPoolShift
	}
	return bits.Len(uint(n - 1))
}

// getPayload returns a buffer of length n.
func (b *Board) getPayload(n int) []byte {
	c := sizeClass(n)
	if c > maxPoolShift {
		return make([]byte, n)
	}
	if l := b.pool.bufs[c]; len(l) > 0 {
		x := l[len(l)-1]
		b.pool.bufs[c] = l[:len(l)-1]
		return x[:n]
	}
	return make([]byte, n, 1<<c)
}

func (b *Board) putPayload(x []byte) {
	c := sizeClass(cap(x))
	if x == nil || c > maxPoolShift || cap(x) != 1<<c || len(b.pool.bufs[c]) >= min(poolDepth, poolBytes>>c) {
		return
	}
	b.pool.bufs[c] = append(b.pool.bufs[c], x[:0])
}

func (b *Board) getUnexp() *unexp {
	if l := b.pool.unexps; len(l) > 0 {
		u := l[len(l)-1]
		b.pool.unexps = l[:len(l)-1]
		return u
	}
	return new(unexp)
}

// putUnexp recycles an entry nothing references any more.
func (b *Board) putUnexp(u *unexp) {
	b.putPayload(u.buf)
	*u = unexp{}
	if len(b.pool.unexps) < poolDepth {
		b.pool.unexps = append(b.pool.unexps, u)
	}
}

func (b *Board) getPartial() *partial {
	if l := b.pool.partials; len(l) > 0 {
		pt := l[len(l)-1]
		b.pool.partials = l[:len(l)-1]
		return pt
	}
	return new(partial)
}

func (b *Board) putPartial(pt *partial) {
	*pt = partial{}
	if len(b.pool.partials) < poolDepth {
		b.pool.partials = append(b.pool.partials, pt)
	}
}
