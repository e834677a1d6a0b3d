package emulated_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
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

// settledEngines waits, at most 10 s, until the engines of the tests
// before have returned (their Close waited for them, but a goroutine that
// closed its done channel may not have returned yet) and returns how many
// run then: 0, as no test here runs in parallel.
func settledEngines(t *testing.T) int {
	t.Helper()
	waitEngines(t, 0, "the tests before")
	return 0
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
	base := settledEngines(t)
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
	base := settledEngines(t)
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

// within fails the test unless done reports true within 10 s.
func within(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
	}
}

// errWithin waits, at most 10 s, for an error from ch and returns it.
func errWithin(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	var err error
	within(t, what, func() bool {
		select {
		case err = <-ch:
			return true
		default:
			return false
		}
	})
	return err
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
	o := ixgbe.DefaultOptions()
	// b's ring holds fewer than o.RxRing frames: the rest, which wait in
	// b's packet buffer, find it full.
	total := o.RxRing + 8
	if total-o.RxRing > m.Pending {
		t.Fatalf("%d frames beyond the ring, more than the packet buffer's %d", total-o.RxRing, m.Pending)
	}
	p, n := ixgbePairOn(t, m, o)
	a, b := n[0], n[1]
	held, release := make(chan struct{}), make(chan struct{})
	var hold, free sync.Once
	emulated.SetHoldHook(p, 1, func(stage int) {
		if stage == 1 { // under the receive's lock, on b's engine
			hold.Do(func() { close(held); <-release })
		}
	})
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	sendFrames(t, a, b, total)
	within(t, "no frame found b's ring full", func() bool {
		select {
		case <-held:
			return true
		default:
			return false
		}
	})
	within(t, "a's engine stalled behind b's receive", func() bool { return p.Stats(0).TxFrames == uint64(total) })
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
	if err := errWithin(t, "b's TDT write waited for its engine's receive", sent); err != nil {
		t.Fatal(err)
	}
	got := 0
	within(t, "b's frame waited for b's receive", func() bool { got += received(t, a); return got == 1 })
	free.Do(func() { close(release) })
	got = 0
	within(t, fmt.Sprint("b did not receive all ", total, " frames"), func() bool { got += received(t, b); return got == total })
	for i := range 2 {
		if s := p.Stats(i); s.Violations != 0 || s.RxDropped != 0 {
			t.Errorf("NIC %d: %d violations (the last %q), %d frames dropped", i, s.Violations, s.LastViolation, s.RxDropped)
		}
	}
}

// stopEngineWaits reports whether a goroutine is in a reset's stopEngine
// waiting for an engine to return.
func stopEngineWaits() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "[chan receive") && strings.Contains(g, "(*ixgbeNIC).stopEngine(") {
			return true
		}
	}
	return false
}

