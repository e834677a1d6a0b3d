package ioat

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/pci"
)

// openDSAWQ opens one WQ of a fresh DSA model and maps a 64 KiB source
// (bytes i) and destination.
func openDSAWQ(t testing.TB, o emulated.DSAOptions, qo Options) (*WQ, *emulated.DSA, *pci.Mapping, *pci.Mapping) {
	devs, plat := dsaBackend(o).open(t, 1)
	wqs, err := OpenDSA(devs[0], 1, qo)
	if err != nil {
		t.Fatal(err)
	}
	q := wqs[0]
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	src := make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i)
	}
	sm, _ := devs[0].DMA().Map(src)
	dm, _ := devs[0].DMA().Map(make([]byte, 64<<10))
	t.Cleanup(func() {
		devs[0].DMA().Unmap(sm)
		devs[0].DMA().Unmap(dm)
	})
	return q, plat.dsa, sm, dm
}

// TestDSAInjectedStatus fails one member of a batch with each kind of
// status: its request fails with a *DSAError that matches the right
// sentinel, the requests around it succeed, and the WQ keeps working.
func TestDSAInjectedStatus(t *testing.T) {
	cases := []struct {
		status uint8
		want   error
	}{
		{dsahw.StatusPageFault, ErrDMAFault},
		{dsahw.StatusXlatFail, ErrDMAFault},
		{dsahw.StatusBadOpcode, ErrDescriptor},
		{dsahw.StatusInvalidFlags, ErrDescriptor},
		{dsahw.StatusHWErr1, ErrDescriptor},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%#x", c.status), func(t *testing.T) {
			q, plat, sm, dm := openDSAWQ(t, emulated.DSAOptions{}, Options{RingSize: 64})
			// Executed from now: the batch descriptor, then its members.
			plat.InjectStatus(0, 6, c.status)
			for i := 0; i < 10; i++ {
				if err := q.EnqueueCopy(dm, i*4096, sm, i*4096, 4096, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			q.Submit()
			res := drain(t, q, 10)
			for i, r := range res {
				if i == 5 {
					var de *DSAError
					if !errors.As(r.Err, &de) || de.Status != c.status || !errors.Is(r.Err, c.want) {
						t.Fatalf("request 5: %v, want a DSAError with status %s matching %v", r.Err, dsahw.StatusString(c.status), c.want)
					}
					if c.status == dsahw.StatusPageFault && (de.Bytes != 2048 || de.Fault != sm.Segments[0].IOVA+5*4096+2048) {
						t.Fatalf("page fault after %d bytes at %#x, want 2048 at the source's half", de.Bytes, de.Fault)
					}
					continue
				}
				if r.Err != nil {
					t.Fatalf("request %d: %v", i, r.Err)
				}
				if !bytes.Equal(dm.Buf[i*4096:(i+1)*4096], sm.Buf[i*4096:(i+1)*4096]) {
					t.Fatalf("request %d: data differs", i)
				}
			}
			if err := q.EnqueueCopy(dm, 0, sm, 60<<10, 4096, 99); err != nil {
				t.Fatal(err)
			}
			q.Submit()
			if r := drain(t, q, 1); r[0].Err != nil || !bytes.Equal(dm.Buf[:4096], sm.Buf[60<<10:]) {
				t.Fatalf("copy after the failure: %v", r[0].Err)
			}
		})
	}
	t.Run("single", func(t *testing.T) {
		q, plat, sm, dm := openDSAWQ(t, emulated.DSAOptions{}, Options{RingSize: 64})
		plat.InjectStatus(0, 0, dsahw.StatusPageFault)
		if err := q.EnqueueCopy(dm, 0, sm, 0, 8192, 1); err != nil {
			t.Fatal(err)
		}
		q.Submit()
		if r := drain(t, q, 1); !errors.Is(r[0].Err, ErrDMAFault) {
			t.Fatalf("single descriptor: %v, want ErrDMAFault", r[0].Err)
		}
	})
}

// TestDSAQueueLimit submits far more than the WQ holds at once: the
// driver keeps at most the WQ's size posted (the model drops and records
// any descriptor past it) and posts the rest as entries free.
func TestDSAQueueLimit(t *testing.T) {
	q, plat, sm, dm := openDSAWQ(t, emulated.DSAOptions{TotalWQSize: 4, WQs: 4, MaxBatchShift: 1}, Options{RingSize: 256})
	const n = 200
	for i := 0; i < n; i++ {
		if err := q.EnqueueCopy(dm, (i%16)*4096, sm, (i%16)*4096, 4096, uint64(i)); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			q.Submit()
		}
	}
	q.Submit()
	for i, r := range drain(t, q, n) {
		if r.Err != nil || r.Tag != uint64(i) {
			t.Fatalf("completion %d: %+v", i, r)
		}
	}
	if s := plat.Stats(0); s.Dropped != 0 {
		t.Fatalf("%d descriptors dropped: %s", s.Dropped, s.LastViolation)
	}
	if !bytes.Equal(dm.Buf, sm.Buf) {
		t.Fatal("data differs")
	}
}

