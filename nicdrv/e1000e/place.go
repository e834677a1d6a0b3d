package e1000e

import (
	"fmt"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
)

// Payload placement (Options.Placement; nicdrv.Placer) uses the 82574's
// packet split descriptors with buffer 0 of placeHeader bytes (PSRCTL's
// least BSIZE0) and buffer 1 of 2 KiB; buffers 2 and 3 are unused. The
// NIC splits only IPv4 and IPv6 frames at their headers; every other
// frame, an Open-MX frame among them, it writes from its first byte on,
// filling buffer 0 before it goes on to buffer 1 (QEMU 7.2's
// e1000e_write_packet_to_guest, as the model does). So such a frame puts
// its first placeHeader bytes in buffer 0 and the rest in buffer 1: the
// header split the 82599 gets from SRRCTL DESCTYPE 101.
//
// A pool descriptor points buffer 0 at the start of a pool Buffer and
// buffer 1 placeHeader bytes further, so the frame lands whole in the
// Buffer (an IP frame split shorter is moved down behind its header). A
// placed descriptor takes a header buffer of the queue's header pool and
// the caller's placement. As on the 82599, pool descriptors are handed at
// most placePoolAhead ahead of the driver's reading, and none while
// placements are outstanding, so that the placements a caller posts next
// follow the outstanding ones directly. How many follows the traffic: as
// many as frames came in pool buffers since the last refill, at least
// one, so that a busy queue takes a burst between two RxBatch calls while
// a quiet one (where a caller is about to post for the frames it asked
// for) holds one descriptor ahead of its placements, not eight: each of
// those is a frame that arrives before the placements, whose payload the
// caller then copies. A queue starts with one; frames beyond those handed
// wait in the NIC's packet buffer (QEMU's queue) for the next RxBatch.
//
// An IP frame split at its headers puts everything after them in buffer
// 1: the most a placement may receive is the largest frame the NIC takes
// (MaxFrame with a VLAN tag) less the shortest header it splits at
// (Ethernet and an IPv4 header without options), which is Info.PlaceMin.

const (
	// placeHeader is buffer 0's size: BSIZE0's unit, the least the
	// 82574 takes.
	placeHeader = hw.PSRCTLBSize0Unit
	// placeSplitMin is the shortest header the NIC splits a frame at:
	// Ethernet (14) and IPv4 (20).
	placeSplitMin = 14 + 20
	// placeLargest bounds the frame the NIC writes without RCTL.LPE:
	// hw.MaxFrame (1522 bytes with the FCS), with 4 bytes to spare.
	placeLargest = hw.MaxFrame + 4
	// placePoolAhead bounds the pool descriptors handed to the NIC at
	// once: the frames that arrive before a placement posted on an idle
	// queue.
	placePoolAhead = 8
)

// placeMinWhy says why a placement is at least Info.PlaceMin long.
var placeMinWhy = fmt.Sprintf("a %d-byte frame less the %d-byte header it splits an IPv4 frame at", placeLargest, placeSplitMin)

// placePSRCTL is the PSRCTL value of placement: buffer 0 of placeHeader
// bytes, buffer 1 of a pool buffer.
var placePSRCTL = hw.PSRCTLValue(placeHeader, nicdrv.BufferSize, 0, 0)

// placeState is a placing queue's placements, by slot, and their counts.
type placeState struct {
	place bool
	hdrs  *nicdrv.Pool
	hdr   []*nicdrv.Buffer // by slot: the header buffer of a placed descriptor
	drv.Placements
	// poolGot counts the frames received in pool buffers since the last
	// refill: the pool descriptors the next refill keeps ahead.
	poolGot uint32
}

var _ nicdrv.Placer = (*NIC)(nil)

// initPlace makes r a placing queue: one pool buffer per pool
// descriptor, header buffers kept by the queue itself.
func (r *rxQueue) initPlace() {
	r.place = true
	r.hdrs = r.nic.pools.Header[r.q]
	r.hdr = make([]*nicdrv.Buffer, r.size)
	r.InitPlacements(r.size, true)
	// A queue starts as a quiet one: one pool descriptor, so that the
	// first message after the NIC opened (and its peer connected) has
	// one frame, not eight, in front of its placements.
	r.poolGot = 1
}

