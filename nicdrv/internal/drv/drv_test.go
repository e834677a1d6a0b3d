package drv_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/pci"
)

func newPools(t *testing.T, o drv.PoolsOptions) *drv.Pools {
	t.Helper()
	plat, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plat.Close() })
	p, err := drv.NewPools(plat.IOMMU(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// complete checks that every slot from from up to (not including) to holds
// a buffer in each array.
func complete(t *testing.T, f *drv.RxFill, from, to uint32) {
	t.Helper()
	for s := from; s != to; s = (s + 1) % f.Size {
		for a, bufs := range f.Bufs {
			if bufs[s] == nil {
				t.Errorf("slot %d, before the new tail %d, has no buffer in array %d", s, to, a)
			}
		}
	}
}

// RxFill fills slots in ring order from each array's pool, and stops at
// the first slot a short pool cannot complete (giving back what it took
// beyond it): every slot before the tail it returns is complete.
func TestRxFill(t *testing.T) {
	p := newPools(t, drv.PoolsOptions{Queues: 1, Buffers: 6, Headers: 8})
	var noBuf atomic.Uint64
	f := drv.NewRxFill(8, []*nicdrv.Pool{p.Packet[0], p.Header[0]}, &noBuf)
	tail := f.Fill(5, 4) // slots 5, 6, 7, 0, 1, 2, 3: 7 slots, 6 packet buffers
	if tail != 3 || noBuf.Load() != 1 {
		t.Fatalf("Fill(5, 4) with 6 packet buffers for 7 slots: tail %d, short %d; want 3, 1", tail, noBuf.Load())
	}
	complete(t, f, 5, 3)
	if f.Bufs[1][3] != nil || f.Bufs[0][3] != nil {
		t.Error("slot 3, which found no packet buffer, holds a buffer")
	}
	if p.Packet[0].Available() != 0 || p.Header[0].Available() != 2 {
		t.Errorf("%d packet and %d header buffers left, want 0 and 2 (the one taken for slot 3 given back)", p.Packet[0].Available(), p.Header[0].Available())
	}
	// A packet buffer back: slot 3 completes.
	b := f.Bufs[0][5]
	f.Bufs[0][5] = nil
	if err := p.Packet[0].Free(b); err != nil {
		t.Fatal(err)
	}
	if tail = f.Fill(3, 4); tail != 4 {
		t.Fatalf("Fill(3, 4): tail %d, want 4", tail)
	}
	complete(t, f, 3, 4)
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	if p.Packet[0].Available() != 6 || p.Header[0].Available() != 8 {
		t.Errorf("after Release: %d and %d free", p.Packet[0].Available(), p.Header[0].Available())
	}
}

// With one pool, RxFill keeps the buffers slots still hold, fills the
// empty ones in ring order, stops at the first it cannot fill, counts only
// what the empty slots lacked, and gives back the buffers it took beyond
// what the empty slots needed.
func TestRxFillOnePool(t *testing.T) {
	p := newPools(t, drv.PoolsOptions{Queues: 1, Buffers: 5})
	var noBuf atomic.Uint64
	f := drv.NewRxFill(8, []*nicdrv.Pool{p.Packet[0]}, &noBuf)
	if tail := f.Fill(6, 1); tail != 1 || noBuf.Load() != 0 {
		t.Fatalf("Fill(6, 1): tail %d, short %d; want 1, 0", tail, noBuf.Load())
	}
	complete(t, f, 6, 1)
	kept := f.Bufs[0][7]
	b6, b0 := f.Bufs[0][6], f.Bufs[0][0]
	f.Bufs[0][6], f.Bufs[0][0] = nil, nil // slot 7 keeps its buffer
	if err := p.Packet[0].Free(b6, b0); err != nil {
		t.Fatal(err)
	}
	// Slots 6..4 (7 slots, 6 empty) with 4 buffers free.
	tail := f.Fill(6, 5)
	if f.Bufs[0][7] != kept {
		t.Error("slot 7's buffer was replaced")
	}
	if tail != 3 {
		t.Fatalf("Fill(6, 5) with 4 free for 6 empty slots: tail %d, want 3", tail)
	}
	complete(t, f, 6, 3)
	if noBuf.Load() != 2 {
		t.Errorf("short %d, want 2 (slots 3 and 4)", noBuf.Load())
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	if p.Packet[0].Available() != 5 {
		t.Errorf("after Release: %d free, want 5", p.Packet[0].Available())
	}
}

// With one pool and every slot of the run empty, a short pool fills the
// run's first slots in ring order, across the ring's end, and leaves the
// rest empty and counted.
func TestRxFillEmptyShort(t *testing.T) {
	for _, c := range []struct {
		free      int
		tail, nob uint32
	}{
		{free: 1, tail: 7, nob: 5}, // short in the run before the ring's end
		{free: 3, tail: 1, nob: 3}, // short after it
		{free: 6, tail: 4, nob: 0},
	} {
		p := newPools(t, drv.PoolsOptions{Queues: 1, Buffers: c.free})
		var noBuf atomic.Uint64
		f := drv.NewRxFill(8, []*nicdrv.Pool{p.Packet[0]}, &noBuf)
		if tail := f.Fill(6, 4); tail != c.tail || noBuf.Load() != uint64(c.nob) {
			t.Errorf("Fill(6, 4) with %d free: tail %d, short %d; want %d, %d", c.free, tail, noBuf.Load(), c.tail, c.nob)
		}
		complete(t, f, 6, c.tail)
		for s := c.tail; s != 4; s = (s + 1) % 8 {
			if f.Bufs[0][s] != nil {
				t.Errorf("%d free: slot %d, past the tail %d, holds a buffer", c.free, s, c.tail)
			}
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	}
}

// TxSlots asks for a write-back every RSEvery descriptors and on request,
// and reclaims exactly the slots up to a mark the NIC reports done.
func TestTxSlots(t *testing.T) {
	p := newPools(t, drv.PoolsOptions{Queues: 1, Buffers: 16})
	done := map[uint32]bool{}
	s := drv.NewTxSlots(16, p.Packet[0], func(m uint32) bool { return done[m] })
	if s.RSEvery != 4 || s.Free() != 15 {
		t.Fatalf("a ring of 16: RS every %d, %d free; want 4 and 15", s.RSEvery, s.Free())
	}
	bufs := make([]*nicdrv.Buffer, 6)
	if _, err := p.Packet[0].Alloc(bufs); err != nil {
		t.Fatal(err)
	}
	var asked []uint32
	for i, b := range bufs {
		if slot, rs := s.Put(b, i == 1); rs {
			asked = append(asked, slot)
		}
	}
	if len(asked) != 2 || asked[0] != 1 || asked[1] != 5 {
		t.Fatalf("RS asked on slots %v, want [1 5] (on request, then 4 later)", asked)
	}
	s.Reclaim()
	if p.Packet[0].Available() != 10 {
		t.Fatalf("reclaim with nothing done freed %d", p.Packet[0].Available()-10)
	}
	done[1] = true
	s.Reclaim()
	if p.Packet[0].Available() != 12 || s.Clean != 2 {
		t.Errorf("slot 1 done: %d free, clean %d; want 12 and 2", p.Packet[0].Available(), s.Clean)
	}
	if err := s.Release(); err != nil || p.Packet[0].Available() != 16 {
		t.Errorf("Release: %v, %d free", err, p.Packet[0].Available())
	}
}

// PoolCheck takes any pool of the NIC's DMA domain, not another's.
func TestPoolCheck(t *testing.T) {
	p := newPools(t, drv.PoolsOptions{Queues: 2, Buffers: 4})
	other := newPools(t, drv.PoolsOptions{Queues: 1, Buffers: 4})
	c := drv.PoolCheck{DMA: p.Packet[0].DMA()}
	a, _ := p.Packet[1].Get()
	b, _ := other.Packet[0].Get()
	for range 2 { // the first look checks the domain, the second the remembered pool
		if !c.OK(a) {
			t.Error("a buffer of another queue's pool in the domain was refused")
		}
	}
	if c.OK(b) {
		t.Error("a buffer of another domain was accepted")
	}
	_ = p.Packet[1].Free(a)
	_ = other.Packet[0].Free(b)
	var n int
	drv.Default(&n, 7)
	drv.Default(&n, 9)
	if n != 7 {
		t.Errorf("Default: %d, want 7 (set once, then kept)", n)
	}
}

// TestMulticastTable: each group sets the bit its hash names, and an
// address that is not a group address is refused, named in the error.
func TestMulticastTable(t *testing.T) {
	hash := func(m [6]byte) (int, int) { return int(m[5]) % 128, int(m[4]) % 32 }
	mta, err := drv.MulticastTable([]nicdrv.MAC{{0x01, 0, 0x5e, 0, 3, 7}, {0x33, 0x33, 0, 0, 33, 127}}, hash)
	if err != nil {
		t.Fatal(err)
	}
	for r, v := range mta {
		want := uint32(0)
		if r == 7 {
			want = 1 << 3
		}
		if r == 127 {
			want = 1 << 1
		}
		if v != want {
			t.Errorf("register %d = %#x, want %#x", r, v, want)
		}
	}
	uni := nicdrv.MAC{0x02, 0, 0, 0, 0, 1}
	if _, err := drv.MulticastTable([]nicdrv.MAC{uni}, hash); err == nil || !strings.Contains(err.Error(), uni.String()+" is not a group address") {
		t.Errorf("a unicast address: %v", err)
	}
}

// In interrupt mode RxWaiter looks at the rings Spin times before it
// arms a vector: a frame found within them costs no arming; past them it arms,
// looks once more (a frame that came meanwhile is taken without a sleep),
// and otherwise sleeps until the vector fires.
func TestRxWaiterSpin(t *testing.T) {
	const spin = 8
	irq, err := pci.NewLocalInterrupt()
	if err != nil {
		t.Fatal(err)
	}
	defer irq.Close()
	var looks, arms, readyAt atomic.Int64
	var frame atomic.Bool
	var count atomic.Uint64
	w := drv.RxWaiter{Queues: 1, Closed: func() bool { return false },
		Ready: func(int) (bool, uint32) {
			k := looks.Add(1)
			return frame.Load() || k == readyAt.Load(), 0
		},
		Arm:   func(uint64) { arms.Add(1) },
		IRQs:  []*pci.Interrupt{irq},
		Spin:  spin,
		Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
	reset := func(at int64) {
		looks.Store(0)
		arms.Store(0)
		readyAt.Store(at)
		frame.Store(false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A frame at the seventh look: taken while spinning, nothing armed.
	reset(7)
	if q, err := w.Wait(ctx, time.Time{}, nil); q != 0 || err != nil || arms.Load() != 0 || looks.Load() != 7 {
		t.Errorf("frame at look 7: queue %d, %v, %d arms, %d looks; want queue 0 after 7 looks, no arm", q, err, arms.Load(), looks.Load())
	}
	// A frame at the look right after arming: no sleep.
	reset(spin + 2)
	if q, err := w.Wait(ctx, time.Time{}, nil); q != 0 || err != nil || arms.Load() != 1 || count.Load() != 0 {
		t.Errorf("frame after arming: queue %d, %v, %d arms, %d interrupts; want 1 arm, no interrupt", q, err, arms.Load(), count.Load())
	}
	// No frame until the vector is armed: the waiter sleeps, and the
	// frame's interrupt wakes it.
	reset(-1)
	done := make(chan error, 1)
	go func() {
		_, err := w.Wait(ctx, time.Time{}, nil)
		done <- err
	}()
	for arms.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the waiter never armed its vector")
		}
		runtime.Gosched()
	}
	frame.Store(true)
	if err := irq.Signal(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if arms.Load() != 1 {
		t.Errorf("%d arms for one sleep, want 1", arms.Load())
	}
}

// A wait on several queues spends about Spin looks at rings before it
// arms, as a wait on one does: each look at them all counts as many looks
// as there are queues. It arms them all with one Arm call whose mask holds
// their bits and no other.
func TestRxWaiterSpinSharedByQueues(t *testing.T) {
	const spin = 8
	for _, c := range []struct {
		queues int
		wait   []int // nil: all of them
	}{{1, nil}, {2, nil}, {4, nil}, {5, nil}, {16, nil}, {5, []int{1, 3}}} {
		irqs := localIRQs(t, c.queues)
		var looks, lookedBeforeArm atomic.Int64
		var armed atomic.Bool
		var count atomic.Uint64
		var masks []uint64 // Wait calls the hooks on this goroutine
		w := drv.RxWaiter{Queues: c.queues, Closed: func() bool { return false },
			Ready: func(int) (bool, uint32) {
				looks.Add(1)
				return armed.Load(), 0 // a frame comes as the vectors are armed
			},
			Arm: func(mask uint64) {
				masks = append(masks, mask)
				if !armed.Swap(true) {
					lookedBeforeArm.Store(looks.Load())
				}
			},
			IRQs:  irqs,
			Spin:  spin,
			Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
		waited, wantMask := c.wait, uint64(0)
		if waited == nil {
			for q := range c.queues {
				waited = append(waited, q)
			}
		}
		for _, q := range waited {
			wantMask |= 1 << q
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		q, err := w.Wait(ctx, time.Time{}, c.wait)
		cancel()
		if err != nil || q != waited[0] {
			t.Fatalf("wait on %v of %d queues: Wait = %d, %v; want queue %d", waited, c.queues, q, err, waited[0])
		}
		// The looks at them all: Spin / queues (at least one) before the
		// last, which arms.
		want := (max(spin/len(waited), 1) + 1) * len(waited)
		if got := lookedBeforeArm.Load(); got != int64(want) {
			t.Errorf("wait on %v of %d queues: %d looks at rings before arming, want %d", waited, c.queues, got, want)
		}
		if len(masks) != 1 || masks[0] != wantMask {
			t.Errorf("wait on %v of %d queues: Arm calls with masks %b, want one with %b", waited, c.queues, masks, wantMask)
		}
	}
}

// A wait on several queues that armed them leaves each with its spin
// taken: the next wait on fewer of them, whose spin is longer, arms after
// its first look, as the next wait on the same queues does.
func TestRxWaiterArmedWaitCarriesToSubsets(t *testing.T) {
	const spin = 8
	irqs := localIRQs(t, 4)
	// Each wait's context ends at the arming; the hooks run on the
	// caller's goroutine.
	var looks, arms, armedAfter int
	var end context.CancelFunc
	var count atomic.Uint64
	w := drv.RxWaiter{Queues: 4, Closed: func() bool { return false },
		Ready: func(int) (bool, uint32) { looks++; return false, 0 },
		Arm:   func(uint64) { arms++; armedAfter = looks; end() },
		IRQs:  irqs,
		Spin:  spin,
		Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
	for _, c := range []struct {
		queues []int
		looks  int // at rings before the arming
	}{
		{[]int{0, 1, 2, 3}, (spin/4 + 1) * 4},
		{[]int{1, 3}, 2}, // one look at each
		{[]int{2}, 1},
	} {
		var ctx context.Context
		ctx, end = context.WithCancel(context.Background())
		looks, arms = 0, 0
		if _, err := w.Wait(ctx, time.Time{}, c.queues); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait on %v, cancelled as it arms: %v", c.queues, err)
		}
		end()
		if arms != 1 || armedAfter != c.looks {
			t.Errorf("wait on %v: armed %d times, after %d looks at rings; want once, after %d", c.queues, arms, armedAfter, c.looks)
		}
	}
}

// A deadline that passes while a wait sleeps between looks (polling past
// the looks that yield, or on an armed vector) ends the wait with
// context.DeadlineExceeded within one look after the sleep, whatever the
// looks before it; and a frame waiting when the deadline has passed is
// still returned (the last look). The deadline is read on a clock the
// test moves (RxWaiter.Now).
func TestRxWaiterDeadline(t *testing.T) {
	for _, irqMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupts=%v", irqMode), func(t *testing.T) {
			// An hour ahead, so that the real clock pci.WaitAny
			// sleeps on never reaches the deadline.
			clock := time.Now().Add(time.Hour)
			deadline := clock.Add(time.Second)
			var looks, passedAt int
			var frame bool
			var count atomic.Uint64
			w := drv.RxWaiter{Queues: 1, Closed: func() bool { return false },
				Ready: func(int) (bool, uint32) { looks++; return frame, 0 },
				Arm:   func(uint64) {},
				Now:   func() time.Time { return clock },
				Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
			if irqMode {
				irq, err := pci.NewLocalInterrupt()
				if err != nil {
					t.Fatal(err)
				}
				defer irq.Close()
				w.IRQs, w.Spin = []*pci.Interrupt{irq}, 4
				// The deadline passes as the wait arms, and a spurious
				// interrupt ends its sleep.
				w.Arm = func(uint64) {
					passedAt, clock = looks, deadline
					if err := irq.Signal(); err != nil {
						t.Error(err)
					}
				}
			} else {
				// The deadline passes during a look past the yielding
				// ones: a sleep follows it.
				w.Ready = func(int) (bool, uint32) {
					looks++
					if looks == drv.PollYield+10 {
						passedAt, clock = looks, deadline
					}
					return frame, 0
				}
			}
			if _, err := w.Wait(context.Background(), deadline, nil); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("no frame until the deadline: %v, want context.DeadlineExceeded", err)
			}
			// Interrupt mode looks once after arming, before its sleep.
			after := looks - passedAt
			if irqMode {
				after--
			}
			if passedAt == 0 || after > 1 {
				t.Errorf("the deadline passed before a sleep (after look %d): the wait took %d more looks after it, want at most 1", passedAt, after)
			}
			frame = true
			if q, err := w.Wait(context.Background(), deadline, nil); q != 0 || err != nil {
				t.Errorf("a frame waiting, the deadline passed: queue %d, %v; want queue 0, nil", q, err)
			}
		})
	}
}

// Arm's mask has a bit for each of the first 64 queues: a wait on a queue
// past them is refused, not armed without its bit.
func TestRxWaiterRefusesQueuesPast64(t *testing.T) {
	var count atomic.Uint64
	w := drv.RxWaiter{Queues: 65, Closed: func() bool { return false },
		Ready: func(int) (bool, uint32) { return true, 0 },
		Arm:   func(uint64) {}, IRQs: make([]*pci.Interrupt, 65),
		Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
	if _, err := w.Wait(context.Background(), time.Time{}, []int{1, 64}); !errors.Is(err, nicdrv.ErrNotSupported) {
		t.Errorf("a wait on queues 1 and 64: %v, want ErrNotSupported", err)
	}
	if q, err := w.Wait(context.Background(), time.Time{}, []int{63}); q != 63 || err != nil {
		t.Errorf("a wait on queue 63: queue %d, %v", q, err)
	}
}

// The looks before arming add up over waits that end at their deadline
// with the ring where it was: a receive loop whose every wait is shorter
// than the looks take still arms its vector and sleeps, on the wait after
// Spin looks in all. A frame taken from the ring (its position
// moves) starts the count again. A queue marked Served skips the looks
// once.
func TestRxWaiterCarriesLooks(t *testing.T) {
	const spin = 8
	irq, err := pci.NewLocalInterrupt()
	if err != nil {
		t.Fatal(err)
	}
	defer irq.Close()
	// Each wait's context ends at its second look at queue 1's ring, as a
	// short timeout would, or at the arming: Wait runs the hooks on the
	// caller's goroutine, so the waits are the same every run.
	var looks, looks0, arms int
	var pos uint32
	var frame bool
	var end context.CancelFunc
	var count atomic.Uint64
	w := drv.RxWaiter{Queues: 2, Closed: func() bool { return false },
		Ready: func(q int) (bool, uint32) {
			if q != 1 {
				looks0++
				return false, 0
			}
			if looks++; looks == 2 {
				end()
			}
			return frame, pos
		},
		Arm:  func(uint64) { arms++; end() },
		IRQs: []*pci.Interrupt{irq, irq},
		Spin: spin, FixedSpin: true, // the carrying alone
		Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
	waits := func(n int, queues ...int) {
		t.Helper()
		for range n {
			var ctx context.Context
			ctx, end = context.WithCancel(context.Background())
			looks = 0
			if _, err := w.Wait(ctx, time.Time{}, queues); !errors.Is(err, context.Canceled) {
				t.Fatalf("a wait whose context ends: %v", err)
			}
			end()
		}
	}
	short := (spin) / 2 // waits of two looks each before the arming
	waits(short, 1)
	if arms != 0 {
		t.Fatalf("%d waits of 2 looks armed %d times, want none", short, arms)
	}
	waits(1, 1)
	if arms != 1 {
		t.Fatalf("the wait after %d looks at an idle ring armed %d times, want once", spin, arms)
	}
	// Every later wait on the still idle ring arms after its first look.
	waits(1, 1)
	if arms != 2 {
		t.Fatalf("a later wait on the idle ring: %d arms in all, want 2", arms)
	}
	// A frame taken: the count starts again.
	pos++
	waits(short, 1)
	if arms != 2 {
		t.Errorf("%d short waits after a frame was taken armed %d times, want none", short, arms-2)
	}
	waits(1, 1)
	if arms != 3 {
		t.Errorf("the wait after those: %d arms, want 1", arms-2)
	}
	// Waiting on queues 0 and 1 at once counts from the fewer looks:
	// queue 0's ring was never looked at.
	waits(1, 0, 1)
	if arms != 3 {
		t.Errorf("a first wait on queues 0 and 1: %d arms, want none", arms-3)
	}
	// A queue its caller served (Served) arms at the first look of its
	// next wait, wherever its ring stands, and only that wait skips the
	// looks: a frame taken after it starts the count again.
	pos++
	w.Served(1)
	waits(1, 1)
	if arms != 4 {
		t.Errorf("the first wait after Served: %d arms, want 1", arms-3)
	}
	pos++
	waits(1, 1)
	if arms != 4 {
		t.Errorf("a short wait after a frame was taken since the served one: %d arms, want none", arms-4)
	}
	// A mark whose next wait finds a frame is void once the frame is
	// taken: busy receiving, then idle, the queue looks before it arms.
	w.Served(1)
	frame = true
	if q, err := w.Wait(context.Background(), time.Time{}, []int{1}); q != 1 || err != nil {
		t.Fatalf("a wait on a ring holding a frame: queue %d, %v", q, err)
	}
	frame = false
	pos++
	waits(1, 1)
	if arms != 4 {
		t.Errorf("the first idle wait after a served queue took a frame: %d arms, want none", arms-4)
	}
	// A wait on two queues consumes both marks, whichever it checks
	// first, even when one was taken from since (queue 1 here).
	w.Served(0)
	w.Served(1)
	pos++
	waits(1, 1, 0)
	looks0 = 0
	waits(1, 0)
	if arms != 5 || looks0 <= 2 {
		t.Errorf("a wait on queue 0 after its mark was consumed: %d arms after %d looks, want 1 after more than 2", arms-4, looks0)
	}
}

// TestRings cuts two rings from ring memory on a model's IOMMU: each is
// the bytes asked for, the second after the first in IOVA space; an IOVA
// that is not a multiple of the alignment asked for is refused, naming it;
// Release leaves nothing mapped and may be called again.
func TestRings(t *testing.T) {
	plat, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plat.Close() })
	d := &drv.Device{Dev: plat.Functions()[0]}
	live := plat.IOMMU().Live()
	r, err := d.AllocRings(8192, hugepage.Options{}, "gomx-test-rings")
	if err != nil {
		t.Fatal(err)
	}
	a, ia, err := r.Cut(4096, 128)
	if err != nil || len(a) != 4096 || cap(a) != 4096 {
		t.Fatalf("first ring: %d bytes (cap %d), %v", len(a), cap(a), err)
	}
	b, ib, err := r.Cut(2048, 0)
	if err != nil || len(b) != 2048 || ib != ia+4096 {
		t.Fatalf("second ring: %d bytes at IOVA %#x (first at %#x), %v", len(b), ib, ia, err)
	}
	// Twice the largest power of two the next IOVA is a multiple of.
	next := ib + 2048
	align := next & -next << 1
	if _, ic, err := r.Cut(64, align); ic != next || err == nil || !strings.Contains(err.Error(), fmt.Sprintf("not %d-byte aligned", align)) {
		t.Errorf("a ring at IOVA %#x cut with %d-byte alignment: %v", ic, align, err)
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	if m := plat.IOMMU().Live(); m != live {
		t.Errorf("%d mappings after Release, %d before the rings", m, live)
	}
}

// localIRQs returns n local interrupts, closed as the test ends.
func localIRQs(t *testing.T, n int) []*pci.Interrupt {
	t.Helper()
	irqs := make([]*pci.Interrupt, n)
	for q := range irqs {
		irq, err := pci.NewLocalInterrupt()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { irq.Close() })
		irqs[q] = irq
	}
	return irqs
}

// A queue whose spins catch no frame takes fewer looks before it arms:
// half as many at each arming, down to one look past the first, with a
// full spin every 16th arming; a frame caught in the spin, or found by the
// look right after the arming, gives it the full spin again. FixedSpin
// keeps it.
func TestRxWaiterSpinAdapts(t *testing.T) {
	const spin = 64
	irq, err := pci.NewLocalInterrupt()
	if err != nil {
		t.Fatal(err)
	}
	defer irq.Close()
	// Wait runs the hooks on the caller's goroutine. Each wait's context
	// ends at its arming, and a frame is taken after it (the ring moves
	// on), as one whose sleep an interrupt ends; or Ready finds a frame
	// at look frameAt of the wait (counted from 1).
	var looks, armedAfter, frameAt int
	var pos uint32
	var end context.CancelFunc
	var onArm func() // what an arming does besides noting the looks: end, by default
	var count atomic.Uint64
	w := drv.RxWaiter{Queues: 1, Closed: func() bool { return false },
		Ready: func(int) (bool, uint32) {
			looks++
			return looks == frameAt, pos
		},
		Arm: func(uint64) {
			armedAfter = looks
			if onArm != nil {
				onArm()
				return
			}
			end()
		},
		IRQs:  []*pci.Interrupt{irq},
		Spin:  spin,
		Count: &count, Errorf: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }}
	// wait returns the looks before the arming (0: it did not arm).
	wait := func() int {
		t.Helper()
		var ctx context.Context
		ctx, end = context.WithCancel(context.Background())
		defer end()
		looks, armedAfter = 0, 0
		q, err := w.Wait(ctx, time.Time{}, nil)
		if err != nil && !errors.Is(err, context.Canceled) || err == nil && q != 0 {
			t.Fatalf("Wait = %d, %v", q, err)
		}
		pos++
		return armedAfter
	}
	missed := func(want ...int) {
		t.Helper()
		var got []int
		for range want {
			got = append(got, wait())
		}
		if !slices.Equal(got, want) {
			t.Errorf("looks before arming, wait after wait: %v, want %v", got, want)
		}
	}
	cut := []int{65, 33, 17, 9, 5, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}
	missed(append(cut, 65, 33)...)
	frameAt = 3 // caught in the spin
	if got := wait(); got != 0 {
		t.Errorf("a frame at look 3 armed after %d looks", got)
	}
	frameAt = 0
	missed(65, 33, 17)
	frameAt = 9 + 1 // the look after the arming
	if got := wait(); got != 9 {
		t.Errorf("a frame just after the arming: armed after %d looks, want 9", got)
	}
	frameAt = 0
	missed(65, 33)
	// A frame found just after the arming that follows a wake-up came
	// after a sleep, not just after the spin: the looks stay cut. The
	// first arming is woken at once; 17 looks, the arming, its look,
	// one look after the wake-up, the second arming, and its look (20).
	arms := 0
	onArm = func() {
		if arms++; arms == 1 {
			irq.Signal()
		}
	}
	frameAt = 17 + 3
	wait()
	onArm, frameAt = nil, 0
	missed(9, 5)
	w.FixedSpin = true
	missed(65, 65, 65)
}
