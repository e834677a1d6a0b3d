package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// segment is one shared mapping. The descriptor is closed as soon as the
// segment is mapped (or passed on), so a live transport holds no memfd
// descriptors, only mappings.
type segment struct {
	mem  []byte
	huge bool
}

func (s *segment) unmap() error {
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem = nil
	return err
}

const (
	hugePage = 2 << 20
	// page is the ordinary page, taken to be 4 KiB: a lane's share of
	// the budget is rounded down to whole ones (ringSize), so that its
	// segment ends where the kernel's mapping of it does. A kernel of
	// larger pages (64 KiB on some arm64 and ppc64 builds) rounds each
	// mapping up further, and a lane at the floor of three frames of the
	// MTU may end in part of a page on any.
	page = 4 << 10
)

// newSegment creates a memfd of at least n bytes, on 2 MiB hugepages when
// allowed and available, else on ordinary pages, maps it shared and returns
// the mapping and the descriptor (for passing to the peer; the caller
// closes it).
func newSegment(name string, n int, huge bool) (segment, int, error) {
	if huge {
		hn := (n + hugePage - 1) &^ (hugePage - 1)
		fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_HUGETLB|unix.MFD_HUGE_2MB)
		if err == nil {
			if mem, err := mapFD(fd, hn); err == nil {
				return segment{mem: mem, huge: true}, fd, nil
			}
			unix.Close(fd)
		}
		// No hugetlb support or no free hugepages: ordinary pages do.
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return segment{}, -1, fmt.Errorf("shm: memfd_create %q: %w", name, err)
	}
	mem, err := mapFD(fd, n)
	if err != nil {
		unix.Close(fd)
		return segment{}, -1, err
	}
	return segment{mem: mem}, fd, nil
}

func mapFD(fd, n int) ([]byte, error) {
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, fmt.Errorf("shm: ftruncate memfd to %d bytes: %w", n, err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %d bytes: %w", n, err)
	}
	return mem, nil
}

// mapPeerFD maps a segment a peer passed, checking its size against the
// bounds the caller accepts, and closes fd.
func mapPeerFD(fd, min, max int) (segment, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return segment{}, fmt.Errorf("shm: fstat a peer's segment: %w", err)
	}
	if st.Size < int64(min) || st.Size > int64(max) {
		return segment{}, fmt.Errorf("shm: a peer's segment of %d bytes (want %d..%d)", st.Size, min, max)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return segment{}, fmt.Errorf("shm: mmap a peer's segment: %w", err)
	}
	return segment{mem: mem}, nil
}

// eventBell is an eventfd that a goroutine sleeps on and other processes
// write (kick) to wake it: a receiver's doorbell, and a producer's room
// bell, which consumers write when they free room its backlogs wait for
// (lane.go). The descriptor is non-blocking, so os.NewFile registers it
// with the Go runtime's poller and a wait parks the goroutine, not its
// thread (see Transport.sleep); raw and read (made once, at creation)
// read it through the poller without allocating: a Read of the file wraps
// every deadline it meets in a new *os.PathError. buf and deadline (a read
// deadline is set) belong to the one goroutine that waits.
type eventBell struct {
	f        *os.File
	fd       int // owned by f; passed to peers while f is open
	raw      syscall.RawConn
	read     func(fd uintptr) bool
	buf      [8]byte
	deadline bool
}

// newEventBell creates an eventBell; what names it in errors.
func newEventBell(what string) (*eventBell, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("shm: eventfd for the %s: %w", what, err)
	}
	b := &eventBell{f: os.NewFile(uintptr(fd), "gomx-"+what), fd: fd}
	if b.raw, err = b.f.SyscallConn(); err != nil {
		b.f.Close()
		return nil, fmt.Errorf("shm: the %s's eventfd: %w", what, err)
	}
	b.read = func(fd uintptr) bool {
		// Done unless the count is still 0 (EAGAIN): then the poller
		// parks the goroutine until the eventfd is readable.
		_, err := unix.Read(int(fd), b.buf[:])
		return err != unix.EAGAIN
	}
	return b, nil
}

// wait sleeps until the eventfd is written or until deadline (zero: no
// bound), and resets its count. Any outcome returns: a count read, the
// deadline passed (the caller checks its clock), or an error (the file was
// closed: the caller checks why).
func (b *eventBell) wait(deadline time.Time) {
	if !deadline.IsZero() || b.deadline {
		_ = b.f.SetReadDeadline(deadline)
		b.deadline = !deadline.IsZero()
	}
	_ = b.raw.Read(b.read)
}