// encodePlace writes slot s's read descriptor on a placing queue.
func (r *rxQueue) encodePlace(s uint32) {
	if p := r.Placed[s]; p.Mem != nil {
		hw.RxPSRead{Buffer: [hw.PSBuffers]uint64{r.hdr[s].IOVA(), p.IOVA}}.Encode(r.desc(s))
		return
	}
	b := r.slot[s].IOVA()
	hw.RxPSRead{Buffer: [hw.PSBuffers]uint64{b, b + placeHeader}}.Encode(r.desc(s))
}

// refillPlace hands pool descriptors to the NIC, when no placement is
// outstanding, up to as many ahead of the driver's reading as frames
// came in pool buffers since the last refill: at least 1, at most
// placePoolAhead.
func (r *rxQueue) refillPlace() {
	want := min(max(r.poolGot, 1), placePoolAhead)
	r.poolGot = 0
	if r.Consumed != r.Posted || (r.tail+r.size-r.next)%r.size >= want {
		return
	}
	from := r.tail
	r.tail = r.fill.Fill(r.tail, (r.next+want)%r.size)
	for s := from; s != r.tail; {
		r.encodePlace(s)
		if s++; s == r.size {
			s = 0
		}
	}
}

// writeTail hands the NIC every slot filled (RDT in 16-byte units).
func (r *rxQueue) writeTail() {
	if r.tail != r.rdt {
		r.nic.w32(hw.Q(hw.RDT, r.q), r.tail*hw.PSDescUnits)
		r.rdt = r.tail
	}
}

// placeAccept decides what to do with a written-back packet split
// descriptor of a placing queue: deliver a frame of hdr bytes in buffer 0
// and pay in buffer 1, or drop it. hdrCap is buffer 0's size, payCap what
// buffer 1 may hold (a placement's length, or a pool buffer's room behind
// buffer 0). As psAccept, it drops a frame in error or spread over several
// descriptors (discardNext says the next descriptor continues one); and,
// since what the NIC writes back is outside input, a descriptor whose
// lengths the buffers cannot hold, that uses buffers 2 or 3 (the driver
// gave none), that puts bytes in buffer 1 before filling buffer 0 without
// saying it split the frame, whose buffer 0 is shorter than an Ethernet
// header, or whose header length disagrees with buffer 0's when it says
// the frame was split.
func placeAccept(wb hw.RxPSWriteBack, discarding bool, hdrCap, payCap int) (hdr, pay int, deliver, discardNext bool) {
	eop := wb.Status&hw.RxStatEOP != 0
	if discarding || !eop || wb.Status&hw.RxErrFrame != 0 {
		return 0, 0, false, !eop
	}
	l := wb.Lengths()
	switch {
	case l[0] < 14 || l[0] > hdrCap || l[1] > payCap || l[2] != 0 || l[3] != 0:
		return 0, 0, false, false
	case wb.Split() && wb.HeaderLen() != l[0]:
		return 0, 0, false, false
	case !wb.Split() && l[1] > 0 && l[0] != hdrCap:
		return 0, 0, false, false
	}
	return l[0], l[1], true, false
}

