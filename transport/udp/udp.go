// Package udp is the kernel UDP transport: each frame's Data is the payload
// of one IPv4 UDP datagram, and a board's NIC id is its IPv4 address and UDP
// port packed as ip<<16 | port (see [transport.UDPNICID]). It needs no
// privileges, crosses routed networks, and is the transport the message layer
// falls back to when nothing faster is configured.
//
// # Batches and syscalls
//
// Send hands a whole batch to the kernel with one sendmmsg(2) call, and Recv
// takes up to a batch with one recvmmsg(2) call, both on a non-blocking
// socket. The message headers, iovecs, socket addresses and receive buffers
// are allocated once by [Listen] and reused, so neither call allocates in
// steady state. Received Data points into the transport's receive buffers and
// stays valid until the next Recv, as the [transport] contract says.
//
// # Waiting
//
// The socket is registered with the Go runtime's network poller (it is a
// [net.UDPConn] underneath). Recv with timeout 0 makes one recvmmsg call
// with MSG_DONTWAIT; a Recv that must wait parks its goroutine in the poller
// with a read deadline for a bounded timeout, and none for a negative one.
// Close closes the socket, which wakes a parked Recv (and a Send waiting for
// socket buffer space) with [transport.ErrClosed]; no goroutine is left
// blocked in a system call. Send waits, the same way, only when the socket's
// send buffer is full.
//
// # Errors that are not errors
//
// Datagrams are lost when a socket buffer overflows, and a datagram larger
// than the MTU is dropped and counted (truncated), never delivered cut short.
// A peer that has gone answers with ICMP port-unreachable; Linux does not
// report that on an unconnected socket like this one, but should an
// ECONNREFUSED surface anyway it is counted (refused) and the call carries
// on. Any other per-datagram send failure (no route, a firewall) drops that
// frame and counts it (send_errors): to the message layer above a frame the
// kernel refused is a frame the wire lost. Send returns an error only for a
// frame it cannot even try: one over the MTU ([transport.ErrTooBig]), one
// whose NIC id is not an IPv4 address and non-zero port
// ([transport.ErrUnreachable]), or a closed transport ([transport.ErrClosed]).
package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// DefaultMTU is the MTU when Options.MTU is 0: a 1500-byte Ethernet path MTU
// minus the 20-byte IPv4 header and the 8-byte UDP header, so that no
// datagram is fragmented on a standard Ethernet path.
const DefaultMTU = 1500 - 20 - 8

// MaxMTU is the largest UDP payload IPv4 can carry.
const MaxMTU = 65535 - 20 - 8

// DefaultBuffer is the socket buffer size requested when
// Options.ReadBuffer or Options.WriteBuffer is 0.
const DefaultBuffer = 4 << 20

// DefaultBatch is the number of frames one syscall moves when
// Options.Batch is 0.
const DefaultBatch = 64

// maxBatch is the kernel's limit on messages per sendmmsg/recvmmsg
// (UIO_MAXIOV).
const maxBatch = 1024

// Options configures [Listen]. The zero value gives DefaultMTU, 4 MiB socket
// buffers, batches of DefaultBatch and no busy polling.
type Options struct {
	// MTU is the largest Data one frame may carry, 1..MaxMTU; 0 means
	// DefaultMTU. Larger values make the kernel fragment datagrams that do
	// not fit the path MTU, which works on loopback and on jumbo-frame
	// links but loses the whole datagram when any fragment is lost.
	MTU int
	// ReadBuffer and WriteBuffer are the socket buffer sizes requested
	// (SO_RCVBUF, SO_SNDBUF); 0 means DefaultBuffer. With CAP_NET_ADMIN
	// the request bypasses net.core.rmem_max and wmem_max (SO_RCVBUFFORCE,
	// SO_SNDBUFFORCE); without it the kernel clamps to them silently.
	// [Transport.SocketBuffers] tells what the kernel granted.
	ReadBuffer, WriteBuffer int
	// BusyPoll, if positive, sets SO_BUSY_POLL: the kernel busy-polls the
	// device queue for up to this long (microsecond resolution) before a
	// receive finds the socket empty. Raising it above the current value
	// needs CAP_NET_ADMIN.
	BusyPoll time.Duration
	// Batch is the largest number of frames one sendmmsg or recvmmsg call
	// moves, 1..1024; 0 means DefaultBatch. Recv returns at most Batch
	// frames; Send splits larger batches. The receive buffers take
	// Batch*MTU bytes.
	Batch int
}

