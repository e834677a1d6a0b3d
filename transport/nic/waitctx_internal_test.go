package nic

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/transport"
)

// Recv's waits share one context, which a Wake cancels: the wait after
// it must make a fresh one, or it would find its context done at once and
// return 0, nil without waiting, as would every Recv after it. So after a
// Wake ended a wait, a Recv with a long timeout returns the frame a peer
// sends while it waits, polling and on interrupts.
func TestWaitContextReplacedAfterWake(t *testing.T) {
	for _, irq := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupts=%v", irq), func(t *testing.T) {
			a, b := internalPair(t, irq)
			frames := make([]transport.Frame, 4)
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			recv := func() {
				go func() {
					n, err := a.Recv(frames, time.Hour)
					done <- result{n, err}
				}()
			}
			// waiting waits until the Recv under way is inside its wait,
			// or reports false when it returned before.
			waiting := func() (result, bool) {
				for end := time.Now().Add(30 * time.Second); time.Now().Before(end); runtime.Gosched() {
					select {
					case r := <-done:
						return r, false
					default:
					}
					a.wakeMu.Lock()
					in := a.wakeWait != nil
					a.wakeMu.Unlock()
					if in {
						return result{}, true
					}
				}
				t.Fatal("Recv neither waited nor returned in 30 s")
				return result{}, false
			}
			recv()
			if r, ok := waiting(); !ok {
				t.Fatalf("Recv on an idle link returned %d, %v before it waited", r.n, r.err)
			}
			a.Wake()
			if r := <-done; r.n != 0 || r.err != nil {
				t.Fatalf("Recv woken: %d, %v; want 0, nil", r.n, r.err)
			}
			recv()
			if r, ok := waiting(); !ok {
				t.Fatalf("Recv after a Wake, with an hour's timeout, returned %d, %v before a frame came; want it to wait", r.n, r.err)
			}
			data := []byte("a frame sent while Recv waits, long enough for the minimum")
			if _, err := b.Send([]transport.Frame{{Peer: a.Addr(), Data: data}}); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if r.err != nil || r.n != 1 || string(frames[0].Data) != string(data) {
					t.Fatalf("Recv after a Wake: %d frames, %v; want the frame sent", r.n, r.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Recv after a Wake still waiting 30 s after a frame was sent")
			}
		})
	}
}

// internalPair returns two transports over a cabled pair of model 82574Ls
// (the e1000e driver, on interrupts if irq), closed as the test ends.
func internalPair(t *testing.T, irq bool) (*Transport, *Transport) {
	t.Helper()
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var ts [2]*Transport
	for i := range ts {
		o := e1000e.DefaultOptions()
		o.Interrupts = irq
		n, err := e1000e.Open(p.Functions()[i], o)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(n, Options{})
		if err != nil {
			_ = n.Close()
			t.Fatal(err)
		}
		ts[i] = tr
		t.Cleanup(func() {
			if err := tr.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	return ts[0], ts[1]
}
