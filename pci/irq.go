package pci

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Interrupt is one interrupt vector delivered through a Linux eventfd: VFIO
// signals it from the kernel's interrupt handler, an emulated device signals
// it from its model. Waiting parks the goroutine, so a sleeping waiter costs
// no CPU.
//
// A waiter on an interrupt the kernel signals (NewInterrupt) parks in Go's
// network poller. The eventfd joins the poller only when a Wait first
// needs it: a descriptor in the poller's epoll set wakes the runtime's
// thread asleep in epoll_wait whenever it is signalled, and whenever it
// is read (eventfd reads report it writable), though no goroutine waits
// on it, and a driver that sleeps on its queues with WaitAny (poll(2))
// and reads each vector it woke for would pay such a wake-up, a thread
// woken on another CPU, at every sleep (docs/nics.md). One signalled in
// this process (NewLocalInterrupt: an emulated device's) is also woken by Signal itself, through the Go
// scheduler: the network poller is looked at only when a processor has
// nothing else to run (or by the runtime's monitor, every 10 ms at worst),
// so a goroutine that keeps a processor busy, such as an emulated engine
// polling for its next doorbell, would otherwise hold the wake-up back until
// it stops or the waiter's timeout ends the wait, long after the completion
// it signals.
//
// Several goroutines may Wait at once; each signal wakes at least one of
// them and every waiter wakes when the Interrupt is closed. On an interrupt
// the kernel signals, concurrent Waits share the eventfd's read deadline
// and queue for its read (one sleeps in it at a time): a second waiter's
// context or deadline may only take effect once the first's wait ends or a
// signal comes. One waiter per Interrupt is the use this serves at its
// best (a driver's WaitRx allows one waiter per queue).
type Interrupt struct {
	// f is the eventfd as a file in Go's network poller, made by the
	// first Wait that parks there (poller); nil until then, and always
	// for a local interrupt. fd is the descriptor.
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

	// rc is the eventfd's raw connection and readFn its read (ready),
	// made once, with f, so that a wait on a kernel interrupt allocates
	// neither:
	// readFn adds the signals it reads to got, which the waiter takes,
	// and leaves a read's errno in readErr.
	rc      syscall.RawConn
	readFn  func(fd uintptr) bool
	got     atomic.Uint64
	readErr atomic.Uintptr
	// watch ends the reads under way when a waiter's context ends (it
	// calls expire, made once), kept from one wait to the next once two
	// waits in a row were on the same context: see ctxWatch. watchUsers
	// counts the waits under way that rely on it.
	watchMu    sync.Mutex
	watch      ctxWatch
	watchUsers int
	expire     func()

	// polls counts WaitAny's sleeps in poll(2) on the eventfd under way:
	// Close leaves the closing of the descriptor to the last of them, so
	// that none sleeps on a closed or reused descriptor number.
	mu     sync.Mutex
	closed bool
	polls  int
}

// NewInterrupt makes an Interrupt around a fresh non-blocking eventfd, for
// the kernel (VFIO) to signal.
func NewInterrupt() (*Interrupt, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, &OpError{Op: "eventfd", Err: err}
	}
	return &Interrupt{fd: fd, done: make(chan struct{})}, nil
}

// poller puts the eventfd in Go's network poller for wait, once: it makes
// f, rc, readFn and expire. It fails with ErrClosed once Close has run.
// Nothing may call f.Fd(): it would make the descriptor blocking, and the
// raw reads taken under mu (take) would then block with mu held.
func (i *Interrupt) poller() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return ErrClosed
	}
	if i.rc != nil {
		return nil
	}
	if i.f == nil {
		// Non-blocking, it joins the poller; the file owns the
		// descriptor from now on (closeFD).
		i.f = os.NewFile(uintptr(i.fd), "eventfd")
	}
	rc, err := i.f.SyscallConn()
	if err != nil {
		return &OpError{Op: "eventfd", Err: err}
	}
	f := i.f
	i.rc, i.readFn = rc, i.ready
	i.expire = func() { _ = f.SetReadDeadline(time.Unix(1, 0)) }
	return nil
}

