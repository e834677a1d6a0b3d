package mx

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// trucDrop is a cable that loses every TRUC one NIC transmits while on
// is set: from is that NIC's id (its MAC), set once the pair is open.
type trucDrop struct {
	from    atomic.Uint64
	on      atomic.Bool
	dropped atomic.Uint64
}

// model is the 82599 pair that places on lane 0 (zcModels' 82599-place)
// on d's cable.
func (d *trucDrop) model() zcModel {
	cable := emulated.CableOptions{Lose: func(fr []byte) bool {
		const at = 14 + wire.HeadLen // Ethernet header, peer index
		if !d.on.Load() || len(fr) <= at || wire.Type(fr[at]) != wire.TypeTruc ||
			transport.MACNICID([6]byte(fr[6:12])) != transport.NICID(d.from.Load()) {
			return false
		}
		d.dropped.Add(1)
		return true
	}}
	m := zcModels[2]
	if m.name != "82599-place" {
		panic("zcModels[2] is " + m.name)
	}
	m.name += "-losing-trucs"
	m.open = ixgbeOnCable(cable)
	return m
}

// TestPullAcksRndv: every TRUC the receiver sends is lost, so the ack of
// a 1 MiB message's RNDV never comes, and the receiver (placing on lane
// 0) stops in the middle of the pull, its first window of PULLs sent.
// The sender serves those PULLs, which show it the receiver holds the
// RNDV: from then on it asks no question and resends nothing, however
// long past its question's deadline its timers run, and the message
// arrives byte-exact, the send completed by the NOTIFY. (Before, the
// sender asked about the RNDV at each deadline, doubled, for the whole
// pull: each question a frame on the receiver's lane 0, ahead of the
// spans its pull posted.)
func TestPullAcksRndv(t *testing.T) {
	bothWaitModes(t, func(t *testing.T, busy bool) {
		d := &trucDrop{}
		checkLeaks(t)
		o := zcOptions("on")
		o.BusyPoll = busy
		o.PullTimeout = 10 * time.Second // the receiver re-requests nothing, however slow the host
		o.RTOMax = 20 * time.Millisecond // the sender's questions before the PULLs wait no longer
		pr := newPairOn(t, zcWire(t, d.model(), nil, nil), o)
		d.from.Store(uint64(pr.bb.NICID()))
		d.on.Store(true)
		const size = 1 << 20
		src, dst := pattern(size, 83), make([]byte, size)
		ctx := testCtx(t, time.Minute)
		s, err := pr.a.ISend([][]byte{src}, pr.atob, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, "b has the RNDV", func() bool { return pr.b.Counters().Get(RecvRndv) > 0 })
		// a stops before b pulls: what it asked until then (b's ack and
		// answers lost) is not the PULLs' business.
		frozen := frozenBoards{}
		defer frozen.thawAll()
		frozen.freeze(pr.ba)
		p := pr.atob.p
		if p.unacked.Len() != 1 {
			t.Fatalf("a holds %d unacked requests: want the RNDV, its ack lost", p.unacked.Len())
		}
		served, acked := pr.a.cnt[RecvPull], pr.a.cnt[PulledAcks]
		pulls := pr.b.Counters().Get(SendPull)
		r, err := pr.b.IRecv([][]byte{dst}, 7, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, "b asked for its first window", func() bool {
			return pr.b.Counters().Get(SendPull) >= pulls+uint64(pr.bb.opts.PullBlocks)
		})
		// b stops with its pull under way; a runs and serves the PULLs.
		frozen.freeze(pr.bb)
		window := pr.b.cnt[SendPull] - pulls
		frozen.thaw(pr.ba)
		// From the moment a served them: a timer run that found the
		// question due before a read the PULLs waiting for it asked
		// before anything showed the RNDV held.
		var before Counters
		var due int64
		waitCond(t, "a served the PULLs", func() bool {
			pr.ba.mu.Lock()
			defer pr.ba.mu.Unlock()
			if pr.a.cnt[RecvPull] < served+window {
				return false
			}
			before = pr.a.cnt
			due = max(s.lastSend, p.lastAsk) + p.askWait(int(p.asks))
			return true
		})
		// a's timers run twice past the deadline of its next question
		// about the RNDV.
		var ticks uint64
		waitCond(t, "a's timers ran past its question's deadline", func() bool {
			pr.ba.mu.Lock()
			defer pr.ba.mu.Unlock()
			switch {
			case pr.ba.clock() < due:
			case ticks == 0:
				ticks = pr.ba.tickRuns + 2
			case pr.ba.tickRuns >= ticks:
				return true
			}
			return false
		})
		after := pr.a.Counters()
		frozen.thaw(pr.bb)
		waitDone(t, ctx, r, s)
		if !bytes.Equal(src, dst) {
			t.Fatal("the message arrived changed")
		}
		if d.dropped.Load() == 0 {
			t.Fatal("the cable lost no TRUC of b's")
		}
		t.Logf("a, from serving the PULLs to its timers past the deadline: %s", recoveryDelta(before, after))
		for _, k := range []Counter{TailAsks, TailProbes, Resends} {
			if n := after.Get(k) - before[k]; n != 0 {
				t.Errorf("a sent %d %q after the receiver pulled the RNDV: want none", n, k)
			}
		}
		if n := after.Get(PulledAcks) - acked; n != 1 {
			t.Errorf("%d sends taken as acked by the PULLs: want the RNDV", n)
		}
		if c := pr.b.CopyStats(); c.RecvPlaced == 0 {
			t.Errorf("nothing placed: %+v", c)
		}
	})
}

