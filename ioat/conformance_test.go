package ioat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// backend is one platform the conformance suite runs on: the emulated
// CBDMA and DSA models always; real CBDMA (vfio) when present.
type backend struct {
	name string
	open func(t testing.TB, channels int) (devs []pci.Device, plat *testPlatform)
}

// testPlatform is the emulated platform behind a backend, nil for real
// devices: one of cb and dsa is set.
type testPlatform struct {
	cb  *emulated.CBDMA
	dsa *emulated.DSA
}

// IOMMU is the platform's DMA domain.
func (p *testPlatform) IOMMU() *emulated.IOMMU {
	if p.cb != nil {
		return p.cb.IOMMU()
	}
	return p.dsa.IOMMU()
}

// Stats returns the counters of CBDMA channel i, or of DSA function i
// (all its work queues; zero past the last function).
func (p *testPlatform) Stats(i int) emulated.ChannelStats {
	if p.cb != nil {
		return p.cb.Stats(i)
	}
	if i >= len(p.dsa.Functions()) {
		return emulated.ChannelStats{}
	}
	s := p.dsa.Stats(i)
	return emulated.ChannelStats{Descriptors: s.Descriptors, Bytes: s.Bytes, Errors: s.Errors, Interrupts: s.Interrupts, Violations: s.Violations, LastViolation: s.LastViolation}
}

// dsaBackend is the DSA model: one function whose engines, groups and WQs
// number the channels asked for, so the engine gets that many WQs.
func dsaBackend(o emulated.DSAOptions) backend {
	name := "emulated-dsa"
	if o.Scatter {
		name += "-scatter"
	}
	return backend{name: name, open: func(t testing.TB, channels int) ([]pci.Device, *testPlatform) {
		o := o
		o.Engines, o.Groups = channels, channels
		if o.WQs == 0 {
			o.WQs = max(channels, 8)
		}
		if o.MaxXferShift == 0 {
			o.MaxXferShift = 20
		}
		p, err := emulated.NewDSA(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for i := range p.Functions() {
				if s := p.Stats(i); s.Violations != 0 {
					t.Errorf("DSA %d: driver misprogrammed the device %d times, last: %s", i, s.Violations, s.LastViolation)
				}
			}
			if err := p.Close(); err != nil {
				t.Error(err)
			}
			if n := p.IOMMU().Live(); n != 0 {
				t.Errorf("%d DMA mappings leaked", n)
			}
		})
		return p.Devices(), &testPlatform{dsa: p}
	}}
}

// openQueue opens one queue of dev: a CBDMA channel, or one dedicated WQ
// of a DSA.
func openQueue(t testing.TB, dev pci.Device, o Options) Queue {
	t.Helper()
	if IsDSA(dev) {
		wqs, err := OpenDSA(dev, 1, o)
		if err != nil {
			t.Fatal(err)
		}
		return wqs[0]
	}
	c, err := Open(dev, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func emulatedBackend(o emulated.CBDMAOptions) backend {
	name := fmt.Sprintf("emulated-v%x", o.Version)
	if o.Scatter {
		name += "-scatter"
	}
	if o.HideArmed {
		name += "-noarmed"
	}
	return backend{name: name, open: func(t testing.TB, channels int) ([]pci.Device, *testPlatform) {
		o := o
		o.Channels = channels
		p, err := emulated.NewCBDMA(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for i := range p.Functions() {
				if s := p.Stats(i); s.Violations != 0 {
					t.Errorf("channel %d: driver misprogrammed the device %d times, last: %s", i, s.Violations, s.LastViolation)
				}
			}
			if err := p.Close(); err != nil {
				t.Error(err)
			}
			if n := p.IOMMU().Live(); n != 0 {
				t.Errorf("%d DMA mappings leaked", n)
			}
		})
		return p.Devices(), &testPlatform{cb: p}
	}}
}

func backends() []backend {
	bs := []backend{
		emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver32}),
		emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver33}),
		emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver34}),
		emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver33, Scatter: true, XferCap: 16}),
		// Channels first driven, and left, the way Linux, SPDK and DPDK
		// drive them (refseq_test.go), on the versions that exercise each
		// family's peculiarities: Linux's split accesses and CHANERR_INT
		// below 3.3, SPDK's 64-bit accesses on 3.2, DPDK's recovery on 3.4.
		// Linux and SPDK never wait for ARMED, so theirs are parts that
		// never report it.
		referenceBackend(familyLinux, emulated.CBDMAOptions{Version: hw.Ver32, HideArmed: true}),
		referenceBackend(familySPDK, emulated.CBDMAOptions{Version: hw.Ver32, HideArmed: true}),
		referenceBackend(familyDPDK, emulated.CBDMAOptions{Version: hw.Ver34}),
		dsaBackend(emulated.DSAOptions{}),
		dsaBackend(emulated.DSAOptions{Scatter: true, MaxXferShift: 16}),
	}
	return append(bs, realBackends()...)
}