// closeFD closes the eventfd (i.mu held): through f when it is in the
// poller, else the bare descriptor.
func (i *Interrupt) closeFD() error {
	if i.f != nil {
		return i.f.Close()
	}
	return unix.Close(i.fd)
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

// Signal raises the interrupt (adds one to the eventfd counter). It
// returns ErrClosed once Close has been called.
func (i *Interrupt) Signal() error {
	// Under mu, as Poll: once closed, the descriptor may be closed later
	// (see Close), and its number may then name another.
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return ErrClosed
	}
	err := addOne(i.fd)
	i.mu.Unlock()
	if err != nil {
		return &OpError{Op: "eventfd write", Err: err}
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
	n, _ := i.take()
	return n
}

// take is Poll that also reports whether the Interrupt is closed (then
// it consumes nothing).
func (i *Interrupt) take() (uint64, bool) {
	// Under mu, which Close holds while it closes the descriptor: once
	// Close has run, the number may name another descriptor of the
	// process (a socket, another eventfd), and a read of it would take
	// that one's data. The read does not block (EFD_NONBLOCK), and the
	// bare number spares each look the file's SyscallConn allocation and
	// reference count (a receive loop's every sleep looks).
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return 0, true
	}
	c := i.got.Swap(0) // read by a waiter's readFn, not taken yet
	var b [8]byte
	if n, err := unix.Read(i.fd, b[:]); err == nil && n == 8 {
		c += binary.LittleEndian.Uint64(b[:])
	}
	return c, false
}

// ready is readFn: it reads the eventfd, which the runtime's poller found
// readable (or which is looked at before it sleeps), and reports whether
// the read ended the wait (anything but EAGAIN).
func (i *Interrupt) ready(fd uintptr) bool {
	var b [8]byte
	n, err := unix.Read(int(fd), b[:])
	switch {
	case err == unix.EAGAIN:
		return false
	case err != nil:
		i.readErr.Store(uintptr(err.(unix.Errno)))
	case n == 8:
		i.got.Add(binary.LittleEndian.Uint64(b[:]))
	}
	return true
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
	if err := i.poller(); err != nil {
		return 0, err
	}
	// The read deadline is per file, shared by concurrent waiters: a waiter
	// woken by another's deadline goes back to sleep with its own, which
	// may replace the other's (see Interrupt).
	if ctx.Done() != nil && ctx.Err() == nil {
		stop := i.watchCtx(ctx)
		defer i.unwatchCtx(ctx, stop)
	}
	for {
		n, closed := i.take()
		if closed {
			return 0, ErrClosed
		}
		if n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		_ = i.f.SetReadDeadline(deadline)
		if ctx.Err() != nil {
			// ctx ended between the look and the deadline just set,
			// which may have replaced the one its end set.
			continue
		}
		err := i.rc.Read(i.readFn)
		switch {
		case err == nil:
			if i.isClosed() {
				i.passOnClose()
				return 0, ErrClosed
			}
			if e := i.readErr.Swap(0); e != 0 {
				return 0, &OpError{Op: "eventfd read", Err: unix.Errno(e)}
			}
			if n := i.got.Swap(0); n > 0 {
				return n, nil
			}
			// Another waiter's Poll took the count: look again.
		case errors.Is(err, os.ErrClosed) || i.isClosed():
			return 0, ErrClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		default:
			return 0, &OpError{Op: "eventfd read", Err: err}
		}
	}
}

// passOnClose writes back the signal Close wrote, which this waiter's read
// took, while a WaitAny still sleeps on the eventfd in poll(2): that
// signal is what wakes it, and the descriptor stays open until it leaves.
func (i *Interrupt) passOnClose() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.polls > 0 {
		_ = addOne(i.fd)
	}
}

// watchCtx makes ctx's end end the reads on the eventfd under way. It uses
// the kept registration (i.watch) when it is ctx's, or makes it ctx's when
// no wait under way relies on it and ctx's is the second wait in a row
// (see ctxWatch.keep), and returns nil; otherwise it makes one for this
// wait alone and returns its stop, for unwatchCtx.
func (i *Interrupt) watchCtx(ctx context.Context) func() bool {
	i.watchMu.Lock()
	defer i.watchMu.Unlock()
	if !i.watch.is(ctx) && (i.watchUsers > 0 || !i.watch.keep(ctx, i.expire)) {
		return context.AfterFunc(ctx, i.expire)
	}
	i.watchUsers++
	return nil
}

// unwatchCtx ends what watchCtx(ctx) made for a wait: a registration of
// its own (stop), or its use of the kept one. Once ctx has ended (nothing
// will wait on it again), or the Interrupt is closed, it drops what it
// keeps of ctx when no wait uses it.
func (i *Interrupt) unwatchCtx(ctx context.Context, stop func() bool) {
	if stop != nil {
		stop()
	}
	i.watchMu.Lock()
	defer i.watchMu.Unlock()
	if stop == nil {
		i.watchUsers--
	}
	if i.watchUsers == 0 && (ctx.Err() != nil || i.isClosed()) {
		i.watch.forget(ctx)
	}
}

