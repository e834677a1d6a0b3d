package pci

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Interrupt is one interrupt vector delivered through a Linux eventfd: VFIO
// signals it from the kernel's interrupt handler, an emulated device signals
// it from its model. Waiting parks the goroutine, so a sleeping waiter costs
// no CPU.
//
// A waiter on an interrupt the kernel signals (NewInterrupt) parks in Go's
// network poller. One signalled in this process (NewLocalInterrupt: an
// emulated device's) is also woken by Signal itself, through the Go
// scheduler: the network poller is looked at only when a processor has
// nothing else to run (or by the runtime's monitor, every 10 ms at worst),
// so a goroutine that keeps a processor busy, such as an emulated engine
// polling for its next doorbell, would otherwise hold the wake-up back until
// it stops or the waiter's timeout ends the wait, long after the completion
// it signals.
//
// Several goroutines may Wait at once; each signal wakes at least one of
// them and every waiter wakes when the Interrupt is closed.
type Interrupt struct {
	f  *os.File
	fd int
	// rung, for a local interrupt, holds a token while a Signal has not
	// yet woken a waiter (nil otherwise); done is closed by Close.
	rung chan struct{}
	done chan struct{}
	// timer is a local interrupt's timeout, reused by one waiter at a
	// time (the one that set timerBusy) so that a wait with a deadline
	// allocates no timer; a second waiter meanwhile makes its own.
	timer     *time.Timer
	timerBusy atomic.Bool

	mu     sync.Mutex
	closed bool
}

// NewInterrupt makes an Interrupt around a fresh non-blocking eventfd, for
// the kernel (VFIO) to signal.
func NewInterrupt() (*Interrupt, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, &OpError{Op: "eventfd", Err: err}
	}
	return &Interrupt{f: os.NewFile(uintptr(fd), "eventfd"), fd: fd, done: make(chan struct{})}, nil
}

// NewLocalInterrupt makes an Interrupt that only Signal, in this process,
// raises (an emulated device's): Signal wakes a waiter directly, without
// the network poller (see Interrupt). Its eventfd still counts the signals
// and Poll reads it, but nothing outside the process may write to it.
func NewLocalInterrupt() (*Interrupt, error) {
	i, err := NewInterrupt()
	if err != nil {
		return nil, err
	}
	i.rung = make(chan struct{}, 1)
	return i, nil
}

// FD is the eventfd, for handing to VFIO_DEVICE_SET_IRQS.
func (i *Interrupt) FD() int { return i.fd }

// Signal raises the interrupt (adds one to the eventfd counter).
func (i *Interrupt) Signal() error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	_, err := i.f.Write(b[:])
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return &OpError{Op: "eventfd write", Err: err}
	}
	if err != nil {
		return ErrClosed
	}
	if i.rung != nil {
		select {
		case i.rung <- struct{}{}:
		default: // a waiter has a token to wake on already
		}
	}
	return nil
}

// Poll consumes pending signals without blocking and returns how many there
// were (0 when none).
func (i *Interrupt) Poll() uint64 {
	// Under mu, which Close holds while it closes the descriptor: once
	// Close has run, the number may name another descriptor of the
	// process (a socket, another eventfd), and a read of it would take
	// that one's data. The read does not block (EFD_NONBLOCK), and the
	// bare number spares each look the file's SyscallConn allocation and
	// reference count (a receive loop's every sleep looks).
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return 0
	}
	var b [8]byte
	if n, err := unix.Read(i.fd, b[:]); err == nil && n == 8 {
		return binary.LittleEndian.Uint64(b[:])
	}
	return 0
}

// Wait blocks until the interrupt fires, ctx is done, or the Interrupt is
// closed, and returns how many signals it consumed.
func (i *Interrupt) Wait(ctx context.Context) (uint64, error) {
	if dl, ok := ctx.Deadline(); ok {
		return i.wait(ctx, dl)
	}
	return i.wait(ctx, time.Time{})
}

// WaitTimeout is Wait with a timeout instead of a context; it returns 0 and
// no error when the timeout passes.
func (i *Interrupt) WaitTimeout(d time.Duration) (uint64, error) {
	n, err := i.wait(context.Background(), time.Now().Add(d))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	return n, err
}

func (i *Interrupt) wait(ctx context.Context, deadline time.Time) (uint64, error) {
	if i.rung != nil {
		return i.waitLocal(ctx, deadline)
	}
	rc, err := i.f.SyscallConn()
	if err != nil {
		return 0, ErrClosed
	}
	// The read deadline is per file, shared by concurrent waiters: a waiter
	// woken by someone else's deadline goes back to sleep with its own.
	stop := context.AfterFunc(ctx, func() { _ = i.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		if n := i.Poll(); n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		_ = i.f.SetReadDeadline(deadline)
		var n uint64
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			var b [8]byte
			m, e := unix.Read(int(fd), b[:])
			if e == unix.EAGAIN {
				return false
			}
			if e != nil {
				rerr = e
			} else if m == 8 {
				n = binary.LittleEndian.Uint64(b[:])
			}
			return true
		})
		switch {
		case err == nil && rerr == nil:
			return n, nil
		case err == nil:
			return 0, &OpError{Op: "eventfd read", Err: rerr}
		case errors.Is(err, os.ErrClosed) || i.isClosed():
			return 0, ErrClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		default:
			return 0, &OpError{Op: "eventfd read", Err: err}
		}
	}
}

