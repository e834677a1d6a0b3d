package loopback

import (
	"fmt"
	"sync"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

// sendFaulty is Port.Send with faults on: every frame goes through the
// network's fault line, which draws its decisions in send order under its
// lock. The frames the line lets through at once are then delivered as
// Send delivers them without faults: each run of them from one port to
// one port with one enqueue (one lock of the queue, one wake-up of its
// receiver), so a polling receiver takes a sender's batch as one batch,
// and, unless the line may hold frames back (Reorder, Delay), after its
// lock is released, so one port's copying does not hold up another's
// sends. A lossy run so costs the wire what a lossless one does.
func (n *Network) sendFaulty(p *Port, frames []transport.Frame) (int, error) {
	rb := runPool.Get().(*runBuf)
	l := n.fe
	l.Lock()
	now := time.Now()
	sent, err := len(frames), error(nil)
	for i := range frames {
		if len(frames[i].Data) > p.mtu {
			sent, err = i, p.tooBig(i, len(frames[i].Data))
			break
		}
		if r := frames[i].Region; r != nil {
			// The fault line copies what it holds back: so does a
			// region's frame.
			if e := r.Check(p, &frames[i]); e != nil {
				sent, err = i, fmt.Errorf("loopback: port %v: frame %d: %w", p.id, i, e)
				break
			}
			r.Copied()
		}
		p.tx.sent.Add(1)
		l.Frame(now, p, frames[i].Peer, frames[i].Data, rb.add)
	}
	if l.HoldsBack() {
		n.deliverRun(rb)
		l.Unlock()
	} else {
		l.Unlock()
		n.deliverRun(rb)
	}
	runPool.Put(rb)
	return sent, err
}

// runBuf holds the frames one sendFaulty call lets through, in the order
// the fault line let them through, for deliverRun.
type runBuf struct {
	from   []*Port // each frame's sender (a held frame may be another port's)
	frames []transport.Frame
	add    func(fault.Item[*Port]) // appends an item's copies
}

var runPool = sync.Pool{New: func() any {
	rb := &runBuf{}
	rb.add = func(it fault.Item[*Port]) {
		for range it.Copies {
			rb.from = append(rb.from, it.Tag)
			rb.frames = append(rb.frames, transport.Frame{Peer: it.Peer, Data: it.Data})
		}
	}
	return rb
}}

// deliverRun delivers rb's frames in order, each stretch of them from one
// sender to one port with one enqueue, and empties rb.
func (n *Network) deliverRun(rb *runBuf) {
	ports := *n.ports.Load()
	for i := 0; i < len(rb.frames); {
		from, peer := rb.from[i], rb.frames[i].Peer
		j := i + 1
		for j < len(rb.frames) && rb.from[j] == from && rb.frames[j].Peer == peer {
			j++
		}
		if dst := ports[peer]; dst == nil || !dst.enqueue(from.id, rb.frames[i:j]) {
			if !from.closed.Load() {
				from.tx.unknownPeer.Add(uint64(j - i))
			} else {
				n.lateUnknown.Add(uint64(j - i))
			}
		}
		i = j
	}
	clear(rb.from)
	clear(rb.frames)
	rb.from, rb.frames = rb.from[:0], rb.frames[:0]
}

// deliverItem delivers a frame the fault model let through, now or when it
// was due (with the line's lock held either way).
func (n *Network) deliverItem(it fault.Item[*Port]) {
	from := it.Tag
	for range it.Copies {
		if !n.deliver(from.id, it.Peer, it.Data) {
			if !from.closed.Load() {
				from.tx.unknownPeer.Add(1)
			} else {
				n.lateUnknown.Add(1)
			}
		}
	}
}
