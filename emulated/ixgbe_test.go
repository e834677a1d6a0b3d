package emulated_test

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport/fault"
)

// ixgbePair is two emulated 82599s brought up by the driver.
func ixgbePair(t *testing.T, o ixgbe.Options) (*emulated.IXGBE, [2]*ixgbe.NIC) {
	t.Helper()
	return ixgbePairOn(t, emulated.DefaultIXGBEOptions(), o)
}

// ixgbeDMAModes runs test over the 82599 model with its transmit DMA on
// the writer of TDT ("sync") and on the NIC's DMA engine ("async",
// IXGBEOptions.AsyncDMA); m is DefaultIXGBEOptions in that mode.
func ixgbeDMAModes(t *testing.T, test func(t *testing.T, m emulated.IXGBEOptions)) {
	for _, async := range []bool{false, true} {
		name := "sync"
		if async {
			name = "async"
		}
		t.Run(name, func(t *testing.T) {
			m := emulated.DefaultIXGBEOptions()
			m.AsyncDMA = async
			test(t, m)
		})
	}
}

// waitIXGBESent fails the test unless port i of p has put count frames on the
// wire and every port has received what came to it within 10 s
// (emulated.IXGBE.WaitSent).
func waitIXGBESent(t *testing.T, p *emulated.IXGBE, i int, count uint64) {
	t.Helper()
	if err := p.WaitSent(i, count, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// ixgbePairOn is two emulated 82599s made with m brought up by the driver.
func ixgbePairOn(t *testing.T, m emulated.IXGBEOptions, o ixgbe.Options) (*emulated.IXGBE, [2]*ixgbe.NIC) {
	t.Helper()
	p, err := emulated.NewIXGBE(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var n [2]*ixgbe.NIC
	for i := range n {
		if n[i], err = ixgbe.Open(p.Functions()[i], o); err != nil {
			t.Fatal(err)
		}
		nic := n[i]
		t.Cleanup(func() { nic.Close() })
	}
	return p, n
}

// sendFrames sends count suite frames of 100 bytes from a to b.
func sendFrames(t *testing.T, a, b *ixgbe.NIC, count int) {
	t.Helper()
	for i := 0; i < count; i++ {
		buf, err := a.Pool(0).Get()
		if err != nil {
			t.Fatal(err)
		}
		nictest.Frame(buf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), 100)
		buf.SetLen(100)
		for k := 0; k == 0; {
			if k, err = a.TxBatch(0, []*nicdrv.Buffer{buf}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// received drains b's queue 0 and counts the frames.
func received(t *testing.T, b *ixgbe.NIC) int {
	t.Helper()
	rx := make([]*nicdrv.Buffer, 64)
	total := 0
	for {
		k, err := b.RxBatch(0, rx)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			return total
		}
		total += k
		_ = b.Pool(0).Free(rx[:k]...)
	}
}

// A Flow Director filter added with a bucket hash that is not the hash of
// its fields is a violation: on the chip it would sit in a bucket its flow
// never looks in.
func TestIXGBEFdirHashChecked(t *testing.T) {
	p, _ := ixgbePair(t, ixgbe.DefaultOptions())
	regs, _ := p.Functions()[1].BAR(0)
	right := hw.FdirBucketHash(hw.FdirInput{FlowType: hw.FlowUDP, DstPort: 4242}, hw.FdirBucketKey)
	regs.Write32(hw.FDIRPORT, 4242<<16)
	regs.Write32(hw.FDIRHASH, right^1)
	regs.Write32(hw.FDIRCMD, hw.FdircmdAdd|hw.FlowUDP<<hw.FdircmdL4TypeShift|hw.FdircmdQueueEn)
	if s := p.Stats(1); s.Violations != 1 || !strings.Contains(s.LastViolation, "FDIRHASH") {
		t.Fatalf("wrong bucket hash: %d violations (%q), want 1 naming FDIRHASH", s.Violations, s.LastViolation)
	}
	regs.Write32(hw.FDIRHASH, right|1<<16)
	regs.Write32(hw.FDIRCMD, hw.FdircmdAdd|hw.FlowUDP<<hw.FdircmdL4TypeShift|hw.FdircmdQueueEn)
	if s := p.Stats(1); s.Violations != 1 {
		t.Errorf("the right bucket hash was refused: %s", s.LastViolation)
	}
	if free := regs.Read32(hw.FDIRFREE); free != hw.FdirPerfect64K-2 {
		t.Errorf("FDIRFREE %d after two adds, want %d", free, hw.FdirPerfect64K-2)
	}
}

// Misprogramming is recorded, never silently accepted.
func TestIXGBEStrictness(t *testing.T) {
	p, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f := p.Functions()[0]
	if err := pci.SetCommand(f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
		t.Fatal(err)
	}
	regs, _ := f.BAR(0)
	m, err := f.DMA().Map(make([]byte, 8192))
	if err != nil {
		t.Fatal(err)
	}
	base := (m.Segments[0].IOVA + 127) &^ 127
	for _, c := range []struct {
		what, want string
		do         func()
	}{
		{"a 16-bit read", "32 bits", func() { regs.Read16(hw.STATUS) }},
		{"a write to a statistics register", "read-only", func() { regs.Write32(hw.GPRC, 1) }},
		{"CTRL.RST with PCI mastering on", "GIO_DIS", func() { regs.Write32(hw.CTRL, hw.CtrlRst) }},
		{"RXDCTL.ENABLE without a ring", "RDLEN", func() { regs.Write32(hw.RXDCTL(0), hw.RxdctlEnable) }},
		{"legacy RX descriptors", "DESCTYPE", func() {
			regs.Write32(hw.RDBAL(1), uint32(base))
			regs.Write32(hw.RDBAH(1), uint32(base>>32))
			regs.Write32(hw.RDLEN(1), 1024)
			regs.Write32(hw.SRRCTL(1), 2)
			regs.Write32(hw.RXDCTL(1), hw.RxdctlEnable)
		}},
		{"RDLEN written while the queue is enabled", "RDLEN2 written while", func() {
			regs.Write32(hw.RDBAL(2), uint32(base))
			regs.Write32(hw.RDBAH(2), uint32(base>>32))
			regs.Write32(hw.RDLEN(2), 1024)
			regs.Write32(hw.SRRCTL(2), 2|hw.SrrctlDescAdvOneBuf)
			regs.Write32(hw.RXDCTL(2), hw.RxdctlEnable)
			regs.Write32(hw.RDLEN(2), 2048)
		}},
		{"TXDCTL.ENABLE before DMATXCTL.TE", "DMATXCTL.TE", func() {
			regs.Write32(hw.TDBAL(0), uint32(base))
			regs.Write32(hw.TDBAH(0), uint32(base>>32))
			regs.Write32(hw.TDLEN(0), 1024)
			regs.Write32(hw.TXDCTL(0), hw.TxdctlEnable)
		}},
		{"SRRCTL.BSIZEPACKET above 16 KiB", "1 to 16 KiB", func() {
			regs.Write32(hw.RDBAL(3), uint32(base))
			regs.Write32(hw.RDBAH(3), uint32(base>>32))
			regs.Write32(hw.RDLEN(3), 1024)
			regs.Write32(hw.SRRCTL(3), 17|hw.SrrctlDescAdvOneBuf)
			regs.Write32(hw.RXDCTL(3), hw.RxdctlEnable)
		}},
		// Queues 64-127 have registers but the model runs 0..63.
		{"RDT of queue 64 outside its ring", "RDT64 = 5 outside", func() { regs.Write32(hw.RDT(64), 5) }},
		{"TDT of queue 64 while it is not enabled", "TDT64 moved", func() { regs.Write32(hw.TDT(64), 5) }},
		{"an EtherType filter on IPv4", "IPv4", func() { regs.Write32(hw.ETQF(0), hw.EtqfFilterEn|0x0800) }},
		{"FDIRCTRL without room in the packet buffer", "RXPBSIZE0", func() {
			regs.Write32(hw.FDIRCTRL, hw.FdirctrlPBAlloc64K|hw.FdirctrlPerfectMatch)
		}},
	} {
		before := p.Stats(0).Violations
		c.do()
		s := p.Stats(0)
		if s.Violations != before+1 || !strings.Contains(s.LastViolation, c.want) {
			t.Errorf("%s: %d new violations, the last %q; want one mentioning %q", c.what, s.Violations-before, s.LastViolation, c.want)
		}
	}
	if regs.Read32(hw.RXDCTL(1))&hw.RxdctlEnable != 0 || regs.Read32(hw.TXDCTL(0))&hw.TxdctlEnable != 0 {
		t.Error("a queue refused its enable bit but reads it back set")
	}
	if regs.Read32(hw.RXDCTL(2))&hw.RxdctlEnable == 0 {
		t.Error("a valid RX queue did not read its enable bit back set")
	}
}

// Statistics registers clear on read; 64-bit ones when the high half is
// read.
func TestIXGBEStatsClearOnRead(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
		sendFrames(t, n[0], n[1], 10)
		waitIXGBESent(t, p, 0, 10)
		if got := received(t, n[1]); got != 10 {
			t.Fatalf("%d of 10 frames arrived", got)
		}
		regs, _ := p.Functions()[1].BAR(0)
		if v := regs.Read32(hw.GPRC); v != 10 {
			t.Errorf("GPRC %d, want 10", v)
		}
		if v := regs.Read32(hw.GPRC); v != 0 {
			t.Errorf("GPRC %d on a second read, want 0", v)
		}
		lo := regs.Read32(hw.GORCL)
		regs.Read32(hw.GORCH)
		if lo != 10*104 || regs.Read32(hw.GORCL) != 0 {
			t.Errorf("GORCL %d (want %d), then not cleared by reading GORCH", lo, 10*104)
		}
		if s := p.Stats(1); s.Violations != 0 {
			t.Error(s.LastViolation)
		}
	})
}

// The wire's fault model: a corrupted frame reaches the receiving model
// with a bad FCS, which it counts (CRCERRS, the driver's RxErrors) and
// drops; lost frames never arrive. The same seed gives the same pattern.
func TestWireFaults(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		for _, c := range []struct {
			name string
			o    fault.Options
		}{
			{"corrupt", fault.Options{Corrupt: 1, Seed: 1}},
			{"loss", fault.Options{Loss: 0.3, Seed: 7}},
		} {
			t.Run(c.name, func(t *testing.T) {
				p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
				if err := emulated.Connect(emulated.CableOptions{Faults: c.o}, p.Port(0), p.Port(1)); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if _, err := n[i].WaitLink(true, 5*time.Second); err != nil {
						t.Fatal(err)
					}
				}
				const frames = 200
				sendFrames(t, n[0], n[1], frames)
				waitIXGBESent(t, p, 0, frames)
				got := received(t, n[1])
				wf := p.WireFaults(0)
				st, _ := n[1].Stats()
				switch c.name {
				case "corrupt":
					if got != 0 || p.Stats(1).RxBadFCS != frames || st.RxErrors != frames {
						t.Errorf("%d frames corrupted on the wire: %d received, %d bad FCS in the model, %d errors in the driver's stats", frames, got, p.Stats(1).RxBadFCS, st.RxErrors)
					}
				case "loss":
					if wf.Dropped == 0 || uint64(got) != frames-wf.Dropped {
						t.Errorf("%d frames, %d lost on the wire, %d received", frames, wf.Dropped, got)
					}
				}
				if s := p.Stats(1); s.Violations != 0 {
					t.Error(s.LastViolation)
				}
			})
		}
	})
}

