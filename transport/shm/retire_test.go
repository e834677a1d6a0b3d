package shm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// Tests of retiring idle lanes (lane.go): RetireIdle takes the time as an
// argument, so these tests give it a clock of their own (laneClock) and
// never wait for a lane to go idle.

// laneClock is RetireIdle's clock in a test: it moves only when told.
type laneClock struct {
	mu  sync.Mutex
	now time.Time
}

// after moves the clock on by d and returns the new time.
func (c *laneClock) after(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// inOrder checks that each producer's frames (testFrame) arrive byte for
// byte and in order.
type inOrder struct {
	from map[transport.NICID]int
	next map[int]int
	got  int
	// seen, if set, counts each producer's frames (index id-1) for
	// other goroutines.
	seen []atomic.Int64
}

func newInOrder(producers ...*Transport) *inOrder {
	c := &inOrder{from: make(map[transport.NICID]int), next: make(map[int]int)}
	for i, p := range producers {
		c.from[p.Addr()] = i + 1
	}
	return c
}

func (c *inOrder) check(peer transport.NICID, data []byte) error {
	p := c.from[peer]
	if p == 0 {
		return fmt.Errorf("a frame from unknown board %v", peer)
	}
	if want := testFrame(p, c.next[p]); !bytes.Equal(data, want) {
		num := -1
		if len(data) >= 8 {
			num = int(binary.LittleEndian.Uint32(data[4:]))
		}
		return fmt.Errorf("producer %d: frame %d differs (got %d bytes, number %d)", p, c.next[p], len(data), num)
	}
	c.next[p]++
	c.got++
	if p <= len(c.seen) {
		c.seen[p-1].Store(int64(c.next[p]))
	}
	return nil
}

// take receives what rx has now, through Recv or, with peek, Peek and
// Take (which hand a record Peek does not take to Recv), and checks it.
// wait is Recv's timeout when nothing is there.
func (c *inOrder) take(rx *Transport, buf []transport.Frame, peek bool, wait time.Duration) error {
	if peek {
		for range 64 {
			peer, data, ok, empty := rx.Peek()
			if !ok {
				if empty {
					break
				}
				wait = 0 // a record for Recv
				break
			}
			if err := c.check(peer, data); err != nil {
				return err
			}
			rx.Take()
		}
	}
	n, err := rx.Recv(buf, wait)
	if err != nil {
		return err
	}
	for _, f := range buf[:n] {
		if err := c.check(f.Peer, f.Data); err != nil {
			return err
		}
	}
	return nil
}

// pumpUntil receives into c until cond holds (every Recv also commits,
// which is where a retired lane is unmapped), within a bound that only
// keeps a broken build from hanging.
func (c *inOrder) pumpUntil(t *testing.T, rx *Transport, peek bool, what string, cond func() bool) {
	t.Helper()
	buf := make([]transport.Frame, 16)
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if err := c.take(rx, buf, peek, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s: %v", what, rx.Counters())
		}
	}
}

// laneTaken reports whether a writes its frames to peer into a lane.
func laneTaken(a *Transport, peer transport.NICID) bool {
	o := outTo(a, peer)
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.data != nil
}

// outTo returns a's ring toward peer, or nil before a first sends there,
// read under a's lock as the send path does.
func outTo(a *Transport, peer transport.NICID) *outRing {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	return a.out[peer]
}

// sendOne sends producer p's frame i from a to peer.
func sendOne(t *testing.T, a *Transport, peer transport.NICID, p, i int) {
	t.Helper()
	if _, err := a.SendStrict([]transport.Frame{{Peer: peer, Data: testFrame(p, i)}}); err != nil {
		t.Fatalf("producer %d frame %d: %v", p, i, err)
	}
}

// laneRace is what the tests that race lane changes against sends
// (TestLaneRetireRacesSends, TestAskBackRacesSends) share: producers that
// each send their frames (testFrame) in order to one receiver, at most
// window frames ahead of what it has read, and the receiver's loop.
type laneRace struct {
	rx       *Transport
	window   int
	chk      *inOrder
	sent     []atomic.Int64 // frames producer k sent, at index k
	finished atomic.Int32   // producers done
	errs     chan error
}

