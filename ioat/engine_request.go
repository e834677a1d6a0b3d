package ioat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"time"

	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
)

// An Engine's request path: Copy and Fill, ICopy and IFill placing a
// request's pieces on queues by the policy, each queue's submission and
// reaping under its lock, and Check and Wait (polling, then sleeping on
// the queue's interrupt). Construction, options, buffers and Close are
// in engine.go.

// Cookie identifies an asynchronous request (the paper's cookie). Check or
// Wait it until it reports completion: that also releases the request's
// hold on cached mappings. A Cookie is used by one goroutine at a time.
type Cookie struct {
	e     *Engine
	parts []part
	inl   [1]part
	ents  [2]*regEntry
	done  bool
	err   error
	// A compare's or CRC's outcome (result set): diff is the offset of
	// the first byte that differs (-1: equal), crc the CRC-32C.
	result bool
	diff   int
	crc    uint32
}

// Diff returns the outcome of a completed ICompare: the offset of the
// first byte that differs, or -1 when the buffers are equal (and for
// other requests).
func (c *Cookie) Diff() int {
	if !c.result {
		return -1
	}
	return c.diff
}

// CRC returns the CRC-32C of a completed ICRC32C (0 for other requests).
func (c *Cookie) CRC() uint32 { return c.crc }

type part struct {
	c   *echan
	tag uint64
}

var doneCookie = &Cookie{done: true}

// Copy copies src into dst (len(src) bytes) and returns when the bytes are
// there.
func (e *Engine) Copy(dst, src []byte) error {
	c, err := e.ICopy(dst, src)
	if err != nil {
		return err
	}
	return e.Wait(context.Background(), c)
}

// Fill writes the 64-bit little-endian pattern over dst and returns when
// done.
func (e *Engine) Fill(dst []byte, pattern uint64) error {
	c, err := e.IFill(dst, pattern)
	if err != nil {
		return err
	}
	return e.Wait(context.Background(), c)
}

// ICopy starts copying src into dst (len(src) bytes; dst must be at least
// as long) and returns a cookie at once. Neither buffer may be touched
// until the cookie completes. Small requests, and ones whose buffers
// overlap, are copied by the CPU before ICopy returns.
func (e *Engine) ICopy(dst, src []byte) (*Cookie, error) {
	if e.closed.Load() {
		return nil, fmt.Errorf("ioat: engine: %w", ErrClosed)
	}
	n := len(src)
	if len(dst) < n {
		return nil, fmt.Errorf("ioat: copy of %d bytes into a %d-byte destination: %w", n, len(dst), ErrBadRequest)
	}
	if n < e.opts.CPUThreshold || n == 0 || overlaps(dst[:n], src) {
		copy(dst, src)
		e.cpu.Add(1)
		return doneCookie, nil
	}
	head := 0
	if e.opts.HybridHead > 0 && n >= e.opts.HybridMin && e.opts.HybridHead < n {
		head = e.opts.HybridHead
	}
	ck := &Cookie{e: e}
	de, doff, err := e.cache.get(dst[head:n])
	if err != nil {
		return nil, err
	}
	se, soff, err := e.cache.get(src[head:n])
	if err != nil {
		e.cache.put(de)
		return nil, err
	}
	ck.ents = [2]*regEntry{de, se}
	err = e.schedule(ck, n-head, dst[head:n], func(ch Queue, off, l int, tag uint64) error {
		return ch.EnqueueCopy(de.Mapping(), doff+off, se.Mapping(), soff+off, l, tag)
	})
	if err != nil {
		e.release(ck)
		return nil, err
	}
	if head > 0 {
		// The CPU copies the head while the engine copies the rest.
		copy(dst[:head], src[:head])
	}
	return ck, nil
}