// Transport is a UDP socket carrying frames. It implements
// [transport.Transport] and [transport.Stats]. Send may be called from
// several goroutines at once (they take turns: one sendmmsg at a time);
// Recv by one goroutine at a time.
type Transport struct {
	conn    *net.UDPConn
	raw     syscall.RawConn
	addr    transport.NICID
	mtu     int
	batch   int
	rcvbuf  int
	sndbuf  int
	closed  atomic.Bool
	errDone error // ErrClosed wrapped with the address, built once

	sendMu sync.Mutex
	tx     *mmsgBatch
	txOff  int // next header to send (sendMu)
	txEnd  int
	txFn   func(fd uintptr) bool

	// Receive side: one goroutine at a time.
	rx         *mmsgBatch
	rxBufs     [][]byte
	rxWant     int
	rxGot      int
	rxErrno    unix.Errno
	rxWait     bool
	rxTimedOut bool // the last recvBatch hit the read deadline
	rxFn       func(fd uintptr) bool
	deadlineOn bool
	fd         int         // the socket, for ArmSleep
	wakeReq    atomic.Bool // Wake asked a waiting Recv to return
	lends      *transport.Lends[[]byte]
	spareMu    sync.Mutex
	spare      [][]byte // released receive buffers, for the next Hold

	sent, received, sendErrors, refused, truncated, sendWaits atomic.Uint64
}

// Listen opens a UDP socket bound to addr ("127.0.0.1:0", "0.0.0.0:40000",
// ...), which must be an IPv4 address and port. If addr is the unspecified
// address 0.0.0.0, the socket receives on every interface but Addr reports
// the first non-loopback IPv4 address of the host (127.0.0.1 if there is
// none), since a NIC id names one address: on a multi-homed host, bind the
// address peers should use.
func Listen(addr string, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, fmt.Errorf("udp: listen %s: %w", addr, err)
	}
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("udp: listen %s: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp4", ua)
	if err != nil {
		return nil, fmt.Errorf("udp: listen %s: %w", addr, err)
	}
	t, err := setup(conn, opts)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: listen %s: %w", addr, err)
	}
	return t, nil
}

// fill applies defaults and validates o.
func (o *Options) fill() error {
	switch {
	case o.MTU == 0:
		o.MTU = DefaultMTU
	case o.MTU < 1 || o.MTU > MaxMTU:
		return fmt.Errorf("MTU %d outside 1..%d", o.MTU, MaxMTU)
	}
	switch {
	case o.Batch == 0:
		o.Batch = DefaultBatch
	case o.Batch < 1 || o.Batch > maxBatch:
		return fmt.Errorf("batch %d outside 1..%d", o.Batch, maxBatch)
	}
	if o.ReadBuffer < 0 || o.WriteBuffer < 0 || o.BusyPoll < 0 {
		return fmt.Errorf("negative buffer size or busy-poll time")
	}
	if o.ReadBuffer == 0 {
		o.ReadBuffer = DefaultBuffer
	}
	if o.WriteBuffer == 0 {
		o.WriteBuffer = DefaultBuffer
	}
	return nil
}

func setup(conn *net.UDPConn, opts Options) (*Transport, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	t := &Transport{conn: conn, raw: raw, mtu: opts.MTU, batch: opts.Batch}
	var serr error
	err = raw.Control(func(fd uintptr) {
		t.fd = int(fd)
		serr = t.setSockopts(int(fd), opts)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	ip := local.Addr().Unmap()
	if ip.IsUnspecified() {
		ip = hostIPv4()
	}
	t.addr, err = transport.UDPNICID(netip.AddrPortFrom(ip, local.Port()))
	if err != nil {
		return nil, err
	}
	t.errDone = fmt.Errorf("udp: %v: %w", netip.AddrPortFrom(ip, local.Port()), transport.ErrClosed)

	t.tx = newBatch(t.batch)
	t.txFn = t.sendSome
	t.rx = newBatch(t.batch)
	t.rxBufs = make([][]byte, t.batch)
	t.lends = transport.NewLends[[]byte](maxLent(t.batch, t.mtu))
	backing := make([]byte, t.batch*t.mtu)
	for i := range t.rxBufs {
		t.rxBufs[i] = backing[i*t.mtu : (i+1)*t.mtu : (i+1)*t.mtu]
		t.rx.iovs[i].Base = &t.rxBufs[i][0]
		t.rx.iovs[i].SetLen(t.mtu)
	}
	t.rxFn = t.recvSome
	return t, nil
}

// setSockopts sets the buffer sizes and busy polling and reads back what the
// kernel granted.
func (t *Transport) setSockopts(fd int, opts Options) error {
	for _, b := range []struct {
		force, plain, size int
		name               string
		got                *int
	}{
		{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, opts.ReadBuffer, "SO_RCVBUF", &t.rcvbuf},
		{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, opts.WriteBuffer, "SO_SNDBUF", &t.sndbuf},
	} {
		// The forced variant needs CAP_NET_ADMIN; without it the plain
		// one is clamped by net.core.[rw]mem_max.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, b.force, b.size) != nil {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, b.plain, b.size); err != nil {
				return fmt.Errorf("setsockopt %s %d: %w", b.name, b.size, err)
			}
		}
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, b.plain)
		if err != nil {
			return fmt.Errorf("getsockopt %s: %w", b.name, err)
		}
		*b.got = v
	}
	if opts.BusyPoll > 0 {
		us := max(int(opts.BusyPoll/time.Microsecond), 1)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, us); err != nil {
			if errors.Is(err, unix.EPERM) {
				return fmt.Errorf("setsockopt SO_BUSY_POLL %dµs: %w (raising busy polling needs CAP_NET_ADMIN; run as root or lower Options.BusyPoll)", us, err)
			}
			return fmt.Errorf("setsockopt SO_BUSY_POLL %dµs: %w", us, err)
		}
	}
	return nil
}

