package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/fault"
)

// Match information of the benchmark's messages. The data messages of one
// size all carry tagData; the control messages of a client/server session
// have their own tags, so no control message can match a data receive.
const (
	tagData   uint64 = 0x6d78_0001
	tagDone   uint64 = 0x6d78_0002
	tagParams uint64 = 0x6d78_0003
	tagReady  uint64 = 0x6d78_0004
	matchAll  uint64 = ^uint64(0)
	// The settling round trips (settle) carry tagSettle, the last one
	// tagSettleEnd: one receive matches both (matchSettle), and the
	// responder stops after answering the last.
	tagSettle    uint64 = 0x6d78_0010
	tagSettleEnd uint64 = 0x6d78_0011
	matchSettle  uint64 = ^uint64(1)
)

// defaultSettle is --settle: how long a run makes empty round trips before
// its first size. A busy Go process's monitor thread (sysmon) wakes every
// 20µs (about 80µs with the kernel's timer slack) until it has had 50
// wake-ups in a row with nothing to do, then doubles its sleep up to 10ms:
// about 25ms after the process starts (or last had a goroutine blocked in
// a system call while the other processors were busy). Each wake-up takes
// the CPU from a busy-polling rank bound to it (--bind binds every thread
// of a rank's process to one CPU), and a size measured within those
// milliseconds came out several times slower than the same size measured
// again. Twice that settles it with a margin.
const defaultSettle = 50 * time.Millisecond

// settle makes empty round trips with the peer for at least d, then one
// more that tells the peer to stop (settleReply answers them): it lets the
// runtime settle before the first size is measured, whatever the size's
// iterations. It returns the round trips made.
func (s *side) settle(ctx context.Context, d time.Duration) (int, error) {
	start := time.Now()
	for n := 1; ; n++ {
		tag := tagSettle
		if time.Since(start) >= d {
			tag = tagSettleEnd
		}
		rr, err := s.ep.IRecv(nil, tagSettle, matchSettle, nil)
		if err != nil {
			return n, err
		}
		sr, err := s.ep.ISend(nil, s.peer, tag, nil)
		if err != nil {
			return n, err
		}
		if _, err := sr.Wait(ctx); err != nil {
			return n, fmt.Errorf("settling round trip %d, send: %w", n, err)
		}
		if _, err := rr.Wait(ctx); err != nil {
			return n, fmt.Errorf("settling round trip %d, reply: %w", n, err)
		}
		if tag == tagSettleEnd {
			return n, nil
		}
	}
}

// settleReply answers the peer's settling round trips until the last one.
func (s *side) settleReply(ctx context.Context) error {
	for n := 1; ; n++ {
		rr, err := s.ep.IRecv(nil, tagSettle, matchSettle, nil)
		if err != nil {
			return err
		}
		st, err := rr.Wait(ctx)
		if err != nil {
			return fmt.Errorf("settling round trip %d: %w", n, err)
		}
		sr, err := s.ep.ISend(nil, s.peer, st.Match, nil)
		if err != nil {
			return err
		}
		if _, err := sr.Wait(ctx); err != nil {
			return fmt.Errorf("settling round trip %d, reply: %w", n, err)
		}
		if st.Match == tagSettleEnd {
			return nil
		}
	}
}

