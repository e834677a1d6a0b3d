package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/cpuclock"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/nic"
)

// overlapNotes is the help of overlap.
const overlapNotes = `How much of the processor the application keeps while messages move,
between ranks 0 and 1 of a job (--procs 2 by default without a launcher).

First EMP's Table 2 (Shivam, Wyckoff and Panda, SC 2001): both ranks post
5 receives of 10 KiB, post 5 sends of 10 KiB, compute for a while, then wait
for all ten; post_send_us and post_recv_us are the mean time one post takes,
wait_us the time the wait for the whole batch takes after the computation,
total_us their sum as the paper's table adds them (one send, one receive,
one wait).

Then RMPP's processor availability (Maccabe et al.; netperf's method,
adapted to MPI): per size, rank 0 runs a fixed amount of computation in
slices, and between slices tests whether its ping-pong exchange with rank 1
has completed, starting the next one when it has. availability is the time
the computation takes when rank 1 only consumes the first message, over the
time it takes while every message is answered: 1 when moving the messages
costs rank 0 nothing, lower as the library takes the processor away.
MB/s is the one-way payload rate the exchange reached meanwhile; preempted
counts the times the kernel preempted rank 0's computing thread (which
keeps one thread throughout) while every message was answered: the other
threads of its CPU taking it. With --progress-cpu N those other threads,
which run mx's progress and the Go runtime, run on CPU N during the
computation, as an MPI progress thread gets a core of its own. runq_ms is how long that thread waited for its CPU
(runnable, on the run queue) in the answered run / the quiet run: tens of
milliseconds mean other work loaded the host, and the ratio measured the
scheduler's fairness more than the library. Both ranks send a pattern:
rank 0 checks the last answer of each run, and with --verify rank 1 checks
every message.

With --transport (and its wire's flags, as pingpong and stream take them)
ranks 0 and 1 are two boards of this process over that wire instead of two
processes: over the emulated 82599 pair with --nic-place the NICs read
large messages from the sender's buffer and write them into the
receiver's. Rank 1, both boards' progress and the model's DMA then run on
the host's CPUs beside rank 0's computation, and the availability rows add
the copies both sides' CPUs made per payload byte (a cp/s, a cp/r: rank 0
sending, receiving; b: rank 1) and the pull frames asked for again. With
--wait block they also add own, the availability counted on rank 0's host
threads only, by their CPU clocks: its computing thread's and its board's
progress thread's (kept on a thread of its own) CPU time in the quiet run
over theirs in the answered run, what a host of one CPU would keep with
its NIC and peer elsewhere (above 1 when noise outweighs the
communication); cpu_ms own/rest is the difference (--json splits off
the computing thread's part as own_compute_ms),
and the rest of the process's CPU (rank 1, its board, the models' DMA, the
runtime's other threads) in the answered run. Polling (--wait spin), a
progress goroutine kept on one thread would hand its processor to another
thread and back on every yield, so own is not measured. Over --transport
nic, --wait block also sleeps the NICs' receive waits on their MSI-X
vectors (--nic-interrupts, unless given), and wakes is how many times an
answered exchange woke rank 0's progress thread from a sleep (interrupts
its receive waits consumed and sleeps that ended with nothing to do).
`

// empSize and empBatch are EMP's Table 2 setting.
const (
	empSize  = 10 << 10
	empBatch = 5
)

// computeSink keeps the compute loop from being optimised away. It is
// atomic because both ranks compute in one process when overlap runs them
// as two boards of it (overlapLocal).
var computeSink atomic.Uint64

