package ixgbe_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// openPlacePair opens a (copying) and b (placing) on two cabled models,
// both with frames of up to maxFrame bytes in pool buffers of bufSize.
func openPlacePair(t *testing.T, m emulated.IXGBEOptions, maxFrame, bufSize int) (a, b *ixgbe.NIC) {
	p := newPlatform(t, m)
	return nictest.OpenPair(t, func(i int) (*ixgbe.NIC, error) {
		o := ixgbe.DefaultOptions()
		o.Placement = i == 1
		o.MaxFrame, o.BufferSize = maxFrame, bufSize
		return ixgbe.Open(p.Functions()[i], o)
	})
}

// placeGeometries are the frame and buffer sizes TestPlacement runs:
// the default, and jumbo frames in 16 KiB buffers (SRRCTL.BSIZEPACKET
// 16 KiB), where a 9014-byte frame lands whole in one placement.
var placeGeometries = []struct {
	name              string
	maxFrame, bufSize int
	frame             int // the long frames sent
}{
	{"1518", 1518, 2048, 1514},
	{"jumbo", 9018, 16384, 9014},
}

// TestPlacement posts placements in a receive buffer on the emulated
// 82599: the frames after the pool descriptors ahead land with their first
// 64 bytes in a header buffer and the rest in the placement, byte-exact
// and in posting order; frames before and after arrive whole in pool
// Buffers; short placements and a NIC opened without placement are
// refused; placements left posted at Close leave no mapping or fault.
func TestPlacement(t *testing.T) {
	for _, g := range placeGeometries {
		t.Run(g.name, func(t *testing.T) { testPlacement(t, g.maxFrame, g.bufSize, g.frame) })
	}
}

func testPlacement(t *testing.T, maxFrame, bufSize, size int) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		a, b := openPlacePair(t, m, maxFrame, bufSize)
		info := b.Info()
		if info.PlaceHeader != 64 || info.PlaceMin != maxFrame+4-64 || info.MaxFrame != maxFrame {
			t.Fatalf("Info: PlaceHeader %d, PlaceMin %d (MaxFrame %d)", info.PlaceHeader, info.PlaceMin, info.MaxFrame)
		}
		const placed = 16
		stride := size - 64
		mem := make([]byte, placed*stride+info.PlaceMin)
		ps, unmap := nictest.Placements(t, b, mem, placed, stride)

		// The last placed frame is a small one, all in the header buffer.
		nictest.PlaceAhead(t, a, b, ps, func(i, ahead int) int {
			if i == ahead+placed-1 || i%5 == 4 {
				return 60
			}
			return size
		})

		// Placements left posted at Close are consumed and unreachable.
		nictest.ClosePlacing(t, a, b, ps, unmap)
	})
}

// TestPlacementOptions: Placement is refused with header split and with
// jumbo frames in pool buffers too small to hold one, naming the
// conflict; buffer sizes SRRCTL.BSIZEPACKET cannot express are refused.
func TestPlacementOptions(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p := newPlatform(t, m)
		for _, c := range []struct {
			o    ixgbe.Options
			want string
		}{
			{ixgbe.Options{Placement: true, HeaderSplit: true}, "HeaderSplit"},
			{ixgbe.Options{Placement: true, MaxFrame: 9018}, "set BufferSize to at least 9022"},
			{ixgbe.Options{Placement: true, MaxFrame: 9018, BufferSize: 8192}, "set BufferSize to at least 9022"},
			{ixgbe.Options{BufferSize: 32768}, "BufferSize 32768"},
			{ixgbe.Options{BufferSize: 3072}, "BufferSize 3072"},
			{ixgbe.Options{BufferSize: 1024}, "BufferSize 1024"},
			{ixgbe.Options{Queues: 2, PlaceOnly: 1}, "PlaceOnly"},
			{ixgbe.Options{Placement: true, Queues: 2, PlaceOnly: 2}, "PlaceOnly"},
			{ixgbe.Options{Placement: true, PlaceOnly: -1}, "PlaceOnly"},
		} {
			n, err := ixgbe.Open(p.Functions()[0], c.o)
			if err == nil {
				_ = n.Close()
				t.Errorf("Open(%+v) succeeded", c.o)
			} else if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open(%+v): %v; want it to say %q", c.o, err, c.want)
			}
		}
	})
}

