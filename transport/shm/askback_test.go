package shm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// Tests of lanes asked back by their consumer (askback.go). As in
// retire_test.go, RetireIdle is given a clock of the test's own, so no
// test waits for time to pass: each look of RetireIdle is a tick of that
// clock, the producers' and the consumer's alike.

// CounterLanesAskedBack and the other counters of askback.go, by name.
const (
	cntKept      = "shm lanes kept for busier pairs and taken"
	cntAskLapsed = "shm lane asks and kept lanes lapsed"
	cntAtAsk     = "shm lanes retired at the consumer's ask"
)

// TestConsumerAsksLaneBack: a receiver that reads one lane, taken by a
// pair that keeps trickling (a frame every look of RetireIdle, so never
// idle for LaneIdle), asks that lane back for a pair that gets busy on
// its queue, and the busy pair gets it; then the two swap roles, cycle
// after cycle, with a receiver that busy-polls and one that sleeps,
// reading through Recv and through Peek and Take. Every frame arrives
// byte for byte, each producer's in order, across every switch; the
// receiver reads one lane at most, and the counters say what happened.
func TestConsumerAsksLaneBack(t *testing.T) {
	for _, mode := range []struct {
		name string
		spin time.Duration
	}{{"busy-poll", time.Millisecond}, {"blocking", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			const idle, cycles, burst = time.Second, 6, 12
			opts := Options{MTU: 4096, LaneAfter: 8, Lanes: 1, Spin: mode.spin, LaneIdle: idle}
			boards := openMany(t, 3, opts)
			rx, tx := boards[0], boards[1:]
			clk := &laneClock{now: time.Unix(1e9, 0)}
			chk := newInOrder(tx...)
			var next [2]int
			// send sends n frames of producer k (0 or 1).
			send := func(k, n int) {
				for range n {
					sendOne(t, tx[k], rx.Addr(), k+1, next[k])
					next[k]++
				}
			}
			// look receives every frame sent so far, then has every
			// transport take a look of RetireIdle (an eighth of
			// LaneIdle), and the receiver act on it.
			look := func(peek bool) {
				t.Helper()
				want := next[0] + next[1]
				chk.pumpUntil(t, rx, peek, "every frame sent, and the lanes asked for answered", func() bool {
					return chk.got == want && !lanePending(tx[0], rx.Addr()) && !lanePending(tx[1], rx.Addr())
				})
				now := clk.after(idle / 8)
				for _, b := range boards {
					b.RetireIdle(now)
				}
				rx.lookNow()
				// An ask or an offer that went out is read by its
				// producer's watcher before the clock moves on (a look
				// is an eighth of LaneIdle in real time).
				chk.pumpUntil(t, rx, peek, "the producers to read the receiver's ask and offer", func() bool { return heard(rx, tx) })
				if f := rx.Footprint(); f.RingsIn > 1 {
					t.Fatalf("the receiver reads %d lanes, its bound is 1", f.RingsIn)
				}
			}
			// The first holder: busy until it has the lane.
			for n := 0; !laneTaken(tx[0], rx.Addr()); n++ {
				if n > 200 {
					t.Fatalf("no first lane after %d looks: %v", n, tx[0].Counters())
				}
				send(0, burst)
				look(false)
			}
			for c := range cycles {
				holder, busy := c%2, 1-c%2
				peek := c%2 == 1
				// The holder trickles a frame a look; the other pair is
				// busy on the queue until it takes the lane.
				for n := 0; !laneTaken(tx[busy], rx.Addr()); n++ {
					if n > 400 {
						t.Fatalf("cycle %d: the busy pair has no lane after %d looks: receiver %v, holder %v", c, n, rx.Counters(), tx[holder].Counters())
					}
					send(holder, 1)
					send(busy, burst)
					look(peek)
				}
				if laneTaken(tx[holder], rx.Addr()) {
					t.Fatalf("cycle %d: both pairs write lanes to a receiver that reads one", c)
				}
				// A few more looks with both sending: the lane stays
				// with the busy pair, the trickle on the queue.
				for range 3 * askLooks {
					send(holder, 1)
					send(busy, burst)
					look(peek)
				}
				if !laneTaken(tx[busy], rx.Addr()) {
					t.Fatalf("cycle %d: the busy pair lost its lane to a trickle: receiver %v, holder %v, busy %v", c, rx.Counters(), tx[holder].Counters(), tx[busy].Counters())
				}
			}
			chk.pumpUntil(t, rx, false, "every frame", func() bool { return chk.got == next[0]+next[1] })
			asked := counter(rx, CounterLanesAskedBack)
			kept := counter(rx, cntKept)
			atAsk := counter(tx[0], cntAtAsk) + counter(tx[1], cntAtAsk)
			if lapsed := counter(rx, cntAskLapsed); asked != cycles || kept != cycles || atAsk != cycles || lapsed != 0 {
				t.Errorf("over %d cycles: %d lanes asked back, %d kept and taken, %d retired at the ask, %d lapsed; want %d, %d, %d, 0", cycles, asked, kept, atAsk, lapsed, cycles, cycles, cycles)
			}
			if n := counter(rx, "shm frames dropped (ring full)") + counter(tx[0], "shm frames dropped (ring full)") + counter(tx[1], "shm frames dropped (ring full)"); n != 0 {
				t.Errorf("%d frames dropped", n)
			}
			t.Logf("%d frames; %d asked back, %d kept and taken, %d lapsed, %d retired at the ask", chk.got, asked, kept, counter(rx, cntAskLapsed), atAsk)
		})
	}
}

