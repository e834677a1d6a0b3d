package nictest_test

import (
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// mixedRig cables an emulated 82599 (NIC 0, the ixgbe driver) to an
// emulated 82574L (NIC 1, the e1000e driver): the wire between models is
// the same whatever the models, and so is the suite whatever the drivers.
func mixedRig(t *testing.T, c nictest.Config) *nictest.Rig {
	px, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	pe, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, live := range []int{px.IOMMU().Live(), pe.IOMMU().Live()} {
			if live != 0 {
				t.Errorf("%d DMA mappings left after the NICs closed", live)
			}
		}
		px.Close()
		pe.Close()
	})
	if err := emulated.Cable(px.Port(0), pe.Port(0)); err != nil {
		t.Fatal(err)
	}
	xo := ixgbe.DefaultOptions()
	xo.Queues = c.Queues
	xo.Interrupts = c.Interrupts
	xo.HeaderSplit = c.HeaderSplit
	eo := e1000e.DefaultOptions()
	eo.Queues = min(c.Queues, 2)
	eo.Interrupts = c.Interrupts
	eo.HeaderSplit = c.HeaderSplit
	open := func(i int) (nicdrv.NIC, error) {
		if i == 0 {
			return ixgbe.Open(px.Functions()[0], xo)
		}
		return e1000e.Open(pe.Functions()[0], eo)
	}
	r := &nictest.Rig{
		SetLink: func(up bool) error { px.SetLink(0, up); return nil },
		Faults: func() uint64 {
			a, _ := px.IOMMU().Faults()
			b, _ := pe.IOMMU().Faults()
			return a + b
		},
		Check: func() error {
			if s := px.Stats(0); s.Violations != 0 {
				return fmt.Errorf("model 82599: %d violations, the last: %s", s.Violations, s.LastViolation)
			}
			if s := pe.Stats(0); s.Violations != 0 {
				return fmt.Errorf("model 82574L: %d violations, the last: %s", s.Violations, s.LastViolation)
			}
			for _, u := range []*emulated.IOMMU{px.IOMMU(), pe.IOMMU()} {
				if n, last := u.Faults(); n != 0 {
					return fmt.Errorf("%d DMA faults, the last at IOVA %#x", n, last.IOVA)
				}
			}
			return nil
		},
	}
	if err := r.Open(open); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConformance82599ToE1000E runs the suite over an 82599 cabled to an
// 82574L, each with its own driver.
func TestConformance82599ToE1000E(t *testing.T) {
	nictest.Run(t, mixedRig)
}
