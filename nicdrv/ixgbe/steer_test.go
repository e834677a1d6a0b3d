package ixgbe_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/internal/cpuclock"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
)

// openPair opens the driver with o on both NICs of a cabled model pair
// whose DMA runs on the writer of TDT.
func openPair(t testing.TB, o ixgbe.Options) (*emulated.IXGBE, [2]*ixgbe.NIC) {
	t.Helper()
	return openPairOn(t, emulated.DefaultIXGBEOptions(), o)
}

// openPairOn opens the driver with o on both NICs of a cabled model pair
// made with m.
func openPairOn(t testing.TB, m emulated.IXGBEOptions, o ixgbe.Options) (*emulated.IXGBE, [2]*ixgbe.NIC) {
	t.Helper()
	p := newPlatform(t, m)
	n := openOn(t, p, o)
	for i := range n {
		if _, err := n[i].WaitLink(true, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return p, n
}

// openOn opens the driver with o on both NICs of the model pair p; the
// test's cleanup closes them.
func openOn(t testing.TB, p *emulated.IXGBE, o ixgbe.Options) [2]*ixgbe.NIC {
	t.Helper()
	var n [2]*ixgbe.NIC
	for i := range n {
		var err error
		if n[i], err = ixgbe.Open(p.Functions()[i], o); err != nil {
			t.Fatal(err)
		}
		nic := n[i]
		t.Cleanup(func() { nic.Close() })
	}
	return n
}

// udpFrame writes an IPv4/UDP frame from src to dst with the given
// destination port into b and returns it; seq goes in the payload.
func udpFrame(b []byte, dst, src nicdrv.MAC, sport, dport uint16, seq uint64) []byte {
	b = b[:100]
	clear(b)
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)-14))
	copy(ip[12:20], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], dport)
	binary.BigEndian.PutUint16(ip[24:], uint16(len(b)-34))
	binary.BigEndian.PutUint64(ip[28:], seq)
	return b
}

// send transmits one frame built by fill on queue 0 of from.
func send(t *testing.T, from *ixgbe.NIC, fill func(b []byte) []byte) {
	t.Helper()
	b, err := from.Pool(0).Get()
	if err != nil {
		t.Fatal(err)
	}
	fr := fill(b.SetLen(2048))
	b.SetLen(len(fr))
	for deadline := time.Now().Add(10 * time.Second); ; {
		k, err := from.TxBatch(0, []*nicdrv.Buffer{b})
		if err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("TX ring stayed full")
		}
	}
}

// arrival waits for one frame on any queue of n and says which queue and
// what frame.
func arrival(t *testing.T, n *ixgbe.NIC) (int, []byte) {
	t.Helper()
	q, fr, _ := arrivalRule(t, n)
	return q, fr
}

// arrivalRule is arrival that also says which rule the frame matched.
func arrivalRule(t *testing.T, n *ixgbe.NIC) (int, []byte, nicdrv.RuleID) {
	t.Helper()
	rx := make([]*nicdrv.Buffer, 1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		for q := 0; q < n.Info().Queues; q++ {
			k, err := n.RxBatch(q, rx)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				fr, rule := rx[0].AppendFrame(nil), rx[0].Rule
				if rx[0].Queue != q {
					t.Errorf("frame from queue %d says queue %d", q, rx[0].Queue)
				}
				_ = n.Pool(0).Free(rx[0])
				return q, fr, rule
			}
		}
	}
	t.Fatal("no frame arrived")
	return 0, nil, 0
}