// lookNow has the Recv side act on RetireIdle's last look now, as its
// next commit would (lookAtLanes), so that the test's looks do not depend
// on what its last Recv took. The caller's frames are all checked.
func (t *Transport) lookNow() {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	t.commit()
}

// TestAskBackRacesSends: four producers, a receiver that reads two lanes.
// Each producer goes through cycles: busy (bursts as fast as the receiver
// takes them) until its pair has a lane, then a trickle of a frame per
// look of RetireIdle until its lane is asked back. The receiving
// goroutine runs everyone's RetireIdle with a clock of an eighth of
// LaneIdle a look, so asks race sends, the producers' own idle
// retirement (once a producer is done, the others' trickles stop and idle
// lanes retire on their own) and lanes kept for pairs. The clock moves on
// only once the receiver took a few frames, the trickling holders sent
// their frame of the last look and the producers read the receiver's ask
// and offer, as LaneIdle in real time is ample for all three: so a holder
// that the scheduler leaves aside is not idle, nor does an ask lapse,
// for the test's clock alone, and lanes move by asks until a producer is
// done. Every frame arrives byte for byte, each producer's in order, none
// dropped, lanes are asked back and the pairs asked for get them, with a
// receiver that busy-polls and one that sleeps, reading through Recv and
// through Peek and Take.
func TestAskBackRacesSends(t *testing.T) {
	for _, mode := range []struct {
		name string
		spin time.Duration
	}{{"busy-poll", time.Millisecond}, {"blocking", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			const producers, cycles, window, idle = 4, 6, 64, time.Second
			const cycleLooks = 2000 // ten times the longest seen (116, in 220 looks in all)
			opts := Options{MTU: 4096, LaneAfter: 8, Lanes: 2, Spin: mode.spin, LaneIdle: idle, QueueSize: 32 << 10}
			boards := openMany(t, producers+1, opts)
			rx, tx := boards[0], boards[1:]
			clk := &laneClock{now: time.Unix(1e9, 0)}
			var stop atomic.Bool
			defer stop.Store(true)
			var looks atomic.Int64
			var longest [producers]int64 // the most looks a cycle of producer k took (its goroutine's)
			// trickled[k]: 1 + the look producer k sent its trickle
			// frame of, while it trickles; 0 while it does not.
			var trickled [producers]atomic.Int64
			var wg sync.WaitGroup
			race := newLaneRace(rx, tx, window)
			errs, finished, chk := race.errs, &race.finished, race.chk
			for k, p := range tx {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer finished.Add(1)
					rnd := rand.New(rand.NewPCG(uint64(k), 2))
					i := 0
					send := func(n int) bool { return race.send(k, p, &i, n) }
					// A cycle lasts as long as the others' work needs:
					// a holder that trickles may keep its lane while the
					// other lane goes from busy pair to busy pair. So
					// what fails a cycle is the test's clock stopped (no
					// look for a minute, which no load explains), not
					// the cycle's length.
					look, lookAt := looks.Load(), time.Now()
					stalled := func() bool {
						if l := looks.Load(); l != look {
							look, lookAt = l, time.Now()
						}
						return time.Since(lookAt) > time.Minute
					}
					// And a cycle that looks advance in but that never
					// ends (a livelock: frames flow, lanes do not move)
					// fails after cycleLooks looks.
					for c := range cycles {
						start := looks.Load()
						overdue := func() bool { return looks.Load()-start > cycleLooks }
						for !laneTaken(p, rx.Addr()) {
							if !send(1 + rnd.IntN(16)) {
								return
							}
							if stalled() {
								errs <- fmt.Errorf("producer %d cycle %d: no lane, and no look for a minute: %v", k+1, c, p.Counters())
								return
							}
							if overdue() {
								errs <- fmt.Errorf("producer %d cycle %d: no lane after %d looks: %v", k+1, c, cycleLooks, p.Counters())
								return
							}
						}
						// A trickle while others are busy: a frame a
						// look, until the lane is asked back (or, once
						// a producer is done, retired idle).
						for laneTaken(p, rx.Addr()) {
							if finished.Load() == 0 {
								l := looks.Load()
								if !send(1) {
									return
								}
								trickled[k].Store(l + 1)
								for looks.Load() == l && laneTaken(p, rx.Addr()) && finished.Load() == 0 && !stop.Load() {
									runtime.Gosched()
								}
								trickled[k].Store(0)
							} else {
								runtime.Gosched()
							}
							if stalled() {
								errs <- fmt.Errorf("producer %d cycle %d: its lane was neither asked back nor retired, and no look for a minute", k+1, c)
								return
							}
							if overdue() {
								errs <- fmt.Errorf("producer %d cycle %d: its lane was neither asked back nor retired after %d looks", k+1, c, cycleLooks)
								return
							}
						}
						longest[k] = max(longest[k], looks.Load()-start)
					}
				}()
			}
			// ready: the clock may move on. Each holder that trickles
			// sent its frame of this look (or stopped trickling), and
			// the producers answered or heard what the receiver asked.
			ready := func() bool {
				l := looks.Load()
				for k, p := range tx {
					if laneTaken(p, rx.Addr()) && finished.Load() == 0 && trickled[k].Load() != l+1 {
						return false
					}
					if lanePending(p, rx.Addr()) {
						return false
					}
				}
				return heard(rx, tx)
			}
			mark, c := 0, 0
			race.receive(t, func() {
				// A look once the receiver took a few frames, or none
				// came (every producer waits for a look), and ready.
				if (chk.got >= mark+8 || c%8 == 7) && ready() {
					now := clk.after(idle / 8)
					for _, b := range boards {
						b.RetireIdle(now)
					}
					rx.lookNow()
					looks.Add(1)
					mark = chk.got
				}
				c++
			})
			wg.Wait()
			var atAsk uint64
			for _, p := range tx {
				atAsk += counter(p, cntAtAsk)
			}
			asked, kept := counter(rx, CounterLanesAskedBack), counter(rx, cntKept)
			if asked == 0 || kept == 0 {
				t.Errorf("%d lanes asked back, %d kept and taken: the receiver's bound never made a lane move", asked, kept)
			}
			for _, b := range boards {
				if n := counter(b, "shm frames dropped (ring full)"); n != 0 {
					t.Errorf("%d frames dropped", n)
				}
			}
			t.Logf("%d frames, %d looks, the longest cycle %d; %d asked back, %d kept and taken, %d lapsed, %d retired at the ask, %d retired in all",
				chk.got, looks.Load(), slices.Max(longest[:]), asked, kept, counter(rx, cntAskLapsed), atAsk, sumCounter(tx, CounterLanesRetired))
		})
	}
}

