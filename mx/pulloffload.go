package mx

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// Copy-engine offload of pull replies: the network path's one copy (seed
// 001 §3: Open-MX offloads the copy of large-message fragments from the
// receive buffers into the application's buffer to I/OAT).
//
// With LocalOptions.Engine set, a PULL_REPLY fragment of a message of at
// least BoardOptions.PullEngineMin bytes, and itself of at least
// PullEngineFrag bytes, is not copied by the progress goroutine. Instead
// it holds the transport frame (transport.Transport.Hold: the frame's
// buffer stays valid past the next Recv), starts CopyAsync from the
// frame's payload into the receive buffer, and goes on with the batch and
// the next Recv while the engine copies. Copies are reaped, in order, when
// the next batch is handled (or at once when the receive loop has nothing
// else to do: it does not sleep in Recv while copies run), and each reaped
// copy releases its frame. A pull whose every fragment arrived sends its
// NOTIFY and completes its receive only once the last of its copies is
// reaped, so the sender never frees its buffer and the receiver never sees
// its request complete while the engine still writes into it.
//
// An engine that fails a copy (at the start or at the end) never delivers
// wrong data: the CPU copies that fragment again from the frame, which is
// still held, and PullEngineFallbacks counts it. A pull that ends early
// (timeout, NACK, endpoint or board close) first waits for its copies, and
// Board.Close waits for all of them before it closes the transport, which
// ends every hold. Frames whose transport had to copy them to hold them
// (HoldInfo.Copied: its lendable buffers ran out) are copied by the CPU
// right away: a second copy by the engine would gain nothing.
//
// Where the held frame lies in long-lived DMA memory (HoldInfo.DMA: the
// NIC transport's hugepage packet pool), the engine's registration cache
// maps those pages once and keeps them for every later frame.

// DefaultPullEngineMin is the default of BoardOptions.PullEngineMin: seed
// 003, Table I's switch to the engine at 2 MiB (below it, the receiver's
// caches make the CPU copy faster). The emulated CBDMA and DSA engines,
// whose copies are goroutines on the receiver's own CPUs, pay at no size
// from 256 KiB to 4 MiB (BenchmarkPullEngine; docs/zero-copy.md), so they
// cannot place the switch lower.
const DefaultPullEngineMin = 2 << 20

// DefaultPullEngineFrag is the default of BoardOptions.PullEngineFrag: a
// fragment shorter than 1 KiB costs the engine more in descriptor and
// completion work than the CPU spends copying it (seed 000 §4: very small
// transfers are where the engine's startup cost dominates); a standard
// 1500-byte Ethernet pull reply (1.4 KiB of payload) qualifies.
const DefaultPullEngineFrag = 1024

// maxPullCopies bounds the engine copies in flight on a board: past it,
// the oldest are reaped (waited for) before another starts, so a burst
// never holds more transport buffers than a few receive batches.
const maxPullCopies = 4 * rxBatch

// pullCopy is one pull-reply fragment the engine copies out of a held
// frame. Its requests are waited for (waits) or, with an engine that can
// say without waiting whether a copy finished, polled (polls).
type pullCopy struct {
	pl    *pull
	frame transport.Frame // held
	src   []byte          // the payload, in frame.Data
	off   int             // its offset in the message
	waits []func() error
	polls []func() (bool, error)
	err   error // the first error a poll reported
}

// MemoryPinner is implemented by copy engines that can map memory for DMA
// once and keep it mapped (ioat.Engine does). With one, a board pins the
// long-lived DMA-able memory its transport lends held frames from
// (HoldInfo.DMA) the first time it sees it, so no copy out of it maps
// pages again, and unpins it when it closes, before the transport frees
// that memory.
type MemoryPinner interface {
	// Pin maps mem until unpin is called.
	Pin(mem []byte) (unpin func() error, err error)
}

// CopyPoller is implemented by copy engines that can report, without
// waiting, whether a copy they started has completed (ioat.Engine does:
// ICopy and Check). With one, the receive loop reaps the pull-reply copies
// that are done and leaves the others running, instead of waiting for
// each.
type CopyPoller interface {
	// CopyPoll starts copying src into dst (len(src) bytes) and returns a
	// function that reports whether the copy completed, and its error.
	// Neither buffer may be touched until it reports true.
	CopyPoll(dst, src []byte) (poll func() (done bool, err error), err error)
}

