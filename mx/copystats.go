package mx

import "sync/atomic"

// Copy accounting: how many payload bytes the CPU copied to move a
// message, counted where each copy is made, so a figure such as "bytes
// copied per payload byte" is measured rather than asserted.
//
// On the sending side a message's payload may be copied three times: mx
// gathers the application's segments into its own buffer (an eager send's
// message buffer, a pull reply's frame), mx builds the frame from that
// buffer, and the transport copies the frame into its packet buffer, its
// socket or its ring. A pull reply sent in place (zerocopy.go) is none of
// these: the NIC reads the payload from the application's pages, and mx
// counts it as sent in place. On the receiving side the CPU copies each
// payload byte into the posted receive buffer, or into an unexpected
// buffer first and into the receive buffer once it is posted; a copy
// engine's copies (pulloffload.go) are counted apart, since the CPU does
// not make them.
//
// Every copy of a resent frame is counted again: the figure is what the
// run cost, not what a lossless wire would. Messages between endpoints of
// this process (local.go) and through a shared pool or process_vm_readv
// (shmpool.go, cma.go) are outside the count: each is one copy, made by
// the receiver or the kernel.

// CopyStats is a snapshot of an endpoint's copy accounting. Divide a copy
// count by the payload bytes of the same side (SentBytes, RecvBytes) for
// the bytes copied per payload byte.
type CopyStats struct {
	// SentBytes is the payload of the messages the endpoint sent over a
	// transport (each counted once, however often its frames were sent).
	SentBytes uint64
	// SendGather is the payload bytes mx copied out of the application's
	// segments into its own buffers and frames.
	SendGather uint64
	// SendTransport is the payload bytes handed to a transport in frames
	// it copies (into a packet buffer, a socket, a ring).
	SendTransport uint64
	// SendInPlace is the payload bytes sent in place: read by the NIC from
	// the application's memory, never by the CPU.
	SendInPlace uint64
	// RecvBytes is the payload the endpoint's completed receives took
	// from a transport.
	RecvBytes uint64
	// RecvScatter is the payload bytes the CPU copied into receive
	// buffers, and into unexpected buffers before that.
	RecvScatter uint64
	// RecvEngine is the payload bytes a copy engine moved into receive
	// buffers.
	RecvEngine uint64
	// RecvPlaced is the payload bytes the NIC wrote straight into
	// receive buffers (placerecv.go), never copied by the CPU.
	RecvPlaced uint64
}

// SendCopied is the payload bytes the CPU copied on the sending side.
func (c CopyStats) SendCopied() uint64 { return c.SendGather + c.SendTransport }

// SendPerByte is the CPU bytes copied per payload byte sent (0 when
// nothing was sent).
func (c CopyStats) SendPerByte() float64 {
	if c.SentBytes == 0 {
		return 0
	}
	return float64(c.SendCopied()) / float64(c.SentBytes)
}

// RecvPerByte is the CPU bytes copied per payload byte received (0 when
// nothing was received).
func (c CopyStats) RecvPerByte() float64 {
	if c.RecvBytes == 0 {
		return 0
	}
	return float64(c.RecvScatter) / float64(c.RecvBytes)
}

// Sub returns what was counted between the snapshot o and c.
func (c CopyStats) Sub(o CopyStats) CopyStats {
	return CopyStats{
		SentBytes: c.SentBytes - o.SentBytes, SendGather: c.SendGather - o.SendGather,
		SendTransport: c.SendTransport - o.SendTransport, SendInPlace: c.SendInPlace - o.SendInPlace,
		RecvBytes: c.RecvBytes - o.RecvBytes, RecvScatter: c.RecvScatter - o.RecvScatter,
		RecvEngine: c.RecvEngine - o.RecvEngine, RecvPlaced: c.RecvPlaced - o.RecvPlaced,
	}
}

// copyCounts is an endpoint's copy accounting; any goroutine may add to
// the atomic counts and read them. The paths every small message takes
// (an eager send, its frame, its delivery to a posted receive) add to
// locked instead, with the board's lock held: an atomic addition is a
// locked instruction, tens of nanoseconds each on a virtual machine, and
// a small message made six of them. CopyStats adds the two together.
type copyCounts struct {
	sent, gather, transport, inPlace atomic.Uint64
	recv, scatter, engine, placed    atomic.Uint64
	locked                           lockedCopyCounts
}

// lockedCopyCounts are copy counts that only the holder of the board's
// lock adds to and reads.
type lockedCopyCounts struct {
	sent, gather, transport, recv, scatter uint64
}

// CopyStats returns the endpoint's copy accounting.
func (e *Endpoint) CopyStats() CopyStats {
	b := e.b
	b.mu.Lock()
	l := e.copies.locked
	b.unlockKick()
	c := &e.copies
	return CopyStats{
		SentBytes: c.sent.Load() + l.sent, SendGather: c.gather.Load() + l.gather,
		SendTransport: c.transport.Load() + l.transport, SendInPlace: c.inPlace.Load(),
		RecvBytes: c.recv.Load() + l.recv, RecvScatter: c.scatter.Load() + l.scatter,
		RecvEngine: c.engine.Load(), RecvPlaced: c.placed.Load(),
	}
}

// framed counts n payload bytes that mx copied into a frame and handed to
// the transport, which copies them again.
func (c *copyCounts) framed(n int) {
	c.gather.Add(uint64(n))
	c.transport.Add(uint64(n))
}

// framedLocked is framed by the holder of the board's lock.
func (c *copyCounts) framedLocked(n int) {
	c.locked.gather += uint64(n)
	c.locked.transport += uint64(n)
}
