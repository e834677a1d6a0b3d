package mx

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// newVFIOWire is the nic wire over three VFIO 82574Ls on one segment (named
// in GOMX_E1000E_DEVICES, or the first three on the bus).
func newVFIOWire(t *testing.T) *wire2 {
	v := nictest.OpenVFIO(t, nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 3,
		Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }})
	d := v.Devices
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
	v := nictest.OpenVFIO(t, nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 2,
		Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }})
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
