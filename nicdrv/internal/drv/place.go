package drv

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/nicdrv"
)

// Placements is a placing RX queue's record of its placements, by slot,
// and their counts; a driver keeps it in the queue (embedded) and reads
// its slices on its fast path as its own fields.
type Placements struct {
	// Placed is each slot's placement; Mem nil for a pool descriptor.
	Placed []nicdrv.Placement
	// Pooled marks the pool descriptors a caller posted (PostSlots.Post);
	// nil when the NIC takes no such posting.
	Pooled []bool
	// Posted counts the placements taken, Consumed those the NIC filled
	// (or Close gave back).
	Posted, Consumed uint64
}

// InitPlacements makes the record of a ring of size slots; pooled says
// whether the queue takes posted pool descriptors.
func (p *Placements) InitPlacements(size uint32, pooled bool) {
	p.Placed = make([]nicdrv.Placement, size)
	if pooled {
		p.Pooled = make([]bool, size)
	}
}

// ReleasePlacements gives back the header buffers of posted placements
// (hdr, by slot, to hdrs) once the NIC is quiet (Close), which counts
// every placement consumed.
func (p *Placements) ReleasePlacements(hdrs *nicdrv.Pool, hdr []*nicdrv.Buffer) error {
	err := hdrs.Free(hdr...)
	clear(hdr)
	clear(p.Placed)
	clear(p.Pooled)
	p.Consumed = p.Posted
	return err
}

// PostSlots is what posting placements (nicdrv.Placer.PostRx) works on: a
// placing RX ring's slots from Tail on, one entry a slot in each array. A
// driver makes one from its queue's state for each PostRx, under the
// queue's lock, lets Post take the placements, writes the read
// descriptors of the slots from its old tail up to Tail (as after
// RxFill.Fill: a call per slot through a function value would cost more
// than the writes), and keeps Tail and counts what Post took posted.
type PostSlots struct {
	// Size is the number of slots; Tail the first slot not handed out,
	// Stop the slot Post stops at (the one before the driver's reading).
	Size, Tail, Stop uint32
	// Pkt and Hdr are the slots' pool and header buffers, Placed their
	// placements (Mem nil for a pool descriptor).
	Pkt, Hdr []*nicdrv.Buffer
	// Placed and Pooled are the queue's record's (Placements): Post sets
	// a slot's Placed, or for a Placement with Mem nil, which Fill gives
	// a buffer, its Pooled. Without Pooled a Placement with Mem nil is
	// too short. (Slices of their own, not a pointer to the record: the
	// loop keeps them in registers.)
	Placed []nicdrv.Placement
	Pooled []bool
	Fill   *RxFill
	// Pool takes back the pool buffer of a slot a placement takes; Hdrs
	// gives the header buffers.
	Pool, Hdrs *nicdrv.Pool
	// NoBuf counts the header buffers Hdrs could not give.
	NoBuf *atomic.Uint64
	// Min is the least length of a placement (Info.PlaceMin), and Why
	// says how the NIC comes to write that much, for the error that
	// refuses a shorter one.
	Min int
	Why string
}

// CanPost is nil when a queue may take placements: its NIC is not closed
// and is placing (Options.Placement); else the error that says which.
func (d *Device) CanPost(closed, placing bool) error {
	if !closed && placing {
		return nil
	}
	return d.cannotPost(closed)
}

// cannotPost is CanPost's error, apart so that CanPost inlines.
func (d *Device) cannotPost(closed bool) error {
	const op = "post RX placements"
	if closed {
		return d.Errorf(op, nicdrv.ErrClosed)
	}
	return d.Errorf(op, fmt.Errorf("the NIC was opened without Options.Placement: %w", nicdrv.ErrNotSupported))
}

// Post takes placements ps, in order, into the slots from Tail until Stop,
// and returns how many it took. A placed slot gets a header buffer (the
// one it kept, or one of Hdrs) and gives back its pool buffer; a posted
// pool descriptor (Pooled) gets a pool buffer. It stops at the first
// placement it cannot take and says why: a placement shorter than Min, no
// header buffer or pool buffer left. A pool buffer Pool does not take back
// is an error too, but Post goes on. It writes no descriptor and no
// register.
func (p *PostSlots) Post(d *Device, ps []nicdrv.Placement) (int, error) {
	const op = "post RX placements"
	took := 0
	var err error
	for i, pl := range ps {
		if p.Tail == p.Stop {
			break
		}
		s := p.Tail
		if pl.Mem == nil && p.Pooled != nil {
			if p.Pkt[s] == nil && p.Fill.Fill(s, (s+1)%p.Size) == s {
				err = d.Errorf(op, fmt.Errorf("no pool buffer: %w", nicdrv.ErrPoolExhausted))
				break
			}
			p.Pooled[s] = true
		} else {
			if len(pl.Mem) < p.Min {
				err = d.Errorf(op, fmt.Errorf("placement %d of %d bytes: the NIC may write %d bytes into it (%s): %w",
					i, len(pl.Mem), p.Min, p.Why, nicdrv.ErrFrameSize))
				break
			}
			if p.Hdr[s] == nil {
				hb, e := p.Hdrs.Get()
				if e != nil {
					p.NoBuf.Add(1)
					err = d.Errorf(op, fmt.Errorf("no header buffer: %w", e))
					break
				}
				p.Hdr[s] = hb
			}
			if pb := p.Pkt[s]; pb != nil {
				p.Pkt[s] = nil
				err = errors.Join(err, p.Pool.Free(pb))
			}
			p.Placed[s] = pl
		}
		p.Tail = (s + 1) % p.Size
		took++
	}
	return took, err
}

// PlacingQueue is an RX queue as RxPlacement sees it: its lock, and what
// it holds of placements under that lock.
type PlacingQueue interface {
	sync.Locker
	// Handed says how many descriptors the queue has handed to the NIC
	// and not yet delivered (written back or not), and returns its
	// record of placements.
	Handed() (handed uint32, p *Placements)
}

// RxPlacement is nicdrv.Placer.RxPlacement over a driver's RX queues: the
// state of queue q (none for a queue the NIC lacks), read under its lock.
// A closed NIC's rings are unmapped, so nothing is ahead and every
// placement was consumed when Close released it. Ahead counts every
// descriptor handed over and not yet delivered, written back or not: a
// caller that counts the frames it expects and has not handled counts the
// ones written back among them. It is a control-path call, generic like
// Close.
func RxPlacement[Q PlacingQueue](d *Device, rx []Q, q int) nicdrv.PlacementState {
	if q < 0 || q >= len(rx) {
		return nicdrv.PlacementState{}
	}
	r := rx[q]
	r.Lock()
	defer r.Unlock()
	handed, p := r.Handed()
	if d.Closed.Load() {
		return nicdrv.PlacementState{Posted: p.Posted, Consumed: p.Consumed}
	}
	return nicdrv.PlacementState{Ahead: int(handed), Posted: p.Posted, Consumed: p.Consumed}
}
