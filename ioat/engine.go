package ioat

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// Policy chooses the channel(s) a request runs on.
type Policy int

// Scheduling policies.
const (
	// RoundRobin sends each request, whole, to the next channel in turn:
	// the paper's scheme (§3.4).
	RoundRobin Policy = iota
	// LeastLoaded sends each request, whole, to the channel with the fewest
	// bytes outstanding.
	LeastLoaded
	// Stripe cuts a request of at least StripeMin bytes into one piece per
	// channel, so one large copy uses every engine; smaller requests go
	// least-loaded.
	Stripe
	// Dedicated gives each request one channel chosen by its destination
	// address (per 2 MiB), so requests writing the same buffer stay in
	// order on one channel while different buffers spread out.
	Dedicated
)

var policyNames = [...]string{"round-robin", "least-loaded", "stripe", "dedicated"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy parses a policy name as printed by String.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("ioat: unknown policy %q (want round-robin, least-loaded, stripe or dedicated)", s)
}

// Queue is one hardware queue an Engine drives: a CBDMA channel
// (*Channel) or a DSA work queue (*WQ). Both have one owner, who enqueues
// descriptors, submits them once per batch and polls completions into a
// slice; the Engine adds locking, scheduling and waits on top, the same
// for both. The interface is sealed: only this package's queues satisfy
// it.
type Queue interface {
	// EnqueueCopy adds a copy of n bytes (split as the hardware needs);
	// ErrRingFull when there is no room, nothing enqueued.
	EnqueueCopy(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, tag uint64) error
	// EnqueueFill adds a fill with a 64-bit pattern; ErrNoFill when the
	// hardware has none.
	EnqueueFill(dst *pci.Mapping, dstOff, n int, pattern uint64, tag uint64) error
	// EnqueueNull adds an operation that moves nothing and completes in
	// order.
	EnqueueNull(tag uint64) error
	// Submit hands what was enqueued to the hardware.
	Submit()
	// Poll reports completed requests, in order, into out.
	Poll(out []Completion) int
	// Free is how many descriptors can be enqueued now; Outstanding how
	// many are enqueued and not yet reported by Poll.
	Free() int
	Outstanding() int
	// MaxTransfer is the most one descriptor moves.
	MaxTransfer() int
	// Interrupt is the completion interrupt, nil when polling.
	Interrupt() *pci.Interrupt
	// Info and Stats describe the queue.
	Info() Info
	Stats() Stats
	// Close stops the queue; no DMA after it returns.
	Close() error

	rearm()
	countInterrupt()
}

var _ Queue = (*Channel)(nil)

// EngineOptions configures an Engine.
type EngineOptions struct {
	// Channel configures every channel (and every DSA work queue: ring
	// size, interrupts, timeouts, memory).
	Channel Options
	// WQs is how many dedicated work queues the Engine configures on each
	// DSA function (default: one per engine, at most 4 and at most what
	// WQCAP, ENGCAP and GRPCAP allow).
	WQs int
	// Policy picks channels for requests (default RoundRobin).
	Policy Policy
	// CPUThreshold: requests smaller than this many bytes are copied by the
	// CPU at once, because the engine's start-up cost exceeds their copy
	// time (default 16 KiB, the crossover the paper measured; Open-MX
	// defaults to 2 MiB for cache-hot data). Negative: always offload.
	CPUThreshold int
	// HybridHead, when positive, makes requests of at least HybridMin
	// bytes copy their first HybridHead bytes on the CPU while the engine
	// copies the rest: the reader then finds the head in its cache.
	HybridHead int
	// HybridMin is the smallest request hybrid mode applies to (default
	// 1 MiB).
	HybridMin int
	// StripeMin is the smallest request the Stripe policy splits (default
	// 256 KiB).
	StripeMin int
	// CacheBytes bounds the memory kept mapped by the registration cache
	// (default 1 GiB). Registered buffers do not count.
	CacheBytes int64
	// SpinWait is how long Wait polls before it sleeps on the channel's
	// interrupt (or, without interrupts, backs off with short sleeps).
	// Default 20µs.
	SpinWait time.Duration
	// ChannelMask picks which queues of each function the engine drives:
	// bit n for CBDMA channel n, or for DSA work queue n of the WQs
	// configured. Zero, the default, drives every one. A tool that wants
	// one engine per CBDMA channel (to count each channel's work) opens
	// one engine per bit. A DSA is configured whole by the engine that
	// opens it, so its work queues cannot be split among engines: the
	// WQs a mask leaves out are disabled.
	ChannelMask uint32
}