// forEach runs f as a subtest on every backend.
func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// forEachCommon runs f on the default emulated backend and on every real
// one: for the heavier tests, which need not repeat on every model
// variant but must run on hardware when it is there.
func forEachCommon(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range append([]backend{backends()[1], dsaBackend(emulated.DSAOptions{})}, realBackends()...) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func newEngine(t testing.TB, b backend, channels int, o EngineOptions) (*Engine, *testPlatform) {
	devs, plat := b.open(t, channels)
	e, err := NewEngine(devs, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e, plat
}

func offloadAll() EngineOptions {
	o := DefaultEngineOptions()
	o.CPUThreshold = -1
	return o
}

func randBytes(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

// TestRandomCopies copies random sizes from 0 to 8 MiB between random
// offsets and checks every byte, and that nothing around the destination
// changed.
func TestRandomCopies(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e, _ := newEngine(t, b, 2, offloadAll())
		r := rand.New(rand.NewPCG(1, 2))
		const span = 9 << 20
		src := make([]byte, span)
		dst := make([]byte, span)
		randBytes(r, src)
		iters := 60
		if testing.Short() {
			iters = 15
		}
		for i := 0; i < iters; i++ {
			n := r.IntN(8<<20 + 1)
			if i%3 == 0 {
				n = r.IntN(9000) // many small ones around page and cap edges
			}
			so := r.IntN(span - n + 1)
			do := r.IntN(span - n + 1)
			randBytes(r, dst[max(0, do-64):min(span, do+n+64)])
			before := append([]byte(nil), dst[max(0, do-64):do]...)
			after := append([]byte(nil), dst[do+n:min(span, do+n+64)]...)
			if err := e.Copy(dst[do:do+n], src[so:so+n]); err != nil {
				t.Fatalf("copy %d bytes %d->%d: %v", n, so, do, err)
			}
			if !bytes.Equal(dst[do:do+n], src[so:so+n]) {
				t.Fatalf("copy %d bytes %d->%d: destination differs", n, so, do)
			}
			if !bytes.Equal(before, dst[max(0, do-64):do]) || !bytes.Equal(after, dst[do+n:min(span, do+n+64)]) {
				t.Fatalf("copy %d bytes %d->%d wrote outside the destination", n, so, do)
			}
		}
	})
}

// TestSplits checks copies that straddle the transfer cap and page and
// hugepage edges, from registered hugepage buffers.
func TestSplits(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e, _ := newEngine(t, b, 1, offloadAll())
		maxX := e.Queues()[0].MaxTransfer()
		sb, err := e.Alloc(6 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		db, err := e.Alloc(6 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		r := rand.New(rand.NewPCG(3, 4))
		randBytes(r, sb.Bytes())
		cases := []struct{ so, do, n int }{
			{0, 0, maxX}, {0, 0, maxX + 1}, {1, 3, maxX - 1}, {4095, 4097, 8192},
			{2<<20 - 10, 2<<20 - 3000, 20000}, {7, 2<<20 - 1, 3 * maxX / 2}, {0, 0, 4<<20 + 1}, {100, 50, 1},
		}
		for _, c := range cases {
			if err := e.Copy(db.Bytes()[c.do:c.do+c.n], sb.Bytes()[c.so:c.so+c.n]); err != nil {
				t.Fatalf("%+v: %v", c, err)
			}
			if !bytes.Equal(db.Bytes()[c.do:c.do+c.n], sb.Bytes()[c.so:c.so+c.n]) {
				t.Fatalf("%+v: destination differs", c)
			}
		}
	})
}

// TestFills checks fills of random sizes and offsets keep the pattern's
// phase across descriptor splits.
func TestFills(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e, _ := newEngine(t, b, 2, offloadAll())
		r := rand.New(rand.NewPCG(5, 6))
		buf := make([]byte, 5<<20)
		want := make([]byte, len(buf))
		for i := 0; i < 30; i++ {
			n := r.IntN(3<<20) + 1
			off := r.IntN(len(buf) - n + 1)
			pat := r.Uint64()
			if err := e.Fill(buf[off:off+n], pat); err != nil {
				t.Fatal(err)
			}
			hw.FillPattern(want[off:off+n], pat)
			if !bytes.Equal(buf[off:off+n], want[off:off+n]) {
				t.Fatalf("fill %d bytes at %d with %#x: wrong bytes", n, off, pat)
			}
		}
	})
}

