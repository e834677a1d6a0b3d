package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// The board's peers and how frames reach them: what a CONNECT taught about a
// peer board (peerInfo, indexed by the 2-byte peer index every frame
// carries), and the send path, one frame (sendFrame) or a batch (sendBatch),
// sealed with the CRC trailer where both sides agreed to it, with the
// fragment sizes that follow from the MTU.

// peerInfo is what the board knows about a peer board: learnt from the
// gomx connect extension, or nothing (an Open-MX peer, or one that has not
// connected yet).
type peerInfo struct {
	nic       transport.NICID
	learnt    bool   // an accepted CONNECT told what follows
	gomx      bool   // it sent the gomx connect extension
	crc       bool   // both sides want the trailer: frames to and from it carry one
	sack      bool   // both sides announced the selective ack (sack.go)
	pullStat  bool   // it announced ExtPullStatus: NOTIFYs say a failed pull (largefail.go)
	ask       bool   // both sides announced ExtAsk: a late peer is asked what it holds (ask.go)
	lean      bool   // both sides announced ExtRingLean (lean.go)
	lane      bool   // and ExtRingLane (lane.go)
	laneMed   bool   // and ExtRingLaneMedium
	replyPad  bool   // both announced ExtReplyPad: it pads the replies a PULL asks it to (placerecv.go)
	replyLane bool   // both announced ExtPlaceLane: it sends the replies a PULL asks for to the lane it names (placerecv.go)
	pullAlign bool   // both announced ExtPullAlign: it cuts a pull from its end when a PULL asks (placerecv.go)
	maxFrame  int    // its largest frame Data, when gomx
	yourIdx   uint16 // our index in its peer table: the head of frames to it
	hostname  string // from its HOST_REPLY
}

// peerIndex returns the board's index for nic in its peer table, adding it.
func (b *Board) peerIndex(nic transport.NICID) uint16 {
	if i, ok := b.peerIdx[nic]; ok {
		return i
	}
	if len(b.peers) >= wire.NoPeerIndex {
		return wire.NoPeerIndex
	}
	i := uint16(len(b.peers))
	b.peers = append(b.peers, peerInfo{nic: nic, yourIdx: wire.NoPeerIndex})
	b.peerIdx[nic] = i
	return i
}

// peer returns the board's record of nic, or nil. idx is the peer index the
// frame's head carries (our index of the sender), tried first.
func (b *Board) peer(nic transport.NICID, idx uint16) *peerInfo {
	if int(idx) < len(b.peers) && b.peers[idx].nic == nic {
		return &b.peers[idx]
	}
	if i, ok := b.peerIdx[nic]; ok {
		return &b.peers[i]
	}
	return nil
}

// sealControl reports whether a control frame (nack, host query or reply)
// to nic gets the trailer: when this board wants it and the peer is not
// known to be an Open-MX board. Such frames state their length, so a peer
// that does not check the trailer ignores it, and one that does finds it
// even before this board learnt that it does.
func (b *Board) sealControl(nic transport.NICID) bool {
	if !b.crc {
		return false
	}
	if i, ok := b.peerIdx[nic]; ok && b.peers[i].learnt {
		return b.peers[i].gomx
	}
	return true
}

// headTo returns the peer index to put in the head of frames to nic.
func (b *Board) headTo(nic transport.NICID) uint16 {
	if i, ok := b.peerIdx[nic]; ok {
		return b.peers[i].yourIdx
	}
	return wire.NoPeerIndex
}

