package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// The raw baseline carries a message directly in transport frames, with no
// message layer: no matching, sequence numbers, acknowledgements or resends.
// Over a udp transport it is the plain UDP-socket exchange every mx result
// is compared with; over xdp it is the raw AF_XDP ping-pong.
//
// A message of n bytes travels as ceil(n/chunk) frames (one empty frame for
// n = 0), each with a 16-byte header:
//
//	0 seq    uint32  message number, increasing; frames of older messages are ignored
//	4 total  uint32  message length
//	8 off    uint32  offset of this frame's payload in the message
//	12 reply uint32  length the responder answers with, or rawEnd
//
// A message whose reply field is rawEnd ends a run: a ping-pong responder
// stops, and a stream sink answers it with an empty message of the same seq
// whose reply field is the number of whole messages it received. A lost frame
// shows as a round trip that times out: it is counted as an error and the
// next round trip starts with a new seq.
const rawHeader = 16

// rawEnd in the reply field marks the message that ends a run.
const rawEnd = ^uint32(0)

// rawWait is how long one round trip may take before it counts as lost.
const rawWait = time.Second

// errRawLost reports a message that did not arrive whole in time, and
// errRawEnd the end-of-run message.
var (
	errRawLost    = errors.New("message lost")
	errRawEnd     = errors.New("end of run")
	errRawAborted = errors.New("the other side stopped")
)

// rawSide is one side of a raw exchange: a transport, the peer, buffers,
// and the sequence state that persists across the sizes of a session.
type rawSide struct {
	tr    transport.Transport
	peer  transport.NICID
	chunk int
	spin  bool
	in    []transport.Frame
	out   []transport.Frame
	buf   []byte // payload source on send, assembly buffer on receive
	frame []byte // one frame's scratch
	seq   uint32 // last seq sent
	last  uint32 // newest seq received whole; older frames are stale
	// abort, when closed, ends a wait: the other side has failed.
	abort <-chan struct{}
}

func newRawSide(tr transport.Transport, peer transport.NICID, maxSize int, spin bool) (*rawSide, error) {
	chunk := tr.MTU() - rawHeader
	if chunk <= 0 {
		return nil, fmt.Errorf("transport MTU %d is too small for the %d-byte baseline header", tr.MTU(), rawHeader)
	}
	return &rawSide{
		tr: tr, peer: peer, chunk: chunk, spin: spin,
		in:    make([]transport.Frame, 64),
		out:   make([]transport.Frame, 1),
		buf:   make([]byte, max(maxSize, 1)),
		frame: make([]byte, tr.MTU()),
	}, nil
}

// send transmits message seq of size bytes from s.buf with the given reply
// field.
func (s *rawSide) send(seq uint32, size int, reply uint32) error {
	off := 0
	for {
		n := min(s.chunk, size-off)
		f := s.frame[:rawHeader+n]
		binary.BigEndian.PutUint32(f[0:], seq)
		binary.BigEndian.PutUint32(f[4:], uint32(size))
		binary.BigEndian.PutUint32(f[8:], uint32(off))
		binary.BigEndian.PutUint32(f[12:], reply)
		copy(f[rawHeader:], s.buf[off:off+n])
		s.out[0] = transport.Frame{Peer: s.peer, Data: f}
		if _, err := s.tr.Send(s.out); err != nil {
			return err
		}
		off += n
		if off >= size {
			return nil
		}
	}
}

// next sends a new message and returns its seq.
func (s *rawSide) next(size int, reply uint32) (uint32, error) {
	s.seq++
	return s.seq, s.send(s.seq, size, reply)
}

