package shm

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// TestSpareLaneTakenAtOnce: a transport that dials a peer makes a spare
// lane then, and the pair that asks for a lane takes it: no segment is
// made after the dial, the lane is the bytes the spare mapped, and every
// frame arrives in order across the switch. A spare nobody takes is
// unmapped after spareIdles LaneIdles of RetireIdle's clock, and its place
// among the lanes written is free again: the pair gets a lane made when it
// asks, as without spares.
func TestSpareLaneTakenAtOnce(t *testing.T) {
	const idle = time.Second
	for _, name := range []string{"taken", "unused"} {
		t.Run(name, func(t *testing.T) {
			a, b := newTestPair(t, Options{MTU: 4096, LaneAfter: 8, Lanes: 1, LaneIdle: idle})
			defer a.Close()
			defer b.Close()
			var made atomic.Int32
			a.laneSeg = func(name string, n int, huge bool) (segment, int, error) {
				made.Add(1)
				return newSegment(name, n, huge)
			}
			buf := make([]transport.Frame, 8)
			next := 0
			exchange := func() {
				t.Helper()
				want := testFrame(1, next)
				if _, err := a.SendStrict([]transport.Frame{{Peer: b.Addr(), Data: want}}); err != nil {
					t.Fatalf("frame %d: %v", next, err)
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					n, err := b.Recv(buf, 10*time.Millisecond)
					if err != nil {
						t.Fatal(err)
					}
					if n == 1 && bytes.Equal(buf[0].Data, want) {
						break
					}
					if n != 0 {
						t.Fatalf("frame %d: got %d frames, the first of %d bytes", next, n, len(buf[0].Data))
					}
					if time.Now().After(deadline) {
						t.Fatalf("frame %d not received", next)
					}
				}
				next++
			}
			exchange()
			withSpare := a.Footprint()
			if made.Load() != 1 || counter(a, "shm spare lanes made") != 1 {
				t.Fatalf("the dial made %d segments (%d spares counted), want the spare", made.Load(), counter(a, "shm spare lanes made"))
			}
			if name == "taken" {
				for i := 0; counter(a, "shm lanes opened") == 0; i++ {
					if i > 10000 {
						t.Fatalf("no lane after %d frames", next)
					}
					exchange()
				}
				for range 20 {
					exchange() // on the lane
				}
				f := a.Footprint()
				if made.Load() != 1 || counter(a, "shm spare lanes taken by pairs") != 1 || f.RingsOut != 1 || f.MappedBytes != withSpare.MappedBytes {
					t.Fatalf("%d segments made, %d spares taken; footprint %+v with the lane, %+v with the spare: want the spare as the lane",
						made.Load(), counter(a, "shm spare lanes taken by pairs"), f, withSpare)
				}
				return
			}
			now := time.Now()
			a.RetireIdle(now) // its first look at the spare
			for range 2 {
				now = now.Add(spareIdles*idle/2 + time.Millisecond)
				a.RetireIdle(now)
			}
			f := a.Footprint()
			if q := int64(queueSegLen(a.opts.QueueSize)); f.MappedBytes != 2*q || a.lanesOut.Load() != 0 {
				t.Fatalf("after %v the producer maps %d bytes (%d with the spare), writes %d lanes; want its queue and its peer's, %d bytes, no lane",
					spareIdles*idle, f.MappedBytes, withSpare.MappedBytes, a.lanesOut.Load(), 2*q)
			}
			// The pair asks now, and gets a lane made for it.
			for i := 0; counter(a, "shm lanes opened") == 0; i++ {
				if i > 10000 {
					t.Fatalf("no lane after %d frames", next)
				}
				exchange()
			}
			if made.Load() != 2 || counter(a, "shm spare lanes taken by pairs") != 0 {
				t.Fatalf("%d segments made, %d spares taken; want the spare and the lane made for the pair", made.Load(), counter(a, "shm spare lanes taken by pairs"))
			}
		})
	}
}
