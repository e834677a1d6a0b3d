package mx

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// recoveryCounters are the counters that say a loss was recovered: on a
// wire that loses nothing, each must stay at zero.
var recoveryCounters = []Counter{FastRetransmits, TimerRetransmits, TailProbes, DupReceived, PullFramesRerequested}

// factoryNamed returns the transport factory called name.
func factoryNamed(t *testing.T, name string) transportFactory {
	for _, tf := range transportFactories {
		if tf.name == name {
			return tf
		}
	}
	t.Fatalf("no transport factory %q", name)
	return transportFactory{}
}

// TestNoSpuriousRecovery exchanges messages over wires that lose nothing
// (the in-process wire, UDP on loopback, shared-memory rings, AF_XDP on a
// veth pair with root), in both wait modes, with the default timers (but
// stream1MiB's, below), and checks that recovery never acted on either
// side: no timer retransmit, tail-loss probe, fast retransmit, resend on a
// question's answer, duplicate or pull re-request, however loaded the
// machine. Over the network a gomx peer is asked what it holds instead of being probed or
// resent to on a timer (ask.go), and only an answer, which reflects every
// frame sent before its question, resends: a peer the machine keeps
// descheduled answers late, and the questions wait for it. Through the
// rings nothing is resent before their own timeout, a second. A wire that
// delivered frames out of order (UDP on loopback, now and then) is judged
// on its timers only: a frame that arrives past a hole is evidence of a
// loss, and what acts on evidence may resend. The questions sent and
// answered are logged.
//
// Each case is a workload over some transports. "mixed": 100 000 messages
// (mostly tiny and small, some mediums, a few large ones: faultSize) as a
// ping-pong (each answered by the next size) and then as a stream of the
// same sizes with 64 receives in flight (whose tail waits for a delayed
// ack), counted after a warm-up of 200; under -race 20 000, a busy-poll
// pair 2 000. "stream1MiB": 500 1 MiB messages (200 with -short or -race)
// as a stream with 16 in flight over the in-process wire and UDP, counted
// from the pair's first message: a dozen pulls of about a hundred replies
// each at once, whose questions to the sender (about the pulls) and the
// sender's own (about its RNDVs) share one window of tags, and a sender
// that never measures a round trip (an RNDV's ack gives no sample), so
// its questions wait for the RTO's fallback, here 20 ms (ResendDelay and
// PullTimeout as mxbench's lossy runs set them), which a peer descheduled
// on a loaded machine overruns: it is asked, never probed or resent to.
func TestNoSpuriousRecovery(t *testing.T) {
	mixed := 100000
	switch {
	case testing.Short():
		mixed = 4000
	case raceEnabled:
		mixed = 20000 // the same paths, several times slower each
	}
	large := 500
	if testing.Short() || raceEnabled {
		large = 200
	}
	for _, c := range []struct {
		name       string
		transports []string
		n          int
		warm       func(t *testing.T, pr *pair)
		run        func(t *testing.T, pr *pair, n int) // n messages
		// unmeasured is the timeout before a round trip was measured
		// (ResendDelay, PullTimeout), when not the default.
		unmeasured time.Duration
	}{
		{
			name: "mixed", transports: []string{"loopback", "udp", "shm", "xdp"}, n: mixed,
			warm: func(t *testing.T, pr *pair) { runPingPongMixed(t, pr, 200, 0) },
			run: func(t *testing.T, pr *pair, n int) {
				runPingPongMixed(t, pr, n/2, 200)
				runStream(t, pr, n/2, 64)
			},
		},
		{
			name: "stream1MiB", transports: []string{"loopback", "udp"}, n: large, unmeasured: 20 * time.Millisecond,
			run: func(t *testing.T, pr *pair, n int) { runStreamOf(t, pr, n, 16, func(int) int { return 1 << 20 }) },
		},
	} {
		for _, name := range c.transports {
			tf := factoryNamed(t, name)
			for _, busy := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/busypoll=%v", c.name, name, busy), func(t *testing.T) {
					m := c.n
					if busy && raceEnabled {
						m = c.n / 10 // two spinning goroutines, each slowed by the race detector
					}
					opts := DefaultBoardOptions()
					opts.BusyPoll = busy
					if c.unmeasured != 0 {
						opts.ResendDelay, opts.PullTimeout = c.unmeasured, c.unmeasured
						// Keep the give-up budget (ResendDelay × ResendMax,
						// and a pull's without progress) at the default's
						// 500 s: a loaded host must not turn a slow pass into
						// ErrUnreachable.
						opts.ResendMax = int(500 * time.Second / c.unmeasured)
					}
					checkNoSpurious(t, tf, opts, m, c.warm, c.run)
				})
			}
		}
	}
}