// hostIPv4 is the first non-loopback IPv4 address of the host, or 127.0.0.1.
func hostIPv4() netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					ip = ip.Unmap()
					if ip.Is4() && !ip.IsLoopback() && !ip.IsUnspecified() {
						return ip
					}
				}
			}
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// Addr returns the NIC id of the bound address and port.
func (t *Transport) Addr() transport.NICID { return t.addr }

// HostUniqueNIC reports that the board's NIC id (its bound IPv4 address
// and port) belongs to it alone on the host: see transport.HostUnique.
func (t *Transport) HostUniqueNIC() bool { return true }

// MTU returns the largest Data a frame may carry.
func (t *Transport) MTU() int { return t.mtu }

// SocketBuffers returns the receive and send buffer sizes the kernel granted,
// as getsockopt reports them. Linux doubles a requested size to allow for its
// bookkeeping, so a request was clamped if the value here is less than twice
// the request.
func (t *Transport) SocketBuffers() (read, write int) { return t.rcvbuf, t.sndbuf }

// Send transmits frames in order, up to Options.Batch per sendmmsg call; see
// the package documentation for which failures are errors and which are
// counted drops.
func (t *Transport) Send(frames []transport.Frame) (int, error) {
	if t.closed.Load() {
		return 0, t.errDone
	}
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	done := 0
	for done < len(frames) {
		m := 0
		var stop error
		for m < t.batch && done+m < len(frames) {
			f := &frames[done+m]
			if len(f.Data) > t.mtu {
				stop = fmt.Errorf("udp: frame %d: %d bytes exceeds MTU %d: %w", done+m, len(f.Data), t.mtu, transport.ErrTooBig)
				break
			}
			if r := f.Region; r != nil {
				if err := r.Check(t, f); err != nil {
					stop = fmt.Errorf("udp: frame %d: %w", done+m, err)
					break
				}
				r.Copied() // the kernel copies every datagram
			}
			port := uint16(f.Peer)
			if f.Peer&^transport.NICIDMask != 0 || port == 0 {
				stop = fmt.Errorf("udp: frame %d: NIC id %#x is not an IPv4 address and non-zero port: %w", done+m, uint64(f.Peer), transport.ErrUnreachable)
				break
			}
			sa := &t.tx.names[m]
			sa.Family = unix.AF_INET
			pb := [2]byte{byte(port >> 8), byte(port)}
			sa.Port = binary.NativeEndian.Uint16(pb[:]) // network byte order in memory
			binary.BigEndian.PutUint32(sa.Addr[:], uint32(f.Peer>>16))
			iov := &t.tx.iovs[m]
			if len(f.Data) > 0 {
				iov.Base = &f.Data[0]
			} else {
				iov.Base = nil
			}
			iov.SetLen(len(f.Data))
			m++
		}
		if m > 0 {
			t.txOff, t.txEnd = 0, m
			err := t.raw.Write(t.txFn)
			sent := t.txOff
			for i := range m {
				t.tx.iovs[i].Base = nil // do not keep the caller's buffers alive
			}
			if err != nil {
				// Frames the kernel took or dropped before the
				// socket closed count as handed to the wire.
				return done + sent, t.ioErr(err)
			}
			done += m
		}
		if stop != nil {
			return done, stop
		}
	}
	return done, nil
}