// pullEngineEnv applies GOMX_PULL_ENGINE_MIN and GOMX_PULL_ENGINE_FRAG
// and checks the thresholds (from NewBoard).
func (o *BoardOptions) pullEngineEnv() error {
	for _, v := range []struct {
		env string
		dst *int
		def int
	}{
		{"GOMX_PULL_ENGINE_MIN", &o.PullEngineMin, DefaultPullEngineMin},
		{"GOMX_PULL_ENGINE_FRAG", &o.PullEngineFrag, DefaultPullEngineFrag},
	} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: %s=%q: want a byte count (0 keeps the default %d)", ErrBadOptions, v.env, s, v.def)
			}
			*v.dst = n
		}
		if *v.dst < 0 {
			return fmt.Errorf("%w: %s threshold %d is negative (0 means the default %d)", ErrBadOptions, v.env, *v.dst, v.def)
		}
		if *v.dst == 0 {
			*v.dst = v.def
		}
	}
	return nil
}

// batchFrom tells handleBatchLocked which transport a batch came from: the
// board's own network transport when rx is its source's receive slice.
func (b *Board) batchFrom(rx []transport.Frame) transport.Transport {
	if len(rx) > 0 && len(b.src.rx) > 0 && &rx[0] == &b.src.rx[0] {
		return b.tr
	}
	return nil
}

// offloadReply starts the engine copy of one pull-reply fragment (payload,
// at offset off of the message) if the pull qualifies, and reports whether
// it took the fragment; if not, the caller copies it.
func (pl *pull) offloadReply(off int, payload []byte) bool {
	b := pl.e.b
	eng := b.opts.Local.Engine
	f := b.curFrame
	if eng == nil || f == nil || int(pl.total) < b.opts.PullEngineMin || len(payload) < b.opts.PullEngineFrag {
		return false
	}
	// Where the payload lies in the frame (it is a slice of the frame's
	// Data, so their capacities tell).
	k := cap(f.Data) - cap(payload)
	if k < 0 || k+len(payload) > len(f.Data) || &f.Data[k] != &payload[0] {
		return false
	}
	for len(b.pcopies) >= maxPullCopies {
		b.reapOne()
	}
	info, err := b.tr.Hold(f)
	if err != nil {
		return false
	}
	src := f.Data[k : k+len(payload)]
	if len(info.DMA) > 0 {
		b.pinDMA(eng, info.DMA)
	}
	if info.Copied {
		// The transport copied it to hold it: the CPU copies it from
		// there, and the engine gains nothing.
		pl.e.copies.scatter.Add(uint64(scatterAt(pl.r.segs, off, src)))
		b.tr.Release(f)
		return true
	}
	c := &pullCopy{pl: pl, frame: *f, src: src, off: off}
	b.curFrame = nil // held: the batch loop must not touch it again
	var startErr error
	if off < totalLen(pl.r.segs) {
		n := min(len(src), totalLen(pl.r.segs)-off) // truncation drops the rest
		poller, _ := eng.(CopyPoller)
		startErr = eachPiece(pl.r.segs, off, n, func(d []byte, at int) error {
			if poller != nil {
				p, err := poller.CopyPoll(d, src[at-off:at-off+len(d)])
				if err == nil {
					c.polls = append(c.polls, p)
				}
				return err
			}
			w, err := eng.CopyAsync(d, src[at-off:at-off+len(d)])
			if err == nil {
				c.waits = append(c.waits, w)
			}
			return err
		})
	}
	pl.copying++
	pl.r.engine.Add(1) // its waiters step aside (poll.go)
	pl.e.engCopies.Add(1)
	b.pcopies = append(b.pcopies, c)
	b.wakeTicks() // progress.go
	if startErr != nil {
		b.reapCopy(c, startErr) // waits for what started, then the CPU copies
		b.removeCopy(c)
	}
	return true
}

// pinDMA pins mem with the engine if it can and did not yet (mu held).
func (b *Board) pinDMA(eng CopyEngine, mem []byte) {
	p, ok := eng.(MemoryPinner)
	if !ok || b.closed {
		return
	}
	key := &mem[0]
	if _, done := b.pinned[key]; done {
		return
	}
	if b.pinned == nil {
		b.pinned = make(map[*byte]func() error)
	}
	unpin, err := p.Pin(mem)
	if err != nil {
		unpin = nil // copies map what they need, as for any memory
	}
	b.pinned[key] = unpin
}

