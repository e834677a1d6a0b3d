package nicdrv

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/sentinel"
	"github.com/gomx-dev/gomx/pci"
)

// BufferSize is the default packet buffer size: one 82574 RX buffer
// (RCTL.BSIZE 2048), enough for any standard frame, and a divisor of both
// the 4 KiB and 2 MiB page, so no buffer straddles a page (and so an IOVA
// segment) whatever memory backs the pool.
const BufferSize = 2048

// Flags describe what the NIC found in a received frame.
type Flags uint16

// Receive flags.
const (
	// FlagIPChecksumOK: the NIC checked the IPv4 header checksum; it is
	// right.
	FlagIPChecksumOK Flags = 1 << iota
	// FlagL4ChecksumOK: the NIC checked the TCP or UDP checksum; it is
	// right.
	FlagL4ChecksumOK
	// FlagIPChecksumBad: the IPv4 header checksum is wrong.
	FlagIPChecksumBad
	// FlagL4ChecksumBad: the TCP or UDP checksum is wrong.
	FlagL4ChecksumBad
	// FlagHash: Hash holds the NIC's RSS hash of the frame.
	FlagHash
	// FlagTxIPChecksum asks TxBatch to fill in the IPv4 header checksum of
	// the frame (in hardware where the NIC can, else in the driver).
	FlagTxIPChecksum
	// FlagTxL4Checksum asks TxBatch to fill in the TCP or UDP checksum of an
	// IPv4 frame (in hardware where the NIC can, else in the driver).
	FlagTxL4Checksum
)

// Buffer is one packet buffer of a Pool. Data is the frame: on receive the
// driver sets it to the received bytes; to transmit, fill it (SetLen gives
// a Data of the wanted length) and pass the Buffer to TxBatch.
//
// A frame received with header split (see the package doc) is a chain: the
// first Buffer's Data holds the protocol headers and Next, the rest of the
// frame. Frame and AppendFrame read a chain whole; Pool.Free gives back the
// whole chain.
//
// A Buffer is one 64-byte cache line: every field the fast path reads or
// writes per frame (the driver's RX and TX, Alloc and Free) is in it, and
// what only some frames need (the buffer's IOVA, its memory, an
// attachment) is in arrays of its Pool, found by the buffer's index.
type Buffer struct {
	// Data is the frame, starting with the Ethernet header. Its capacity
	// is the buffer size; do not re-slice it to start elsewhere.
	Data []byte
	// Next is the rest of a frame received with header split: its payload
	// after the headers in Data; or of a frame longer than one buffer (a
	// jumbo frame, on a driver opened for them). nil for a frame in one
	// buffer, and always nil on transmit (TxBatch sends single-buffer
	// frames; memory outside the pool is sent with Attach).
	Next *Buffer
	// Queue is the RX queue the frame arrived on.
	Queue int

	pool *Pool

	// Hash is the RSS hash when Flags has FlagHash.
	Hash uint32
	// Rule is the steering rule that sent the frame to its queue, when the
	// NIC reports it (the 82599's EtherType, 5-tuple and Flow Director
	// filters); 0 when no rule matched or the NIC does not say.
	Rule RuleID

	idx uint32 // index in the pool's arrays

	// Flags report the NIC's receive offloads, and ask for transmit
	// offloads (FlagTx...).
	Flags Flags

	state bufState
}

// bufState says whether a Buffer is handed out and whether memory is
// attached to it; a Buffer that is out with nothing attached (the common
// frame) is exactly bufOut.
type bufState uint8

const (
	bufOut bufState = 1 << iota
	bufAttached
)

// attachment is the memory attached to a Buffer for transmit (Attach).
type attachment struct {
	ext  []byte
	iova uint64
	done Completion
}

// Completion is told when the NIC no longer reads memory attached to a
// transmitted Buffer (see [Buffer.Attach]).
type Completion interface {
	// Done is called once per attachment, by the goroutine that reclaims
	// or frees the Buffer; it must not block.
	Done()
}

