package ioat

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/pci"
)

// mixedEngine opens an engine over cbChans channels of the CBDMA model,
// each capped at cbBW bytes/s, and wqs work queues of a DSA model capped
// at dsaBW (0: uncapped) behind the same IOMMU: CBDMA channels first,
// then the WQs.
func mixedEngine(t testing.TB, cbChans int, cbBW int64, wqs int, dsaBW int64, o EngineOptions) (*Engine, *emulated.CBDMA, *emulated.DSA) {
	t.Helper()
	var devs []pci.Device
	var cb *emulated.CBDMA
	var iommu *emulated.IOMMU
	if cbChans > 0 {
		var err error
		cb, err = emulated.NewCBDMA(emulated.CBDMAOptions{Channels: cbChans, Bandwidth: cbBW})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cb.Close() })
		devs = append(devs, cb.Devices()...)
		iommu = cb.IOMMU()
	}
	var dsa *emulated.DSA
	if wqs > 0 {
		var err error
		dsa, err = emulated.NewDSA(emulated.DSAOptions{IOMMU: iommu, Engines: wqs, Groups: wqs, Bandwidth: dsaBW, MaxXferShift: 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			dsa.Close()
			if s := dsa.Stats(0); s.Violations != 0 {
				t.Errorf("DSA: %d violations, last: %s", s.Violations, s.LastViolation)
			}
		})
		devs = append(devs, dsa.Devices()...)
		o.WQs = wqs
	}
	e, err := NewEngine(devs, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e, cb, dsa
}

// TestShares: Adaptive cuts a large request in proportion to the
// queues' rates less what they already hold, drops a queue whose piece
// would be too small, and always covers the request exactly.
func TestShares(t *testing.T) {
	mk := func(rates []float64, loads []int64) *Engine {
		e := &Engine{}
		for i, r := range rates {
			ec := &echan{}
			ec.rate.Store(math.Float64bits(r))
			ec.sampled.Store(monoNow())
			ec.load.Store(loads[i])
			e.chans = append(e.chans, ec)
		}
		return e
	}
	for _, tc := range []struct {
		name  string
		rates []float64
		loads []int64
		n     int
		want  []int // approximate, within 64 bytes
	}{
		{"equal", []float64{1, 1}, []int64{0, 0}, 1 << 20, []int{512 << 10, 512 << 10}},
		{"three to one", []float64{3, 1}, []int64{0, 0}, 1 << 20, []int{768 << 10, 256 << 10}},
		{"unmeasured as fast as the fastest", []float64{2, 0}, []int64{0, 0}, 1 << 20, []int{512 << 10, 512 << 10}},
		{"none measured", []float64{0, 0, 0, 0}, []int64{0, 0, 0, 0}, 1 << 20, []int{256 << 10, 256 << 10, 256 << 10, 256 << 10}},
		{"backlog evened out", []float64{1, 1}, []int64{512 << 10, 0}, 1 << 20, []int{256 << 10, 768 << 10}},
		{"busy past the finish", []float64{1, 1}, []int64{4 << 20, 0}, 1 << 20, []int{0, 1 << 20}},
		{"slow queue's piece too small", []float64{100, 1}, []int64{0, 0}, 1 << 20, []int{1 << 20, 0}},
		{"odd size", []float64{1, 1, 1}, []int64{0, 0, 0}, 1<<20 + 13, []int{349568, 349568, 349453}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mk(tc.rates, tc.loads)
			got := make([]int, len(tc.rates))
			e.shares(tc.n, got)
			sum := 0
			for i, x := range got {
				sum += x
				if d := x - tc.want[i]; d < -64 || d > 64 {
					t.Errorf("queue %d: %d bytes, want about %d (all: %v)", i, x, tc.want[i], got)
				}
				if x != 0 && x < adaptiveMinPiece {
					t.Errorf("queue %d: a piece of %d bytes, under the minimum", i, x)
				}
			}
			if sum != tc.n {
				t.Errorf("pieces %v sum to %d, want %d", got, sum, tc.n)
			}
		})
	}
}

// TestEarliest: a whole request goes where it finishes first, by rate
// and bytes outstanding.
func TestEarliest(t *testing.T) {
	e := &Engine{}
	for _, r := range []float64{4, 1, 0} {
		ec := &echan{}
		ec.rate.Store(math.Float64bits(r))
		ec.sampled.Store(monoNow())
		e.chans = append(e.chans, ec)
	}
	if got := e.earliest(64 << 10); got != e.chans[2] {
		t.Error("an unmeasured queue was not tried first")
	}
	e.chans[2].rate.Store(math.Float64bits(0.5))
	if got := e.earliest(64 << 10); got != e.chans[0] {
		t.Error("an idle engine: the request went to a slow queue")
	}
	e.chans[0].load.Store(1 << 20) // fast queue: 1 MiB at 4 = 256K units ahead
	if got := e.earliest(64 << 10); got != e.chans[1] {
		t.Error("fast queue busy past the slow one's finish: the request waited for it")
	}
	e.chans[0].load.Store(0)
	e.chans[1].sampled.Store(monoNow() - int64(2*exploreAfter))
	if got := e.earliest(64 << 10); got != e.chans[1] {
		t.Error("a slow queue without a sample for long is not tried again")
	}
}