// learnPeer records what a connect extension (or its absence) says about
// the board at nic. A board that connects is also looked for on the host
// path again (hostLookAgain).
func (b *Board) learnPeer(nic transport.NICID, h *wire.Connect) *peerInfo {
	b.hostLookAgain(nic)
	i := b.peerIndex(nic)
	if i == wire.NoPeerIndex {
		return nil
	}
	pi := &b.peers[i]
	pi.yourIdx = h.YourIndex
	if nic == b.nic {
		return pi
	}
	pi.learnt = true
	pi.gomx = h.HasExt && h.Ext.Version >= 1
	pi.crc = pi.gomx && b.crc && h.Ext.Flags&wire.ExtChecksum != 0
	pi.sack = pi.gomx && !b.opts.NoSack && h.Ext.Flags&wire.ExtSack != 0
	pi.pullStat = pi.gomx && h.Ext.Flags&wire.ExtPullStatus != 0
	pi.ask = pi.gomx && h.Ext.Flags&wire.ExtAsk != 0
	pi.lean = pi.gomx && h.Ext.Flags&wire.ExtRingLean != 0
	pi.lane = pi.lean && !b.opts.Local.NoLane && h.Ext.Flags&wire.ExtRingLane != 0
	pi.laneMed = pi.lane && h.Ext.Flags&wire.ExtRingLaneMedium != 0
	// A PULL's bytes 17-19 mean what these say only when both boards
	// announced them (wire.DecodePull): ours, then the peer's.
	our := b.connectExt(nic)
	pi.replyPad = pi.gomx && our.Flags&h.Ext.Flags&wire.ExtReplyPad != 0
	pi.replyLane = pi.gomx && our.More&h.Ext.More&wire.ExtPlaceLane != 0
	pi.pullAlign = pi.gomx && our.More&h.Ext.More&wire.ExtPullAlign != 0
	pi.maxFrame = b.omx
	if pi.gomx && int(h.Ext.MaxFrame) >= minMTU {
		pi.maxFrame = min(int(h.Ext.MaxFrame), b.pathMTU(nic))
	} else if pi.gomx {
		pi.maxFrame = b.pathMTU(nic)
	}
	return pi
}

// frameBuf returns the scratch buffer to build one outgoing frame in.
func (b *Board) frameBuf() []byte { return b.txbuf }

// sendFrame seals buf[:n] (peer index included) when crc and sends it to
// nic.
//
// Frames that go through shared-memory rings (a shm board's, or the host
// path's) are never sealed, whatever the peer agreed to, and a frame
// received from rings is never checked: the trailer guards against wires
// that corrupt, and a ring is memory that both processes write only
// through the transport's own records. That saves the CRC on both sides of
// every message between processes of one host. The decision is taken per
// frame by the transport it takes, so a peer reached both ways (rings for
// this one, UDP for the next, as when the host path is found later) gets
// each frame as its receiving side expects it.
func (b *Board) sendFrame(nic transport.NICID, buf []byte, n int, crc bool) {
	if nic == b.nic {
		if crc {
			n = wire.SealInPlace(buf, n)
		}
		x := append(b.getBuf(), buf[:n]...)
		b.selfq = append(b.selfq, x)
		return
	}
	tr := b.txFor(nic) // the transport, or shared memory (host.go)
	if crc && !isRings(tr) {
		n = wire.SealInPlace(buf, n)
	}
	// Only Peer and Data are ever set in tx1 (Data cleared after the
	// send): storing those two skips a whole Frame's stores and barriers.
	b.tx1[0].Peer, b.tx1[0].Data = nic, buf[:n]
	if _, err := b.send(tr, b.tx1[:]); err != nil {
		b.sendFailed(tr, nic, err)
	}
	b.tx1[0].Data = nil
}

// Sends kick after the lock.
//
// Over AF_XDP a send is two steps: the frame is copied into a UMEM frame
// and put on the TX ring, then a sendto tells the kernel, which sends it
// within that call (copy mode: several microseconds). A send made under
// the board's lock held it across the system call, and whoever wanted the
// lock meanwhile (the fine timer's goroutine, the receive loop, a waiter
// of another endpoint) queued on it and had to be woken by a futex when it
// was released. So a board whose transport can queue without the kick
// (transport.Kicker) queues every frame under mu, in sequence order, and
// the goroutine that releases mu kicks once after it (unlockKick, release),
// for all the frames queued under that hold of the lock. The ring keeps
// the order in which the frames were queued, which is the order the
// protocol made them, and each queue's board has its own transport and
// lock, so no lock is shared between queues. A kick that finds the ring
// empty (another goroutine's kick took its frames) makes no system call.