// TestAllChannelsManyGoroutines drives every channel at once from many
// goroutines with every policy.
func TestAllChannelsManyGoroutines(t *testing.T) {
	forEachCommon(t, func(t *testing.T, b backend) { allChannelsManyGoroutines(t, b) })
}

func allChannelsManyGoroutines(t *testing.T, b backend) {
	for _, pol := range []Policy{RoundRobin, LeastLoaded, Stripe, Dedicated, Adaptive} {
		t.Run(pol.String(), func(t *testing.T) {
			o := offloadAll()
			o.Policy = pol
			o.StripeMin = 64 << 10
			e, _ := newEngine(t, b, 8, o)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 9))
					src := make([]byte, 512<<10)
					dst := make([]byte, len(src))
					randBytes(r, src)
					var cks []*Cookie
					var lastN [4]int
					for i := 0; i < 40; i++ {
						n := r.IntN(len(src)/4) + 1
						off := (i % 4) * (len(src) / 4)
						lastN[i%4] = n
						ck, err := e.ICopy(dst[off:off+n], src[off:off+n])
						if err != nil {
							errs <- err
							return
						}
						cks = append(cks, ck)
						if len(cks) == 4 {
							for _, ck := range cks {
								if err := e.Wait(context.Background(), ck); err != nil {
									errs <- err
									return
								}
							}
							cks = cks[:0]
						}
					}
					for _, ck := range cks {
						if err := e.Wait(context.Background(), ck); err != nil {
							errs <- err
							return
						}
					}
					for q, n := range lastN {
						off := q * (len(src) / 4)
						if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
							errs <- fmt.Errorf("goroutine %d: quarter %d differs", g, q)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			busy := 0
			for _, s := range e.ChannelStats() {
				if s.Ops > 1 {
					busy++
				}
			}
			if n := len(e.Queues()); busy < min(2, n) {
				t.Errorf("policy %v used %d of %d channels", pol, busy, n)
			}
		})
	}
}

