package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// Running out of file descriptors. Every pair of boards holds a few
// descriptors on each side (the two connections, the doorbell and room
// bell eventfds, lanes' memfds), so a process with many peers on the host
// meets its RLIMIT_NOFILE in the middle of a job, and where it meets it
// decides what the other side sees:
//
//   - dialling: the socket (EMFILE), or the descriptors the welcome carries,
//     which the kernel drops (MSG_CTRUNC), fail the dial with ErrFDLimit
//     naming this process's limit;
//   - accepting: accept(2) fails with EMFILE and leaves the connection in
//     the listen backlog, where the dialler would wait for its welcome until
//     the handshake's timeout, again at every resend of the layer above.
//     So the transport keeps one spare descriptor: when a connection
//     waits, it closes it, accepts without blocking, reads the hello (to
//     learn who asked), answers with a refusal that says why, closes the
//     connection and takes the spare again (and after any later accept, if
//     a descriptor opened meanwhile took its slot). The
//     dialler's dial fails with ErrFDLimit naming the peer's limit, and the
//     refusal is kept for TakeFDRefusals, since the peer may have been
//     answering a connect of ours, which then cannot complete either;
//   - answering: a process that accepted a peer's connection with its last
//     descriptors cannot dial back to answer the peer's connect. It tells
//     the peer over the connection it accepted (ctlFDLimit), and the peer
//     keeps that for TakeFDRefusals as it keeps a refusal.
//
// A hello whose descriptor the kernel dropped for the same reason gets the
// same refusal.

// ErrFDLimit is wrapped by the errors of a connection that failed because
// a process, this one or the peer's, ran out of file descriptors
// (RLIMIT_NOFILE, or the system's fs.file-max). The errors say which and
// how to raise the limit; they wrap transport.ErrUnreachable too.
var ErrFDLimit = errors.New("shm: out of file descriptors")

// refuseMagic starts a refusal, the consumer's answer in place of a
// welcome (welcomeLen bytes, no descriptors): magic u32, version u32,
// reason u32, then zeros.
const refuseMagic = 0x676D7872 // "gmxr"

// Reasons of a refusal.
const refuseFDLimit = 1 // the consumer is at its descriptor limit

// ctlFDLimit is the control message (consumer → producer) of a consumer
// that cannot dial its producer back: it is at its descriptor limit.
const ctlFDLimit = 9

// isFDLimit reports whether err is the kernel's "too many open files",
// per process (EMFILE) or system-wide (ENFILE).
func isFDLimit(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)
}

// fdLimitHere returns an ErrFDLimit error naming this process's limit when
// it cannot open a descriptor now, and nil when it can: what a message
// whose descriptors the kernel dropped (MSG_CTRUNC) is checked against.
func fdLimitHere() error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !isFDLimit(err) {
		return nil
	}
	return ownFDLimit(err)
}

// ownFDLimit is ErrFDLimit for this process, from the kernel's error.
func ownFDLimit(cause error) error {
	if errors.Is(cause, unix.ENFILE) {
		return fmt.Errorf("%w: the system's open files reached fs.file-max (%v): raise it (sysctl fs.file-max)", ErrFDLimit, cause)
	}
	var rl unix.Rlimit
	limit, raise := "its limit", "raise it with `ulimit -n` in the shell that starts it"
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		limit = fmt.Sprintf("its limit of %d", rl.Cur)
		if rl.Cur >= rl.Max {
			// The Go runtime raises the soft limit to the hard one at
			// start-up: only the hard limit can move.
			raise += " after raising the hard limit (`ulimit -Hn` as root, LimitNOFILE= of a systemd unit, or /etc/security/limits.conf)"
		}
	}
	return fmt.Errorf("%w: this process (pid %d) holds %s open files (RLIMIT_NOFILE): %s (or run fewer processes per host)",
		ErrFDLimit, os.Getpid(), limit, raise)
}

// peerFDLimit is ErrFDLimit for a peer at its limit, which did what
// ("refused the connection").
func peerFDLimit(peer transport.NICID, pid int, what string) error {
	return fmt.Errorf("%w: board %v's process (pid %d) is at its limit of open files (RLIMIT_NOFILE) and %s: raise its limit (`ulimit -n`, or the hard limit, `ulimit -Hn` as root or LimitNOFILE=; or run fewer processes per host)",
		ErrFDLimit, peer, pid, what)
}