// A cable's Lose loses exactly the frames it picks, and is asked about
// every frame, both ways, before the fault model and on a perfect cable
// alike.
func TestWireLose(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		var seen, lost atomic.Uint64
		lose := func(fr []byte) bool {
			if len(fr) < 14 {
				t.Errorf("Lose asked about a %d-byte frame", len(fr))
			}
			return seen.Add(1)%3 == 0 && lost.Add(1) > 0
		}
		p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
		if err := emulated.Connect(emulated.CableOptions{Lose: lose}, p.Port(0), p.Port(1)); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := n[i].WaitLink(true, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		const frames = 90
		sendFrames(t, n[0], n[1], frames)
		waitIXGBESent(t, p, 0, frames)
		if got := received(t, n[1]); seen.Load() != frames || lost.Load() != frames/3 || got != frames-frames/3 {
			t.Errorf("%d frames sent, Lose asked about %d and lost %d, %d received", frames, seen.Load(), lost.Load(), got)
		}
	})
}

// A faulty cable between an 82599 and an 82574L: the 82574L model too
// counts the corrupted frames in CRCERRS (the e1000e driver's RxErrors) and
// drops them.
func TestWireFaultsAcrossModels(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		px, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1, AsyncDMA: m.AsyncDMA})
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		pe, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer pe.Close()
		if err := emulated.Connect(emulated.CableOptions{Faults: fault.Options{Corrupt: 0.5, Seed: 3}}, px.Port(0), pe.Port(0)); err != nil {
			t.Fatal(err)
		}
		a, err := ixgbe.Open(px.Functions()[0], ixgbe.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := e1000e.Open(pe.Functions()[0], e1000e.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		const frames = 100
		for i := 0; i < frames; i++ {
			buf, _ := a.Pool(0).Get()
			nictest.Frame(buf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), 100)
			buf.SetLen(100)
			for k := 0; k == 0; {
				if k, err = a.TxBatch(0, []*nicdrv.Buffer{buf}); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitIXGBESent(t, px, 0, frames)
		rx := make([]*nicdrv.Buffer, 64)
		got := 0
		for {
			k, err := b.RxBatch(0, rx)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				break
			}
			got += k
			_ = b.Pool(0).Free(rx[:k]...)
		}
		st, _ := b.Stats()
		corrupted := px.WireFaults(0).Corrupted
		if corrupted == 0 || uint64(got)+corrupted != frames || st.RxErrors != corrupted {
			t.Errorf("%d frames, %d corrupted on the wire: %d received, %d errors counted by the 82574L", frames, corrupted, got, st.RxErrors)
		}
	})
}