// heard reports whether the producers of tx read the ask and the offer
// that rx has out now, if any (their watchers set retireAsk and offered).
// Recv side of rx.
func heard(rx *Transport, tx []*Transport) bool {
	rx.inMu.Lock()
	kept := rx.reserved
	rx.inMu.Unlock()
	for _, p := range tx {
		o := outTo(p, rx.Addr())
		if o == nil {
			continue
		}
		o.mu.Lock()
		asked, offered := o.retireAsk.Load() || o.data == nil, o.offered.Load() || o.laneAsked || o.data != nil
		o.mu.Unlock()
		if v := rx.askV; v != nil && v.peer == p.Addr() && !asked {
			return false
		}
		if kept != nil && kept.peer == p.Addr() && !offered {
			return false
		}
	}
	return true
}

// lanePending reports whether a asked for a lane to peer and has no
// answer yet: the test's clock waits for it, as a lane takes
// milliseconds to make, which are a few looks in real time at most.
func lanePending(a *Transport, peer transport.NICID) bool {
	o := outTo(a, peer)
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.laneAsked && o.laneOK == 0 && len(o.laneAns) == 0
}

func sumCounter(ts []*Transport, name string) uint64 {
	n := uint64(0)
	for _, t := range ts {
		n += counter(t, name)
	}
	return n
}