// runPingPongMixed is pingPongMixed's n messages from first, failing t on
// an error.
func runPingPongMixed(t *testing.T, pr *pair, n, first int) {
	if err := pingPongMixed(testCtx(t, time.Hour), pr, n, first); err != nil {
		t.Fatal(err)
	}
}

// checkNoSpurious is TestNoSpuriousRecovery's exchange of n messages
// (run) after a warm-up (warm, if any) over tf with opts.
func checkNoSpurious(t *testing.T, tf transportFactory, opts BoardOptions, n int, warm func(*testing.T, *pair), run func(*testing.T, *pair, int)) {
	pr := newPair(t, tf, opts, loopback.Faults{})
	if warm != nil {
		warm(t, pr)
	}
	before := [2]Counters{pr.a.Counters(), pr.b.Counters()}
	run(t, pr, n)
	if lost := wireLost(pr); lost > 0 {
		// UDP drops what a full socket buffer cannot take:
		// that recovery was no mistake.
		t.Logf("the wire lost %d frames: recovery %v / %v", lost, recoverySummary(pr.a.Counters()), recoverySummary(pr.b.Counters()))
		return
	}
	// A wire that delivered frames out of order (the
	// receiver stored some past a hole: UDP on loopback can,
	// when the kernel handles two datagrams of one socket on
	// two CPUs) gives evidence of a loss that was none: what
	// acts on evidence (a SACK's hole, an answer, a pull's
	// hole) may resend, and is logged. No timer may act
	// whatever the wire did.
	judged := []Counter{TimerRetransmits, TailProbes}
	reordered := pr.a.Counters().Get(EarlyStored) + pr.b.Counters().Get(EarlyStored) - before[0].Get(EarlyStored) - before[1].Get(EarlyStored)
	if reordered == 0 {
		judged = append(recoveryCounters, AskRetransmits)
	} else {
		t.Logf("the wire delivered frames out of order (%d stored past a hole): resends on that evidence are not judged", reordered)
	}
	for i, e := range []*Endpoint{pr.a, pr.b} {
		c := e.Counters()
		for _, k := range judged {
			if d := c.Get(k) - before[i].Get(k); d != 0 {
				t.Errorf("endpoint %d: %v %d in %d messages on a lossless wire", e.id, k, d, n)
			}
		}
	}
	t.Logf("%d messages: a: %v; b: %v", n, recoveryDelta(before[0], pr.a.Counters()), recoveryDelta(before[1], pr.b.Counters()))
}