// Every rule kind lands its flow on the queue it names, not queue 0; the
// NIC's precedence holds (5-tuple before Flow Director before RSS); the
// 5-tuple table fills and Flow Director takes over; a full table is refused
// with an error that says so.
func TestSteering(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Queues = 8
		o.RxRing, o.TxRing = 64, 64
		_, n := openPairOn(t, m, o)
		a, b := n[0], n[1]
		add := func(r nicdrv.Rule) nicdrv.RuleID {
			t.Helper()
			id, err := b.AddRule(r)
			if err != nil {
				t.Fatalf("%v: %v", r, err)
			}
			return id
		}
		etqf := add(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: nictest.EtherType, Queue: 5})
		five := add(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 7000, Queue: 3}) // 5-tuple 0
		var last nicdrv.RuleID
		for i := 1; i < hw.FiveTupleEntries; i++ {
			last = add(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: uint16(20000 + i), Queue: 1})
		}
		// The 5-tuple table is full: these go to Flow Director.
		fdir := add(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 7001, Queue: 6})
		add(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 7000, Queue: 7}) // shadowed by the 5-tuple filter

		for _, c := range []struct {
			what  string
			fill  func([]byte) []byte
			queue int
			rule  nicdrv.RuleID
		}{
			{"EtherType filter", func(fr []byte) []byte { return nictest.Frame(fr, b.MAC(), a.MAC(), 1, 80) }, 5, etqf},
			{"5-tuple filter", func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 9, 7000, 2) }, 3, five},
			{"5-tuple filter 127", func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 9, 20127, 3) }, 1, last},
			{"Flow Director perfect filter", func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 9, 7001, 4) }, 6, fdir},
		} {
			send(t, a, c.fill)
			if q, _, rule := arrivalRule(t, b); q != c.queue || rule != c.rule {
				t.Errorf("%s: frame on queue %d by rule %#x, want queue %d by rule %#x", c.what, q, rule, c.queue, c.rule)
			}
		}
		// No rule: RSS spreads flows over the queues by their hash.
		seen := map[int]bool{}
		for port := uint16(0); port < 64; port++ {
			send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 1000+port, 9999, 5) })
			q, _, rule := arrivalRule(t, b)
			seen[q] = true
			if rule != 0 {
				t.Errorf("a frame no rule matches says rule %#x", rule)
			}
		}
		if len(seen) < 4 {
			t.Errorf("64 UDP flows without a rule landed on queues %v only: RSS should spread them", seen)
		}
		// The 5-tuple filter removed, its port falls through to the Flow
		// Director filter it shadowed.
		if err := b.RemoveRule(five); err != nil {
			t.Fatal(err)
		}
		send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 9, 7000, 2) })
		if q, _, _ := arrivalRule(t, b); q != 7 {
			t.Errorf("port 7000 after its 5-tuple filter was removed: queue %d, want 7 (its Flow Director filter)", q)
		}
		add(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 7002, Queue: 3}) // 5-tuple 0 again
		// Fill Flow Director; the next rule is refused, naming the tables.
		for i := 2; i < hw.FdirPerfect64K; i++ {
			add(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: uint16(30000 + i), Queue: 2})
		}
		_, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 5, Queue: 2})
		if !errors.Is(err, nicdrv.ErrTableFull) || !strings.Contains(err.Error(), "Flow Director") {
			t.Errorf("a rule beyond every table: %v, want ErrTableFull naming the full tables", err)
		}
		send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 9, 30000+hw.FdirPerfect64K-1, 6) })
		if q, _ := arrival(t, b); q != 2 {
			t.Errorf("the last Flow Director filter: frame on queue %d, want 2", q)
		}
		// Flow Director holds port rules: a flex rule cannot share it.
		if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleFlex, Offset: 42, Flex: 1, Queue: 1}); !errors.Is(err, nicdrv.ErrNotSupported) {
			t.Errorf("a flex rule beside Flow Director port rules: %v, want ErrNotSupported", err)
		}
		for i := 1; i < hw.ETQFEntries; i++ {
			add(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: uint16(0x8800 + i), Queue: 0})
		}
		if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: 0x9000, Queue: 0}); !errors.Is(err, nicdrv.ErrTableFull) || !strings.Contains(err.Error(), "ETQF") {
			t.Errorf("a ninth EtherType rule: %v, want ErrTableFull naming ETQF", err)
		}
		for _, r := range []nicdrv.Rule{
			{Kind: nicdrv.RuleEtherType, EtherType: 0x0800, Queue: 1},
			{Kind: nicdrv.RuleByte, Offset: 16, Value: 3, Queue: 1},
			{Kind: nicdrv.RuleDestMAC, MAC: nicdrv.MAC{2, 0, 0, 0, 0, 9}, Queue: 1},
		} {
			if _, err := b.AddRule(r); !errors.Is(err, nicdrv.ErrNotSupported) {
				t.Errorf("%v: %v, want ErrNotSupported", r, err)
			}
		}
		if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 1, Queue: 8}); !errors.Is(err, nicdrv.ErrBadQueue) {
			t.Errorf("a rule to queue 8 of 8: %v, want ErrBadQueue", err)
		}
	})
}

