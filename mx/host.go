package mx

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// The host path: with LocalOptions.Shm a board also opens a shared-memory
// transport named after its own NIC id in the per-user endpoint directory,
// and sends every frame for a peer whose board did the same (a process of
// this user on this host) through shared-memory rings instead of its
// transport. Frames from such peers arrive on the rings with the peer's
// ordinary NIC id, so partners, sessions and the protocol are the same; the
// board's second receive loop (hostProgress) feeds them to the same
// handler. Which path a peer takes is decided per frame from a cache
// (a peer that is not on the host is looked for again after hostRecheck),
// and the protocol's sequence numbers absorb the switch.
//
// It is on by default only for transports that report host-unique NIC ids
// (transport.HostUnique): boards of in-process loopback networks in
// different processes reuse ids and must not reach each other. The
// directory is one per network namespace, since a UDP address names
// different boards in different namespaces.

// hostRecheck is how long a peer found not to be on this host is sent to
// through the transport before the directory is looked at again.
const hostRecheck = time.Second

type hostPath struct {
	tr     *shm.Transport
	src    *rxSource                     // the rings as a receive source (rxsource.go)
	reach  map[transport.NICID]hostReach // guarded by b.mu
	quit   chan struct{}
	exited chan struct{}
}

type hostReach struct {
	ok      bool
	checked int64
}

// openHost opens the host path when asked for (from NewBoard, before the
// progress goroutine starts). A failure leaves the board without one and is
// returned by HostPathErr. NewBoard starts the path's goroutine
// (hostProgress) only once the whole board is set up: a frame may wait on
// the rings already (a peer's connect to an endpoint number this process
// had before), and answering it uses the board's send buffer and state.
func (b *Board) openHost() {
	o := b.opts.Local
	if o.NoShm || (o.Off && !o.Shm) {
		return // Off keeps frames on the transport unless Shm asks for the rings
	}
	if _, ok := b.tr.(*shm.Transport); ok {
		return // already a shared-memory board
	}
	if hu, ok := b.tr.(transport.HostUnique); !o.Shm && (!ok || !hu.HostUniqueNIC()) {
		return
	}
	dir, err := hostDir(o.ShmDir)
	if err != nil {
		b.hostErr = err
		return
	}
	tr, err := shm.Open(shm.Options{NIC: b.nic, Dir: dir, LaneIdle: o.LaneIdle})
	if err != nil {
		b.hostErr = err
		return
	}
	b.host = &hostPath{tr: tr, src: newRxSource(tr), reach: make(map[transport.NICID]hostReach),
		quit: make(chan struct{}), exited: make(chan struct{})}
	b.reachGen++
	b.allSrcs = append(b.allSrcs, b.host.src)
	b.frameMax = max(b.frameMax, min(tr.MTU(), 65535))
}

// hostDir is the endpoint directory of the host path: a directory per
// network namespace inside the user's endpoint directory, since the same
// UDP address names different boards in different namespaces.
func hostDir(base string) (string, error) {
	if base == "" {
		base = shm.DefaultDir()
	}
	if err := shm.CheckDir(base); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return "", fmt.Errorf("mx: host path: network namespace: %w", err)
	}
	return filepath.Join(base, "net-"+strconv.FormatUint(st.Ino, 10)), nil
}

// HostPathErr reports why a board asked for a host path (LocalOptions.Shm)
// has none, or nil.
func (b *Board) HostPathErr() error { return b.hostErr }

// HostPath reports whether frames to nic go through shared memory.
func (b *Board) HostPath(nic transport.NICID) bool {
	b.mu.Lock()
	defer b.unlockKick()
	return b.txFor(nic) != b.tr
}

// txFor returns the transport for frames to nic (b.mu held).
func (b *Board) txFor(nic transport.NICID) transport.Transport {
	h := b.host
	if h == nil || nic == b.nic {
		return b.tr
	}
	r, ok := h.reach[nic]
	if !ok || (!r.ok && b.now()-r.checked > int64(hostRecheck)) {
		r = hostReach{ok: h.tr.Reaches(nic), checked: b.now()}
		h.reach[nic] = r
		b.reachGen++
	}
	if r.ok {
		return h.tr
	}
	return b.tr
}

// hostLookAgain forgets that nic was found off the host path (b.mu
// held): a board that just asked for or answered a connect may have opened
// its host path since it was last looked for (a server that started after
// a client's first attempt), and the next frame to it looks at the
// directory again instead of taking the transport until hostRecheck
// passes.
func (b *Board) hostLookAgain(nic transport.NICID) {
	if h := b.host; h != nil {
		if r, ok := h.reach[nic]; ok && !r.ok {
			delete(h.reach, nic)
			b.reachGen++
		}
	}
}

// rings returns the shared-memory transport that frames to p take, or nil
// (b.mu held): b.shmTo(p.nic), which on the host path looks the peer up in
// a map, remembered until the host path's view of any peer changes. Every
// frame that does not take the rings goes through txFor, which looks the
// peer up again when it is due, so a peer found later is not missed.
func (p *partner) rings() *shm.Transport {
	if p.ringsGen == p.ep.b.reachGen {
		return p.ringsTr // inlined: asked several times per message
	}
	return p.ringsAgain()
}

// ringsAgain is rings for a partner that has not asked since the board's
// reach last changed (reachGen; b.mu held).
func (p *partner) ringsAgain() *shm.Transport {
	b := p.ep.b
	if b.host == nil {
		p.ringsTr = b.rings
	} else {
		p.ringsTr = b.shmTo(p.nic) // may move reachGen
	}
	p.ringsGen = b.reachGen
	return p.ringsTr
}

