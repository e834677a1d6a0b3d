package loopback

import (
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

// sendFaulty is Port.Send with faults on: every frame goes through the network's
// fault line, which draws its decisions in send order under its lock.
func (n *Network) sendFaulty(p *Port, frames []transport.Frame) (int, error) {
	l := n.fe
	l.Lock()
	defer l.Unlock()
	now := time.Now()
	for i := range frames {
		if len(frames[i].Data) > p.mtu {
			return i, p.tooBig(i, len(frames[i].Data))
		}
		if r := frames[i].Region; r != nil {
			// The fault line copies what it holds back: so does a
			// region's frame.
			if err := r.Check(p, &frames[i]); err != nil {
				return i, fmt.Errorf("loopback: port %v: frame %d: %w", p.id, i, err)
			}
			r.Copied()
		}
		p.tx.sent.Add(1)
		l.Frame(now, p, frames[i].Peer, frames[i].Data, n.deliverItem)
	}
	return len(frames), nil
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
