package e1000e_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// modelRig opens the driver on two cabled emulated 82574Ls.
func modelRig(t *testing.T, c nictest.Config) *nictest.Rig {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after the suite closed the NICs: nothing may stay mapped.
		if live := p.IOMMU().Live(); live != 0 {
			t.Errorf("%d DMA mappings left after both NICs closed", live)
		}
		p.Close()
	})
	opts := e1000e.DefaultOptions()
	opts.Queues = c.Queues
	opts.Interrupts = c.Interrupts
	opts.HeaderSplit = c.HeaderSplit
	open := func(i int) (nicdrv.NIC, error) {
		n, err := e1000e.Open(p.Functions()[i], opts)
		if err != nil {
			return nil, err
		}
		return n, nil
	}
	r := &nictest.Rig{
		SetLink: func(up bool) error { p.SetLink(0, up); return nil },
		Faults:  func() uint64 { n, _ := p.IOMMU().Faults(); return n },
		Check: func() error {
			for i := range 2 {
				if s := p.Stats(i); s.Violations != 0 {
					return fmt.Errorf("model NIC %d: %d programming violations, the last: %s", i, s.Violations, s.LastViolation)
				}
			}
			if n, last := p.IOMMU().Faults(); n != 0 {
				return fmt.Errorf("%d DMA faults, the last at IOVA %#x", n, last.IOVA)
			}
			return nil
		},
	}
	if err := r.Open(open); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConformanceModel(t *testing.T) {
	if os.Getenv("GOMX_REQUIRE_QEMU") != "" {
		// Inside `make qemu-test` the suite runs on QEMU's e1000e pair
		// (TestConformanceVFIO); the model's run belongs to the host's
		// `make test`, where it is not slowed down by TCG.
		t.Skip("in the QEMU guest: the model suite runs on the host")
	}
	nictest.Run(t, modelRig)
}