// compute runs n units of work: a dependent chain of multiplications, a
// few nanoseconds each, touching no memory.
func compute(n int) {
	x := computeSink.Load() | 1
	for range n {
		for range 64 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	computeSink.Store(x)
}

// unitsFor calibrates how many units of compute take about d.
func unitsFor(d time.Duration) int {
	n := 1000
	for range 20 {
		start := time.Now()
		compute(n)
		el := time.Since(start)
		if el >= 2*time.Millisecond {
			return max(1, int(float64(n)*float64(d)/float64(el)))
		}
		n *= 4
	}
	return n
}

// overlap runs EMP's table, then the availability of every size, on
// board k between ranks 0 and 1.
func (w *world) overlap(ctx context.Context, f *benchFlags, k int, strategy string, sizes []int, rep reporter) error {
	if w.job.Rank > 1 {
		// Only ranks 0 and 1 exchange; the others keep the collectives:
		// two barriers, then per size a broadcast and two barriers.
		for i := range 2 + 3*len(sizes) {
			sctx, cancel := context.WithTimeout(ctx, f.timeout)
			var err error
			if i >= 2 && (i-2)%3 == 0 {
				_, err = w.bcast(sctx, nil)
			} else {
				err = w.barrier(sctx)
			}
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	}
	peer := w.peers[k][1-w.job.Rank]
	ep := w.eps[k]
	sctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := w.barrier(sctx); err != nil {
		return err
	}
	batches := max(f.iterations/empBatch, 200)
	if f.iterations == 0 {
		batches = 2000
	}
	before := ep.Counters()
	send, recv, wait, err := empTimings(sctx, ep, peer, strategy, batches, f.warmup)
	if err != nil {
		return fmt.Errorf("overlap: EMP's batches: %w", err)
	}
	m := strategyOf(countersSince(before, ep.Counters()), strategy, w.hostPathTo(k), empSize)
	if err := w.barrier(sctx); err != nil {
		return err
	}
	if w.job.Rank == 0 {
		res := result{Size: empSize, Iterations: batches, LatencyUS: send + recv + wait}
		res.jobResult = jobResult{Kind: "timings", Procs: w.procs(), Strategy: m.Strategy, StrategyAsked: strategy, Fallbacks: m.Fallbacks, Engine: w.engineName, EngineCPU: w.engineCPU,
			PostSendUS: send, PostRecvUS: recv, WaitUS: wait}
		rep.row(res)
	}
	maxSize := 0
	for _, s := range sizes {
		maxSize = max(maxSize, s)
	}
	sbuf, rbuf := newBuffer(maxSize, f.aligned), newBuffer(maxSize, f.aligned)
	sb := [][]byte{sbuf}
	if err := sharedBuffers(ep, strategy, sb); err != nil {
		return err
	}
	sbuf = sb[0]
	// The computation lasts long enough for --iterations exchanges (default
	// 200) at pingpong speed, at least 20 ms: rank 0 measures a round trip
	// of the size first, and both ranks agree on the work.
	slice := max(1, unitsFor(5*time.Microsecond))
	for _, size := range sizes {
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		work, err := w.availabilityWork(sctx, f, ep, peer, sbuf[:size], rbuf[:size])
		if err != nil {
			cancel()
			return fmt.Errorf("overlap: availability at %s: %w", units.Format(int64(size)), err)
		}
		before := ep.Counters()
		var pairBefore pairCounts
		if w.local != nil {
			pairBefore = w.local.counts()
		}
		res, err := w.availability(sctx, ep, peer, sbuf[:size], rbuf[:size], work, slice, f.verify)
		m := strategyOf(countersSince(before, ep.Counters()), strategy, w.hostPathTo(k), size)
		cancel()
		if err != nil {
			return fmt.Errorf("overlap: availability at %s: %w", units.Format(int64(size)), err)
		}
		if w.local != nil {
			after := w.local.counts()
			res.Copies = copiesBetween(pairBefore.copies, after.copies)
			res.Recovery = recoveryBetween(pairBefore.counters[:], after.counters[:])
		}
		if w.job.Rank == 0 {
			res.Procs, res.Strategy, res.StrategyAsked, res.Fallbacks = w.procs(), m.Strategy, strategy, m.Fallbacks
			res.Engine, res.EngineCPU = w.engineName, w.engineCPU
			rep.row(res)
		}
	}
	return nil
}

// procs is the rows' process count: the job's size, or 0 when ranks 0
// and 1 are two boards of this process (overlapLocal).
func (w *world) procs() int {
	if w.inProcess {
		return 0
	}
	return w.job.Size
}

// availabilityWork times a few round trips of the size between ranks 0
// and 1 and returns the compute units of the availability run: enough for
// the exchanges --iterations asks for (default 200), at least 20 ms and at
// most 10 s. Rank 0 decides; rank 1 follows.
func (w *world) availabilityWork(ctx context.Context, f *benchFlags, ep *mx.Endpoint, peer mx.Addr, sbuf, rbuf []byte) (int, error) {
	const rounds = 5
	start := time.Now()
	for i := range rounds {
		var rr, sr *mx.Request
		var err error
		if rr, err = ep.IRecv([][]byte{rbuf}, tagData, matchAll, nil); err != nil {
			return 0, err
		}
		wait := []*mx.Request{rr}
		if w.job.Rank == 1 {
			if _, err := rr.Wait(ctx); err != nil {
				return 0, fmt.Errorf("calibration %d: %w", i, err)
			}
			wait = nil
		}
		if sr, err = ep.ISend([][]byte{sbuf}, peer, tagData, nil); err != nil {
			return 0, err
		}
		for _, r := range append(wait, sr) {
			if _, err := r.Wait(ctx); err != nil {
				return 0, fmt.Errorf("calibration %d: %w", i, err)
			}
		}
	}
	rtt := time.Since(start) / rounds
	n := f.iterations
	if n == 0 {
		n = 200
	}
	d := min(max(time.Duration(n)*rtt, 20*time.Millisecond), 10*time.Second)
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(unitsFor(d)))
	got, err := w.bcast(ctx, msg[:])
	if err != nil || len(got) != 8 {
		return 0, fmt.Errorf("agreeing on the work: %v (%d bytes)", err, len(got))
	}
	return int(binary.BigEndian.Uint64(got)), nil
}

// empTimings runs batches (after warmup ones) of empBatch receives, then
// empBatch sends, a computation, and one wait for the ten, on both ranks,
// and returns the mean time of one send post, one receive post and one
// wait for a batch, in microseconds. The sends come from the board's
// shared pool when strategy sends from it.
func empTimings(ctx context.Context, ep *mx.Endpoint, peer mx.Addr, strategy string, batches, warmup int) (send, recv, wait float64, err error) {
	sbufs, rbufs := make([][]byte, empBatch), make([][]byte, empBatch)
	for i := range sbufs {
		sbufs[i], rbufs[i] = make([]byte, empSize), make([]byte, empSize)
	}
	if err := sharedBuffers(ep, strategy, sbufs); err != nil {
		return 0, 0, 0, err
	}
	// The computation gives the peer time to post and send: the wait then
	// measures what the library still has to do, as in the paper's
	// asymptote of much computation.
	work := unitsFor(100 * time.Microsecond)
	reqs := make([]*mx.Request, 0, 2*empBatch)
	var tSend, tRecv, tWait time.Duration
	for b := range warmup + batches {
		if b == warmup {
			tSend, tRecv, tWait = 0, 0, 0
		}
		reqs = reqs[:0]
		t0 := time.Now()
		for i := range empBatch {
			r, err := ep.IRecv([][]byte{rbufs[i]}, tagData, matchAll, nil)
			if err != nil {
				return 0, 0, 0, err
			}
			reqs = append(reqs, r)
		}
		t1 := time.Now()
		for i := range empBatch {
			r, err := ep.ISend([][]byte{sbufs[i]}, peer, tagData, nil)
			if err != nil {
				return 0, 0, 0, err
			}
			reqs = append(reqs, r)
		}
		t2 := time.Now()
		compute(work)
		t3 := time.Now()
		for _, r := range reqs {
			if _, err := r.Wait(ctx); err != nil {
				return 0, 0, 0, fmt.Errorf("batch %d: %w", b, err)
			}
		}
		tRecv += t1.Sub(t0)
		tSend += t2.Sub(t1)
		tWait += time.Since(t3)
	}
	n := float64(max(batches, 1))
	return tSend.Seconds() * 1e6 / n / empBatch, tRecv.Seconds() * 1e6 / n / empBatch, tWait.Seconds() * 1e6 / n, nil
}

// availability measures one size (RMPP's Figure 9). Rank 0 computes work
// units in slices, testing its exchange between slices; it runs twice,
// with rank 1 answering every message and with rank 1 consuming only the
// first. Rank 1 serves both runs. Rank 0's computing goroutine keeps one
// thread throughout, and with --progress-cpu its other threads run on that
// CPU meanwhile (progress.go).
//
// Both ranks send pattern(size); rank 0 checks the last answer it got,
// after the computation, and with verify rank 1 checks every message.
func (w *world) availability(ctx context.Context, ep *mx.Endpoint, peer mx.Addr, sbuf, rbuf []byte, work, slice int, verify bool) (res result, err error) {
	res = result{Size: len(sbuf)}
	res.Kind = "availability"
	pattern(sbuf, len(sbuf))
	if w.job.Rank == 0 {
		undo, perr := computeAlone(w.progressCPU)
		if perr != nil {
			return res, perr
		}
		defer func() {
			if uerr := undo(); uerr != nil && err == nil {
				err = uerr
			}
		}()
		res.ProgressCPU = w.progressCPU
	}
	var busy, quiet time.Duration
	// Rank 0's host threads' CPU time in each run, by their clocks: its
	// computing thread's and its boards' progress threads' (w.own), and
	// the rest of the process's in the answered run.
	var own [2]struct{ computing, progress time.Duration }
	var busyRest time.Duration
	for _, answer := range []bool{true, false} {
		if err := w.barrier(ctx); err != nil {
			return res, err
		}
		if w.job.Rank == 1 {
			if err := serveAvailability(ctx, ep, peer, sbuf, rbuf, answer, verify); err != nil {
				return res, err
			}
			continue
		}
		clear(rbuf)
		preempted, runQueue := threadSched()
		// computeAlone locked this goroutine to its thread: its clock
		// is the computation's.
		computing, progress, all := cpuclock.Thread(), progressCPU(w.own), cpuTime()
		woke := wakeups(w.own)
		el, n, err := pingWhileComputing(ctx, ep, peer, sbuf, rbuf, work, slice, answer)
		if err != nil {
			return res, err
		}
		nowPreempted, nowRunQueue := threadSched()
		o := &own[0] // quiet
		if answer {
			o = &own[1]
		}
		o.computing, o.progress = cpuclock.Thread()-computing, progressCPU(w.own)-progress
		if answer {
			busyRest = cpuTime() - all - o.computing - o.progress
			if n > 0 {
				res.OwnWakeups = float64(wakeups(w.own)-woke) / float64(n)
			}
		}
		waited := 0.0
		if runQueue >= 0 && nowRunQueue >= 0 {
			waited = (nowRunQueue - runQueue).Seconds() * 1e3
		}
		if !answer {
			res.QuietRunQueueMS = waited
		}
		if answer {
			if at := check(rbuf, len(rbuf)); at >= 0 {
				return res, fmt.Errorf("rank 1's last answer: byte %d: %w", at, errVerify)
			}
			if preempted >= 0 && nowPreempted >= 0 {
				res.Preempted = nowPreempted - preempted
			}
			res.RunQueueMS = waited
			busy = el
			res.Iterations = n
			res.MBPerS = float64(n*len(sbuf)) / el.Seconds() / 1e6
		} else {
			quiet = el
		}
	}
	if w.job.Rank == 0 && busy > 0 {
		res.Availability = quiet.Seconds() / busy.Seconds()
		res.LatencyUS = busy.Seconds() * 1e6 / float64(max(res.Iterations, 1)) / 2
		quietOwn, busyOwn := own[0].computing+own[0].progress, own[1].computing+own[1].progress
		if len(w.own) > 0 && own[1].progress > 0 && own[0].computing > 0 && own[1].computing > 0 {
			// As RMPP's hosts of one CPU each: rank 0's threads' CPU
			// in the quiet run over theirs in the answered one. Not
			// clamped: above 1 when the quiet run's threads ran
			// longer, noise larger than the communication.
			res.OwnAvailability = quietOwn.Seconds() / busyOwn.Seconds()
			res.OwnCPUMS = (busyOwn - quietOwn).Seconds() * 1e3
			res.OwnComputeMS = (own[1].computing - own[0].computing).Seconds() * 1e3
			res.RestCPUMS = busyRest.Seconds() * 1e3
		}
	}
	return res, nil
}

// progressCPU is the CPU time of boards' progress threads so far
// (mx.Board.ProgressCPU), summed.
func progressCPU(boards []*mx.Board) time.Duration {
	var sum time.Duration
	for _, b := range boards {
		sum += b.ProgressCPU()
	}
	return sum
}

// wakeups is how many times boards' progress threads have woken from a
// sleep so far, summed: the NIC interrupts their transports' receive
// waits consumed (nic.CounterRxInterrupts) and their sleeps that ended
// with nothing to do (mx.SleepsEmpty).
func wakeups(boards []*mx.Board) uint64 {
	var sum uint64
	for _, b := range boards {
		sum += b.Counters()[mx.SleepsEmpty]
		for _, c := range b.TransportCounters() {
			if c.Name == nic.CounterRxInterrupts {
				sum += c.Value
			}
		}
	}
	return sum
}

// pingWhileComputing is rank 0's loop: it returns how long work units
// took and how many exchanges completed meanwhile.
func pingWhileComputing(ctx context.Context, ep *mx.Endpoint, peer mx.Addr, sbuf, rbuf []byte, work, slice int, answer bool) (time.Duration, int, error) {
	start := time.Now()
	var sr, rr *mx.Request
	sent := 0
	post := func() error {
		var err error
		if rr, err = ep.IRecv([][]byte{rbuf}, tagData, matchAll, nil); err != nil {
			return err
		}
		sent++
		sr, err = ep.ISend([][]byte{sbuf}, peer, tagData, nil)
		return err
	}
	if err := post(); err != nil {
		return 0, 0, err
	}
	n := 0
	for left := work; left > 0; left -= slice {
		compute(min(slice, left))
		if _, done := rr.Test(); done {
			if _, err := sr.Wait(ctx); err != nil {
				return 0, 0, err
			}
			n++
			if err := post(); err != nil {
				return 0, 0, err
			}
		}
	}
	el := time.Since(start)
	// Finish: say how many messages were sent; the peer takes them all and
	// answers the receive still posted here.
	done, err := ep.ISend([][]byte{binary.BigEndian.AppendUint64(nil, uint64(sent))}, peer, tagDone, nil)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range []*mx.Request{sr, rr, done} {
		if _, err := r.Wait(ctx); err != nil {
			return 0, 0, err
		}
	}
	return el, n, nil
}

// The requests of rank 1's serving loop, told apart by their context.
const (
	availData  = "data"  // a receive of rank 0's messages
	availDone  = "done"  // the receive of rank 0's count
	availReply = "reply" // an answer
)

// serveAvailability is rank 1's side: it answers every message (answer)
// or consumes the first only, until it has all the messages rank 0's done
// message counts; then, in the quiet run, it answers the receive rank 0
// still has posted. It sleeps in WaitAny between events (as the board's
// waits do: --wait block makes them sleep, spin polls), so that in the
// quiet run, and between messages, it leaves its CPU to whatever else runs
// there (an engine given its own CPU with --engine-cpu).
//
// With verify it checks every message against pattern(len(rbuf)).
func serveAvailability(ctx context.Context, ep *mx.Endpoint, peer mx.Addr, sbuf, rbuf []byte, answer, verify bool) error {
	var count [8]byte
	if _, err := ep.IRecv([][]byte{count[:]}, tagDone, matchAll, availDone); err != nil {
		return err
	}
	data, err := ep.IRecv([][]byte{rbuf}, tagData, matchAll, availData)
	if err != nil {
		return err
	}
	replies, got, total := 0, 0, -1
	for total < 0 || got < total {
		if total >= 0 && data == nil {
			return fmt.Errorf("rank 0 sent %d messages, and only the first is taken in the quiet run", total)
		}
		st, err := ep.WaitAny(ctx, 0, 0)
		if err != nil && st.Context == nil {
			return err
		}
		switch st.Context {
		case availDone:
			if st.Code != nil || st.XferLength != 8 {
				return fmt.Errorf("rank 0's done message: %v (%d bytes)", st.Code, st.XferLength)
			}
			total = int(binary.BigEndian.Uint64(count[:]))
		case availData:
			if st.Code != nil {
				return st.Code
			}
			got++
			data = nil
			if verify {
				if at := check(rbuf[:st.XferLength], len(rbuf)); int(st.XferLength) != len(rbuf) || at >= 0 {
					return fmt.Errorf("message %d of %d bytes: byte %d: %w", got, st.XferLength, at, errVerify)
				}
			}
			if answer {
				if _, err := ep.ISend([][]byte{sbuf[:st.XferLength]}, peer, tagData, availReply); err != nil {
					return err
				}
				replies++
				if data, err = ep.IRecv([][]byte{rbuf}, tagData, matchAll, availData); err != nil {
					return err
				}
			}
		case availReply:
			if st.Code != nil {
				return st.Code
			}
			replies--
		}
	}
	if data != nil {
		// No message comes for it: cancel it, and take its completion.
		if ok, err := ep.Cancel(data); err != nil || !ok {
			return fmt.Errorf("cancelling the receive no message came for: %v (cancelled: %v)", err, ok)
		}
		if _, ok := data.Test(); !ok {
			return fmt.Errorf("the cancelled receive did not complete")
		}
	}
	if !answer {
		if _, err := ep.ISend(nil, peer, tagData, availReply); err != nil {
			return err
		}
		replies++
	}
	for ; replies > 0; replies-- {
		st, err := ep.WaitAny(ctx, 0, 0)
		if err != nil {
			return err
		}
		if st.Context != availReply {
			return fmt.Errorf("rank 1 waited for its answers and got a %v request", st.Context)
		}
	}
	return nil
}