// TestNoSpuriousRecoveryLarge is TestNoSpuriousRecovery's large-message
// case: 1 MiB messages as a ping-pong (150, 30 with -short or -race) over
// the network wires (the in-process wire, UDP on loopback, AF_XDP with
// root), in both wait modes, where a pull asks its owner about late
// replies (ask.go): each message is a pull of about a hundred replies,
// and a loaded machine keeps the owner from sending them for
// milliseconds at a time. Neither side may ask for a pull frame again,
// receive one twice, or resend anything on a timer or an answer. And a
// pull that still expects several replies waits longer before it asks,
// for a late owner (askDue: the longer of three times the owner's recent
// silences and the descheduling allowance, at most plateRTTs pull round
// trips), so a machine that stalls little does not turn the owner's
// lateness into questions: at most one per maxPullAsksPer pulls and a
// few more (the build before that wait, dd57d39, asked up to a dozen
// per message over AF_XDP at load 13-25, and one in three or more
// in-process).
func TestNoSpuriousRecoveryLarge(t *testing.T) {
	n := 150
	if testing.Short() || raceEnabled {
		n = 30
	}
	for _, name := range []string{"loopback", "udp", "xdp"} {
		tf := factoryNamed(t, name)
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/busypoll=%v", name, busy), func(t *testing.T) {
				opts := DefaultBoardOptions()
				opts.BusyPoll = busy
				pr := newPair(t, tf, opts, loopback.Faults{})
				ctx := testCtx(t, time.Hour)
				if err := pingPongLarge(ctx, pr, 5, 1<<20); err != nil { // warm-up: the round trips are measured
					t.Fatal(err)
				}
				before := [2]Counters{pr.a.Counters(), pr.b.Counters()}
				peak := peakSlack()
				err := pingPongLarge(ctx, pr, n, 1<<20)
				allowed := peak()
				if err != nil {
					t.Fatal(err)
				}
				if lost := wireLost(pr); lost > 0 {
					t.Logf("the wire lost %d frames: recovery %v / %v", lost, recoverySummary(pr.a.Counters()), recoverySummary(pr.b.Counters()))
					return
				}
				asks := uint64(0)
				for i, e := range []*Endpoint{pr.a, pr.b} {
					c := e.Counters()
					for _, k := range append(recoveryCounters, AskRetransmits) {
						if d := c.Get(k) - before[i].Get(k); d != 0 {
							t.Errorf("endpoint %d: %v %d in %d 1 MiB round trips on a lossless wire", e.id, k, d, n)
						}
					}
					asks += c.Get(PullAsks) - before[i].Get(PullAsks)
				}
				t.Logf("%d round trips: a: %v; b: %v", n, recoveryDelta(before[0], pr.a.Counters()), recoveryDelta(before[1], pr.b.Counters()))
				switch limit := uint64(2*n/maxPullAsksPer + pullAsksLearning); {
				case asks <= limit:
				case allowed > pullAsksJudged:
					t.Logf("questions not judged: the machine kept goroutines off their CPUs (the timeouts allowed up to %v for it)", allowed)
				default:
					t.Errorf("%d pull questions in %d 1 MiB round trips (%d pulls) on a lossless wire, want at most %d", asks, n, 2*n, limit)
				}
			})
		}
	}
}

// maxPullAsksPer is how many lossless pulls TestNoSpuriousRecoveryLarge
// allows a question for, beside pullAsksLearning: the questions of the
// first stalls, before the pair saw how late its owner can be (under
// -race, 8 over 30 round trips at load 25). It judges them only while
// the descheduling allowance stayed within pullAsksJudged: the wait
// for a late owner is at most plateRTTs pull round trips (ask.go), and
// a machine that stalls longer makes questions a lossless wire may ask.
const (
	maxPullAsksPer   = 10
	pullAsksLearning = 10
	pullAsksJudged   = time.Millisecond
)

// peakSlack watches the descheduling allowance (descheduled.go) from now
// until the function it returns is called, which returns the largest.
func peakSlack() func() time.Duration {
	busyMachine := make(chan int64)
	stop := make(chan struct{})
	go func() { // bounded by stop
		var peak int64
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			peak = max(peak, descheduling.slack())
			select {
			case <-stop:
				busyMachine <- max(peak, descheduling.slack())
				return
			case <-tk.C:
			}
		}
	}()
	return func() time.Duration {
		close(stop)
		return time.Duration(<-busyMachine)
	}
}