// Attach makes the Buffer's frame, on transmit, Data followed by ext: memory
// outside the pool, mapped for DMA in the pool's domain, whose first byte the
// NIC sees at iova and which is IOVA-contiguous for len(ext) bytes. The
// driver points a second TX descriptor at ext instead of copying it (a
// header in the Buffer, the payload in place, as a multi-segment mbuf), so
// the caller must leave ext unchanged until done.Done is called: when the
// driver reclaims the frame after the NIC reported it sent, or when the
// Buffer goes back to the pool unsent (Pool.Free, a NIC's Close). done may
// be nil. On receive, the driver sets an attachment on a frame whose
// payload went to a Placement (see Placer): Data holds the bytes of the
// header buffer and the attachment the bytes written into the placement
// (non-nil, possibly empty, whenever the frame took one), with no
// Completion. Alloc and Free clear it. Attaching nil with a nil done
// removes an attachment (its completion is not called). b is a Buffer of
// a Pool (Alloc gave it).
func (b *Buffer) Attach(ext []byte, iova uint64, done Completion) {
	a := &b.pool.att[b.idx]
	a.ext, a.iova, a.done = ext, iova, done
	if ext == nil && done == nil {
		b.state &^= bufAttached
	} else {
		b.state |= bufAttached
	}
}

// Attached returns the memory attached for transmit and its IOVA (nil and
// 0 when there is none).
func (b *Buffer) Attached() ([]byte, uint64) {
	if b.state&bufAttached == 0 {
		return nil, 0
	}
	a := &b.pool.att[b.idx]
	return a.ext, a.iova
}

// Plain reports whether b is a Buffer handed out by its Pool with nothing
// attached: the common frame a driver's TX fast path sends with one
// descriptor, without looking further.
func (b *Buffer) Plain() bool { return b.state == bufOut }

// FrameLen is the length of the whole frame: Data and every buffer chained
// after it.
func (b *Buffer) FrameLen() int {
	n := 0
	for c := b; c != nil; c = c.Next {
		n += len(c.Data)
	}
	return n
}

// AppendFrame appends the whole frame (Data, then every chained buffer's
// Data) to dst and returns the extended slice.
func (b *Buffer) AppendFrame(dst []byte) []byte {
	for c := b; c != nil; c = c.Next {
		dst = append(dst, c.Data...)
	}
	return dst
}

// Segments is the number of buffers the frame occupies (1 without header
// split).
func (b *Buffer) Segments() int {
	n := 0
	for c := b; c != nil; c = c.Next {
		n++
	}
	return n
}

// SetLen makes Data n bytes long (up to the buffer size) and returns it.
func (b *Buffer) SetLen(n int) []byte {
	b.Data = b.pool.mem(b.idx)[:n]
	return b.Data
}

// Cap is the buffer size: the largest Data it can hold (0 for a Buffer of
// no pool).
func (b *Buffer) Cap() int {
	if b.pool == nil {
		return 0
	}
	return b.pool.size
}

// IOVA is where the NIC sees the first byte of the buffer (0 for a Buffer
// of no pool).
func (b *Buffer) IOVA() uint64 {
	if b.pool == nil {
		return 0
	}
	return b.pool.iova[b.idx]
}

// Pool returns the pool the buffer belongs to.
func (b *Buffer) Pool() *Pool { return b.pool }

// PoolOptions configure NewPool.
type PoolOptions struct {
	// Buffers is the number of buffers (default 4096).
	Buffers int
	// BufferSize is the size of each (default BufferSize); a power of two
	// from 256 to 16384. Up to 4096 a buffer never straddles a page; a
	// larger one (a jumbo frame's, in one receive buffer) needs memory
	// that is IOVA-contiguous across it (hugepages, or a domain behind an
	// IOMMU), and NewPool refuses memory where it is not.
	BufferSize int
	// Memory is how the hugepage memory is allocated (default
	// hugepage.DefaultOptions()). AllowPageable is set for a domain that
	// accepts pageable memory (pci.AcceptsPageable: an emulated model's).
	Memory hugepage.Options
}

// Pool is a fixed set of packet buffers in one hugepage region, mapped once
// into a DMA domain. Alloc and Free are safe for concurrent use and do not
// allocate; they take one short lock per call, however many buffers move,
// so batch them. A driver gives each queue a pool of its own (and, with
// header split, a pool of small header buffers), so that each pool's lock is
// taken by one queue's goroutine only and never contended.
type Pool struct {
	dma     pci.DMA
	region  *hugepage.Region
	mapping *pci.Mapping
	size    int
	bytes   []byte       // every buffer's memory, buffer i at i*size
	bufs    []Buffer     // by index
	iova    []uint64     // each buffer's IOVA, by index
	att     []attachment // each buffer's attachment, by index

	mu     sync.Mutex
	free   []*Buffer // a stack: the most recently freed buffer is warm in cache
	closed bool
}

