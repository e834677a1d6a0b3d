package xdp

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// The receiving half of the AF_XDP Transport: Recv polls every queue's socket
// and sleeps in poll(2) when they are empty, decode keeps the frames meant for
// this transport and learns the sender's MAC address, and Hold and Release
// lend a received UMEM frame past the next Recv.

// Recv returns received frames; see transport.Transport. Data points into
// the UMEM and stays valid until the next Recv or Close. A Recv that waits
// polls the RX rings for TransportOptions.Spin, then sleeps in ppoll(2) on
// the sockets and the transport's eventfd, which Wake and Close write.
func (t *Transport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	if t.closed.Load() {
		return 0, errClosed
	}
	if err := t.queuesOpen(); err != nil {
		return 0, err
	}
	if t.queue != nil {
		t.recycle()
	}
	for i, s := range t.socks {
		h := t.held[i]
		if t.lentNow {
			// Leave out the frames lent to holders (marked by Hold).
			k := 0
			for _, d := range h {
				if d.Addr != lentMark {
					h[k] = d
					k++
				}
			}
			h = h[:k]
		}
		s.Release(h)
		t.held[i] = t.held[i][:0]
	}
	t.lentNow = false
	t.lends.Recv()
	if len(frames) == 0 {
		return 0, nil
	}
	spin := t.opts.Spin
	if spin == 0 {
		spin = 20 * time.Microsecond
	}
	var start time.Time
	for i := 0; ; i++ {
		if n := t.poll(frames); n > 0 {
			return n, nil
		}
		if timeout == 0 {
			return 0, nil
		}
		if t.wakeAsked.Load() && t.wakeAsked.Swap(false) {
			return 0, nil // Wake: another goroutine takes Recv over
		}
		if i%spinClockEvery != 0 {
			continue // see spinClockEvery
		}
		var waited time.Duration
		if start.IsZero() {
			start = time.Now()
		} else {
			waited = time.Since(start)
		}
		if timeout > 0 && waited >= timeout {
			return 0, nil
		}
		if waited < spin {
			continue
		}
		var ts *unix.Timespec
		if timeout > 0 {
			v := unix.NsecToTimespec(int64(timeout - waited))
			ts = &v
		}
		// asleep before the last look at wakeAsked, as Wake stores
		// wakeAsked before it looks at asleep: either this Recv sees
		// the request, or Wake sees the sleep and writes the eventfd.
		t.asleep.Store(true)
		if t.wakeAsked.Load() {
			t.asleep.Store(false)
			continue // returns at the check above
		}
		_, err := unix.Ppoll(t.fds, ts, nil)
		t.asleep.Store(false)
		if err != nil && err != unix.EINTR {
			return 0, opErr("ppoll", t.opts.Interface, -1, err)
		}
		t.drainWake()
		if t.closed.Load() {
			return 0, errClosed
		}
		if t.queue != nil {
			t.queue.drainWake()
		}
		i = -1 // look at the clock after the next poll
	}
}

// Wake implements [transport.Waker]: a Recv that waits returns 0, nil
// soon (the next that would wait, if none does), so that another goroutine
// can take Recv over. It makes a system call only when that Recv sleeps
// in ppoll; a Recv that spins sees it at its next poll. It may race Close:
// once Close has closed the eventfd, Wake writes nothing.
func (t *Transport) Wake() {
	t.wakeAsked.Store(true)
	if t.asleep.Load() {
		t.wakeMu.Lock()
		if !t.wakeShut {
			var one [8]byte
			one[0] = 1
			unix.Write(t.wake, one[:])
		}
		t.wakeMu.Unlock()
	}
}

// SpinCheap implements [transport.Spinner]: a look at the RX rings reads
// memory the kernel writes and makes no system call when nothing came
// (only a zero-copy driver that asks for a wake-up of its fill ring, or a
// TX ring the kernel left frames on, makes the look kick the kernel).
func (t *Transport) SpinCheap() bool { return true }

// drainWake reads the count Wake (or Close) left in the eventfd, so that
// the next ppoll sleeps. Close's write is seen anyway: it sets closed
// before it writes, and Recv looks at closed after this read.
func (t *Transport) drainWake() {
	for _, p := range t.fds {
		if p.Fd == int32(t.wake) && p.Revents&unix.POLLIN != 0 {
			var c [8]byte
			_, _ = unix.Read(t.wake, c[:])
		}
	}
}

// spinClockEvery is how many empty polls Recv's spin makes per reading
// of the clock: a poll that finds nothing costs about as much as a
// reading (tens of nanoseconds on a virtual machine's clock source), so
// reading it at every poll spent a third of the spin on the clock. The
// spin and a timeout overrun by at most that many polls, well under a
// microsecond. A Recv that wakes from ppoll reads it at once.
const spinClockEvery = 16