// RSS against Microsoft's verification vectors: with the default key,
// 66.9.149.187:2794 -> 161.142.100.80:1766 hashes to 0x51ccc178 over the
// addresses and ports (TCP and UDP) and to 0x323e8fc2 over the addresses
// alone (other IPv4), and the frame lands on the queue the redirection
// table names for the hash's low 7 bits (the driver fills entry e with
// queue e mod 16).
func TestIXGBERSSVectors(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Queues = 16
		o.RxRing, o.TxRing = 64, 64
		_, n := ixgbePairOn(t, m, o)
		a, b := n[0], n[1]
		for _, c := range []struct {
			proto byte
			hash  uint32
		}{{6, 0x51ccc178}, {17, 0x51ccc178}, {1, 0x323e8fc2}} {
			buf, err := a.Pool(0).Get()
			if err != nil {
				t.Fatal(err)
			}
			fr := buf.SetLen(80)
			clear(fr)
			dst, src := b.MAC(), a.MAC()
			copy(fr[0:], dst[:])
			copy(fr[6:], src[:])
			fr[12], fr[13] = 0x08, 0x00
			ip := fr[14:]
			ip[0], ip[3], ip[8], ip[9] = 0x45, 66, 64, c.proto
			copy(ip[12:], []byte{66, 9, 149, 187, 161, 142, 100, 80})
			ip[20], ip[21], ip[22], ip[23] = 2794>>8, 2794&0xFF, 1766>>8, 1766&0xFF
			if c.proto == 6 {
				ip[32] = 5 << 4
			}
			if k, err := a.TxBatch(0, []*nicdrv.Buffer{buf}); k != 1 || err != nil {
				t.Fatal(k, err)
			}
			want := int(c.hash&127) % 16
			rx := make([]*nicdrv.Buffer, 1)
			got := -1
			for deadline := time.Now().Add(5 * time.Second); got < 0 && time.Now().Before(deadline); {
				for q := 0; q < 16 && got < 0; q++ {
					if k, _ := b.RxBatch(q, rx); k == 1 {
						got = q
						if rx[0].Flags&nicdrv.FlagHash == 0 || rx[0].Hash != c.hash {
							t.Errorf("protocol %d: hash %#x (flags %#x), want %#x", c.proto, rx[0].Hash, rx[0].Flags, c.hash)
						}
						_ = b.Pool(0).Free(rx[0])
					}
				}
			}
			if got != want {
				t.Errorf("protocol %d: frame on queue %d, want %d", c.proto, got, want)
			}
		}
	})
}