// send hands frames to tr: queued for the kick after mu when tr is the
// board's kicker (b.mu held).
func (b *Board) send(tr transport.Transport, frames []transport.Frame) (int, error) {
	b.sends++
	if b.kicker != nil && tr == b.tr {
		b.kickOwed = true
		return b.kicker.Queue(frames)
	}
	return tr.Send(frames)
}

// unlockKick releases mu, then kicks the frames queued under it. Every
// release of a board's mu goes through it (or release, which does the
// same), so no queued frame waits for a later unlock.
func (b *Board) unlockKick() {
	if !b.kickOwed {
		b.mu.Unlock()
		return
	}
	b.kickOwed = false
	b.mu.Unlock()
	_ = b.kicker.Kick() // a kick that fails leaves the frames to the next; losses are the protocol's
}

// isRings reports whether tr is shared-memory rings, whose frames carry
// no trailer (see sendFrame).
func isRings(tr transport.Transport) bool {
	_, ok := tr.(*shm.Transport)
	return ok
}

// batchBuf returns the i-th scratch buffer of an outgoing batch.
func (b *Board) batchBuf(i int) []byte {
	for len(b.txBufs) <= i {
		b.txBufs = append(b.txBufs, make([]byte, b.frameMax+wire.ChecksumLen))
	}
	return b.txBufs[i]
}

// sendBatch sends frames 0..n-1 built in batchBuf (lengths in lens),
// sealing each when crc.
func (b *Board) sendBatch(nic transport.NICID, lens []int, crc bool) {
	b.txFrames = b.txFrames[:0]
	// The transport, or shared memory (host.go), whose frames carry no
	// trailer (see sendFrame).
	tr := b.txFor(nic)
	crc = crc && (nic == b.nic || !isRings(tr))
	for i, n := range lens {
		buf := b.txBufs[i]
		if crc {
			n = wire.SealInPlace(buf, n)
		}
		if nic == b.nic {
			b.selfq = append(b.selfq, append(b.getBuf(), buf[:n]...))
			continue
		}
		b.txFrames = append(b.txFrames, transport.Frame{Peer: nic, Data: buf[:n]})
	}
	fr := b.txFrames
	for len(fr) > 0 {
		k, err := b.send(tr, fr)
		if err != nil {
			b.sendFailed(tr, nic, err)
			break
		}
		if k == 0 {
			break
		}
		fr = fr[k:]
	}
	for i := range b.txFrames {
		b.txFrames[i].Data = nil
	}
	b.txFrames = b.txFrames[:0]
}

// ethHeaderLen is the Ethernet header Open-MX counts in its MTU.
const ethHeaderLen = 14

// fragStride is the medium fragment stride for frames of mtu bytes of Data,
// by Open-MX's rule (omx_wire.h OMX_MEDIUM_FRAG_LENGTH_MAX): the whole
// payload room while it is at most 4 KiB, else 8 KiB if that fits, else
// 4 KiB. A trailer takes its 4 bytes from the room first.
func fragStride(mtu int, crc bool) int {
	n := mtu - wire.HeadLen - wire.MediumLen
	if crc {
		n -= wire.ChecksumLen
	}
	switch {
	case n <= 4096:
		return n
	case n >= 8192:
		return 8192
	}
	return 4096
}

// replyLen is the PULL_REPLY payload length for frames of mtu bytes of
// Data (Open-MX: OMX_PULL_REPLY_LENGTH_MAX, the whole room).
func replyLen(mtu int, crc bool) int {
	n := mtu - wire.HeadLen - wire.PullReplyLen
	if crc {
		n -= wire.ChecksumLen
	}
	return min(n, 65535)
}
