package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// plainUDP is the baseline's UDP socket: one non-blocking IPv4 datagram
// socket driven by plain sendto(2) and recvfrom(2), the way a C ping-pong
// would do it, with no batching layer and no runtime poller in the way. It
// implements transport.Transport so the raw exchange can run over it; a
// wait sleeps in poll(2) in slices of at most 10 ms, so Close is noticed.
type plainUDP struct {
	fd     int
	addr   transport.NICID
	mtu    int
	buf    []byte
	closed atomic.Bool
	lends  *transport.Lends[struct{}] // holds copy: buf is the one receive buffer
}

// listenPlainUDP binds a socket to ap (port 0 picks one).
func listenPlainUDP(ap netip.AddrPort) (*plainUDP, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("baseline UDP socket: %w", err)
	}
	for _, opt := range []int{unix.SO_RCVBUF, unix.SO_SNDBUF} {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, 4<<20) // best effort: the kernel may clamp
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("baseline UDP socket: bind %v: %w", ap, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("baseline UDP socket: %w", err)
	}
	in := sa.(*unix.SockaddrInet4)
	id, err := transport.UDPNICID(netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port)))
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	const mtu = 1500 - 20 - 8
	return &plainUDP{fd: fd, addr: id, mtu: mtu, buf: make([]byte, 65536), lends: transport.NewLends[struct{}](0)}, nil
}

func (u *plainUDP) Addr() transport.NICID { return u.addr }
func (u *plainUDP) MTU() int              { return u.mtu }

func (u *plainUDP) Send(frames []transport.Frame) (int, error) {
	if u.closed.Load() {
		return 0, transport.ErrClosed
	}
	if n, err := transport.CopyRegions(u, frames); err != nil {
		return n, err
	}
	for i, f := range frames {
		if len(f.Data) > u.mtu {
			return i, transport.ErrTooBig
		}
		ap := f.Peer.UDPAddr()
		to := &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
		for try := 0; ; try++ {
			err := unix.Sendto(u.fd, f.Data, 0, to)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ENOBUFS) || try == 1000 {
				break // the wire lost it, as far as the other side can tell
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	return len(frames), nil
}

func (u *plainUDP) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	u.lends.Recv()
	if u.closed.Load() {
		return 0, transport.ErrClosed
	}
	if len(frames) == 0 {
		return 0, nil
	}
	deadline := time.Now().Add(timeout)
	for {
		n, from, err := unix.Recvfrom(u.fd, u.buf, unix.MSG_DONTWAIT)
		if err == nil {
			in, ok := from.(*unix.SockaddrInet4)
			if !ok {
				continue
			}
			peer, _ := transport.UDPNICID(netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port)))
			u.lends.Got(1)
			frames[0] = transport.Frame{Peer: peer, Data: u.buf[:n], Ref: u.lends.RecvRef(0)}
			return 1, nil
		}
		if !errors.Is(err, unix.EAGAIN) {
			return 0, fmt.Errorf("baseline UDP socket: recvfrom: %w", err)
		}
		if timeout == 0 {
			return 0, nil
		}
		wait := 10 * time.Millisecond
		if timeout > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return 0, nil
			}
			wait = min(wait, left)
		}
		if u.closed.Load() {
			return 0, transport.ErrClosed
		}
		pfd := []unix.PollFd{{Fd: int32(u.fd), Events: unix.POLLIN}}
		ts := unix.NsecToTimespec(int64(wait))
		if _, err := unix.Ppoll(pfd, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("baseline UDP socket: poll: %w", err)
		}
	}
}

// Hold copies: the socket has one receive buffer.
func (u *plainUDP) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	if _, err := u.lends.Index(f.Ref); err != nil {
		return transport.HoldInfo{}, err
	}
	u.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

func (u *plainUDP) Release(f *transport.Frame) { u.lends.Return(f) }

// Register registers memory that sendto copies like any other.
func (u *plainUDP) Register(mem []byte) (*transport.Region, error) {
	return transport.NewRegion(u, mem, false, nil), nil
}

// Close shuts the socket down, which wakes a Recv polling it in another
// goroutine, and closes it.
func (u *plainUDP) Close() error {
	if u.closed.Swap(true) {
		return nil
	}
	_ = unix.Shutdown(u.fd, unix.SHUT_RDWR)
	return unix.Close(u.fd)
}

// listenPlainUDPString is listenPlainUDP for an "IP:PORT" or "HOST:PORT"
// string, resolving a host name to its first IPv4 address.
func listenPlainUDPString(addr string) (*plainUDP, error) {
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("baseline UDP socket: %w", err)
	}
	ip, ok := netip.AddrFromSlice(ua.IP.To4())
	if !ok {
		return nil, fmt.Errorf("baseline UDP socket: %s is not an IPv4 address", addr)
	}
	return listenPlainUDP(netip.AddrPortFrom(ip, uint16(ua.Port)))
}
