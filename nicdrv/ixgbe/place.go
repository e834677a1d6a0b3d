package ixgbe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// Payload placement (Options.Placement; nicdrv.Placer). Every descriptor
// of a placing queue splits its frame after placeHeader bytes (SRRCTL
// DESCTYPE 101 with BSIZEHEADER 64 bytes and PSRTYPE naming no header, so
// no frame is parsed shorter). A pool descriptor points its header buffer
// at the start of a pool Buffer and its packet buffer placeHeader bytes
// further, so the frame lands whole in the Buffer; a placed descriptor
// takes a header buffer of the queue's header pool and the caller's
// placement. Pool descriptors are handed at most placePoolAhead ahead of
// the driver's reading, and none while placements are outstanding, so that
// the placements a caller posts next follow the outstanding ones directly.
// How many follows the traffic: as many as the last RxBatch received in
// pool buffers, at least one, so that a busy queue takes a burst between
// two calls while a quiet one (where a caller is about to post for the
// frames it asked for) holds one descriptor ahead of its placements, not
// eight. Frames beyond them wait in the NIC's packet buffer for the next
// call.

const (
	// placeHeader is the header buffer's size: BSIZEHEADER's unit, the
	// least the 82599 splits at.
	placeHeader = 64
	// placePoolAhead bounds the pool descriptors handed to the NIC at
	// once.
	placePoolAhead = 8
)

// placeMinWhy says why a placement is at least Info.PlaceMin long.
var placeMinWhy = fmt.Sprintf("the largest frame (MaxFrame, %d more with a VLAN tag) less the %d-byte header", vlanTag, placeHeader)

// placeOnlyMinWhy says why a placement on a PlaceOnly queue is at least
// Info.PlaceOnlyMin long.
var placeOnlyMinWhy = fmt.Sprintf("the largest frame (MaxFrame; the queue strips a VLAN tag) less the %d-byte header", placeHeader)

// placeState is a placing queue's placements, by slot, and their counts.
type placeState struct {
	drv.Placements      // Pooled: the pool descriptors the caller posted
	only           bool // one of Options.PlaceOnly: no pool descriptor but those posted
	// poolGot counts the frames received in pool buffers since the last
	// refill: the pool descriptors the next refill keeps ahead.
	poolGot uint32
}

var _ nicdrv.Placer = (*NIC)(nil)

// initPlace makes r a placing queue: header buffers kept by the queue
// itself (the fill gives pool buffers alone).
func (r *rxQueue) initPlace() {
	r.place = true
	r.hdrs = r.nic.pools.Header[r.q]
	r.hdr = make([]*nicdrv.Buffer, r.size)
	r.InitPlacements(r.size, true)
	r.poolGot = placePoolAhead
	r.only = r.q >= r.nic.opts.Queues-r.nic.opts.PlaceOnly
}

// encodePlace writes slot s's read descriptor on a placing queue.
func (r *rxQueue) encodePlace(s uint32) {
	d := &r.d[s]
	if p := r.Placed[s]; p.Mem != nil {
		binary.LittleEndian.PutUint64(d[0:8], p.IOVA)
		binary.LittleEndian.PutUint64(d[8:16], r.hdr[s].IOVA())
		return
	}
	b := r.pkt[s].IOVA()
	binary.LittleEndian.PutUint64(d[0:8], b+placeHeader)
	binary.LittleEndian.PutUint64(d[8:16], b)
}

// refillPlace hands pool descriptors to the NIC, when no placement is
// outstanding, up to as many ahead of the driver's reading as frames
// came in pool buffers since the last refill: at least 1, at most
// placePoolAhead.
func (r *rxQueue) refillPlace() {
	want := min(max(r.poolGot, 1), placePoolAhead)
	if r.nic.opts.PlaceOnly > 0 {
		// The queues beside PlaceOnly ones take what is not steered
		// to them: a whole ring, as without placement.
		want = r.size - 1
	}
	r.poolGot = 0
	if r.Consumed != r.Posted || r.only {
		return
	}
	if (r.tail+r.size-r.next)%r.size >= want {
		return
	}
	from := r.tail
	r.tail = r.fill.Fill(r.tail, (r.next+want)%r.size)
	for s := from; s != r.tail; {
		r.encode(s)
		if s++; s == r.size {
			s = 0
		}
	}
}

