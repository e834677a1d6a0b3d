package mx

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

func shortResends() BoardOptions {
	o := fastOptions()
	o.ResendDelay = 2 * time.Millisecond
	o.PullTimeout = 2 * time.Millisecond
	o.ResendMax = 25
	o.ZombieSends = -1 // eager sends complete on their ack, so failures show
	return o
}

// patientResends keeps shortResends' fast resends but gives liveness
// (ResendDelay*ResendMax: the budget of a connect, of an unacked send, of
// a pull without progress, and through them of a large send's NOTIFY) far
// more than a scheduling stall of a loaded -race run or of a QEMU guest's
// vCPU, for the tests whose outcomes are all answers of a peer. With
// shortResends' 50 ms a board goroutine descheduled that long declared its
// healthy peer unreachable (ErrUnreachable), or a receiver's pull gave up
// with the replies already on their way and the sender waited for a
// NOTIFY that never came (context timeout). A test that wants a dead peer
// found quickly shortens only the requests that should fail, with
// Endpoint.SetRequestTimeout.
func patientResends() BoardOptions {
	o := shortResends()
	o.ResendMax = int(20 * time.Second / o.ResendDelay)
	return o
}

func TestPeerDisappears(t *testing.T) {
	for _, tf := range transportFactories {
		t.Run(tf.name, func(t *testing.T) {
			// Until B vanishes nothing may fail: the boards' liveness is
			// patient, and only what A posts afterwards gets a short
			// request timeout (shortResends' 50 ms), so the dead peer is
			// found quickly while a stall before could not make B or A
			// give the other up.
			pr := newPair(t, tf, patientResends(), loopback.Faults{})
			// Each wait gets its own bound, far past any budget: on a
			// starved machine the boards' own stalls do not count
			// towards a verdict (liveness.go), so it can take many times
			// the budget in wall time.
			bound := func() context.Context { return testCtx(t, time.Minute) }
			// B sends a large message A has not asked for yet, then vanishes.
			big, err := pr.b.ISend([][]byte{pattern(300000, 1)}, pr.btoa, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pr.a.Probe(bound(), 1, ^uint64(0)); err != nil {
				t.Fatal(err)
			}
			pr.bb.Close()
			if _, err := big.Wait(bound()); !errors.Is(err, ErrEndpointClosed) {
				t.Fatalf("send on a closed board: %v", err)
			}
			if err := pr.a.SetRequestTimeout(nil, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			tiny, _ := pr.a.ISend([][]byte{[]byte("hello")}, pr.atob, 2, nil)
			large, _ := pr.a.ISend([][]byte{make([]byte, 100000)}, pr.atob, 3, nil)
			pulled, _ := pr.a.IRecv([][]byte{make([]byte, 300000)}, 1, ^uint64(0), nil)
			for name, r := range map[string]*Request{"tiny": tiny, "large": large, "pull": pulled} {
				if _, err := r.Wait(bound()); !errors.Is(err, ErrUnreachable) {
					t.Errorf("%s: want ErrUnreachable, got %v", name, err)
				}
			}
			// Later sends fail at once until a new connect.
			s, _ := pr.a.ISend(nil, pr.atob, 4, nil)
			if _, err := s.Wait(bound()); !errors.Is(err, ErrUnreachable) {
				t.Errorf("send to a dead peer: %v", err)
			}
			if _, err := pr.a.Connect(bound(), pr.bb.NICID(), 2, testKey); !errors.Is(err, ErrUnreachable) {
				t.Errorf("connect to a dead board: %v", err)
			}
			if pr.a.Counters().Get(Unreachable) == 0 {
				t.Error("unreachable not counted")
			}
		})
	}
}

func TestConnectErrors(t *testing.T) {
	for _, tf := range transportFactories {
		t.Run(tf.name, func(t *testing.T) {
			// Every outcome asserted here is an answer of the peer (a
			// connect reply, a NACK, a NOTIFY), never the resend limit.
			pr := newPair(t, tf, patientResends(), loopback.Faults{})
			ctx := testCtx(t, 10*time.Second)
			if _, err := pr.a.Connect(ctx, pr.bb.NICID(), 2, testKey+1); !errors.Is(err, ErrBadKey) {
				t.Errorf("wrong key: %v", err)
			}
			if pr.b.Counters().Get(DropBadKey) == 0 {
				t.Error("bad key not counted")
			}
			if _, err := pr.a.Connect(ctx, pr.bb.NICID(), 9, testKey); !errors.Is(err, ErrBadEndpoint) {
				t.Errorf("missing endpoint: %v", err)
			}
			c, _ := pr.bb.OpenEndpoint(3, testKey)
			c.Close()
			if _, err := pr.a.Connect(ctx, pr.bb.NICID(), 3, testKey); !errors.Is(err, ErrEndpointClosed) {
				t.Errorf("closed endpoint: %v", err)
			}
			// The peer endpoint closes: sends get ErrEndpointClosed.
			pr.b.Close()
			s, _ := pr.a.ISend([][]byte{[]byte("x")}, pr.atob, 1, nil)
			if _, err := s.Wait(ctx); !errors.Is(err, ErrEndpointClosed) {
				t.Errorf("send to closed endpoint: %v", err)
			}
			// It reopens with a new session: the old address is stale.
			b2, err := pr.bb.OpenEndpoint(2, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pr.a.ISend(nil, pr.atob, 1, nil); !errors.Is(err, ErrBadSession) && err != nil {
				t.Errorf("stale address: %v", err)
			}
			addr, err := pr.a.Connect(ctx, pr.bb.NICID(), 2, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pr.a.ISend(nil, pr.atob, 1, nil); !errors.Is(err, ErrBadSession) {
				t.Errorf("stale address after reconnect: %v", err)
			}
			// A medium and a large message: the large one's NOTIFY comes
			// back from the reopened endpoint, so it proves that the
			// sequence numbers announced in the reconnect are the ones used.
			for _, n := range []int{5000, 500000} {
				buf := make([]byte, n)
				r, _ := b2.IRecv([][]byte{buf}, 0, 0, nil)
				s, _ = pr.a.ISend([][]byte{pattern(n, 9)}, addr, 1, nil)
				mustWait(t, s, 10*time.Second)
				mustWait(t, r, 10*time.Second)
				if !bytes.Equal(buf, pattern(n, 9)) {
					t.Fatalf("%d-byte payload after reconnect differs", n)
				}
			}
		})
	}
}

// sealedFrame builds a sealed frame around a header written by put.
func sealedFrame(n int, put func(h []byte)) []byte {
	f := make([]byte, wire.HeadLen+n+wire.ChecksumLen)
	wire.PutPeerIndex(f, wire.NoPeerIndex, wire.BigEndian)
	put(f[wire.HeadLen:])
	return f[:wire.SealInPlace(f, wire.HeadLen+n)]
}

// inject hands a frame to a board as if it came from nic.
func inject(b *Board, nic transport.NICID, f []byte) {
	b.mu.Lock()
	b.setNow()
	b.handleFrame(nic, f)
	b.unlock()
}

func TestForgedFrames(t *testing.T) {
	t.Run("loopback", func(t *testing.T) { forgedFrames(t, newLoopbackWire(t, loopback.Faults{})) })
	t.Run("nic", func(t *testing.T) { forgedFrames(t, newNICWire(t, loopback.Faults{})) })
}

// forgedFrames attacks a connected pair from a third board on the same wire.
func forgedFrames(t *testing.T, w *wire2) {
	attacker := w.third()
	// Every outcome here is an answer of a board, never the resend limit.
	pr := newPairOn(t, w, patientResends())
	bs := pr.b.Addr().Session
	// recvKinds counts the kinds of the frames the attacker receives until
	// one of kind want has come (want 0: none is awaited), and then of
	// those already queued behind it. The answer is awaited, not a quiet
	// spell: a loaded machine can hold the answer back longer than any
	// spell of silence, and a second answer would be counted by the
	// board (the counters checked below) before it could be received.
	recvKinds := func(tr transport.Transport, want wire.Type) map[wire.Type]int {
		got := map[wire.Type]int{}
		frames := make([]transport.Frame, 64)
		deadline := time.Now().Add(10 * time.Second) // a bound, not a budget
		for {
			wait := 100 * time.Millisecond
			if want == 0 || got[want] > 0 {
				wait = 0
			}
			n, _ := tr.Recv(frames, wait)
			if n == 0 && (wait == 0 || time.Now().After(deadline)) {
				return got
			}
			for _, f := range frames[:n] {
				if t, err := wire.PacketType(f.Data); err == nil {
					got[t]++
				}
			}
		}
	}
	send := func(f []byte) {
		if _, err := attacker.Send([]transport.Frame{{Peer: pr.bb.NICID(), Data: f}}); err != nil {
			t.Fatal(err)
		}
	}

	// A TINY with the wrong session: dropped, counted, nacked once (and the
	// nack counted once).
	before := pr.b.Counters().Get(DropBadSession)
	nacks := pr.b.Counters().Get(SendNackLib) + pr.bb.Counters().Get(SendNackLib)
	send(sealedFrame(wire.MsgLen+4, func(h []byte) {
		(&wire.Msg{Type: wire.TypeTiny, DstEP: 2, SrcEP: 1, Length: 4, Session: bs + 1}).Put(h, wire.BigEndian)
	}))
	if got := recvKinds(attacker, wire.TypeNackLib); got[wire.TypeNackLib] != 1 {
		t.Errorf("wrong session: want one NACK_LIB, got %v", got)
	}
	if pr.b.Counters().Get(DropBadSession) != before+1 {
		t.Error("wrong session not counted")
	}
	if n := pr.b.Counters().Get(SendNackLib) + pr.bb.Counters().Get(SendNackLib); n != nacks+1 {
		t.Errorf("one nack counted %d times", n-nacks)
	}
	// The right session from a board that never connected: dropped.
	send(sealedFrame(wire.MsgLen+4, func(h []byte) {
		(&wire.Msg{Type: wire.TypeTiny, DstEP: 2, SrcEP: 1, Length: 4, Session: bs}).Put(h, wire.BigEndian)
	}))
	// A connect with the wrong key: refused.
	send(sealedFrame(wire.ConnectLen, func(h []byte) {
		(&wire.Connect{DstEP: 2, SrcEP: 1, SrcSession: 77, Key: testKey ^ 1}).Put(h, wire.BigEndian)
	}))
	waitCond(t, "the board drops the TINY and refuses the connect", func() bool {
		c := pr.b.Counters()
		return c.Get(DropNoPartner) > 0 && c.Get(DropBadKey) > 0
	})
	recvKinds(attacker, 0) // the refusal of the connect
	if _, ok := pr.b.IProbe(0, 0); ok {
		t.Fatal("a forged message was delivered")
	}
	if c := pr.b.Counters(); c.Get(DropNoPartner) == 0 || c.Get(DropBadKey) == 0 {
		t.Errorf("counters: no partner %d, bad key %d", c.Get(DropNoPartner), c.Get(DropBadKey))
	}

	// A large send from B to A that A has not matched: its region is live.
	secret := pattern(100000, 5)
	s, err := pr.b.ISend([][]byte{secret}, pr.btoa, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Forget()
	if _, err := pr.a.Probe(testCtx(t, 10*time.Second), 1, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	pull := wire.Pull{DstEP: 2, SrcEP: 1, Session: bs, TotalLength: 100000, RegionID: 0, RegionSeq: 1,
		Handle: 1, Magic: pullMagic(1), BlockLength: 8000}
	pullFrame := func(p wire.Pull) []byte {
		return sealedFrame(wire.PullLen, func(h []byte) { p.Put(h, wire.BigEndian) })
	}
	// From a board that is not the receiver: refused even with every field right.
	send(pullFrame(pull))
	if got := recvKinds(attacker, wire.TypeNackMCP); got[wire.TypePullReply] != 0 || got[wire.TypeNackMCP] != 1 {
		t.Errorf("pull from a stranger: got %v", got)
	}
	// From the receiver's own NIC but outside the region.
	replies := pr.b.Counters().Get(SendPullReply)
	bad := []func(p *wire.Pull){
		func(p *wire.Pull) { p.TotalLength = 100001; p.FirstFrame = 12; p.BlockLength = 4001 }, // past the end
		func(p *wire.Pull) { p.RegionSeq = 2 },                                                 // stale generation
		func(p *wire.Pull) { p.RegionID = 7 },                                                  // no such region
		func(p *wire.Pull) { p.RegionID = 1 << 20 },                                            // out of range
		func(p *wire.Pull) { p.RegionOffset = 50000 },                                          // offset into the region
		func(p *wire.Pull) { p.TotalLength = 100000; p.BlockLength = 65 * 8964 },               // more than 64 replies
		func(p *wire.Pull) { p.Session = bs ^ 1 },                                              // wrong session
		func(p *wire.Pull) { p.SrcEP = 9 },                                                     // another endpoint of the receiver's board
	}
	for i, mod := range bad {
		p := pull
		mod(&p)
		inject(pr.bb, pr.ba.NICID(), pullFrame(p))
		if got := pr.b.Counters().Get(SendPullReply); got != replies {
			t.Fatalf("bad pull %d was answered with %d replies", i, got-replies)
		}
	}
	if c := pr.b.Counters(); c.Get(DropBadPull) < uint64(len(bad)-1) {
		t.Errorf("bad pulls counted %d", c.Get(DropBadPull))
	}
	// Refused pulls are not a receiver pulling: they must not start the
	// send's notify timeout (largefail.go), or the send fails with
	// ErrUnreachable, and the real pull below with a bad RDMA window,
	// whenever the garbage below takes longer than that timeout (a
	// loaded -race run). The region must still be unpulled.
	pr.bb.mu.Lock()
	lastPull := pr.b.regions[0].lastPull
	pr.bb.mu.Unlock()
	if lastPull != 0 {
		t.Error("a refused pull started the notify timeout of the send it named")
	}
	// Forged pull replies and nacks for handles that do not exist.
	inject(pr.ba, pr.bb.NICID(), sealedFrame(wire.PullReplyLen+10, func(h []byte) {
		(&wire.PullReply{FrameLength: 10, Handle: 3, Magic: pullMagic(1)}).Put(h, wire.BigEndian)
	}))
	inject(pr.ba, pr.bb.NICID(), sealedFrame(wire.NackLibLen, func(h []byte) {
		(&wire.NackLib{SrcEP: 2, DstEP: 1, Kind: wire.NackBadSession, Seq: 1234}).Put(h, wire.BigEndian)
	}))
	if c := pr.a.Counters(); c.Get(DropBadPullReply) == 0 || c.Get(DropBadNack) == 0 {
		t.Errorf("forged reply/nack not counted: %d %d", c.Get(DropBadPullReply), c.Get(DropBadNack))
	}
	// Garbage: random bytes, truncations and bit flips of valid frames.
	rng := rand.New(rand.NewPCG(1, 2))
	valid := pullFrame(pull)
	for i := 0; i < 5000; i++ {
		var f []byte
		switch i % 3 {
		case 0:
			f = make([]byte, rng.IntN(100))
			for j := range f {
				f[j] = byte(rng.Uint32())
			}
		case 1:
			f = valid[:rng.IntN(len(valid))]
		default:
			f = bytes.Clone(valid)
			f[rng.IntN(len(f))] ^= 1 << rng.IntN(8)
		}
		inject(pr.bb, pr.ba.NICID(), f)
	}
	if got := pr.b.Counters().Get(SendPullReply); got != replies {
		t.Fatalf("garbage was answered with %d pull replies", got-replies)
	}
	// The real receiver still gets the real message.
	buf := make([]byte, 100000)
	r, _ := pr.a.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	mustWait(t, r, 10*time.Second)
	if !bytes.Equal(buf, secret) {
		t.Fatal("payload differs after the attack")
	}
}

// newPairOn opens a connected pair of boards on an existing wire, with
// opts (board b with optsB[0] when given).
func newPairOn(t testing.TB, w *wire2, opts BoardOptions, optsB ...BoardOptions) *pair {
	t.Helper()
	opts.Local.Off = !w.shortcut
	ba, err := NewBoard(w.a, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(optsB) > 0 {
		opts = optsB[0]
		opts.Local.Off = !w.shortcut
	}
	bb, err := NewBoard(w.b, opts)
	if err != nil {
		t.Fatal(err)
	}
	pr := &pair{w: w, ba: ba, bb: bb}
	t.Cleanup(func() {
		ba.Close()
		bb.Close()
		w.close()
	})
	if pr.a, err = ba.OpenEndpoint(1, testKey); err != nil {
		t.Fatal(err)
	}
	if pr.b, err = bb.OpenEndpoint(2, testKey); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 20*time.Second)
	if pr.atob, err = pr.a.Connect(ctx, bb.NICID(), 2, testKey); err != nil {
		t.Fatal(err)
	}
	if pr.btoa, err = pr.b.Connect(ctx, ba.NICID(), 1, testKey); err != nil {
		t.Fatal(err)
	}
	return pr
}

// holdReplies wraps a transport and, while hold is set, keeps the CONNECT
// replies it would send until release.
type holdReplies struct {
	transport.Transport
	ord  wire.Order
	mu   sync.Mutex
	hold bool
	held [][]byte
	to   transport.NICID
}

func (h *holdReplies) Send(frames []transport.Frame) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sendKept(h.Transport, frames, func(f transport.Frame) bool {
		if h.hold && len(f.Data) > wire.HeadLen && wire.Type(f.Data[wire.HeadLen]) == wire.TypeConnect {
			if c, err := wire.DecodeConnect(f.Data[wire.HeadLen:], h.ord); err == nil && c.IsReply {
				h.held, h.to = append(h.held, bytes.Clone(f.Data)), f.Peer
				return false
			}
		}
		return true
	})
}

func (h *holdReplies) heldN() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// release sends the held replies and stops holding.
func (h *holdReplies) release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold = false
	for _, d := range h.held {
		if _, err := h.Transport.Send([]transport.Frame{{Peer: h.to, Data: d}}); err != nil {
			return err
		}
	}
	h.held = nil
	return nil
}

// TestCrossedConnects: both ends connect at once (as the ranks of a job
// do), and B, which knows A from its own connect, sends to A before A has
// B's answer to A's connect. The messages of B that A received meanwhile
// stay received: the late reply does not move A back to expecting them
// again, so B's later messages are delivered, not held as early for ever
// (a job's first barrier hung so, TestTwoNodesAlltoall in CI).
func TestCrossedConnects(t *testing.T) {
	checkLeaks(t)
	w := newLoopbackWire(t, loopback.Faults{})
	hb := &holdReplies{Transport: w.b, ord: wire.LittleEndian}
	w.b = hb
	opts := fastOptions()
	opts.ResendDelay = time.Second // few connect resends while the replies are held
	ba, err := NewBoard(w.a, opts)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := NewBoard(w.b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ba.Close()
		bb.Close()
		w.close()
	})
	hb.ord = bb.ord
	a, err := ba.OpenEndpoint(1, testKey)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bb.OpenEndpoint(2, testKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 20*time.Second)
	btoa, err := b.Connect(ctx, ba.NICID(), 1, testKey)
	if err != nil {
		t.Fatal(err)
	}
	// A connects to B; B answers, and the answer waits.
	hb.mu.Lock()
	hb.hold = true
	hb.mu.Unlock()
	conn, err := a.IConnect(bb.NICID(), 2, testKey, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; hb.heldN() == 0; i++ {
		if i == 2000 {
			t.Fatal("B sent no CONNECT reply in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// B sends before A has the answer; A gets it. A synchronous send, as
	// a barrier's: A's NOTIFY completes it, so B never sends it again.
	first := pattern(100, 1)
	buf := make([]byte, 100)
	r, _ := a.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	s, _ := b.ISSend([][]byte{first}, btoa, 1, nil)
	mustWait(t, r, 10*time.Second)
	mustWait(t, s, 10*time.Second)
	if !bytes.Equal(buf, first) {
		t.Fatal("the first message differs")
	}
	if err := hb.release(); err != nil {
		t.Fatal(err)
	}
	mustWait(t, conn, 10*time.Second)
	// B's next messages, one of each protocol, reach A.
	for i, n := range []int{8, 5000, 100000} {
		msg := pattern(n, uint64(i+2))
		buf := make([]byte, n)
		r, _ := a.IRecv([][]byte{buf}, uint64(i+2), ^uint64(0), nil)
		s, _ := b.ISend([][]byte{msg}, btoa, uint64(i+2), nil)
		mustWait(t, r, 10*time.Second)
		mustWait(t, s, 10*time.Second)
		if !bytes.Equal(buf, msg) {
			t.Fatalf("the %d-byte message after the late reply differs", n)
		}
	}
}