// recv waits until message want has arrived whole (want 0: the next newer
// message, whichever it is) and returns its seq, length and reply field.
// It returns errRawEnd for an end-of-run message when want is 0.
func (s *rawSide) recv(want uint32, deadline time.Time) (seq uint32, size int, reply uint32, err error) {
	got := 0
	for {
		wait := time.Duration(0)
		if !s.spin {
			if wait = time.Until(deadline); wait <= 0 {
				return 0, 0, 0, errRawLost
			}
		}
		n, err := s.tr.Recv(s.in, min(wait, 100*time.Millisecond))
		if err != nil {
			return 0, 0, 0, err
		}
		if n == 0 {
			select {
			case <-s.abort:
				return 0, 0, 0, errRawAborted
			default:
			}
			// A spinning side just polls again: it owns its CPU (pinned
			// and locked to its thread, where Gosched would cost a
			// thread handoff per empty poll).
			if s.spin && time.Now().After(deadline) {
				return 0, 0, 0, errRawLost
			}
			continue
		}
		for _, f := range s.in[:n] {
			d := f.Data
			if len(d) < rawHeader {
				continue
			}
			fs := binary.BigEndian.Uint32(d[0:])
			total := int(binary.BigEndian.Uint32(d[4:]))
			off := int(binary.BigEndian.Uint32(d[8:]))
			switch {
			case fs <= s.last || (want != 0 && fs != want):
				continue // stale, or not the message we wait for
			case fs != seq:
				seq, got = fs, 0 // a newer message: an older one was lost
			}
			if off > total || total > len(s.buf) {
				continue
			}
			p := d[rawHeader:]
			p = p[:min(len(p), total-off)] // Ethernet pads short frames

			copy(s.buf[off:], p)
			got += len(p)
			if got >= total {
				s.last = seq
				s.peer = f.Peer // answer whoever sent it (a server learns its client)
				reply = binary.BigEndian.Uint32(d[12:])
				if reply == rawEnd && want == 0 {
					return seq, total, reply, errRawEnd
				}
				return seq, total, reply, nil
			}
		}
	}
}

// rawResult is one size's raw baseline.
type rawResult struct {
	OneWay time.Duration // half the mean round trip; time per message for a stream
	MBPerS float64       // payload throughput, 10^6 bytes per second
	Errors int           // round trips or messages lost
	// P50 and P10 are half the median round trip and half the one a
	// tenth of them beat (pingpong), over the round trips of every trial
	// timed as mx's are (sampleStride), so that they compare with mx's
	// latency_p50_us and latency_p10_us of the same run; rtts holds them.
	P50, P10 time.Duration
	rtts     []time.Duration
}

// setQuantiles sets P50 and P10 from rtts (sorted here).
func (r *rawResult) setQuantiles() {
	if len(r.rtts) == 0 {
		return
	}
	slices.Sort(r.rtts)
	r.P50 = r.rtts[len(r.rtts)/2] / 2
	r.P10 = r.rtts[len(r.rtts)/10] / 2
}

// bestRaw runs a raw ping-pong trials times (--trials) and returns the
// fastest run, as pingpong reports mx's best trial, with the errors of
// every run.
func bestRaw(trials int, run func() (rawResult, error)) (rawResult, error) {
	var best rawResult
	var rtts []time.Duration
	errs := 0
	for t := range max(trials, 1) {
		r, err := run()
		errs += r.Errors
		rtts = append(rtts, r.rtts...)
		if err != nil {
			r.Errors = errs
			return r, err
		}
		if t == 0 || r.OneWay < best.OneWay {
			best = r
		}
	}
	best.Errors = errs
	best.rtts = rtts
	best.setQuantiles()
	return best, nil
}

// rawPing runs warmup+iterations round trips of size bytes, answered with
// reply bytes, then ends the run.
func rawPing(s *rawSide, size, reply, iterations, warmup int) (rawResult, error) {
	var res rawResult
	var start time.Time
	stride := sampleStride(iterations)
	res.rtts = make([]time.Duration, 0, iterations/stride+1)
	var t0 time.Duration // since start: when the timed round trip began
	next := 0            // the next round trip to time
	for i := 0; i < warmup+iterations; i++ {
		if i == warmup {
			start = time.Now()
		}
		m := i - warmup // the timed round trip's number, as in side.pingpong
		timed := m >= 0 && m == next
		if timed && m != 0 && stride > 1 {
			t0 = time.Since(start)
		}
		seq, err := s.next(size, uint32(reply))
		if err != nil {
			return res, err
		}
		if _, _, _, err := s.recv(seq, time.Now().Add(rawWait)); err != nil {
			if !errors.Is(err, errRawLost) {
				return res, err
			}
			res.Errors++
		}
		if timed {
			now := time.Since(start)
			res.rtts = append(res.rtts, now-t0)
			t0, next = now, next+stride
		}
	}
	el := time.Since(start)
	if _, err := s.next(0, rawEnd); err != nil {
		return res, err
	}
	legs := 1
	if reply == size {
		legs = 2
	}
	if iterations > 0 {
		res.OneWay = el / time.Duration(2*iterations)
		res.MBPerS = float64(legs*iterations*size) / el.Seconds() / 1e6
	}
	return res, nil
}

