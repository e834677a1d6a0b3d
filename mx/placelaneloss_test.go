package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport/fault"
)

// A lane's reply lost on the cable, before the receiving NIC, never takes
// the span posted for it. When it is the pull's last frames, nothing later
// on the lane takes that span either, so it stays posted, and the copy of
// the reply asked for again (on lane 0) could never be kept there: the NIC
// might still write the span. The pull's answer, acted on once the lane
// was drained, shows those frames lost; the pull then takes its lane's
// postings back, and the copies that follow are kept. Every message of a
// stream over a lossy cable arrives whole.
func TestPlacedLaneLossBeforeTheNIC(t *testing.T) {
	m := zcModel{name: "82599-lanes-lossy-cable",
		open: func(t testing.TB, _ func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
			p, err := emulated.NewIXGBE(emulated.DefaultIXGBEOptions())
			if err != nil {
				t.Fatal(err)
			}
			cable := emulated.CableOptions{Faults: fault.Options{Loss: 0.02, Seed: 5}}
			if err := emulated.Connect(cable, p.Port(0), p.Port(1)); err != nil {
				p.Close()
				t.Fatal(err)
			}
			f := p.Functions()
			return [2]pci.Device{f[0], f[1]}, p.IOMMU(), p.Close
		},
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := ixgbe.DefaultOptions()
			o.Placement, o.Queues, o.PlaceOnly = true, 5, 4
			return ixgbe.Open(d, o)
		},
		place: true}
	checkLeaks(t)
	pr := newPairOn(t, zcWire(t, m, nil, nil), zcOptions("on"))
	const window, rounds = 4, 6
	sizes := []int{1 << 20, 256 << 10, 1<<20 + 4097, 100 << 10}
	for round := range rounds {
		ctx := testCtx(t, time.Minute) // per round
		var rs, ss []*Request
		var srcs, dsts [][]byte
		for k := range window {
			size := sizes[(round+k)%len(sizes)]
			match := uint64(round*window + k)
			src, dst := pattern(size, match), make([]byte, size)
			r, err := pr.b.IRecv([][]byte{dst}, match, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := pr.a.ISend([][]byte{src}, pr.atob, match, nil)
			if err != nil {
				t.Fatal(err)
			}
			rs, ss, srcs, dsts = append(rs, r), append(ss, s), append(srcs, src), append(dsts, dst)
		}
		for k := range window {
			if _, err := rs[k].Wait(ctx); err != nil {
				t.Fatalf("round %d message %d: %v (counters %v)", round, k, err, pr.b.Counters())
			}
			if _, err := ss[k].Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(srcs[k], dsts[k]) {
				t.Fatalf("round %d message %d: arrived changed", round, k)
			}
		}
	}
	rc := pr.b.CopyStats()
	t.Logf("received %d bytes, %d in place, %.3f copied per byte; %d pull frames asked again",
		rc.RecvBytes, rc.RecvPlaced, rc.RecvPerByte(), pr.b.Counters().Get(PullFramesRerequested))
	if rc.RecvPlaced == 0 {
		t.Errorf("nothing was received in place: %+v", rc)
	}
}
