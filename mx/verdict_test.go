package mx

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// gatedRecv holds back the goroutine that calls Recv while the gate is
// shut, as the scheduler holds back a descheduled progress goroutine: it
// owns the receive source, and the frames meant for it pile up in the
// wrapped transport.
type gatedRecv struct {
	transport.Transport
	mu      sync.Mutex
	shut    bool
	blocked chan struct{} // a Recv waits at the gate
	open    chan struct{} // closed when the gate opens
}

func newGatedRecv(t transport.Transport) *gatedRecv {
	return &gatedRecv{Transport: t, blocked: make(chan struct{}, 1), open: make(chan struct{})}
}

func (g *gatedRecv) Recv(f []transport.Frame, d time.Duration) (int, error) {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut {
		if d == 0 {
			// A look that does not wait (a late timer run's drain,
			// made under the board's lock) finds nothing: blocking it
			// would hold the lock the test's sends need.
			return 0, nil
		}
		select {
		case g.blocked <- struct{}{}:
		default:
		}
		<-g.open
	}
	return g.Transport.Recv(f, d)
}

func (g *gatedRecv) shutGate() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
}

func (g *gatedRecv) openGate() {
	g.mu.Lock()
	g.shut = false
	g.mu.Unlock()
	close(g.open)
}

// gatedWire is the loopback wire with board a's port behind a gate, and a
// third port that can flood a.
func gatedWire(t *testing.T) (*wire2, *gatedRecv, transport.Transport) {
	w := newLoopbackWire(t, loopback.Faults{})
	g := newGatedRecv(w.a)
	w.a = g
	return w, g, w.third()
}

