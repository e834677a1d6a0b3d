package mx

import (
	"context"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// Peer discovery on the wire, as Open-MX's driver does it: a HOST_QUERY
// asks a board for its hostname, the HOST_REPLY carries it (and each tells
// the other its index in its peer table). RAW frames are handed, opaque, to
// whoever reads them with RecvRaw (Open-MX's raw interface, which its
// discovery daemon and mapper use).

// rawQueueMax bounds the RAW frames a board keeps unread; more are dropped
// and counted (DropRawFull), like Open-MX's raw event queue.
const rawQueueMax = 1024

type rawFrame struct {
	nic  transport.NICID
	data []byte
}

// handleHostQuery answers with this board's hostname (BoardOptions.Hostname;
// a board without one does not answer).
func (b *Board) handleHostQuery(nic transport.NICID, h *wire.HostQuery) {
	b.cnt[RecvHostQuery]++
	i := b.peerIndex(nic)
	if i != wire.NoPeerIndex {
		b.peers[i].yourIdx = h.YourIndex
	}
	if b.opts.Hostname == "" {
		return
	}
	r := wire.HostReply{YourIndex: i, Magic: h.Magic, Hostname: b.opts.Hostname}
	if r.Len()+wire.HeadLen > b.mtu {
		return
	}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, b.headTo(nic), b.ord)
	r.Put(buf[wire.HeadLen:], b.ord)
	b.sendFrame(nic, buf, wire.HeadLen+r.Len(), b.sealControl(nic))
}

// handleHostReply records a peer's hostname (and registers it in
// BoardOptions.Names) and wakes QueryHostname.
func (b *Board) handleHostReply(nic transport.NICID, h *wire.HostReply) {
	if h.Magic != wire.HostQueryMagic {
		b.cnt[DropBadHeader]++
		return
	}
	b.cnt[RecvHostReply]++
	i := b.peerIndex(nic)
	if i == wire.NoPeerIndex {
		return
	}
	b.peers[i].yourIdx = h.YourIndex
	b.peers[i].hostname = h.Hostname
	if b.opts.Names != nil && h.Hostname != "" {
		b.opts.Names.Register(h.Hostname, nic)
	}
	for _, ch := range b.hostWait[nic] {
		close(ch)
	}
	delete(b.hostWait, nic)
}

func (b *Board) sendHostQuery(nic transport.NICID) {
	q := wire.HostQuery{YourIndex: b.peerIndex(nic), Magic: wire.HostQueryMagic}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, b.headTo(nic), b.ord)
	q.Put(buf[wire.HeadLen:], b.ord)
	b.sendFrame(nic, buf, wire.HeadLen+wire.HostQueryLen, b.sealControl(nic))
}

// QueryHostname asks the board at nic for its hostname with HOST_QUERY
// frames, one every ResendDelay, until a HOST_REPLY comes back or ctx is
// done (ErrTimeout). The name is also registered in BoardOptions.Names.
// It works with Open-MX peers, whose driver answers with the name
// omx_hostname shows.
func (b *Board) QueryHostname(ctx context.Context, nic transport.NICID) (string, error) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		b.mu.Lock()
		if b.closed {
			b.unlockKick()
			return "", ErrBoardClosed
		}
		if i, ok := b.peerIdx[nic]; ok && b.peers[i].hostname != "" {
			name := b.peers[i].hostname
			b.unlockKick()
			return name, nil
		}
		if b.hostWait == nil {
			b.hostWait = make(map[transport.NICID][]chan struct{})
		}
		ch := make(chan struct{})
		b.hostWait[nic] = append(b.hostWait[nic], ch)
		b.sendHostQuery(nic)
		b.unlock()
		t.Reset(b.opts.ResendDelay)
		select {
		case <-ch:
		case <-t.C:
		case <-b.quit:
			return "", ErrBoardClosed
		case <-ctx.Done():
			return "", fmt.Errorf("%w: no HOST_REPLY from %v: %w", ErrTimeout, nic, ctx.Err())
		}
	}
}

// handleRaw queues a RAW frame (peer index and type byte included) for
// RecvRaw.
func (b *Board) handleRaw(nic transport.NICID, f []byte) {
	if len(b.rawq) >= rawQueueMax {
		b.cnt[DropRawFull]++
		return
	}
	b.cnt[RecvRaw]++
	b.rawq = append(b.rawq, rawFrame{nic: nic, data: append([]byte(nil), f[wire.HeadLen+1:]...)})
	select {
	case b.rawWake <- struct{}{}:
	default:
	}
}

// SendRaw sends payload in a RAW frame to nic: the board does not look
// into it (Open-MX's raw interface, for discovery and mapping tools). It
// fails with ErrMessageTooLong when the frame does not fit the MTU.
func (b *Board) SendRaw(nic transport.NICID, payload []byte) error {
	if wire.HeadLen+1+len(payload) > b.mtu {
		return &OpError{Op: "send raw", Err: fmt.Errorf("%w: %d bytes do not fit a %d-byte frame", ErrMessageTooLong, len(payload), b.mtu)}
	}
	b.mu.Lock()
	defer b.unlock()
	if b.closed {
		return &OpError{Op: "send raw", Err: ErrBoardClosed}
	}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, b.headTo(nic), b.ord)
	buf[wire.HeadLen] = byte(wire.TypeRaw)
	n := copy(buf[wire.HeadLen+1:], payload)
	b.sendFrame(nic, buf, wire.HeadLen+1+n, false)
	return nil
}

// RecvRaw returns the oldest RAW frame received (its sender and the bytes
// after the type byte, Ethernet padding included), waiting until one
// arrives, ctx is done (ErrTimeout) or the board closes.
func (b *Board) RecvRaw(ctx context.Context) (transport.NICID, []byte, error) {
	for {
		b.mu.Lock()
		if len(b.rawq) > 0 {
			f := b.rawq[0]
			b.rawq[0] = rawFrame{}
			b.rawq = b.rawq[1:]
			if len(b.rawq) > 0 {
				select {
				case b.rawWake <- struct{}{}:
				default:
				}
			}
			b.unlockKick()
			return f.nic, f.data, nil
		}
		closed := b.closed
		b.unlockKick()
		if closed {
			return 0, nil, ErrBoardClosed
		}
		select {
		case <-b.rawWake:
		case <-b.quit:
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
	}
}
