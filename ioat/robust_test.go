package ioat

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// The tests in this file hold the driver to what real drivers survive:
// runs of failed requests, parts without ARMED, channels that stop
// completing, functions with several channels, unreadable extended
// configuration space, a claimed channel, Jasper Forest's 40-bit reach and
// the v3.4 power-management registers.

// TestRecoversFromFailureRun: twelve copies from an unmapped source fail,
// each with its own error, and a good copy afterwards succeeds.
func TestRecoversFromFailureRun(t *testing.T) { forEachCommon(t, recoversFromFailureRun) }

func recoversFromFailureRun(t *testing.T, b backend) {
	devs, _ := b.open(t, 1)
	c := openQueue(t, devs[0], Options{})
	defer c.Close()
	dma := devs[0].DMA()
	buf := make([]byte, 8192)
	m, _ := dma.Map(buf)
	defer dma.Unmap(m)
	gone := make([]byte, 4096)
	gm, _ := dma.Map(gone)
	dma.Unmap(gm)
	for i := 0; i < 12; i++ {
		if err := c.EnqueueCopy(m, 0, gm, 0, 4096, uint64(i)); err != nil {
			t.Fatalf("bad copy %d: %v", i, err)
		}
		c.Submit()
		if r := drain(t, c, 1); !errors.Is(r[0].Err, ErrDMAFault) {
			t.Fatalf("bad copy %d: %v, want ErrDMAFault", i, r[0].Err)
		}
	}
	buf[0] = 42
	if err := c.EnqueueCopy(m, 4096, m, 0, 4096, 99); err != nil {
		t.Fatalf("good copy after 12 failures refused: %v", err)
	}
	c.Submit()
	if r := drain(t, c, 1); r[0].Err != nil || buf[4096] != 42 {
		t.Fatalf("good copy after 12 failures: %v", r[0].Err)
	}
}