// NewPool allocates and maps a pool in the DMA domain dma (the domain of the
// NIC that will use it: pci.Device.DMA()).
func NewPool(dma pci.DMA, o PoolOptions) (*Pool, error) {
	if o.Buffers == 0 {
		o.Buffers = 4096
	}
	if o.BufferSize == 0 {
		o.BufferSize = BufferSize
	}
	if o.Buffers < 1 || o.Buffers > 1<<24 {
		return nil, fmt.Errorf("nicdrv: pool of %d buffers: want 1..%d", o.Buffers, 1<<24)
	}
	if o.BufferSize < 256 || o.BufferSize > maxBufferSize || o.BufferSize&(o.BufferSize-1) != 0 {
		return nil, fmt.Errorf("nicdrv: buffer size %d: want a power of two from 256 to %d", o.BufferSize, maxBufferSize)
	}
	mem := o.Memory
	if mem.Name == "" {
		mem.Name = "gomx-nic-pool"
	}
	mem.AllowPageable = mem.AllowPageable || pci.AcceptsPageable(dma)
	r, err := hugepage.Alloc(o.Buffers*o.BufferSize, mem)
	if err != nil {
		return nil, fmt.Errorf("nicdrv: pool memory: %w", err)
	}
	m, err := dma.Map(r.Bytes())
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("nicdrv: map pool for DMA: %w", err)
	}
	p := &Pool{dma: dma, region: r, mapping: m, size: o.BufferSize, bytes: r.Bytes(), bufs: make([]Buffer, o.Buffers),
		iova: make([]uint64, o.Buffers), att: make([]attachment, o.Buffers), free: make([]*Buffer, 0, o.Buffers)}
	for i := range p.bufs {
		off := i * o.BufferSize
		iova, contig, err := m.IOVA(off)
		if err == nil && contig < o.BufferSize {
			err = fmt.Errorf("buffer %d of %d bytes straddles an IOVA segment edge (IOVA-contiguous for %d bytes): the memory is not in pages of at least the buffer size; reserve hugepages or use an IOMMU", i, o.BufferSize, contig)
		}
		if err != nil {
			dma.Unmap(m)
			r.Close()
			return nil, fmt.Errorf("nicdrv: pool: %w", err)
		}
		b := &p.bufs[i]
		b.pool, b.idx = p, uint32(i)
		p.iova[i] = iova
	}
	for i := len(p.bufs) - 1; i >= 0; i-- {
		p.free = append(p.free, &p.bufs[i])
	}
	return p, nil
}

// Alloc fills bufs with free buffers, Data set to the whole buffer, Flags,
// Hash, Queue and Rule zero, and returns how many it filled. When the pool has fewer free buffers than
// len(bufs) it fills what it can and returns ErrPoolExhausted with the
// count; it never waits.
func (p *Pool) Alloc(bufs []*Buffer) (int, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	n := min(len(bufs), len(p.free))
	top := len(p.free) - n
	// Both windows are cut to n once, so the loop runs without bounds
	// checks.
	from := p.free[top : top+n]
	to := bufs[:len(from)]
	for i, b := range from {
		// Next and the attachment were cleared when the buffer was freed
		// (and are zero in a new pool).
		b.Data = p.mem(b.idx)
		b.Queue, b.Hash, b.Rule = 0, 0, 0
		b.Flags, b.state = 0, bufOut
		to[i] = b
	}
	p.free = p.free[:top]
	p.mu.Unlock()
	if n < len(bufs) {
		return n, fmt.Errorf("nicdrv: alloc %d buffers, %d free of %d: %w", len(bufs), n, len(p.bufs), ErrPoolExhausted)
	}
	return n, nil
}

// Get allocates one buffer.
func (p *Pool) Get() (*Buffer, error) {
	var one [1]*Buffer
	if _, err := p.Alloc(one[:]); err != nil {
		return nil, err
	}
	return one[0], nil
}

// ErrNotPooled is wrapped by Free's error for a buffer freed twice or
// not from any pool. It is the value every gomx pool uses for this
// meaning (hugepage.ErrNotPooled, shm.ErrNotPool).
var ErrNotPooled = sentinel.ErrNotPooled