func newLaneRace(rx *Transport, tx []*Transport, window int) *laneRace {
	r := &laneRace{rx: rx, window: window, chk: newInOrder(tx...), sent: make([]atomic.Int64, len(tx)), errs: make(chan error, len(tx))}
	r.chk.seen = make([]atomic.Int64, len(tx))
	return r
}

// send sends n frames of producer k (its number is k+1) from p, from
// frame *i on, each once the receiver is less than window frames behind.
// A failure goes to errs, and send returns false.
func (r *laneRace) send(k int, p *Transport, i *int, n int) bool {
	for range n {
		// At most window frames ahead of the receiver: a backlog that
		// never drains keeps a pair off its lane.
		for deadline := time.Now().Add(60 * time.Second); int64(*i)-r.chk.seen[k].Load() >= int64(r.window); {
			if time.Now().After(deadline) {
				r.errs <- fmt.Errorf("producer %d: frame %d not received in 60s", k+1, int(r.chk.seen[k].Load()))
				return false
			}
			runtime.Gosched()
		}
		if _, err := p.SendStrict([]transport.Frame{{Peer: r.rx.Addr(), Data: testFrame(k+1, *i)}}); err != nil {
			r.errs <- fmt.Errorf("producer %d frame %d: %v", k+1, *i, err)
			return false
		}
		*i++
		r.sent[k].Store(int64(*i))
	}
	return true
}

// receive reads at the receiver, through Recv and through Peek and Take
// by turns, until every producer is done and every frame it sent has
// arrived, calling took (if not nil) after each read. It fails t on a
// producer's error, and when no frame came for three minutes (a hang: a
// loaded machine makes the whole run longer, not its frames that rare).
func (r *laneRace) receive(t *testing.T, took func()) {
	t.Helper()
	buf := make([]transport.Frame, 16)
	got, gotAt := r.chk.got, time.Now()
	all := func() bool {
		if int(r.finished.Load()) != len(r.sent) {
			return false
		}
		n := 0
		for k := range r.sent {
			n += int(r.sent[k].Load())
		}
		return r.chk.got == n
	}
	for c := 0; !all(); c++ {
		if err := r.chk.take(r.rx, buf, c%2 == 1, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if took != nil {
			took()
		}
		select {
		case err := <-r.errs:
			t.Fatal(err)
		default:
		}
		if r.chk.got != got {
			got, gotAt = r.chk.got, time.Now()
		} else if time.Since(gotAt) > 3*time.Minute {
			t.Fatalf("received %v, and nothing more for three minutes: %v", r.chk.next, r.rx.Counters())
		}
	}
}

// TestLaneRetiredAndBack: a pair goes from the queue to a lane, the lane
// goes idle and is retired with frames still unread in it, the pair's next
// frames go through the queue, and once busy again the pair gets a lane
// again, for many cycles, with a receiver that busy-polls and one that
// sleeps, reading through Recv and through Peek and Take. Every frame
// arrives byte for byte and in order across each switch both ways; while
// the lane is up both processes map it (Footprint), and once it is
// retired neither does (no spare lane: one would be mapped before the
// first lane).
func TestLaneRetiredAndBack(t *testing.T) {
	for _, mode := range []struct {
		name string
		spin time.Duration
	}{{"busy-poll", time.Millisecond}, {"blocking", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			const cycles, onLane, afterRetire, idle = 30, 20, 20, time.Second
			a, b := newTestPair(t, Options{MTU: 4096, LaneAfter: 8, Lanes: 1, Spin: mode.spin, LaneIdle: idle, NoSpareLanes: true})
			defer a.Close()
			defer b.Close()
			clk := &laneClock{now: time.Unix(1e9, 0)}
			chk := newInOrder(a)
			peer := b.Addr()
			i := 0
			sendOne(t, a, peer, 1, i) // connect: the queues are mapped from here
			i++
			chk.pumpUntil(t, b, false, "the first frame", func() bool { return chk.got == i })
			aBase, bBase := a.Footprint().MappedBytes, b.Footprint().MappedBytes
			for c := range cycles {
				peek := c%2 == 1
				// Busy: through the queue until the pair takes its lane
				// (made by a goroutine and answered by the consumer's
				// watcher, which a loaded host may not run for a while:
				// the bound is time, not frames).
				deadline := time.Now().Add(60 * time.Second)
				for n := 0; !laneTaken(a, peer); n++ {
					if time.Now().After(deadline) {
						t.Fatalf("cycle %d: no lane after %d frames in 60s: %v", c, n, a.Counters())
					}
					sendOne(t, a, peer, 1, i)
					i++
					chk.pumpUntil(t, b, peek, "the frames through the queue", func() bool { return chk.got == i })
				}
				fa, fb := a.Footprint(), b.Footprint()
				if fa.RingsOut != 1 || fa.MappedBytes <= aBase || fb.RingsIn != 1 || fb.MappedBytes <= bBase {
					t.Fatalf("cycle %d: with the lane up, the producer maps %+v (%d without), the consumer %+v (%d without)", c, fa, aBase, fb, bBase)
				}
				for range onLane {
					sendOne(t, a, peer, 1, i)
					i++
				}
				// Idle: the first look marks the lane, the one a
				// LaneIdle later retires it, its frames unread.
				if n := a.RetireIdle(clk.after(idle)); n != 0 {
					t.Fatalf("cycle %d: %d lanes retired at the first look since the lane was written", c, n)
				}
				if n := a.RetireIdle(clk.after(idle)); n != 1 {
					t.Fatalf("cycle %d: %d lanes retired after LaneIdle, want 1", c, n)
				}
				if f := a.Footprint(); f.RingsOut != 0 || f.MappedBytes != aBase {
					t.Fatalf("cycle %d: the producer still maps %+v after the retirement, want %d bytes", c, f, aBase)
				}
				// Behind the closing record, through the queue.
				for range afterRetire {
					sendOne(t, a, peer, 1, i)
					i++
				}
				chk.pumpUntil(t, b, peek, "the consumer to unmap the lane", func() bool {
					f := b.Footprint()
					return chk.got == i && f.RingsIn == 0 && f.MappedBytes == bBase
				})
			}
			if got := counter(a, CounterLanesRetired); got != cycles {
				t.Errorf("%d lanes retired, want %d", got, cycles)
			}
			if got := counter(b, "shm lanes retired by peers"); got != cycles {
				t.Errorf("the consumer freed %d lanes, want %d", got, cycles)
			}
			if got := counter(a, "shm lanes opened"); got != cycles {
				t.Errorf("%d lanes opened, want %d", got, cycles)
			}
		})
	}
}