// pathMTU is the largest frame Data on the path to nic (b.mu held): the
// rings' MTU for a peer on the host path, else the transport's. A partner's
// frame sizes are fixed at connect from it (both sides announce theirs and
// take the smaller), so a peer of this host exchanges medium fragments and
// pull replies as large as the rings allow, not the transport's small
// ones. A peer that leaves the rings for the transport afterwards (it
// closed its host path) is reached again after a new Connect.
func (b *Board) pathMTU(nic transport.NICID) int {
	if h := b.host; h != nil && nic != b.nic && b.txFor(nic) == transport.Transport(h.tr) {
		return min(h.tr.MTU(), 65535)
	}
	return b.mtu
}

// rtoMin is the floor of p's retransmission timeouts (b.mu held): RTOMin,
// or on the host path and between shm boards the rings' FullWait (a second
// by default). Rings lose a frame only when its receiver made no progress
// for that long (it is stuck or gone), so a resend, a tail-loss probe or a
// pull re-request sooner is always spurious; on a loaded machine, where a
// descheduled peer or a receiver busy copying a large message easily
// answers later than RTOMin, each one cost frames and handling on both
// sides for nothing. A peer that leaves the rings for the transport gets
// the transport's timeouts back with the path.
func (p *partner) rtoMin() int64 {
	b := p.ep.b
	if tr := p.rings(); tr != nil {
		return max(int64(b.opts.RTOMin), int64(tr.FullWait()))
	}
	return int64(b.opts.RTOMin)
}

// sendFailed notes that a frame to nic could not be sent on tr (err): a
// peer that left the host path is sent to through the transport for a
// while, and one the rings cannot reach for lack of descriptors fails the
// connects to it (fdlimit.go).
func (b *Board) sendFailed(tr transport.Transport, nic transport.NICID, err error) {
	b.cnt[SendErrors]++
	if b.isFDLimit(tr, err) {
		b.noteFDLimit(nic, err)
	}
	if h := b.host; h != nil && tr == transport.Transport(h.tr) {
		h.reach[nic] = hostReach{ok: false, checked: b.now()}
		b.reachGen++
	}
}

// hostProgress receives from the rings until the board closes, stepping
// aside while waiters poll them (poll.go).
func (b *Board) hostProgress() {
	h := b.host
	s := h.src
	defer close(h.exited)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	spin := loopSpin{max: h.tr.Spin()}
	spin.cur = spin.max
	for {
		select {
		case <-h.quit:
			return
		default:
		}
		if away, d := b.stayAway(s); away {
			timer.Reset(max(d, time.Microsecond))
			select {
			case <-h.quit:
				return
			case <-s.wake:
			case <-timer.C:
			}
			// The timers are the main loop's, on its own schedule: the
			// ack deadlines of the messages waiters handled get their
			// time here, as often as this loop looks (stampAcks). The
			// single copies a Test's frames queued run here
			// (testSource; unlock runs them, without the lock).
			b.mu.Lock()
			b.stampAcks(b.setNow())
			b.unlock()
			continue
		}
		s.mu.Lock()
		var start time.Time
		if spin.max > 0 {
			start = time.Now() // only a loop that spins tunes its spin
		}
		n, err := h.tr.Recv(s.rx, -1)
		woke := b.woke.Load() // what this batch wakes, not what others did meanwhile
		if n > 0 && spin.max > 0 {
			if d, changed := spin.next(time.Since(start)); changed {
				h.tr.SetSpin(d)
			}
		}
		if n > 0 {
			b.mu.Lock()
			b.handleBatchLocked(s, s.rx[:n])
			if len(b.toStamp) > 0 || b.ackHeld != nil {
				b.stampAcks(b.setNow()) // this loop keeps no timers (ack.go)
			}
			b.release(false)
		}
		if n < len(s.rx) {
			s.drained() // verdict.go
		}
		s.mu.Unlock()
		b.runCopies() // cma.go: without the rings' lock
		b.yieldToWoken(woke)
		if errors.Is(err, transport.ErrClosed) {
			return
		}
	}
}

// loopSpin adapts how long the host path's receive loop polls the rings
// before it sleeps (shm.Transport.SetSpin) to how soon its frames come.
// A spin pays when the next frame comes within it: a ping-pong's answer,
// the next frame of a burst. When frames come far apart (an application
// that computes between large messages an engine moves), every spin ends in
// the sleep it was to avoid, and its CPU time is taken from the
// application: each of an overlap run's messages cost rank 0 some 20 µs of
// spinning. So a wait whose frames came within twice the full spin (a spin
// would have found them, or nearly) doubles the spin, up to max; a longer
// one halves it, down to none. A Recv that found frames at once says
// nothing about the spin and leaves it.
type loopSpin struct {
	cur, max time.Duration
}

// next takes how long a Recv took to return frames and returns the spin
// for the next one, and whether it changed.
func (s *loopSpin) next(took time.Duration) (time.Duration, bool) {
	old := s.cur
	switch {
	case took < time.Microsecond: // found at the first looks
	case took <= 2*s.max:
		s.cur = min(s.max, 2*s.cur+time.Microsecond)
	default:
		s.cur /= 2
		if s.cur < time.Microsecond {
			s.cur = 0
		}
	}
	return s.cur, s.cur != old
}

// closeHost stops the receive loop, then closes the shared-memory transport
// once no waiter is handling its frames (they point into the rings).
func (b *Board) closeHost() {
	if h := b.host; h != nil {
		close(h.quit)
		h.tr.Wake()
		<-h.exited
		h.src.mu.Lock()
		h.tr.Close()
		h.src.mu.Unlock()
	}
}