// poll takes what the sockets have received, up to len(frames), starting
// with a different socket each time, and for a queue transport what other
// queues handed over. rxMu is held.
func (t *Transport) poll(frames []transport.Frame) int {
	got := 0
	if t.queue != nil && len(t.queue.inbox) > 0 {
		got = t.fromInbox(frames, got)
	}
	// i runs over the sockets from next, wrapping: a compare, where a
	// modulo was a division on every poll of a spinning caller.
	for k, i := 0, t.next; k < len(t.socks); k, i = k+1, i+1 {
		if got == len(frames) {
			break
		}
		if i >= len(t.socks) {
			i = 0
		}
		s := t.socks[i]
		room := min(len(frames)-got, len(t.rxDesc), cap(t.held[i])-len(t.held[i]))
		n := s.Receive(t.rxDesc[:room])
		for _, d := range t.rxDesc[:n] {
			t.held[i] = append(t.held[i], d)
			switch f, v := t.decode(s.Frame(d)); v {
			case frameOurs:
				f.Ref = t.lends.RecvRef(got)
				frames[got] = f
				t.rxAt = append(t.rxAt[:got], lentFrame{sock: i, pos: len(t.held[i]) - 1})
				got++
			case frameNotOurs:
				t.rxBad.Add(1)
			}
		}
	}
	if t.next++; t.next >= len(t.socks) {
		t.next = 0
	}
	if got > 0 {
		// Counted only when there is something to count, with a
		// plain add (rxMu serializes the writers: internal/owned):
		// a spinning caller makes thousands of empty polls.
		t.rxFrames.Add(uint64(got))
		t.lends.Got(got)
	}
	return got
}

// lentFrame is a UMEM frame lent to a holder: its socket and descriptor
// (pos: its index in held during the Recv that returned it). Socket -1
// marks a frame another queue handed over, which Hold copies.
type lentFrame struct {
	sock, pos int
	d         Desc
}

// lentMark marks, in held, a frame lent to a holder.
const lentMark = ^uint64(0)

// Hold implements [transport.Transport.Hold]: the UMEM frame is lent to the
// caller and goes back to the fill ring at Release instead of the next
// Recv; HoldInfo.DMA is the UMEM. At most a quarter of the UMEM's frames
// are lent at once (the rest keep the fill ring supplied); past that, and
// for a frame another queue handed over, Hold copies Data.
func (t *Transport) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	k, err := t.lends.Index(f.Ref)
	if err == nil && t.closed.Load() {
		err = errClosed
	}
	if err != nil {
		return transport.HoldInfo{}, fmt.Errorf("xdp: hold: %w", err)
	}
	at := t.rxAt[k]
	if at.sock >= 0 && t.held[at.sock][at.pos].Addr != lentMark {
		h := t.held[at.sock]
		at.d = h[at.pos]
		if t.lends.Lend(f, at) {
			h[at.pos].Addr = lentMark
			t.lentNow = true
			return transport.HoldInfo{DMA: t.socks[at.sock].UMEM()}, nil
		}
	}
	t.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

// Release implements [transport.Transport.Release]: a lent UMEM frame goes
// back to the fill ring. It must not run concurrently with Close (which
// unmaps the rings): release held frames first, as mx does.
func (t *Transport) Release(f *transport.Frame) {
	if at, ok := t.lends.Return(f); ok {
		t.socks[at.sock].Release([]Desc{at.d})
	}
}

// What decode makes of a received frame.
const (
	frameNotOurs = iota // not a frame for this transport
	frameOurs           // ours: the frame decode returns
	frameHanded         // another queue's, handed over (or dropped) to it
)

// decode turns a received frame into a transport frame, or says what else
// it is.
func (t *Transport) decode(b []byte) (transport.Frame, int) {
	if t.udp {
		h, data, err := ParseUDP(b)
		if err != nil || h.DstIP != t.ip {
			return transport.Frame{}, frameNotOurs
		}
		if h.DstPort != t.port {
			if t.queue != nil && t.handOver(h, data) {
				return transport.Frame{}, frameHanded
			}
			return transport.Frame{}, frameNotOurs
		}
		id, err := transport.UDPNICID(netip.AddrPortFrom(netip.AddrFrom4(h.SrcIP), h.SrcPort))
		if err != nil {
			return transport.Frame{}, frameNotOurs
		}
		t.learn(h.SrcIP, h.Eth.Src)
		return transport.Frame{Peer: id, Data: data}, frameOurs
	}
	h, data, err := ParseEthHeader(b)
	if err != nil || h.EtherType != EtherTypeOpenMX || (h.Dst != t.mac && h.Dst[0]&1 == 0) {
		return transport.Frame{}, frameNotOurs
	}
	return transport.Frame{Peer: transport.MACNICID(h.Src), Data: data}, frameOurs
}

// learn records the MAC address a UDP peer sends from, so that replies
// need no neighbour lookup. It only takes the lock on a new or changed
// entry, which allocates once per peer.
func (t *Transport) learn(ip [4]byte, mac [6]byte) {
	if t.txMu.TryLock() {
		if t.neigh[ip] != mac {
			t.neigh[ip] = mac
		}
		t.txMu.Unlock()
	}
}