// waitLocal is wait for a local interrupt: it sleeps on Signal's token
// rather than on the eventfd's readiness, then takes the count.
func (i *Interrupt) waitLocal(ctx context.Context, deadline time.Time) (uint64, error) {
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t, own := i.takeTimer(time.Until(deadline))
		defer i.putTimer(t, own)
		timeout = t.C
	}
	for {
		if i.isClosed() {
			return 0, ErrClosed
		}
		if n := i.Poll(); n > 0 {
			return n, nil
		}
		select {
		case <-i.rung:
			// The count may have gone to another waiter: look again.
		case <-i.done:
			return 0, ErrClosed
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timeout:
			if err := ctx.Err(); err != nil {
				return 0, err // ctx's own deadline
			}
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// takeTimer returns a timer that fires in d: the Interrupt's own (own)
// when no other waiter has it, a new one otherwise. putTimer stops it and
// gives the own one back.
func (i *Interrupt) takeTimer(d time.Duration) (t *time.Timer, own bool) {
	if !i.timerBusy.CompareAndSwap(false, true) {
		return time.NewTimer(d), false
	}
	if i.timer == nil {
		i.timer = time.NewTimer(d)
	} else {
		i.timer.Reset(d)
	}
	return i.timer, true
}

// putTimer stops t, a timer of takeTimer, and gives it back if own. A
// value the timer sent before Stop is drained, so that the next waiter's
// Reset starts clean where a timer's channel is buffered too
// (GODEBUG=asynctimerchan=1); since Go 1.23 it holds none and the drain
// finds nothing.
func (i *Interrupt) putTimer(t *time.Timer, own bool) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if own {
		i.timerBusy.Store(false)
	}
}

func (i *Interrupt) isClosed() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.closed
}

// Close closes the eventfd and wakes every waiter with ErrClosed.
func (i *Interrupt) Close() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil
	}
	i.closed = true
	close(i.done)
	if err := i.f.Close(); err != nil {
		return fmt.Errorf("pci: close eventfd: %w", err)
	}
	return nil
}

// waitAnySlice bounds one sleep of WaitAny, so that a context without a
// deadline, or an Interrupt closed under the sleep (which does not wake a
// poll(2) on it), is noticed within this time.
const waitAnySlice = 10 * time.Millisecond

// WaitAny blocks until one of irqs fires, ctx is done, deadline passes
// (the zero Time: none; context.DeadlineExceeded), or one of them is
// closed (ErrClosed). It returns the index in irqs of one that fired and the
// signals it consumed from it; others that fired keep their count for the
// next wait. With one Interrupt it is that Interrupt's Wait. Either way a
// signal pending when it is called is returned even if ctx is done or
// deadline passed already: it looks at the counts once, without sleeping,
// before it returns the error.
//
// A caller that waits many times a millisecond with a timeout (a receive
// loop, until its next tick) passes the timeout as deadline rather than in
// a context of its own per wait, which context.WithTimeout allocates with
// a timer it starts and stops.
//
// With several it sleeps in poll(2) on their eventfds, which every signal
// (the kernel's, or a local Signal) makes readable, so the sleeping
// goroutine holds an OS thread, not a processor. A sleep lasts at most
// 10 ms before WaitAny looks at ctx and at Close again; that bound is the
// longest an Interrupt closed under it goes unnoticed.
func WaitAny(ctx context.Context, deadline time.Time, irqs ...*Interrupt) (int, uint64, error) {
	if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	switch len(irqs) {
	case 0:
		return 0, 0, errors.New("pci: WaitAny on no interrupt")
	case 1:
		n, err := irqs[0].wait(ctx, deadline)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = context.DeadlineExceeded
		}
		return 0, n, err
	}
	var fds [64]unix.PollFd
	if len(irqs) > len(fds) {
		return 0, 0, fmt.Errorf("pci: WaitAny on %d interrupts: at most %d", len(irqs), len(fds))
	}
	for {
		for k, i := range irqs {
			if i.isClosed() {
				return k, 0, ErrClosed
			}
			// The bare number: if Close races this, poll(2) looks at a
			// closed or reused descriptor, which only ends the sleep
			// early; Poll reads the count under the Interrupt's lock,
			// once it saw the Interrupt open.
			fds[k] = unix.PollFd{Fd: int32(i.fd), Events: unix.POLLIN}
		}
		// A done context or a passed deadline still gets one look,
		// without sleeping: a signal pending then is returned, as the
		// one-Interrupt Wait does.
		cerr := ctx.Err()
		ms := 0
		if cerr == nil {
			slice := waitAnySlice
			if !deadline.IsZero() {
				slice = min(slice, time.Until(deadline))
			}
			if slice <= 0 {
				cerr = context.DeadlineExceeded
			} else {
				ms = int((slice + time.Millisecond - 1) / time.Millisecond)
			}
		}
		// poll(2) returns at once when a signal is pending, so the
		// counts are read only where it reports one: a read of every
		// eventfd before each sleep cost a system call per vector.
		n, err := unix.Poll(fds[:len(irqs)], ms)
		if err == unix.EINTR {
			continue // looked at nothing: look again
		}
		if err != nil {
			return 0, 0, &OpError{Op: "poll eventfds", Err: err}
		}
		for k := 0; n > 0 && k < len(irqs); k++ {
			if fds[k].Revents == 0 {
				continue
			}
			n--
			if c := irqs[k].Poll(); c > 0 {
				return k, c, nil
			}
		}
		if cerr != nil {
			return 0, 0, cerr
		}
	}
}