// FuzzProducerControl checks what a producer does with a control message
// its consumer sent (outRing.control) against the layout read byte by
// byte: an ask for the lane back (7) sets retireAsk and the transport's
// flag, an offer (8) sets offered, word of a lane freed (6) clears an
// ask and sets laneFreed, a lane's answer (5) goes to its channel, a
// segment's (3) answers the pass of that segment; anything else, and any
// message that is not ctlLen bytes with the magic, changes nothing.
// asked: an ask is out before.
func FuzzProducerControl(f *testing.F) {
	for _, k := range []uint32{ctlAck, ctlLaneAns, ctlLaneFree, ctlLaneRetire, ctlLaneOffer, 9} {
		var m [ctlLen]byte
		putCtl(m[:], k, 1, 2, 3)
		f.Add(m[:], k%2 == 0)
	}
	f.Add([]byte("gmxc"), true)
	f.Fuzz(func(t *testing.T, b []byte, asked bool) {
		var lanes, refused atomic.Uint64
		var flag atomic.Bool
		o := &outRing{answers: newShareAnswers(), laneAns: make(chan uint32, 1), lanesCnt: &lanes, refusedCnt: &refused, asked: &flag}
		o.retireAsk.Store(asked)
		u := func(i int) uint32 { return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24 }
		kind, id := uint32(0), uint32(0)
		if len(b) == 24 && string(b[:4]) == "cxmg" {
			kind, id = u(4), u(8)
		}
		o.answers.expect(id) // a segment passed: the one a segment's answer names
		o.control(b, nil)
		wantAsk, wantFlag, wantOffer, wantFreed := asked, false, false, false
		var wantAns, wantAck int
		switch kind {
		case 3:
			wantAck = 1
		case 5:
			wantAns = 1
		case 6:
			wantAsk, wantFreed = false, true
		case 7:
			wantAsk, wantFlag = true, true
		case 8:
			wantOffer = true
		}
		if o.retireAsk.Load() != wantAsk || flag.Load() != wantFlag || o.offered.Load() != wantOffer || o.laneFreed.Load() != wantFreed ||
			len(o.laneAns) != wantAns || len(o.answers.came) != wantAck || o.answers.owed(id) != (wantAck == 0) {
			t.Fatalf("control(%x), an ask out %v: ask %v flag %v offer %v freed %v, %d answers, %d acks, segment %d still owed %v", b, asked,
				o.retireAsk.Load(), flag.Load(), o.offered.Load(), o.laneFreed.Load(), len(o.laneAns), len(o.answers.came), id, o.answers.owed(id))
		}
		if wantAns == 1 {
			if st := <-o.laneAns; st != u(12) {
				t.Fatalf("control(%x): lane answer %d, want %d", b, st, u(12))
			}
		}
		if wantAck == 1 {
			if _, id, st := o.answers.take([]uint32{id}); id != u(8) && u(12) != 0 || st != u(12) {
				t.Fatalf("control(%x): segment %d answered with status %d", b, id, st)
			}
		}
	})
}
