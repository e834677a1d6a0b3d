package emulated_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
)

// irqPair is steeredPair's two 82599s (the receiver's queue 1 taking the
// frames steer marks for it) opened with unmoderated per-queue vectors
// (queue q on vector q), in the model's DMA mode m, and the receiver's
// registers, on which a test masks and unmasks the vectors itself. The
// driver arms its vectors only in WaitRx, which these tests never call.
func irqPair(t *testing.T, m emulated.IXGBEOptions) (*emulated.IXGBE, [2]*ixgbe.NIC, pci.Registers) {
	t.Helper()
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing = 2, 512
	o.Interrupts, o.NoModeration = true, true
	p, n := ixgbePairOn(t, m, o)
	for i := range n {
		if _, err := n[i].WaitLink(true, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n[1].AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: nictest.EtherType + 1, Queue: 1}); err != nil {
		t.Fatal(err)
	}
	regs, err := p.Functions()[1].BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	return p, n, regs
}

// drainQueue takes count frames off queue q of b, polling at most 10^7
// times, and fails the test if fewer came.
func drainQueue(t *testing.T, b *ixgbe.NIC, q, count int) {
	t.Helper()
	rx := make([]*nicdrv.Buffer, 32)
	got := 0
	for try := 0; got < count && try < 1e7; try++ {
		k, err := b.RxBatch(q, rx)
		if err != nil {
			t.Errorf("queue %d: %v", q, err)
			return
		}
		got += k
		_ = b.Pool(q).Free(rx[:k]...)
	}
	if got != count {
		t.Errorf("queue %d: %d of %d frames arrived", q, got, count)
	}
}

// Two queues whose vectors are unmasked and not auto-masked (EIAM_EX0
// cleared) receive at once, each on its own goroutine with its own
// sender: every delivery raises its queue's vector, so the receiver counts
// one interrupt a frame, none lost and none doubled, the causes are
// auto-cleared (EIAC) as they are sent, and no violation is recorded. (Run
// with -race: the two vectors' state is touched from two goroutines at
// once.)
func TestIXGBEVectorsRaisedAtOnce(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		const perQueue = 300
		p, n, regs := irqPair(t, m)
		regs.Write32(hw.EIAMEx(0), 0)
		regs.Write32(hw.EIMSEx(0), 1<<0|1<<1)
		before, sent := p.Stats(1).Interrupts, p.Stats(0).TxFrames
		var wg sync.WaitGroup
		for q := range 2 {
			wg.Go(func() { sendQueueFrames(t, n[0], n[1], q, perQueue, func(b []byte) { steer(b, q) }) })
			wg.Go(func() { drainQueue(t, n[1], q, perQueue) })
		}
		wg.Wait()
		waitIXGBESent(t, p, 0, sent+2*perQueue) // every delivery done, its interrupt sent
		if got := p.Stats(1).Interrupts - before; got != 2*perQueue {
			t.Errorf("%d interrupts for %d frames on two unmasked vectors, want one a frame", got, 2*perQueue)
		}
		if v := regs.Read32(hw.EICR) & hw.EicrRTxQMask; v != 0 {
			t.Errorf("EICR = %#x after every cause was sent: EIAC should have auto-cleared them", v)
		}
		if v := regs.Read32(hw.EIMSEx(0)); v != 1<<0|1<<1 {
			t.Errorf("EIMS_EX0 = %#x, want both vectors still enabled (0x3): EIAM_EX0 is 0", v)
		}
		if s := p.Stats(1); s.Violations != 0 || s.RxDropped != 0 {
			t.Errorf("receiver: %d violations (the last: %s), %d frames dropped", s.Violations, s.LastViolation, s.RxDropped)
		}
	})
}

// Frames delivered while their queues' vectors are masked send nothing and
// latch both vectors' causes; one EICR read returns both and clears them
// (read to clear), so a second reads none and unmasking then sends
// nothing.
func TestIXGBEEICRReadClearsEveryVector(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p, n, regs := irqPair(t, m)
		before, sent := p.Stats(1).Interrupts, p.Stats(0).TxFrames
		for q := range 2 {
			sendQueueFrames(t, n[0], n[1], q, 1, func(b []byte) { steer(b, q) })
		}
		waitIXGBESent(t, p, 0, sent+2)
		if got := p.Stats(1).Interrupts - before; got != 0 {
			t.Errorf("%d interrupts from masked vectors, want 0", got)
		}
		if v := regs.Read32(hw.EICR) & hw.EicrRTxQMask; v != 1<<0|1<<1 {
			t.Errorf("first EICR read = %#x, want both queues' causes (0x3)", v)
		}
		if v := regs.Read32(hw.EICR) & hw.EicrRTxQMask; v != 0 {
			t.Errorf("second EICR read = %#x, want 0: the first read clears every vector's cause", v)
		}
		regs.Write32(hw.EIMSEx(0), 1<<0|1<<1)
		if got := p.Stats(1).Interrupts - before; got != 0 {
			t.Errorf("%d interrupts on unmasking vectors whose causes EICR's read cleared, want 0", got)
		}
		for q := range 2 {
			drainQueue(t, n[1], q, 1)
		}
		if s := p.Stats(1); s.Violations != 0 {
			t.Errorf("%d violations (the last: %s)", s.Violations, s.LastViolation)
		}
	})
}

// A frame delivered while its queue's vector is masked sends nothing (and
// does not disturb the other vector, unmasked); unmasking the vector
// (EIMS_EX) then sends the pending cause at once, and the auto-mask
// (GPIE.EIAME with EIAM_EX) masks it again as it sends; a cause cleared by
// an EICR write is not sent on unmasking.
func TestIXGBEMaskedVectorFiresOnUnmask(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p, n, regs := irqPair(t, m)
		before, sent := p.Stats(1).Interrupts, p.Stats(0).TxFrames
		sendQueueFrames(t, n[0], n[1], 1, 1, func(b []byte) { steer(b, 1) })
		waitIXGBESent(t, p, 0, sent+1)
		if got := p.Stats(1).Interrupts - before; got != 0 {
			t.Fatalf("%d interrupts from a masked vector, want 0", got)
		}
		regs.Write32(hw.EIMSEx(0), 1<<0) // the other vector: nothing pending
		if got := p.Stats(1).Interrupts - before; got != 0 {
			t.Fatalf("%d interrupts on unmasking vector 0, which has no cause, want 0", got)
		}
		regs.Write32(hw.EIMSEx(0), 1<<1)
		if got := p.Stats(1).Interrupts - before; got != 1 {
			t.Errorf("%d interrupts on unmasking vector 1 with its cause pending, want 1", got)
		}
		if v := regs.Read32(hw.EIMSEx(0)); v != 1<<0 {
			t.Errorf("EIMS_EX0 = %#x after vector 1 sent, want 0x1: EIAM_EX0 auto-masks it", v)
		}
		// Latched again, then cleared by a write of 1 to EICR: unmasking
		// sends nothing.
		sendQueueFrames(t, n[0], n[1], 1, 1, func(b []byte) { steer(b, 1) })
		waitIXGBESent(t, p, 0, sent+2)
		regs.Write32(hw.EICR, 1<<1)
		regs.Write32(hw.EIMSEx(0), 1<<1)
		if got := p.Stats(1).Interrupts - before; got != 1 {
			t.Errorf("%d interrupts, want still 1: the cause was cleared before the unmask", got)
		}
		drainQueue(t, n[1], 1, 2)
		if s := p.Stats(1); s.Violations != 0 {
			t.Errorf("%d violations (the last: %s)", s.Violations, s.LastViolation)
		}
	})
}
