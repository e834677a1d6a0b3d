package mx

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// faultSize is the size of message i in the fault test: mostly tiny and
// small, some medium, a few large.
func faultSize(i int, threshold int) int {
	x := uint64(i)*0x9E3779B97F4A7C15 + 7
	x ^= x >> 29
	switch r := x % 1000; {
	case r < 550:
		return int(x>>20) % 33
	case r < 800:
		return 33 + int(x>>20)%96
	case r < 990:
		return 129 + int(x>>20)%4000
	case r < 998:
		return 4129 + int(x>>20)%(threshold-4129)
	default:
		return threshold + 1 + int(x>>20)%200000
	}
}

// TestFaultyWire sends many messages of mixed sizes over a wire that loses,
// reorders, duplicates and corrupts frames, and checks that every message
// arrives exactly once, in order, byte for byte.
func TestFaultyWire(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 10000
	}
	faults := loopback.Faults{Loss: 0.05, Reorder: 0.05, Duplicate: 0.02, Corrupt: 0.01, Seed: 42}
	if s, err := strconv.ParseInt(os.Getenv("GOMX_MX_FAULT_SEED"), 10, 64); err == nil {
		faults.Seed = s // reproduce or explore another fault pattern
	}
	for _, tf := range transportFactories {
		if !tf.faulty {
			continue
		}
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/busypoll=%v", tf.name, busy), func(t *testing.T) {
				opts := fastOptions()
				opts.ResendDelay = 2 * time.Millisecond
				opts.PullTimeout = 2 * time.Millisecond
				opts.BusyPoll = busy
				pr := newPair(t, tf, opts, loopback.Faults{})
				pr.w.faults(faults)
				m := n
				if busy {
					m = n / 10 // the same paths; two spinning goroutines on a small machine
				}
				runStream(t, pr, m, 64)
				ca, cb := pr.a.Counters(), pr.b.Counters()
				bc := pr.bb.Counters()
				t.Logf("sender: resends %d, pull rerequests %d; receiver: dup msgs %d, dup frags %d, early %d, bad checksum %d (board), acks imm/delayed/piggy %d/%d/%d",
					ca.Get(Resends), cb.Get(PullRerequests), cb.Get(DupMessages), cb.Get(DupFrags), cb.Get(EarlyStored),
					bc.Get(DropBadChecksum), cb.Get(AcksImmediate), cb.Get(AcksDelayed), cb.Get(AcksPiggybacked))
				if bc.Get(DropBadChecksum)+pr.ba.Counters().Get(DropBadChecksum) == 0 {
					t.Errorf("no corrupted frame was caught: is the wire corrupting?")
				}
				if ca.Get(Resends)+cb.Get(PullFramesRerequested) == 0 {
					t.Errorf("every message arrived over a wire that lost 5%% of frames, and no counter shows a recovery")
				}
			})
		}
	}
}

// TestStream runs the same stream over every transport without injected
// faults (a real wire may still drop under load).
func TestStream(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 3000
	}
	for _, tf := range transportFactories {
		t.Run(tf.name, func(t *testing.T) {
			pr := newPair(t, tf, fastOptions(), loopback.Faults{})
			runStream(t, pr, n, 32)
		})
	}
}

// runStream sends n messages of mixed sizes (faultSize) from a to b with
// window receives in flight and verifies them.
func runStream(t *testing.T, pr *pair, n, window int) {
	runStreamOf(t, pr, n, window, mixedSizes(pr.ba.RendezvousThreshold()))
}

// mixedSizes is faultSize at the rendezvous threshold th, as a stream's
// size of message i.
func mixedSizes(th int) func(int) int {
	return func(i int) int { return faultSize(i, th) }
}

// runStreamOf sends n messages from a to b, message i of size(i) bytes,
// with window receives in flight, and verifies them.
func runStreamOf(t *testing.T, pr *pair, n, window int, size func(int) int) {
	// Each wait is bounded by a minute without its request completing,
	// not the stream by a total: a loaded -race run can take many
	// minutes for a lossy stream that never stops progressing.
	ctx := testCtx(t, time.Hour)
	errc := make(chan error, 2)
	go func() {
		errc <- sendStream(ctx, pr.a, pr.atob, n, window, size)
	}()
	go func() {
		errc <- recvStream(ctx, pr.b, n, window, size)
	}()
	for k := 0; k < 2; k++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// Nothing more may arrive: no duplicate delivery.
	time.Sleep(20 * time.Millisecond)
	if st, ok := pr.b.IProbe(0, 0); ok {
		t.Fatalf("extra message delivered: %+v", st)
	}
}

// sendStream sends n messages from e to dest, message i of size(i) bytes
// with match i, with up to window sends in flight, and waits for them all.
func sendStream(ctx context.Context, e *Endpoint, dest Addr, n, window int, size func(int) int) error {
	var pending []*Request
	for i := 0; i < n; i++ {
		msg := pattern(size(i), uint64(i))
		r, err := e.ISend([][]byte{msg}, dest, uint64(i), nil)
		if err != nil {
			return err
		}
		pending = append(pending, r)
		if len(pending) >= window {
			if _, err := waitAMinute(ctx, pending[0]); err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
			pending = pending[1:]
		}
	}
	for _, r := range pending {
		if _, err := waitAMinute(ctx, r); err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
	return nil
}

// waitAMinute waits for r for at most a minute (or until ctx is done).
func waitAMinute(ctx context.Context, r *Request) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return r.Wait(ctx)
}

// recvStream receives and verifies sendStream's n messages on e, with
// window receives posted, each with a buffer of at least its message's
// size.
func recvStream(ctx context.Context, e *Endpoint, n, window int, size func(int) int) error {
	type slot struct {
		r   *Request
		buf []byte
	}
	slots := make([]slot, window)
	post := func(i int) error {
		s := &slots[i%window]
		if len(s.buf) < size(i) {
			s.buf = make([]byte, size(i))
		}
		r, err := e.IRecv([][]byte{s.buf}, 0, 0, i)
		s.r = r
		return err
	}
	for i := 0; i < window && i < n; i++ {
		if err := post(i); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		s := &slots[i%window]
		st, err := waitAMinute(ctx, s.r)
		if err != nil {
			return fmt.Errorf("recv %d: %w", i, err)
		}
		want := size(i)
		if st.Match != uint64(i) || st.MsgLength != uint32(want) || st.Context != i {
			return fmt.Errorf("recv %d: got match %d length %d (want %d)", i, st.Match, st.MsgLength, want)
		}
		if !bytes.Equal(s.buf[:want], pattern(want, uint64(i))) {
			return fmt.Errorf("recv %d: payload of %d bytes differs", i, want)
		}
		if i+window < n {
			if err := post(i + window); err != nil {
				return err
			}
		}
	}
	return nil
}