// With AsyncDMA a reset (CTRL.RST, FLR) that finds the receive engine in
// the middle of a batch, with more frames in the packet buffer, waits for
// that engine and empties the buffer; a frame that comes off the wire
// while it waits is lost, as a chip in reset receives nothing, and starts
// no second engine, which would deliver it while the first still
// delivers the frames before it. After the reset the next frame starts
// one engine.
func TestIXGBEResetStopsReceiveEngine(t *testing.T) {
	for _, c := range []struct {
		what  string
		reset func(f *emulated.Function) error
	}{
		{"CTRL.RST", func(f *emulated.Function) error {
			regs, err := f.BAR(0)
			if err == nil {
				regs.Write32(hw.CTRL, hw.CtrlRst|hw.CtrlGIODis)
			}
			return err
		}},
		{"function-level reset", func(f *emulated.Function) error {
			if err := f.Reset(); err != nil {
				return err
			}
			// Memory decoding back on, so the driver's Close reads
			// the registers, not all ones.
			return pci.SetCommand(f, pci.CommandMemory)
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			base := settledEngines(t)
			m := emulated.DefaultIXGBEOptions()
			m.AsyncDMA = true
			p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
			a, b := n[0], n[1]
			held, release := make(chan struct{}), make(chan struct{})
			var first, twice atomic.Bool
			var inside atomic.Int32
			emulated.SetHoldHook(p, 1, func(stage int) {
				if stage != 4 { // before a frame of b's engine's batch
					return
				}
				if inside.Add(1) > 1 {
					twice.Store(true)
				}
				defer inside.Add(-1)
				if first.CompareAndSwap(false, true) {
					close(held)
					<-release
				}
			})
			var free sync.Once
			t.Cleanup(func() { free.Do(func() { close(release) }) })
			const queued = 4
			sendFrames(t, a, b, queued)
			<-held // sendFrames's first frame reached b's engine
			within(t, "a sent the frames", func() bool { return p.Stats(0).TxFrames == queued })
			if q := p.Stats(1).RxQueued; q != queued {
				t.Fatalf("%d frames in b's packet buffer and its engine's batch, want %d", q, queued)
			}
			reset := make(chan error, 1)
			go func() { reset <- c.reset(p.Functions()[1]) }()
			within(t, "the reset waited for b's engine", stopEngineWaits)
			sendFrames(t, a, b, 1)
			within(t, "the frame sent during the reset neither dropped nor delivered", func() bool {
				return twice.Load() || p.Stats(1).RxDropped != 0
			})
			if twice.Load() {
				t.Errorf("a second receive engine delivered a frame while the reset waited for the first")
			}
			if s := p.Stats(1); s.RxDropped != 1 {
				t.Errorf("%d frames dropped during the reset, want 1", s.RxDropped)
			}
			free.Do(func() { close(release) })
			if err := errWithin(t, "the reset did not return", reset); err != nil {
				t.Fatal(err)
			}
			if q := p.Stats(1).RxQueued; q != 0 {
				t.Errorf("%d frames left in b's packet buffer after the reset", q)
			}
			waitEngines(t, base+1, c.what+": a's transmit engine alone") // b's receive engine stopped
			// After the reset b takes frames again; its receive is not
			// enabled, so the frame is dropped there.
			sendFrames(t, a, b, 1)
			within(t, "the frame after the reset not dropped", func() bool {
				s := p.Stats(1)
				return s.RxDropped == 2 && s.RxQueued == 0
			})
			waitEngines(t, base+2, c.what+": a frame after the reset")
		})
	}
}

// A closed 82599 function whose port is still cabled takes no frame off
// the wire, as a port powered off: the peer's frame is dropped and
// counted, and none waits for an engine, so WaitSent returns.
func TestIXGBEClosedPortTakesNoFrame(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		m.Ports, m.Cabled = 1, false
		var p [2]*emulated.IXGBE
		for i := range p {
			var err error
			if p[i], err = emulated.NewIXGBE(m); err != nil {
				t.Fatal(err)
			}
			pi := p[i]
			t.Cleanup(func() { pi.Close() })
		}
		if err := emulated.Cable(p[0].Port(0), p[1].Port(0)); err != nil {
			t.Fatal(err)
		}
		var n [2]*ixgbe.NIC
		for i := range n {
			var err error
			if n[i], err = ixgbe.Open(p[i].Functions()[0], ixgbe.DefaultOptions()); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { n[0].Close() })
		// The receiver's driver and function close; its port stays on
		// the cable.
		if err := n[1].Close(); err != nil {
			t.Fatal(err)
		}
		if err := p[1].Functions()[0].Close(); err != nil {
			t.Fatal(err)
		}
		sendFrames(t, n[0], n[1], 1)
		waitIXGBESent(t, p[0], 0, 1)
		if s := p[1].Stats(0); s.RxQueued != 0 || s.RxDropped != 1 {
			t.Errorf("closed port: %d frames wait for an engine, %d dropped; want 0 and 1", s.RxQueued, s.RxDropped)
		}
		if err := p[1].WaitSent(0, 0, time.Second); err != nil {
			t.Error(err)
		}
	})
}
