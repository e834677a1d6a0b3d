package mx

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestCMAMessageCost traces what one large message between two processes
// costs, on the counters: with the single copy (LargeCMA, and LargeAuto,
// which picks it for buffers outside the shared pool), every message of
// just above DefaultShmEager, 64 KiB and 4 MiB takes exactly one RNDV and one NOTIFY, no PULL
// and no pull reply, and one process_vm_readv call on the receiver — its
// region entry and all its data — once the receiver knows where the
// sender's buffer lies (the first two messages of each size take a second
// call, the first of all a third, for the sender's endpoint table); and the receiver sends no
// ack ahead of the copy (the NOTIFY acks the RNDV: the rings' resend floor
// is far longer than any copy). Pulled through the rings
// (LargeRings), it takes one RNDV, one NOTIFY and one PULL per block of
// pull replies. On every path, nothing is resent, probed or re-requested
// on a timer: the rings do not lose frames. Every echo comes back
// byte-exact.
func TestCMAMessageCost(t *testing.T) {
	// The single copy's cost: auto does not stage these sizes here (nor
	// in the child, which inherits the environment).
	t.Setenv("GOMX_SHM_STAGE_MIN", strconv.Itoa(2*stageBufSize))
	for _, s := range []LargeStrategy{LargeCMA, LargeAuto, LargeRings} {
		t.Run(s.String(), func(t *testing.T) {
			ctx, b, e, addr := largeEchoTo(t, s)
			first := true
			sizes := []int{DefaultShmEager + 1, 64 << 10, 4 << 20}
			if s == LargeRings {
				sizes = []int{64 << 10, 4 << 20} // above the transport's rendezvous threshold
			}
			for _, size := range sizes {
				const n = 20
				msg := pattern(size, uint64(size))
				buf := make([]byte, size)
				c0 := e.Counters()
				for i := range n {
					clear(buf)
					echo(t, ctx, e, addr, msg, buf, uint64(i))
					if !bytes.Equal(buf, msg) {
						t.Fatalf("%d B: echo %d differs", size, i)
					}
				}
				d := countersSince(c0, e.Counters())
				if d.Get(CMARefused) > 0 {
					t.Skipf("the kernel refuses process_vm_readv between processes of this user (Yama ptrace_scope?): %d refusals", d.Get(CMARefused))
				}
				type want struct {
					k    Counter
					want uint64
				}
				wants := []want{
					{SendRndv, n}, {RecvRndv, n}, {RecvNotify, n}, {SendNotify, n}, {CMAFailed, 0},
					{TimerRetransmits, 0}, {Resends, 0}, {PullTimeouts, 0}, {PullRerequests, 0}, {TailProbes, 0},
				}
				if s == LargeRings {
					replies := d.Get(RecvPullReply)
					pb := uint64(b.Options().PullBlockFrames)
					blocks := (replies/n + pb - 1) / pb
					wants = append(wants, want{RecvCMA, 0}, want{CMAReads, 0}, want{SendPull, n * blocks})
				} else {
					// One call a message (its entry and its data), one
					// more for each of the first two of each size: the
					// echo comes from the child's one buffer, as the
					// last did, but longer than the last entry covers,
					// and the next is read after its entry, until the
					// buffer is seen to stay.
					reads := uint64(n + 2)
					if first {
						reads++ // the sender's endpoint table, once
						first = false
					}
					wants = append(wants, want{RecvCMA, n}, want{SendPull, 0}, want{RecvPullReply, 0}, want{CMAReads, reads},
						want{AcksImmediate, 0})
				}
				for _, c := range wants {
					if got := d.Get(c.k); got != c.want {
						t.Errorf("%d B x %d: %q = %d, want %d", size, n, c.k, got, c.want)
					}
				}
			}
		})
	}
}

// echo sends msg to the echo child at addr and receives the echo into buf.
func echo(t *testing.T, ctx context.Context, e *Endpoint, addr Addr, msg, buf []byte, match uint64) {
	t.Helper()
	r, err := e.IRecv([][]byte{buf}, match, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.ISend([][]byte{msg}, addr, match, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); err != nil {
		t.Fatalf("send of %d B: %v", len(msg), err)
	}
	if st, err := r.Wait(ctx); err != nil || int(st.XferLength) != len(msg) {
		t.Fatalf("echo of %d B: %v (%d B)", len(msg), err, st.XferLength)
	}
}

// echoSplit sends msg in nseg segments to the echo server at addr and
// receives its echo into nseg segments: the echo must come back whole and
// byte-exact.
func echoSplit(t *testing.T, ctx context.Context, e *Endpoint, addr Addr, msg []byte, nseg int, match uint64) {
	t.Helper()
	buf := make([]byte, len(msg))
	r, _ := e.IRecv(split(buf, nseg), match, ^uint64(0), nil)
	sd, err := e.ISend(split(msg, nseg), addr, match, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sd.Wait(ctx); err != nil {
		t.Fatalf("send %d: %v", len(msg), err)
	}
	st, err := r.Wait(ctx)
	if err != nil {
		t.Fatalf("echo %d: %v", len(msg), err)
	}
	if !bytes.Equal(buf, msg) || int(st.XferLength) != len(msg) {
		t.Fatalf("echo of %d bytes in %d segments differs (%d received)", len(msg), nseg, st.XferLength)
	}
}

// countersSince returns after - before.
func countersSince(before, after Counters) Counters {
	var d Counters
	for i := range d {
		d[i] = after[i] - before[i]
	}
	return d
}

// TestCMANoAllocations: a 64 KiB message copied once between two shm
// boards (the single copy goes through process_vm_readv even within one
// process) allocates nothing in the steady state, on either side, in
// blocking and in busy-poll waits.
func TestCMANoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			o := shmTestOptions()
			o.Local.Large = LargeCMA
			o.BusyPoll = busy
			pr := newPair(t, shmFactory, o, loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			msg := pattern(64<<10, 1)
			buf := make([]byte, len(msg))
			sseg, rseg := [][]byte{msg}, [][]byte{buf}
			round := func() { exchange(t, ctx, pr.b, pr.btoa, pr.a, 1, ^uint64(0), sseg, rseg) }
			for range 50 { // warm the pools, the partners and the caches
				round()
			}
			c0 := pr.a.Counters()
			allocs := testing.AllocsPerRun(200, round)
			d := countersSince(c0, pr.a.Counters())
			if d.Get(CMARefused) > 0 {
				t.Skip("the kernel refuses process_vm_readv here")
			}
			if d.Get(RecvCMA) != 201 {
				t.Fatalf("%d single copies in 201 messages", d.Get(RecvCMA))
			}
			if allocs > 0 {
				t.Errorf("%.2f allocations per 64 KiB message, want 0", allocs)
			}
		})
	}
}
