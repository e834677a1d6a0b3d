package mx

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestRecycledRequestsStartClear: a request taken from a board's pool
// carries nothing of its last use, however that use went, although
// recycle clears only reqHot after a lean send and after a receive a
// lane record or a short frame filled (narrow), and of the segments only
// those its use wrote. Over the rings and over the in-process wire (the
// short path), lane or short messages, mediums of one fragment and of
// several, and large ones go both ways, with receives posted before and
// after them, one lean send given a timeout (SetRequestTimeout sets
// reqCold's resendMax), and waiters that poll or (Spin negative) sleep on
// their request's channel, which complete times (reqCold's wokeAt). A
// field left set would reach a later request: a resend budget, a region,
// a wake-up time, or a segment that keeps the application's buffer.
func TestRecycledRequestsStartClear(t *testing.T) {
	for _, tf := range []transportFactory{shmFactory, factoryNamed(t, "loopback")} {
		for _, spin := range []time.Duration{DefaultSpin, -1} {
			t.Run(fmt.Sprintf("%s/spin %v", tf.name, spin), func(t *testing.T) { recycledStartClear(t, tf, spin) })
		}
	}
}

func recycledStartClear(t *testing.T, tf transportFactory, spin time.Duration) {
	o := DefaultBoardOptions()
	o.Spin = spin
	pr := newPair(t, tf, o, loopback.Faults{})
	const n = 4 * 8
	for round := range 3 {
		ends := []struct {
			from, to *Endpoint
			addr     Addr
		}{{pr.a, pr.b, pr.atob}, {pr.b, pr.a, pr.btoa}}
		for _, d := range ends {
			base := uint64(round * n)
			rs, bufs := make([]*Request, n), make([][]byte, n)
			post := func(i int) {
				bufs[i] = make([]byte, 65536)
				r, err := d.to.IRecv([][]byte{bufs[i]}, base+uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				rs[i] = r
			}
			for i := range n / 2 {
				post(i)
			}
			sends := sendMixed(t, d.from, d.addr, n, base)
			if err := d.from.SetRequestTimeout(sends[0], time.Hour); err != nil {
				t.Fatal(err)
			}
			for i := n / 2; i < n; i++ {
				post(i)
			}
			for i, r := range rs {
				checkMixed(t, r, bufs[i], i)
			}
			waitSends(t, sends)
		}
	}
	if tf.name != "shm" {
		// The receives the short path filled are among them.
		for _, e := range []*Endpoint{pr.a, pr.b} {
			if c := e.Counters(); c[ShortRecvs] == 0 {
				t.Fatalf("endpoint %d took no message on the short path", e.id)
			}
		}
	}
	for _, bd := range []*Board{pr.ba, pr.bb} {
		checkPoolClear(t, bd)
	}
}

// checkPoolClear fails t when a request in b's pool has a field of a
// past use set: all of reqHot and reqCold zero, but region -1 (none), and
// no segment left in segsBuf.
func checkPoolClear(t *testing.T, b *Board) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.freeReqs) == 0 {
		t.Fatal("no request in the pool")
	}
	for i, r := range b.freeReqs {
		if !reflect.ValueOf(&r.reqHot).Elem().IsZero() {
			t.Errorf("pooled request %d: reqHot %+v, want zero", i, &r.reqHot)
		}
		if len(r.buf) != 0 {
			t.Errorf("pooled request %d: %d bytes of a payload copy, want none", i, len(r.buf))
		}
		for k, seg := range r.segsBuf[:cap(r.segsBuf)] {
			if seg != nil {
				t.Errorf("pooled request %d: segment %d of a past use kept (%d bytes)", i, k, len(seg))
			}
		}
		if r.region != -1 {
			t.Errorf("pooled request %d: region %d, want -1", i, r.region)
		}
		c := reflect.ValueOf(&r.reqCold).Elem()
		for f := range c.NumField() {
			if name := c.Type().Field(f).Name; name != "region" && !c.Field(f).IsZero() {
				t.Errorf("pooled request %d: reqCold.%s is %v, want zero", i, name, c.Field(f))
			}
		}
	}
}

// TestCompleteWakeClearsNarrow: complete writes wokeAt, a reqCold field,
// when it wakes a sleeping waiter, so it must take a narrow request's
// flag away, or recycle would leave the wake-up time for the request's
// next use. TestRecycledRequestsStartClear cannot see a missing clear: the
// woken Wait zeroes wokeAt itself before the request is freed.
func TestCompleteWakeClearsNarrow(t *testing.T) {
	pr := newPair(t, shmFactory, DefaultBoardOptions(), loopback.Faults{})
	b := pr.a.b
	b.mu.Lock()
	r := b.getReq(pr.a, kindRecv)
	r.narrow = true
	r.waiters = 1
	pr.a.complete(r, nil)
	narrow, woke := r.narrow, r.wokeAt
	b.mu.Unlock()
	<-r.ch
	if woke == 0 || narrow {
		t.Fatalf("complete woke a waiter (wokeAt %d) and left narrow %v: recycle would keep wokeAt for the next use", woke, narrow)
	}
}
