package xdp

import (
	"errors"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/sentinel"
)

// Sentinel errors. Calls wrap them in an [*OpError] that names the
// operation, the interface and the queue, and says how to fix the problem;
// test for them with errors.Is. ErrNotSupported, ErrPermission, ErrQueue,
// ErrBusy, ErrClosed and ErrTooBig are the values every gomx package uses
// for these meanings (internal/sentinel): xdp.ErrClosed is
// transport.ErrClosed, ErrNotSupported is pci.ErrNotSupported, ErrQueue is
// nicdrv.ErrBadQueue, ErrTooBig is transport.ErrTooBig.
var (
	// ErrNotSupported means the kernel, the driver or the interface lacks a
	// feature: AF_XDP itself, zero-copy, XDP in the asked mode, ntuple
	// filters of the asked kind, busy polling.
	ErrNotSupported = sentinel.ErrNotSupported
	// ErrPermission means the process lacks a capability: CAP_NET_ADMIN
	// and CAP_BPF (or root) to attach programs, CAP_NET_RAW to open AF_XDP
	// sockets.
	ErrPermission = sentinel.ErrPermission
	// ErrQueue means the rx/tx queue does not exist on the interface (it
	// has fewer channels) or is out of the program's range.
	ErrQueue = sentinel.ErrNoQueue
	// ErrInterface means the interface does not exist (in this network
	// namespace) or is down.
	ErrInterface = errors.New("interface not usable")
	// ErrBusy means someone else already holds the resource: another XDP
	// program on the interface, another socket on the slot, or another
	// AF_XDP socket bound to the queue without sharing our UMEM.
	ErrBusy = sentinel.ErrBusy
	// ErrClosed means the socket, program or transport was closed.
	ErrClosed = sentinel.ErrClosed
	// ErrConfig means an Options or Steering value is invalid; nothing was
	// touched in the kernel.
	ErrConfig = errors.New("invalid configuration")
	// ErrTooBig means a frame does not fit in a UMEM frame.
	ErrTooBig = sentinel.ErrTooBig
)

// OpError describes a failed operation on an interface or one of its queues.
type OpError struct {
	// Op names what failed: a socket option ("setsockopt XDP_UMEM_REG"),
	// a syscall ("bind"), a step ("attach XDP program").
	Op string
	// Iface is the interface name, empty when none is concerned.
	Iface string
	// Queue is the queue id, -1 when no queue is concerned.
	Queue int
	// Err is the cause: a sentinel of this package, usually wrapping an
	// errno, or another error.
	Err error
	// Fix, when not empty, says what to do about it.
	Fix string
}

// Error says what failed where, why, and the fix when one is known.
func (e *OpError) Error() string {
	s := "xdp: "
	if e.Iface != "" {
		s += e.Iface
		if e.Queue >= 0 {
			s += " queue " + strconv.Itoa(e.Queue)
		}
		s += ": "
	}
	s += e.Op + ": " + e.Err.Error()
	if e.Fix != "" {
		s += " (" + e.Fix + ")"
	}
	return s
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// wrapped is a sentinel together with the errno or error that caused it, so
// that errors.Is finds both.
type wrapped struct {
	sentinel error
	cause    error
}

func (w *wrapped) Error() string   { return w.sentinel.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.sentinel, w.cause} }

// opErr builds an OpError; when cause is an errno it picks the sentinel and
// the fix that errno usually means for op.
func opErr(op, iface string, queue int, cause error) *OpError {
	e := &OpError{Op: op, Iface: iface, Queue: queue, Err: cause}
	var errno unix.Errno
	if !errors.As(cause, &errno) {
		return e
	}
	switch errno {
	case unix.EPERM, unix.EACCES:
		e.Err = &wrapped{ErrPermission, cause}
		e.Fix = "run as root, or grant CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (setcap cap_net_admin,cap_net_raw,cap_bpf+ep BINARY)"
	case unix.EAFNOSUPPORT:
		e.Err = &wrapped{ErrNotSupported, cause}
		e.Fix = "the kernel has no AF_XDP: build it with CONFIG_XDP_SOCKETS=y (Linux 5.4 or later)"
	case unix.EOPNOTSUPP:
		e.Err = &wrapped{ErrNotSupported, cause}
	case unix.EBUSY, unix.EEXIST:
		e.Err = &wrapped{ErrBusy, cause}
	case unix.ENODEV, unix.ENXIO, unix.ENETDOWN:
		e.Err = &wrapped{ErrInterface, cause}
		e.Fix = "check that the interface exists in this network namespace and is up (ip link set dev IFACE up)"
	}
	return e
}

// configErr is an OpError for an invalid option value.
func configErr(op, why string) *OpError {
	return &OpError{Op: op, Queue: -1, Err: &wrapped{ErrConfig, errors.New(why)}}
}
