package emulated_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
)

// txQueuesPair is two emulated 82599s with synchronous transmit DMA, two
// queues each, on a cable that asks lose about every frame.
func txQueuesPair(t *testing.T, lose func([]byte) bool) (*emulated.IXGBE, [2]*ixgbe.NIC) {
	t.Helper()
	o := ixgbe.DefaultOptions()
	o.Queues = 2
	p, n := ixgbePairOn(t, emulated.DefaultIXGBEOptions(), o)
	if err := emulated.Connect(emulated.CableOptions{Lose: lose}, p.Port(0), p.Port(1)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := n[i].WaitLink(true, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return p, n
}

// txSeq is the sequence number of test frame i of TX queue q.
func txSeq(q, i int) uint64 { return uint64(q)<<32 | uint64(i) }

// sendQueue sends count test frames of 100 bytes on TX queue q of a, to
// b, one TxBatch each, retrying a full ring at most a million times.
func sendQueue(t *testing.T, a, b *ixgbe.NIC, q, count int) {
	sendQueueFrames(t, a, b, q, count, func(fr []byte) {})
}

// sendQueueFrames is sendQueue with each frame passed to mark before it
// is sent.
func sendQueueFrames(t *testing.T, a, b *ixgbe.NIC, q, count int, mark func([]byte)) {
	for i := range count {
		buf, err := a.Pool(q).Get()
		if err != nil {
			t.Errorf("queue %d frame %d: %v", q, i, err)
			return
		}
		mark(nictest.Frame(buf.SetLen(2048), b.MAC(), a.MAC(), txSeq(q, i), 100))
		buf.SetLen(100)
		k := 0
		for try := 0; k == 0 && try < 1e6; try++ {
			if k, err = a.TxBatch(q, []*nicdrv.Buffer{buf}); err != nil {
				t.Errorf("queue %d frame %d: %v", q, i, err)
				return
			}
		}
		if k == 0 {
			t.Errorf("queue %d frame %d: the ring stayed full", q, i)
			return
		}
	}
}

// Two queues' senders transmit at once, each walking its own ring on its
// own goroutine, with the cable's Lose asked by both and the counters read
// alongside: every frame Lose leaves arrives whole, each queue's frames in
// the order they were sent, and the model records no violation.
func TestIXGBEQueuesTransmitAtOnce(t *testing.T) {
	const perQueue = 600
	lost := func(seq uint64) bool { return seq%7 == 3 }
	var asked atomic.Uint64
	p, n := txQueuesPair(t, func(fr []byte) bool {
		asked.Add(1)
		return len(fr) >= 22 && lost(binary.BigEndian.Uint64(fr[14:]))
	})
	want := 0
	for q := range 2 {
		for i := range perQueue {
			if !lost(txSeq(q, i)) {
				want++
			}
		}
	}
	var senders, reader sync.WaitGroup
	for q := range 2 {
		senders.Go(func() { sendQueue(t, n[0], n[1], q, perQueue) })
	}
	stop := make(chan struct{})
	reader.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = p.Stats(0)
			_ = p.Stats(1)
			_ = p.Accesses(0)
			if _, err := n[0].Stats(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	defer func() { close(stop); reader.Wait() }()

	next := [2]uint64{txSeq(0, 0), txSeq(1, 0)} // the least each queue may send next
	got := 0
	rx := make([]*nicdrv.Buffer, 64)
	for deadline := time.Now().Add(30 * time.Second); got < want && time.Now().Before(deadline); {
		for q := range 2 {
			k, err := n[1].RxBatch(q, rx)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range rx[:k] {
				seq := binary.BigEndian.Uint64(b.Data[14:])
				from := int(seq >> 32)
				switch {
				case from > 1 || seq < next[from]:
					t.Errorf("frame %#x after %#x from its queue: out of order", seq, next[from&1])
				case lost(seq):
					t.Errorf("frame %#x arrived, which Lose lost", seq)
				case !bytes.Equal(b.Data, nictest.Frame(make([]byte, 100), n[1].MAC(), n[0].MAC(), seq, 100)):
					t.Errorf("frame %#x arrived changed", seq)
				default:
					next[from] = seq + 1
				}
			}
			got += k
			_ = n[1].Pool(q).Free(rx[:k]...)
		}
	}
	senders.Wait()
	if got != want || asked.Load() != 2*perQueue {
		t.Errorf("%d frames sent on 2 queues, Lose asked about %d, %d received, want %d", 2*perQueue, asked.Load(), got, want)
	}
	for i := range 2 {
		if s := p.Stats(i); s.Violations != 0 {
			t.Errorf("model %d: %d violations, the last: %s", i, s.Violations, s.LastViolation)
		}
	}
}

// A TXDCTL write that disables a queue while the queue's ring walk is
// under way waits the walk out: TDH reads TDT after it, every frame the
// walk began with on the wire.
func TestIXGBETxdctlWaitsOutWalk(t *testing.T) {
	const frames = 64
	inWalk := make(chan struct{})
	var once sync.Once
	p, n := txQueuesPair(t, func([]byte) bool {
		once.Do(func() { close(inWalk) })
		return false
	})
	bufs := make([]*nicdrv.Buffer, frames)
	for i := range bufs {
		b, err := n[0].Pool(1).Get()
		if err != nil {
			t.Fatal(err)
		}
		nictest.Frame(b.SetLen(2048), n[1].MAC(), n[0].MAC(), uint64(i), 100)
		b.SetLen(100)
		bufs[i] = b
	}
	var sender sync.WaitGroup
	sender.Go(func() {
		if k, err := n[0].TxBatch(1, bufs); k != frames || err != nil {
			t.Errorf("TxBatch of %d frames: %d, %v", frames, k, err)
		}
	})
	<-inWalk
	regs, _ := p.Functions()[0].BAR(0)
	regs.Write32(hw.TXDCTL(1), regs.Read32(hw.TXDCTL(1))&^hw.TxdctlEnable)
	if tdh, tdt := regs.Read32(hw.TDH(1)), regs.Read32(hw.TDT(1)); tdh != tdt {
		t.Errorf("TDH %d, TDT %d after the disable", tdh, tdt)
	}
	sender.Wait()
	if s := p.Stats(0); s.TxFrames != frames {
		t.Errorf("%d frames on the wire, want the walk's %d", s.TxFrames, frames)
	}
}

// steeredPair is two emulated 82599s with two queues each, RX rings of
// rxRing descriptors, the link up, and the receiver's queue 1 taking the
// frames steer marks for it.
func steeredPair(t *testing.T, rxRing int) (*emulated.IXGBE, [2]*ixgbe.NIC) {
	t.Helper()
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing = 2, rxRing
	p, n := ixgbePairOn(t, emulated.DefaultIXGBEOptions(), o)
	for i := range n {
		if _, err := n[i].WaitLink(true, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n[1].AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: nictest.EtherType + 1, Queue: 1}); err != nil {
		t.Fatal(err)
	}
	return p, n
}

// steer marks test frame b for queue q of a steeredPair: its EtherType is
// the test's plus q.
func steer(b []byte, q int) []byte {
	binary.BigEndian.PutUint16(b[12:], nictest.EtherType+uint16(q))
	return b
}

// Two queues receive at once (the second's frames steered to it by their
// EtherType), each drained and refilled by its own goroutine, through
// rings too short for the frames, so that frames wait in the NIC's hold
// while refills make room: every frame arrives, whole and in its queue's
// order, and none is missed or dropped. (A frame that a refill racing its
// arrival left in the hold would still arrive at the next refill;
// TestIXGBEHeldFrameMeetsRefill makes the two cross.)
func TestIXGBEQueuesReceiveAtOnce(t *testing.T) {
	const perQueue = 400 // both queues' frames fit the hold (Pending)
	p, n := steeredPair(t, 64)
	var wg sync.WaitGroup
	for q := range 2 {
		wg.Go(func() { sendQueueFrames(t, n[0], n[1], q, perQueue, func(b []byte) { steer(b, q) }) })
		wg.Go(func() {
			rx := make([]*nicdrv.Buffer, 16)
			next := 0
			for deadline := time.Now().Add(30 * time.Second); next < perQueue && time.Now().Before(deadline); {
				k, err := n[1].RxBatch(q, rx)
				if err != nil {
					t.Error(err)
					return
				}
				for _, b := range rx[:k] {
					if want := steer(nictest.Frame(make([]byte, 100), n[1].MAC(), n[0].MAC(), txSeq(q, next), 100), q); !bytes.Equal(b.Data, want) {
						t.Errorf("queue %d: frame %#x where %#x was due, or changed", q, binary.BigEndian.Uint64(b.Data[14:]), txSeq(q, next))
					}
					next++
				}
				_ = n[1].Pool(q).Free(rx[:k]...)
			}
			if next != perQueue {
				t.Errorf("queue %d: %d of %d frames arrived (the model holds %d)", q, next, perQueue, p.Stats(1).Pending)
			}
		})
	}
	wg.Wait()
	if s := p.Stats(1); s.Violations != 0 || s.RxDropped != 0 {
		t.Errorf("receiver: %d violations (the last: %s), %d frames dropped", s.Violations, s.LastViolation, s.RxDropped)
	}
}

// Statistics read over and over while two queues move frames add up,
// summed over those reads and one more after the traffic stops, to the
// frames moved, none lost and none counted twice: the frame counters, and
// the 64-bit octet counters, whose halves are two reads with frames
// counted between them; and IXGBEStats' frame counts, which each queue
// keeps on a line of its own. The test checks the sums once the traffic
// has stopped, not any one read's value.
func TestIXGBEStatsWhileMoving(t *testing.T) {
	const perQueue, octets = 400, 104 // 100-byte frames and their FCS
	p, n := steeredPair(t, ixgbe.DefaultOptions().RxRing)
	sent0, recv0 := p.Stats(0).TxFrames, p.Stats(1).RxFrames
	rx, _ := p.Functions()[1].BAR(0)
	tx, _ := p.Functions()[0].BAR(0)
	regs := []struct {
		name  string
		regs  pci.Registers
		lo    int
		hi    bool // lo is a 64-bit counter's low half
		total uint64
		want  uint64
	}{
		{"GPRC", rx, hw.GPRC, false, 0, 2 * perQueue},
		{"GPTC", tx, hw.GPTC, false, 0, 2 * perQueue},
		{"GORC", rx, hw.GORCL, true, 0, 2 * perQueue * octets},
		{"TOR", rx, hw.TORL, true, 0, 2 * perQueue * octets},
		{"GOTC", tx, hw.GOTCL, true, 0, 2 * perQueue * octets},
	}
	read := func() {
		for i := range regs {
			r := &regs[i]
			v := uint64(r.regs.Read32(r.lo))
			if r.hi {
				v |= uint64(r.regs.Read32(r.lo+4)) << 32
			}
			r.total += v
		}
	}
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for i := 0; i < 1e6; i++ {
			select {
			case <-stop:
				return
			default:
				read()
			}
		}
	})
	var wg sync.WaitGroup
	for q := range 2 {
		wg.Go(func() {
			sendQueueFrames(t, n[0], n[1], q, perQueue, func(b []byte) { steer(b, q) })
		})
		wg.Go(func() {
			bufs := make([]*nicdrv.Buffer, 16)
			got := 0
			for deadline := time.Now().Add(30 * time.Second); got < perQueue && time.Now().Before(deadline); {
				k, err := n[1].RxBatch(q, bufs)
				if err != nil {
					t.Error(err)
					return
				}
				got += k
				_ = n[1].Pool(q).Free(bufs[:k]...)
			}
			if got != perQueue {
				t.Errorf("queue %d: %d of %d frames arrived", q, got, perQueue)
			}
		})
	}
	wg.Wait()
	close(stop)
	reader.Wait()
	read()
	for _, r := range regs {
		if r.total != r.want {
			t.Errorf("%s summed %d over its reads, want %d", r.name, r.total, r.want)
		}
	}
	if sent, recv := p.Stats(0).TxFrames-sent0, p.Stats(1).RxFrames-recv0; sent != 2*perQueue || recv != 2*perQueue {
		t.Errorf("TxFrames counted %d and RxFrames %d frames, want %d each", sent, recv, 2*perQueue)
	}
}

// A frame that finds its ring full while the driver refills it arrives
// with that refill, not at the next one: the receiving NIC stops the
// frame at each point of its way into the hold (after its first try,
// after the hold's try), the driver drains the ring and moves RDT, and
// once the frame goes on no frame is left in the hold, and every frame
// sent arrives in order.
func TestIXGBEHeldFrameMeetsRefill(t *testing.T) {
	for _, c := range []struct {
		name  string
		stage int // emulated.SetHoldHook's
	}{{"before the hold", 1}, {"in the hold's try", 2}} {
		t.Run(c.name, func(t *testing.T) {
			o := ixgbe.DefaultOptions()
			o.Queues, o.RxRing = 1, 64
			p, n := ixgbePairOn(t, emulated.DefaultIXGBEOptions(), o)
			for i := range n {
				if _, err := n[i].WaitLink(true, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			stopped, refilled := make(chan struct{}), make(chan struct{}, 1)
			release := make(chan struct{})
			goOn := sync.OnceFunc(func() { close(release) })
			t.Cleanup(goOn) // before the pair closes: a failed test leaves no frame stopped
			var stop atomic.Bool
			stop.Store(true)
			emulated.SetHoldHook(p, 1, func(s int) {
				switch {
				case s == 3:
					select {
					case refilled <- struct{}{}:
					default:
					}
				case s == c.stage && stop.CompareAndSwap(true, false):
					close(stopped)
					<-release
				}
			})
			// The sender fills the ring until a frame is stopped.
			var sent atomic.Int64
			sender := make(chan struct{})
			go func() {
				defer close(sender)
				for i := 0; i < 1000 && stop.Load(); i++ {
					buf, err := n[0].Pool(0).Get()
					if err != nil {
						t.Error(err)
						return
					}
					nictest.Frame(buf.SetLen(2048), n[1].MAC(), n[0].MAC(), uint64(i), 100)
					buf.SetLen(100)
					if k, err := n[0].TxBatch(0, []*nicdrv.Buffer{buf}); err != nil || k != 1 {
						t.Errorf("TxBatch: %d, %v", k, err)
						return
					}
					sent.Add(1)
				}
			}()
			select {
			case <-stopped:
			case <-sender:
				t.Fatalf("%d frames sent and none found the ring full", sent.Load())
			}
			got := 0
			rx := make([]*nicdrv.Buffer, 256)
			take := func() {
				k, err := n[1].RxBatch(0, rx)
				if err != nil {
					t.Error(err)
				}
				for _, b := range rx[:k] {
					if seq := binary.BigEndian.Uint64(b.Data[14:]); seq != uint64(got) {
						t.Errorf("frame %d where %d was due", seq, got)
					}
					got++
				}
				_ = n[1].Pool(0).Free(rx[:k]...)
			}
			// The driver drains the ring and refills it while the frame
			// is stopped; the refill may then wait for the hold.
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				take()
			}()
			select {
			case <-refilled:
			case <-drained: // with the refill before it, or none
				select {
				case <-refilled:
				default:
					t.Fatal("the driver drained the ring and did not move RDT")
				}
			}
			goOn()
			<-sender
			<-drained
			if s := p.Stats(1); s.Pending != 0 {
				t.Errorf("%d frame(s) left in the hold after the refill that made room (%d sent, %d received)", s.Pending, sent.Load(), got)
			}
			for deadline := time.Now().Add(10 * time.Second); got < int(sent.Load()) && time.Now().Before(deadline); {
				take()
			}
			if got != int(sent.Load()) {
				t.Errorf("%d of %d frames arrived", got, sent.Load())
			}
		})
	}
}
