package mx

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

const testKey = 0x600D

// pair is two boards with one endpoint each, connected both ways.
type pair struct {
	w          *wire2
	ba, bb     *Board
	a, b       *Endpoint
	atob, btoa Addr
}

// newPair opens a connected pair of boards on a fresh wire of tf and checks
// for leaked goroutines when the test ends.
func newPair(t testing.TB, tf transportFactory, opts BoardOptions, f loopback.Faults, optsB ...BoardOptions) *pair {
	t.Helper()
	checkLeaks(t)
	return newPairOn(t, tf.new(t, f), opts, optsB...)
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// checkLeaks fails the test if goroutines started during it outlive it.
func checkLeaks(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// pattern fills a buffer with bytes derived from seed and position.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func mustWait(t testing.TB, r *Request, d time.Duration) Status {
	t.Helper()
	st, err := r.Wait(testCtx(t, d))
	if err != nil {
		t.Fatalf("wait: %v (status %+v)", err, st)
	}
	return st
}

// receiveWhile posts an 8-byte receive on pr.a and waits for it on
// another goroutine until cond holds (what names it), runs whileWaiting
// (if not nil), then sends the message from pr.b and checks that the wait
// completed with its bytes.
func receiveWhile(t *testing.T, pr *pair, what string, cond func() bool, whileWaiting func()) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	buf := make([]byte, 8)
	r, err := pr.a.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := r.Wait(ctx)
		errc <- err
	}()
	waitUntil(t, what, cond)
	if whileWaiting != nil {
		whileWaiting()
	}
	s, err := pr.b.ISend([][]byte{[]byte("8 bytes!")}, pr.btoa, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, time.Minute)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if string(buf) != "8 bytes!" {
		t.Fatalf("received %q", buf)
	}
}

// requestReply sends msg from a to b (match 1) and, once it has arrived,
// an empty reply from b to a (match 2), then waits for the reply and for
// both sends, d at most each: the request's ack may ride on the reply, so
// a test that delays its acks still round-trips at once, and the boards
// measure the round trip from it. It fails the test if msg arrives
// changed. A nil msg is sent and received with no segment at all.
func (pr *pair) requestReply(t testing.TB, msg []byte, d time.Duration) {
	t.Helper()
	var ssegs, rsegs [][]byte
	buf := make([]byte, len(msg))
	if msg != nil {
		ssegs, rsegs = [][]byte{msg}, [][]byte{buf}
	}
	r, err := pr.b.IRecv(rsegs, 1, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pr.a.ISend(ssegs, pr.atob, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, r, d)
	back, err := pr.b.ISend(nil, pr.btoa, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := pr.a.IRecv(nil, 2, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, r2, d)
	mustWait(t, s, d)
	mustWait(t, back, d)
	if !bytes.Equal(buf, msg) {
		t.Fatalf("got %q, want %q", buf, msg)
	}
}

// echoB starts pr.b answering n messages from pr.a on a goroutine: each
// received (any match) into rsegs and answered with ssegs (match 0),
// every request waited for under ctx. The channel gets the first error,
// or nil once all n are answered. The context returned is ctx, cancelled
// with the echo's error as its cause if the echo fails: the pinging side
// waits under it, so an echo that fails early stops the pinging at once
// with the echo's error (pingOnce reports the cause) instead of leaving
// it to ctx's deadline. Benchmarks pass segments made once, so the echo
// allocates only its requests.
func (pr *pair) echoB(ctx context.Context, n int, rsegs, ssegs [][]byte) (context.Context, <-chan error) {
	pinging, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() {
		err := func() error {
			for range n {
				r, err := pr.b.IRecv(rsegs, 0, 0, nil)
				if err != nil {
					return err
				}
				if _, err := r.Wait(ctx); err != nil {
					return err
				}
				s, err := pr.b.ISend(ssegs, pr.btoa, 0, nil)
				if err != nil {
					return err
				}
				if _, err := s.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			cancel(fmt.Errorf("echo: %w", err))
		}
		done <- err
	}()
	return pinging, done
}

// exchange posts a receive into rsegs on dst for match (under mask),
// sends ssegs from src to to with that match, and waits for both; it
// fails the test on any error. It allocates nothing beyond the two
// requests' own, for the tests that count allocations.
func exchange(t testing.TB, ctx context.Context, src *Endpoint, to Addr, dst *Endpoint, match, mask uint64, ssegs, rsegs [][]byte) {
	t.Helper()
	pingOnce(t, ctx, src, to, dst, match, mask, ssegs, rsegs)
}

// pingOnce is exchange for benchmarks' timed loops: without t.Helper,
// whose stack walk costs a few hundred nanoseconds a call, as much as the
// message it would be timed with (failures then name this line, not the
// caller's).
func pingOnce(t testing.TB, ctx context.Context, src *Endpoint, to Addr, dst *Endpoint, match, mask uint64, ssegs, rsegs [][]byte) {
	r, err := dst.IRecv(rsegs, match, mask, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := src.ISend(ssegs, to, match, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(causeOf(ctx, err))
	}
	if _, err := r.Wait(ctx); err != nil {
		t.Fatal(causeOf(ctx, err))
	}
}

// causeOf is err, a wait's under ctx, with the cause ctx was cancelled
// with when that is more than ctx's own error (echoB's echo failing).
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		return fmt.Errorf("%w (%v)", err, c)
	}
	return err
}

// openConnected opens endpoint 0 of b and connects it to endpoint 0 of
// the board nic, both with testKey; it fails the test on any error.
func openConnected(t testing.TB, ctx context.Context, b *Board, nic transport.NICID) (*Endpoint, Addr) {
	t.Helper()
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := e.Connect(ctx, nic, 0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return e, addr
}

// startStreams starts, for each of workers, a goroutine on wg that sends
// per messages from from to dest, message i of worker w matched
// w<<32|i and size(w, i) bytes of pattern, each waited for, and one that
// receives worker w's messages on to, in order, and checks every byte.
// The first error of each goroutine goes to errs, which must have room
// for 2*workers.
func startStreams(wg *sync.WaitGroup, errs chan<- error, ctx context.Context, from *Endpoint, dest Addr, to *Endpoint, workers, per int, size func(w, i int) int) {
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				m := uint64(w)<<32 | uint64(i)
				r, err := from.ISend([][]byte{pattern(size(w, i), m)}, dest, m, nil)
				if err == nil {
					_, err = r.Wait(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; i < per; i++ {
				n = max(n, size(w, i))
			}
			buf := make([]byte, n)
			for i := 0; i < per; i++ {
				r, err := to.IRecv([][]byte{buf}, uint64(w)<<32, 0xFFFFFFFF<<32, nil)
				if err != nil {
					errs <- err
					return
				}
				st, err := r.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				if m := uint64(w)<<32 | uint64(i); st.Match != m || !bytes.Equal(buf[:st.XferLength], pattern(size(w, i), m)) {
					errs <- fmt.Errorf("worker %d message %d: got match %#x, %d bytes", w, i, st.Match, st.XferLength)
					return
				}
			}
		}()
	}
}
