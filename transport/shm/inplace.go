package shm

import (
	"encoding/binary"
	"sync"

	"github.com/gomx-dev/gomx/transport"
)

// Sending in place. A Region registered on memory of the transport's Pool
// is sent without copying the frames into the ring: the producer writes a
// reference record (ring.go: length refMark) of refLen bytes instead,
//
//	offset 0   segment id  uint32  a pool segment shared with the consumer
//	offset 4   length      uint32  the frame's length, at most the MTU
//	offset 8   offset      uint64  where the frame starts in the segment
//
// and the consumer's Recv returns a frame whose Data points into its own
// mapping of that segment. The frame is the consumer's until its next
// Recv, exactly like a frame in the ring: the consumer then publishes its
// head past the record, and the producer, seeing the head there, completes
// the send (Region.Pending falls). A Hold copies, as for any frame of the
// ring, so the head is never held back. A consumer that goes away
// completes every send to it. Every field comes from the other process and
// is checked: an unknown segment, or a frame outside it or over the MTU,
// is dropped and counted.

// refRegions are the regions registered in place, with where their memory
// lies in the pool.
type refRegions struct {
	mu sync.RWMutex
	m  map[*transport.Region]refRegion
}

// refRegion is a region's memory in the pool: segment seg from byte base.
type refRegion struct {
	seg  uint32
	base int
}

// refPending is a reference record the consumer has not consumed yet: the
// ring cursor just past it, and the region its frame lies in.
type refPending struct {
	end uint64
	r   *transport.Region
}

// registerRef makes mem an in-place region when it lies in one segment of
// the transport's pool, and reports whether it did.
func (t *Transport) registerRef(mem []byte) (*transport.Region, bool) {
	t.outMu.Lock()
	p := t.pool
	t.outMu.Unlock()
	if p == nil {
		return nil, false
	}
	seg, base, ok := p.Locate(mem)
	if !ok {
		return nil, false
	}
	var r *transport.Region
	r = transport.NewRegion(t, mem, true, func() error {
		t.refs.mu.Lock()
		delete(t.refs.m, r)
		t.refs.mu.Unlock()
		return nil
	})
	r.SetPoll(t.reapRefs)
	t.refs.mu.Lock()
	if t.refs.m == nil {
		t.refs.m = make(map[*transport.Region]refRegion)
	}
	t.refs.m[r] = refRegion{seg: seg, base: base}
	t.refs.mu.Unlock()
	return r, true
}

// inPlace reports whether any frame of a batch is of an in-place region.
func inPlace(frames []transport.Frame) bool {
	for i := range frames {
		if r := frames[i].Region; r != nil && r.InPlace() {
			return true
		}
	}
	return false
}

// refRecord fills rec with the reference record of f, a frame Check
// accepted, and reports whether f's region is one sent in place.
func (t *Transport) refRecord(f *transport.Frame, rec *[refLen]byte) bool {
	r := f.Region
	if !r.InPlace() {
		return false
	}
	t.refs.mu.RLock()
	x, ok := t.refs.m[r]
	t.refs.mu.RUnlock()
	if !ok {
		return false
	}
	le := binary.LittleEndian
	le.PutUint32(rec[0:], x.seg)
	le.PutUint32(rec[4:], uint32(len(f.Data)))
	le.PutUint64(rec[8:], uint64(x.base+r.Offset(f.Data)))
	return true
}

// reapRefs completes the sends the consumers have passed, and every send
// to a consumer that went away (Region.Pending's poll).
func (t *Transport) reapRefs() {
	t.outMu.Lock()
	defer t.outMu.Unlock()
	for _, o := range t.out {
		if !o.mu.TryLock() {
			continue // its producer reaps as it writes
		}
		if o.dead.Load() || o.data == nil {
			o.completeRefs()
		} else {
			o.reapRefs()
		}
		o.mu.Unlock()
	}
}

// reapRefs completes the sends of reference records the consumer's head
// has passed. o.mu is held and the ring mapped.
func (o *outRing) reapRefs() {
	if len(o.refs) == 0 {
		return
	}
	// The load acquires: the consumer is done with every record below.
	h := o.head.Load()
	k := 0
	for k < len(o.refs) && o.refs[k].end <= h {
		o.refs[k].r.Done()
		k++
	}
	if k > 0 {
		n := copy(o.refs, o.refs[k:])
		clear(o.refs[n:])
		o.refs = o.refs[:n]
	}
}

// completeRefs completes every pending send of the ring: its consumer is
// gone or the transport closes. o.mu is held.
func (o *outRing) completeRefs() {
	for _, p := range o.refs {
		p.r.Done()
	}
	clear(o.refs)
	o.refs = o.refs[:0]
}

// resolve turns the reference record rec of ring r into the frame it
// names, in our mapping of the producer's segment, or nil (counted) when
// the record names memory the producer did not share with us.
func (t *Transport) resolve(r *inRing, rec []byte) []byte {
	le := binary.LittleEndian
	id, n, off := le.Uint32(rec[0:]), uint64(le.Uint32(rec[4:])), le.Uint64(rec[8:])
	r.segMu.RLock()
	s, ok := r.segs[id]
	r.segMu.RUnlock()
	if !ok || n > uint64(t.opts.MTU) || off > uint64(len(s.mem)) || n > uint64(len(s.mem))-off {
		t.cnt.refBad.Add(1)
		return nil
	}
	return s.mem[off : off+n : off+n]
}