// TestRingWrap pushes more than 65536 descriptors through a small ring, so
// both the ring index and the 16-bit DMACOUNT wrap many times.
func TestRingWrap(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		devs, plat := b.open(t, 1)
		c := openQueue(t, devs[0], Options{RingSize: 64})
		defer c.Close()
		buf := make([]byte, 64<<10)
		for i := range buf[:32<<10] {
			buf[i] = byte(i * 13)
		}
		m, err := devs[0].DMA().Map(buf)
		if err != nil {
			t.Fatal(err)
		}
		defer devs[0].DMA().Unmap(m)
		const total = 70000
		var out [64]Completion
		sent, got := 0, 0
		next := uint64(0)
		for got < total {
			for c.Free() > 0 && sent < total {
				off := (sent % 512) * 64
				if err := c.EnqueueCopy(m, 32<<10+off, m, off, 64, uint64(sent)); err != nil {
					t.Fatal(err)
				}
				sent++
				if sent%7 == 0 {
					c.Submit()
				}
			}
			c.Submit()
			n := c.Poll(out[:])
			if plat != nil {
				// A descriptor the driver completed must have run: a
				// status misread as a ring lap ahead fails here.
				if ran, done := plat.Stats(0).Descriptors, c.Stats().Completed; done > ran {
					t.Fatalf("driver completed %d descriptors, engine ran %d", done, ran)
				}
			}
			for _, cp := range out[:n] {
				if cp.Err != nil || cp.Tag != next {
					t.Fatalf("completion %+v, want tag %d and no error", cp, next)
				}
				next++
			}
			got += n
		}
		// Compare while the channel is open: every copy must have landed
		// once Poll reported it (under -race, a copy the driver reported
		// before the engine ran it shows up as a race with this read).
		if !bytes.Equal(buf[32<<10:], buf[:32<<10]) {
			t.Fatal("copies through the wrapped ring differ")
		}
		if s := c.Stats(); s.Completed < total {
			t.Fatalf("stats say %d completed", s.Completed)
		}
	})
}

// TestInjectedErrors makes the engine fail one descriptor in the middle of
// a batch with each kind of CHANERR: that request fails with a *ChanError
// naming the bits, the requests behind it are re-run and succeed, and the
// channel keeps working.
func TestInjectedErrors(t *testing.T) {
	bitsList := []uint32{hw.ErrSrcAddr, hw.ErrDstAddr, hw.ErrReadData, hw.ErrWriteData, hw.ErrDescLen, hw.ErrDescCtrl, hw.ErrChipsetData}
	for _, ver := range []uint8{hw.Ver32, hw.Ver33, hw.Ver34} {
		for _, bits := range bitsList {
			t.Run(fmt.Sprintf("v%x/%#x", ver, bits), func(t *testing.T) {
				devs, tp := emulatedBackend(emulated.CBDMAOptions{Version: ver}).open(t, 1)
				plat := tp.cb
				c, err := Open(devs[0], Options{RingSize: 256})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				src := make([]byte, 64<<10)
				dst := make([]byte, 64<<10)
				for i := range src {
					src[i] = byte(i)
				}
				sm, _ := devs[0].DMA().Map(src)
				dm, _ := devs[0].DMA().Map(dst)
				defer devs[0].DMA().Unmap(sm)
				defer devs[0].DMA().Unmap(dm)
				plat.InjectError(0, 5, bits)
				for i := 0; i < 10; i++ {
					if err := c.EnqueueCopy(dm, i*4096, sm, i*4096, 4096, uint64(i)); err != nil {
						t.Fatal(err)
					}
				}
				c.Submit()
				res := drain(t, c, 10)
				for i, r := range res {
					if i == 5 {
						var ce *ChanError
						if !errors.As(r.Err, &ce) || ce.ChanErr&bits == 0 {
							t.Fatalf("request 5: got %v, want a ChanError with %s", r.Err, hw.ErrString(bits))
						}
						continue
					}
					if r.Err != nil {
						t.Fatalf("request %d: %v", i, r.Err)
					}
					if !bytes.Equal(dst[i*4096:(i+1)*4096], src[i*4096:(i+1)*4096]) {
						t.Fatalf("request %d: data differs after recovery", i)
					}
				}
				if s := c.Stats(); s.Recoveries != 1 || s.Retried != 4 {
					t.Fatalf("stats %+v: want 1 recovery and 4 retried descriptors", s)
				}
				// The channel still works.
				if err := c.EnqueueCopy(dm, 0, sm, 60<<10, 4096, 99); err != nil {
					t.Fatal(err)
				}
				c.Submit()
				if r := drain(t, c, 1); r[0].Err != nil || !bytes.Equal(dst[:4096], src[60<<10:]) {
					t.Fatalf("copy after recovery: %v", r[0].Err)
				}
			})
		}
	}
}