// IFill starts filling dst with the 64-bit little-endian pattern (byte i
// of dst gets byte i%8 of the pattern) and returns a cookie.
func (e *Engine) IFill(dst []byte, pattern uint64) (*Cookie, error) {
	if e.closed.Load() {
		return nil, fmt.Errorf("ioat: engine: %w", ErrClosed)
	}
	n := len(dst)
	if n < e.opts.CPUThreshold || n == 0 || !e.chans[0].ch.Info().Fill {
		hw.FillPattern(dst, pattern)
		e.cpu.Add(1)
		return doneCookie, nil
	}
	ck := &Cookie{e: e}
	de, doff, err := e.cache.get(dst)
	if err != nil {
		return nil, err
	}
	ck.ents[0] = de
	err = e.schedule(ck, n, dst, func(ch Queue, off, l int, tag uint64) error {
		return ch.EnqueueFill(de.Mapping(), doff+off, l, bits.RotateLeft64(pattern, -8*(off%8)), tag)
	})
	if err != nil {
		e.release(ck)
		return nil, err
	}
	return ck, nil
}

// schedule places a request of n bytes on channels by the policy; enq
// enqueues bytes [off, off+l) of it on a channel.
func (e *Engine) schedule(ck *Cookie, n int, dst []byte, enq func(ch Queue, off, l int, tag uint64) error) error {
	nch := len(e.chans)
	if (e.opts.Policy == Stripe || e.opts.Policy == Adaptive) && n >= e.opts.StripeMin && nch > 1 {
		lens := make([]int, nch)
		if e.opts.Policy == Adaptive {
			e.refresh()
			e.shares(n, lens)
		} else {
			piece := ((n+nch-1)/nch + 63) &^ 63
			for i, left := 0, n; i < nch; i++ {
				lens[i] = min(piece, left)
				left -= lens[i]
			}
		}
		ck.parts = make([]part, 0, nch)
		off := 0
		for i, l := range lens {
			if l == 0 {
				continue
			}
			ec := e.chans[i]
			tag, err := ec.submit(int64(l), func(tag uint64) error { return enq(ec.ch, off, l, tag) })
			if err != nil {
				return err
			}
			ck.parts = append(ck.parts, part{c: ec, tag: tag})
			off += l
		}
		return nil
	}
	var ec *echan
	switch e.opts.Policy {
	case RoundRobin:
		ec = e.chans[int(e.rr.Add(1)-1)%nch]
	case Dedicated:
		ec = e.chans[int((addrOf(dst)>>21)%uintptr(nch))]
	case Adaptive:
		e.refresh()
		ec = e.earliest(n)
	default:
		ec = e.leastLoaded()
	}
	tag, err := ec.submit(int64(n), func(tag uint64) error { return enq(ec.ch, 0, n, tag) })
	if err != nil {
		return err
	}
	ck.inl[0] = part{c: ec, tag: tag}
	ck.parts = ck.inl[:1]
	return nil
}

func (e *Engine) leastLoaded() *echan {
	best := e.chans[0]
	bl := best.load.Load()
	for _, ec := range e.chans[1:] {
		if l := ec.load.Load(); l < bl {
			best, bl = ec, l
		}
	}
	return best
}

// submit enqueues one request under the channel lock and rings the
// doorbell. When the ring is full it reaps completions and retries, for
// at most a second.
func (ec *echan) submit(n int64, enq func(tag uint64) error) (uint64, error) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if ec.adaptive {
		// Reap first: a queue whose work completed unseen is idle, and
		// its busy time starts with this request.
		ec.reapLocked()
	}
	var deadline time.Time
	for {
		err := enq(ec.next)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrRingFull) {
			return 0, err
		}
		ec.reapLocked()
		if deadline.IsZero() {
			deadline = time.Now().Add(time.Second)
		} else if time.Now().After(deadline) {
			return 0, opErr(ec.ch.Info().Addr, "enqueue", fmt.Errorf("%w for 1s: the engine makes no progress", ErrRingFull))
		}
		ec.mu.Unlock()
		runtime.Gosched()
		ec.mu.Lock()
	}
	tag := ec.next
	ec.next++
	if ec.adaptive {
		ec.markBusy()
	}
	ec.sizes = append(ec.sizes, n)
	ec.load.Add(n)
	ec.ch.Submit()
	return tag, nil
}

