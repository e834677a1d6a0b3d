package nic

import (
	"fmt"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/transport"
)

var _ transport.Placer = (*Transport)(nil)

// placeQueue returns the RX queue the transport places on: its one queue,
// with raw Ethernet framing (a UDP frame's IP header says a length its
// split Data does not have), over a NIC opened to place payloads.
func (t *Transport) placeQueue() (nicdrv.Placer, int, bool) {
	p, ok := t.nic.(nicdrv.Placer)
	info := t.nic.Info()
	if !ok || info.PlaceHeader <= t.hdr || t.hdr != headerLen || t.queue != nil {
		return nil, 0, false
	}
	switch {
	case t.rxq >= 0:
		return p, t.rxq, true
	case info.Queues == 1:
		return p, 0, true
	}
	return nil, 0, false
}

// PlaceInfo implements transport.Placer: a placed frame brings the first
// bytes after its Ethernet header in Data, the rest in Placed.
func (t *Transport) PlaceInfo() (head, min int) {
	if _, _, ok := t.placeQueue(); !ok {
		return 0, 0
	}
	info := t.nic.Info()
	return info.PlaceHeader - t.hdr, info.PlaceMin
}

// Post implements transport.Placer over the driver's nicdrv.Placer.
func (t *Transport) Post(r *transport.Region, spans [][]byte) (int, error) {
	p, q, ok := t.placeQueue()
	if !ok {
		return 0, fmt.Errorf("transport/nic: post: this transport cannot place payloads (open the NIC with placement, one RX queue, raw Ethernet framing): %w", nicdrv.ErrNotSupported)
	}
	if t.closed.Load() {
		return 0, errClosed
	}
	t.regMu.Lock()
	x := t.regions[r]
	t.regMu.Unlock()
	if x == nil {
		return 0, fmt.Errorf("transport/nic: post: the region is not one of this transport's mapped regions: register the memory with this transport")
	}
	ps := make([]nicdrv.Placement, 0, len(spans))
	var err error
	for i, s := range spans {
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
func (t *Transport) Placement() transport.PlaceState {
	p, q, ok := t.placeQueue()
	if !ok {
		return transport.PlaceState{}
	}
	s := p.RxPlacement(q)
	return transport.PlaceState{Ahead: s.Ahead, Posted: s.Posted, Consumed: s.Consumed}
}