// Flex rules: the 16-bit word at one even offset of IP frames steers to
// the queue a rule names; a 5-tuple filter still takes precedence (it is
// applied before Flow Director), an EtherType filter precedes both, a
// non-IP frame with the word never matches, one offset at a time.
func TestSteeringFlex(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Queues = 4
		o.RxRing, o.TxRing = 64, 64
		_, n := openPairOn(t, m, o)
		a, b := n[0], n[1]
		const off = 42 // the first word of a UDP payload
		flexFrame := func(dport, word uint16) func([]byte) []byte {
			return func(fr []byte) []byte {
				fr = udpFrame(fr, b.MAC(), a.MAC(), 9, dport, 0)
				binary.BigEndian.PutUint16(fr[off:], word)
				return fr
			}
		}
		flex, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleFlex, Offset: off, Flex: 0xBEEF, Queue: 2})
		if err != nil {
			t.Fatal(err)
		}
		send(t, a, flexFrame(5000, 0xBEEF))
		if q, _, rule := arrivalRule(t, b); q != 2 || rule != flex {
			t.Errorf("flex match: queue %d rule %#x, want queue 2 rule %#x", q, rule, flex)
		}
		if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleFlex, Offset: 44, Flex: 1, Queue: 1}); !errors.Is(err, nicdrv.ErrNotSupported) {
			t.Errorf("a flex rule at a second offset: %v, want ErrNotSupported", err)
		}
		// Precedence: a 5-tuple filter on the same frame's port wins.
		five, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 5000, Queue: 3})
		if err != nil {
			t.Fatal(err)
		}
		send(t, a, flexFrame(5000, 0xBEEF))
		if q, _, rule := arrivalRule(t, b); q != 3 || rule != five {
			t.Errorf("flex and 5-tuple both match: queue %d rule %#x, want the 5-tuple filter's queue 3 rule %#x", q, rule, five)
		}
		// A non-IP frame with the same word at the offset: no match.
		send(t, a, func(fr []byte) []byte {
			fr = nictest.Frame(fr, b.MAC(), a.MAC(), 0, 80)
			binary.BigEndian.PutUint16(fr[off:], 0xBEEF)
			return fr
		})
		if q, _, rule := arrivalRule(t, b); q != 0 || rule != 0 {
			t.Errorf("a non-IP frame with the flex word: queue %d rule %#x, want queue 0 and no rule", q, rule)
		}
		// An EtherType filter precedes everything (and takes the non-IP frame).
		et, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: nictest.EtherType, Queue: 1})
		if err != nil {
			t.Fatal(err)
		}
		send(t, a, func(fr []byte) []byte { return nictest.Frame(fr, b.MAC(), a.MAC(), 0, 80) })
		if q, _, rule := arrivalRule(t, b); q != 1 || rule != et {
			t.Errorf("EtherType filter: queue %d rule %#x, want queue 1 rule %#x", q, rule, et)
		}
		// Removed, the flex rule stops matching; with Flow Director empty, a
		// flex rule at another offset goes in.
		if err := b.RemoveRule(flex); err != nil {
			t.Fatal(err)
		}
		send(t, a, flexFrame(5001, 0xBEEF))
		if _, _, rule := arrivalRule(t, b); rule == flex {
			t.Error("a removed flex rule still matches")
		}
		flex2, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleFlex, Offset: 44, Flex: 0x1234, Queue: 1})
		if err != nil {
			t.Fatalf("a flex rule at a new offset once Flow Director is empty: %v", err)
		}
		send(t, a, func(fr []byte) []byte {
			fr = udpFrame(fr, b.MAC(), a.MAC(), 9, 5002, 0)
			binary.BigEndian.PutUint16(fr[44:], 0x1234)
			return fr
		})
		if q, _, rule := arrivalRule(t, b); q != 1 || rule != flex2 {
			t.Errorf("flex rule at offset 44: queue %d rule %#x, want queue 1 rule %#x", q, rule, flex2)
		}
	})
}

