package emulated_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
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

// rawTxQueue is TX queue 0 of a one-port 82599 model programmed by hand:
// a ring of 64 descriptors and a 60-byte frame, both in mapped memory.
type rawTxQueue struct {
	p     *emulated.IXGBE
	f     *emulated.Function
	regs  pci.Registers
	mem   []byte
	ring  []byte // the ring's bytes inside mem
	base  uint64 // the ring's IOVA
	frame uint64 // the frame's IOVA
}

const rawRing = 64

func newRawTxQueue(t *testing.T, m emulated.IXGBEOptions) *rawTxQueue {
	t.Helper()
	m.Ports, m.Cabled = 1, false
	p, err := emulated.NewIXGBE(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	q := &rawTxQueue{p: p, f: p.Functions()[0], mem: make([]byte, 3*4096)}
	mp, err := q.f.DMA().Map(q.mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(mp.Segments) != 1 {
		t.Fatalf("%d IOVA segments, want 1", len(mp.Segments))
	}
	iova := mp.Segments[0].IOVA
	off := int((iova+127)&^127 - iova)
	q.ring = q.mem[off : off+rawRing*hw.DescSize]
	q.base = iova + uint64(off)
	q.frame = iova + 2*4096
	copy(q.mem[2*4096:], []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 2, 0, 0, 0, 0, 1, 0x88, 0xB5})
	q.regs, _ = q.f.BAR(0)
	q.enable(t)
	return q
}

// enable sets bus mastering and TX queue 0 up from its reset state.
func (q *rawTxQueue) enable(t *testing.T) {
	t.Helper()
	if err := pci.SetCommand(q.f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
		t.Fatal(err)
	}
	q.regs.Write32(hw.DMATXCTL, hw.DmatxctlTE)
	q.regs.Write32(hw.TDBAL(0), uint32(q.base))
	q.regs.Write32(hw.TDBAH(0), uint32(q.base>>32))
	q.regs.Write32(hw.TDLEN(0), rawRing*hw.DescSize)
	q.regs.Write32(hw.TDH(0), 0)
	q.regs.Write32(hw.TDT(0), 0)
	q.regs.Write32(hw.TXDCTL(0), hw.TxdctlEnable)
	if q.regs.Read32(hw.TXDCTL(0))&hw.TxdctlEnable == 0 {
		t.Fatalf("TX queue 0 not enabled: %s", q.p.Stats(0).LastViolation)
	}
}

// waitHead waits, at most 10 s, for TDH to read head.
func (q *rawTxQueue) waitHead(t *testing.T, head uint32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); q.regs.Read32(hw.TDH(0)) != head; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("TDH %d after 10 s, want %d", q.regs.Read32(hw.TDH(0)), head)
		}
	}
}

// The transmit DMA in both modes fetches, sends and writes back the same
// descriptors and records the same violations: a tail write's own checks
// at the write, the descriptors' as the DMA reads them. DD is written
// back where RS asks, also on a frame the NIC could not read.
func TestIXGBETxDMA(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		q := newRawTxQueue(t, m)
		const rsEOP = hw.TxCmdEOP | hw.TxCmdRS | hw.TxCmdIFCS
		hw.DataTx(q.frame, 60, rsEOP, 60<<hw.TxPaylenShift).Encode(q.ring[0:])
		hw.TxDesc{Addr: q.frame, CmdType: 60 | hw.TxCmdRS}.Encode(q.ring[16:]) // legacy
		hw.DataTx(1<<50, 60, rsEOP, 60<<hw.TxPaylenShift).Encode(q.ring[32:])  // unmapped
		steps := []struct {
			tdt           uint32
			frames, viols uint64
			want          string
		}{
			{1, 1, 0, ""},
			{2, 1, 1, "legacy TX descriptor"},
			{3, 1, 2, "is not mapped"},
		}
		for _, s := range steps {
			q.regs.Write32(hw.TDT(0), s.tdt)
			q.waitHead(t, s.tdt)
			st := q.p.Stats(0)
			if st.TxFrames != s.frames || st.Violations != s.viols || !strings.Contains(st.LastViolation, s.want) {
				t.Errorf("TDT %d: %d frames sent, %d violations (the last %q); want %d, %d naming %q",
					s.tdt, st.TxFrames, st.Violations, st.LastViolation, s.frames, s.viols, s.want)
			}
			if d := hw.DecodeTxDesc(q.ring[(s.tdt-1)*hw.DescSize:]); !d.Done() {
				t.Errorf("TDT %d: descriptor %d has RS but no DD written back", s.tdt, s.tdt-1)
			}
		}
		if a := q.p.Accesses(0); a.TxDescFetches != 3 || a.TxDescWriteBacks != 3 {
			t.Errorf("%d descriptor fetches and %d write-backs, want 3 and 3", a.TxDescFetches, a.TxDescWriteBacks)
		}
		// A tail outside the ring is refused at the write, in both modes.
		q.regs.Write32(hw.TDT(0), rawRing)
		if st := q.p.Stats(0); st.Violations != 3 || !strings.Contains(st.LastViolation, "outside a ring") {
			t.Errorf("TDT outside the ring: %d violations, the last %q", st.Violations, st.LastViolation)
		}
	})
}

