package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestAckClock checks the time the receive path's ack bookkeeping uses: a
// polling waiter's reading (or a later one of the board's) when it has
// one, without reading the clock; the batch's reading when it made one;
// else a reading of its own.
func TestAckClock(t *testing.T) {
	// A board whose clock reads about an hour: any reading stands out
	// from the small values the cases set.
	hour := int64(time.Hour)
	for _, c := range []struct {
		name        string
		seen, nowv  int64
		nowOK       bool
		want        int64 // 0: a reading of the clock
		wantReadNow bool
	}{
		{name: "waiter's reading", seen: 5000, nowv: 1000, want: 5000},
		{name: "board's later reading", seen: 5000, nowv: 9000, want: 9000},
		{name: "batch's reading", seen: 5000, nowv: 7, nowOK: true, want: 7},
		{name: "no reading at hand", nowv: 1000, wantReadNow: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Board{base: time.Now().Add(-time.Hour), seen: c.seen, nowv: c.nowv, nowOK: c.nowOK}
			got := b.ackClock()
			if c.wantReadNow {
				if got < hour || !b.nowOK || b.nowv != got {
					t.Fatalf("ackClock = %d, nowOK %v, nowv %d: want a reading of the clock (about %d), kept for the batch", got, b.nowOK, b.nowv, hour)
				}
				return
			}
			if got != c.want {
				t.Fatalf("ackClock = %d, want %d", got, c.want)
			}
			if b.nowOK != c.nowOK {
				t.Fatalf("ackClock read the clock (nowOK %v): it had a reading at hand", b.nowOK)
			}
		})
	}
}

// TestPolledSampleWaitsForReading checks where a round-trip sample from a
// polling waiter's batch is taken: on the board's next clock reading
// when that comes within rttFoldGap of the waiter's, dropped when it
// comes later; on the batch's reading when it has one; on a reading
// made at once when no waiter's reading is at hand.
func TestPolledSampleWaitsForReading(t *testing.T) {
	// A board whose clock reads ten minutes (below rttMaxSample).
	ten := int64(10 * time.Minute)
	for _, c := range []struct {
		name  string
		seen  int64 // the waiter's reading (0: none)
		nowOK bool  // the batch read the clock (at 3000)
		next  int64 // the board's next reading (0: none)
		want  int64 // the sample taken (sent at 500); 0: none; -1: one on a reading of the clock
	}{
		{name: "next reading soon", seen: 1000, next: 4000, want: 3500},
		{name: "next reading late", seen: 1000, next: 1000 + rttFoldGap + 1, want: 0},
		// Another goroutine's reading from before the waiter's (made
		// before the ack came, its timer run delayed): dropped, not a
		// sample of almost nothing.
		{name: "next reading older", seen: 1000, next: 900, want: 0},
		{name: "batch's reading", seen: 1000, nowOK: true, want: 2500},
		{name: "no waiter's reading", want: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Board{base: time.Now().Add(-10 * time.Minute), seen: c.seen, nowv: 3000, nowOK: c.nowOK}
			p := &partner{ep: &Endpoint{b: b}}
			p.sampleRTT(500)
			b.seen = 0
			if c.next != 0 {
				if p.rtt.ok {
					t.Fatalf("sample %d taken before the next reading", p.rtt.srtt)
				}
				b.useReading(c.next)
			}
			switch {
			case len(b.rttPend) != 0:
				t.Fatalf("%d samples still pending after the reading", len(b.rttPend))
			case c.want == 0 && p.rtt.ok:
				t.Fatalf("sample %d taken, want it dropped", p.rtt.srtt)
			case c.want > 0 && p.rtt.srtt != c.want:
				t.Fatalf("sample %v, want %d", p.rtt, c.want)
			case c.want < 0 && p.rtt.srtt < ten-500:
				t.Fatalf("sample %v, want one on a reading of the clock (about %d)", p.rtt, ten)
			}
		})
	}
}

// TestPolledRoundTripSamples checks that round-trip samples taken on a
// polling waiter's reading (ackClock) measure a round trip: a ping-pong
// of busy-polling waiters leaves each side's estimate positive and well
// above the 1 ns a sample taken before its send would be clamped to.
func TestPolledRoundTripSamples(t *testing.T) {
	opts := DefaultBoardOptions()
	opts.BusyPoll = true
	pr := newPair(t, factoryNamed(t, "loopback"), opts, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	const rounds = 2000
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		for range rounds {
			r, err := pr.b.IRecv([][]byte{buf}, 0, 0, nil)
			if err == nil {
				_, err = r.Wait(ctx)
			}
			if err != nil {
				done <- err
				return
			}
			s, err := pr.b.ISend([][]byte{buf}, pr.btoa, 0, nil)
			if err == nil {
				_, err = s.Wait(ctx)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	sbuf, rbuf := make([]byte, 8), make([]byte, 8)
	for range rounds {
		pingOnce(t, ctx, pr.a, pr.atob, pr.a, 0, 0, [][]byte{sbuf}, [][]byte{rbuf})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		name string
		b    *Board
		to   Addr
	}{{"a", pr.ba, pr.atob}, {"b", pr.bb, pr.btoa}} {
		side.b.mu.Lock()
		est := side.to.p.rtt
		side.b.mu.Unlock()
		if !est.ok || est.srtt < 100 {
			t.Errorf("side %s: round-trip estimate %+v after %d round trips: want samples, and an srtt of at least 100 ns", side.name, est, rounds)
		}
	}
}
