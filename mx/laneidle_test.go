package mx

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/shm"
	"github.com/gomx-dev/gomx/transport/udp"
)

// TestHostLaneRetiredWhenIdle: two boards of the host path exchange a
// burst of messages (the pair takes a lane each way it is busy), go idle
// (the board timers retire the lanes after LocalOptions.LaneIdle, and
// both processes' footprint drops to their queues), and do it again, for
// several cycles, with busy-polling and with blocking waits. Every
// message lands in the receive posted for it, in send order, byte for
// byte, across every switch from the queue to a lane and back.
func TestHostLaneRetiredWhenIdle(t *testing.T) {
	for _, mode := range []struct {
		name string
		busy bool
	}{{"busy-poll", true}, {"blocking", false}} {
		t.Run(mode.name, func(t *testing.T) {
			checkLeaks(t)
			dir := shmDir(t)
			ctx := testCtx(t, 120*time.Second)
			open := func() *Board {
				tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
				if err != nil {
					t.Skipf("udp unavailable: %v", err)
				}
				o := fastOptions()
				o.Local = LocalOptions{Off: true, Shm: true, ShmDir: dir, LaneIdle: 50 * time.Millisecond}
				o.BusyPoll = mode.busy
				b, err := NewBoard(tr, o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				if b.host == nil {
					t.Fatalf("no host path: %v", b.HostPathErr())
				}
				return b
			}
			a, b := open(), open()
			eb, err := b.OpenEndpoint(0, testKey)
			if err != nil {
				t.Fatal(err)
			}
			ea, addr := openConnected(t, ctx, a, b.NICID())
			lanes := func(x *Board) int {
				f := x.host.tr.Footprint()
				return f.RingsOut + f.RingsIn
			}
			wait := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); !cond(); {
					if time.Now().After(deadline) {
						t.Fatalf("still waiting for %s: a %+v, b %+v", what, a.host.tr.Footprint(), b.host.tr.Footprint())
					}
					time.Sleep(time.Millisecond)
				}
			}
			// Queues only: the pair is connected and idle. (A spare
			// lane, made when a board dialed, is not counted: it
			// becomes the lane, or is given back once idle.)
			wait("no lane before the first burst", func() bool { return lanes(a)+lanes(b) == 0 })
			fa, fb := a.host.tr.Footprint(), b.host.tr.Footprint()
			aBase, bBase := fa.MappedBytes-fa.SpareBytes, fb.MappedBytes-fb.SpareBytes
			const cycles, burst = 4, 100
			next := 0
			// exchange sends a burst of messages from a to b and checks
			// that each lands in the receive posted for it, in order.
			exchange := func(c int) {
				t.Helper()
				recvs, bufs := make([]*Request, burst), make([][]byte, burst)
				for i := range burst {
					bufs[i] = make([]byte, 128)
					if recvs[i], err = eb.IRecv([][]byte{bufs[i]}, 0, 0, nil); err != nil {
						t.Fatal(err)
					}
				}
				var sends []*Request
				for i := range burst {
					size := 8 + (next+i)%121
					s, err := ea.ISend([][]byte{pattern(size, uint64(next+i))}, addr, uint64(next+i), nil)
					if err != nil {
						t.Fatal(err)
					}
					sends = append(sends, s)
				}
				for i, r := range recvs {
					size := 8 + (next+i)%121
					st := mustWait(t, r, 30*time.Second)
					if st.Code != nil || st.Match != uint64(next+i) || int(st.XferLength) != size || string(bufs[i][:size]) != string(pattern(size, uint64(next+i))) {
						t.Fatalf("cycle %d: receive %d: status %v, match %d, %d bytes (want message %d of %d bytes)", c, i, st.Code, st.Match, st.XferLength, next+i, size)
					}
				}
				waitSends(t, sends)
				next += burst
			}
			for c := range cycles {
				// Busy: bursts until the pair has its lane (LaneAfter
				// frames within a LaneIdle, however slow the host).
				// The footprint is taken when the lane is seen: a host
				// that deschedules the pair for LaneIdle retires it
				// again before the next look.
				k := 0
				var fa, fb shm.Footprint
				for ; ; k++ {
					if fa, fb = a.host.tr.Footprint(), b.host.tr.Footprint(); fa.RingsOut != 0 && fb.RingsIn != 0 {
						break
					}
					if k == 100 {
						t.Fatalf("cycle %d: no lane after %d messages: a %+v, b %+v", c, k*burst, fa, fb)
					}
					exchange(c)
				}
				if fa.MappedBytes <= aBase || fb.MappedBytes <= bBase {
					t.Fatalf("cycle %d: a lane is up, yet the boards map %d and %d bytes (%d and %d with queues only)", c, fa.MappedBytes, fb.MappedBytes, aBase, bBase)
				}
				exchange(c) // on the lane, or on the queue again once it retired: each message lands either way
				idleFrom := time.Now()
				wait(fmt.Sprintf("cycle %d: the idle lanes retired", c), func() bool {
					return lanes(a)+lanes(b) == 0 && a.host.tr.Footprint().MappedBytes == aBase && b.host.tr.Footprint().MappedBytes == bBase
				})
				t.Logf("cycle %d: the lane up after %d bursts; bytes mapped by the sender %d -> %d, by the receiver %d -> %d, %v after the last burst", c,
					k, fa.MappedBytes, aBase, fb.MappedBytes, bBase, time.Since(idleFrom).Round(time.Millisecond))
			}
			var retired uint64
			for _, c := range a.TransportCounters() {
				if c.Name == shm.CounterLanesRetired {
					retired = c.Value
				}
			}
			if retired < cycles {
				t.Errorf("%d lanes retired, want %d at least", retired, cycles)
			}
		})
	}
}
