package xdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is analogous to struct mmsghdr in linux/socket.h.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   uint32
}

// mmsg is a prebuilt batch for sendmmsg/recvmmsg over one buffer per
// message, so that the benchmark loops do not allocate.
type mmsg struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
}

func newMmsg(count, size int) *mmsg {
	m := &mmsg{hdrs: make([]mmsghdr, count), iovs: make([]unix.Iovec, count), bufs: make([][]byte, count)}
	for i := range count {
		m.bufs[i] = make([]byte, size)
		m.iovs[i].Base = &m.bufs[i][0]
		m.iovs[i].SetLen(size)
		m.hdrs[i].hdr.Iov = &m.iovs[i]
		m.hdrs[i].hdr.SetIovlen(1)
	}
	return m
}

// setLen sets the length of every message to send.
func (m *mmsg) setLen(n int) {
	for i := range m.iovs {
		m.iovs[i].SetLen(n)
	}
}

// send sends the first count messages with sendmmsg; it returns how many
// went.
func (m *mmsg) send(fd, count int) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(count), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// recv receives up to len(m.hdrs) messages without waiting.
func (m *mmsg) recv(fd int) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(len(m.hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