func drain(t testing.TB, c Queue, n int) []Completion {
	t.Helper()
	out := make([]Completion, n)
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < n {
		got += c.Poll(out[got:])
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests completed in 10s", got, n)
		}
	}
	return out
}

// TestUnmappedFault copies from memory the device cannot reach: the
// request fails with ErrDMAFault (as an IOMMU fault does), the IOMMU
// records the fault, and the engine recovers.
func TestUnmappedFault(t *testing.T) {
	// Safe on hardware: the real backend uses an IOMMU container, which
	// refuses the read (Linux's VFIO selftest does the same).
	forEachCommon(t, unmappedFault)
}

func unmappedFault(t *testing.T, b backend) {
	devs, plat := b.open(t, 1)
	c := openQueue(t, devs[0], Options{})
	defer c.Close()
	buf := make([]byte, 8192)
	m, _ := devs[0].DMA().Map(buf)
	gone := make([]byte, 4096)
	gm, _ := devs[0].DMA().Map(gone)
	devs[0].DMA().Unmap(gm) // gm now names IOVAs nobody maps
	defer devs[0].DMA().Unmap(m)
	if err := c.EnqueueCopy(m, 0, gm, 0, 4096, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.EnqueueCopy(m, 4096, m, 0, 4096, 2); err != nil {
		t.Fatal(err)
	}
	c.Submit()
	res := drain(t, c, 2)
	if !errors.Is(res[0].Err, ErrDMAFault) {
		t.Fatalf("copy from an unmapped IOVA: %v, want ErrDMAFault", res[0].Err)
	}
	if res[1].Err != nil {
		t.Fatalf("the copy behind the fault: %v", res[1].Err)
	}
	if plat == nil {
		return
	}
	if n, last := plat.IOMMU().Faults(); n == 0 || last.IOVA != gm.Segments[0].IOVA {
		t.Fatalf("IOMMU faults %d, last %+v", n, last)
	}
}

// TestCloseDuringTraffic closes the engine while goroutines keep copying:
// every request either completes or fails with ErrClosed, nothing hangs or
// panics, and the engine does no DMA after Close.
func TestCloseDuringTraffic(t *testing.T) {
	forEachCommon(t, closeDuringTraffic)
}

func closeDuringTraffic(t *testing.T, b backend) {
	e, plat := newEngine(t, b, 4, offloadAll())
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := make([]byte, 256<<10)
			dst := make([]byte, len(src))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ck, err := e.ICopy(dst, src)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("ICopy: %v", err)
					}
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = e.Wait(ctx, ck)
				cancel()
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Wait: %v", err)
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	// Close may report the cached mappings that cookies not yet waited
	// for still hold; any other error is a failure.
	if err := e.Close(); err != nil && !errors.Is(err, ErrClosed) && !strings.Contains(err.Error(), "still had requests outstanding") {
		t.Errorf("close: %v", err)
	}
	if plat == nil {
		close(stop)
		wg.Wait()
		return
	}
	var before [4]uint64
	for i := range before {
		before[i] = plat.Stats(i).Bytes
	}
	time.Sleep(20 * time.Millisecond)
	for i := range before {
		if after := plat.Stats(i).Bytes; after != before[i] {
			t.Errorf("channel %d moved %d bytes after Close", i, after-before[i])
		}
	}
	close(stop)
	wg.Wait()
}