// result is one size's figures, for mx or for a baseline.
type result struct {
	Size       int `json:"size"`
	Iterations int `json:"iterations"`
	// Trials is how many timed trials of Iterations round trips a
	// pingpong row ran (--trials), when more than one: its latency and
	// bandwidth are the best trial's.
	Trials    int     `json:"trials,omitempty"`
	LatencyUS float64 `json:"latency_us"`
	// LatencyP99US is half the 99th-percentile round trip (pingpong), of
	// those timed: every one, or every sampleStride-th of a long run.
	LatencyP99US float64 `json:"latency_p99_us,omitempty"`
	// LatencyP50US is half the median round trip (pingpong), of the same
	// round trips: beside the mean, what a typical message costs without
	// the rare slow one (a garbage collection, a descheduled thread).
	LatencyP50US float64 `json:"latency_p50_us,omitempty"`
	// LatencyP10US is half the round trip that a tenth of them beat: the
	// path's own cost, least blurred by a loaded machine descheduling the
	// run's threads (or a virtual machine's vCPUs).
	LatencyP10US float64 `json:"latency_p10_us,omitempty"`
	// LatencyP999US and LatencyMaxUS are half the 99.9th-percentile and
	// half the slowest round trip of those timed: the rare stalls (a
	// spinning goroutine preempted, a garbage collection, a descheduled
	// thread) that the mean carries and the p99 hides.
	LatencyP999US float64 `json:"latency_p999_us,omitempty"`
	LatencyMaxUS  float64 `json:"latency_max_us,omitempty"`
	MBPerS        float64 `json:"mb_per_s"`
	MsgPerS       float64 `json:"msg_per_s,omitempty"`
	Errors        int     `json:"errors"`
	// Baseline is the plain UDP-socket exchange of the same size.
	Baseline *baselineResult `json:"baseline,omitempty"`
	// Raw is the same exchange directly on the run's transport, without
	// mx, when that is not UDP (the raw AF_XDP ping-pong for xdp).
	Raw *baselineResult `json:"raw,omitempty"`
	// Recovery is how mx recovered from the wire's losses during the
	// measured and warmup messages of this size, both endpoints together;
	// nil when the peer is another process.
	Recovery *recovery `json:"recovery,omitempty"`
	// Copies is the payload bytes the CPU copied on each side during the
	// measured and warmup messages of this size (mx.CopyStats); nil when
	// the peer is another process.
	Copies *copies `json:"copies,omitempty"`
	// Faults is what the fault model did to the frames of this size
	// (--loss and the others); nil without fault flags.
	Faults *faultResult `json:"faults,omitempty"`
	// Paired compares mx with the raw exchange trial by trial
	// (--interleave); nil otherwise.
	Paired *paired `json:"paired,omitempty"`
	// rtts are the round trips timed for the percentiles (pingpong),
	// sorted: measureInterleaved pools them over its trials.
	rtts []time.Duration
	// The fields of a run as a job of several processes (job.go).
	jobResult
}

// faultResult is the fault settings and what they did during one size.
type faultResult struct {
	Loss       float64 `json:"loss"`
	Reorder    float64 `json:"reorder"`
	Dup        float64 `json:"dup"`
	Corrupt    float64 `json:"corrupt"`
	Seed       int64   `json:"seed"`
	Frames     uint64  `json:"frames"`
	Dropped    uint64  `json:"dropped"`
	Duplicated uint64  `json:"duplicated"`
	Reordered  uint64  `json:"reordered"`
	Corrupted  uint64  `json:"corrupted"`
}

// faultsBetween is what the model did between two readings of its counts.
func faultsBetween(ff faultFlags, before, after fault.Counts) *faultResult {
	return &faultResult{Loss: ff.loss, Reorder: ff.reorder, Dup: ff.dup, Corrupt: ff.corrupt, Seed: ff.seed,
		Frames: after.Frames - before.Frames, Dropped: after.Dropped - before.Dropped,
		Duplicated: after.Duplicated - before.Duplicated, Reordered: after.Reordered - before.Reordered,
		Corrupted: after.Corrupted - before.Corrupted}
}

// recovery is the loss-recovery counters (mx.FastRetransmits and the
// others) of one size.
type recovery struct {
	FastRetransmits       uint64 `json:"fast_retransmits"`
	TimerRetransmits      uint64 `json:"timer_retransmits"`
	TailProbes            uint64 `json:"tail_probes"`
	DuplicatesReceived    uint64 `json:"duplicates_received"`
	PullFramesRerequested uint64 `json:"pull_frames_rerequested"`
	Asks                  uint64 `json:"asks"`
	PullAsks              uint64 `json:"pull_asks"`
	AskRetransmits        uint64 `json:"ask_retransmits"`
	// EarlyStored is the frames received past a hole and held
	// (mx.EarlyStored): the wire lost or reordered something.
	EarlyStored uint64 `json:"early_stored"`
}

// recoveryBetween sums, over the endpoints, how the loss-recovery counters
// moved from before to after.
func recoveryBetween(before, after []mx.Counters) *recovery {
	d := func(k mx.Counter) uint64 {
		var n uint64
		for i := range after {
			n += after[i].Get(k) - before[i].Get(k)
		}
		return n
	}
	return &recovery{
		FastRetransmits:       d(mx.FastRetransmits),
		TimerRetransmits:      d(mx.TimerRetransmits),
		TailProbes:            d(mx.TailProbes),
		DuplicatesReceived:    d(mx.DupReceived),
		PullFramesRerequested: d(mx.PullFramesRerequested),
		Asks:                  d(mx.TailAsks),
		PullAsks:              d(mx.PullAsks),
		AskRetransmits:        d(mx.AskRetransmits),
		EarlyStored:           d(mx.EarlyStored),
	}
}

