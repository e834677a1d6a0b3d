package mx

import (
	"github.com/gomx-dev/gomx/internal/regcache"
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// Zero-copy sends: a large message's PULL_REPLY frames leave with their
// header in a transport buffer and their payload read by the NIC from the
// application's own pages, using the transport's in-place sends
// (transport.Register, Frame.Region, Frame.Head). docs/zero-copy.md tells
// the whole story; in short:
//
//   - Registration. The first pull reply of a segment of a large send
//     registers the whole segment with the transport (its DMA mapping in
//     the NIC's domain) through the board's registration cache
//     (internal/regcache): later messages from the same memory, or from
//     any part of it, find the mapping there. Idle mappings beyond
//     ZeroCopyOptions.CacheBytes are unmapped least recently used first;
//     Board.Invalidate drops the mappings of memory about to be unmapped.
//   - When. A frame goes in place when the transport's region of it sends
//     in place and takes a head (Region.InPlace, Region.TakesHead: the nic
//     transport), the frame lies in one segment, carries no CRC-32C
//     trailer (the trailer follows the payload, and only the CPU could
//     write it there: a peer that negotiated the trailer gets copies), and
//     goes out on the board's own transport, not the host's shared memory.
//     A region that takes a head but copies (xdp outside its UMEM, the
//     nic transport over usbnet) carries the reply too: the transport's
//     one copy, counted as the transport's, replaces mx's gather and the
//     transport's copy. Anything else is gathered and copied, and counted
//     as such (copystats.go).
//   - Completion. A large send completes on the receiver's NOTIFY, or
//     fails; either way the NIC may still hold descriptors that point into
//     its memory (a re-requested frame still in the TX ring). Such a send
//     waits in the board's drain list until every region it sent from
//     reports no in-place send pending (Region.Pending, which reaps the
//     NIC's completions), and only then completes: the application never
//     gets back a buffer the NIC may still read.

// ZeroCopyOptions configure zero-copy sends (see docs/zero-copy.md).
type ZeroCopyOptions struct {
	// Off sends every pull reply by copying, even over a transport that
	// sends in place.
	Off bool
	// CacheBytes bounds the application memory kept registered with the
	// transport while no send uses it. Default 1 GiB.
	CacheBytes int64
}

// defaultZeroCopyCache is ZeroCopyOptions.CacheBytes's default.
const defaultZeroCopyCache = 1 << 30

// zeroCopy is a board's zero-copy state (b.mu held for all but the
// cache, which locks itself).
type zeroCopy struct {
	cache *regcache.Cache[*transport.Region]
	// unable is set once the transport showed that its regions cannot
	// carry a pull reply in place: every later one is copied.
	unable bool
	drain  []zcDone
	out    []transport.Frame // handlePull's in-place frames, by batch index
}

// zcSend is what one large send registered: a cache entry per segment,
// taken on the segment's first in-place frame and given back when the
// send completes.
type zcSend struct {
	ents   []*regcache.Entry[*transport.Region]
	failed []bool // segments that could not be registered: copied
}

// zcDone is a large send whose completion waits for the NIC.
type zcDone struct {
	e    *Endpoint
	r    *Request
	zs   *zcSend
	code error
}

// newZeroCopy returns the board's zero-copy state, or nil when o turns it
// off.
func newZeroCopy(tr transport.Transport, o ZeroCopyOptions) *zeroCopy {
	if o.Off {
		return nil
	}
	limit := o.CacheBytes
	if limit <= 0 {
		limit = defaultZeroCopyCache
	}
	return &zeroCopy{cache: regcache.New(tr.Register, func(r *transport.Region) error { return r.Close() }, limit)}
}

// Invalidate drops the board's registrations of memory that overlaps mem:
// call it before unmapping memory the application mapped itself (mmap, a
// hugepage region) that large messages were sent from, or a later mapping
// at the same address could be sent from the old pages. Memory of the Go
// heap needs no call: the board keeps what it registered alive until it
// drops the registration. A registration still used by a send is dropped
// when that send completes. It reports how many registrations it dropped.
func (b *Board) Invalidate(mem []byte) int {
	if b.zc == nil {
		return 0
	}
	return b.zc.cache.Invalidate(mem)
}

// ZeroCopyStats is what a board's registration cache for zero-copy sends
// did.
type ZeroCopyStats struct {
	// Hits and Misses count the segments of large sends that found their
	// registration in the cache and those that registered.
	Hits, Misses uint64
	// Evictions and Invalidations count registrations dropped to stay
	// within CacheBytes, and by Invalidate.
	Evictions, Invalidations uint64
	// Registered is the registrations held now, Bytes their memory.
	Registered int
	Bytes      int64
	// Waiting is the large sends whose NOTIFY came while the NIC could
	// still read their memory, not completed yet.
	Waiting int
}

// ZeroCopyStats reports the board's zero-copy registrations (all zero
// when ZeroCopyOptions.Off is set).
func (b *Board) ZeroCopyStats() ZeroCopyStats {
	if b.zc == nil {
		return ZeroCopyStats{}
	}
	s := b.zc.cache.Stats()
	b.mu.Lock()
	n := len(b.zc.drain)
	b.unlockKick()
	return ZeroCopyStats{Hits: s.Hits, Misses: s.Misses, Evictions: s.Evictions, Invalidations: s.Invalidations,
		Registered: s.Entries, Bytes: s.Bytes, Waiting: n}
}

// zcTo reports whether pull replies to nic may go in place: zero copy is
// on, the frames take the board's own transport to another board, and
// they carry no trailer.
func (b *Board) zcTo(nic transport.NICID, crc bool) bool {
	return b.zc != nil && !b.zc.unable && nic != b.nic && !crc && b.txFor(nic) == b.tr
}

// zcFrame returns the in-place frame for bytes [off, off+n) of r's
// message to nic, with head in front, or ok false when they must be
// copied (across segments, or memory the transport cannot send from).
func (b *Board) zcFrame(reg *region, r *Request, nic transport.NICID, off, n int, head []byte) (transport.Frame, bool) {
	si, so := 0, off
	for si < len(r.segs) && so >= len(r.segs[si]) {
		so -= len(r.segs[si])
		si++
	}
	if si == len(r.segs) || so+n > len(r.segs[si]) {
		return transport.Frame{}, false
	}
	zs := reg.zc
	if zs == nil {
		zs = &zcSend{ents: make([]*regcache.Entry[*transport.Region], len(r.segs)), failed: make([]bool, len(r.segs))}
		reg.zc = zs
	}
	if zs.failed[si] {
		return transport.Frame{}, false
	}
	ent := zs.ents[si]
	if ent == nil {
		seg := r.segs[si]
		var err error
		ent, _, err = b.zc.cache.Get(seg)
		if err != nil {
			zs.failed[si] = true
			return transport.Frame{}, false
		}
		if rg := ent.Mapping(); !rg.TakesHead() {
			// The transport cannot put our header in front: copy, and
			// stop asking it. (A region that copies but takes a head
			// is used: the transport's one copy replaces our two.)
			b.zc.cache.Put(ent)
			b.zc.cache.Invalidate(seg)
			b.zc.unable = true
			zs.failed[si] = true
			return transport.Frame{}, false
		}
		zs.ents[si] = ent
	}
	rg := ent.Mapping()
	base := rg.Offset(r.segs[si]) // where the segment lies in the registration
	f := rg.Frame(nic, base+so, n)
	f.Head = head
	return f, true
}

// sendReplies sends the pull replies of one PULL built in the batch
// buffers (lengths in lens, every frame's header in place), those whose
// Frame is in inplace[i].Region from the application's memory: in place,
// or copied once by the transport where its region copies; it counts what
// was copied and what was not.
func (b *Board) sendReplies(e *Endpoint, nic transport.NICID, lens []int, inplace []transport.Frame, lane uint8) {
	b.txFrames = b.txFrames[:0]
	var regions, copied0 uint64
	var last *transport.Region
	inBytes, inFrames, copiedBytes := 0, 0, 0
	for i, n := range lens {
		if f := inplace[i]; f.Region != nil {
			f.Lane = lane
			b.txFrames = append(b.txFrames, f)
			if !f.Region.InPlace() {
				copiedBytes += len(f.Data)
				continue
			}
			inBytes += len(f.Data)
			inFrames++
			if f.Region != last {
				last = f.Region
				regions++
				copied0 += last.CopiedSends()
			}
			continue
		}
		b.txFrames = append(b.txFrames, transport.Frame{Peer: nic, Data: b.txBufs[i][:n], Lane: lane})
	}
	fr := b.txFrames
	for len(fr) > 0 {
		k, err := b.tr.Send(fr)
		if err != nil {
			b.sendFailed(b.tr, nic, err)
			break
		}
		if k == 0 {
			break
		}
		fr = fr[k:]
	}
	if inFrames > 0 {
		// The transport may still have copied some (a mapping that is
		// not IOVA-contiguous there, a fault wrapper in the way): it
		// counts them by frame, so count their bytes by the mean.
		var copied1 uint64
		last = nil
		for _, f := range b.txFrames {
			if f.Region != nil && f.Region.InPlace() && f.Region != last {
				last = f.Region
				copied1 += last.CopiedSends()
			}
		}
		cp := 0
		if regions == 1 && copied1 > copied0 {
			cp = min(inBytes, int(copied1-copied0)*inBytes/inFrames)
		}
		e.copies.transport.Add(uint64(cp))
		e.copies.inPlace.Add(uint64(inBytes - cp))
	}
	e.copies.transport.Add(uint64(copiedBytes))
	for i := range b.txFrames {
		b.txFrames[i] = transport.Frame{}
	}
	b.txFrames = b.txFrames[:0]
}

// zcHold is called as a large send r ends with code, its region freed
// (zs is what it registered, nil for none): it reports false when r may
// complete now, having given back its registrations, and true when the
// NIC may still read its memory, r then completing from the drain list
// (zcDrainLocked).
func (b *Board) zcHold(e *Endpoint, r *Request, zs *zcSend, code error) bool {
	if zs == nil {
		return false
	}
	if zs.idle() {
		b.zc.release(zs)
		return false
	}
	b.zc.drain = append(b.zc.drain, zcDone{e: e, r: r, zs: zs, code: code})
	b.wakeTicks() // progress.go
	return true
}

// idle reports whether the NIC reads none of the send's registrations.
func (zs *zcSend) idle() bool {
	for _, ent := range zs.ents {
		if ent != nil && ent.Mapping().Pending() > 0 {
			return false
		}
	}
	return true
}

func (z *zeroCopy) release(zs *zcSend) {
	for i, ent := range zs.ents {
		if ent != nil {
			z.cache.Put(ent)
			if rg := ent.Mapping(); !rg.InPlace() {
				// A region the transport copies maps nothing: kept, it
				// would only keep the application's memory alive.
				z.cache.Invalidate(rg.Bytes())
			}
			zs.ents[i] = nil
		}
	}
}

// zcDrainLocked completes the sends of the drain list the NIC is done
// with, and reports whether some still wait (b.mu held).
func (b *Board) zcDrainLocked() bool {
	if b.zc == nil || len(b.zc.drain) == 0 {
		return false
	}
	kept := b.zc.drain[:0]
	for _, d := range b.zc.drain {
		if !d.zs.idle() && !b.closed {
			kept = append(kept, d)
			continue
		}
		b.zc.release(d.zs)
		d.r.protoHeld = false
		if !d.e.closed {
			d.e.complete(d.r, d.code)
		}
		b.maybeFree(d.r)
	}
	clear(b.zc.drain[len(kept):])
	b.zc.drain = kept
	return len(kept) > 0
}

// zcClose ends zero copy as the board closes, after its transport did
// (which completed every in-place send): the sends still waiting complete
// and every registration is dropped.
func (b *Board) zcClose() {
	if b.zc == nil {
		return
	}
	b.mu.Lock()
	b.zcDrainLocked()
	b.placeDrainLocked()
	b.unlockKick()
	_ = b.zc.cache.Close() // the transport unmapped what it still had
}

// replyHeadLen is the part of a PULL_REPLY frame in front of its payload.
const replyHeadLen = wire.HeadLen + wire.PullReplyLen