// TestInterruptWait sleeps on the channel interrupt instead of spinning
// and still sees every completion.
func TestInterruptWait(t *testing.T) {
	o := offloadAll()
	o.Channel.Interrupts = true
	o.SpinWait = time.Nanosecond
	for _, ver := range []uint8{hw.Ver32, hw.Ver33, hw.Ver34} {
		t.Run(fmt.Sprintf("v%x", ver), func(t *testing.T) {
			b := emulatedBackend(emulated.CBDMAOptions{Version: ver, Bandwidth: 200 << 20})
			e, plat := newEngine(t, b, 2, o)
			src := make([]byte, 1<<20)
			dst := make([]byte, 1<<20)
			src[12345] = 7
			for i := 0; i < 10; i++ {
				if err := e.Copy(dst, src); err != nil {
					t.Fatal(err)
				}
			}
			if dst[12345] != 7 {
				t.Fatal("copy lost")
			}
			irqs := plat.Stats(0).Interrupts + plat.Stats(1).Interrupts
			if irqs == 0 {
				t.Fatal("no interrupt was delivered: waits spun instead of sleeping")
			}
		})
	}
	for _, b := range realBackends() {
		t.Run(b.name, func(t *testing.T) {
			e, _ := newEngine(t, b, 2, o)
			src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
			for i := 0; i < 10; i++ {
				if err := e.Copy(dst, src); err != nil {
					t.Fatal(err)
				}
			}
			woke := uint64(0)
			for _, s := range e.ChannelStats() {
				woke += s.Interrupts
			}
			t.Logf("%d waits woke on an interrupt", woke)
		})
	}
}

// TestCPUPaths checks the requests the CPU handles: below the threshold,
// overlapping buffers, and the hybrid head.
func TestCPUPaths(t *testing.T) { forEachCommon(t, cpuPaths) }

func cpuPaths(t *testing.T, b backend) {
	o := DefaultEngineOptions()
	o.HybridHead = 64 << 10
	o.HybridMin = 256 << 10
	e, _ := newEngine(t, b, 2, o)
	small := []byte("hello, engine")
	out := make([]byte, len(small))
	if err := e.Copy(out, small); err != nil || string(out) != string(small) {
		t.Fatalf("small copy: %v %q", err, out)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	want := append([]byte(nil), buf[:512<<10]...)
	if err := e.Copy(buf[100:100+512<<10], buf[:512<<10]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[100:100+512<<10], want) {
		t.Fatal("overlapping copy is not a memmove")
	}
	if e.CPUCopies() != 2 {
		t.Fatalf("CPU copies %d, want 2", e.CPUCopies())
	}
	src := make([]byte, 1<<20)
	dst := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 3)
	}
	if err := e.Copy(dst, src); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("hybrid copy: %v", err)
	}
	if cs := e.CacheStats(); cs.Misses == 0 {
		t.Fatalf("cache %+v: the hybrid copy did not use the engine", cs)
	}
}

// TestBadRequests checks argument errors.
func TestBadRequests(t *testing.T) { forEachCommon(t, badRequests) }

func badRequests(t *testing.T, b backend) {
	e, _ := newEngine(t, b, 1, offloadAll())
	if _, err := e.ICopy(make([]byte, 10), make([]byte, 20)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("short destination: %v", err)
	}
	c := e.Queues()[0]
	m := &pci.Mapping{Buf: make([]byte, 10), Segments: []pci.Segment{{IOVA: 1 << 40, Len: 10}}}
	if err := c.EnqueueCopy(m, 5, m, 0, 10, 0); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("copy past the mapping: %v", err)
	}
	dev := devOf(c)
	if _, err := Open(fakeNotCBDMA{dev}, Options{}); !errors.Is(err, ErrNotCBDMA) {
		t.Fatalf("open a non-CBDMA device: %v", err)
	}
	if _, err := OpenDSA(fakeNotCBDMA{dev}, 0, Options{}); !errors.Is(err, ErrNotCBDMA) {
		t.Fatalf("open a non-DSA device as DSA: %v", err)
	}
	if _, err := Open(dev, Options{RingSize: 100}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("ring size 100: %v", err)
	}
}