// TestRetireIdleKeepsBusyLanes: a lane written to between two looks is
// not retired however long the clock ran, nor one whose frames wait in a
// backlog; a negative LaneIdle retires nothing.
func TestRetireIdleKeepsBusyLanes(t *testing.T) {
	const idle = time.Second
	a, b := newTestPair(t, Options{MTU: 4096, LaneAfter: -1, Lanes: 1, LaneIdle: idle})
	defer a.Close()
	defer b.Close()
	clk := &laneClock{now: time.Unix(1e9, 0)}
	chk := newInOrder(a)
	i := 0
	for range 50 {
		sendOne(t, a, b.Addr(), 1, i)
		i++
		if n := a.RetireIdle(clk.after(10 * idle)); n != 0 {
			t.Fatalf("a lane written to since the last look was retired (frame %d)", i)
		}
	}
	chk.pumpUntil(t, b, false, "every frame", func() bool { return chk.got == i })
	if !laneTaken(a, b.Addr()) {
		t.Fatal("the pair has no lane")
	}
}

// TestLaneIdleNegative: with LaneIdle negative, no lane is ever retired;
// GOMX_SHM_LANE_IDLE sets LaneIdle, and a value that is not a duration is
// refused, naming the variable.
func TestLaneIdleNegative(t *testing.T) {
	clk := &laneClock{now: time.Unix(1e9, 0)}
	c, d := newTestPair(t, Options{MTU: 4096, LaneAfter: -1, Lanes: 1, LaneIdle: -1})
	defer c.Close()
	defer d.Close()
	sendOne(t, c, d.Addr(), 1, 0)
	for range 5 {
		if n := c.RetireIdle(clk.after(time.Hour)); n != 0 {
			t.Fatal("a lane was retired with LaneIdle negative")
		}
	}
	t.Setenv("GOMX_SHM_LANE_IDLE", "250ms")
	if o, err := (Options{}).withDefaults(); err != nil || o.LaneIdle != 250*time.Millisecond {
		t.Errorf("GOMX_SHM_LANE_IDLE=250ms: LaneIdle %v, %v", o.LaneIdle, err)
	}
	t.Setenv("GOMX_SHM_LANE_IDLE", "soon")
	if _, err := (Options{}).withDefaults(); err == nil || !strings.Contains(err.Error(), "GOMX_SHM_LANE_IDLE") {
		t.Errorf("GOMX_SHM_LANE_IDLE=soon: %v, want an error naming it", err)
	}
}

