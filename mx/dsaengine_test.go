package mx

import (
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestPullEngineOverDSA: the same engine type over DSA work queues (the
// emulated DSA) copies pull replies as it does over CBDMA channels, and a
// copy the DSA fails is redone by the CPU, the message still byte-exact.
func TestPullEngineOverDSA(t *testing.T) {
	plat, err := emulated.NewDSA(emulated.DSAOptions{Engines: 2, Groups: 2})
	if err != nil {
		t.Fatal(err)
	}
	eo := ioat.DefaultEngineOptions()
	eo.CPUThreshold = -1
	eng, err := ioat.NewEngine(plat.Devices(), eo)
	if err != nil {
		plat.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		if n := plat.IOMMU().Live(); n != 0 {
			t.Errorf("%d DMA mappings left behind", n)
		}
		if s := plat.Stats(0); s.Violations != 0 {
			t.Errorf("%d violations, last: %s", s.Violations, s.LastViolation)
		}
		plat.Close()
	})
	if n := len(eng.Queues()); n != 2 {
		t.Fatalf("engine over %d work queues, want 2", n)
	}
	oa, ob := pullEngineOptions(&pullEngine{eng: eng})
	pr := newPair(t, transportFactories[0], oa, loopback.Faults{}, ob)
	pr.sendLarge(t, pattern(1<<20+7, 1), 3, 1)
	c := pr.b.Counters()
	if c.Get(RecvPullEngine) == 0 || c.Get(PullEngineFallbacks) != 0 {
		t.Fatalf("pull replies by the engine %d, fallbacks %d; want some and none", c.Get(RecvPullEngine), c.Get(PullEngineFallbacks))
	}
	plat.InjectStatus(0, 20, dsahw.StatusPageFault)
	pr.sendLarge(t, pattern(1<<20, 2), 1, 2)
	if pr.b.Counters().Get(PullEngineFallbacks) == 0 {
		t.Fatalf("no fallback counted after an injected DSA fault (engine copies %d)", pr.b.Counters().Get(RecvPullEngine))
	}
}