// rawRespond answers messages on s, each with the reply length its header
// asks for, until the end-of-run message (which it consumes, so it cannot
// end the next run), Close, or the time limit.
func rawRespond(s *rawSide, limit time.Duration) error {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		seq, _, reply, err := s.recv(0, time.Now().Add(rawWait))
		switch {
		case errors.Is(err, errRawLost):
			continue
		case errors.Is(err, errRawEnd), errors.Is(err, transport.ErrClosed):
			return nil
		case err != nil:
			return err
		}
		if err := s.send(seq, int(reply), 0); err != nil {
			return err
		}
	}
	return fmt.Errorf("no end of run within %v: the size took longer than --timeout allows; raise --timeout or lower --iterations", limit)
}

// rawSend streams warmup+iterations messages of size bytes as fast as the
// transport takes them, then asks the sink how many whole messages arrived.
// Messages the wire lost are counted as errors: UDP does not resend.
func rawSend(s *rawSide, size, iterations, warmup int) (rawResult, error) {
	var res rawResult
	var start time.Time
	for i := 0; i < warmup+iterations; i++ {
		if i == warmup {
			start = time.Now()
		}
		if _, err := s.next(size, 0); err != nil {
			return res, err
		}
	}
	// The end-of-run message may be lost, and on a loaded machine the sink
	// may not run for a while: ask again until it answers.
	got := -1
	for giveUp := time.Now().Add(30 * time.Second); got < 0 && time.Now().Before(giveUp); {
		seq, err := s.next(0, rawEnd)
		if err != nil {
			return res, err
		}
		_, _, n, err := s.recv(seq, time.Now().Add(50*time.Millisecond))
		switch {
		case err == nil:
			got = int(n)
		case !errors.Is(err, errRawLost):
			return res, err
		}
	}
	el := time.Since(start)
	if got < 0 {
		return res, errors.New("the stream's receiver never answered the end of the run")
	}
	got = min(got-warmup, iterations)
	res.Errors = iterations - max(got, 0)
	if iterations > 0 {
		res.OneWay = el / time.Duration(iterations)
		res.MBPerS = float64(max(got, 0)*size) / el.Seconds() / 1e6
	}
	return res, nil
}