// baselineResult is a figure without mx beside an mx result.
type baselineResult struct {
	Transport string  `json:"transport"`
	LatencyUS float64 `json:"latency_us"`
	// LatencyP50US and LatencyP10US are the baseline's as the result's
	// (pingpong over the raw exchanges: UDP sockets and bare AF_XDP).
	LatencyP50US float64 `json:"latency_p50_us,omitempty"`
	LatencyP10US float64 `json:"latency_p10_us,omitempty"`
	MBPerS       float64 `json:"mb_per_s"`
	MsgPerS      float64 `json:"msg_per_s,omitempty"`
	Errors       int     `json:"errors"`
}

// side is one endpoint's end of a measurement: the endpoint, the peer's
// address and the message buffers.
type side struct {
	ep     *mx.Endpoint
	peer   mx.Addr
	sync   bool
	verify bool
	sbufs  [][]byte // one per window slot: a large send is pulled from its buffer until it completes
	rbufs  [][]byte
	ssegs  [][]byte
	rsegs  [][]byte
	// pinned is the thread a busy-polling side is pinned to (place, or a
	// job rank's world.pinned), nil when it is not.
	pinned *pinnedThread
}

func newSide(ep *mx.Endpoint, peer mx.Addr, maxSize, window int, f *benchFlags) *side {
	s := &side{ep: ep, peer: peer, sync: f.sync, verify: f.verify,
		ssegs: make([][]byte, 1), rsegs: make([][]byte, 1)}
	for range max(window, 1) {
		s.sbufs = append(s.sbufs, newBuffer(maxSize, f.aligned))
		s.rbufs = append(s.rbufs, newBuffer(maxSize, f.aligned))
	}
	return s
}

// newBuffer returns n bytes, page-aligned when aligned is set.
func newBuffer(n int, aligned bool) []byte {
	if !aligned {
		return make([]byte, n)
	}
	const page = 4096
	b := make([]byte, n+page)
	off := 0
	if r := int(uintptrOf(b) % page); r != 0 {
		off = page - r
	}
	return b[off : off+n : off+n]
}

// pattern fills b with bytes that depend on the message number, so a
// message delivered into the wrong buffer or out of order is caught.
func pattern(b []byte, msg int) {
	x := uint32(msg)*2654435761 + uint32(len(b))
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
}

// check verifies b against pattern(msg) and returns the first bad offset,
// or -1.
func check(b []byte, msg int) int {
	x := uint32(msg)*2654435761 + uint32(len(b))
	for i := range b {
		x = x*1664525 + 1013904223
		if b[i] != byte(x>>24) {
			return i
		}
	}
	return -1
}

// errVerify reports a message whose bytes differ from what was sent.
var errVerify = errors.New("received bytes differ from the bytes sent")

// send posts one message of size bytes, numbered msg, from window slot k,
// whose previous send must have completed.
func (s *side) send(size, k, msg int, tag uint64) (*mx.Request, error) {
	s.ssegs[0] = s.sbufs[k][:size]
	if s.verify {
		pattern(s.ssegs[0], msg)
	}
	if s.sync {
		return s.ep.ISSend(s.ssegs, s.peer, tag, nil)
	}
	return s.ep.ISend(s.ssegs, s.peer, tag, nil)
}

// post posts a receive of up to size bytes into window slot k.
func (s *side) post(size, k int, tag uint64) (*mx.Request, error) {
	s.rsegs[0] = s.rbufs[k][:size]
	return s.ep.IRecv(s.rsegs, tag, matchAll, nil)
}

// complete waits for a receive in slot k of message msg and checks it.
func (s *side) complete(ctx context.Context, r *mx.Request, size, k, msg int) error {
	st, err := r.Wait(ctx)
	if err != nil {
		return err
	}
	if int(st.XferLength) != size {
		return fmt.Errorf("message %d: received %d bytes, want %d", msg, st.XferLength, size)
	}
	if s.verify {
		if at := check(s.rbufs[k][:size], msg); at >= 0 {
			return fmt.Errorf("message %d of %d bytes, offset %d: %w", msg, size, at, errVerify)
		}
	}
	return nil
}

