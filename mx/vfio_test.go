package mx

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/vfio"
)

// TestForgedFramesVFIO runs the forged-frame attack over real (or QEMU's)
// 82574Ls through the VFIO driver: two boards on NICs 0 and 1, the attacker
// on NIC 2, all three on one segment (QEMU's hub in `make qemu-test`, which
// runs this test in its guests). Malformed and forged frames must be
// dropped and counted, never delivered, when they come through a real
// NIC's receive path, not only the model's. It skips without three such
// NICs bound to vfio-pci, and fails instead where GOMX_REQUIRE_QEMU names
// e1000e.
func TestForgedFramesVFIO(t *testing.T) {
	forgedFrames(t, newVFIOWire(t))
}

// newVFIOWire is the nic wire over three VFIO 82574Ls on one segment.
func newVFIOWire(t *testing.T) *wire2 {
	d := openE1000EVFIO(t, 3).Devices
	return e1000eWire(t, "VFIO", [3]pci.Device{d[0], d[1], d[2]}, func() {})
}

// TestZeroCopyReceiveInPlaceVFIO receives large messages over real (or
// QEMU's) 82574Ls through VFIO, opened with payload placement (the
// 82574's packet split; QEMU 7.2's e1000e implements it): every message
// byte-exact, at most one receive copy per byte, and, where an IOMMU maps
// the receive buffer in one piece, payloads written by the NIC in place.
// Without an IOMMU the Go heap is not contiguous for the NIC, so spans are
// not posted and the receiver copies once. A few messages: under TCG
// every frame costs QEMU's emulated IOMMU.
func TestZeroCopyReceiveInPlaceVFIO(t *testing.T) {
	v := openE1000EVFIO(t, 2)
	var trs [2]transport.Transport
	var nics [2]*e1000e.NIC
	for i := range 2 {
		o := e1000e.DefaultOptions()
		o.Placement = true
		n, err := e1000e.Open(v.Devices[i], o)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nic.New(n, nic.Options{})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		trs[i] = tr
		nics[i] = n
	}
	w := &wire2{a: trs[0], b: trs[1], close: func() {},
		third: func() transport.Transport { t.Fatal("the VFIO placement wire has two ends"); return nil }}
	o := zcOptions("on")
	o.PullTimeout = 500 * time.Millisecond // TCG: no re-request of frames on their way
	o.ResendDelay = 100 * time.Millisecond
	pr := newPairOn(t, w, o)
	var placed uint64
	for i, size := range []int{40 << 10, 256<<10 + 3, 256 << 10} {
		src := pattern(size, uint64(70+i))
		dst := make([]byte, size)
		before := pr.b.CopyStats()
		if err := exchangeErr(testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 9, [][]byte{src}, [][]byte{dst}); err != nil {
			logPlaceState(t, pr, trs[1])
			t.Logf("sender %s", nics[0].TxRingState(0, 6))
			t.Logf("receiver %s", nics[1].TxRingState(0, 2))
			t.Fatalf("message %d (%d bytes): %v", i, size, err)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("message %d (%d bytes) arrived changed", i, size)
		}
		c := pr.b.CopyStats().Sub(before)
		t.Logf("message %d (%d bytes): %d in place, %.4f copied per byte", i, size, c.RecvPlaced, c.RecvPerByte())
		if c.RecvPerByte() > 1 {
			t.Errorf("message %d: %.4f copied per byte: want at most one", i, c.RecvPerByte())
		}
		placed += c.RecvPlaced
	}
	if placed == 0 && !v.NoIOMMU {
		t.Errorf("nothing was received in place over QEMU's e1000e with an IOMMU")
	}
}

// openE1000EVFIO opens n real (or QEMU's) 82574Ls through VFIO, named in
// GOMX_E1000E_DEVICES or the first n bound to vfio-pci, the first two
// cabled (or on one segment with the rest): it skips without them, and
// fails instead where GOMX_REQUIRE_QEMU names e1000e.
func openE1000EVFIO(t testing.TB, n int) *nictest.VFIONICs {
	return nictest.OpenVFIO(t, nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: n,
		Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }})
}

