package mx

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/gomx-dev/gomx/transport/shm"
)

// Copy-engine offload of the single copy (seed 003 §3.3, Fig. 11).
//
// With LocalOptions.Engine set, a receiver copies a large message out of
// the sender's shared segment (shmpool.go) with the engine instead of the
// CPU when the message is at least EngineMin bytes (LargeAuto) or always
// (LargeEngine). mx knows the engine only through CopyEngine, which
// ioat.Engine satisfies whether its channels are VFIO devices or the
// emulated model.
//
// The engine reads and writes through an IOMMU: both buffers must be
// mapped (pinned) into its DMA domain, which costs far more per page than
// copying it. Three things keep that cost off the critical path:
//
//   - Deferred, overlapped pinning: the message is cut into chunks of 1,
//     2, 4, ... up to 1024 pages (4 KiB), and each chunk is handed to the
//     engine as soon as it is mapped, so the engine copies chunk k while
//     chunk k+1 is being mapped; the first bytes move after one page is
//     mapped, not after the whole buffer.
//   - The engine's registration cache keeps the mappings for the next
//     message on the same memory. It is invalidated when the memory goes:
//     the transport calls CopyEngine.Invalidate on a peer's segment just
//     before unmapping it (a release after FreeShared, or the peer going
//     away), so a later mapping at the same address is never served by a
//     stale translation. Reuse of a pool buffer by its owner keeps the
//     same pages, so the cached mapping stays right and the new bytes are
//     the ones copied.
//   - The copy runs without the board lock, on a goroutine of its own, as
//     the CMA copy does (cma.go): other messages of the board progress
//     while the engine works, and the receive completes (and the NOTIFY
//     goes back) when the last chunk is in. The receive belongs to the
//     copy until then; the sender's segment stays mapped meanwhile (the
//     transport unmaps it only after the copy let go of it), and a segment
//     gone before the copy starts (its sender died) sends the receive to
//     the ring pull, or fails it when the sender is gone.
//   - A receive the application tests (Request.Test in a compute loop)
//     costs no goroutine and no wake-up: a Test that meets its RNDV starts
//     the copy itself, and the Tests that follow finish it once the engine
//     is done, while the board's reaper finishes it if they stop
//     (enginereap.go).
//   - Failures never deliver wrong data: if the engine fails any chunk
//     (a channel error, a mapping refused), the receiver waits for every
//     chunk it started, then copies the whole message with the CPU from
//     the sender's segment, which the sender holds until the NOTIFY; the
//     fallback is counted (EngineFallbacks).
//
// EngineNoOverlap and EngineNoCache turn each effect off, for measuring
// them apart.
//
// The same engine also takes the network path's one copy: pull replies of
// large messages, copied from held transport frames into the receive
// buffer while the progress goroutine keeps receiving (pulloffload.go,
// BoardOptions.PullEngineMin and PullEngineFrag, counters RecvPullEngine
// and PullEngineFallbacks).

// CopyEngine is a DMA copy engine mx can offload copies to; ioat.Engine
// implements it.
type CopyEngine interface {
	// CopyAsync starts copying src into dst (len(src) bytes) and returns
	// a function that waits for the copy and reports its error. Neither
	// buffer may be touched until it returns.
	CopyAsync(dst, src []byte) (wait func() error, err error)
	// Invalidate drops the engine's cached DMA mappings of memory that
	// overlaps mem, which is about to be unmapped or reused, and reports
	// how many it dropped.
	Invalidate(mem []byte) int
}

// DefaultEngineMin is the default of LocalOptions.EngineMin: seed 003,
// Table I (I/OAT above 2 MiB between processes).
const DefaultEngineMin = 2 << 20

// Chunks of the overlapped pinning: 1 page first, doubling to 1024.
const (
	pinFirst = 4096
	pinLast  = 1024 * 4096
)

// engineEnv applies GOMX_SHM_ENGINE_MIN and checks the engine options.
func (o *LocalOptions) engineEnv() error {
	if err := sizeOption(&o.EngineMin, "GOMX_SHM_ENGINE_MIN", "Local.EngineMin", DefaultEngineMin); err != nil {
		return err
	}
	if o.Large == LargeEngine && o.Engine == nil {
		return fmt.Errorf("%w: large-message strategy engine without a copy engine: set LocalOptions.Engine (an ioat.Engine) or choose another GOMX_SHM_LARGE", ErrBadOptions)
	}
	return nil
}