// DefaultEngineOptions returns round-robin scheduling, a 16 KiB CPU
// threshold, no hybrid mode and polling waits.
func DefaultEngineOptions() EngineOptions {
	return EngineOptions{
		Channel: DefaultOptions(), Policy: RoundRobin, CPUThreshold: 16 << 10,
		HybridMin: 1 << 20, StripeMin: 256 << 10, CacheBytes: 1 << 30, SpinWait: 20 * time.Microsecond,
	}
}

// Engine spreads copies and fills over several queues (CBDMA channels,
// DSA work queues, or both) and offers the
// paper's asynchronous memory-copy API (§3.2): Copy, ICopy, Check, Wait.
// It accepts registered DMA buffers (Alloc, Register) and arbitrary
// []byte, mapped on demand through a registration cache. An Engine is safe
// for concurrent use.
type Engine struct {
	chans  []*echan
	dma    pci.DMA
	cache  *regCache
	opts   EngineOptions
	rr     atomic.Uint32
	closed atomic.Bool
	// irqWait bounds one sleep on a channel's interrupt (irqWaitMax): a
	// wake-up lost to a reset's vector swap costs at most that much.
	irqWait time.Duration
	cpu     atomic.Uint64 // requests the CPU copied
}

// echan is an Engine's view of one channel: a lock and request
// bookkeeping around the single-owner Channel.
type echan struct {
	ch     Queue
	mu     sync.Mutex
	next   uint64        // tag of the next request
	done   atomic.Uint64 // every tag below this has completed
	load   atomic.Int64  // bytes outstanding
	failed map[uint64]error
	sizes  []int64 // bytes of outstanding requests, in tag order
	comps  [64]Completion

	// The waiters sleeping on the channel's interrupt (sleep). One of
	// them at a time, the sleeper, waits on the eventfd; the others wait
	// for woke, which the sleeper closes when it wakes. One interrupt so
	// wakes every waiter whose request it completed, as an MSI-X handler
	// wakes its whole wait queue: the eventfd's count goes to one reader,
	// and waiters that each read it themselves slept on, each until its
	// bounded wait ran out, once a sibling took the signal.
	wmu     sync.Mutex
	sleeper bool
	woke    chan struct{}
	asleep  atomic.Int32  // waiters in sleep now
	spun    atomic.Uint64 // Engine.Wait calls that polled a request of it (Stats.SpunWaits)
	bounded atomic.Uint64 // sleeps that ended by their bound (Stats.BoundWakes)
}

