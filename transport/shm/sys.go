package shm

import (
	"errors"
	"fmt"
	"net"
	"os"

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

const hugePage = 2 << 20

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

// peerUID returns the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	uid, _, err := peerCred(c)
	return uid, err
}

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

// sendFD sends msg with fd attached (SCM_RIGHTS).
func sendFD(c *net.UnixConn, msg []byte, fd int) error {
	_, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fd), nil)
	return err
}

// recvFD reads one message of exactly n bytes carrying exactly one
// descriptor. Extra descriptors are closed.
func recvFD(c *net.UnixConn, n int) ([]byte, int, error) {
	buf := make([]byte, n+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	k, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, -1, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, m := range msgs {
				if f, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if k != n || len(fds) != 1 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, -1, fmt.Errorf("shm: bad handshake message (%d bytes, %d descriptors)", k, len(fds))
	}
	return buf[:n], fds[0], nil
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