// A NIC whose GIO master never drains makes Close time out; Close still
// stops every queue and turns bus mastering off before it unmaps anything.
func TestCloseAfterGIOMasterTimeout(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Queues = 4
		o.RegisterTimeout = 20 * time.Millisecond
		p, n := openPairOn(t, m, o)
		send(t, n[0], func(fr []byte) []byte { return nictest.Frame(fr, n[1].MAC(), n[0].MAC(), 1, 100) })
		arrival(t, n[1])
		p.HoldGIOMaster(1, true)
		defer p.HoldGIOMaster(1, false)
		err := n[1].Close()
		if !errors.Is(err, nicdrv.ErrTimeout) || !strings.Contains(err.Error(), "STATUS.GIO") {
			t.Fatalf("Close with GIO master held: %v, want a timeout naming STATUS.GIO", err)
		}
		if cmd, _ := pci.ReadConfig16(p.Functions()[1], pci.ConfigCommand); cmd&pci.CommandBusMaster != 0 {
			t.Error("bus mastering left on after Close timed out")
		}
		regs, _ := p.Functions()[1].BAR(0)
		for q := 0; q < 4; q++ {
			if regs.Read32(hw.RXDCTL(q))&hw.RxdctlEnable != 0 || regs.Read32(hw.TXDCTL(q))&hw.TxdctlEnable != 0 {
				t.Errorf("queue %d still enabled after Close", q)
			}
		}
		before, rx := p.Accesses(1), p.Stats(1).RxFrames
		for i := range 16 {
			send(t, n[0], func(fr []byte) []byte { return nictest.Frame(fr, n[1].MAC(), n[0].MAC(), uint64(i), 200) })
		}
		after := p.Accesses(1)
		if p.Stats(1).RxFrames != rx || after.RxDescFetches != before.RxDescFetches || after.RxDescWriteBacks != before.RxDescWriteBacks {
			t.Error("the closed NIC did DMA")
		}
	})
}

// A jumbo frame leaves as a header in the buffer and its payload attached,
// and arrives as a chain of 2 KiB buffers, byte-exact.
func TestJumbo(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.MaxFrame = 9018
		p, n := openPairOn(t, m, o)
		a, b := n[0], n[1]
		mem := make([]byte, 3*4096)
		mp, err := a.Pool(0).DMA().Map(mem)
		if err != nil {
			t.Fatal(err)
		}
		defer p.IOMMU().Unmap(mp)
		for _, size := range []int{2049, 4110, 9018} {
			fr := nictest.Frame(make([]byte, size), b.MAC(), a.MAC(), uint64(size), size)
			copy(mem, fr[14:])
			iova, _, _ := mp.IOVA(0)
			buf, _ := a.Pool(0).Get()
			copy(buf.SetLen(14), fr)
			var done nictest.Completions
			buf.Attach(mem[:size-14], iova, &done)
			if k, err := a.TxBatch(0, []*nicdrv.Buffer{buf}); k != 1 || err != nil {
				t.Fatalf("TxBatch of a %d-byte frame: %d, %v", size, k, err)
			}
			_, got := arrival(t, b)
			if string(got) != string(fr) {
				t.Errorf("%d-byte frame arrived as %d bytes, not byte-exact", size, len(got))
			}
		}
		if _, err := ixgbe.Open(p.Functions()[0], ixgbe.Options{MaxFrame: 16000}); err == nil || !strings.Contains(err.Error(), "MaxFrame") {
			t.Errorf("MaxFrame 16000: %v, want a refusal naming MaxFrame", err)
		}
	})
}

// The fast path reads no register and writes one TDT per batch; RDT once
// per 32 refilled descriptors. With interrupts (unmoderated) the same
// holds while the receiver is busy: a WaitRx that finds frames waiting
// returns without arming its vector, so it writes no EIMS.
func TestFastPathRegisterAccesses(t *testing.T) {
	irq := ixgbe.DefaultOptions()
	irq.Interrupts, irq.NoModeration = true, true
	for _, c := range []struct {
		name string
		o    ixgbe.Options
	}{{"polling", ixgbe.DefaultOptions()}, {"interrupts", irq}} {
		t.Run(c.name, func(t *testing.T) {
			p, n := openPair(t, c.o)
			a, b := n[0], n[1]
			stream(t, a, b, 512, nil) // warm up: the rings wrap once
			p.ResetAccesses(0)
			p.ResetAccesses(1)
			const frames, batch = 3200, 32
			stream(t, a, b, frames, nil)
			for i := range 2 {
				acc := p.Accesses(i)
				if acc.TotalReads() != 0 {
					t.Errorf("NIC %d: %d register reads on the fast path: %v", i, acc.TotalReads(), acc.Reads)
				}
			}
			if w := p.Accesses(0).Writes; w["TDT0"] != frames/batch || len(w) != 1 {
				t.Errorf("sender wrote %v, want TDT0 once per batch of %d (%d)", w, batch, frames/batch)
			}
			if w := p.Accesses(1).Writes; w["RDT0"] > frames/batch+1 || len(w) != 1 {
				t.Errorf("receiver wrote %v, want RDT0 once per 32 frames at most", w)
			}
		})
	}
}