// devOf returns the PCI function behind a queue.
func devOf(q Queue) pci.Device {
	if c, ok := q.(*Channel); ok {
		return c.dev
	}
	return q.(*WQ).d.dev
}

// fakeNotCBDMA reports another vendor's ID.
type fakeNotCBDMA struct{ pci.Device }

func (f fakeNotCBDMA) ReadConfig(off int, b []byte) error {
	if err := f.Device.ReadConfig(off, b); err != nil {
		return err
	}
	if off == 0 && len(b) >= 2 {
		b[0], b[1] = 0xE4, 0x14
	}
	return nil
}

// TestReopen opens and closes a channel many times, as Linux's VFIO
// selftest does: each Open must find the channel reusable.
func TestReopen(t *testing.T) {
	for _, b := range append([]backend{backends()[0], dsaBackend(emulated.DSAOptions{})}, realBackends()...) {
		t.Run(b.name, func(t *testing.T) { reopen(t, b) })
	}
}

func reopen(t *testing.T, b backend) {
	devs, _ := b.open(t, 1)
	for i := 0; i < 10; i++ {
		c := openQueue(t, devs[0], Options{RingSize: 16})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaitersShareInterrupt: one interrupt that completes the requests of
// several waiters wakes them all, not only the one that read the eventfd.
// The channel is suspended while eight waiters go to sleep on its vector,
// then resumed, and completes the eight copies back to back (their
// signals add up in one eventfd count). With the bound of one sleep raised
// to a minute, a waiter left asleep after its copy completed fails the
// test instead of costing a millisecond.
// suspendedInterruptEngine returns an engine of one emulated channel whose
// waits sleep on its interrupt at once, for up to a minute (a lost sleep
// lasts, and a test's guard sees it), with the channel suspended; cmd
// writes CHANCMD (hw.CmdResume lets the copies run).
func suspendedInterruptEngine(t *testing.T) (*Engine, func(uint8)) {
	o := offloadAll()
	o.Channel.Interrupts = true
	o.Channel.Watchdog = time.Minute
	o.SpinWait = time.Nanosecond
	e, _ := newEngine(t, emulatedBackend(emulated.CBDMAOptions{}), 1, o)
	e.irqWait = time.Minute
	ec := e.chans[0]
	cmd := func(v uint8) {
		ec.mu.Lock()
		ec.ch.(*Channel).regs.Write8(ec.ch.(*Channel).base+hw.ChanCmd, v)
		ec.mu.Unlock()
	}
	cmd(hw.CmdSuspend)
	return e, cmd
}

// TestWaitAfterItsInterruptWasTaken: a waiter whose copy completes after
// it looked and before it sleeps, and whose completion's interrupt another
// waiter took meanwhile, does not sleep on with its copy done.
func TestWaitAfterItsInterruptWasTaken(t *testing.T) {
	e, cmd := suspendedInterruptEngine(t)
	src, dst := bytes.Repeat([]byte{7}, 8<<10), make([]byte, 8<<10)
	ck, err := e.ICopy(dst, src)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	beforeSleep = func(pending *echan) {
		once.Do(func() {
			// What other waiters' sleeps do meanwhile: the interrupt
			// armed, the copy completes, every interrupt is taken.
			cmd(hw.CmdResume)
			irq := pending.ch.Interrupt()
			for i := 0; ; i++ {
				pending.mu.Lock()
				pending.ch.rearm()
				pending.mu.Unlock()
				irq.WaitTimeout(100 * time.Millisecond)
				if done, _ := e.Check(ck); done {
					break
				}
				if i == 600 {
					t.Error("the copy never completed")
					return
				}
			}
			irq.Poll()
		})
	}
	defer func() { beforeSleep = nil }()
	waited := make(chan error, 1)
	go func() { waited <- e.Wait(context.Background(), ck) }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait slept on with its copy done: its interrupt had been taken before it slept")
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("wrong bytes")
	}
}

func TestWaitersShareInterrupt(t *testing.T) {
	e, cmd := suspendedInterruptEngine(t)
	ec := e.chans[0]
	const n = 8
	// The waits have no deadline of their own, which would end a lost
	// sleep and let the wait find its copy done: the test's guard below
	// tells a waiter that stayed asleep.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srcs, dsts := make([][]byte, n), make([][]byte, n)
	errs := make(chan error, n)
	for i := range n {
		srcs[i], dsts[i] = bytes.Repeat([]byte{byte(i + 1)}, 8<<10), make([]byte, 8<<10)
		ck, err := e.ICopy(dsts[i], srcs[i])
		if err != nil {
			t.Fatal(err)
		}
		go func() { errs <- e.Wait(ctx, ck) }()
	}
	deadline := time.Now().Add(time.Minute)
	for ec.asleep.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d waiters asleep on the suspended channel's interrupt", ec.asleep.Load(), n)
		}
		time.Sleep(10 * time.Microsecond)
	}
	cmd(hw.CmdResume)
	guard := time.After(time.Minute)
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("wait %d of %d: %v", i+1, n, err)
			}
		case <-guard:
			t.Fatalf("%d of %d waits returned in a minute: the others stayed asleep after the interrupt that completed their copies", i, n)
		}
	}
	for i := range n {
		if !bytes.Equal(dsts[i], srcs[i]) {
			t.Fatalf("copy %d: wrong bytes", i)
		}
	}
}