// TestStartWithoutArmed: bring-up and recovery work on a part that never
// reports ARMED.
func TestStartWithoutArmed(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{HideArmed: true}).open(t, 1)
	c, err := Open(devs[0], Options{RingSize: 64})
	if err != nil {
		t.Fatalf("open on a part without ARMED: %v", err)
	}
	defer c.Close()
	src, dst := make([]byte, 4096), make([]byte, 4096)
	src[7] = 7
	sm, _ := devs[0].DMA().Map(src)
	dm, _ := devs[0].DMA().Map(dst)
	defer devs[0].DMA().Unmap(sm)
	defer devs[0].DMA().Unmap(dm)
	plat.cb.InjectError(0, 0, hw.ErrReadData)
	for i := 0; i < 2; i++ {
		if err := c.EnqueueCopy(dm, 0, sm, 0, 4096, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Submit()
	r := drain(t, c, 2)
	if r[0].Err == nil || r[1].Err != nil || dst[7] != 7 {
		t.Fatalf("results %+v", r)
	}
}

// TestWatchdog: a channel that stops completing, with or without error
// bits and without halting, fails the stuck request with a typed error
// within the watchdog time, and the channel recovers.
func TestWatchdog(t *testing.T) {
	for _, bits := range []uint32{0, hw.ErrChipsetData} {
		devs, plat := emulatedBackend(emulated.CBDMAOptions{}).open(t, 1)
		o := offloadAll()
		o.Channel.Watchdog = 20 * time.Millisecond
		e, err := NewEngine(devs, o)
		if err != nil {
			t.Fatal(err)
		}
		src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
		src[100] = 1
		plat.cb.InjectHang(0, 0, bits)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ck, err := e.ICopy(dst, src)
		if err != nil {
			t.Fatal(err)
		}
		err = e.Wait(ctx, ck)
		cancel()
		var ce *ChanError
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("chanerr %#x: Wait on a hung channel never returned", bits)
		case !errors.As(err, &ce):
			t.Fatalf("chanerr %#x: %v, want a *ChanError", bits, err)
		case bits == 0 && !errors.Is(err, ErrStalled):
			t.Fatalf("hang without error bits: %v, want ErrStalled", err)
		case bits != 0 && ce.ChanErr&bits == 0:
			t.Fatalf("error bits without HALTED: %v, want CHANERR %s", err, hw.ErrString(bits))
		}
		// The channel carries on. (A loaded machine can starve the model
		// for longer than this test's 20 ms watchdog, which then fires
		// again: that is a stall too, so retry a bounded number of times.)
		err = ErrStalled
		for i := 0; i < 20 && errors.Is(err, ErrStalled); i++ {
			err = e.Copy(dst, src)
		}
		if err != nil || dst[100] != 1 {
			t.Fatalf("copy after the watchdog fired: %v", err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMultiChannelFunction: a function with CHANCNT = 3 gives the engine
// three channels, each copying through its own register block.
func TestMultiChannelFunction(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{ChannelsPerFunction: 3}).open(t, 1)
	if n, err := ChannelCount(devs[0]); err != nil || n != 3 {
		t.Fatalf("ChannelCount %d, %v", n, err)
	}
	e, err := NewEngine(devs, offloadAll())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if n := len(e.Channels()); n != 3 {
		t.Fatalf("engine opened %d channels of a 3-channel function", n)
	}
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 3)
	}
	for i := 0; i < 6; i++ {
		if err := e.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("copy differs")
	}
	for ch := 0; ch < 3; ch++ {
		if plat.Stats(ch).Bytes == 0 {
			t.Errorf("channel %d copied nothing", ch)
		}
	}
	if _, err := Open(devs[0], Options{Index: 3}); err == nil {
		t.Fatal("channel 3 of a 3-channel function opened")
	}
}

// allOnesConfig reads all ones past the conventional header, as some
// access paths do for extended configuration space.
type allOnesConfig struct{ pci.Device }

func (d allOnesConfig) ReadConfig(off int, b []byte) error {
	if off+len(b) <= 256 {
		return d.Device.ReadConfig(off, b)
	}
	for i := range b {
		b[i] = 0xFF
	}
	return nil
}

func (d allOnesConfig) WriteConfig(off int, b []byte) error {
	if off+len(b) <= 256 {
		return d.Device.WriteConfig(off, b)
	}
	return nil
}

// TestUnreadableChanErrInt: below CB 3.3 the driver clears CHANERR_INT at
// config 0x180; where that cannot be read (an error, or all ones) it goes
// on, and recovery still works.
func TestUnreadableChanErrInt(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		devs, plat := emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver32, ConfigSize: 256}).open(t, 1)
		dev := devs[0]
		if wrap {
			dev = allOnesConfig{dev}
		}
		c, err := Open(dev, Options{RingSize: 64})
		if err != nil {
			t.Fatalf("all-ones %v: open with config 0x180 unreadable: %v", wrap, err)
		}
		buf := make([]byte, 8192)
		m, _ := dev.DMA().Map(buf)
		plat.cb.InjectError(0, 0, hw.ErrWriteData)
		for i := 0; i < 2; i++ {
			if err := c.EnqueueCopy(m, 4096, m, 0, 4096, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		c.Submit()
		if r := drain(t, c, 2); r[0].Err == nil || r[1].Err != nil {
			t.Fatalf("all-ones %v: %+v", wrap, r)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		dev.DMA().Unmap(m)
	}
}

// TestInUse: a channel someone already claimed is not taken over
// silently: Open fails with pci.ErrBusy saying who may own it, unless
// TakeOver is set, and then Info reports it.
func TestInUse(t *testing.T) { forEachCommon(t, inUse) }

func inUse(t *testing.T, b backend) {
	devs, _ := b.open(t, 1)
	if IsDSA(devs[0]) {
		t.Skip("a DSA has no IN_USE claim: TestDSATakeOver covers a device another driver enabled")
	}
	if err := pci.SetCommand(devs[0], pci.CommandMemory); err != nil {
		t.Fatal(err)
	}
	regs, _ := devs[0].BAR(0)
	regs.Read16(hw.ChannelBase(0) + hw.ChanCtrl) // another owner claims it
	_, err := Open(devs[0], Options{})
	if !errors.Is(err, pci.ErrBusy) || !strings.Contains(err.Error(), "IN_USE") || !strings.Contains(err.Error(), "TakeOver") {
		t.Fatalf("open of a claimed channel: %v, want pci.ErrBusy naming IN_USE and TakeOver", err)
	}
	c, err := Open(devs[0], Options{TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Info().WasInUse {
		t.Fatal("Info does not report the take-over")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c, err = Open(devs[0], Options{})
	if err != nil {
		t.Fatalf("reopen after Close released IN_USE: %v", err)
	}
	c.Close()
}

// TestAddr40: on Jasper Forest the driver keeps every DMA address below
// 2^40, refusing a request beyond it with ErrBadRequest before the
// hardware sees it.
func TestAddr40(t *testing.T) {
	devs, _ := emulatedBackend(emulated.CBDMAOptions{DeviceID: 0x3710, Version: hw.Ver32, IOVABase: 1<<40 - 64<<20}).open(t, 1)
	c, err := Open(devs[0], Options{RingSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	low := make([]byte, 4096)
	lm, _ := devs[0].DMA().Map(low)
	defer devs[0].DMA().Unmap(lm)
	filler := make([]byte, 64<<20)
	fm, _ := devs[0].DMA().Map(filler) // pushes the next mapping past 2^40
	defer devs[0].DMA().Unmap(fm)
	high := make([]byte, 4096)
	hm, _ := devs[0].DMA().Map(high)
	defer devs[0].DMA().Unmap(hm)
	if hm.Segments[0].IOVA < hw.Addr40Limit {
		t.Fatalf("test setup: high buffer at %#x", hm.Segments[0].IOVA)
	}
	err = c.EnqueueCopy(hm, 0, lm, 0, 4096, 1)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "40") {
		t.Fatalf("copy to %#x on Jasper Forest: %v, want ErrBadRequest naming the 40-bit limit", hm.Segments[0].IOVA, err)
	}
	if err := c.EnqueueCopy(lm, 0, lm, 2048, 2048, 2); err != nil {
		t.Fatal(err)
	}
	c.Submit()
	if r := drain(t, c, 1); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	// A ring beyond the limit is refused at Open.
	devs2, _ := emulatedBackend(emulated.CBDMAOptions{DeviceID: 0x3710, Version: hw.Ver32, IOVABase: 1 << 41}).open(t, 1)
	if _, err := Open(devs2[0], Options{RingSize: 64}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("open with the ring above 2^40: %v", err)
	}
}

// TestLTRAndDRSCTL: on v3.4 the driver programs the latency-tolerance
// values, selects active while open and idle at Close, and sizes DRSCTL
// for its ring, as Linux does.
func TestLTRAndDRSCTL(t *testing.T) {
	devs, _ := emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver34}).open(t, 1)
	c, err := Open(devs[0], Options{RingSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	regs, _ := devs[0].BAR(0)
	b := hw.ChannelBase(0)
	if a, i, s := regs.Read32(b+hw.ChanLTRActive), regs.Read32(b+hw.ChanLTRIdle), regs.Read8(b+hw.ChanLTRSwSel); a != hw.LTRActive || i != hw.LTRIdle || s != hw.LTRSelActive {
		t.Fatalf("LTR active %#x idle %#x select %d", a, i, s)
	}
	want := uint16(6 | hw.DRSEnable | hw.DRSAutoWrap) // 256 KiB ring = 4 KiB << 6, one IOVA chunk
	if got := regs.Read16(b + hw.ChanDRSCtl); got != want {
		t.Fatalf("DRSCTL %#x, want %#x", got, want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if s := regs.Read8(b + hw.ChanLTRSwSel); s != hw.LTRSelIdle {
		t.Fatalf("LTR select %d after Close, want idle", s)
	}
}

// TestStartTimeout: a channel whose start-up null descriptor never
// completes fails to open with ErrTimeout after StartTimeout, and a
// stall of the waiter itself (its process descheduled: a gap between two
// looks) uses up only waitSlack of a wait's timeout, so a loaded machine
// does not fail a healthy channel's start.
func TestStartTimeout(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{}).open(t, 1)
	plat.cb.InjectHang(0, 0, 0)
	o := offloadAll()
	o.Channel.StartTimeout = 20 * time.Millisecond
	if e, err := NewEngine(devs, o); !errors.Is(err, ErrTimeout) {
		if err == nil {
			e.Close()
		}
		t.Fatalf("open with a hung start-up descriptor: %v, want ErrTimeout", err)
	}

	w := startWait(time.Second)
	w.last = w.last.Add(-time.Hour) // the waiter did not run for an hour
	if w.expired() || w.left != time.Second-waitSlack {
		t.Fatalf("a stall of the waiter left %v of 1s, want 1s less %v", w.left, waitSlack)
	}
	w = startWait(10 * time.Millisecond)
	for i := 0; !w.expired(); i++ {
		if i > 1e8 {
			t.Fatal("a running wait never expired")
		}
	}
}