// engines counts the goroutines running an 82599 model's DMA engine.
func engines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*ixgbeNIC).runEngine(")
}

// waitEngines waits, at most 10 s, for want DMA engines to run.
func waitEngines(t *testing.T, want int, after string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); engines() != want; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d DMA engines run, want %d", after, engines(), want)
		}
	}
}

// With AsyncDMA a NIC's engine starts with its first tail write that has
// work, and a software reset (CTRL.RST), a function-level reset and Close
// stop it and wait for it: none is left running, and none starts after
// Close.
func TestIXGBEDMAEngineStops(t *testing.T) {
	base := engines()
	m := emulated.DefaultIXGBEOptions()
	m.AsyncDMA = true
	q := newRawTxQueue(t, m)
	if engines() != base {
		t.Fatalf("%d DMA engines before any tail write, want %d", engines()-base, 0)
	}
	tdt := uint32(0)
	send := func() {
		hw.DataTx(q.frame, 60, hw.TxCmdEOP|hw.TxCmdRS|hw.TxCmdIFCS, 60<<hw.TxPaylenShift).Encode(q.ring[tdt*hw.DescSize:])
		tdt++
		q.regs.Write32(hw.TDT(0), tdt)
		q.waitHead(t, tdt)
	}
	for _, c := range []struct {
		what  string
		reset func()
	}{
		{"CTRL.RST", func() { q.regs.Write32(hw.CTRL, hw.CtrlRst|hw.CtrlGIODis) }},
		{"function-level reset", func() {
			if err := q.f.Reset(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		send()
		waitEngines(t, base+1, "a frame sent")
		c.reset()
		waitEngines(t, base, c.what)
		// The reset stopped TX queue 0 (the FLR memory decoding too): a
		// tail write starts no engine.
		q.regs.Write32(hw.TDT(0), 1)
		if engines() != base {
			t.Errorf("%s: a tail write to a stopped queue started an engine", c.what)
		}
		q.enable(t)
		tdt = 0
	}
	send()
	waitEngines(t, base+1, "a frame sent after the resets")
	if err := q.p.Close(); err != nil {
		t.Fatal(err)
	}
	waitEngines(t, base, "Close")
	sent := q.p.Stats(0).TxFrames
	hw.DataTx(q.frame, 60, hw.TxCmdEOP|hw.TxCmdRS|hw.TxCmdIFCS, 60<<hw.TxPaylenShift).Encode(q.ring[tdt*hw.DescSize:])
	q.regs.Write32(hw.TDT(0), tdt+1)
	if engines() != base || q.p.Stats(0).TxFrames != sent {
		t.Errorf("a tail write after Close started an engine or sent a frame")
	}
	if st := q.p.Stats(0); st.Violations != 1 || !strings.Contains(st.LastViolation, "not enabled") {
		t.Errorf("%d violations, the last %q; want the one of the tail write after CTRL.RST", st.Violations, st.LastViolation)
	}
}

// With AsyncDMA the receiving NIC's own receive engine writes a frame off
// the wire into its ring: sending from one NIC of a cabled pair starts the
// sender's transmit engine and the receiver's receive engine, every frame
// arrives, nothing waits in a packet buffer once the sender counted it
// sent, and Close stops both engines.
func TestIXGBEReceiveOnOwnEngine(t *testing.T) {
	base := engines()
	m := emulated.DefaultIXGBEOptions()
	m.AsyncDMA = true
	p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
	sendFrames(t, n[0], n[1], 10)
	waitIXGBESent(t, p, 0, 10)
	if got := received(t, n[1]); got != 10 {
		t.Errorf("%d of 10 frames arrived", got)
	}
	if e := engines() - base; e != 2 {
		t.Errorf("%d DMA engines run, want 2 (the sender's transmit, the receiver's receive)", e)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	waitEngines(t, base, "Close")
	for i := range 2 {
		if s := p.Stats(i); s.Violations != 0 || s.RxQueued != 0 {
			t.Errorf("NIC %d: %d violations (the last %q), %d frames left queued", i, s.Violations, s.LastViolation, s.RxQueued)
		}
	}
}

// With AsyncDMA a frame crosses the cable in the sender's frame buffer
// (the receiver's packet buffer keeps it and gives a spent buffer back)
// rather than as a copy: every frame still arrives whole and in order
// while the sender's engine goes on gathering later frames into buffers
// that came back, bursts of them waiting in the receiver's packet buffer.
func TestIXGBEFramesCrossTheCableWhole(t *testing.T) {
	m := emulated.DefaultIXGBEOptions()
	m.AsyncDMA = true
	p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
	a, b := n[0], n[1]
	const total, burst = 600, 32
	rx := make([]*nicdrv.Buffer, 64)
	next := uint64(0)
	check := func() {
		t.Helper()
		k, err := b.RxBatch(0, rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, buf := range rx[:k] {
			want := nictest.Frame(make([]byte, 2048), b.MAC(), a.MAC(), next, nictest.Size(next))
			if !bytes.Equal(buf.Data, want) {
				t.Fatalf("frame %d: %d bytes, not the %d sent (sequence %d)", next, len(buf.Data), len(want), binary.BigEndian.Uint64(buf.Data[14:]))
			}
			next++
		}
		_ = b.Pool(0).Free(rx[:k]...)
	}
	bufs := make([]*nicdrv.Buffer, 0, burst)
	for seq := uint64(0); seq < total; {
		bufs = bufs[:0]
		for ; len(bufs) < burst && seq < total; seq++ {
			buf, err := a.Pool(0).Get()
			if err != nil {
				t.Fatal(err)
			}
			nictest.Frame(buf.SetLen(2048), b.MAC(), a.MAC(), seq, nictest.Size(seq))
			buf.SetLen(nictest.Size(seq))
			bufs = append(bufs, buf)
		}
		for sent := 0; sent < len(bufs); {
			k, err := a.TxBatch(0, bufs[sent:])
			if err != nil {
				t.Fatal(err)
			}
			sent += k
		}
		if seq%(4*burst) == 0 {
			check() // some bursts wait in the packet buffer
		}
	}
	waitIXGBESent(t, p, 0, total)
	for deadline := time.Now().Add(10 * time.Second); next < total; {
		check()
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames arrived after 10 s", next, total)
		}
	}
	for i := range 2 {
		if s := p.Stats(i); s.Violations != 0 || s.RxDropped != 0 {
			t.Errorf("NIC %d: %d violations (the last %q), %d frames dropped", i, s.Violations, s.LastViolation, s.RxDropped)
		}
	}
}

// With AsyncDMA a NIC's receive engine held in the middle of a receive (a
// frame that found its ring full, stopped in the hold hook) stalls
// neither the NIC's transmit DMA, as the chip's receive and transmit DMA
// run at once (its driver's TDT write returns, as a posted write does, and
// the frame reaches the peer), nor the peer's engine, whose frames wait in
// this NIC's packet buffer as in the MAC's FIFO; once the receive goes on,
// every frame arrives.
func TestIXGBEEngineStallsNoOtherDMA(t *testing.T) {
	m := emulated.DefaultIXGBEOptions()
	m.AsyncDMA = true
	p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
	a, b := n[0], n[1]
	held, release := make(chan struct{}), make(chan struct{})
	var hold, free sync.Once
	emulated.SetHoldHook(p, 1, func(stage int) {
		if stage == 1 { // under the receive's lock, on b's engine
			hold.Do(func() { close(held); <-release })
		}
	})
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	within := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !done(); runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("after 10 s: %s", what)
			}
		}
	}
	// b's ring holds fewer than 512 frames: the rest find it full.
	const total = 520
	sendFrames(t, a, b, total)
	within("no frame found b's ring full", func() bool {
		select {
		case <-held:
			return true
		default:
			return false
		}
	})
	within("a's engine stalled behind b's receive", func() bool { return p.Stats(0).TxFrames == total })
	sent := make(chan error, 1)
	go func() {
		buf, err := b.Pool(0).Get()
		if err == nil {
			nictest.Frame(buf.SetLen(2048), a.MAC(), b.MAC(), 0, 100)
			buf.SetLen(100)
			_, err = b.TxBatch(0, []*nicdrv.Buffer{buf})
		}
		sent <- err
	}()
	var txErr error
	within("b's TDT write waited for its engine's receive", func() bool {
		select {
		case txErr = <-sent:
			return true
		default:
			return false
		}
	})
	if txErr != nil {
		t.Fatal(txErr)
	}
	got := 0
	within("b's frame waited for b's receive", func() bool { got += received(t, a); return got == 1 })
	free.Do(func() { close(release) })
	got = 0
	within(fmt.Sprint("b did not receive all ", total, " frames"), func() bool { got += received(t, b); return got == total })
	for i := range 2 {
		if s := p.Stats(i); s.Violations != 0 || s.RxDropped != 0 {
			t.Errorf("NIC %d: %d violations (the last %q), %d frames dropped", i, s.Violations, s.LastViolation, s.RxDropped)
		}
	}
}