// pingOnce is one measured or warmup round trip of the initiator. It
// sends first and posts the receive for the reply after, as NetPIPE's
// transmitter calls MPI_Send and then MPI_Recv: the post is not on the
// round trip's critical path, and the reply cannot come before the peer
// has the message, so it finds the receive posted.
func (s *side) pingOnce(ctx context.Context, size, reply, msg int) error {
	sr, err := s.send(size, 0, msg, tagData)
	if err != nil {
		return err
	}
	rr, err := s.post(reply, 0, tagData)
	if err != nil {
		return err
	}
	if _, err := sr.Wait(ctx); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return s.complete(ctx, rr, reply, 0, msg)
}

// pingpong runs the initiator's side of one size: warmup round trips,
// then trials timed trials of iterations round trips each, back to back,
// of size bytes answered with reply bytes. The row's mean is the best
// trial's, as NetPIPE reports the fastest of its trials (its TRIALS) for
// each size; with one trial it is the run's. A trial is timed from its
// own time alone; for the p99, round trips of every trial are timed with
// one read of the monotonic clock each, all of them or, in a long trial,
// every sampleStride-th (time.Now reads the wall clock too, a second clock
// read per round trip that NetPIPE, which times a whole trial, does not
// make). A pinned busy-poller's passes through the scheduler (reschedule,
// one in rescheduleEvery round trips) count in its trial's time but in no
// round trip's.
func (s *side) pingpong(ctx context.Context, size, reply, iterations, warmup, trials int) (result, error) {
	trials = max(trials, 1)
	res := result{Size: size, Iterations: iterations}
	if trials > 1 {
		res.Trials = trials
	}
	stride := sampleStride(iterations)
	rtts := make([]time.Duration, 0, trials*(iterations/stride+1))
	msg := 0
	for ; msg < warmup; msg++ {
		if err := s.pingOnce(ctx, size, reply, msg); err != nil {
			res.Errors++
			return res, fmt.Errorf("round trip %d of %d bytes: %w", msg, size, err)
		}
	}
	best := time.Duration(-1)
	for range trials {
		start := time.Now()
		var t0 time.Duration // since start: when the timed round trip began
		next := 0            // the next round trip to time
		for i := 0; i < iterations; i++ {
			timed := i == next
			if timed && i != 0 && stride > 1 {
				t0 = time.Since(start) // with stride 1, the previous one's end
			}
			if err := s.pingOnce(ctx, size, reply, msg); err != nil {
				res.Errors++
				return res, fmt.Errorf("round trip %d of %d bytes: %w", msg, size, err)
			}
			msg++
			if timed {
				now := time.Since(start)
				rtts = append(rtts, now-t0)
				t0, next = now, next+stride
			}
			if s.pinned.reschedule(msg) {
				t0 = time.Since(start) // the pass is in no round trip's time
			}
		}
		if el := time.Since(start); best < 0 || el < best {
			best = el
		}
	}
	res.setQuantiles(rtts)
	legs := 1
	if reply == size {
		legs = 2
	}
	if iterations > 0 {
		res.LatencyUS = best.Seconds() * 1e6 / float64(2*iterations)
		res.MBPerS = float64(legs*iterations*size) / best.Seconds() / 1e6
	}
	return res, nil
}

// setQuantiles sorts rtts, the round trips timed, keeps them (rtts) and
// sets the percentiles from them.
func (r *result) setQuantiles(rtts []time.Duration) {
	r.rtts = rtts
	if len(rtts) == 0 {
		return
	}
	slices.Sort(rtts)
	r.LatencyP99US = rtts[len(rtts)*99/100].Seconds() * 1e6 / 2
	r.LatencyP50US = rtts[len(rtts)/2].Seconds() * 1e6 / 2
	r.LatencyP10US = rtts[len(rtts)/10].Seconds() * 1e6 / 2
	r.LatencyP999US = rtts[len(rtts)*999/1000].Seconds() * 1e6 / 2
	r.LatencyMaxUS = rtts[len(rtts)-1].Seconds() * 1e6 / 2
}