// writeTail hands the NIC every slot filled.
func (r *rxQueue) writeTail() {
	if r.tail != r.rdt {
		r.nic.w32(hw.RDT(r.q), r.tail)
		r.rdt = r.tail
	}
}

// placeDesc takes the buffers of slot s, written back as wb, into the
// frame being gathered (its header buffer and placement, or its pool
// Buffer), or marks the frame bad.
func (r *rxQueue) placeDesc(s uint32, wb hw.RxWriteBack) {
	h, k := 0, int(wb.Length)
	if wb.Split() {
		h = wb.HeaderLen()
	}
	if p := r.Placed[s]; p.Mem != nil {
		hb := r.hdr[s]
		r.hdr[s], r.Placed[s] = nil, nicdrv.Placement{}
		r.Consumed++
		if hb == nil || r.head != nil || h < 14 || h > min(placeHeader, hb.Cap()) || k > len(p.Mem) {
			r.bad = true
			if hb != nil {
				_ = r.hdrs.Free(hb)
			}
			return
		}
		r.add(hb, h)
		hb.Attach(p.Mem[:k:k], p.IOVA, nil)
		return
	}
	pb := r.pkt[s]
	if r.Pooled[s] {
		r.Pooled[s] = false
		r.Consumed++
	} else {
		r.poolGot++
	}
	if pb == nil || r.head != nil || h > placeHeader || placeHeader+k > pb.Cap() {
		r.bad = true
		return
	}
	r.pkt[s] = nil
	if h < placeHeader && k > 0 {
		// Not split where the driver split it (a NIC that parsed a
		// shorter header): move the rest down behind the header.
		all := pb.Data[:0:pb.Cap()][:pb.Cap()]
		copy(all[h:], all[placeHeader:placeHeader+k])
	}
	r.add(pb, h+k)
}