// ctxWatch is a context.AfterFunc registration kept from one wait to the
// next. A receive loop waits many times a millisecond on one context
// (transport/nic's waits share one until a Wake ends it), and a
// registration per wait would allocate each time (AfterFunc's context
// and stop function); the kept one is made once per context. It is keyed
// by the context's Done channel, which is the same for every call and
// whose closing is what the registration waits for. It is kept only for a
// context that two waits in a row were on (last remembers the previous
// wait's Done channel): a caller with a fresh context per wait (ioat's
// requests) registers per wait instead, so that its cancel, after the
// wait, finds nothing left to run and the context is not held. A
// registration that fires after it was replaced (its context ended as it
// was being replaced) only ends one sleep early: the waiter looks and
// sleeps again.
type ctxWatch struct {
	done <-chan struct{}
	stop func() bool
	last <-chan struct{}
}

// is reports whether w is registered on ctx.
func (w *ctxWatch) is(ctx context.Context) bool {
	return w.stop != nil && w.done == ctx.Done()
}

// keep is called for a wait on ctx, on which w is not registered: when
// the previous wait was on ctx too, it registers f on ctx in place of w's
// registration and reports true; otherwise it drops w's registration,
// remembers ctx's Done channel for the next wait and reports false (the
// wait registers for itself).
func (w *ctxWatch) keep(ctx context.Context, f func()) bool {
	d := ctx.Done()
	if w.last == d {
		w.clear()
		w.done, w.stop, w.last = d, context.AfterFunc(ctx, f), d
		return true
	}
	w.clear()
	w.last = d
	return false
}

// forget drops what w keeps of ctx: its registration and its Done channel.
func (w *ctxWatch) forget(ctx context.Context) {
	if w.last == ctx.Done() || w.is(ctx) {
		w.clear()
	}
}

// clear stops w's registration, if any, and forgets the last wait's
// context.
func (w *ctxWatch) clear() {
	if w.stop != nil {
		w.stop()
	}
	*w = ctxWatch{}
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

// Close wakes every waiter with ErrClosed and closes the eventfd: at once,
// or, while a WaitAny sleeps on it, once the last such sleep has left
// (an error closing it then is not reported). It drops the registration
// on a waiter's context kept for the next wait. Signal, Poll and waits
// after Close see the Interrupt closed.
func (i *Interrupt) Close() error {
	err := i.close()
	i.watchMu.Lock()
	i.watch.clear()
	i.watchMu.Unlock()
	return err
}

func (i *Interrupt) close() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil
	}
	i.closed = true
	close(i.done)
	// A signal ends a poll(2) sleeping on the eventfd (WaitAny), which
	// its closing would not; the last such sleep closes it. A Wait that
	// reads the signal first passes it on (passOnClose).
	_ = addOne(i.fd)
	if i.polls > 0 {
		return nil
	}
	if err := i.closeFD(); err != nil {
		return fmt.Errorf("pci: close eventfd: %w", err)
	}
	return nil
}

// enterPoll counts a poll(2) sleep on the eventfd about to start, unless
// the Interrupt is closed (false).
func (i *Interrupt) enterPoll() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return false
	}
	i.polls++
	return true
}

// leavePoll counts a poll(2) sleep on the eventfd ended, and closes the
// descriptor if Close left that to it.
func (i *Interrupt) leavePoll() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.polls--; i.polls == 0 && i.closed {
		_ = i.closeFD()
	}
}

// waitAnySlice bounds one sleep of WaitAny on several interrupts, well
// within poll(2)'s timeout in milliseconds; a longer wait sleeps again.
const waitAnySlice = 24 * time.Hour