// takePlace is take on a placing queue: the frame of slot s's written-back
// descriptor d as its header buffer with the placement's written part
// attached, or as its pool Buffer; nil when placeAccept drops it. A
// placement leaves its slot either way (the NIC wrote what it wrote), and
// counts consumed; a dropped pool Buffer stays in its slot for the next
// refill.
func (r *rxQueue) takePlace(d []byte, s uint32) *nicdrv.Buffer {
	wb := hw.DecodeRxPSWriteBack(d)
	if p := r.Placed[s]; p.Mem != nil {
		hb := r.hdr[s]
		r.hdr[s], r.Placed[s] = nil, nicdrv.Placement{}
		r.Consumed++
		h, k, deliver, discardNext := placeAccept(wb, r.discard, min(placeHeader, hb.Cap()), len(p.Mem))
		r.discard = discardNext
		if !deliver {
			if !discardNext {
				r.cnt.Dropped.Add(1)
			}
			_ = r.hdrs.Free(hb)
			return nil
		}
		hb.Data = hb.Data[:0:hb.Cap()][:h]
		hb.Next = nil
		hb.Attach(p.Mem[:k:k], p.IOVA, nil)
		r.stamp(hb, wb.MRQ, wb.Hash, wb.Status)
		return hb
	}
	if r.Pooled[s] {
		// A pool descriptor the caller posted (a Placement without
		// memory): counted as a placement, not as traffic for the
		// next refill.
		r.Pooled[s] = false
		r.Consumed++
	} else {
		r.poolGot++
	}
	pb := r.slot[s]
	payCap := 0
	if pb != nil {
		payCap = pb.Cap() - placeHeader
	}
	h, k, deliver, discardNext := placeAccept(wb, r.discard, placeHeader, payCap)
	r.discard = discardNext
	if !deliver || pb == nil {
		if !discardNext {
			r.cnt.Dropped.Add(1)
		}
		return nil
	}
	r.slot[s] = nil
	all := pb.Data[:0:pb.Cap()][:pb.Cap()]
	if h < placeHeader && k > 0 {
		// Split at its headers (an IP frame): move the rest down
		// behind them.
		copy(all[h:], all[placeHeader:placeHeader+k])
	}
	pb.Data = all[:h+k]
	pb.Next = nil
	r.stamp(pb, wb.MRQ, wb.Hash, wb.Status)
	return pb
}

// releasePlace gives back the header buffers of posted placements (Close,
// after the NIC is quiet), which counts them consumed.
func (r *rxQueue) releasePlace() error { return r.ReleasePlacements(r.hdrs, r.hdr) }

// post hands placements to the NIC after the slots it holds.
func (r *rxQueue) post(ps []nicdrv.Placement) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nic
	if err := n.d.CanPost(n.d.Closed.Load(), r.place); err != nil {
		return 0, err
	}
	from := r.tail
	slots := drv.PostSlots{Size: r.size, Tail: r.tail, Stop: (r.next + r.size - 1) % r.size, Pkt: r.slot, Hdr: r.hdr, Placed: r.Placed, Pooled: r.Pooled,
		Fill: r.fill, Pool: r.pool, Hdrs: r.hdrs, NoBuf: &r.cnt.NoBuf, Min: n.info.PlaceMin, Why: placeMinWhy}
	took, err := slots.Post(&n.d, ps)
	for s := from; s != slots.Tail; s = (s + 1) % r.size {
		r.encodePlace(s)
	}
	r.tail = slots.Tail
	r.Posted += uint64(took)
	r.writeTail()
	return took, err
}

// PostRx implements nicdrv.Placer.
func (n *NIC) PostRx(q int, p []nicdrv.Placement) (int, error) {
	if err := n.d.CheckQueue("RX", q, len(n.rx)); err != nil {
		return 0, err
	}
	return n.rx[q].post(p)
}

// CancelRx implements nicdrv.Placer. The 82574L keeps no queue for
// placement alone (Info().PlaceOnly is 0): both of its queues carry other
// traffic, which stopping one would drop, so every queue is refused with
// nicdrv.ErrNotSupported; a caller places on it as on the 82599's queue 0,
// checking each frame's placement.
func (n *NIC) CancelRx(q int) error {
	op := fmt.Sprintf("cancel RX placements of queue %d", q)
	if q < 0 || q >= len(n.rx) {
		return n.errorf(op, nicdrv.ErrBadQueue)
	}
	return n.errorf(op, fmt.Errorf("the 82574L keeps no queue for placement alone: %w", nicdrv.ErrNotSupported))
}

// RxPlacement implements nicdrv.Placer.
func (n *NIC) RxPlacement(q int) nicdrv.PlacementState { return drv.RxPlacement(&n.d, n.rx, q) }

// Handed implements drv.PlacingQueue (r.mu held).
func (r *rxQueue) Handed() (uint32, *drv.Placements) {
	return (r.rdt + r.size - r.next) % r.size, &r.Placements
}