// NewEngine opens every channel of each CBDMA device (see ChannelCount)
// and EngineOptions.WQs work queues of each DSA device (OpenDSA), or those
// EngineOptions.ChannelMask selects. The devices must share one DMA
// domain (one VFIO container, or one emulated platform), since buffers are
// mapped once for all channels.
func NewEngine(devs []pci.Device, o EngineOptions) (*Engine, error) {
	d := DefaultEngineOptions()
	if o.CPUThreshold == 0 {
		o.CPUThreshold = d.CPUThreshold
	}
	if o.HybridMin == 0 {
		o.HybridMin = d.HybridMin
	}
	if o.StripeMin == 0 {
		o.StripeMin = d.StripeMin
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = d.CacheBytes
	}
	if o.SpinWait == 0 {
		o.SpinWait = d.SpinWait
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("ioat: engine with no channels: %w", ErrBadRequest)
	}
	if o.Policy < RoundRobin || o.Policy > Dedicated {
		return nil, fmt.Errorf("ioat: %v: %w", o.Policy, ErrBadRequest)
	}
	dma := devs[0].DMA()
	for _, dev := range devs[1:] {
		if dev.DMA() != dma {
			return nil, fmt.Errorf("ioat: %s and %s are in different DMA domains: open all channels from one vfio.Container: %w", devs[0].Address(), dev.Address(), ErrBadRequest)
		}
	}
	e := &Engine{dma: dma, cache: newRegCache(dma, o.CacheBytes), opts: o, irqWait: irqWaitMax}
	fail := func(err error) (*Engine, error) {
		for _, ec := range e.chans {
			ec.ch.Close()
		}
		return nil, err
	}
	for _, dev := range devs {
		if IsDSA(dev) {
			wqs, err := OpenDSA(dev, o.WQs, o.Channel)
			if err != nil {
				return fail(err)
			}
			// ChannelMask picks among the WQs configured; the others
			// are disabled at once. Closing them all resets the device.
			var keep []*WQ
			var closeErr error
			for i, q := range wqs {
				if o.ChannelMask != 0 && o.ChannelMask&(1<<i) == 0 {
					closeErr = errors.Join(closeErr, q.Close())
					continue
				}
				keep = append(keep, q)
			}
			if closeErr != nil {
				for _, q := range keep {
					q.Close()
				}
				return fail(closeErr)
			}
			if len(keep) == 0 {
				return fail(opErr(dev.Address(), "WQCFG", fmt.Errorf("ChannelMask %#x selects none of the DSA's %d work queues: %w", o.ChannelMask, len(wqs), ErrBadRequest)))
			}
			for _, q := range keep {
				e.chans = append(e.chans, &echan{ch: q, failed: map[uint64]error{}})
			}
			continue
		}
		// Every channel of every function: one per function on Xeon,
		// CHANCNT of them on older parts, as Linux enumerates them.
		n, err := ChannelCount(dev)
		if err != nil {
			return fail(err)
		}
		opened := 0
		for i := 0; i < n; i++ {
			if o.ChannelMask != 0 && o.ChannelMask&(1<<i) == 0 {
				continue
			}
			opened++
			co := o.Channel
			co.Index = i
			ch, err := Open(dev, co)
			if err != nil {
				return fail(err)
			}
			e.chans = append(e.chans, &echan{ch: ch, failed: map[uint64]error{}})
		}
		if opened == 0 {
			return fail(opErr(dev.Address(), "CHANCNT", fmt.Errorf("ChannelMask %#x selects none of the function's %d channels: %w", o.ChannelMask, n, ErrBadRequest)))
		}
	}
	return e, nil
}

// Queues returns the engine's queues (channels and work queues), for
// Info and Stats. Do not enqueue on them directly while the engine runs.
func (e *Engine) Queues() []Queue {
	qs := make([]Queue, len(e.chans))
	for i, ec := range e.chans {
		qs[i] = ec.ch
	}
	return qs
}

// Channels returns the engine's CBDMA channels (not its DSA work queues),
// for Info and Stats. Do not enqueue on them directly while the engine
// runs.
func (e *Engine) Channels() []*Channel {
	var cs []*Channel
	for _, ec := range e.chans {
		if c, ok := ec.ch.(*Channel); ok {
			cs = append(cs, c)
		}
	}
	return cs
}

// ChannelStats returns each channel's counters, taken under the channel's
// lock.
func (e *Engine) ChannelStats() []Stats {
	s := make([]Stats, len(e.chans))
	for i, ec := range e.chans {
		ec.mu.Lock()
		s[i] = ec.ch.Stats()
		ec.mu.Unlock()
		s[i].SpunWaits = ec.spun.Load()
		s[i].BoundWakes = ec.bounded.Load()
	}
	return s
}

// CacheStats reports the registration cache.
func (e *Engine) CacheStats() CacheStats { return e.cache.stats() }

// CPUCopies counts requests the CPU handled (below the threshold, or
// overlapping source and destination).
func (e *Engine) CPUCopies() uint64 { return e.cpu.Load() }

// Options returns the engine's effective options.
func (e *Engine) Options() EngineOptions { return e.opts }

// Buffer is memory registered with an engine for DMA: requests on it need
// no mapping.
type Buffer struct {
	e      *Engine
	b      []byte
	region *hugepage.Region
	entry  *regEntry
}