// rawSink counts the whole messages that arrive on s until an end-of-run
// message, which it answers with an empty message of the same seq whose
// reply field is the count. It keeps
// answering repeated end-of-run messages for a moment, in case its answer
// was lost.
func rawSink(s *rawSide, limit time.Duration) error {
	count := 0
	partial := map[uint32]int{}
	deadline := time.Now().Add(limit)
	answered := time.Time{}
	for time.Now().Before(deadline) {
		if !answered.IsZero() && time.Since(answered) > 200*time.Millisecond {
			return nil
		}
		n, err := s.tr.Recv(s.in, 20*time.Millisecond)
		if err != nil {
			if errors.Is(err, transport.ErrClosed) {
				return nil
			}
			return err
		}
		if n == 0 {
			select {
			case <-s.abort:
				return errRawAborted
			default:
			}
		}
		for _, f := range s.in[:n] {
			d := f.Data
			if len(d) < rawHeader {
				continue
			}
			seq := binary.BigEndian.Uint32(d[0:])
			if seq <= s.last {
				continue
			}
			if binary.BigEndian.Uint32(d[12:]) == rawEnd {
				s.last = seq
				s.peer = f.Peer
				binary.BigEndian.PutUint32(s.frame[0:], seq)
				binary.BigEndian.PutUint32(s.frame[4:], 0)
				binary.BigEndian.PutUint32(s.frame[8:], 0)
				binary.BigEndian.PutUint32(s.frame[12:], uint32(count))
				s.out[0] = transport.Frame{Peer: s.peer, Data: s.frame[:rawHeader]}
				if _, err := s.tr.Send(s.out); err != nil {
					return err
				}
				answered = time.Now()
				continue
			}
			total := int(binary.BigEndian.Uint32(d[4:]))
			off := int(binary.BigEndian.Uint32(d[8:]))
			if off > total {
				continue
			}
			partial[seq] += min(len(d)-rawHeader, total-off) // Ethernet pads short frames
			if partial[seq] >= total {
				delete(partial, seq)
				count++
			}
		}
	}
	return fmt.Errorf("stream sink: no end of run within %v: the size took longer than --timeout allows; raise --timeout or lower --iterations", limit)
}

// rawPair is both sides of a raw exchange in this process. Its sides live
// as long as the transports, so message numbers keep increasing across
// sizes and a late frame of one size is never taken for the next.
type rawPair struct {
	a, b *rawSide
	spin bool
	// limit bounds the responder's wait for the end of a size (--timeout;
	// 5 minutes when zero).
	limit time.Duration
}

// responderLimit is how long the responder waits for the end of a size.
func (p *rawPair) responderLimit() time.Duration {
	if p.limit > 0 {
		return p.limit
	}
	return 5 * time.Minute
}

func newRawPair(a, b transport.Transport, maxSize int, spin bool) (*rawPair, error) {
	as, err := newRawSide(a, b.Addr(), maxSize, spin)
	if err != nil {
		return nil, err
	}
	bs, err := newRawSide(b, a.Addr(), maxSize, spin)
	if err != nil {
		return nil, err
	}
	return &rawPair{a: as, b: bs, spin: spin}, nil
}

// pingpong runs rawPing from a against a responder on b.
func (p *rawPair) pingpong(size, iterations, warmup int, unidir bool) (rawResult, error) {
	return p.run(func() error { return rawRespond(p.b, p.responderLimit()) },
		func() (rawResult, error) {
			reply := size
			if unidir {
				reply = 0
			}
			return rawPing(p.a, size, reply, iterations, warmup)
		})
}

// stream runs rawSend from a into a sink on b.
func (p *rawPair) stream(size, iterations, warmup int) (rawResult, error) {
	return p.run(func() error { return rawSink(p.b, p.responderLimit()) },
		func() (rawResult, error) { return rawSend(p.a, size, iterations, warmup) })
}

// run runs b's part and a's part in goroutines of their own, pinned to the
// second and the first CPU when spinning, like the mx sides they compare
// with.
func (p *rawPair) run(bPart func() error, aPart func() (rawResult, error)) (rawResult, error) {
	done := make(chan error, 1)
	abortA, abortB := make(chan struct{}), make(chan struct{})
	p.a.abort, p.b.abort = abortA, abortB
	go func() {
		if p.spin {
			pin(1) // never unlocked: the pinned thread retires with the goroutine
		}
		err := bPart()
		if err != nil {
			close(abortA) // a's waits end instead of timing out one by one
		}
		done <- err
	}()
	type aResult struct {
		res rawResult
		err error
	}
	ac := make(chan aResult, 1)
	go func() {
		if p.spin {
			pin(0)
		}
		res, err := aPart()
		ac <- aResult{res, err}
	}()
	ar := <-ac
	res, err := ar.res, ar.err
	if err != nil && !errors.Is(err, errRawAborted) {
		close(abortB) // b's part stops at its next empty poll
	}
	if berr := <-done; berr != nil && !errors.Is(berr, errRawAborted) {
		err = fmt.Errorf("the other side: %w", berr)
	}
	return res, err
}