// A queue that always uses the header buffer (SRRCTL.DESCTYPE 101, what
// ixgbe.Options.Placement sets) takes each frame in one descriptor: a
// frame longer than BSIZEHEADER + BSIZEPACKET is a violation and is
// dropped, never spread over a second descriptor (a second placement), and
// a frame that fits still arrives whole.
func TestIXGBEAlwaysHeaderFrameFitsBSizePacket(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Placement, o.MaxFrame, o.BufferSize = true, 9018, 16384
		p, n := ixgbePairOn(t, m, o)
		// Make the receiver's queue 0 take 2 KiB packet buffers, as a
		// driver that forgot BSIZEPACKET for its jumbo frames would.
		regs, _ := p.Functions()[1].BAR(0)
		regs.Write32(hw.RXDCTL(0), regs.Read32(hw.RXDCTL(0))&^hw.RxdctlEnable)
		regs.Write32(hw.SRRCTL(0), regs.Read32(hw.SRRCTL(0))&^hw.SrrctlBSizePktMask|2)
		regs.Write32(hw.RXDCTL(0), regs.Read32(hw.RXDCTL(0))|hw.RxdctlEnable)
		before := p.Stats(1).Violations
		frames := [][]byte{nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 0, 9014), nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 1, 2000)}
		nictest.SendFrames(t, n[0], frames)
		waitIXGBESent(t, p, 0, 2)
		s := p.Stats(1)
		if s.Violations != before+1 || !strings.Contains(s.LastViolation, "BSIZEPACKET") {
			t.Fatalf("a 9014-byte frame on 2 KiB packet buffers: %d new violations, the last %q; want one naming BSIZEPACKET", s.Violations-before, s.LastViolation)
		}
		got := nictest.RecvFrames(t, n[1], 1)
		if got[0].FrameLen() != 2000 {
			t.Errorf("the frame that fits: %d bytes received, want 2000", got[0].FrameLen())
		}
		_ = got[0].Pool().Free(got[0])
	})
}