// sendSome is the raw write callback: it sends headers txOff..txEnd and
// returns false to wait for buffer space.
func (t *Transport) sendSome(fd uintptr) bool {
	refusedHere := 0
	for t.txOff < t.txEnd {
		n, errno := sendmmsg(fd, t.tx.hdrs[t.txOff:t.txEnd])
		if n > 0 {
			t.txOff += n
			t.sent.Add(uint64(n))
			continue
		}
		switch errno {
		case unix.EINTR:
		case unix.EAGAIN:
			t.sendWaits.Add(1)
			return false
		case unix.ECONNREFUSED:
			// A pending ICMP error from some earlier datagram, now
			// consumed: send this one again, but not forever.
			t.refused.Add(1)
			if refusedHere++; refusedHere > 4 {
				t.sendErrors.Add(1)
				t.txOff++
			}
		default:
			// This datagram cannot be sent (no route, a firewall, ...):
			// the wire lost it.
			t.sendErrors.Add(1)
			t.txOff++
		}
	}
	return true
}

// Recv receives up to min(len(frames), Options.Batch) frames with one
// recvmmsg call; see [transport.Transport.Recv] for the timeout. A datagram
// longer than the MTU is dropped and counted, not returned.
func (t *Transport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	t.lends.Recv()
	if t.closed.Load() {
		return 0, t.errDone
	}
	if len(frames) == 0 {
		return 0, nil
	}
	want := min(len(frames), t.batch)
	// A deadline left by an earlier bounded wait would fail the
	// non-waiting read below at once, without reading: clear it. (The
	// runtime keeps deadlines in memory; this costs no system call.)
	if t.deadlineOn {
		if err := t.conn.SetReadDeadline(time.Time{}); err != nil {
			return 0, t.ioErr(err)
		}
		t.deadlineOn = false
	}
	// Try once without the poller: the busy-poll path and a full queue
	// cost one syscall and no deadline.
	n, err := t.recvBatch(frames, want, false)
	if n > 0 || err != nil || timeout == 0 || t.rxTimedOut {
		return n, err // (timed out at once: Wake's deadline)
	}
	switch {
	case timeout > 0:
		if err := t.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return 0, t.ioErr(err)
		}
		t.deadlineOn = true
	}
	// After the deadline is set: a Wake that set its own past deadline
	// before ours is seen here, one after it ends the wait below.
	if t.wakeReq.Load() && t.wakeReq.Swap(false) {
		return 0, nil
	}
	// Wait; a batch of nothing but oversized datagrams is no reason to
	// return before the timeout. Each pass consumes datagrams, so the loop
	// ends by a frame, the deadline or Close.
	for {
		n, err := t.recvBatch(frames, want, true)
		if n > 0 || err != nil || t.rxTimedOut {
			return n, err
		}
	}
}

// Wake makes a Recv that waits in the poller (or the next one that
// would) return 0, nil at once (see [transport.Sleeper]): it sets a read
// deadline in the past, which ends the wait, and the Recv that sees it
// clears it again.
func (t *Transport) Wake() {
	t.wakeReq.Store(true)
	_ = t.conn.SetReadDeadline(time.Unix(1, 0))
}

// ArmSleep returns the socket, which polls readable while a datagram
// waits (see [transport.Sleeper]). The socket's readiness is its queue,
// so there is nothing to announce.
func (t *Transport) ArmSleep() (fd int, sleep bool) { return t.fd, !t.closed.Load() }

// EndSleep ends a sleep ArmSleep prepared: nothing to undo.
func (t *Transport) EndSleep(readable bool) {}

// recvBatch makes one recvmmsg call (waiting in the poller first if wait)
// and fills frames with the datagrams that fit the MTU. On a deadline it
// returns 0, nil and sets rxTimedOut.
func (t *Transport) recvBatch(frames []transport.Frame, want int, wait bool) (int, error) {
	t.rxWant, t.rxWait, t.rxGot, t.rxErrno, t.rxTimedOut = want, wait, 0, 0, false
	if err := t.raw.Read(t.rxFn); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Ours, or Wake's: either way the next Recv clears it.
			t.rxTimedOut, t.deadlineOn = true, true
			t.wakeReq.Store(false)
			return 0, nil
		}
		return 0, t.ioErr(err)
	}
	if t.rxErrno != 0 {
		return 0, fmt.Errorf("udp: recvmmsg: %w", t.rxErrno)
	}
	k := 0
	t.lends.Got(t.rxGot)
	for i := range t.rxGot {
		h := &t.rx.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			t.truncated.Add(1)
			continue
		}
		sa := &t.rx.names[i]
		var pb [2]byte
		binary.NativeEndian.PutUint16(pb[:], sa.Port)
		ip := binary.BigEndian.Uint32(sa.Addr[:])
		frames[k] = transport.Frame{
			Peer: transport.NICID(ip)<<16 | transport.NICID(binary.BigEndian.Uint16(pb[:])),
			Data: t.rxBufs[i][:h.Len:h.Len],
			Ref:  t.lends.RecvRef(i),
		}
		k++
	}
	t.received.Add(uint64(k))
	return k, nil
}