// TestDSAInterruptWait waits on the WQs' completion vectors.
func TestDSAInterruptWait(t *testing.T) {
	o := offloadAll()
	o.Channel.Interrupts = true
	o.SpinWait = time.Nanosecond
	e, plat := newEngine(t, dsaBackend(emulated.DSAOptions{}), 2, o)
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	src[777] = 9
	for i := 0; i < 10; i++ {
		if err := e.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
	}
	if dst[777] != 9 {
		t.Fatal("copy lost")
	}
	if plat.Stats(0).Interrupts == 0 {
		t.Fatal("no completion interrupt was delivered")
	}
}

// TestDSANoAllocs checks that enqueue, submit and poll allocate nothing.
func TestDSANoAllocs(t *testing.T) {
	q, _, sm, dm := openDSAWQ(t, emulated.DSAOptions{}, Options{RingSize: 256})
	var out [64]Completion
	tag := uint64(0)
	allocs := testing.AllocsPerRun(50, func() {
		for i := 0; i < 32; i++ {
			if err := q.EnqueueCopy(dm, i*64, sm, i*64, 64, tag); err != nil {
				t.Fatal(err)
			}
			tag++
		}
		q.Submit()
		for got := 0; got < 32; {
			got += q.Poll(out[:])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch of 32", allocs)
	}
}

// TestDSATakeOver: a device left enabled by another driver is refused,
// unless taken over.
func TestDSATakeOver(t *testing.T) {
	devs, _ := dsaBackend(emulated.DSAOptions{}).open(t, 1)
	wqs, err := OpenDSA(devs[0], 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDSA(devs[0], 1, Options{}); !errors.Is(err, pci.ErrBusy) {
		t.Fatalf("second open: %v, want ErrBusy", err)
	}
	if err := wqs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDSA(devs[0], 9, Options{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("9 WQs on a 1-engine device: %v", err)
	}
	wqs, err = OpenDSA(devs[0], 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wqs[0].Close()
}

// BenchmarkDSABatch32 measures one WQ's descriptor rate: batches of 32
// 64-byte moves, completions reaped from the records. It reports the
// driver's cost to build and post a descriptor (submit-ns/desc), to reap
// one (reap-ns/desc; polls that found nothing are waiting, not counted),
// the driver's share as a rate (driver-desc/s: what one WQ sustains if
// the device took no time) and the rate through the
// model (desc/s).
// BenchmarkDSABatch32 measures the driver's share of a descriptor on the
// DSA model at batch 32: enqueue 32 copies of 64 bytes, Submit (one batch
// descriptor, one portal write), repeated while the ring has room; then,
// untimed, wait for the model to complete the window; then reap it all
// with Poll. submit-ns/desc and reap-ns/desc are the CPU time of the
// benchmark's own thread in those two phases (CLOCK_THREAD_CPUTIME_ID,
// the goroutine locked to its thread), so neither the model's engine
// goroutine nor time the thread spent descheduled on a loaded machine
// counts; what does count of the model is its portal write handler, one
// call per 32 descriptors, run on the submitting thread as MOVDIR64B's
// cost is the CPU's. driver-desc/s is 1e9 / (submit + reap). desc/s is
// end to end, with the windows serialised (no overlap of submission and
// execution), so it understates what the model sustains.
func BenchmarkDSABatch32(b *testing.B) {
	q, _, sm, dm := openDSAWQ(b, emulated.DSAOptions{}, Options{RingSize: 4096})
	const batch = 32
	out := make([]Completion, 4096)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var submitNs, reapNs int64
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		t0 := threadCPU()
		for q.Free() >= batch && sent < b.N {
			for i := 0; i < batch; i++ {
				off := (sent % 1024) * 64
				if err := q.EnqueueCopy(dm, off, sm, off, 64, uint64(sent)); err != nil {
					b.Fatal(err)
				}
				sent++
			}
			q.Submit()
		}
		t1 := threadCPU()
		submitNs += t1 - t0
		// Untimed: the model executes the window. Units complete in
		// order (the model's engine serves them in turn), so the last
		// one's record says the window is done.
		last := q.urecs[((q.uHead-1)%q.wqSize)*dsahw.ComplSize:]
		for w := startWait(10 * time.Second); load32(last)&dsahw.ComplStatusMask == 0; {
			if w.expired() {
				b.Fatal("the model did not complete the window")
			}
			runtime.Gosched()
		}
		t2 := threadCPU()
		for q.Outstanding() > 0 {
			if q.Poll(out) == 0 {
				b.Fatal("a completed window left requests unreaped")
			}
		}
		reapNs += threadCPU() - t2
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "desc/s")
	sub, rp := float64(submitNs)/float64(b.N), float64(reapNs)/float64(b.N)
	b.ReportMetric(sub, "submit-ns/desc")
	b.ReportMetric(rp, "reap-ns/desc")
	b.ReportMetric(1e9/(sub+rp), "driver-desc/s")
}

// threadCPU is the CPU time of the calling thread, in nanoseconds.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// TestDSAWatchdog: a posting whose record never comes fails its requests
// with ErrStalled once the watchdog time has passed, not before; the WQ is
// aborted, and it keeps working. The watchdog reads a clock the test
// moves, and it moves it only after the model has swallowed the posting:
// an abort before that would discard the posting unexecuted and leave the
// injected hang for the copy that follows, as a loaded machine that
// delayed the model's engine past a wall-clock watchdog did.
func TestDSAWatchdog(t *testing.T) {
	const watchdog = 20 * time.Millisecond
	q, plat, sm, dm := openDSAWQ(t, emulated.DSAOptions{}, Options{RingSize: 64, Watchdog: watchdog})
	clock := time.Unix(1, 0)
	q.now = func() time.Time { return clock }
	base := plat.Stats(0).Descriptors
	plat.InjectHang(0, 0)
	for i := 0; i < 3; i++ {
		if err := q.EnqueueCopy(dm, i*4096, sm, i*4096, 4096, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	q.Submit()
	// The first look at the unfinished posting starts the watchdog's
	// clock. Until the model has taken the posting, and for enough looks
	// after it for both of the watchdog's checks (SWERR every 1024, the
	// clock every 64) just short of the watchdog time, nothing fails.
	out := make([]Completion, 3)
	poll := func() {
		t.Helper()
		if n := q.Poll(out); n != 0 {
			t.Fatalf("%d requests completed before the watchdog time: %v", n, out[0].Err)
		}
	}
	poll()
	clock = clock.Add(watchdog - time.Nanosecond)
	deadline := time.Now().Add(10 * time.Second)
	for plat.Stats(0).Descriptors == base {
		if time.Now().After(deadline) {
			t.Fatal("the model took no descriptor of the posting in 10s")
		}
		poll()
		runtime.Gosched()
	}
	for i := 0; i < 4096; i++ {
		poll()
	}
	if s := q.Stats(); s.Watchdogs != 0 {
		t.Fatalf("stats %+v: the watchdog fired before its time", s)
	}
	clock = clock.Add(time.Nanosecond)
	for i, r := range drain(t, q, 3) {
		if !errors.Is(r.Err, ErrStalled) {
			t.Fatalf("request %d: %v, want ErrStalled", i, r.Err)
		}
	}
	if s := q.Stats(); s.Watchdogs != 1 {
		t.Fatalf("stats %+v, want one watchdog", s)
	}
	if err := q.EnqueueCopy(dm, 0, sm, 8192, 4096, 9); err != nil {
		t.Fatal(err)
	}
	q.Submit()
	if r := drain(t, q, 1); r[0].Err != nil || !bytes.Equal(dm.Buf[:4096], sm.Buf[8192:12288]) {
		t.Fatalf("copy after the watchdog: %v", r[0].Err)
	}
}

// TestDSAChannelMask: ChannelMask picks work queues of a DSA as it picks
// channels of a CBDMA function: the engine drives only the WQs it names
// and the device keeps working; a mask naming none of them is refused and
// leaves the device free for the next engine.
func TestDSAChannelMask(t *testing.T) {
	devs, plat := dsaBackend(emulated.DSAOptions{}).open(t, 4)
	o := offloadAll()
	o.WQs = 4
	o.ChannelMask = 1<<1 | 1<<3
	e, err := NewEngine(devs, o)
	if err != nil {
		t.Fatal(err)
	}
	qs := e.Queues()
	if len(qs) != 2 || qs[0].Info().Index != 1 || qs[1].Info().Index != 3 {
		t.Fatalf("mask 0b1010 drives %d queues, want WQs 1 and 3", len(qs))
	}
	if n := len(e.Channels()); n != 0 {
		t.Fatalf("a DSA engine reports %d CBDMA channels, want 0", n)
	}
	src, dst := make([]byte, 256<<10), make([]byte, 256<<10)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for i := 0; i < 4; i++ {
		clear(dst)
		if err := e.Copy(dst, src); err != nil || !bytes.Equal(dst, src) {
			t.Fatalf("copy %d: %v", i, err)
		}
	}
	for i, s := range e.ChannelStats() {
		if s.Ops == 0 {
			t.Errorf("WQ %d completed nothing: round-robin should use both", qs[i].Info().Index)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if plat.dsa.Stats(0).Violations != 0 {
		t.Fatalf("violations: %s", plat.dsa.Stats(0).LastViolation)
	}

	o.ChannelMask = 1 << 5
	if _, err := NewEngine(devs, o); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("mask naming no WQ: %v, want ErrBadRequest", err)
	}
	o.ChannelMask = 0
	e, err = NewEngine(devs, o)
	if err != nil {
		t.Fatalf("open after a refused mask: %v (the device should have been reset)", err)
	}
	if n := len(e.Queues()); n != 4 {
		t.Errorf("mask 0 drives %d WQs, want 4", n)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