// refusal is what the consumer answers a hello it cannot take.
func refusal(reason uint32) []byte {
	m := make([]byte, welcomeLen)
	le := binary.LittleEndian
	le.PutUint32(m, refuseMagic)
	le.PutUint32(m[4:], version)
	le.PutUint32(m[8:], reason)
	return m
}

// refuseReason returns the reason of a refusal, and false for any other
// message.
func refuseReason(msg []byte) (uint32, bool) {
	le := binary.LittleEndian
	if len(msg) != welcomeLen || le.Uint32(msg) != refuseMagic || le.Uint32(msg[4:]) != version {
		return 0, false
	}
	return le.Uint32(msg[8:]), true
}

// fdSpare is the descriptor the consumer gives up to accept a connection
// it will refuse, when accept(2) finds the process at its limit. It is an
// eventfd, which needs no file (a chroot or sandbox may have no
// /dev/null), and doubles as Close's wake-up of an accept loop waiting at
// the limit (refuseAtLimit): Close writes it.
type fdSpare struct {
	mu    sync.Mutex // between the accept loop and Close (wake)
	fd    int
	held  bool // false: none (taken by someone else when it was given up)
	woken bool // Close has begun: the spare is made readable
}

// take opens the spare descriptor (s.mu held, or no accept loop yet).
func (s *fdSpare) take() error {
	var v uint
	if s.woken {
		v = 1
	}
	fd, err := unix.Eventfd(v, unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	s.fd, s.held = fd, true
	return nil
}

// give closes the spare descriptor, if held (s.mu held, or the accept
// loop has returned).
func (s *fdSpare) give() {
	if s.held {
		unix.Close(s.fd)
		s.held = false
	}
}

// retake takes the spare descriptor again if another descriptor took its
// slot while it was given up and has been closed since: the accept loop
// calls it after each accept.
func (s *fdSpare) retake() {
	s.mu.Lock()
	if !s.held {
		_ = s.take() // still at the limit: the next accept tries again
	}
	s.mu.Unlock()
}

// wake makes the spare readable for good, now and when it is taken again,
// so that an accept loop waiting on it at the limit returns; Close calls
// it before it closes the listener.
func (s *fdSpare) wake() {
	s.mu.Lock()
	s.woken = true
	if s.held {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1) // the counter, in host order
		_, _ = unix.Write(s.fd, one[:])
	}
	s.mu.Unlock()
}

// fdRefusals are the peers refused at the descriptor limit since the last
// TakeFDRefusals.
type fdRefusals struct {
	any atomic.Bool
	mu  sync.Mutex
	err map[transport.NICID]error
}

// refuseAtLimit runs when accept(2) failed for lack of descriptors. When a
// connection waits it accepts it with the spare descriptor and refuses it
// (see the top of the file); when none does it waits for one, holding the
// spare, and returns for the caller to accept again (the process may be
// below its limit by then). It returns false when it holds no spare or
// poll(2) failed (the caller backs off), or the transport is closing.
//
// accept(2) fails with EMFILE at the limit whether or not a connection
// waits (it allocates the descriptor first), so the spare is given up
// only once poll(2) saw one waiting, for an accept that does not block:
// an accept that blocked with the spare given up would leave its slot
// free for any descriptor the process opens meanwhile, and the spare lost
// with it.
func (t *Transport) refuseAtLimit() bool {
	s := &t.spareFD
	s.mu.Lock()
	if !s.held {
		_ = s.take()
	}
	spare, held := s.fd, s.held
	s.mu.Unlock()
	if !held || t.closed.Load() {
		return false
	}
	rc, err := t.ln.SyscallConn()
	if err != nil {
		return false
	}
	fd, aerr, perr := -1, error(nil), error(nil)
	err = rc.Control(func(lfd uintptr) {
		p := []unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}, {Fd: int32(spare), Events: unix.POLLIN}}
		if perr = pollFDs(p, 0); perr != nil {
			return
		}
		if p[0].Revents == 0 || p[1].Revents != 0 {
			perr = pollFDs(p, -1) // none waits: wait for one, or for Close (wake)
			return
		}
		s.mu.Lock()
		s.give()
		fd, _, aerr = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if aerr != nil {
			_ = s.take()
		}
		s.mu.Unlock()
	})
	if err != nil || aerr != nil || perr != nil {
		return false // closed, the slot was taken meanwhile, or poll failed: the caller backs off
	}
	if fd < 0 {
		return true
	}
	t.refuseFD(fd)
	s.mu.Lock()
	unix.Close(fd)
	_ = s.take() // failing, the next accept tries again (retake)
	// Counted once the spare is back: whoever waits on the count to open
	// a descriptor cannot take the spare's slot.
	t.cnt.refused.Add(1)
	s.mu.Unlock()
	return true
}

