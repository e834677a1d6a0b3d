package mx

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// gatedKicker is a transport whose sends are queued and kicked, as
// AF_XDP's are (transport.Kicker); queued frames leave at once. Once
// armed, the next Kick made by a goroutine started in function sender
// reports on in and waits for gate: the sender is held between its kick
// and what follows it. Kicks from anywhere else (the board's receive
// loop sending an ack) pass, so the gate holds the send it means.
type gatedKicker struct {
	transport.Transport
	sender   string
	armed    atomic.Bool
	in, gate chan struct{}
}

func (g *gatedKicker) Queue(frames []transport.Frame) (int, error) { return g.Send(frames) }

func (g *gatedKicker) Kick() error {
	if g.armed.Load() && g.fromSender() && g.armed.CompareAndSwap(true, false) {
		g.in <- struct{}{}
		<-g.gate
	}
	return nil
}

// fromSender reports whether the calling goroutine runs a function named
// g.sender (the goroutine's own stack, read only while armed).
func (g *gatedKicker) fromSender() bool {
	buf := make([]byte, 8<<10)
	return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte(g.sender))
}

// TestShortSendConsumedBeforeItsStamp: over a transport that kicks after
// the lock, a short send is stamped after its kick (stampAfterKick). Held
// there, it may be acked by the peer's reply, completed and consumed by
// another goroutine's WaitAny. Its sender then finishes with it without
// touching a request freed or handed out again: nothing panics, the
// endpoint's zombie count stays right, and the receives posted next
// complete with their own messages only.
func TestShortSendConsumedBeforeItsStamp(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	g := &gatedKicker{Transport: w.a, sender: "TestShortSendConsumedBeforeItsStamp.func",
		in: make(chan struct{}), gate: make(chan struct{})}
	w.a = g
	pr := newPairOn(t, w, DefaultBoardOptions())
	ctx := testCtx(t, time.Minute)
	msg := []byte("8 bytes!")

	rb, err := pr.b.IRecv([][]byte{make([]byte, 8)}, 1, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	sent := make(chan error, 1)
	go func() {
		_, err := pr.a.ISend([][]byte{msg}, pr.atob, 1, nil)
		sent <- err
	}()
	<-g.in // the send is out, its sender held after the kick
	if _, err := rb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The reply acks the held send; A's WaitAny takes both completions.
	bufA := make([]byte, 8)
	if _, err := pr.a.IRecv([][]byte{bufA}, 2, ^uint64(0), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.b.ISend([][]byte{msg}, pr.btoa, 2, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range []uint64{2, 1} {
		if _, err := pr.a.WaitAny(ctx, m, ^uint64(0)); err != nil {
			t.Fatalf("WaitAny(%d): %v", m, err)
		}
	}
	close(g.gate)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	pr.ba.mu.Lock()
	zombies := pr.a.zombies
	pr.ba.mu.Unlock()
	if zombies != 0 {
		t.Fatalf("%d zombie sends counted for a send its ack completed", zombies)
	}
	// The requests made next (from the pool the held send went back to)
	// complete with their own messages only.
	for k := uint64(3); k < 6; k++ {
		buf := make([]byte, 8)
		r, err := pr.a.IRecv([][]byte{buf}, k, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done() {
			t.Fatalf("receive %d done before anything was sent to it", k)
		}
		want := []byte{byte(k), 1, 2, 3, 4, 5, 6, 7}
		if _, err := pr.b.ISend([][]byte{want}, pr.btoa, k, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("receive %d holds %x, want %x", k, buf, want)
		}
	}
}
