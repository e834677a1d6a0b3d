package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestShortPathPingPongKeepsItsBookkeeping: in a busy-polling 8-byte
// ping-pong on the short path, over the in-process wire and over AF_XDP
// (where the clock reading that stamps a send, its tail-loss deadline and
// its zombie completion come after the kick), what the application and
// the protocol see is what the general path gives them: every send is
// done when ISend returns, stamped with a time no later than the board's
// clock, and has a deadline noted for the fine timer; every receive's
// status carries the sender, the match, the lengths and the context it
// was posted with; the round-trip estimate has samples of a sensible
// size; nothing is resent; and the waits count as polled.
func TestShortPathPingPongKeepsItsBookkeeping(t *testing.T) {
	for _, tf := range []transportFactory{{name: "loopback", new: newLoopbackWire}, {name: "xdp", new: newXDPWire}} {
		t.Run(tf.name, func(t *testing.T) {
			o := DefaultBoardOptions()
			o.BusyPoll = true
			pr := newPair(t, tf, o, loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			const rounds = 300
			msg := []byte("8 bytes!")
			bufA, bufB := make([]byte, 8), make([]byte, 8)
			type tag struct{ k int }
			one := func(k int, src *Endpoint, sb *Board, to Addr, dst *Endpoint, buf []byte) {
				t.Helper()
				want := &tag{k}
				r, err := dst.IRecv([][]byte{buf}, uint64(k), ^uint64(0), want)
				if err != nil {
					t.Fatal(err)
				}
				s, err := src.ISend([][]byte{msg}, to, uint64(k), nil)
				if err != nil {
					t.Fatal(err)
				}
				if !s.Done() {
					t.Fatalf("message %d: an eager send within ZombieSends is not done when ISend returns", k)
				}
				sb.mu.Lock()
				now, sent, due := sb.clock(), s.lastSend, sb.due.Load()
				first := s.firstSend
				acked := s.acked
				sb.mu.Unlock()
				if !acked && (sent <= 0 || sent > now || first != sent) {
					t.Fatalf("message %d: sent at %d (first %d), the board's clock %d", k, sent, first, now)
				}
				if !acked && due == 0 {
					t.Fatalf("message %d: no deadline noted for the unacked send", k)
				}
				if _, err := s.Wait(ctx); err != nil {
					t.Fatal(err)
				}
				st, err := r.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Context != want || st.Match != uint64(k) || st.MsgLength != 8 || st.XferLength != 8 ||
					st.Source.NIC != src.b.nic || st.Source.Endpoint != src.id || string(buf) != string(msg) {
					t.Fatalf("message %d: status %+v, data %q", k, st, buf)
				}
			}
			w0a, w0b := pr.ba.WaitStats().Polled, pr.bb.WaitStats().Polled
			for k := range rounds {
				one(2*k, pr.a, pr.ba, pr.atob, pr.b, bufB)
				one(2*k+1, pr.b, pr.bb, pr.btoa, pr.a, bufA)
			}
			for _, e := range []*Endpoint{pr.a, pr.b} {
				c := e.Counters()
				if c[ShortSends] < rounds || c[ShortRecvs] < rounds {
					t.Errorf("short sends %d, short receives %d, want %d each", c[ShortSends], c[ShortRecvs], rounds)
				}
				if c[Resends] != 0 {
					t.Errorf("%d resends on a lossless wire", c[Resends])
				}
			}
			// The receives' waits end polled (the sends were done
			// before their waits), but for the few whose frame a
			// receive loop took (over AF_XDP, it may hold Recv a moment
			// after a wait).
			if got := pr.ba.WaitStats().Polled - w0a + pr.bb.WaitStats().Polled - w0b; got < 2*rounds*9/10 {
				t.Errorf("%d polled waits of %d", got, 2*rounds)
			}
			for _, e := range []*Endpoint{pr.a, pr.b} {
				e.b.mu.Lock()
				var srtt int64
				var ok bool
				for _, p := range e.partners {
					srtt, ok = p.rtt.srtt, p.rtt.ok
				}
				e.b.mu.Unlock()
				if !ok || srtt <= 0 || srtt > int64(time.Second) {
					t.Errorf("endpoint %d: round-trip estimate %v (sampled: %v)", e.id, time.Duration(srtt), ok)
				}
			}
		})
	}
}
