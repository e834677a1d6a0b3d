package e1000e_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// What DPDK's em driver (drivers/net/intel/e1000/em_rxtx.c,
// eth_em_recv_pkts and eth_em_xmit_pkts) costs per reflected frame under
// testpmd's macswap, read from its code. Receive reads write-back status
// from memory and reads no register; it writes RDT when the descriptors
// it holds exceed rx_free_thresh, which testpmd takes from the driver's
// defaults, 0 for em: so once per receive burst that took a frame.
// Transmit writes TDT once per burst (testpmd sends only non-empty
// bursts), sets RS on one descriptor in tx_rs_thresh (32), and reclaims
// by reading DD from memory. Ping-pong is bursts of one frame; a stream,
// bursts of 32 (testpmd's --burst).
const (
	dpdkReads             = 0
	dpdkWritesPingPong    = 2.0      // RDT + TDT per frame
	dpdkWritesStream      = 2.0 / 32 // RDT + TDT per burst of 32
	dpdkTxWriteBacksFrame = 1.0 / 32 // tx_rs_thresh

	// gomx writes RDT once per 32 refilled descriptors (rx_free_thresh
	// 32), so a ping-pong costs TDT per frame and RDT per 32.
	gomxWritesPingPong = 1 + 1.0/32
)

// cost is what the model counted on one NIC, per frame.
type cost struct {
	reads, writes         float64
	rxDMA, txFetch, txWB  float64
	readNames, writeNames string
}

func costOf(a emulated.E1000EAccesses, frames int) cost {
	f := float64(frames)
	names := func(m map[string]uint64) string {
		var s []string
		for k, v := range m {
			s = append(s, fmt.Sprintf("%s:%d", k, v))
		}
		sort.Strings(s)
		return strings.Join(s, " ")
	}
	return cost{reads: float64(a.TotalReads()) / f, writes: float64(a.TotalWrites()) / f,
		rxDMA: float64(a.RxDescFetches+a.RxDescWriteBacks) / f, txFetch: float64(a.TxDescFetches) / f,
		txWB: float64(a.TxDescWriteBacks) / f, readNames: names(a.Reads), writeNames: names(a.Writes)}
}

// reflectRig is gomx's pinger on model NIC 0 and gomx's macswap reflector
// (nictest.MacSwap, the one the peers VM runs) on model NIC 1, with the
// peers VM's options (default rings of 512, polling).
type reflectRig struct {
	p    *emulated.E1000E
	a, b *e1000e.NIC
	seq  uint64
	brx  []*nicdrv.Buffer
	arx  []*nicdrv.Buffer
	tx   []*nicdrv.Buffer
}

func newReflectRig(tb testing.TB) *reflectRig {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	r := &reflectRig{p: p, brx: make([]*nicdrv.Buffer, 32), arx: make([]*nicdrv.Buffer, 32), tx: make([]*nicdrv.Buffer, 32)}
	for i, n := range []**e1000e.NIC{&r.a, &r.b} {
		if *n, err = e1000e.Open(p.Functions()[i], e1000e.DefaultOptions()); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { (*n).Close() })
	}
	return r
}

// burst sends k frames of 64 bytes from a in one TxBatch, lets the
// reflector turn them around, and takes them back on a, checking each.
// The reflector and the pinger take turns on this goroutine, so the
// counts do not depend on scheduling; the model is synchronous, so every
// turn finds what the previous one sent.
func (r *reflectRig) burst(tb testing.TB, k int) {
	bufs := r.tx[:k]
	if got, err := r.a.Pool(0).Alloc(bufs); got != k {
		tb.Fatalf("alloc %d: %d, %v", k, got, err)
	}
	for i, b := range bufs {
		nictest.Frame(b.SetLen(2048), r.b.MAC(), r.a.MAC(), r.seq+uint64(i), 64)
		b.SetLen(64)
	}
	if m, err := r.a.TxBatch(0, bufs); m != k || err != nil {
		tb.Fatalf("send %d: %d, %v", k, m, err)
	}
	reflected, got := 0, 0
	want := make([]byte, 64)
	for try := 0; got < k; try++ {
		if try > 4*k+8 {
			tb.Fatalf("burst of %d: %d reflected, %d back", k, reflected, got)
		}
		m, err := nictest.MacSwap(r.b, 0, r.brx)
		if err != nil {
			tb.Fatal(err)
		}
		reflected += m
		n, err := r.a.RxBatch(0, r.arx[:k-got])
		if err != nil {
			tb.Fatal(err)
		}
		for _, b := range r.arx[:n] {
			w := nictest.Frame(want, r.a.MAC(), r.b.MAC(), r.seq+uint64(got), 64)
			if string(b.Data) != string(w) {
				tb.Fatalf("frame %d came back wrong", r.seq+uint64(got))
			}
			got++
		}
		_ = r.a.Pool(0).Free(r.arx[:n]...)
	}
	r.seq += uint64(k)
}

// warmUp runs 64 bursts of k frames: past the first refills and RS marks.
func (r *reflectRig) warmUp(tb testing.TB, k int) {
	for range 64 {
		r.burst(tb, k)
	}
}

