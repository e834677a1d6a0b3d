package ixgbe_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// newPlatform makes an emulated 82599 platform whose violations, DMA
// faults and leaked mappings fail the test at its end.
func newPlatform(t testing.TB, o emulated.IXGBEOptions) *emulated.IXGBE {
	t.Helper()
	p, err := emulated.NewIXGBE(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := checkIXGBE(p); err != nil {
			t.Error(err)
		}
		if live := p.IOMMU().Live(); live != 0 {
			t.Errorf("%d DMA mappings left after the NICs closed", live)
		}
		p.Close()
	})
	return p
}

func checkIXGBE(p *emulated.IXGBE) error {
	for i := range p.Functions() {
		if s := p.Stats(i); s.Violations != 0 {
			return fmt.Errorf("model 82599 %d: %d programming violations, the last: %s", i, s.Violations, s.LastViolation)
		}
	}
	if n, last := p.IOMMU().Faults(); n != 0 {
		return fmt.Errorf("%d DMA faults, the last at IOVA %#x", n, last.IOVA)
	}
	return nil
}

func options(c nictest.Config) ixgbe.Options {
	o := ixgbe.DefaultOptions()
	o.Queues = c.Queues
	o.Interrupts = c.Interrupts
	o.HeaderSplit = c.HeaderSplit
	return o
}

// rig builds a nictest rig over two opened devices and their reopeners.
func rig(open func(i int) (nicdrv.NIC, error), setLink func(bool), faults func() uint64, check func() error) (*nictest.Rig, error) {
	r := &nictest.Rig{
		SetLink: func(up bool) error { setLink(up); return nil },
		Faults:  faults,
		Check:   check,
	}
	if err := r.Open(open); err != nil {
		return nil, err
	}
	return r, nil
}

// dmaModes runs test on the model in both of its DMA modes: "sync", where
// the goroutine that writes TDT does the transmit DMA before the write
// returns, and "async", where the NIC's DMA engine does it after
// (emulated.IXGBEOptions.AsyncDMA). m is DefaultIXGBEOptions in that mode.
func dmaModes(t *testing.T, test func(t *testing.T, m emulated.IXGBEOptions)) {
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

// waitSent fails the test unless port i of p has put count frames on the
// wire and every port has received what came to it within 10 s
// (emulated.IXGBE.WaitSent).
func waitSent(t testing.TB, p *emulated.IXGBE, i int, count uint64) {
	t.Helper()
	if err := p.WaitSent(i, count, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// pairRig opens the driver on two cabled emulated 82599s made with m.
func pairRig(m emulated.IXGBEOptions) func(t *testing.T, c nictest.Config) *nictest.Rig {
	return func(t *testing.T, c nictest.Config) *nictest.Rig { return pairRigOn(t, m, c) }
}

func pairRigOn(t *testing.T, m emulated.IXGBEOptions, c nictest.Config) *nictest.Rig {
	p := newPlatform(t, m)
	r, err := rig(func(i int) (nicdrv.NIC, error) { return ixgbe.Open(p.Functions()[i], options(c)) },
		func(up bool) { p.SetLink(0, up) },
		func() uint64 { n, _ := p.IOMMU().Faults(); return n },
		func() error { return checkIXGBE(p) })
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConformanceModelPair(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) { nictest.Run(t, pairRig(m)) })
}