// pollFDs is poll(2) of p for up to ms milliseconds in all (-1: no
// bound), polled again for what is left when a signal interrupts it. It
// returns poll's other errors.
func pollFDs(p []unix.PollFd, ms int) error {
	end := time.Now().Add(time.Duration(ms) * time.Millisecond)
	for {
		_, err := unix.Poll(p, ms)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
		if ms > 0 {
			left := time.Until(end)
			ms = int(max(0, (left+time.Millisecond-1)/time.Millisecond)) // rounded up
		}
	}
}

// refuseFD reads the hello on fd, a connection accepted with the spare
// descriptor, and answers it with a refusal. It works on the descriptor
// itself: a *net.UnixConn would take a second one (net.FileConn dups).
func (t *Transport) refuseFD(fd int) {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if err := pollFDs(p, int(handshakeTTL.Milliseconds())); err != nil || p[0].Revents == 0 {
		return // no hello within the handshake's time
	}
	var b [helloLen + 1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(fd, b[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return
	}
	closeAll(parseRights(oob[:oobn]))
	_ = unix.Sendmsg(fd, refusal(refuseFDLimit), nil, nil, 0) // a fresh socket has room
	t.noteRefusal(b[:n])
}

// refuse answers hello, read on c, with a refusal for lack of descriptors.
func (t *Transport) refuse(c *net.UnixConn, hello []byte) {
	_, _, _ = c.WriteMsgUnix(refusal(refuseFDLimit), nil, nil)
	t.noteRefusal(hello)
}

// noteRefusal notes the producer of hello, refused for lack of
// descriptors, for TakeFDRefusals.
func (t *Transport) noteRefusal(hello []byte) {
	le := binary.LittleEndian
	if len(hello) != helloLen || le.Uint32(hello) != helloMagic {
		return
	}
	peer := transport.NICID(le.Uint64(hello[8:]))
	t.fdRefused.note(peer, fmt.Errorf("%w: board %v: %w", transport.ErrUnreachable, peer, ownFDLimit(unix.EMFILE)))
}

// note keeps err as the refusal of peer.
func (r *fdRefusals) note(peer transport.NICID, err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = make(map[transport.NICID]error)
	}
	r.err[peer] = err
	r.any.Store(true)
	r.mu.Unlock()
}

// tellFDLimit tells peer, over each connection it made to us, that we
// cannot dial it back (ctlFDLimit): our dial to it failed at our
// descriptor limit.
func (t *Transport) tellFDLimit(peer transport.NICID) {
	var m [ctlLen]byte
	putCtl(m[:], ctlFDLimit, 0, 0, 0)
	for _, r := range *t.in.Load() {
		if r.peer == peer && !r.dead.Load() {
			_, _ = r.conn.Write(m[:]) // a producer gone meanwhile needs no answer
		}
	}
}

// TakeFDRefusals returns the peers this transport could not connect with
// since the last call because a process ran out of file descriptors (this
// one refused the peer's connection, or the peer cannot connect back to
// answer us), each with an error (wrapping ErrFDLimit) that says which
// process and how to raise its limit; nil when there is none, at the cost
// of an atomic load. A board waiting for such a peer to connect back
// fails what waits on it.
func (t *Transport) TakeFDRefusals() map[transport.NICID]error {
	r := &t.fdRefused
	if !r.any.Load() {
		return nil
	}
	r.mu.Lock()
	m := r.err
	r.err = nil
	r.any.Store(false)
	r.mu.Unlock()
	return m
}
