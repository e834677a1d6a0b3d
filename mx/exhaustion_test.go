package mx

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestExhaustionQueues drives 10 000 large messages through endpoints with
// 4 pull handles and 2 regions each: three sender endpoints keep 6 RNDVs
// coming at one receiver, so sends wait for regions and the receiver's
// pulls wait for handles. Every message must arrive byte-exact, in order,
// and every send must complete successfully: nothing is lost or faked.
func TestExhaustionQueues(t *testing.T) {
	const n, senders = 10000, 3
	opts := fastOptions()
	opts.RendezvousThreshold = 256 // everything longer is large: RNDV + PULL
	opts.PullHandles = 4
	opts.Regions = 2
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	eps := []*Endpoint{pr.a}
	dests := []Addr{pr.atob}
	for k := 1; k < senders; k++ {
		e, err := pr.ba.OpenEndpoint(10+k, testKey)
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.Connect(testCtx(t, 10*time.Second), pr.bb.NICID(), pr.b.ID(), testKey)
		if err != nil {
			t.Fatal(err)
		}
		eps, dests = append(eps, e), append(dests, d)
	}
	size := func(i int) int { return 257 + (i*7919)%20000 } // one to three pull replies
	ctx := testCtx(t, 5*time.Minute)
	errc := make(chan error, 1)
	go func() {
		// All receives posted at once: the pulls queue for the 4 handles.
		bufs := make([][]byte, n)
		rs := make([]*Request, n)
		for i := range n {
			bufs[i] = make([]byte, size(i))
			r, err := pr.b.IRecv([][]byte{bufs[i]}, uint64(i), ^uint64(0), nil)
			if err != nil {
				errc <- err
				return
			}
			rs[i] = r
		}
		for i, r := range rs {
			st, err := r.Wait(ctx)
			if err != nil {
				errc <- fmt.Errorf("receive %d: %w", i, err)
				return
			}
			if int(st.XferLength) != size(i) || !bytes.Equal(bufs[i], pattern(size(i), uint64(i))) {
				errc <- fmt.Errorf("receive %d: %d bytes, payload differs", i, st.XferLength)
				return
			}
		}
		errc <- nil
	}()
	// All sends posted at once, message i from sender i%3: they queue for
	// their endpoint's 2 regions.
	ss := make([]*Request, n)
	for i := range n {
		k := i % senders
		s, err := eps[k].ISend([][]byte{pattern(size(i), uint64(i))}, dests[k], uint64(i), nil)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ss[i] = s
	}
	for i, s := range ss {
		st, err := s.Wait(ctx)
		if err != nil || int(st.XferLength) != size(i) {
			t.Fatalf("send %d: %v, %d bytes taken", i, err, st.XferLength)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ca, cb := pr.a.Counters(), pr.b.Counters()
	if ca.Get(SendsQueued) == 0 || cb.Get(PullsQueued) == 0 {
		t.Fatalf("nothing waited: sends queued %d, pulls queued %d", ca.Get(SendsQueued), cb.Get(PullsQueued))
	}
	t.Logf("sends queued %d (one sender), pulls queued %d", ca.Get(SendsQueued), cb.Get(PullsQueued))
}

// TestExhaustionKeepsOrder: an eager send posted behind a large send that
// waits for a region waits too, so the receiver sees them in order.
func TestExhaustionKeepsOrder(t *testing.T) {
	opts := fastOptions()
	opts.Regions = 1
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	big := pattern(100000, 1)
	s1, _ := pr.a.ISend([][]byte{big}, pr.atob, 1, nil) // takes the only region
	s2, _ := pr.a.ISend([][]byte{big}, pr.atob, 2, nil) // waits for it
	s3, _ := pr.a.ISend([][]byte{[]byte("tiny")}, pr.atob, 3, nil)
	if ok, err := pr.a.IBuffered(s3); err != nil || !ok {
		t.Fatalf("an eager send is buffered: %v %v", ok, err)
	}
	if ok, _ := pr.a.IBuffered(s2); ok {
		t.Fatal("a large send reported buffered before completion")
	}
	for want := uint64(1); want <= 3; want++ {
		buf := make([]byte, len(big))
		r, _ := pr.b.IRecv([][]byte{buf}, 0, 0, nil)
		if st := mustWait(t, r, 10*time.Second); st.Match != want {
			t.Fatalf("receive %d got message %d", want, st.Match)
		}
	}
	for _, s := range []*Request{s1, s2, s3} {
		mustWait(t, s, 10*time.Second)
	}
}