// TestPlaceOnlyCancel: a PlaceOnly queue gets no pool descriptor of the
// driver's, takes a posted pool buffer as a placement's turn, and
// CancelRx takes back what no frame took; queue 0 refuses CancelRx.
func TestPlaceOnlyCancel(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		o := ixgbe.DefaultOptions()
		o.Placement, o.Queues, o.PlaceOnly = true, 2, 1
		p := newPlatform(t, m)
		n, err := ixgbe.Open(p.Functions()[0], o)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		if info := n.Info(); info.PlaceOnly != 1 {
			t.Fatalf("Info.PlaceOnly %d, want 1", info.PlaceOnly)
		}
		// The PlaceOnly queue's pool: a ring's worth, no more.
		if k, k0 := n.Pool(1).Len(), n.Pool(0).Len(); k != o.RxRing || k0 <= o.RxRing {
			t.Errorf("pools of %d (queue 0) and %d (PlaceOnly) buffers, want more than %d and %d", k0, k, o.RxRing, o.RxRing)
		}
		if s := n.RxPlacement(1); s.Ahead != 0 || s.Posted != 0 {
			t.Fatalf("PlaceOnly queue before any posting: %+v, want nothing ahead", s)
		}
		if s := n.RxPlacement(0); s.Ahead == 0 {
			t.Fatalf("queue 0: %+v, want pool descriptors ahead", s)
		}
		if k, err := n.PostRx(1, []nicdrv.Placement{{}, {}}); k != 2 || err != nil {
			t.Fatalf("PostRx of two pool buffers: %d, %v", k, err)
		}
		if s := n.RxPlacement(1); s.Ahead != 2 || s.Posted != 2 {
			t.Fatalf("after posting: %+v", s)
		}
		if err := n.CancelRx(1); err != nil {
			t.Fatal(err)
		}
		if s := n.RxPlacement(1); s.Ahead != 0 || s.Consumed != 2 {
			t.Fatalf("after CancelRx: %+v", s)
		}
		if err := n.CancelRx(0); !errors.Is(err, nicdrv.ErrNotSupported) {
			t.Errorf("CancelRx(0): %v, want ErrNotSupported", err)
		}
	})
}

// TestPlacementVLAN sends VLAN-tagged frames of MaxFrame+4 bytes, the
// largest the 82599 admits (MAXFRS.MFS does not count the tag), to
// placements of Info.PlaceMin bytes laid end to end with a guard after
// each: every frame lands whole in its placement and no byte after a
// placement is written.
func TestPlacementVLAN(t *testing.T) {
	for _, g := range placeGeometries {
		t.Run(g.name, func(t *testing.T) {
			dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
				a, b := openPlacePair(t, m, g.maxFrame, g.bufSize)
				info := b.Info()
				const placed, guard = 4, 64
				stride := info.PlaceMin + guard
				mem := bytes.Repeat([]byte{0xEE}, placed*stride)
				ps, unmap := nictest.Placements(t, b, mem, placed, stride)
				ahead := b.RxPlacement(0).Ahead
				if k, err := b.PostRx(0, ps); k != placed || err != nil {
					t.Fatalf("PostRx: %d of %d taken: %v", k, placed, err)
				}
				var frames [][]byte
				for i := range ahead + placed {
					n := 60
					if i >= ahead {
						n = g.maxFrame + 4
					}
					fr := nictest.PlaceFrame(b.MAC(), a.MAC(), i, n)
					fr[12], fr[13], fr[14], fr[15] = 0x81, 0x00, 0x00, byte(i)
					frames = append(frames, fr)
				}
				nictest.SendFrames(t, a, frames)
				got := nictest.RecvFrames(t, b, len(frames))
				nictest.CheckPlacedFrames(t, got, frames, ps, ahead, info.PlaceHeader)
				for i := range placed {
					if g := mem[i*stride+info.PlaceMin : (i+1)*stride]; !bytes.Equal(g, bytes.Repeat([]byte{0xEE}, guard)) {
						t.Errorf("placement %d: the %d bytes after it were written", i, guard)
					}
				}
				for _, g := range got {
					if err := g.Pool().Free(g); err != nil {
						t.Error(err)
					}
				}
				for _, n := range []*ixgbe.NIC{b, a} {
					if err := n.Close(); err != nil {
						t.Fatal(err)
					}
				}
				unmap()
			})
		})
	}
}