// waitGone waits, bounded, until d has passed since t0.
func waitGone(t *testing.T, t0 time.Time, d time.Duration) {
	t.Helper()
	for i := 0; time.Since(t0) < d; i++ {
		if i > 100000 {
			t.Fatalf("the clock did not pass %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestVerdictWaitsForQueuedFrames: a board whose progress goroutine was
// held back past a send's whole unreachable budget, while the peer's ack
// waited in the transport behind more than one receive batch of other
// frames, does not declare the peer unreachable: it reads what the
// transport holds before any verdict, finds the ack, and the send
// completes.
func TestVerdictWaitsForQueuedFrames(t *testing.T) {
	checkLeaks(t)
	w, g, flood := gatedWire(t)
	oa := DefaultBoardOptions()
	oa.ResendDelay = 20 * time.Millisecond
	pr := newPairOn(t, w, oa, DefaultBoardOptions())
	// The held send's own budget is short (its resend limit: 3); the
	// round trip after it keeps the board's.
	const resends = 3
	budget := oa.ResendDelay * (resends + 1)

	g.shutGate()
	select {
	case <-g.blocked:
	case <-testCtx(t, 20*time.Second).Done():
		t.Fatal("a's progress goroutine never reached Recv")
	}
	// More than a receive batch of frames ahead of the ack (a's board
	// drops them: they come from no peer it knows).
	junk := make([]byte, 64)
	for i := range junk {
		junk[i] = 0xff
	}
	frames := make([]transport.Frame, 3*rxBatch)
	for i := range frames {
		frames[i] = transport.Frame{Peer: pr.ba.NICID(), Data: junk}
	}
	if n, err := flood.Send(frames); err != nil || n != len(frames) {
		t.Fatalf("flood: %d, %v", n, err)
	}
	t0 := time.Now()
	s, err := pr.a.ISend([][]byte{[]byte("still here")}, pr.atob, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.a.SetRequestTimeout(s, resends*oa.ResendDelay); err != nil {
		t.Fatal(err)
	}
	r, err := pr.b.IRecv([][]byte{make([]byte, 16)}, 1, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	if _, err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// b has the message and acks it; a reads nothing until the verdict
	// is due and put off (the gated goroutine owns the source), while
	// its timers keep running, as the fine timer's goroutine runs them.
	// (A board whose timers stop too is stalled whole, and its stall is
	// not counted against the peer at all: liveness.go,
	// TestStalledBoardsKeepLivePeers.)
	waitGone(t, t0, budget)
	waitCond(t, "a's verdict on b is due", func() bool {
		pr.ba.mu.Lock()
		defer pr.ba.mu.Unlock()
		pr.ba.runTimersLocked()
		return pr.ba.cnt[VerdictsDeferred] > 0
	})
	g.openGate()
	if _, err := s.Wait(ctx); err != nil {
		t.Fatalf("send to a live peer whose ack was queued: %v", err)
	}
	// A round trip after the hold: a send from a fails if a declared b
	// unreachable meanwhile.
	roundTrip(t, testCtx(t, 10*time.Second), pr)
	if c := pr.a.Counters(); c[Unreachable] != 0 {
		t.Errorf("a declared b unreachable %d times (counters %v)", c[Unreachable], nonZero(c))
	}
	if c := pr.ba.Counters(); c[VerdictDrainFrames] == 0 {
		t.Errorf("no frame was drained before the verdict: %v", nonZero(c))
	}
}

// roundTrip sends a message from b to a and one back, and fails the test
// if either does not arrive whole.
func roundTrip(t *testing.T, ctx context.Context, pr *pair) {
	t.Helper()
	for _, d := range []struct {
		from, to *Endpoint
		addr     Addr
	}{{pr.b, pr.a, pr.btoa}, {pr.a, pr.b, pr.atob}} {
		buf := make([]byte, 8)
		r, err := d.to.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := d.from.ISend([][]byte{[]byte("pingpong")}, d.addr, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			t.Fatalf("send: %v", err)
		}
		if _, err := r.Wait(ctx); err != nil || string(buf) != "pingpong" {
			t.Fatalf("receive: %q, %v", buf, err)
		}
	}
}

func nonZero(c Counters) map[string]uint64 {
	m := map[string]uint64{}
	c.NonZero(func(k Counter, v uint64) { m[k.String()] = v })
	return m
}

// TestHostPathPeerKilled: a board whose host path's receive loop sleeps in
// Recv still gives its verdicts: when the peer process on this host is
// killed, a large send to it fails with ErrUnreachable (the verdict waits for
// the host path's loop to have found its rings drained, which it is asked
// to do, and no longer).
func TestHostPathPeerKilled(t *testing.T) {
	checkLeaks(t)
	dir := shmDir(t)
	ctx := testCtx(t, 60*time.Second)
	cmd, nic := startHostChild(t, ctx, dir)
	b, e, addr := openHostPeer(t, ctx, hostOptions(dir), nic) // resend limit 8 s, within the context
	echoSizes(t, ctx, e, addr, []int{8})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// A large send waits for the peer: it can only end in the verdict.
	s, err := e.ISend([][]byte{make([]byte, 1<<20)}, addr, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to a killed peer: %v, want ErrUnreachable (counters %v, board %v)", err, nonZero(e.Counters()), nonZero(b.Counters()))
	}
}

// TestPlacedAnswerWaitsForALaterDrain: the answer to a placed pull's
// question is acted on only after a drain that started after the answer
// was handled (verdict.go, mayActSince), in the two ways an earlier drain
// could pass for one: an answer handled inside a drain (it comes on
// queue 0, possibly after the lane was drained), and a source another
// goroutine owns whose owner found it drained after a mark taken before
// the answer came. Driven by hand, under the board's lock, so no timing
// decides it.
func TestPlacedAnswerWaitsForALaterDrain(t *testing.T) {
	pr := newPair(t, loopbackOnly, DefaultBoardOptions(), loopback.Faults{})
	b := pr.bb
	freeze(b) // the test owns the source, as another goroutine would
	defer thaw(b)
	if len(b.allSrcs) == 0 {
		t.Fatal("the board has no receive source")
	}
	drainDone := func() bool {
		if !b.drainForVerdict() {
			return false
		}
		b.clearMarks()
		return true
	}
	mayAct := func(gen uint64) bool {
		b.vDrained = true
		ok := b.mayActSince(gen)
		b.vDrained, b.vWanted = false, false
		return ok
	}
	ownerDrains := func() {
		for _, s := range b.allSrcs {
			s.emptied.Add(1)
		}
	}

	// A source owned elsewhere: the drain marks it and is put off.
	if drainDone() {
		t.Fatal("a drain counted a source another goroutine holds as drained at once")
	}
	answer := b.drainGen // the answer comes after the mark
	ownerDrains()        // and the owner finds the source drained
	if !drainDone() {
		t.Fatal("the owner found the source drained, yet the drain was put off")
	}
	if mayAct(answer) {
		t.Error("a mark taken before the answer came counted as a drain after it")
	}
	if drainDone() { // a fresh mark, after the answer
		t.Fatal("a fresh mark counted as drained at once")
	}
	ownerDrains()
	if !drainDone() {
		t.Fatal("the owner found the source drained after the fresh mark, yet the drain was put off")
	}
	if !mayAct(answer) {
		t.Error("a drain whose every mark was taken after the answer did not count")
	}

	// The sources free: an answer handled inside a drain needs the next.
	b.rxOwned = b.src
	defer func() { b.rxOwned = nil }()
	if !drainDone() {
		t.Fatal("a drain of a source the timers own was put off")
	}
	answer = b.drainGen // handled inside that drain, after the lane's turn
	if mayAct(answer) {
		t.Error("the drain that handled the answer counted as a drain after it")
	}
	if !drainDone() {
		t.Fatal("a drain of a source the timers own was put off")
	}
	if !mayAct(answer) {
		t.Error("a drain that started after the answer did not count")
	}
}
