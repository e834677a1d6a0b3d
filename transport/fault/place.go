package fault

import (
	"fmt"

	"github.com/gomx-dev/gomx/transport"
)

// Placed frames (transport.Placer). The wrapper posts through the wrapped
// transport, whose NIC places; a frame that took a posting passes through
// the receive model whole (its Data and Placed copied together into one
// buffer), so the model loses, corrupts, duplicates, holds and delays it
// as any frame. The copy the model lets through at once is delivered as
// the wrapped transport returned it, split, with its Placed; every copy
// the model made of it (a duplicate queued, a frame held back, delayed or
// corrupted) is whole, a snapshot taken as it arrived, so a frame that
// comes out later never reads posted memory written since.

var _ transport.Placer = (*Transport)(nil)

// modelData is what the receive model sees of f.
func (w *Transport) modelData(f transport.Frame) []byte {
	if f.Placed == nil {
		return f.Data
	}
	w.whole = append(append(w.whole[:0], f.Data...), f.Placed...)
	return w.whole
}

// direct reports whether data is the wrapped frame being offered, made
// whole for the model, and not a copy of it.
func (w *Transport) direct(data []byte) bool {
	return w.inFrame.Placed != nil && len(data) > 0 && len(data) == len(w.whole) && &data[0] == &w.whole[0]
}

// PlaceInfo implements transport.Placer: the wrapped transport's, or 0
// when it cannot place.
func (w *Transport) PlaceInfo() transport.PlaceInfo {
	if p, ok := w.inner.(transport.Placer); ok {
		return p.PlaceInfo()
	}
	return transport.PlaceInfo{}
}

// Post implements transport.Placer: the wrapped transport's.
func (w *Transport) Post(lane int, r *transport.Region, spans [][]byte) (int, error) {
	if p, ok := w.inner.(transport.Placer); ok {
		return p.Post(lane, r, spans)
	}
	return 0, fmt.Errorf("fault: wrapper of %v: post: the wrapped transport cannot place payloads", w.inner.Addr())
}

// Placement implements transport.Placer: the wrapped transport's.
func (w *Transport) Placement(lane int) transport.PlaceState {
	if p, ok := w.inner.(transport.Placer); ok {
		return p.Placement(lane)
	}
	return transport.PlaceState{}
}

// Cancel implements transport.Placer: the wrapped transport's.
func (w *Transport) Cancel(lane int) error {
	if p, ok := w.inner.(transport.Placer); ok {
		return p.Cancel(lane)
	}
	return fmt.Errorf("fault: wrapper of %v: cancel: the wrapped transport cannot place payloads", w.inner.Addr())
}