// reapLocked collects completions from the channel.
func (ec *echan) reapLocked() {
	var bytes int64
	for {
		n := ec.ch.Poll(ec.comps[:])
		for _, c := range ec.comps[:n] {
			if c.Err != nil {
				ec.failed[c.Tag] = c.Err
			}
			if len(ec.want) > 0 && ec.want[c.Tag] {
				delete(ec.want, c.Tag)
				if c.Err == nil {
					ec.results[c.Tag] = c
				}
			}
			if len(ec.sizes) > 0 {
				bytes += ec.sizes[0]
				ec.load.Add(-ec.sizes[0])
				ec.sizes = ec.sizes[1:]
			}
			ec.done.Store(c.Tag + 1)
		}
		if n < len(ec.comps) {
			break
		}
	}
	if ec.adaptive {
		ec.observed(bytes, ec.load.Load())
	}
}

// poll reaps if nobody else is, and reports whether tag has completed.
func (ec *echan) poll(tag uint64) bool {
	if ec.done.Load() > tag {
		return true
	}
	if ec.mu.TryLock() {
		ec.reapLocked()
		ec.mu.Unlock()
	}
	return ec.done.Load() > tag
}

// takeErr returns and forgets the failure of a completed tag.
func (ec *echan) takeErr(tag uint64) error {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	err, ok := ec.failed[tag]
	if ok {
		delete(ec.failed, tag)
	}
	return err
}

// takeResult returns and forgets the result of a completed compare or
// CRC.
func (ec *echan) takeResult(tag uint64) Completion {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	r := ec.results[tag]
	delete(ec.results, tag)
	return r
}

// Check reports whether the request has completed, and its error if it
// failed. It makes progress on the request's channels itself.
func (e *Engine) Check(c *Cookie) (bool, error) {
	if c.done {
		return true, c.err
	}
	// Every part is polled, not only up to the first unfinished one: a
	// queue's completions are then seen when they happen, which frees its
	// ring and gives the Adaptive policy its true rate.
	done := true
	for _, p := range c.parts {
		done = p.c.poll(p.tag) && done
	}
	if !done {
		return false, nil
	}
	var errs []error
	for _, p := range c.parts {
		if err := p.c.takeErr(p.tag); err != nil {
			errs = append(errs, err)
		}
	}
	c.err = errors.Join(errs...)
	if c.result && c.err == nil {
		r := c.parts[0].c.takeResult(c.parts[0].tag)
		c.diff, c.crc = -1, r.CRC
		if r.Differ {
			c.diff = r.Offset
		}
	}
	e.release(c)
	c.done = true
	return true, c.err
}

func (e *Engine) release(c *Cookie) {
	for i, ent := range c.ents {
		if ent != nil {
			e.cache.put(ent)
			c.ents[i] = nil
		}
	}
}