// Bytes returns the buffer's memory.
func (b *Buffer) Bytes() []byte { return b.b }

// Degraded says why the buffer is not on hugepages ("" when it is).
func (b *Buffer) Degraded() string {
	if b.region == nil {
		return ""
	}
	return b.region.Degraded()
}

// Close unregisters the buffer and frees it if the engine allocated it.
// Requests on it must have completed.
func (b *Buffer) Close() error {
	if b.entry == nil {
		return nil
	}
	err := b.e.cache.unregister(b.entry)
	if err != nil {
		return err
	}
	b.entry = nil
	if b.region != nil {
		return b.region.Close()
	}
	return nil
}

// Alloc allocates n bytes of hugepage memory and registers it. On a DMA
// domain that accepts pageable memory (the emulated model's), memory the
// locked-memory limit refuses to lock is ordinary pageable memory
// (Buffer.Degraded says so).
func (e *Engine) Alloc(n int) (*Buffer, error) {
	o := e.opts.Channel.Memory
	o.AllowPageable = o.AllowPageable || pci.AcceptsPageable(e.dma)
	r, err := hugepage.Alloc(n, o)
	if err != nil {
		return nil, err
	}
	b := r.Bytes()[:n:n]
	ent, err := e.cache.register(b)
	if err != nil {
		r.Close()
		return nil, err
	}
	return &Buffer{e: e, b: b, region: r, entry: ent}, nil
}

// Register maps b for DMA until the Buffer is closed. b must stay
// referenced by the caller meanwhile.
func (e *Engine) Register(b []byte) (*Buffer, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("ioat: register an empty buffer: %w", ErrBadRequest)
	}
	ent, err := e.cache.register(b)
	if err != nil {
		return nil, err
	}
	return &Buffer{e: e, b: b, entry: ent}, nil
}

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
}

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
	if e.opts.Policy == Stripe && n >= e.opts.StripeMin && nch > 1 {
		piece := ((n+nch-1)/nch + 63) &^ 63
		ck.parts = make([]part, 0, nch)
		for i, off := 0, 0; off < n; i++ {
			l := piece
			if off+l > n {
				l = n - off
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
	ec.sizes = append(ec.sizes, n)
	ec.load.Add(n)
	ec.ch.Submit()
	return tag, nil
}

// reapLocked collects completions from the channel.
func (ec *echan) reapLocked() {
	for {
		n := ec.ch.Poll(ec.comps[:])
		for _, c := range ec.comps[:n] {
			if c.Err != nil {
				ec.failed[c.Tag] = c.Err
			}
			if len(ec.sizes) > 0 {
				ec.load.Add(-ec.sizes[0])
				ec.sizes = ec.sizes[1:]
			}
			ec.done.Store(c.Tag + 1)
		}
		if n < len(ec.comps) {
			return
		}
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

// Check reports whether the request has completed, and its error if it
// failed. It makes progress on the request's channels itself.
func (e *Engine) Check(c *Cookie) (bool, error) {
	if c.done {
		return true, c.err
	}
	for _, p := range c.parts {
		if !p.c.poll(p.tag) {
			return false, nil
		}
	}
	var errs []error
	for _, p := range c.parts {
		if err := p.c.takeErr(p.tag); err != nil {
			errs = append(errs, err)
		}
	}
	c.err = errors.Join(errs...)
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

// Close waits up to a second for outstanding requests, then closes every
// channel (no DMA after it returns) and unmaps cached buffers.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	var errs []error
	deadline := time.Now().Add(time.Second)
	for _, ec := range e.chans {
		ec.mu.Lock()
		for ec.ch.Outstanding() > 0 && time.Now().Before(deadline) {
			ec.reapLocked()
			ec.mu.Unlock()
			runtime.Gosched()
			ec.mu.Lock()
		}
		errs = append(errs, ec.ch.Close())
		ec.reapLocked()
		ec.mu.Unlock()
	}
	errs = append(errs, e.cache.close())
	return errors.Join(errs...)
}

// overlaps reports whether two byte slices share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := addrOf(a), addrOf(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