// TestStaleAndDuplicatePull: a PULL that names a region no longer the
// send's it was for (the message completed and its region went to the
// next send, Regions 1), and a PULL for a send whose RNDV was taken as
// acked already, change nothing. The receiver is stopped, so the next
// send's RNDV stays unacked: the stale PULL is refused (a NACK_MCP) and
// leaves it unacked; a PULL for its region releases it, once; one more
// releases nothing. The message then arrives byte-exact and the send
// completes on its NOTIFY.
func TestStaleAndDuplicatePull(t *testing.T) {
	o := fastOptions()
	o.Regions = 1
	pr := newPair(t, loopbackOnly, o, loopback.Faults{})
	ctx := testCtx(t, 20*time.Second)
	const size = 100 << 10
	src, dst := pattern(size, 5), make([]byte, size)
	exchange(t, ctx, pr.a, pr.atob, pr.b, 3, ^uint64(0), [][]byte{src}, [][]byte{dst})
	pr.ba.mu.Lock()
	oldSeq := pr.a.regions[0].seq // the first message's region
	pr.ba.mu.Unlock()

	frozen := frozenBoards{}
	defer frozen.thawAll()
	frozen.freeze(pr.bb) // the next RNDV waits unacked
	src, dst = pattern(size, 6), make([]byte, size)
	s, err := pr.a.ISend([][]byte{src}, pr.atob, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	frozen.freeze(pr.ba)
	a, p := pr.ba, pr.atob.p
	if p.unacked.Len() != 1 || !a.eps[pr.a.id].regions[0].used {
		t.Fatalf("a holds %d unacked requests: want the second RNDV, in region 0", p.unacked.Len())
	}
	pull := wire.Pull{DstEP: pr.a.id, SrcEP: pr.b.id, Session: pr.a.session, TotalLength: size,
		RegionID: 0, RegionSeq: oldSeq, BlockLength: 1000,
		Handle: 1, Magic: wire.PullMagicXor ^ MaxEndpoints} // no endpoint of b's: its replies are dropped
	before := pr.a.cnt
	a.handlePull(pr.bb.NICID(), &pull)
	if n := pr.a.cnt[DropBadPull] - before[DropBadPull]; n != 1 || p.unacked.Len() != 1 {
		t.Errorf("a PULL for the completed message's region: %d refused, %d unacked; want it refused, the RNDV still unacked", n, p.unacked.Len())
	}
	pull.RegionSeq = a.eps[pr.a.id].regions[0].seq
	for i := range 2 {
		a.handlePull(pr.bb.NICID(), &pull)
		if n := pr.a.cnt[PulledAcks] - before[PulledAcks]; n != 1 || p.unacked.Len() != 0 {
			t.Errorf("PULL %d for the second message's region: %d sends taken as acked, %d unacked; want the RNDV, once", i+1, n, p.unacked.Len())
		}
	}
	frozen.thaw(pr.ba)
	frozen.thaw(pr.bb)
	r, err := pr.b.IRecv([][]byte{dst}, 4, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, r, s)
	if !bytes.Equal(src, dst) {
		t.Fatal("the second message arrived changed")
	}
}

// TestPullReleasesWholeMessagesOnly: with the receiver stopped, a sends
// a tiny message, a medium of three fragments and a large one, all
// unacked. A PULL for the large one's region shows the receiver holds
// all three in sequence, but the medium perhaps only in part: the tiny
// send completes and the RNDV leaves the unacked list, the medium stays
// until the cumulative ack passes it. All three then arrive byte-exact.
func TestPullReleasesWholeMessagesOnly(t *testing.T) {
	o := fastOptions()
	o.ZombieSends = -1 // a tiny send completes on its ack
	pr := newPair(t, loopbackOnly, o, loopback.Faults{})
	ctx := testCtx(t, 20*time.Second)
	pr.requestReply(t, []byte("connect"), 10*time.Second)
	frozen := frozenBoards{}
	defer frozen.thawAll()
	frozen.freeze(pr.bb)
	pr.ba.mu.Lock()
	stride := pr.atob.p.stride
	pr.ba.mu.Unlock()
	msgs := [][]byte{[]byte("tiny"), pattern(2*stride+100, 8), pattern(200<<10, 9)}
	var ss []*Request
	for i, m := range msgs {
		s, err := pr.a.ISend([][]byte{m}, pr.atob, uint64(20+i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	frozen.freeze(pr.ba)
	p, large := pr.atob.p, ss[2]
	if p.unacked.Len() != 3 || large.region < 0 {
		t.Fatalf("a holds %d unacked requests: want the three messages", p.unacked.Len())
	}
	reg := &pr.a.regions[large.region]
	pull := wire.Pull{DstEP: pr.a.id, SrcEP: pr.b.id, Session: pr.a.session, TotalLength: uint32(len(msgs[2])),
		RegionID: uint32(large.region), RegionSeq: reg.seq, BlockLength: 1000,
		Handle: 1, Magic: wire.PullMagicXor ^ MaxEndpoints} // no endpoint of b's: its replies are dropped
	before := pr.a.cnt
	pr.ba.handlePull(pr.bb.NICID(), &pull)
	if n := pr.a.cnt[PulledAcks] - before[PulledAcks]; n != 2 || p.unacked.Len() != 1 || p.unacked.Front() != ss[1] {
		t.Errorf("after a PULL of the large message: %d sends taken as acked, %d unacked; want the tiny one and the RNDV, the medium left", n, p.unacked.Len())
	}
	if !ss[0].Done() || ss[1].Done() || ss[2].Done() {
		t.Errorf("sends done: tiny %v, medium %v, large %v; want the tiny one only", ss[0].Done(), ss[1].Done(), ss[2].Done())
	}
	frozen.thaw(pr.ba)
	frozen.thaw(pr.bb)
	for i, m := range msgs {
		dst := make([]byte, len(m))
		r, err := pr.b.IRecv([][]byte{dst}, uint64(20+i), ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, ctx, r, ss[i])
		if !bytes.Equal(dst, m) {
			t.Fatalf("message %d arrived changed", i)
		}
	}
}
