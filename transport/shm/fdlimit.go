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
//     So the transport keeps one spare descriptor: it closes it, accepts,
//     reads the hello (to learn who asked), answers with a refusal that
//     says why, closes the connection and takes the spare again. The
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
// it will refuse, when accept(2) finds the process at its limit.
type fdSpare struct {
	mu   sync.Mutex
	fd   int
	held bool // false: none (taken by someone else when it was given up)
}

// take opens the spare descriptor: an eventfd, which needs no file (a
// chroot or sandbox may have no /dev/null).
func (s *fdSpare) take() error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	s.fd, s.held = fd, true
	return nil
}

// give closes the spare descriptor, if held.
func (s *fdSpare) give() {
	if s.held {
		unix.Close(s.fd)
		s.held = false
	}
}

// fdRefusals are the peers refused at the descriptor limit since the last
// TakeFDRefusals.
type fdRefusals struct {
	any atomic.Bool
	mu  sync.Mutex
	err map[transport.NICID]error
}

// refuseAtLimit accepts one connection with the spare descriptor, when
// there is one, and refuses it (see the top of the file). It reports
// whether it took one.
func (t *Transport) refuseAtLimit() bool {
	s := &t.spareFD
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.held {
		return false
	}
	s.give()
	c, err := t.ln.AcceptUnix()
	if err == nil {
		t.cnt.refused.Add(1)
		t.refuse(c, nil)
		c.Close()
	}
	_ = s.take() // failing, the next accept at the limit backs off instead
	return err == nil
}

// refuse reads the producer's hello (unless the caller read it: hello) and
// answers it with a refusal for lack of descriptors, noting the peer for
// TakeFDRefusals.
func (t *Transport) refuse(c *net.UnixConn, hello []byte) {
	if hello == nil {
		c.SetDeadline(time.Now().Add(handshakeTTL))
		var b [helloLen + 1]byte
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
		if err != nil {
			return
		}
		closeAll(parseRights(oob[:oobn]))
		hello = b[:n]
	}
	_, _, _ = c.WriteMsgUnix(refusal(refuseFDLimit), nil, nil)
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