// engineHook makes the shared-memory transports drop the engine's mappings
// of a peer's segment before unmapping it (from NewBoard).
func (b *Board) engineHook() {
	eng := b.opts.Local.Engine
	if eng == nil {
		return
	}
	if tr := b.sharedTransport(); tr != nil {
		tr.OnSegmentUnmap(func(mem []byte) { eng.Invalidate(mem) })
	}
	b.startReaper() // enginereap.go
}

// engineJob is one message's engine requests in flight (offloadStart):
// the chunks' waits and, from an engine that can tell without waiting
// (copyWaitPoller), their polls.
type engineJob struct {
	eng   CopyEngine
	dst   [][]byte
	src   []byte
	waits []func() error
	polls []func() (bool, error) // nil: the engine cannot tell without waiting
	err   error                  // a chunk the engine refused: the rest was not started
}

// copyWaitPoller is a CopyEngine that also reports, without waiting,
// whether a copy completed (ioat.Engine: CopyWaitPoll). Its copies into a
// request the application tests are finished by the Tests (see
// engineReaper).
type copyWaitPoller interface {
	CopyWaitPoll(dst, src []byte) (wait func() error, poll func() (bool, error), err error)
}

// offloadStart hands src to eng for the concatenation of dst (as long as
// src), chunk by chunk with overlapped pinning unless EngineNoOverlap, and
// returns the requests; with poll and an engine that can, each with its
// poll too. offloadFinish completes it.
func (b *Board) offloadStart(eng CopyEngine, dst [][]byte, src []byte, poll bool) *engineJob {
	j := &engineJob{eng: eng, dst: dst, src: src}
	wp, _ := eng.(copyWaitPoller)
	if !poll {
		wp = nil
	}
	overlap := !b.opts.Local.EngineNoOverlap
	pos, chunk := 0, pinFirst
	for pos < len(src) && j.err == nil {
		n := len(src) - pos
		if overlap {
			n = min(n, chunk)
			chunk = min(2*chunk, pinLast)
		}
		j.err = eachPiece(dst, pos, n, func(d []byte, at int) error {
			if wp != nil {
				w, p, err := wp.CopyWaitPoll(d, src[at:at+len(d)])
				if err == nil {
					j.waits, j.polls = append(j.waits, w), append(j.polls, p)
				}
				return err
			}
			w, err := eng.CopyAsync(d, src[at:at+len(d)])
			if err == nil {
				j.waits = append(j.waits, w)
			}
			return err
		})
		pos += n
	}
	return j
}

// done reports, without waiting, whether every request of j has finished
// (j.polls must be set). Newest first: a channel completes its requests in
// order, so while the last is running the look stops there.
func (j *engineJob) done() bool {
	for i := len(j.polls) - 1; i >= 0; i-- {
		if ok, _ := j.polls[i](); !ok {
			return false
		}
	}
	return true
}

// offloadFinish waits for j's requests, then, if the engine failed any,
// copies the whole message with the CPU, and returns the engine's error.
func (b *Board) offloadFinish(j *engineJob) error {
	err := j.err
	// Newest first: an engine completes a channel's requests in order, so
	// once the last one is done the others are too, and their waits return
	// at once. Waiting oldest first would put this goroutine to sleep (or
	// spin it) once per chunk, each wake-up taken from the application's
	// CPU; this way a message costs one.
	for i := len(j.waits) - 1; i >= 0; i-- {
		if werr := j.waits[i](); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		cpuCopy(j.dst, j.src) // no engine request is running any more
	}
	if b.opts.Local.EngineNoCache {
		j.eng.Invalidate(j.src)
		for _, d := range j.dst {
			j.eng.Invalidate(d)
		}
	}
	return err
}

// eachPiece calls fn for each piece of bytes [pos, pos+n) of the
// concatenation of segs that lies in one segment, with its offset.
func eachPiece(segs [][]byte, pos, n int, fn func(d []byte, at int) error) error {
	base := 0
	for _, s := range segs {
		if n == 0 {
			break
		}
		end := base + len(s)
		if pos < end && pos >= base {
			k := min(end-pos, n)
			if err := fn(s[pos-base:pos-base+k], pos); err != nil {
				return err
			}
			pos += k
			n -= k
		}
		base = end
	}
	return nil
}