// rttEvery is the widest stride of the round trips pingpong times one by
// one for the p99, and rttSamples the fewest it times: a run of
// rttSamples*rttEvery round trips or more times every rttEvery-th, a
// shorter one enough of them for rttSamples (every one, under
// 2*rttSamples).
const (
	rttEvery   = 16
	rttSamples = 8192
)

// sampleStride is the stride of the round trips pingpong times for the
// p99 in a run of n.
func sampleStride(n int) int { return min(max(n/rttSamples, 1), rttEvery) }

// pong is the responder's side of one size: it answers warmup+iterations
// messages of size bytes with reply bytes. The reply goes out first and
// the next receive is posted right after, before the wait for the reply's
// send, as NetPIPE's receiver calls MPI_Recv and then MPI_Send (its next
// MPI_Recv posts the next receive): the post is off the round trip's
// critical path, and the next ping, which needs the reply first, finds it
// posted.
func (s *side) pong(ctx context.Context, size, reply, n int) error {
	if n == 0 {
		return nil
	}
	k := 0
	rr, err := s.post(size, k, tagData)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := s.complete(ctx, rr, size, k, i); err != nil {
			return fmt.Errorf("message %d of %d bytes: %w", i, size, err)
		}
		sr, err := s.send(reply, 0, i, tagData)
		if err != nil {
			return err
		}
		if i+1 < n {
			k = (k + 1) % len(s.rbufs)
			if rr, err = s.post(size, k, tagData); err != nil {
				return err
			}
		}
		if _, err := sr.Wait(ctx); err != nil {
			return fmt.Errorf("reply %d: %w", i, err)
		}
		s.pinned.reschedule(i + 1) // not before the first reply
	}
	return nil
}

// stream runs the sender's side of one size: warmup+iterations messages
// with window in flight, then waits for the receiver's done message. Only
// the measured messages are timed: the warmup ones are drained first.
func (s *side) stream(ctx context.Context, size, iterations, warmup, window int) (result, error) {
	res := result{Size: size, Iterations: iterations}
	window = min(window, len(s.sbufs))
	inflight := make([]*mx.Request, 0, window)
	drain := func(keep int) error {
		for len(inflight) > keep {
			if _, err := inflight[0].Wait(ctx); err != nil {
				return err
			}
			inflight = inflight[1:]
		}
		return nil
	}
	done, err := s.post(0, 0, tagDone)
	if err != nil {
		return res, err
	}
	var start time.Time
	for i := 0; i < warmup+iterations; i++ {
		if i == warmup {
			if err := drain(0); err != nil {
				return res, err
			}
			start = time.Now()
		}
		if err := drain(window - 1); err != nil {
			res.Errors++
			return res, fmt.Errorf("message %d of %d bytes: %w", i, size, err)
		}
		r, err := s.send(size, i%window, i, tagData)
		if err != nil {
			return res, err
		}
		inflight = append(inflight, r)
	}
	if err := drain(0); err != nil {
		return res, err
	}
	if _, err := done.Wait(ctx); err != nil {
		return res, fmt.Errorf("waiting for the receiver's done message: %w", err)
	}
	el := time.Since(start)
	if iterations > 0 {
		res.LatencyUS = el.Seconds() * 1e6 / float64(iterations)
		res.MBPerS = float64(iterations*size) / el.Seconds() / 1e6
		res.MsgPerS = float64(iterations) / el.Seconds()
	}
	return res, nil
}

// sink is the receiver's side of a stream: n messages of size bytes with
// window receives posted, then a done message to the sender.
func (s *side) sink(ctx context.Context, size, n, window int) error {
	window = min(window, len(s.rbufs))
	posted := make([]*mx.Request, 0, window)
	next := 0
	for next < n && len(posted) < window {
		r, err := s.post(size, next%window, tagData)
		if err != nil {
			return err
		}
		posted = append(posted, r)
		next++
	}
	for i := 0; i < n; i++ {
		if err := s.complete(ctx, posted[0], size, i%window, i); err != nil {
			return fmt.Errorf("message %d of %d bytes: %w", i, size, err)
		}
		posted = posted[1:]
		if next < n {
			r, err := s.post(size, next%window, tagData)
			if err != nil {
				return err
			}
			posted = append(posted, r)
			next++
		}
	}
	sr, err := s.send(0, 0, 0, tagDone)
	if err != nil {
		return err
	}
	_, err = sr.Wait(ctx)
	return err
}