// TestIXGBEJumboEnOff: the driver sets HLREG0.JUMBOEN with MAXFRS.MFS =
// MaxFrame + 4 (the FCS), as Linux's ixgbe does; with JUMBOEN cleared the
// model passes the standard frame only, 1514 bytes without FCS untagged
// and 1518 tagged, and drops a longer one, counting it in ROC.
func TestIXGBEJumboEnOff(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
		regs, _ := p.Functions()[1].BAR(0)
		if hl, mfs := regs.Read32(hw.HLREG0), regs.Read32(hw.MAXFRS)>>hw.MaxfrsShift; hl&hw.Hlreg0JumboEn == 0 || mfs != hw.MaxFrame+4 {
			t.Fatalf("HLREG0 %#x, MAXFRS.MFS %d: want JUMBOEN and %d", hl, mfs, hw.MaxFrame+4)
		}
		regs.Write32(hw.HLREG0, regs.Read32(hw.HLREG0)&^hw.Hlreg0JumboEn)
		tag := func(fr []byte) []byte {
			return append(append(append([]byte(nil), fr[:12]...), 0x81, 0x00, 0x00, 0x05), fr[12:]...)
		}
		frames := [][]byte{
			nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 0, hw.StdFrame),
			nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 1, hw.StdFrame+1),
			nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 2, hw.MaxFrame),
			tag(nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 3, hw.StdFrame)),
			tag(nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 4, hw.StdFrame+1)),
		}
		regs.Read32(hw.ROC)
		nictest.SendFrames(t, n[0], frames)
		waitIXGBESent(t, p, 0, uint64(len(frames)))
		got := nictest.RecvFrames(t, n[1], 2)
		for i, want := range []int{hw.StdFrame, hw.StdFrame + 4} {
			if got[i].FrameLen() != want {
				t.Errorf("frame %d received: %d bytes, want %d", i, got[i].FrameLen(), want)
			}
			_ = got[i].Pool().Free(got[i])
		}
		if v := regs.Read32(hw.ROC); v != 3 {
			t.Errorf("ROC %d, want 3 (the frames past 1514 untagged, 1518 tagged)", v)
		}
		if k := received(t, n[1]); k != 0 {
			t.Errorf("%d more frames received, want none", k)
		}
	})
}

// TestIXGBEStripsVET: a queue with RXDCTL.VME strips a tag of the
// EtherType VLNCTRL.VET holds, whatever it is (0x88A8 here), and leaves
// a frame tagged 0x8100 whole.
func TestIXGBEStripsVET(t *testing.T) {
	ixgbeDMAModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p, n := ixgbePairOn(t, m, ixgbe.DefaultOptions())
		regs, _ := p.Functions()[1].BAR(0)
		regs.Write32(hw.VLNCTRL, regs.Read32(hw.VLNCTRL)&^hw.VlnctrlVETMask|0x88A8)
		regs.Write32(hw.RXDCTL(0), regs.Read32(hw.RXDCTL(0))|hw.RxdctlVME)
		plain := nictest.PlaceFrame(n[1].MAC(), n[0].MAC(), 0, 200)
		tag := func(hi, lo byte) []byte {
			return append(append(append([]byte(nil), plain[:12]...), hi, lo, 0x00, 0x05), plain[12:]...)
		}
		nictest.SendFrames(t, n[0], [][]byte{tag(0x88, 0xA8), tag(0x81, 0x00)})
		waitIXGBESent(t, p, 0, 2)
		got := nictest.RecvFrames(t, n[1], 2)
		for i, want := range [][]byte{plain, tag(0x81, 0x00)} {
			if b := got[i].AppendFrame(nil); !bytes.Equal(b, want) {
				t.Errorf("frame %d: %d bytes, want %d: %x", i, len(b), len(want), b[:16])
			}
			_ = got[i].Pool().Free(got[i])
		}
	})
}
