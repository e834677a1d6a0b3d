package mx

import "github.com/gomx-dev/gomx/transport"

// checkLostPeers asks a transport that knows when peers go away (see
// transport.PeerWatcher; the shared-memory transport sees a peer process
// exit or crash) and fails everything that involves a lost peer at once:
// its partners are reset as after the resend limit (pending requests and
// later sends fail with ErrUnreachable until a new Connect, which may reach
// a new process on the same board). Called on every timer tick with b.mu
// held. The frames a lost peer sent before it went are handled first
// (verdict.go): a watcher reports the loss once, so the list waits in
// b.lost until a drained timer run acts on it.
func (b *Board) checkLostPeers() {
	if w, ok := b.tr.(transport.PeerWatcher); ok {
		b.lost = w.LostPeers(b.lost)
	}
	if b.host != nil {
		b.lost = b.host.tr.LostPeers(b.lost)
	}
	if len(b.lost) == 0 || !b.mayDeclare() {
		return
	}
	defer func() { b.lost = b.lost[:0] }()
	for _, nic := range b.lost {
		for _, e := range b.eps {
			if e == nil {
				continue
			}
			for _, p := range e.plist {
				if p.nic == nic && p.rknown && !p.dead {
					e.cnt[Unreachable]++
					p.reset(ErrUnreachable)
					if e.loc.lost == nil {
						e.loc.lost = make(map[*partner]struct{})
					}
					e.loc.lost[p] = struct{}{}
				}
			}
		}
	}
}

// forgetLost is called before a connect: a partner whose process was lost
// forgets that incarnation's session, so the reply of a new process on the
// same board starts a fresh sequence instead of resetting the one the
// connect request just announced (b.mu held).
func (e *Endpoint) forgetLost(p *partner) {
	if _, ok := e.loc.lost[p]; ok {
		delete(e.loc.lost, p)
		p.rknown = false
	}
}