// TestPlaceOnlyStripsVLAN: a PlaceOnly queue strips VLAN tags
// (RXDCTL.VME), so on a NIC opened for untagged frames of MaxFrame bytes
// (1514: a 1500-byte MTU; 9014 jumbo) a tagged frame of MaxFrame+4 bytes
// lands there as MaxFrame bytes, and a placement of Info.PlaceOnlyMin =
// MaxFrame-64 bytes holds any frame: each lands whole, its tag gone, and
// no byte after a placement is written. A shorter placement is refused
// on that queue, and an untagged frame past MaxFrame is dropped before it
// takes one.
func TestPlaceOnlyStripsVLAN(t *testing.T) {
	for _, g := range []struct {
		name              string
		maxFrame, bufSize int
	}{{"1514", 1514, 2048}, {"jumbo", 9014, 16384}} {
		t.Run(g.name, func(t *testing.T) {
			dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
				p := newPlatform(t, m)
				a, b := nictest.OpenPair(t, func(i int) (*ixgbe.NIC, error) {
					o := ixgbe.DefaultOptions()
					// a sends frames up to 4 bytes longer.
					o.MaxFrame, o.BufferSize = g.maxFrame+4*(1-i), g.bufSize
					if i == 1 {
						o.Placement, o.Queues, o.PlaceOnly = true, 2, 1
					}
					return ixgbe.Open(p.Functions()[i], o)
				})
				info := b.Info()
				if info.PlaceOnlyMin != g.maxFrame-info.PlaceHeader || info.PlaceMin != g.maxFrame+4-info.PlaceHeader {
					t.Fatalf("PlaceOnlyMin %d, PlaceMin %d: want %d and %d", info.PlaceOnlyMin, info.PlaceMin, g.maxFrame-info.PlaceHeader, g.maxFrame+4-info.PlaceHeader)
				}
				for _, et := range []uint16{0x8100, 0x88B5} {
					if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: et, Queue: 1}); err != nil {
						t.Fatal(err)
					}
				}
				const placed, guard = 4, 64
				stride := info.PlaceOnlyMin + guard
				mem := bytes.Repeat([]byte{0xEE}, placed*stride)
				ps, unmap := nictest.Placements(t, b, mem, placed, stride)
				defer unmap()
				short := []nicdrv.Placement{{Mem: ps[0].Mem[:info.PlaceOnlyMin-1], IOVA: ps[0].IOVA}}
				if k, err := b.PostRx(1, short); k != 0 || !errors.Is(err, nicdrv.ErrFrameSize) {
					t.Fatalf("PostRx of %d bytes on the PlaceOnly queue: %d taken, %v: want ErrFrameSize", info.PlaceOnlyMin-1, k, err)
				}
				if k, err := b.PostRx(1, ps); k != placed || err != nil {
					t.Fatalf("PostRx: %d of %d taken: %v", k, placed, err)
				}
				// An untagged frame one byte too long first: dropped.
				frames := [][]byte{nictest.PlaceFrame(b.MAC(), a.MAC(), 9, g.maxFrame+1)}
				var want [][]byte
				for i := range placed {
					fr := nictest.PlaceFrame(b.MAC(), a.MAC(), i, g.maxFrame)
					w := fr
					if i%2 == 0 {
						fr = append(append(append([]byte(nil), fr[:12]...), 0x81, 0x00, 0x00, byte(i)), fr[12:]...)
					}
					frames, want = append(frames, fr), append(want, w)
				}
				nictest.SendFrames(t, a, frames)
				waitSent(t, p, 0, uint64(len(frames))) // every frame written back
				var got []*nicdrv.Buffer
				buf := make([]*nicdrv.Buffer, 8)
				for tries := 0; len(got) < placed && tries < 100; tries++ {
					k, err := b.RxBatch(1, buf)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, buf[:k]...)
				}
				if len(got) != placed {
					t.Fatalf("received %d of %d frames on the PlaceOnly queue", len(got), placed)
				}
				for i, f := range got {
					ext, _ := f.Attached()
					if !bytes.Equal(f.Data, want[i][:info.PlaceHeader]) || !bytes.Equal(ext, want[i][info.PlaceHeader:]) {
						t.Errorf("frame %d: %d + %d bytes, want the %d-byte frame without its tag", i, len(f.Data), len(ext), len(want[i]))
					}
					if g := mem[i*stride+info.PlaceOnlyMin : (i+1)*stride]; !bytes.Equal(g, bytes.Repeat([]byte{0xEE}, guard)) {
						t.Errorf("placement %d: the %d bytes after it were written", i, guard)
					}
					if err := f.Pool().Free(f); err != nil {
						t.Error(err)
					}
				}
				for _, n := range []*ixgbe.NIC{b, a} {
					if err := n.Close(); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}