// TestAdaptiveMixed: over CBDMA channels slowed to a crawl (4 MiB/s, far
// below what the model copies at on a loaded CPU under -race) and an
// uncapped DSA work queue behind one IOMMU, Adaptive copies every byte
// right, measures the DSA faster than the channels and gives it more of
// the work; a large request is striped over the queues by their rates.
func TestAdaptiveMixed(t *testing.T) {
	o := offloadAll()
	o.Policy = Adaptive
	o.StripeMin = 256 << 10
	e, cb, dsa := mixedEngine(t, 2, 4<<20, 1, 0, o)
	if len(e.Queues()) != 3 {
		t.Fatalf("%d queues, want 2 channels and 1 work queue", len(e.Queues()))
	}
	r := rand.New(rand.NewPCG(7, 7))
	const size = 128 << 10
	src := make([]byte, 64*size)
	dst := make([]byte, len(src))
	randBytes(r, src)
	// A window of 4 requests at a time, below StripeMin: each goes whole
	// to the queue expected to finish it first.
	var cks []*Cookie
	for i := 0; i < 64; i++ {
		ck, err := e.ICopy(dst[i*size:(i+1)*size], src[i*size:(i+1)*size])
		if err != nil {
			t.Fatal(err)
		}
		cks = append(cks, ck)
		if len(cks) == 4 {
			if err := e.Wait(context.Background(), cks[0]); err != nil {
				t.Fatal(err)
			}
			cks = cks[1:]
		}
	}
	for _, ck := range cks {
		if err := e.Wait(context.Background(), ck); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("copies wrong")
	}
	st := e.ChannelStats()
	slow := max(cb.Stats(0).Bytes, cb.Stats(1).Bytes)
	fast := dsa.Stats(0).Bytes
	if fast <= slow || st[2].Rate <= st[0].Rate || st[2].Rate <= st[1].Rate {
		t.Errorf("the uncapped WQ moved %d bytes at a measured %.0f B/s, the 32 MiB/s channels %d and %d bytes at %.0f and %.0f B/s: the fast queue should carry the most",
			fast, st[2].Rate, cb.Stats(0).Bytes, cb.Stats(1).Bytes, st[0].Rate, st[1].Rate)
	}
	// One 4 MiB request: striped by rate, every byte right.
	clear(dst[:4<<20])
	before := fast
	if err := e.Copy(dst[:4<<20], src[:4<<20]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst[:4<<20], src[:4<<20]) {
		t.Fatal("striped copy wrong")
	}
	if got := dsa.Stats(0).Bytes - before; got < 2<<20 {
		t.Errorf("the fast WQ took %d bytes of a 4 MiB striped copy: want most of it", got)
	}
}

// policyRigs are the engines BenchmarkPolicy compares policies on: a
// mixed engine of two CBDMA channels capped at 32 MiB/s and one DSA work
// queue capped at 128 MiB/s (a fast queue and two slow ones), and an
// engine of four CBDMA channels of one speed (48 MiB/s each), where
// scheduling by measured rate must not lose to the fixed policies. Both
// sum to 192 MiB/s. The caps are low so that a transfer lasts far longer
// than the models' own copying and than the waits a loaded host's
// scheduler adds: the figures then measure where the work went, not how
// busy the machine was.
var policyRigs = []struct {
	name         string
	cbChans, wqs int
	cbBW, dsaBW  int64
}{
	{"mixed-2cb32M+1wq128M", 2, 1, 32 << 20, 128 << 20},
	{"equal-4cb48M", 4, 0, 48 << 20, 0},
}

// policyCap is the summed rate cap of every policy rig.
const policyCap = 192 << 20

// BenchmarkPolicy runs copies of one size with a window of requests in
// flight (1: one copy at a time, where only striping uses several
// queues; 8: a stream) over each rig, with every policy. It reports the
// rate (MB/s) and the rate as a share of the rig's summed caps
// (cap-share), the figure to compare across policies. Run it with a
// fixed count (-benchtime 20x): one 8 MiB copy on a slow queue takes a
// quarter of a second.
func BenchmarkPolicy(b *testing.B) {
	for _, rg := range policyRigs {
		for _, n := range []int{64 << 10, 1 << 20, 8 << 20} {
			for _, window := range []int{1, 8} {
				for p := RoundRobin; p <= Adaptive; p++ {
					name := fmt.Sprintf("%s/%s/window=%d/%s", rg.name, sizeName(n), window, p)
					b.Run(name, func(b *testing.B) {
						o := offloadAll()
						o.Policy = p
						e, _, _ := mixedEngine(b, rg.cbChans, rg.cbBW, rg.wqs, rg.dsaBW, o)
						src := make([][]byte, window)
						dst := make([][]byte, window)
						for i := range src {
							src[i], dst[i] = make([]byte, n), make([]byte, n)
							for _, buf := range [][]byte{src[i], dst[i]} {
								r, err := e.Register(buf)
								if err != nil {
									b.Fatal(err)
								}
								b.Cleanup(func() { r.Close() })
							}
						}
						cks := make([]*Cookie, window)
						wait := func(i int) {
							if cks[i] != nil {
								if err := e.Wait(context.Background(), cks[i]); err != nil {
									b.Fatal(err)
								}
								cks[i] = nil
							}
						}
						b.SetBytes(int64(n))
						b.ResetTimer()
						t0 := time.Now()
						for i := 0; i < b.N; i++ {
							k := i % window
							wait(k)
							ck, err := e.ICopy(dst[k], src[k])
							if err != nil {
								b.Fatal(err)
							}
							cks[k] = ck
						}
						for k := range cks {
							wait(k)
						}
						rate := float64(b.N) * float64(n) / time.Since(t0).Seconds()
						b.ReportMetric(rate/policyCap, "cap-share")
					})
				}
			}
		}
	}
}
