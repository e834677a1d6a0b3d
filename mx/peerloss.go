package mx

import "github.com/gomx-dev/gomx/transport"

// checkLostPeers asks a transport that knows when peers go away (see
// transport.PeerWatcher; the shared-memory transport sees a peer process
// exit or crash) and fails everything that involves a lost peer at once:
// its partners are reset as after the resend limit (pending requests fail
// with ErrUnreachable) and forget the lost incarnation, so sends fail as
// not connected until a new Connect, which may reach a new process on the
// same board. Called on every timer tick with b.mu held.
func (b *Board) checkLostPeers() {
	w, ok := b.tr.(transport.PeerWatcher)
	if !ok {
		return
	}
	b.lost = w.LostPeers(b.lost[:0])
	for _, nic := range b.lost {
		for _, e := range b.eps {
			if e == nil {
				continue
			}
			for _, p := range e.plist {
				if p.nic == nic && p.rknown && !p.dead {
					e.cnt[Unreachable]++
					p.reset(ErrUnreachable)
					// That incarnation is gone for good: forget its
					// session, so a Connect to a new process on the board
					// starts afresh (sends until then: not connected).
					p.rknown = false
				}
			}
		}
	}
}