// stream sends count frames of 60 bytes from a to b in batches of 32, each
// received before the next is sent (after a WaitRx, when b has
// interrupts); every register access it makes is the fast path's.
func stream(tb testing.TB, a, b *ixgbe.NIC, count int, tick func()) {
	const batch = 32
	tx := make([]*nicdrv.Buffer, batch)
	rx := make([]*nicdrv.Buffer, batch)
	hdr := nictest.Frame(make([]byte, 60), b.MAC(), a.MAC(), 0, 60)[:14]
	for sent := 0; sent < count; {
		k := min(batch, count-sent)
		if _, err := a.Pool(0).Alloc(tx[:k]); err != nil {
			tb.Fatal(err)
		}
		for _, bf := range tx[:k] {
			copy(bf.SetLen(60), hdr)
		}
		for off := 0; off < k; {
			m, err := a.TxBatch(0, tx[off:k])
			if err != nil {
				tb.Fatal(err)
			}
			off += m
		}
		sent += k
		for got := 0; got < k; {
			if b.Info().Interrupts {
				// The frames wait already: WaitRx returns at its first
				// look, as a busy receiver's does.
				if _, err := b.WaitRx(context.Background(), time.Time{}, 0); err != nil {
					tb.Fatal(err)
				}
			}
			m, err := b.RxBatch(0, rx)
			if err != nil {
				tb.Fatal(err)
			}
			got += m
			_ = b.Pool(0).Free(rx[:m]...)
		}
		if tick != nil {
			tick()
		}
	}
}

// BenchmarkModelPair streams 60-byte frames between two emulated 82599s in
// batches of 32 and reports the time per frame, and the CPU time per frame
// split between the model (its register accesses, which include its DMA
// and delivery) and the driver (the rest: TxBatch, RxBatch, the pool and
// the loop). The split is in the benchmark thread's CPU time, so on a
// loaded machine it leaves out the time the thread waited for a CPU, which
// the wall-clock ns/frame includes. The model reads the thread's CPU clock
// around each register access, a system call: each access puts about one
// clock read's cost on either side of the split, which is taken back out
// (clock-ns is that cost, accesses/frame how often it is paid).
func BenchmarkModelPair(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	o := emulated.DefaultIXGBEOptions()
	o.ThreadCPUTime = true
	p := newPlatform(b, o)
	n := openOn(b, p, ixgbe.DefaultOptions())
	stream(b, n[0], n[1], 1024, nil)
	const calls = 1000
	k0 := cpuclock.Thread()
	for range calls {
		cpuclock.Thread()
	}
	clock := float64(cpuclock.Thread()-k0) / calls
	p.ResetAccesses(0)
	p.ResetAccesses(1)
	m0 := p.Stats(0).ModelTime + p.Stats(1).ModelTime
	c0 := cpuclock.Thread()
	b.ReportAllocs()
	b.ResetTimer()
	stream(b, n[0], n[1], b.N, nil)
	b.StopTimer()
	f := float64(b.N)
	cpu := float64(cpuclock.Thread()-c0) / f
	model := float64((p.Stats(0).ModelTime + p.Stats(1).ModelTime - m0).Nanoseconds()) / f
	a0, a1 := p.Accesses(0), p.Accesses(1)
	acc := float64(a0.TotalReads()+a0.TotalWrites()+a1.TotalReads()+a1.TotalWrites()) / f
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/f, "ns/frame")
	b.ReportMetric(cpu, "cpu-ns/frame")
	b.ReportMetric(clock, "clock-ns")
	b.ReportMetric(acc, "accesses/frame")
	b.ReportMetric(model-clock*acc, "model-cpu-ns/frame")
	b.ReportMetric(cpu-model-clock*acc, "driver-cpu-ns/frame")
}

