package mx

import (
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Running out of file descriptors on the rings. A board whose own
// transport is shared memory connects to a peer's process on the first
// frame to it, and each such connection takes descriptors on both sides;
// past a process's RLIMIT_NOFILE the connection fails (shm.ErrFDLimit),
// on our side (the dial) or on the peer's (it refuses us, or we refused
// it when it dialled back to answer). Nothing else carries the frames, so
// a connect would otherwise be resent until the resend limit, minutes
// later, and fail as unreachable with the cause lost. Instead the board
// notes the failure (sendFailed, or the transport's refusals), and its
// next timer pass fails every connect waiting for that peer with
// ErrNoResources wrapping the transport's error, which names the process
// at its limit and says to raise `ulimit -n`. The host path needs none of
// this: a peer it cannot reach through the rings is sent to through the
// board's own transport.

// noteFDLimit notes that nic cannot be reached for lack of descriptors
// (b.mu held).
func (b *Board) noteFDLimit(nic transport.NICID, err error) {
	if b.fdLimited == nil {
		b.fdLimited = make(map[transport.NICID]error)
	}
	b.fdLimited[nic] = err
}

// failFDLimited fails the connects waiting for the peers noted since the
// last timer pass (b.mu held; from timerPass, before the endpoints'
// timers walk their lists).
func (b *Board) failFDLimited() {
	if b.rings != nil {
		for nic, err := range b.rings.TakeFDRefusals() {
			b.noteFDLimit(nic, err)
		}
	}
	if len(b.fdLimited) == 0 {
		return
	}
	for _, e := range b.epl {
		for _, p := range e.plist {
			err := b.fdLimited[p.nic]
			if err == nil {
				continue
			}
			for r := p.connecting.pop(); r != nil; r = p.connecting.pop() {
				e.complete(r, fmt.Errorf("%w: %w", ErrNoResources, err))
			}
		}
	}
	clear(b.fdLimited)
}

// isFDLimit reports whether a send on tr failed for lack of descriptors
// with nothing else to carry the frame: tr is the board's own transport.
func (b *Board) isFDLimit(tr transport.Transport, err error) bool {
	return b.rings != nil && tr == b.tr && errors.Is(err, shm.ErrFDLimit)
}
