package xdp

import (
	"time"

	"golang.org/x/sys/unix"
)

// A Socket's fast path: Frame, Receive and Release on the RX side, Alloc,
// Transmit and Flush on the TX side, and Wait. Each works on a batch of
// descriptors, allocates only to report an error, and kicks the kernel only
// when the ring says it needs it. Opening, statistics and Close are in
// socket.go.

// Frame returns the bytes of frame d: d.Len bytes at d.Addr in the UMEM.
// They stay valid while the caller owns d (until Release or Transmit).
func (s *Socket) Frame(d Desc) []byte {
	end := s.u.frameStart(d.Addr) + uint64(s.u.frameSize)
	return s.u.mem[d.Addr : d.Addr+uint64(d.Len) : end]
}

// Receive takes up to len(descs) received frames off the RX ring and
// returns how many. It does not wait and does not allocate. The frames
// belong to the caller until it gives them back with Release, which lets
// the kernel receive into them again. When nothing has arrived and frames
// wait on the TX ring (a kick found the kernel busy), it kicks again (see
// Flush).
func (s *Socket) Receive(descs []Desc) int {
	// Keep the fill ring topped up first: it is what the kernel receives
	// into, and an empty fill ring drops frames (counted in Stats). The
	// UMEM's lock is taken only when that has work to do (refillDue), so a
	// poll that finds nothing takes no lock and writes no line the
	// transmit side or another queue's socket uses.
	u := s.u
	if u.refillDue() {
		u.mu.Lock()
		u.refill(u.keep)
		u.mu.Unlock()
	}
	if u.fill.needWakeup() {
		// Zero-copy drivers may sleep until told the fill ring has frames.
		unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
	n := s.rx.avail(uint32(len(descs)))
	n = min(n, uint32(len(descs)))
	for i := range n {
		d := s.rx.at(i)
		descs[i] = Desc{Addr: d.Addr, Len: d.Len}
	}
	if n > 0 {
		s.rx.release(n)
	} else if s.txProd.Load() != s.txCons.Load() {
		// Idle: push out frames a busy kernel left on the TX ring, so
		// that a spinning receiver also keeps its transmissions moving.
		s.kickTx()
	}
	return int(n)
}

// Release gives received (or allocated and unsent) frames back, straight to
// the fill ring when it has room; frames beyond that wait at the bottom of
// the free list, where the fill ring takes them first, and senders last
// (see frameStack). Descriptors in the region frames (RegionMemory) are
// the caller's and are left out.
func (s *Socket) Release(descs []Desc) {
	if len(descs) == 0 {
		return
	}
	u := s.u
	u.mu.Lock()
	for _, d := range descs {
		if d.Addr < u.regionBase {
			u.free.pushCold(u.frameStart(d.Addr))
		}
	}
	u.refill(u.keep)
	u.mu.Unlock()
}

// Alloc fills descs with free frames to transmit from, each with Len set to
// the frame size, and returns how many it got: fewer than len(descs) when
// transmissions have not completed yet. It does not allocate.
func (s *Socket) Alloc(descs []Desc) int {
	u := s.u
	u.mu.Lock()
	u.reap()
	n := min(len(descs), u.free.len())
	for i := range n {
		descs[i] = Desc{Addr: u.free.top(i), Len: u.frameSize}
	}
	u.free.drop(n)
	u.mu.Unlock()
	return n
}

// Transmit puts frames on the TX ring, kicks the kernel when it asked to be
// (NEED_WAKEUP; always in copy mode), and returns how many descriptors it
// queued: fewer than len(descs) when the ring is full, and never part of a
// frame of several descriptors (Desc.More). Queued frames belong to the
// kernel until they complete, when Alloc hands them out again; the caller
// still owns descs[n:]. It does not allocate.
func (s *Socket) Transmit(descs []Desc) (int, error) {
	n, err := s.Post(descs)
	if s.closed.Load() {
		return n, err
	}
	if kerr := s.kickTx(); kerr != nil {
		return n, kerr
	}
	return n, err
}

// Post is Transmit without the kick: it puts frames on the TX ring, where
// they wait until Flush (or a Transmit, or an idle Receive) tells the
// kernel. A sender that holds a lock other goroutines wait for posts under
// it and flushes after releasing it, so nobody waits on the lock across
// the system call; frames posted by several senders leave in ring order.
func (s *Socket) Post(descs []Desc) (int, error) {
	if s.closed.Load() {
		return 0, &OpError{Op: "transmit", Iface: s.iface, Queue: s.queue, Err: ErrClosed}
	}
	n := min(s.tx.free(uint32(len(descs))), uint32(len(descs)))
	var bad error // why descs[n] cannot go, when that is it
	for i := range n {
		d := descs[i]
		if !s.fits(d) {
			n, bad = i, &OpError{Op: "transmit", Iface: s.iface, Queue: s.queue, Err: ErrTooBig}
			break
		}
		if d.More && s.u.regionBase == uint64(len(s.u.mem)) {
			n, bad = i, &OpError{Op: "transmit", Iface: s.iface, Queue: s.queue, Err: ErrConfig,
				Fix: "a frame of several descriptors (Desc.More) needs a socket opened with RegionFrames"}
			break
		}
	}
	for n > 0 && descs[n-1].More { // whole frames only: the bad
		n-- // descriptor's frame goes back too
	}
	for i := range n {
		d := descs[i]
		var opts uint32
		if d.More {
			opts = pktContd
		}
		*s.tx.slot(i) = xdpDesc{Addr: d.Addr, Len: d.Len, Options: opts}
	}
	if n > 0 {
		s.tx.produce(n)
		s.tx.commit()
	}
	if bad != nil {
		return int(n), bad
	}
	return int(n), nil
}

// fits reports whether d lies within one UMEM frame.
func (s *Socket) fits(d Desc) bool {
	fs := uint64(s.u.frameSize)
	return d.Addr < uint64(len(s.u.mem)) && d.Addr-s.u.frameStart(d.Addr)+uint64(d.Len) <= fs
}

// kickTx tells the kernel to process the TX ring when it asked for it
// (NEED_WAKEUP). In copy mode one sendto sends at most the kernel's TX
// budget (32 by default, see Options.TxBudget) and returns EAGAIN if more
// is left, so kickTx repeats while the ring drains, a bounded number of
// times. EAGAIN with no progress, EBUSY and ENOBUFS mean the kernel is busy
// or out of skbs: the descriptors stay on the ring and a later kick (Flush)
// sends them.
func (s *Socket) kickTx() error {
	for range 64 {
		if !s.tx.needWakeup() {
			return nil
		}
		before := s.tx.consumer.Load()
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0, unix.EAGAIN:
		case unix.EBUSY, unix.ENOBUFS:
			return nil
		default:
			return opErr("sendto (tx kick)", s.iface, s.queue, e)
		}
		// The producer index is ours and the consumer index only grows,
		// so an empty ring or a kick that moved nothing ends the loop.
		after := s.tx.consumer.Load()
		if after == s.tx.producer.Load() || after == before {
			return nil
		}
	}
	return nil
}

// Flush kicks the kernel if TX descriptors are still on the ring and
// returns how many are. In copy mode a kick that finds the kernel busy
// (a full device queue) leaves descriptors on the ring; a sender that
// stops sending calls Flush until it returns 0, or keeps calling Receive,
// which flushes when idle. Flush only reads the ring's shared indices, so
// it may run alongside the transmit side, and alongside Close (which waits
// for it; a Flush after Close reports ErrClosed).
func (s *Socket) Flush() (int, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return 0, &OpError{Op: "flush", Iface: s.iface, Queue: s.queue, Err: ErrClosed}
	}
	p := s.tx.pending()
	if p == 0 {
		return 0, nil
	}
	return int(p), s.kickTx()
}

// Wait blocks until the RX ring has a frame or timeout passes (a negative
// timeout waits for ever), and reports whether a frame is ready. Spinning
// callers do not need it.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	if s.rx.avail(1) > 0 {
		return true, nil
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, opErr("poll", s.iface, s.queue, err)
		}
		return s.rx.avail(1) > 0, nil
	}
}