// Open refuses what is not an 82599 and options out of range, naming the
// problem.
func TestOpenRefuses(t *testing.T) {
	pe, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close()
	if _, err := ixgbe.Open(pe.Functions()[0], ixgbe.DefaultOptions()); !errors.Is(err, nicdrv.ErrNotNIC) {
		t.Errorf("Open on an 82574L: %v, want ErrNotNIC", err)
	}
	p := newPlatform(t, emulated.IXGBEOptions{Ports: 1})
	for _, c := range []struct {
		o    ixgbe.Options
		want string
	}{
		{ixgbe.Options{Queues: 65}, "queues"},
		{ixgbe.Options{RxRing: 100}, "RX ring"},
		{ixgbe.Options{TxRing: 16}, "TX ring"},
		{ixgbe.Options{InterruptInterval: time.Second}, "interrupt interval"},
		{ixgbe.Options{NoModeration: true}, "NoModeration without Interrupts"},
	} {
		if _, err := ixgbe.Open(p.Functions()[0], c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open with %+v: %v, want an error naming %q", c.o, err, c.want)
		}
	}
}

// With DropWhenFull a queue out of descriptors drops its frames (counted)
// and the other queues go on receiving; without it, the NIC holds them.
func TestDropWhenFull(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Queues = 2
		o.RxRing, o.TxRing = 32, 256
		o.DropWhenFull = true
		p, n := openPairOn(t, m, o)
		a, b := n[0], n[1]
		if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: 0x88B6, Queue: 1}); err != nil {
			t.Fatal(err)
		}
		const flood = 100 // to queue 0, which holds 31
		for i := range flood {
			send(t, a, func(fr []byte) []byte { return nictest.Frame(fr, b.MAC(), a.MAC(), uint64(i), 80) })
		}
		send(t, a, func(fr []byte) []byte {
			fr = nictest.Frame(fr, b.MAC(), a.MAC(), 999, 80)
			fr[12], fr[13] = 0x88, 0xB6
			return fr
		})
		waitSent(t, p, 0, flood+1)
		st, err := b.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.RxNoDescriptor != flood-31 || p.Stats(1).Pending != 0 {
			t.Errorf("%d frames dropped for want of a descriptor (%d pending in the NIC), want %d", st.RxNoDescriptor, p.Stats(1).Pending, flood-31)
		}
		rx := make([]*nicdrv.Buffer, 64)
		got1 := 0
		for deadline := time.Now().Add(5 * time.Second); got1 == 0 && time.Now().Before(deadline); {
			k, _ := b.RxBatch(1, rx)
			got1 += k
			_ = b.Pool(0).Free(rx[:k]...)
		}
		if got1 != 1 {
			t.Errorf("queue 1 received %d frames behind the full queue 0, want 1", got1)
		}
	})
}

// With header split the headers of a split frame land in a small buffer
// of the queue's header pool, the payload in a packet buffer of its pool;
// freeing the chain through the queue's pool gives each back to its own.
func TestHeaderPool(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.HeaderSplit = true
		o.RxRing, o.TxRing = 64, 64
		_, n := openPairOn(t, m, o)
		a, b := n[0], n[1]
		send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 9, 7000, 1) })
		rx := make([]*nicdrv.Buffer, 1)
		for deadline := time.Now().Add(10 * time.Second); ; {
			k, err := b.RxBatch(0, rx)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no frame arrived")
			}
		}
		h := rx[0]
		if h.Next == nil || len(h.Data) != 14+20+8 {
			t.Fatalf("a UDP frame with header split: %d bytes of headers, payload %v", len(h.Data), h.Next != nil)
		}
		if h.Cap() != 256 || h.Pool() == b.Pool(0) || h.Next.Pool() != b.Pool(0) {
			t.Errorf("header buffer of %d bytes from the packet pool %v, payload from it %v: want a 256-byte header buffer of the header pool", h.Cap(), h.Pool() == b.Pool(0), h.Next.Pool() == b.Pool(0))
		}
		if err := b.Pool(0).Free(h); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("Close after the chain went back to two pools: %v", err)
		}
	})
}
