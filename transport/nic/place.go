package nic

import (
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/transport"
)

var _ transport.Placer = (*Transport)(nil)

// Lanes. A NIC opened with queues kept for placement alone
// (nicdrv.Info.PlaceOnly: the 82599 with ixgbe.Options.PlaceOnly) gives
// the transport, with raw Ethernet framing, one lane per such queue: New
// installs an EtherType rule per lane (transport.LaneEtherType(k) to the
// k-th of those queues) and Close removes them. A peer that sends a frame
// with Frame.Lane k writes that EtherType, so the frame lands on queue k
// of the receiver, where only what the receiver posted waits. Recv takes
// from every queue, lanes included, marks each frame that came from a
// lane's queue with its lane (Frame.Lane), and accepts the lane
// EtherTypes on any queue (a frame sent to a lane of a receiver that has
// none arrives on its one queue, with Lane 0).

// setupLanes installs the lane rules, when the NIC keeps queues for
// placement and the framing is raw Ethernet; a rule the NIC refuses ends
// the lanes there (fewer lanes, never a failed New).
func (t *Transport) setupLanes() {
	_, ok := t.nic.(nicdrv.Placer)
	info := t.nic.Info()
	if !ok || info.PlaceHeader <= t.hdr || t.hdr != headerLen || info.PlaceOnly <= 0 {
		return
	}
	first := info.Queues - info.PlaceOnly
	for k := 1; k <= min(info.PlaceOnly, transport.MaxLanes); k++ {
		id, err := t.nic.AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: transport.LaneEtherType(k), Queue: first + k - 1})
		if err != nil {
			break
		}
		t.laneRules = append(t.laneRules, id)
	}
	t.laneQ = first
}

// laneOf returns the lane RX queue q is, 0 for none.
func (t *Transport) laneOf(q int) uint8 {
	if k := q - t.laneQ + 1; t.queue == nil && len(t.laneRules) > 0 && k >= 1 && k <= len(t.laneRules) {
		return uint8(k)
	}
	return 0
}

// removeLanes removes the lane rules (Close, before the NIC closes).
func (t *Transport) removeLanes() error {
	var err error
	for _, id := range t.laneRules {
		err = errors.Join(err, t.nic.RemoveRule(id))
	}
	t.laneRules = nil
	return err
}

// placeQueue returns the RX queue lane places on. Lane 0 is the
// transport's one queue for everything else: with raw Ethernet framing (a
// UDP frame's IP header says a length its split Data does not have), over
// a NIC opened to place payloads whose queues, but for the lanes', are
// one, and none is kept for placement. Lanes 1..len(laneRules) are the
// queues kept for placement; with them, lane 0 places nothing (its queue
// keeps a whole ring for the traffic not steered to a lane).
func (t *Transport) placeQueue(lane int) (nicdrv.Placer, int, bool) {
	p, ok := t.nic.(nicdrv.Placer)
	info := t.nic.Info()
	if !ok || info.PlaceHeader <= t.hdr || t.hdr != headerLen || t.queue != nil {
		return nil, 0, false
	}
	switch {
	case lane > 0 && lane <= len(t.laneRules):
		return p, t.laneQ + lane - 1, true
	case lane != 0:
		return nil, 0, false
	case info.PlaceOnly > 0:
		return nil, 0, false // lane 0's queue keeps a whole ring of pool buffers
	case t.rxq >= 0:
		return p, t.rxq, true
	case info.Queues == 1:
		return p, 0, true
	}
	return nil, 0, false
}

// PlaceInfo implements transport.Placer: a placed frame brings the first
// bytes after its Ethernet header in Data, the rest in Placed.
func (t *Transport) PlaceInfo() transport.PlaceInfo {
	pi := transport.PlaceInfo{SendsLanes: t.hdr == headerLen && t.queue == nil}
	_, _, ok0 := t.placeQueue(0)
	if _, _, ok1 := t.placeQueue(1); !ok0 && !ok1 {
		return pi
	}
	info := t.nic.Info()
	pi.Head, pi.Min, pi.Lanes = info.PlaceHeader-t.hdr, info.PlaceMin, len(t.laneRules)
	pi.LaneMin = pi.Min
	if info.PlaceOnlyMin > 0 && pi.Lanes > 0 {
		pi.LaneMin = info.PlaceOnlyMin
	}
	return pi
}

// Post implements transport.Placer over the driver's nicdrv.Placer.
func (t *Transport) Post(lane int, r *transport.Region, spans [][]byte) (int, error) {
	p, q, ok := t.placeQueue(lane)
	if !ok {
		return 0, fmt.Errorf("transport/nic: post on lane %d: this transport cannot place payloads there (open the NIC with placement, one RX queue but its PlaceOnly ones, raw Ethernet framing; lanes 1..%d): %w", lane, len(t.laneRules), nicdrv.ErrNotSupported)
	}
	if t.closed.Load() {
		return 0, errClosed
	}
	t.postMu.Lock()
	defer t.postMu.Unlock()
	x := t.regionOf(r, &t.postRegion)
	if x == nil {
		return 0, fmt.Errorf("transport/nic: post: the region is not one of this transport's mapped regions: register the memory with this transport")
	}
	ps := t.postBuf[:0]
	defer func() {
		clear(ps) // the spans are the caller's memory: keep none
		t.postBuf = ps[:0]
	}()
	var err error
	for i, s := range spans {
		if s == nil {
			ps = append(ps, nicdrv.Placement{})
			continue
		}
		off := r.Offset(s)
		if off < 0 || off > len(x.m.Buf)-len(s) || len(s) == 0 {
			err = fmt.Errorf("transport/nic: post: span %d (%d bytes) does not lie in the region", i, len(s))
			break
		}
		iova, contig, e := x.m.IOVA(off)
		if e != nil || contig < len(s) {
			err = fmt.Errorf("transport/nic: post: span %d is not contiguous for the NIC (%d of %d bytes): post spans within one page", i, contig, len(s))
			break
		}
		ps = append(ps, nicdrv.Placement{Mem: s, IOVA: iova})
	}
	n, perr := p.PostRx(q, ps)
	if perr != nil {
		return n, fmt.Errorf("transport/nic: post: %w", perr)
	}
	return n, err
}

// Placement implements transport.Placer.
func (t *Transport) Placement(lane int) transport.PlaceState {
	p, q, ok := t.placeQueue(lane)
	if !ok {
		return transport.PlaceState{}
	}
	s := p.RxPlacement(q)
	return transport.PlaceState{Ahead: s.Ahead, Posted: s.Posted, Consumed: s.Consumed}
}

// Cancel implements transport.Placer: the lane's queue is stopped and
// started again empty (nicdrv.Placer.CancelRx).
func (t *Transport) Cancel(lane int) error {
	p, q, ok := t.placeQueue(lane)
	if !ok || lane == 0 {
		return fmt.Errorf("transport/nic: cancel lane %d: lanes are 1..%d: %w", lane, len(t.laneRules), nicdrv.ErrNotSupported)
	}
	if t.closed.Load() {
		return errClosed
	}
	if err := p.CancelRx(q); err != nil {
		return fmt.Errorf("transport/nic: cancel lane %d: %w", lane, err)
	}
	return nil
}