// maxLent bounds the receive buffers lent to holders at once: 16 MiB of
// them, at least one batch.
func maxLent(batch, mtu int) int { return max(batch, (16<<20)/mtu) }

// Hold keeps a frame of the latest Recv; see [transport.Transport.Hold].
// The transport lends the datagram's receive buffer and reads the next
// datagram into a spare one (a released buffer, or a new one), up to 16 MiB
// of lent buffers (at least one batch); past that it copies Data.
func (t *Transport) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	// Refs number datagrams of the batch, truncated ones included.
	i, err := t.lends.Index(f.Ref)
	if err != nil {
		return transport.HoldInfo{}, fmt.Errorf("udp: %v: hold: %w", t.addr.UDPAddr(), err)
	}
	buf := t.rxBufs[i]
	if t.lends.Lend(f, buf) {
		t.spareMu.Lock()
		var fresh []byte
		if n := len(t.spare); n > 0 {
			fresh, t.spare = t.spare[n-1], t.spare[:n-1]
		}
		t.spareMu.Unlock()
		if fresh == nil {
			fresh = make([]byte, t.mtu)
		}
		t.rxBufs[i] = fresh
		t.rx.iovs[i].Base = &fresh[0]
		return transport.HoldInfo{}, nil
	}
	t.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

// Release ends a hold; see [transport.Transport.Release]. The buffer becomes
// a spare for the next Hold.
func (t *Transport) Release(f *transport.Frame) {
	if buf, ok := t.lends.Return(f); ok {
		t.spareMu.Lock()
		if len(t.spare) < t.batch {
			t.spare = append(t.spare, buf)
		}
		t.spareMu.Unlock()
	}
}

// Register registers mem for sends. The kernel copies every datagram, so
// frames of the region are copied too (Region.InPlace is false and
// Region.CopiedSends counts them).
func (t *Transport) Register(mem []byte) (*transport.Region, error) {
	if t.closed.Load() {
		return nil, t.errDone
	}
	return transport.NewRegion(t, mem, false, nil), nil
}

// recvSome is the raw read callback: one recvmmsg of rxWant datagrams. It
// returns false to wait in the poller when the socket is empty and rxWait is
// set.
func (t *Transport) recvSome(fd uintptr) bool {
	hdrs := t.rx.hdrs[:t.rxWant]
	for i := range hdrs {
		hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		hdrs[i].Hdr.Flags = 0
	}
	for range 16 {
		n, errno := recvmmsg(fd, hdrs)
		switch errno {
		case 0:
			t.rxGot = n
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return !t.rxWait
		case unix.ECONNREFUSED:
			// A pending ICMP error for an earlier send, now consumed.
			t.refused.Add(1)
		default:
			t.rxErrno = errno
			return true
		}
	}
	return true // interrupted too often: report nothing this time
}

// ioErr maps an error of the closed socket to ErrClosed.
func (t *Transport) ioErr(err error) error {
	if t.closed.Load() || errors.Is(err, net.ErrClosed) {
		return t.errDone
	}
	return fmt.Errorf("udp: %v: %w", t.addr.UDPAddr(), err)
}

// Close closes the socket; a blocked Recv or Send returns an error wrapping
// [transport.ErrClosed], as does every later call. Closing again returns
// nil.
func (t *Transport) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	t.lends.Close() // the lent buffers are garbage once their holders drop them
	if err := t.conn.Close(); err != nil {
		return fmt.Errorf("udp: close %v: %w", t.addr.UDPAddr(), err)
	}
	return nil
}

// Counters returns the transport's counters: datagrams sent and received,
// sends the kernel refused (send_errors, the frame is dropped), ICMP
// port-unreachable reports consumed (refused), oversized datagrams dropped
// (truncated) and times Send waited for socket buffer space (send_waits).
func (t *Transport) Counters() []transport.Counter {
	return append([]transport.Counter{
		{Name: "sent", Value: t.sent.Load()},
		{Name: "received", Value: t.received.Load()},
		{Name: "send_errors", Value: t.sendErrors.Load()},
		{Name: "refused", Value: t.refused.Load()},
		{Name: "truncated", Value: t.truncated.Load()},
		{Name: "send_waits", Value: t.sendWaits.Load()},
	}, t.lends.Counters("")...)
}

// Interface checks.
var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Stats     = (*Transport)(nil)
)