// unpinDMA unpins what pinDMA pinned (mu held; from Close, once no copy
// runs, before the transport frees the memory).
func (b *Board) unpinDMA() {
	for k, unpin := range b.pinned {
		if unpin != nil {
			_ = unpin()
		}
		delete(b.pinned, k)
	}
}

// reapOne reaps the oldest copy in flight.
func (b *Board) reapOne() {
	c := b.pcopies[0]
	b.pcopies[0] = nil
	b.pcopies = b.pcopies[1:]
	b.reapCopy(c, nil)
}

// reapPullCopies reaps the copies in flight (at the start of a batch: they
// were started while handling an earlier one). With all set, or an engine
// that cannot be polled, it waits for every one; otherwise it reaps those
// that completed and leaves the others running.
func (b *Board) reapPullCopies(all bool) {
	t0 := b.copyClock()
	if _, ok := b.opts.Local.Engine.(CopyPoller); all || !ok {
		for len(b.pcopies) > 0 {
			b.reapOne()
		}
		b.pcopies = b.pcopies[:0]
	} else {
		keep := b.pcopies[:0]
		for _, c := range b.pcopies {
			if c.polled() {
				b.reapCopy(c, nil)
				continue
			}
			keep = append(keep, c)
		}
		clear(b.pcopies[len(keep):])
		b.pcopies = keep
	}
	b.pcopyN.Store(int32(len(b.pcopies)))
	b.copyClocked(t0)
}

// polled reports whether every request of c completed, dropping those
// that did (and keeping the first error).
func (c *pullCopy) polled() bool {
	k := 0
	for _, p := range c.polls {
		done, err := p()
		if !done {
			c.polls[k] = p
			k++
			continue
		}
		if err != nil && c.err == nil {
			c.err = err
		}
	}
	clear(c.polls[k:])
	c.polls = c.polls[:k]
	return k == 0
}

// copyClock and copyClocked time the receive path's pull-reply copy work
// for benchmarks (Board.timeCopies); they cost one branch otherwise.
func (b *Board) copyClock() time.Time {
	if !b.timeCopies {
		return time.Time{}
	}
	return time.Now()
}

func (b *Board) copyClocked(t0 time.Time) {
	if b.timeCopies {
		b.copyNanos += int64(time.Since(t0))
	}
}

// removeCopy takes c out of the list of copies in flight.
func (b *Board) removeCopy(c *pullCopy) {
	for i, x := range b.pcopies {
		if x == c {
			b.pcopies = append(b.pcopies[:i], b.pcopies[i+1:]...)
			return
		}
	}
}

// reapCopy waits for c's engine requests, copies the fragment with the CPU
// if the engine failed (err, or a request's), releases the frame and, for
// the last copy of a pull whose frames are all in, completes it.
func (b *Board) reapCopy(c *pullCopy, err error) {
	for _, w := range c.waits {
		if werr := w(); werr != nil && err == nil {
			err = werr
		}
	}
	for !c.polled() {
		osYield() // the engine is at work: a poll costs little, a yield less
	}
	if err == nil {
		err = c.err
	}
	pl := c.pl
	e := pl.e
	if err != nil {
		e.copies.scatter.Add(uint64(scatterAt(pl.r.segs, c.off, c.src))) // no engine request runs any more
		e.cnt[PullEngineFallbacks]++
	} else {
		e.copies.engine.Add(uint64(len(c.src)))
		e.cnt[RecvPullEngine]++
	}
	b.tr.Release(&c.frame)
	pl.copying--
	pl.r.engine.Add(-1)
	e.engCopies.Add(-1)
	if pl.copying == 0 && pl.drained && !pl.ending && e.pulls[pl.slot] == pl {
		pl.finish()
	}
}

// waitPullCopies reaps the copies of pl (which is ending) at once.
func (b *Board) waitPullCopies(pl *pull) {
	if pl.copying == 0 {
		return
	}
	keep := b.pcopies[:0]
	for _, c := range b.pcopies {
		if c.pl == pl {
			b.reapCopy(c, nil)
			continue
		}
		keep = append(keep, c)
	}
	clear(b.pcopies[len(keep):])
	b.pcopies = keep
}
