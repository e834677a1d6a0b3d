package ioat

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/pci"
)

// An Engine's construction and state: scheduling policies, the Queue
// every kind of hardware queue satisfies, options, opening over devices
// (NewEngine) or open queues (NewEngineQueues), statistics, registered
// buffers and Close. The request path is in engine_request.go.

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
	// Adaptive schedules by each queue's measured completion rate: every
	// queue keeps a moving average of the bytes per second it completes
	// while busy, and a request goes whole to the queue where it would
	// finish first (bytes outstanding plus its own, over that rate). A
	// request of at least StripeMin bytes is cut in proportion to the
	// rates instead, so that every queue that takes a piece finishes it
	// at the same time; a queue whose piece would fall under 64 KiB takes
	// none. A queue not yet measured, or idle and unmeasured for 50 ms,
	// is tried with the next whole request. Over queues of one speed it
	// behaves as LeastLoaded and Stripe; over fast and slow ones (a DSA
	// beside CBDMA channels, a channel slowed by other traffic) it gives
	// each what it can do.
	Adaptive
)

var policyNames = [...]string{"round-robin", "least-loaded", "stripe", "dedicated", "adaptive"}

// String gives the policy's name ("round-robin", "stripe", ...).
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
	return 0, fmt.Errorf("ioat: unknown policy %q (want %s)", s, PolicyList())
}

// PolicyList names every policy, for usage messages: "round-robin,
// least-loaded, ... or adaptive".
func PolicyList() string {
	return strings.Join(policyNames[:len(policyNames)-1], ", ") + " or " + policyNames[len(policyNames)-1]
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
	// EnqueueCompare adds a compare of two buffers and EnqueueCRC a
	// CRC-32C generation; their Completion carries the result.
	// pci.ErrNotSupported when the hardware has none (CBDMA, or a DSA
	// whose OPCAP lacks the operation).
	EnqueueCompare(a *pci.Mapping, aOff int, b *pci.Mapping, bOff, n int, tag uint64) error
	EnqueueCRC(src *pci.Mapping, srcOff, n int, seed uint32, tag uint64) error
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
	domain() pci.DMA
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
	// StripeMin is the smallest request the Stripe and Adaptive policies
	// split (default 256 KiB).
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
	// want marks the tags of compares and CRCs whose Completion
	// reapLocked keeps in results, until Check takes it.
	want    map[uint64]bool
	results map[uint64]Completion

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

	// The Adaptive policy's measure of the queue (rate.go): adaptive
	// turns it on; rate is the moving average of bytes per nanosecond
	// completed while busy (float64 bits, 0 until measured); busyFrom
	// (under mu) is when the queue last went busy or was last reaped,
	// lastMiss when a poll last found its oldest request unfinished;
	// sampled when rate last changed.
	adaptive bool
	rate     atomic.Uint64
	sampled  atomic.Int64
	busyFrom int64
	lastMiss int64
}

// NewEngine opens every channel of each CBDMA device (see ChannelCount)
// and EngineOptions.WQs work queues of each DSA device (OpenDSA), or those
// EngineOptions.ChannelMask selects. The devices must share one DMA
// domain (one VFIO container, or one emulated platform), since buffers are
// mapped once for all channels.
func NewEngine(devs []pci.Device, o EngineOptions) (*Engine, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("ioat: engine with no channels: %w", ErrBadRequest)
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
				e.chans = append(e.chans, e.newChan(q))
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
			e.chans = append(e.chans, e.newChan(ch))
		}
		if opened == 0 {
			return fail(opErr(dev.Address(), "CHANCNT", fmt.Errorf("ChannelMask %#x selects none of the function's %d channels: %w", o.ChannelMask, n, ErrBadRequest)))
		}
	}
	return e, nil
}

// NewEngineQueues builds an Engine over queues already open: the work
// queues of the kernel path (OpenUserWQ), or channels and WQs opened
// by hand. They must share one DMA domain. The Engine owns them from
// then on and closes them with itself; on failure they are closed.
func NewEngineQueues(qs []Queue, o EngineOptions) (*Engine, error) {
	fail := func(err error) (*Engine, error) {
		for _, q := range qs {
			q.Close()
		}
		return nil, err
	}
	if err := o.fill(); err != nil {
		return fail(err)
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("ioat: engine with no queues: %w", ErrBadRequest)
	}
	dma := qs[0].domain()
	for _, q := range qs[1:] {
		if q.domain() != dma {
			return fail(fmt.Errorf("ioat: queues %v and %v are in different DMA domains: an engine maps each buffer once for all its queues: %w", qs[0].Info().Platform, q.Info().Platform, ErrBadRequest))
		}
	}
	e := &Engine{dma: dma, cache: newRegCache(dma, o.CacheBytes), opts: o, irqWait: irqWaitMax}
	for _, q := range qs {
		e.chans = append(e.chans, e.newChan(q))
	}
	return e, nil
}

// newChan wraps a queue for the engine.
func (e *Engine) newChan(q Queue) *echan {
	return &echan{ch: q, failed: map[uint64]error{}, adaptive: e.opts.Policy == Adaptive}
}

// fill sets the defaults of unset options and checks the policy.
func (o *EngineOptions) fill() error {
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
	if o.Policy < RoundRobin || o.Policy > Adaptive {
		return fmt.Errorf("ioat: %v: %w", o.Policy, ErrBadRequest)
	}
	return nil
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
		s[i].Rate = ec.rateBytes()
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