// pingPongLarge sends n messages of size bytes from a to b, each sent
// back by b, and checks every byte of both.
func pingPongLarge(ctx context.Context, pr *pair, n, size int) error {
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for i := range n {
			r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
			if err != nil {
				errc <- err
				return
			}
			if _, err := waitAMinute(ctx, r); err != nil {
				errc <- fmt.Errorf("b: receive %d: %w", i, err)
				return
			}
			s, err := pr.b.ISend([][]byte{buf}, pr.btoa, uint64(i), nil)
			if err != nil {
				errc <- err
				return
			}
			if _, err := waitAMinute(ctx, s); err != nil {
				errc <- fmt.Errorf("b: send %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	back := make([]byte, size)
	for i := range n {
		msg := pattern(size, uint64(i))
		r, err := pr.a.IRecv([][]byte{back}, uint64(i), ^uint64(0), nil)
		if err != nil {
			return err
		}
		s, err := pr.a.ISend([][]byte{msg}, pr.atob, uint64(i), nil)
		if err != nil {
			return err
		}
		if _, err := waitAMinute(ctx, s); err != nil {
			return fmt.Errorf("a: send %d: %w", i, err)
		}
		if _, err := waitAMinute(ctx, r); err != nil {
			return fmt.Errorf("a: receive %d: %w", i, err)
		}
		if !bytes.Equal(back, msg) {
			return fmt.Errorf("message %d came back different", i)
		}
	}
	return <-errc
}

// wireLost returns how many frames the pair's transports sent and never
// received, by their own counters ("sent", "received"), once the last
// frames had a moment to land; 0 for transports that count neither.
func wireLost(pr *pair) uint64 {
	count := func() (sent, recv uint64) {
		for _, b := range []*Board{pr.ba, pr.bb} {
			for _, c := range b.TransportCounters() {
				switch c.Name {
				case "sent":
					sent += c.Value
				case "received":
					recv += c.Value
				}
			}
		}
		return sent, recv
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		sent, recv := count()
		if sent <= recv || time.Now().After(deadline) {
			return sent - min(sent, recv)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLossyPingPong exchanges mixed messages as a ping-pong over the
// in-process wire losing 1% of its frames, in both wait modes: every byte
// arrives, and the counters show the answers' recovery (a ping-pong's lost
// frame is the last of its burst: only a question's answer brings it back
// between gomx boards, asked by a waiter that spins as by a board that
// sleeps) and no tail probe or timer retransmit on either side.
func TestLossyPingPong(t *testing.T) {
	n := 4000
	if testing.Short() || raceEnabled {
		n = 1000
	}
	checkLossyPingPong(t, n)
}

// checkLossyPingPong is TestLossyPingPong's ping-pong of n mixed messages
// over the in-process wire losing 1% of its frames, in both wait modes:
// every byte arrives, losses are resent on answers, and nothing on a
// timer (no tail probe, no timer retransmit), the first messages (lost
// before a round trip was measured) included.
func checkLossyPingPong(t *testing.T, n int) {
	tf := factoryNamed(t, "loopback")
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opts := fastOptions()
			opts.BusyPoll = busy
			pr := newPair(t, tf, opts, loopback.Faults{})
			pr.w.faults(loopback.Faults{Loss: 0.01, Seed: 7})
			if err := pingPongMixed(testCtx(t, time.Hour), pr, n, 0); err != nil {
				t.Fatal(err)
			}
			var timers, answers uint64
			for _, e := range []*Endpoint{pr.a, pr.b} {
				c := e.Counters()
				timers += c.Get(TailProbes) + c.Get(TimerRetransmits)
				answers += c.Get(AskRetransmits)
			}
			t.Logf("a: %v; b: %v", recoverySummary(pr.a.Counters()), recoverySummary(pr.b.Counters()))
			if answers == 0 {
				t.Errorf("%d round trips over a wire losing 1%% of frames completed with no resend on an answer", n)
			}
			if timers != 0 {
				t.Errorf("%d tail probes and timer retransmits: a loss waited for a timer, where the peer is asked (from the first message)", timers)
			}
		})
	}
}

// recoverySummary formats the recovery counters of c.
func recoverySummary(c Counters) string {
	s := ""
	for _, k := range recoveryCounters {
		s += fmt.Sprintf("%v %d ", k, c.Get(k))
	}
	return s
}

// pingPongMixed sends n messages of mixed sizes from a to b, each answered
// by b with the next size, and checks every byte of both; first is the
// first message's index (its size and match).
func pingPongMixed(ctx context.Context, pr *pair, n, first int) error {
	th := pr.ba.RendezvousThreshold()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, th+200001)
		for i := first; i < first+n; i++ {
			r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
			if err != nil {
				errc <- err
				return
			}
			st, err := waitAMinute(ctx, r)
			if err != nil {
				errc <- fmt.Errorf("b: receive %d: %w", i, err)
				return
			}
			if want := pattern(faultSize(i, th), uint64(i)); !bytes.Equal(buf[:st.XferLength], want) {
				errc <- fmt.Errorf("b: message %d differs (%d bytes, want %d)", i, st.XferLength, len(want))
				return
			}
			s, err := pr.b.ISend([][]byte{pattern(faultSize(i+1, th), uint64(i+1))}, pr.btoa, uint64(i), nil)
			if err != nil {
				errc <- err
				return
			}
			if _, err := waitAMinute(ctx, s); err != nil {
				errc <- fmt.Errorf("b: reply %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, th+200001)
	for i := first; i < first+n; i++ {
		r, err := pr.a.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
		if err != nil {
			return err
		}
		s, err := pr.a.ISend([][]byte{pattern(faultSize(i, th), uint64(i))}, pr.atob, uint64(i), nil)
		if err != nil {
			return err
		}
		if _, err := waitAMinute(ctx, s); err != nil {
			return fmt.Errorf("a: send %d: %w", i, err)
		}
		st, err := waitAMinute(ctx, r)
		if err != nil {
			return fmt.Errorf("a: reply %d: %w", i, err)
		}
		if want := pattern(faultSize(i+1, th), uint64(i+1)); !bytes.Equal(buf[:st.XferLength], want) {
			return fmt.Errorf("a: reply %d differs (%d bytes, want %d)", i, st.XferLength, len(want))
		}
	}
	return <-errc
}

// TestLosslessNoRecovery exchanges mixed messages (ping-pong, then a
// stream with a window of receives) over the in-process wire, shared-memory
// rings and UDP on 127.0.0.1, in both wait modes, with the default timers,
// and requires every recovery counter (timer and fast retransmits, tail
// probes, duplicates, pull re-requests) to stay at zero on both sides. It
// is short enough for every CI run. Every timeout allows three times the
// longest time the machine recently kept one of the process's goroutines
// off its CPU (descheduled.go), and on a machine that keeps them running
// (no gap recorded: the estimate is zero) the timeouts are the round
// trip's and nothing may act: the zero is required of a run during which
// the estimate, sampled every 50 ms from the end of the warm-up, stayed
// at zero. Where it did not, the counters are logged with the estimate
// (TestNoSpuriousRecovery, longer, requires them at zero at any load) and
// the run says why it did not judge.
func TestLosslessNoRecovery(t *testing.T) {
	n := 4000
	if testing.Short() || raceEnabled {
		n = 1000
	}
	for _, name := range []string{"loopback", "shm", "udp", "xdp"} {
		tf := factoryNamed(t, name)
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/busypoll=%v", name, busy), func(t *testing.T) {
				opts := DefaultBoardOptions()
				opts.BusyPoll = busy
				pr := newPair(t, tf, opts, loopback.Faults{})
				ctx := testCtx(t, time.Hour)
				if err := pingPongMixed(ctx, pr, 100, 0); err != nil { // the round trips are measured
					t.Fatal(err)
				}
				before := [2]Counters{pr.a.Counters(), pr.b.Counters()}
				peak := peakSlack()
				err := pingPongMixed(ctx, pr, n/2, 100)
				if err == nil {
					runStream(t, pr, n/2, 32)
				}
				allowed := peak()
				if err != nil {
					t.Fatal(err)
				}
				var acts []string
				for i, e := range []*Endpoint{pr.a, pr.b} {
					c := e.Counters()
					for _, k := range recoveryCounters {
						if d := c.Get(k) - before[i].Get(k); d != 0 {
							acts = append(acts, fmt.Sprintf("endpoint %d: %v %d", e.id, k, d))
						}
					}
				}
				lost := wireLost(pr)
				switch {
				case lost > 0:
					t.Logf("the wire lost %d frames (a full socket buffer): recovery %v", lost, acts)
				case allowed > 0:
					t.Logf("not judged: the machine kept goroutines off their CPUs (the timeouts allowed up to %v for it); recovery %v",
						allowed, acts)
				case len(acts) > 0:
					t.Errorf("%d messages on a lossless wire of a machine that kept every goroutine running: %v", n, acts)
				default:
					t.Logf("%d messages: no recovery", n)
				}
			})
		}
	}
}

// recoveryDelta says how the recovery counters, and the asks (which
// resend nothing), moved from before to after.
func recoveryDelta(before, after Counters) string {
	var s strings.Builder
	for _, k := range append(recoveryCounters, TailAsks, PullAsks, AsksAnswered, AskRetransmits) {
		fmt.Fprintf(&s, "%v %d; ", k, after.Get(k)-before.Get(k))
	}
	return s.String()
}
