package drv

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
)

// HeaderBufferSize is the size of a header buffer: the largest header run
// the NICs split off (Ethernet, IPv6 with extension headers, TCP with
// options) fits, and it is the smallest pool buffer nicdrv makes.
const HeaderBufferSize = 256

// PoolsOptions say which pools a NIC's queues get.
type PoolsOptions struct {
	// Queues is the number of queues.
	Queues int
	// Shared, when set, is the one pool every queue receives into (the
	// caller's); it is not closed with the Pools.
	Shared *nicdrv.Pool
	// Buffers is the size of each queue's own packet pool (Shared nil).
	Buffers int
	// BufferSize is the size of each packet buffer of those pools
	// (default nicdrv.BufferSize).
	BufferSize int
	// Small, when positive, is how many of the last queues get pools of
	// SmallBuffers instead of Buffers (queues that take only what the
	// caller posts, and never send: the 82599's PlaceOnly queues).
	Small, SmallBuffers int
	// Headers, when positive, gives each queue a pool of that many
	// HeaderBufferSize buffers for split headers.
	Headers int
	// Memory is how the pools' memory is allocated.
	Memory hugepage.Options
	// Name prefixes the pools' memory names ("gomx-ixgbe").
	Name string
}

// Pools are a NIC's buffer pools, by queue.
type Pools struct {
	// Packet is each queue's packet pool (every entry Shared when given).
	Packet []*nicdrv.Pool
	// Header is each queue's header pool; nil without Headers.
	Header []*nicdrv.Pool
	own    []*nicdrv.Pool
}

// NewPools makes the pools o asks for in dma, or none and an error.
func NewPools(dma pci.DMA, o PoolsOptions) (*Pools, error) {
	p := &Pools{Packet: make([]*nicdrv.Pool, o.Queues)}
	make1 := func(what string, q, n, size int) (*nicdrv.Pool, error) {
		mem := o.Memory
		mem.Name = fmt.Sprintf("%s-%s%d", o.Name, what, q)
		pl, err := nicdrv.NewPool(dma, nicdrv.PoolOptions{Buffers: n, BufferSize: size, Memory: mem})
		if err != nil {
			return nil, fmt.Errorf("queue %d %s pool: %w", q, what, err)
		}
		p.own = append(p.own, pl)
		return pl, nil
	}
	for q := range p.Packet {
		if o.Shared != nil {
			p.Packet[q] = o.Shared
			continue
		}
		n := o.Buffers
		if q >= o.Queues-o.Small {
			n = o.SmallBuffers
		}
		pl, err := make1("rx", q, n, cmp.Or(o.BufferSize, nicdrv.BufferSize))
		if err != nil {
			return nil, errors.Join(err, p.Close())
		}
		p.Packet[q] = pl
	}
	if o.Headers > 0 {
		p.Header = make([]*nicdrv.Pool, o.Queues)
		for q := range p.Header {
			pl, err := make1("hdr", q, o.Headers, HeaderBufferSize)
			if err != nil {
				return nil, errors.Join(err, p.Close())
			}
			p.Header[q] = pl
		}
	}
	return p, nil
}

// Close closes the pools NewPools made (not a Shared one). It fails for a
// pool whose buffers are still out, as nicdrv.Pool.Close does.
func (p *Pools) Close() error {
	var errs []error
	for _, pl := range p.own {
		errs = append(errs, pl.Close())
	}
	return errors.Join(errs...)
}

// PoolCheck tells whether a Buffer is one a NIC may send: one of a pool
// mapped in the NIC's DMA domain (any queue's, or another NIC's in the
// same domain), so its IOVA means what the NIC will read. It remembers the
// last pool it accepted, so a queue sending from one pool pays a pointer
// comparison per frame. One per TX queue (it is not safe for concurrent
// use).
type PoolCheck struct {
	// DMA is the NIC's DMA domain.
	DMA pci.DMA
	ok  *nicdrv.Pool
}

// Last is the pool OK last accepted (nil before the first): a buffer of
// it may be sent without asking OK.
func (c *PoolCheck) Last() *nicdrv.Pool { return c.ok }

// OK reports whether b may be sent.
func (c *PoolCheck) OK(b *nicdrv.Buffer) bool {
	p := b.Pool()
	if p == c.ok && p != nil {
		return true
	}
	if p == nil || p.DMA() != c.DMA {
		return false
	}
	c.ok = p
	return true
}

// Queue is queue q's packet pool, nicdrv.NIC.Pool: nil for a queue the NIC
// lacks.
func (p *Pools) Queue(q int) *nicdrv.Pool {
	if q < 0 || q >= len(p.Packet) {
		return nil
	}
	return p.Packet[q]
}