// Wait blocks until the request completes or ctx is done. It polls for
// SpinWait, then sleeps on the channel's interrupt when the engine has
// interrupts; without them it keeps polling, yielding the CPU, and naps in
// growing sleeps only after a millisecond. When ctx ends
// first, the request goes on: Wait or Check it again later.
func (e *Engine) Wait(ctx context.Context, c *Cookie) error {
	if c.done {
		return c.err
	}
	spinUntil := time.Now().Add(e.opts.SpinWait)
	// Every wait polls first, even for a copy larger than the engine
	// moves within the spin: one that slept on the interrupt at once
	// slept to the sleep's bound per 4 MiB message of an engine
	// ping-pong (36 -> 4 GB/s).
	for i := 0; ; i++ {
		if done, err := e.Check(c); done {
			return err
		}
		if i == 0 && len(c.parts) > 0 {
			c.parts[0].c.spun.Add(1) // not complete at the first look
		}
		if i&15 == 15 {
			if time.Now().After(spinUntil) {
				break
			}
		}
		runtime.Gosched()
	}
	nap := time.Microsecond
	for {
		if done, err := e.Check(c); done {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var pending *echan
		for _, p := range c.parts {
			if p.c.done.Load() <= p.tag {
				pending = p.c
				break
			}
		}
		if pending != nil && pending.ch.Interrupt() != nil {
			if beforeSleep != nil {
				beforeSleep(pending)
			}
			pending.sleep(ctx, e.irqWait, func() bool { done, _ := e.Check(c); return done })
			continue
		}
		// No interrupts: poll, yielding the CPU between looks. Go's
		// timers are too coarse for short sleeps, so nap only once the
		// wait has gone on for a millisecond.
		if time.Since(spinUntil) < time.Millisecond {
			runtime.Gosched()
			continue
		}
		time.Sleep(nap)
		if nap < 200*time.Microsecond {
			nap *= 2
		}
	}
}

// beforeSleep, when set (by tests), runs in Wait between its look at the
// request and its sleep on the channel's interrupt: the window another
// waiter's wake-up can fall into.
var beforeSleep func(*echan)

// irqWaitMax bounds one sleep of Wait on a channel's interrupt.
const irqWaitMax = time.Millisecond

// sleep waits until the channel's interrupt fires (at most bound), or
// until the waiter sleeping on it woke, or ctx is done. The first waiter
// re-arms the interrupt and sleeps on it; later ones wait for it to wake
// (see echan.woke). Callers re-check their request afterwards: a wake-up
// is a hint, not a promise.
//
// done reports whether the caller's request completed. The sleeper asks it
// once more after the re-arm, before it sleeps: the caller looked before
// sleep, and the interrupt of a completion that came between that look and
// the re-arm may have been taken by the waiter that slept before (which
// then woke its followers, this caller not yet among them); the re-armed
// interrupt fires only for what completes after it, so without the second
// look this waiter would sleep to its bound with its copy done.
func (ec *echan) sleep(ctx context.Context, bound time.Duration, done func() bool) {
	ec.asleep.Add(1)
	defer ec.asleep.Add(-1)
	ec.wmu.Lock()
	if ec.woke == nil {
		ec.woke = make(chan struct{})
	}
	if ec.sleeper {
		woke := ec.woke
		ec.wmu.Unlock()
		select {
		case <-woke:
		case <-ctx.Done():
		}
		return
	}
	ec.sleeper = true
	ec.wmu.Unlock()
	defer func() {
		ec.wmu.Lock()
		ec.sleeper = false
		close(ec.woke)
		ec.woke = make(chan struct{})
		ec.wmu.Unlock()
	}()
	// Re-arm, then sleep: a completion that came while the interrupt was
	// disarmed fires at once.
	ec.mu.Lock()
	ec.ch.rearm()
	irq := ec.ch.Interrupt()
	ec.mu.Unlock()
	if irq == nil || done() {
		return
	}
	// Whether the sleep lasted its bound is read from the clock: a
	// signal that came late is found by the sleep's last look at the
	// count and returned as if it had woken it.
	until := time.Now().Add(bound)
	var n uint64
	if ctx.Done() == nil {
		// A wait nothing cancels (CopyAsync's): no context timer and
		// no AfterFunc on top of the read deadline.
		n, _ = irq.WaitTimeout(bound)
	} else {
		tctx, cancel := context.WithTimeout(ctx, bound)
		n, _ = irq.Wait(tctx)
		cancel()
	}
	if n > 0 {
		ec.mu.Lock()
		ec.ch.countInterrupt()
		ec.mu.Unlock()
	}
	if ctx.Err() == nil && !time.Now().Before(until) {
		ec.bounded.Add(1)
	}
}

// overlaps reports whether two byte slices share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := addrOf(a), addrOf(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// Compare compares a and b, which must be as long, and returns the
// offset of the first byte that differs, or -1 when they are equal. It
// runs on a DSA work queue of the engine whose OPCAP has memory compare;
// the CPU compares instead when no queue can (CBDMA has no compare) and
// below EngineOptions.CPUThreshold, as for copies.
func (e *Engine) Compare(a, b []byte) (int, error) {
	c, err := e.ICompare(a, b)
	if err != nil {
		return 0, err
	}
	if err := e.Wait(context.Background(), c); err != nil {
		return 0, err
	}
	return c.Diff(), nil
}

// ICompare starts comparing a and b (as Compare) and returns a cookie;
// once it completes, Cookie.Diff has the outcome. Neither buffer may be
// written until then.
func (e *Engine) ICompare(a, b []byte) (*Cookie, error) {
	if e.closed.Load() {
		return nil, fmt.Errorf("ioat: engine: %w", ErrClosed)
	}
	n := len(a)
	if len(b) != n {
		return nil, fmt.Errorf("ioat: compare of a %d-byte buffer with a %d-byte one: give buffers of one length: %w", n, len(b), ErrBadRequest)
	}
	ec := e.resultQueue(func(i Info) bool { return i.Compare })
	if ec == nil || n < e.opts.CPUThreshold || n == 0 {
		e.cpu.Add(1)
		return &Cookie{done: true, result: true, diff: cpuDiff(a, b)}, nil
	}
	ck := &Cookie{e: e, result: true}
	ae, aoff, err := e.cache.get(a)
	if err != nil {
		return nil, err
	}
	be, boff, err := e.cache.get(b)
	if err != nil {
		e.cache.put(ae)
		return nil, err
	}
	ck.ents = [2]*regEntry{ae, be}
	err = e.submitResult(ck, ec, n, func(tag uint64) error {
		return ec.ch.EnqueueCompare(ae.Mapping(), aoff, be.Mapping(), boff, n, tag)
	})
	if err != nil {
		e.release(ck)
		return nil, err
	}
	return ck, nil
}

// CRC32C returns the CRC-32C (Castagnoli) of p continued from seed, as
// crc32.Update(seed, crc32.MakeTable(crc32.Castagnoli), p) does. It runs
// on a DSA work queue of the engine whose OPCAP has CRC generation; the
// CPU computes it instead when no queue can (CBDMA channels do not) and
// below EngineOptions.CPUThreshold, as for copies.
func (e *Engine) CRC32C(seed uint32, p []byte) (uint32, error) {
	c, err := e.ICRC32C(seed, p)
	if err != nil {
		return 0, err
	}
	if err := e.Wait(context.Background(), c); err != nil {
		return 0, err
	}
	return c.CRC(), nil
}

// ICRC32C starts a CRC-32C of p from seed (as CRC32C) and returns a
// cookie; once it completes, Cookie.CRC has the value. p may not be
// written until then.
func (e *Engine) ICRC32C(seed uint32, p []byte) (*Cookie, error) {
	if e.closed.Load() {
		return nil, fmt.Errorf("ioat: engine: %w", ErrClosed)
	}
	n := len(p)
	ec := e.resultQueue(func(i Info) bool { return i.CRC })
	if ec == nil || n < e.opts.CPUThreshold || n == 0 {
		e.cpu.Add(1)
		return &Cookie{done: true, result: true, diff: -1, crc: dsahw.CRC32C(seed, p)}, nil
	}
	ck := &Cookie{e: e, result: true}
	pe, poff, err := e.cache.get(p)
	if err != nil {
		return nil, err
	}
	ck.ents[0] = pe
	err = e.submitResult(ck, ec, n, func(tag uint64) error {
		return ec.ch.EnqueueCRC(pe.Mapping(), poff, n, seed, tag)
	})
	if err != nil {
		e.release(ck)
		return nil, err
	}
	return ck, nil
}

// resultQueue returns the least loaded queue that can, or nil.
func (e *Engine) resultQueue(can func(Info) bool) *echan {
	var best *echan
	var bl int64
	for _, ec := range e.chans {
		if !can(ec.ch.Info()) {
			continue
		}
		if l := ec.load.Load(); best == nil || l < bl {
			best, bl = ec, l
		}
	}
	return best
}

// submitResult places a compare or CRC on one queue (never striped: its
// result is the queue's), asking reapLocked to keep its Completion.
func (e *Engine) submitResult(ck *Cookie, ec *echan, n int, enq func(tag uint64) error) error {
	tag, err := ec.submit(int64(n), func(tag uint64) error {
		if ec.want == nil {
			ec.want, ec.results = map[uint64]bool{}, map[uint64]Completion{}
		}
		ec.want[tag] = true
		err := enq(tag)
		if err != nil {
			delete(ec.want, tag)
		}
		return err
	})
	if err != nil {
		return err
	}
	ck.inl[0] = part{c: ec, tag: tag}
	ck.parts = ck.inl[:1]
	return nil
}

// cpuDiff is the offset of the first byte where a and b differ, or -1.
func cpuDiff(a, b []byte) int {
	for i := 0; i < len(a); {
		l := min(len(a)-i, 4096)
		if !bytes.Equal(a[i:i+l], b[i:i+l]) {
			for j := i; ; j++ {
				if a[j] != b[j] {
					return j
				}
			}
		}
		i += l
	}
	return -1
}