// measure runs frames/k bursts of k frames after a warm-up and returns
// the reflector's (b) and the pinger's (a) cost per frame.
func (r *reflectRig) measure(tb testing.TB, k, frames int) (refl, ping cost) {
	r.warmUp(tb, k)
	return r.count(tb, k, frames)
}

// count runs frames/k bursts of k frames and returns the reflector's (b)
// and the pinger's (a) cost per frame.
func (r *reflectRig) count(tb testing.TB, k, frames int) (refl, ping cost) {
	r.p.ResetAccesses(0)
	r.p.ResetAccesses(1)
	for i := 0; i < frames; i += k {
		r.burst(tb, k)
	}
	return costOf(r.p.Accesses(1), frames), costOf(r.p.Accesses(0), frames)
}

// TestReflectorMMIO asserts what gomx's reflector costs per reflected
// frame on QEMU's e1000e, counted on the model: no register read on the
// fast path, and at most the doorbell writes DPDK's em driver does for the
// same pattern, in ping-pong and in a stream of bursts of 32. The pinger
// (gomx on the other NIC) is held to the same. These are exact counts, the
// same on any machine at any load.
func TestReflectorMMIO(t *testing.T) {
	for _, c := range []struct {
		name       string
		burst      int
		dpdkWrites float64
		gomxWrites float64
	}{{"pingpong", 1, dpdkWritesPingPong, gomxWritesPingPong}, {"stream32", 32, dpdkWritesStream, dpdkWritesStream}} {
		t.Run(c.name, func(t *testing.T) {
			r := newReflectRig(t)
			const frames = 32 * 32
			refl, ping := r.measure(t, c.burst, frames)
			t.Logf("reflector per frame: %.3f reads, %.3f writes (%s), %.3f RX descriptor DMA, %.3f TX fetches, %.3f TX write-backs",
				refl.reads, refl.writes, refl.writeNames, refl.rxDMA, refl.txFetch, refl.txWB)
			t.Logf("pinger per frame: %.3f reads, %.3f writes (%s)", ping.reads, ping.writes, ping.writeNames)
			for _, x := range []struct {
				who string
				c   cost
			}{{"reflector", refl}, {"pinger", ping}} {
				if x.c.reads != dpdkReads {
					t.Errorf("%s reads %.3f registers per frame (%s); DPDK reads none: the fast path must poll descriptors in memory, not ICR, STATUS, RDH or TDH", x.who, x.c.reads, x.c.readNames)
				}
				if x.c.writes > c.dpdkWrites {
					t.Errorf("%s writes %.3f registers per frame (%s); DPDK writes %.3f (RDT and TDT once per burst)", x.who, x.c.writes, x.c.writeNames, c.dpdkWrites)
				} else if x.c.writes > c.gomxWrites+1.0/frames { // a group of 32 cut by the window
					t.Errorf("%s writes %.3f registers per frame (%s), want at most %.3f: TDT once per burst, RDT once per 32 refilled descriptors", x.who, x.c.writes, x.c.writeNames, c.gomxWrites)
				}
				if x.c.txWB > dpdkTxWriteBacksFrame {
					t.Errorf("%s asks for %.3f TX write-backs per frame; DPDK %.3f (RS every 32)", x.who, x.c.txWB, dpdkTxWriteBacksFrame)
				}
			}
		})
	}
}

// TestReflectorNoAlloc: a ping-pong round through gomx's pinger and
// reflector allocates nothing (the model's own work included).
func TestReflectorNoAlloc(t *testing.T) {
	r := newReflectRig(t)
	r.measure(t, 1, 64)
	if n := testing.AllocsPerRun(200, func() { r.burst(t, 1) }); n != 0 {
		t.Errorf("%v allocations per ping-pong round, want 0", n)
	}
}

// BenchmarkReflectorMMIO reports gomx's reflector's register accesses and
// descriptor DMA per reflected frame on the model, in ping-pong and in
// bursts of 32, with DPDK's em driver's writes for the same pattern beside
// them.
//
//	go test -run '^$' -bench ReflectorMMIO -benchtime 1024x ./nicdrv/e1000e/
func BenchmarkReflectorMMIO(b *testing.B) {
	for _, c := range []struct {
		name       string
		burst      int
		dpdkWrites float64
	}{{"pingpong", 1, dpdkWritesPingPong}, {"stream32", 32, dpdkWritesStream}} {
		b.Run(c.name, func(b *testing.B) {
			r := newReflectRig(b)
			frames := max(c.burst, (b.N+c.burst-1)/c.burst*c.burst)
			r.warmUp(b, c.burst)
			b.ResetTimer()
			refl, ping := r.count(b, c.burst, frames)
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
			b.ReportMetric(refl.reads, "mmio-reads/frame")
			b.ReportMetric(refl.writes, "mmio-writes/frame")
			b.ReportMetric(c.dpdkWrites, "dpdk-mmio-writes/frame")
			b.ReportMetric(refl.rxDMA+refl.txFetch+refl.txWB, "desc-dma/frame")
			b.ReportMetric(ping.writes, "pinger-mmio-writes/frame")
		})
	}
}