// sleeps counts WaitAny's sleeps in poll(2), and sleepsTimedOut those that
// ended at their timeout, for tests: a sleep that a signal, its context or
// Close ends does not time out.
var sleeps, sleepsTimedOut atomic.Uint64

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
// a timer it starts and stops. A wait registers on ctx (context.AfterFunc)
// for itself, and from the second wait in a row on ctx keeps the
// registration for the next (see ctxWatch): waits on one context, and on
// kernel interrupts or several, allocate nothing after the second.
//
// With several it sleeps in poll(2) on their eventfds, which every signal
// (the kernel's, or a local Signal) makes readable, so the sleeping
// goroutine holds an OS thread, not a processor. The poll set holds one
// more eventfd, the waiter's own wake-up, which ctx's end makes readable:
// a cancel (transport/nic's Wake) ends the sleep at once. Each waiter has
// its own, taken from a free list for the wait, so a context that ends
// wakes only the waits on it, and one that ended before the wait is seen
// by the look before the sleep. Close signals the eventfd it closes, which
// ends the sleeps on it (a one-interrupt Wait that reads the signal passes
// it on), and leaves the closing to the last of them.
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
	var fds [maxWaitAny + 1]unix.PollFd
	if len(irqs) > maxWaitAny {
		return 0, 0, fmt.Errorf("pci: WaitAny on %d interrupts: at most %d", len(irqs), maxWaitAny)
	}
	nfds := len(irqs)
	if ctx.Done() != nil && ctx.Err() == nil {
		// Registered before the look below: a ctx that ends after it
		// rings w, which the sleep then sees.
		w, err := takeWaker(ctx)
		if err != nil {
			return 0, 0, err
		}
		defer putWaker(ctx, w)
		fds[nfds] = unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN}
		nfds++
	}
	for {
		for k, i := range irqs {
			if !i.enterPoll() {
				for _, j := range irqs[:k] {
					j.leavePoll()
				}
				return k, 0, ErrClosed
			}
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
		if ms > 0 {
			sleeps.Add(1)
		}
		n, err := unix.Poll(fds[:nfds], ms)
		for _, i := range irqs {
			i.leavePoll()
		}
		if n == 0 && err == nil && ms > 0 {
			sleepsTimedOut.Add(1)
		}
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
		if n > 0 && nfds > len(irqs) {
			// The wake-up rang: ctx ended, which the next look sees,
			// or a registration it had before this wait fired late,
			// and the wait sleeps again.
			wakeDrain(int(fds[len(irqs)].Fd))
		}
	}
}

// maxWaitAny is the most interrupts WaitAny waits on at once.
const maxWaitAny = 64

// A waker is the eventfd a WaitAny on several interrupts adds to its poll
// set, and the registration on the wait's context that signals it
// (ring). It serves one wait at a time; between waits it stays in the free
// list wakers with the registration it keeps (watch: from the second wait
// in a row on a context), so that the next wait on the same context (a
// receive loop's) registers nothing; stop is the registration of a wait
// that registers for itself. Its eventfd is never closed, since a
// registration that fires late writes to it.
type waker struct {
	fd    int
	watch ctxWatch
	stop  func() bool
	ring  func()
}

// wakers is the free list of wakers: as many as WaitAny ever had waits
// on several interrupts under way at once.
var wakers struct {
	mu   sync.Mutex
	free []*waker
}

// takeWaker takes a waker from the free list, the one registered on ctx
// or last used on it if there is one, and registers it on ctx; it makes
// one when the list is empty.
func takeWaker(ctx context.Context) (*waker, error) {
	wakers.mu.Lock()
	var w *waker
	if n := len(wakers.free); n > 0 {
		k := n - 1
		for j := range wakers.free {
			if fw := &wakers.free[j].watch; fw.is(ctx) || fw.last == ctx.Done() {
				k = j
				break
			}
		}
		w = wakers.free[k]
		wakers.free[k] = wakers.free[n-1]
		wakers.free[n-1] = nil
		wakers.free = wakers.free[:n-1]
	}
	wakers.mu.Unlock()
	if w == nil {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return nil, &OpError{Op: "eventfd", Err: err}
		}
		w = &waker{fd: fd}
		w.ring = func() { _ = addOne(fd) }
	}
	if !w.watch.is(ctx) && !w.watch.keep(ctx, w.ring) {
		w.stop = context.AfterFunc(ctx, w.ring)
	}
	return w, nil
}

// putWaker gives w, taken for a wait on ctx, back to the free list. The
// wait's own registration goes, and once ctx has ended so does what w
// keeps of it (nothing waits on ctx again); the eventfd may be left
// readable, which the next wait's first sleep finds and clears.
func putWaker(ctx context.Context, w *waker) {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	if ctx.Err() != nil {
		w.watch.forget(ctx)
	}
	wakers.mu.Lock()
	wakers.free = append(wakers.free, w)
	wakers.mu.Unlock()
}

// addOne adds one to the counter of the eventfd fd, which makes it
// readable: a signal (Signal, Close's, a waker's ring).
func addOne(fd int) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	_, err := unix.Write(fd, b[:])
	return err
}

// wakeDrain clears a waker's eventfd.
func wakeDrain(fd int) {
	var b [8]byte
	_, _ = unix.Read(fd, b[:])
}
