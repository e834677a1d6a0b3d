package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestPullAnswerAfterWindowFull runs more pulls at once than questions
// may wait for their answers (askWindow), toward a responder that answers
// the first question and is then descheduled: its answer, and the
// replies to every PULL it handles after it, wait. Every pull goes silent
// and asks; the window fills, and the pulls that have no question
// waiting ask on. Giving the oldest waiting question up to number a new
// one, as before, gave the new one the old one's tag: the old answer,
// which comes first when the responder runs again and answers a question
// asked before the later PULLs went out, was taken for the new one, whose
// pull asked again for every frame of those PULLs, and each arrived
// twice. The wire loses nothing: nothing is asked for again, nothing
// arrives twice, and every byte arrives.
func TestPullAnswerAfterWindowFull(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	resp := &staleAnswer{Transport: w.a}
	w.a = resp
	watch := &heldAsks{Transport: w.b, resp: resp, after: 3 * askWindow}
	w.b = watch
	opts := fastOptions()
	opts.PullTimeout = 2 * time.Millisecond
	opts.PullBlocks, opts.PullBlockFrames = 2, 4 // PULLs after the first question
	pr := newPairOn(t, w, opts)
	const pulls = askWindow + 8
	msg := pattern(256<<10, 3)
	buf := make([]byte, len(msg))
	exchangeWhole(t, pr, msg, buf, 1) // the pull round trip is measured
	bufs := make([][]byte, pulls)
	for i := range bufs {
		bufs[i] = make([]byte, len(msg))
	}
	watch.mu.Lock()
	watch.armed = true
	watch.mu.Unlock()
	resp.mu.Lock()
	resp.hold = true
	resp.mu.Unlock()
	cb0 := pr.b.Counters()
	ctx := testCtx(t, 60*time.Second)
	var recvs, sends []*Request
	for i := range pulls {
		r, err := pr.b.IRecv([][]byte{bufs[i]}, uint64(10+i), ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		recvs = append(recvs, r)
	}
	for i := range pulls {
		s, err := pr.a.ISend([][]byte{msg}, pr.atob, uint64(10+i), nil)
		if err != nil {
			t.Fatal(err)
		}
		sends = append(sends, s)
	}
	wait := func(rs []*Request) {
		for _, r := range rs {
			if _, err := r.Wait(ctx); err != nil {
				if ctx.Err() != nil {
					watch.mu.Lock()
					n := watch.n
					watch.mu.Unlock()
					t.Fatalf("%v after %d questions while the responder was quiet", err, n)
				}
				t.Fatal(err)
			}
		}
	}
	wait(recvs)
	wait(sends)
	cb := pr.b.Counters()
	watch.mu.Lock()
	done, n := watch.done, watch.n
	watch.mu.Unlock()
	if !done {
		t.Fatalf("the puller asked %d times while the responder was quiet, too few to fill the window: nothing was tested", n)
	}
	noPullRecovery(t, cb0, cb)
	for i := range bufs {
		if !bytes.Equal(bufs[i], msg) {
			t.Fatalf("message %d differs", i)
		}
	}
}