// Free gives buffers back, each with the buffers chained after it (Next),
// each to the pool it came from: p for the buffers p handed out, their own
// pool for others (the header buffer of a split frame, a buffer another
// queue received). It frees every buffer it can and reports, in one error
// wrapping ErrNotPooled, those that were already free or belong to no pool
// (nil entries are skipped). A Buffer with memory attached (Attach) has its
// completion called: the memory is the caller's again.
func (p *Pool) Free(bufs ...*Buffer) error {
	p.mu.Lock()
	// The common buffer: p's own, out, alone and with nothing attached.
	// free never outgrows its capacity (the pool's size): each of p's
	// buffers is either out or in free, so while b is out free has room
	// for it. The first other buffer (nil, another pool's, a chain, an
	// attachment, one not out) hands the rest to freeRest, whose calls
	// would otherwise cost this loop its registers.
	free := p.free
	i := 0
	for ; i < len(bufs); i++ {
		b := bufs[i]
		if b == nil || b.pool != p || b.state != bufOut || b.Next != nil {
			break
		}
		b.state = 0
		free = append(free, b)
	}
	p.free = free
	bad := 0
	if i < len(bufs) {
		bad = p.freeRest(bufs[i:])
	}
	p.mu.Unlock()
	if bad > 0 {
		return fmt.Errorf("nicdrv: free: %d buffers freed twice or from no pool: %w", bad, ErrNotPooled)
	}
	return nil
}

// freeRest is Free for bufs from the first that is not a common buffer on,
// with p.mu held; it returns how many were not out or from no pool.
func (p *Pool) freeRest(bufs []*Buffer) (bad int) {
	for _, b := range bufs {
		if b == nil {
			continue
		}
		if b.pool == p && b.state == bufOut && b.Next == nil {
			b.state = 0
			p.free = append(p.free, b)
			continue
		}
		bad += p.freeSlow(b)
	}
	return bad
}

// freeSlow gives back b and the buffers chained after it, each to its own
// pool, with p.mu held (and released while another pool's lock is taken,
// never both at once); it returns how many were not out or from no pool.
func (p *Pool) freeSlow(b *Buffer) (bad int) {
	for b != nil {
		next := b.Next
		switch {
		case b.pool == p:
			if !p.putLocked(b) {
				bad++
				next = nil
			}
		case b.pool == nil:
			bad++
			next = nil
		default:
			p.mu.Unlock()
			q := b.pool
			q.mu.Lock()
			if !q.putLocked(b) {
				bad++
				next = nil
			}
			q.mu.Unlock()
			p.mu.Lock()
		}
		b = next
	}
	return bad
}

// putLocked gives b back to p (p.mu held); false when b is not out.
func (p *Pool) putLocked(b *Buffer) bool {
	if b.state&bufOut == 0 {
		return false
	}
	if b.state&bufAttached != 0 {
		a := &p.att[b.idx]
		if a.done != nil {
			a.done.Done()
		}
		*a = attachment{}
	}
	b.state, b.Next = 0, nil
	p.free = append(p.free, b)
	return true
}

// Memory returns the pool's memory, every buffer of it: one hugepage
// region, mapped for DMA in the pool's domain until Close. A copy engine
// can map it once to read or write any buffer of the pool.
func (p *Pool) Memory() []byte { return p.region.Bytes() }

// Len is the number of buffers in the pool.
func (p *Pool) Len() int { return len(p.bufs) }

// BufferSize is the size of each buffer.
func (p *Pool) BufferSize() int { return p.size }

// Available is the number of free buffers.
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// DMA is the DMA domain the pool is mapped in: a driver checks it is its
// device's.
func (p *Pool) DMA() pci.DMA { return p.dma }

// Close unmaps and frees the pool's memory. It fails, changing nothing,
// while buffers are still out (a NIC ring or the caller holds them), since
// the NIC could still write into them.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if out := len(p.bufs) - len(p.free); out > 0 {
		return fmt.Errorf("nicdrv: close pool: %d of %d buffers still out: close the NIC and free them first", out, len(p.bufs))
	}
	p.closed = true
	err := p.dma.Unmap(p.mapping)
	return errors.Join(err, p.region.Close())
}