// engineCopy is an engine copy in flight: a matched large receive being
// filled from the sender's shared segment seg (its entry: offset off, n
// bytes) by the copy engine, outside the board lock.
type engineCopy struct {
	e             *Endpoint
	r             *Request
	p             *partner
	match         uint64
	msgLen, total uint32
	ref           rndvRef
	tr            *shm.Transport
	seg           uint32
	off, n        uint64
	dst           [][]byte

	job     *engineJob
	release func()      // gives the sender's segment back (shm.Transport.HoldPeerSegment)
	claimed atomic.Bool // handed off: a Test or the reaper is finishing it
	byTest  bool        // a Test finishes it (EngineByTests)
}

// startEngineCopy hands c's receive to a goroutine that starts the engine
// copy (mapping the buffers may take a while) and then completes it or
// hands it off (engineReaper). b.mu held.
func (e *Endpoint) startEngineCopy(c *engineCopy) {
	c.e = e
	b := e.b
	b.copies.Add(1)
	c.r.engine.Add(1)
	e.engCopies.Add(1)
	if rp := b.reaper; rp != nil && c.r.tested.Load() {
		// Counted before the look at testing: a Test that ends after
		// the look sees the count (endTest, enginereap.go).
		rp.startsN.Add(1)
		if rp.testing.Load() > 0 {
			rp.starts = append(rp.starts, c) // a Test starts it
			return
		}
		rp.startsN.Add(-1)
	}
	go c.run()
}

// run starts the copy; then, for a receive the application tests with an
// engine that can tell without waiting whether a copy completed, it hands
// the copy to the Tests and the board's reaper (engineReaper) and returns,
// else it waits for the engine and finishes. A segment that went away
// meanwhile sends the receive to the ring pull.
func (c *engineCopy) run() {
	b := c.e.b
	mem, release, ok := c.tr.HoldPeerSegment(c.p.nic, c.seg)
	var start, end uint64
	if ok {
		if start, end, ok = sharedSource(c.off, c.n, c.ref.off, c.total, len(mem)); !ok {
			release()
		}
	}
	if !ok {
		c.finish(false, nil)
		return
	}
	c.release = release
	c.job = b.offloadStart(b.opts.Local.Engine, c.dst, mem[start:end], b.reaper != nil && c.r.tested.Load())
	if c.job.polls != nil {
		b.reaper.handOff(c) // a chunk refused (job.err) is finished there too
		return
	}
	c.finish(true, b.offloadFinish(c.job))
}

// finish gives the segment back, then completes the receive and notifies
// the sender (copied: the data is in, by the engine or, after err, the
// CPU), or sends it to the ring pull.
func (c *engineCopy) finish(copied bool, err error) {
	e := c.e
	b := e.b
	defer b.copies.Done()
	if c.release != nil {
		c.release()
		c.release = nil
	}
	// The engine is done with it: waiters may poll again (poll.go).
	c.r.engine.Add(-1)
	e.engCopies.Add(-1)
	b.mu.Lock()
	defer b.unlock()
	b.setNow()
	switch {
	case e.closed:
		e.complete(c.r, ErrEndpointClosed)
	case !copied && c.p.dead:
		e.complete(c.r, ErrUnreachable)
	case !copied:
		e.ringPull(c.r, c.p, c.match, c.msgLen, c.total, c.ref)
	default:
		if err != nil {
			e.cnt[EngineFallbacks]++ // the CPU copied it (offloadFinish)
		} else {
			e.cnt[RecvEngine]++
		}
		if c.byTest {
			e.cnt[EngineByTests]++
		}
		c.p.sendNotify(c.total, c.ref.id, c.ref.seq)
		e.finishRecv(c.r, c.p, c.match, c.msgLen, c.total)
	}
}

// sizeOption applies the byte count in the environment variable env to
// *v, checks it (field names it in the error) and puts def in place of 0.
func sizeOption(v *int, env, field string, def int) error {
	if s := os.Getenv(env); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: %s=%q: want a byte count (0 keeps the default %d)", ErrBadOptions, env, s, def)
		}
		*v = n
	}
	if *v < 0 {
		return fmt.Errorf("%w: %s %d is negative", ErrBadOptions, field, *v)
	}
	if *v == 0 {
		*v = def
	}
	return nil
}