// placedFrame takes slot s, written back as lo and hi with EOP and no
// error, when it is the common placed frame: a placement, split with a
// header of 14 (an Ethernet header) to placeHeader bytes in its header
// buffer, as general requires, and no more than the placement holds
// after it, of a length up to maxFrame. It
// returns the frame (the header buffer with the written part of the
// placement attached), as general would, or nil, having changed nothing,
// for every other descriptor, which general then takes. A stream of
// placed replies costs no write-back decoding and no gathering.
func (r *rxQueue) placedFrame(s uint32, lo, hi uint64, maxFrame int) *nicdrv.Buffer {
	p := &r.Placed[s]
	hb := r.hdr[s]
	h, k := int(uint16(lo>>16)&hw.HdrInfoLenMask)>>hw.HdrInfoLenShift, int(uint16(hi>>32))
	if p.Mem == nil || hb == nil || uint16(lo>>16)&hw.HdrInfoSPH == 0 || h < 14 || h > min(placeHeader, hb.Cap()) ||
		k > len(p.Mem) || h+k > maxFrame {
		return nil
	}
	mem, iova := p.Mem[:k:k], p.IOVA
	r.hdr[s], *p = nil, nicdrv.Placement{}
	r.Consumed++
	hb.Data = hb.Data[:0:hb.Cap()][:h]
	hb.Next = nil
	hb.Attach(mem, iova, nil)
	r.deliver(hb, lo, hi)
	return hb
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
	slots := drv.PostSlots{Size: r.size, Tail: r.tail, Stop: (r.next + r.size - 1) % r.size, Pkt: r.pkt, Hdr: r.hdr, Placed: r.Placed, Pooled: r.Pooled,
		Fill: r.fill, Pool: r.pool, Hdrs: r.hdrs, NoBuf: &r.cnt.NoBuf, Min: n.info.PlaceMin, Why: placeMinWhy}
	if r.only {
		slots.Min, slots.Why = n.info.PlaceOnlyMin, placeOnlyMinWhy
	}
	took, err := slots.Post(&n.d, ps)
	for s := from; s != slots.Tail; s = (s + 1) % r.size {
		r.encode(s)
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

// CancelRx implements nicdrv.Placer.
func (n *NIC) CancelRx(q int) error {
	if q < 0 || q >= len(n.rx) {
		return n.errorf(fmt.Sprintf("RX queue %d", q), nicdrv.ErrBadQueue)
	}
	return n.rx[q].cancel()
}

// rxDisableSettle is how long a receive queue's DMA may go on after
// RXDCTL.ENABLE reads clear (the 82599 datasheet's receive queue
// disable: about 100 µs).
const rxDisableSettle = 100 * time.Microsecond

// cancel stops a PlaceOnly queue, drops what it holds, and starts it
// again with nothing posted. With RXDCTL.ENABLE clear (polled) the NIC
// fetches no descriptor of the queue, so every slot from the driver's
// reading to the tail goes back to the driver: placements and posted pool
// descriptors counted consumed (whether a frame took them or not: those
// frames are dropped), buffers kept in their slots for the next posting.
// The head is moved to the tail before the queue is enabled again.
func (r *rxQueue) cancel() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nic
	op := fmt.Sprintf("cancel RX placements of queue %d", r.q)
	switch {
	case n.d.Closed.Load():
		return n.errorf(op, nicdrv.ErrClosed)
	case !r.place || !r.only:
		return n.errorf(op, fmt.Errorf("not one of Options.PlaceOnly's queues: %w", nicdrv.ErrNotSupported))
	}
	if r.next == r.tail && r.head == nil {
		return nil
	}
	n.clr32(hw.RXDCTL(r.q), hw.RxdctlEnable)
	if err := n.waitReg(fmt.Sprintf("RXDCTL%d.ENABLE", r.q), hw.RXDCTL(r.q), func(v uint32) bool { return v&hw.RxdctlEnable == 0 }); err != nil {
		return err
	}
	// The 82599 datasheet's rule for disabling a receive queue: once
	// RXDCTL.ENABLE reads clear, wait about 100 µs more before reusing
	// the queue's buffers, as the device may still finish a data write in
	// progress (Linux's ixgbe_disable_rx_queue allows the same: "the
	// hardware may take up to 100us to really disable the rx queue").
	// Only then are the postings counted consumed: the board takes them
	// as done as Cancel returns. (The model of package emulated writes a
	// frame whole under its lock; the wait costs it nothing that
	// matters, a cancel being rare.)
	time.Sleep(rxDisableSettle)
	var errs []error
	for s := r.next; s != r.tail; s = (s + 1) % r.size {
		if r.Placed[s].Mem != nil || r.Pooled[s] {
			r.Consumed++
		}
		r.Placed[s], r.Pooled[s] = nicdrv.Placement{}, false
		r.d[s] = desc{}
	}
	if r.head != nil {
		errs = append(errs, r.pool.Free(r.head))
		r.head, r.last = nil, nil
		r.parts, r.bytes, r.bad, r.gathering = 0, 0, false, false
	}
	r.next = r.tail
	n.w32(hw.RDH(r.q), r.tail)
	n.w32(hw.RDT(r.q), r.tail)
	n.set32(hw.RXDCTL(r.q), hw.RxdctlEnable)
	errs = append(errs, n.waitReg(fmt.Sprintf("RXDCTL%d.ENABLE", r.q), hw.RXDCTL(r.q), func(v uint32) bool { return v&hw.RxdctlEnable != 0 }))
	r.rdt = r.tail
	return errors.Join(errs...)
}

// RxPlacement implements nicdrv.Placer.
func (n *NIC) RxPlacement(q int) nicdrv.PlacementState { return drv.RxPlacement(&n.d, n.rx, q) }

// Handed implements drv.PlacingQueue (r.mu held).
func (r *rxQueue) Handed() (uint32, *drv.Placements) {
	return (r.tail + r.size - r.next) % r.size, &r.Placements
}
