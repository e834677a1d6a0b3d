package e1000e_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
)

// udpFrame is an IPv4/UDP frame of size bytes from src to dst: one the
// NIC splits after its 42 bytes of headers.
func udpFrame(dst, src nicdrv.MAC, size int) []byte {
	f := make([]byte, size)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	f[14], f[22], f[23] = 0x45, 64, 17
	binary.BigEndian.PutUint16(f[16:], uint16(size-14))
	binary.BigEndian.PutUint16(f[38:], uint16(size-34))
	for i := 42; i < size; i++ {
		f[i] = byte(i)
	}
	return f
}

// BenchmarkModelPairSplit streams IPv4/UDP frames from one driver to the
// other over two cabled emulated 82574Ls, in batches of 32, received into
// one buffer per frame (single) or with header split (split: packet split
// descriptors, headers and payload in two buffers): what header split
// costs the driver and the model per frame.
func BenchmarkModelPairSplit(b *testing.B) {
	for _, split := range []bool{false, true} {
		mode := "single"
		if split {
			mode = "split"
		}
		for _, size := range []int{60, 1514} {
			b.Run(fmt.Sprintf("%s/%dB", mode, size), func(b *testing.B) {
				p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				o := e1000e.DefaultOptions()
				var n [2]*e1000e.NIC
				for i := range n {
					o.HeaderSplit = split && i == 1
					if n[i], err = e1000e.Open(p.Functions()[i], o); err != nil {
						b.Fatal(err)
					}
					defer n[i].Close()
				}
				segs := 0
				streamFrames(b, n[0], n[1], udpFrame(n[1].MAC(), n[0].MAC(), size), size, func(rx []*nicdrv.Buffer) {
					for _, bf := range rx {
						segs += bf.Segments()
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
				b.ReportMetric(float64(segs)/float64(b.N), "buffers/frame")
			})
		}
	}
}

// sendUDP sends k IPv4/UDP frames of size bytes from a to b, tagging each
// with seq from first on (bytes 42..49).
func sendUDP(t *testing.T, a, b *e1000e.NIC, first uint64, k, size int) {
	t.Helper()
	bufs := make([]*nicdrv.Buffer, k)
	if _, err := a.Pool(0).Alloc(bufs); err != nil {
		t.Fatal(err)
	}
	for i, bf := range bufs {
		copy(bf.SetLen(size), udpFrame(b.MAC(), a.MAC(), size))
		binary.BigEndian.PutUint64(bf.Data[42:], first+uint64(i))
	}
	for off := 0; off < k; {
		m, err := a.TxBatch(0, bufs[off:])
		if err != nil {
			t.Fatal(err)
		}
		if m == 0 {
			t.Fatal("TX ring full on an idle pair")
		}
		off += m
	}
}

// recvUDP receives up to k frames on b (all that have come) and checks
// that they are frames first.. of size bytes, split (two buffers, headers
// in the first) when split, else whole in one.
func recvUDP(t *testing.T, b, a *e1000e.NIC, first uint64, k, size int, split bool) []*nicdrv.Buffer {
	t.Helper()
	rx := make([]*nicdrv.Buffer, k)
	n, err := b.RxBatch(0, rx)
	if err != nil {
		t.Fatal(err)
	}
	for i, bf := range rx[:n] {
		want := udpFrame(b.MAC(), a.MAC(), size)
		binary.BigEndian.PutUint64(want[42:], first+uint64(i))
		if got := bf.AppendFrame(nil); string(got) != string(want) {
			t.Fatalf("frame %d: %d bytes in %d buffers differ from the %d sent", first+uint64(i), len(got), bf.Segments(), size)
		}
		if split && (bf.Segments() != 2 || len(bf.Data) != 42) || !split && bf.Segments() != 1 {
			t.Fatalf("frame %d: %d buffers, the first of %d bytes (split %v)", first+uint64(i), bf.Segments(), len(bf.Data), split)
		}
	}
	return rx[:n]
}

// A NIC opened with header split, then without, then with again on the same
// device (QEMU keeps PSRCTL and RCTL.DTYP across its reset, so each Open
// must program them), receives right each time.
func TestHeaderSplitRestart(t *testing.T) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	o := e1000e.DefaultOptions()
	o.RxRing, o.TxRing = 64, 64
	a, err := e1000e.Open(p.Functions()[0], o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	seq := uint64(0)
	for round, split := range []bool{true, false, true} {
		o.HeaderSplit = split
		b, err := e1000e.Open(p.Functions()[1], o)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // 3 x 40 frames wrap the 64-descriptor ring
			sendUDP(t, a, b, seq, 40, 1000)
			got := recvUDP(t, b, a, seq, 40, 1000, split)
			if len(got) != 40 {
				t.Fatalf("round %d: %d of 40 frames arrived", round, len(got))
			}
			if err := b.Pool(0).Free(got...); err != nil {
				t.Fatal(err)
			}
			seq += 40
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// When the pool runs dry the RX ring drains: RxBatch neither blocks nor
// fails (nor reads the old write-backs left in the slots it could not
// refill, which once made it spin forever), the NIC holds the frames back,
// and once the buffers return every frame arrives in order, byte-exact;
// with header split, where each descriptor holds two buffers, and without.
func TestRxPoolRunsDry(t *testing.T) {
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) { testPoolExhaustion(t, split) })
	}
}

func testPoolExhaustion(t *testing.T, split bool) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	o := e1000e.DefaultOptions()
	o.RxRing, o.TxRing = 64, 64
	a, err := e1000e.Open(p.Functions()[0], o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	o.HeaderSplit = split
	o.PoolBuffers = 2*63 + 10 // the ring's 63 descriptors and 5 more frames
	if !split {
		o.PoolBuffers = 63 + 5
	}
	b, err := e1000e.Open(p.Functions()[1], o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const total = 120
	sendUDP(t, a, b, 0, total/2, 700)
	sendUDP(t, a, b, total/2, total/2, 700)
	var held []*nicdrv.Buffer
	for i := 0; i < 100 && len(held) < total; i++ {
		got := recvUDP(t, b, a, uint64(len(held)), 32, 700, split)
		if len(got) == 0 {
			break
		}
		held = append(held, got...)
	}
	if len(held) >= total {
		t.Fatalf("all %d frames arrived with a pool of %d buffers for 2 per frame", total, o.PoolBuffers)
	}
	st, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxNoBuffer == 0 {
		t.Errorf("ring ran dry with %d frames held, but RxNoBuffer is 0", len(held))
	}
	if err := b.Pool(0).Free(held...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000 && len(held) < total; i++ {
		got := recvUDP(t, b, a, uint64(len(held)), 32, 700, split)
		held = append(held, got...)
		if err := b.Pool(0).Free(got...); err != nil {
			t.Fatal(err)
		}
	}
	if len(held) != total {
		t.Fatalf("%d of %d frames arrived after the buffers came back", len(held), total)
	}
}