// TestBusyLaterPairGetsLane: lanes go to the pairs busy now. A receiver
// that reads one lane, taken by a first producer, refuses a second one
// that gets busy later; once the first producer's lane goes idle and is
// retired, the second pair gets the lane. And a producer that writes one
// lane, to a first peer, with a second pair that asks for one, retires
// the first lane once it was idle for an eighth of LaneIdle (not while it
// is written to), and the busier pair gets it.
func TestBusyLaterPairGetsLane(t *testing.T) {
	const idle, laneAfter = time.Second, 8
	opts := Options{MTU: 4096, LaneAfter: laneAfter, Lanes: 1, LaneIdle: idle}
	clk := &laneClock{now: time.Unix(1e9, 0)}
	// busy sends frames from p (as producer id) to rx, received as they
	// go, until cond holds.
	busy := func(t *testing.T, p *Transport, id int, rx *Transport, chk *inOrder, next *int, what string, cond func() bool) {
		t.Helper()
		// Bounded by time, not frames: the lane is made and answered
		// by goroutines a loaded host may not run for a while.
		deadline := time.Now().Add(60 * time.Second)
		for n := 0; !cond(); n++ {
			if time.Now().After(deadline) {
				t.Fatalf("still waiting for %s after %d frames in 60s: %v", what, n, p.Counters())
			}
			sendOne(t, p, rx.Addr(), id, *next)
			*next++
			want := chk.got + 1
			chk.pumpUntil(t, rx, false, what, func() bool { return chk.got == want })
		}
	}

	t.Run("receiver's bound", func(t *testing.T) {
		boards := openMany(t, 3, opts)
		rx, p1, p2 := boards[0], boards[1], boards[2]
		chk := newInOrder(p1, p2)
		var n1, n2 int
		busy(t, p1, 1, rx, chk, &n1, "the first pair's lane", func() bool { return laneTaken(p1, rx.Addr()) })
		busy(t, p2, 2, rx, chk, &n2, "the second pair's refusal", func() bool {
			return counter(p2, "shm lanes refused by peers") == 1 && n2 > 4*laneAfter
		})
		if laneTaken(p2, rx.Addr()) {
			t.Fatal("the second pair has a lane beside the first one's")
		}
		p1.RetireIdle(clk.after(idle))
		if n := p1.RetireIdle(clk.after(idle)); n != 1 {
			t.Fatalf("%d lanes retired, want 1", n)
		}
		busy(t, p2, 2, rx, chk, &n2, "the second pair's lane", func() bool { return laneTaken(p2, rx.Addr()) })
		if f := rx.Footprint(); f.RingsIn != 1 {
			t.Errorf("the receiver reads %d lanes, want 1", f.RingsIn)
		}
	})

	t.Run("producer's bound", func(t *testing.T) {
		boards := openMany(t, 3, opts)
		a, b, c := boards[0], boards[1], boards[2]
		chkB, chkC := newInOrder(a), newInOrder(a)
		var nb, nc int
		busy(t, a, 1, b, chkB, &nb, "the first pair's lane", func() bool { return laneTaken(a, b.Addr()) })
		// The second pair passes LaneAfter while the one lane is taken.
		busy(t, a, 1, c, chkC, &nc, "the second pair to ask", func() bool { return a.laneWanted.Load() })
		if a.RetireIdle(clk.after(idle)) != 0 { // marks the first lane
			t.Fatal("a lane retired at its first look")
		}
		sendOne(t, a, b.Addr(), 1, nb) // the first lane is busy still
		nb++
		if n := a.RetireIdle(clk.after(idle / 4)); n != 0 {
			t.Fatalf("%d lanes written to since the last look retired", n)
		}
		if n := a.RetireIdle(clk.after(idle / 4)); n != 1 {
			t.Fatalf("%d lanes retired for the pair that asked, want 1", n)
		}
		chkB.pumpUntil(t, b, false, "the first pair's frames", func() bool { return chkB.got == nb && b.Footprint().RingsIn == 0 })
		busy(t, a, 1, c, chkC, &nc, "the second pair's lane", func() bool { return laneTaken(a, c.Addr()) })
		if f := a.Footprint(); f.RingsOut != 1 {
			t.Errorf("the producer writes %d lanes, want 1", f.RingsOut)
		}
	})
}