// TestWaitWokenByItsCompletion: a wait asleep on the channel's interrupt
// is woken by its copy's completion, not by its sleep's bound, even when
// the waiter shares its one processor (GOMAXPROCS 1, a rank bound to one
// CPU) with the emulated engine's goroutine polling for its next doorbell.
// The model's interrupt used to reach the waiter through the eventfd and
// Go's network poller, which the runtime looks at only when a processor
// has nothing else to run: behind the polling engine, every sleep lasted
// its whole bound (a millisecond per engine message of an mxbench
// ping-pong on one CPU per rank).
func TestWaitWokenByItsCompletion(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	o := offloadAll()
	o.Channel.Interrupts = true
	o.Channel.Watchdog = time.Minute
	o.SpinWait = time.Nanosecond
	// The channel polls for its doorbell throughout the test, as it does
	// for 250µs after each batch by default.
	e, _ := newEngine(t, emulatedBackend(emulated.CBDMAOptions{Spin: time.Minute}), 1, o)
	ec := e.chans[0]
	cmd := func(v uint8) {
		ec.mu.Lock()
		ec.ch.(*Channel).regs.Write8(ec.ch.(*Channel).base+hw.ChanCmd, v)
		ec.mu.Unlock()
	}
	// The copy runs once its waiter is about to sleep: it completes while
	// the waiter sleeps (the engine runs only when the waiter leaves it
	// the processor).
	beforeSleep = func(*echan) { cmd(hw.CmdResume) }
	defer func() { beforeSleep = nil }()
	const copies = 20
	for i := range copies {
		cmd(hw.CmdSuspend)
		src, dst := bytes.Repeat([]byte{byte(i + 1)}, 64<<10), make([]byte, 64<<10)
		ck, err := e.ICopy(dst, src)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(context.Background(), ck); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("copy %d: wrong bytes", i)
		}
	}
	s := e.ChannelStats()[0]
	if s.Interrupts == 0 {
		t.Fatal("no wait slept on the interrupt: the test did not test the wake-up")
	}
	// A sleep woken at once can still outlast its bound if the machine
	// takes the processor away for that long in between (under load):
	// a few may; held back, every one did.
	if s.BoundWakes > copies/4 {
		t.Fatalf("%d of %d waits slept to their bound (a millisecond) with their copy done: the completion's interrupt did not wake its waiter", s.BoundWakes, copies)
	}
}