// zcVFIOModels are the zero-copy tests' pairs over real (or QEMU's)
// 82574Ls through VFIO, plain and opened to place payloads: the tests
// that take them beside the models are those hack/qemu's mxVFIOTests
// names, and `make qemu-test` runs their VFIO subtests. They move frames
// slowly there (TCG), so the tests send fewer messages.
var zcVFIOModels = []zcModel{
	{name: "82574L-VFIO", open: openVFIOPair(false), slow: true, physical: nictest.NoIOMMU,
		drv: func(d pci.Device) (nicdrv.NIC, error) { return e1000e.Open(d, e1000e.DefaultOptions()) }},
	{name: "82574L-place-VFIO", open: openVFIOPair(true), slow: true,
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := e1000e.DefaultOptions()
			o.Placement = true
			return e1000e.Open(d, o)
		},
		place: true, placedCopies: 0.09, fewPlacedUnderFaults: true},
}

// openVFIOPair returns zcModel.open over the first two VFIO 82574Ls. No
// hook sees their TX descriptors (tx is never called) and the IOMMU is
// the kernel's: the pair's close fails on a DMA fault the IOMMU logged
// meanwhile, and the VFIO container, closed as the test ends, on a DMA
// mapping left behind. A placing pair skips without an IOMMU: the Go heap
// is not contiguous for the NIC then, and nothing is placed
// (TestZeroCopyReceiveInPlaceVFIO checks that it is copied once).
func openVFIOPair(place bool) func(testing.TB, func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
	return func(t testing.TB, _ func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
		if place && nictest.NoIOMMU() {
			t.Skip("no IOMMU: the receiving NIC cannot place into the Go heap")
		}
		v := openE1000EVFIO(t, 2)
		faults, before := v.Faults(), uint64(0)
		if faults != nil {
			before = faults()
		}
		return [2]pci.Device{v.Devices[0], v.Devices[1]}, nil, func() error {
			if faults == nil {
				return nil
			}
			// The kernel's log may wrap, and its count then fall.
			if after := faults(); after > before {
				return fmt.Errorf("the IOMMU logged %d DMA faults", after-before)
			}
			return nil
		}
	}
}

// exchangeErr is exchange returning its error, so that a caller can say
// what the boards saw before it fails.
func exchangeErr(ctx context.Context, src *Endpoint, to Addr, dst *Endpoint, match uint64, ssegs, rsegs [][]byte) error {
	r, err := dst.IRecv(rsegs, match, ^uint64(0), nil)
	if err != nil {
		return err
	}
	s, err := src.ISend(ssegs, to, match, nil)
	if err != nil {
		return err
	}
	if _, err := s.Wait(ctx); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if _, err := r.Wait(ctx); err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	return nil
}

// logPlaceState logs what a stuck placing pair saw: each board's and
// endpoint's nonzero counters, the receiver's transport counters, its
// placement state and live pulls.
func logPlaceState(t *testing.T, pr *pair, rx transport.Transport) {
	t.Helper()
	for _, side := range []struct {
		name string
		b    *Board
		e    *Endpoint
	}{{"sender", pr.ba, pr.a}, {"receiver", pr.bb, pr.b}} {
		var sb strings.Builder
		side.b.Counters().NonZero(func(k Counter, v uint64) { fmt.Fprintf(&sb, " %v=%d", k, v) })
		side.e.Counters().NonZero(func(k Counter, v uint64) { fmt.Fprintf(&sb, " %v=%d", k, v) })
		t.Logf("%s counters:%s", side.name, sb.String())
		sb.Reset()
		for _, c := range side.b.TransportCounters() {
			if c.Value != 0 {
				fmt.Fprintf(&sb, " %s=%d", c.Name, c.Value)
			}
		}
		t.Logf("%s transport:%s", side.name, sb.String())
	}
	if p, ok := rx.(transport.Placer); ok {
		t.Logf("receiver placement: %+v", p.Placement(0))
	}
	b := pr.bb
	b.mu.Lock()
	defer b.mu.Unlock()
	if pc := b.plc; pc != nil {
		t.Logf("receiver placeRecv: expect %d, pulls %d, seen %d, settled %d, drain %d", pc.expect, len(pc.pulls), pc.seen, pc.settled, len(pc.drain))
	}
	for _, pl := range pr.b.pulls {
		if pl == nil {
			continue
		}
		t.Logf("  pull total %d frames %d pad %d next %d expect %d blocks %d places %v", pl.total, pl.nframes, pl.pad, pl.nextFrame, pl.expect, len(pl.blocks), pl.pp != nil)
		if pp := pl.pp; pp != nil {
			t.Logf("    last span %d posts %v", pp.last, pp.post)
		}
		for _, bl := range pl.blocks {
			t.Logf("    block first %d n %d got %#x ngot %d seq %d", bl.first, bl.n, bl.got, bl.ngot, bl.seq)
		}
	}
}
