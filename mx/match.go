package mx

import "github.com/gomx-dev/gomx/mx/internal/ilist"

// unexp is a message that arrived before a matching receive was posted.
type unexp struct {
	q ilist.Node[unexp] // on the endpoint's uxList

	p        *partner
	match    uint64
	length   uint32
	rndv     bool
	rref     rndvRef
	buf      []byte
	complete bool     // every byte is in buf (or it is an RNDV)
	pt       *partial // the medium still filling buf
	recv     *Request // the receive waiting for the rest of a medium
	bytes    int      // charged to the endpoint's unexpected bytes
	released bool
	ls       *localSend // a local rendezvous: the sender's buffer (local.go)
}

// uxList is the endpoint's queue of unexpected messages, in arrival
// order, linked through their q node.
type uxList struct{ ilist.List[unexp] }

func (l *uxList) push(u *unexp)   { l.PushBack(&u.q, u) }
func (l *uxList) remove(u *unexp) { l.Remove(&u.q) }

func (u *unexp) statusOf() Status {
	return Status{Source: u.p.addr(), Match: u.match, MsgLength: u.length}
}

// matchPosted removes and returns the first posted receive that matches.
func (e *Endpoint) matchPosted(match uint64) *Request {
	for r := e.posted.Front(); r != nil; r = r.q.Next() {
		if match&r.mask == r.match {
			e.posted.remove(r)
			return r
		}
	}
	return nil
}

func (e *Endpoint) findUnexp(match, mask uint64) *unexp {
	for u := e.unexp.Front(); u != nil; u = u.q.Next() {
		if u.match&mask == match {
			return u
		}
	}
	return nil
}

// unexpRoom reports whether one more unexpected message of n bytes fits.
func (e *Endpoint) unexpRoom(n int) bool {
	o := &e.b.opts
	return e.unexp.Len() < o.UnexpectedMaxMessages && e.unexpBytes+n <= o.UnexpectedMaxBytes
}

func (e *Endpoint) queueUnexp(u *unexp) {
	e.unexp.push(u)
	e.unexpBytes += u.bytes
	e.cnt[UnexpectedQueued]++
	e.signalEvent()
}

// release returns an entry's bytes to the endpoint's budget.
func (e *Endpoint) release(u *unexp) {
	if !u.released {
		u.released = true
		e.unexpBytes -= u.bytes
	}
}

// dropUnexp discards an unexpected entry (endpoint close, partner reset).
func (e *Endpoint) dropUnexp(u *unexp) {
	e.unexp.remove(u)
	e.release(u)
	if u.ls != nil {
		e.dropLocal(u)
	}
	if u.recv != nil {
		e.complete(u.recv, ErrEndpointClosed)
		u.recv = nil
	}
	if u.pt != nil {
		u.pt.u = nil
		u.pt = nil
	}
}

// takeUnexp gives an unexpected message (already out of the queue) to r.
func (e *Endpoint) takeUnexp(r *Request, u *unexp) {
	switch {
	case u.ls != nil:
		e.takeLocal(r, u)
	case u.rndv:
		e.release(u)
		e.startPull(r, u.p, u.match, u.length, u.rref)
		e.b.putUnexp(u)
	case u.complete:
		u.recv = r
		e.finishUnexpRecv(u)
	default:
		u.recv = r
		r.status.Source = u.p.addr()
		r.status.Match = u.match
		r.status.MsgLength = u.length
	}
}

// finishUnexpRecv copies a complete unexpected message to its receive.
// Called with b.mu held.
func (e *Endpoint) finishUnexpRecv(u *unexp) {
	r := u.recv
	u.recv = nil
	n := scatterAt(r.segs, 0, u.buf)
	e.copies.locked.scatter += uint64(n)
	e.copies.locked.recv += uint64(n)
	e.release(u)
	e.finishRecv(r, u.p, u.match, u.length, uint32(n))
	e.b.putUnexp(u) // nothing references it any more

}