// ring writes the eventfd from this process: its sleeper returns, or its
// next wait returns at once. After close the write fails, harmlessly.
func (b *eventBell) ring() { _, _ = b.f.Write(eventOne) }

// close closes the eventfd; a wait in progress returns.
func (b *eventBell) close() { b.f.Close() }

// checkBellEvent makes sure fd, passed by a consumer, is an eventfd and
// makes it non-blocking (the consumer's own is already), so that kick
// never blocks the sender whatever the peer passed. It closes fd on error.
func checkBellEvent(fd int) error {
	l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err == nil && l != "anon_inode:[eventfd]" {
		err = fmt.Errorf("it is %q", l)
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("shm: the peer's doorbell is not an eventfd: %w", err)
	}
	return nil
}

// eventOne is the 8-byte count an eventfd write adds: 1.
var eventOne = binary.NativeEndian.AppendUint64(nil, 1)

// kick adds 1 to the eventfd fd (a consumer's doorbell): a sleeping
// consumer's Read returns. The descriptor is non-blocking: at the
// (unreachable) saturated count the write fails, and the reader has a
// wake-up pending anyway.
func kick(fd int) { _, _ = unix.Write(fd, eventOne) }

// peerCred returns the uid and process id of the process at the other end
// of c.
func peerCred(c *net.UnixConn) (uid, pid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, 0, err
	}
	if serr != nil {
		return -1, 0, fmt.Errorf("shm: SO_PEERCRED: %w", serr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// sendFD sends msg with fds attached (SCM_RIGHTS).
func sendFD(c *net.UnixConn, msg []byte, fds ...int) error {
	_, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	return err
}

// recvFD reads one message of exactly n bytes carrying exactly nfd
// descriptors. On error every descriptor received is closed, and the
// message, if one came, is returned with the error (a refusal, fdlimit.go,
// carries none); descriptors the kernel dropped because this process is at
// its descriptor limit fail it with ErrFDLimit.
func recvFD(c *net.UnixConn, n, nfd int) ([]byte, []int, error) {
	msg, fds, err := recvMsg(c, n)
	if err != nil {
		return msg, nil, err
	}
	if len(msg) != n || len(fds) != nfd {
		closeAll(fds)
		return msg, nil, fmt.Errorf("shm: bad handshake message (%d bytes, %d descriptors; want %d and %d)", len(msg), len(fds), n, nfd)
	}
	return msg, fds, nil
}

// recvMsg reads one message of up to n bytes (one more, when it was
// longer) and the descriptors it carries. When the kernel dropped
// descriptors (MSG_CTRUNC) it closes those it got and fails, with
// ErrFDLimit and the message when this process is at its descriptor limit
// (fdlimit.go).
func recvMsg(c *net.UnixConn, n int) ([]byte, []int, error) {
	buf := make([]byte, n+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	k, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	fds := parseRights(oob[:oobn])
	if flags&unix.MSG_CTRUNC != 0 {
		// Looked at before the descriptors that came are closed: the
		// kernel installs what fits and drops the rest.
		limit := fdLimitHere()
		closeAll(fds)
		if limit != nil {
			return buf[:k], nil, limit
		}
		return nil, nil, errors.New("shm: a handshake message carried more descriptors than it may")
	}
	return buf[:k], fds, nil
}

// checkDir makes sure dir exists, is a directory (not a link), belongs to
// the calling user and is closed to everyone else.
func checkDir(dir string) error { return CheckDir(dir) }

// CheckDir creates the endpoint directory dir if it is missing and checks
// that it belongs to the calling user and is closed to everyone else, as
// Open does; users that nest directories in it check the parent with it.
func CheckDir(dir string) error {
	uid := os.Getuid()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("shm: create the endpoint directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("shm: endpoint directory %s: %w", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("shm: endpoint directory %s is not a directory: remove it", dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("shm: endpoint directory %s belongs to uid %d, not %d: remove it or choose another (GOMX_SHM_DIR)", dir, st.Uid, uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("shm: endpoint directory %s has mode %#o, open to other users: chmod 700 it", dir, st.Mode&0o777)
	}
	return nil
}
