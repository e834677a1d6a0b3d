package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgBatch is the scratch of one sendmmsg(2) or recvmmsg(2) call: a message
// header per frame (analogous to struct mmsghdr in linux/socket.h), each
// pointing at its own iovec and IPv4 socket address. The headers point into
// the batch's own arrays, so a batch is built once and reused; only the
// iovec bases and lengths and the addresses change per call.
type mmsgBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
}

func newBatch(n int) *mmsgBatch {
	b := &mmsgBatch{
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet4, n),
	}
	for i := range b.hdrs {
		h := &b.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Namelen = unix.SizeofSockaddrInet4
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
	}
	return b
}

// sendmmsg sends hdrs on fd and returns how many went out. It never blocks
// (MSG_DONTWAIT): a full socket buffer is EAGAIN.
func sendmmsg(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd,
		uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}

// recvmmsg receives up to len(hdrs) datagrams from fd without blocking
// (MSG_DONTWAIT: an empty queue is EAGAIN) and returns how many.
func recvmmsg(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd,
		uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}
