package hugepage

import (
	"fmt"
	"math"
	"sync/atomic"
)

// poolAlign is the alignment of every Pool buffer: a cache line, which is
// also what DMA engines like for descriptors and payloads.
const poolAlign = 64

// Pool is a fixed set of equal DMA buffers carved out of one Region. Get and
// Put are safe for concurrent use, take no locks and do not allocate: the
// free buffers form a lock-free stack of indices.
//
// The buffers live as long as the Pool: Close unmaps them all.
type Pool struct {
	region *Region
	mem    []byte
	stride int // buffer size, a multiple of poolAlign
	count  int
	base   uintptr

	// head is the top of the free stack: the low 32 bits are the index+1
	// of the top buffer (0: empty), the high 32 bits a tag bumped by every
	// change, so that a CompareAndSwap cannot mistake a stack that was
	// popped and pushed back to the same top (ABA) for an unchanged one.
	head atomic.Uint64
	// next[i] is the index+1 of the buffer under buffer i on the free
	// stack. It is read by a Get that may lose the race for i; the tag in
	// head makes such a stale read harmless.
	next []atomic.Uint32
	// out[i] is 1 while buffer i is handed out: Put flips it back and so
	// catches a buffer put twice.
	out    []atomic.Uint32
	free   atomic.Int64
	closed atomic.Bool
}

// NewPool allocates (with Alloc and o) a pool of count buffers of bufSize
// bytes each, bufSize rounded up to a multiple of 64; every buffer starts
// 64-byte aligned. The Region may be degraded: see Region().Degraded().
func NewPool(bufSize, count int, o Options) (*Pool, error) {
	if bufSize <= 0 || count <= 0 || count >= math.MaxUint32 {
		return nil, fmt.Errorf("hugepage: new pool: bad geometry: %d buffers of %d bytes", count, bufSize)
	}
	if bufSize > math.MaxInt-poolAlign {
		return nil, fmt.Errorf("hugepage: new pool: buffer size %d too large", bufSize)
	}
	stride := (bufSize + poolAlign - 1) &^ (poolAlign - 1)
	if stride > math.MaxInt/count {
		return nil, fmt.Errorf("hugepage: new pool: %d buffers of %d bytes overflow", count, stride)
	}
	r, err := alloc(stride*count, o, callerOf(2), fmt.Sprintf("a pool of %d buffers of %d bytes", count, stride))
	if err != nil {
		return nil, err
	}
	p := &Pool{
		region: r,
		mem:    r.Bytes(),
		stride: stride,
		count:  count,
		next:   make([]atomic.Uint32, count),
		out:    make([]atomic.Uint32, count),
	}
	p.base = addrOf(p.mem)
	// Stack the buffers so that Get hands them out in address order.
	for i := range count - 1 {
		p.next[i].Store(uint32(i + 2))
	}
	p.head.Store(1)
	p.free.Store(int64(count))
	return p, nil
}

// Get takes a free buffer. It has len and cap BufSize, so an append can never
// spill into the next buffer. Its contents are whatever the last user left.
// Get returns ErrExhausted when every buffer is out and ErrClosed after
// Close; it does not wait.
func (p *Pool) Get() ([]byte, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	for {
		h := p.head.Load()
		top := uint32(h)
		if top == 0 {
			return nil, ErrExhausted
		}
		next := p.next[top-1].Load()
		if p.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(next)) {
			i := int(top - 1)
			p.out[i].Store(1)
			p.free.Add(-1)
			off := i * p.stride
			return p.mem[off : off+p.stride : off+p.stride], nil
		}
	}
}

// Put gives back a buffer that Get returned; it may have been re-sliced to a
// shorter length, but must start where Get's did and keep its capacity.
// Put fails, and changes nothing, with an error wrapping ErrNotPooled for any
// other slice and ErrDoublePut for a buffer already free; ErrClosed after
// Close.
func (p *Pool) Put(b []byte) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if cap(b) != p.stride {
		return fmt.Errorf("hugepage: put: buffer of capacity %d, this pool's have %d: %w", cap(b), p.stride, ErrNotPooled)
	}
	a := addrOf(b)
	if a < p.base || a-p.base >= uintptr(p.count*p.stride) || (a-p.base)%uintptr(p.stride) != 0 {
		return fmt.Errorf("hugepage: put: buffer at %#x is not one of this pool's %d buffers at %#x: %w", a, p.count, p.base, ErrNotPooled)
	}
	i := int((a - p.base) / uintptr(p.stride))
	if !p.out[i].CompareAndSwap(1, 0) {
		return fmt.Errorf("hugepage: put: buffer %d (at %#x) is already free: %w", i, a, ErrDoublePut)
	}
	p.free.Add(1)
	for {
		h := p.head.Load()
		p.next[i].Store(uint32(h))
		if p.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(i+1)) {
			return nil
		}
	}
}

// Region is the memory the pool's buffers are carved from, for mapping it
// for DMA in one piece and for its Degraded report.
func (p *Pool) Region() *Region { return p.region }

// BufSize is the size of every buffer: the size asked of NewPool rounded up
// to a multiple of 64.
func (p *Pool) BufSize() int { return p.stride }

// Available is the number of free buffers: what Get could hand out now.
func (p *Pool) Available() int { return int(p.free.Load()) }

// Close unmaps the pool's memory. If buffers are still out it unmaps anyway
// (they must not be used any more) and returns an error saying how many.
// Closing a closed pool does nothing and returns nil.
func (p *Pool) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	out := p.count - p.Available()
	if err := p.region.Close(); err != nil {
		return err
	}
	if out > 0 {
		return fmt.Errorf("hugepage: pool closed with %d of %d buffers still out (the memory is unmapped anyway; they must not be used)", out, p.count)
	}
	return nil
}