// TestLaneRetireRacesSends: producers send bursts of frames to one
// receiver while a goroutine retires their lanes as soon as they are idle
// (its clock runs an eighth of LaneIdle per look), so retirements race sends, lanes come and
// go, and lanes are taken back by other pairs (fewer lanes than pairs).
// Each producer goes through cycles: busy until its pair has a lane (and
// a burst more), then idle until the lane is retired. Every frame
// arrives, byte for byte, each producer's in order, with a receiver that
// busy-polls and one that sleeps, reading through Recv and through Peek
// and Take.
func TestLaneRetireRacesSends(t *testing.T) {
	for _, mode := range []struct {
		name string
		spin time.Duration
	}{{"busy-poll", time.Millisecond}, {"blocking", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			const producers, cycles, window, idle = 3, 12, 64, time.Second
			opts := Options{MTU: 4096, LaneAfter: 4, Lanes: 2, Spin: mode.spin, LaneIdle: idle, QueueSize: 16 << 10}
			boards := openMany(t, producers+1, opts)
			rx, tx := boards[0], boards[1:]
			clk := &laneClock{now: time.Unix(1e9, 0)}
			var stop atomic.Bool
			var wg, retirer sync.WaitGroup
			retirer.Add(1)
			go func() {
				defer retirer.Done()
				for !stop.Load() {
					// An eighth of LaneIdle a look, the least that
					// looks at the lanes: a lane is retired after
					// eight looks without a frame, and a pair gets a
					// lane after LaneAfter frames within eight.
					now := clk.after(idle / 8)
					for _, p := range tx {
						p.RetireIdle(now)
					}
					runtime.Gosched()
				}
			}()
			defer func() { stop.Store(true); retirer.Wait() }()
			race := newLaneRace(rx, tx, window)
			errs := race.errs
			for k, p := range tx {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer race.finished.Add(1)
					rnd := rand.New(rand.NewPCG(uint64(k), 1))
					i := 0
					send := func(n int) bool {
						if !race.send(k, p, &i, n) {
							return false
						}
						for range rnd.IntN(4) {
							runtime.Gosched()
						}
						return true
					}
					for c := range cycles {
						deadline := time.Now().Add(60 * time.Second)
						// Busy until the pair has a lane, then a burst more.
						for !laneTaken(p, rx.Addr()) {
							if !send(1 + rnd.IntN(16)) {
								return
							}
							if time.Now().After(deadline) {
								errs <- fmt.Errorf("producer %d cycle %d: no lane in 60s: %v", k+1, c, p.Counters())
								return
							}
						}
						if !send(1 + rnd.IntN(64)) {
							return
						}
						// Idle until its lane is retired.
						for laneTaken(p, rx.Addr()) {
							if time.Now().After(deadline) {
								errs <- fmt.Errorf("producer %d cycle %d: its lane was not retired in 60s", k+1, c)
								return
							}
							runtime.Gosched()
						}
					}
				}()
			}
			race.receive(t, nil)
			wg.Wait()
			var retired, opened uint64
			for _, p := range tx {
				retired += counter(p, CounterLanesRetired)
				opened += counter(p, "shm lanes opened")
			}
			if retired < producers*cycles {
				t.Errorf("%d lanes retired in all, want %d at least", retired, producers*cycles)
			}
			if n := counter(rx, "shm frames dropped (ring full)"); n != 0 {
				t.Errorf("%d frames dropped", n)
			}
			t.Logf("%d frames, %d lanes opened, %d retired", race.chk.got, opened, retired)
		})
	}
}
