package fault_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

// hangGuard bounds waits only a broken model or wire would exceed.
const hangGuard = 20 * time.Second

// frameData is frame i's content: its number, then bytes derived from it.
func frameData(i, size int) []byte {
	d := make([]byte, size)
	for j := range d {
		d[j] = byte(i*131 + j*7 + i>>8)
	}
	if size >= 2 {
		d[0], d[1] = byte(i>>8), byte(i)
	}
	return d
}

// oracle computes, from the package documentation alone, what the model
// delivers for count frames of size bytes to one peer, offered at one
// instant with no delay: the documented PCG stream and draw order
// (loss, corruption with its byte and bit, duplication, reordering), a held
// frame released right after the next delivered frame, and the last held
// frame at the end. It shares no code with the model.
func oracle(o fault.Options, count, size int) (out [][]byte, c fault.Counts) {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6d786c6f6f70))
	draw := func(p float64) bool { return p > 0 && rng.Float64() < p }
	var held [][]byte
	for i := range count {
		c.Frames++
		if draw(o.Loss) {
			c.Dropped++
			continue
		}
		d := frameData(i, size)
		if draw(o.Corrupt) && size > 0 {
			idx := rng.IntN(size)
			d[idx] ^= 1 << rng.IntN(8)
			c.Corrupted++
		}
		copies := [][]byte{d}
		if draw(o.Duplicate) {
			copies = append(copies, d)
			c.Duplicated++
		}
		if draw(o.Reorder) && held == nil {
			held = copies
			c.Reordered++
			continue
		}
		out = append(out, copies...)
		out = append(out, held...)
		held = nil
	}
	return append(out, held...), c
}

// run offers count frames to an injector at one instant, then releases
// what it holds.
func run(o fault.Options, count, size int) (out [][]byte, c fault.Counts) {
	in := fault.NewInjector[int](o)
	now := time.Unix(1e9, 0)
	emit := func(it fault.Item[int]) {
		if it.Peer != 2 {
			panic(fmt.Sprintf("peer %v", it.Peer))
		}
		for range it.Copies {
			out = append(out, bytes.Clone(it.Data))
		}
	}
	for i := range count {
		in.Frame(now, i, 2, frameData(i, size), emit)
	}
	in.Due(now.Add(time.Hour), emit)
	if _, ok := in.Next(); ok {
		panic("frames still held after every due time")
	}
	return out, in.Counts()
}

var oracleCases = []fault.Options{
	{Loss: 0.1},
	{Duplicate: 0.2},
	{Reorder: 0.3},
	{Corrupt: 0.25},
	{Loss: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.05},
	{Loss: 0.2, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1},
	{Loss: 1},
	{Reorder: 1, Duplicate: 1},
	{},
}

// TestInjectorMatchesOracle checks the model frame by frame against the
// documented draw order, for several fault mixes and seeds.
func TestInjectorMatchesOracle(t *testing.T) {
	for _, o := range oracleCases {
		for _, seed := range []int64{1, 13, -7} {
			o.Seed = seed
			t.Run(o.String(), func(t *testing.T) {
				want, wc := oracle(o, 3000, 40)
				got, gc := run(o, 3000, 40)
				if wc != gc {
					t.Errorf("counts %+v, oracle %+v", gc, wc)
				}
				if len(got) != len(want) {
					t.Fatalf("%d frames delivered, oracle %d", len(got), len(want))
				}
				for i := range got {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("delivered frame %d differs from the oracle's", i)
					}
				}
			})
		}
	}
}

// TestCountsWithinBounds checks, over many seeds, that each fault hits a
// fraction of frames within 6 standard deviations of its binomial mean,
// and that the counts agree with what a receiver sees.
func TestCountsWithinBounds(t *testing.T) {
	const n = 20000
	o := fault.Options{Loss: 0.01, Duplicate: 0.05, Reorder: 0.03, Corrupt: 0.02}
	for seed := range int64(8) {
		o.Seed = seed
		out, c := run(o, n, 16)
		within := func(name string, got uint64, trials uint64, p float64) {
			mean := float64(trials) * p
			sd := math.Sqrt(mean * (1 - p))
			if math.Abs(float64(got)-mean) > 6*sd+1 {
				t.Errorf("seed %d: %s %d of %d, want %.0f +- %.0f", seed, name, got, trials, mean, 6*sd)
			}
		}
		within("dropped", c.Dropped, n, o.Loss)
		kept := n - c.Dropped
		within("corrupted", c.Corrupted, kept, o.Corrupt)
		within("duplicated", c.Duplicated, kept, o.Duplicate)
		// A frame may be held only while no other is: slightly fewer than
		// Reorder of the frames kept.
		within("reordered", c.Reordered, kept, o.Reorder*(1-o.Reorder))
		if uint64(len(out)) != kept+c.Duplicated {
			t.Errorf("seed %d: %d frames out, want %d kept + %d duplicates", seed, len(out), kept, c.Duplicated)
		}
		// What a receiver sees: every intact frame carries its number.
		seen := map[int]int{}
		flipped := 0
		for _, d := range out {
			i := int(d[0])<<8 | int(d[1])
			if bytes.Equal(d, frameData(i, 16)) {
				seen[i]++
			} else {
				flipped++
			}
		}
		if flipped < int(c.Corrupted) || flipped > int(2*c.Corrupted) {
			t.Errorf("seed %d: %d frames altered, but %d corrupted", seed, flipped, c.Corrupted)
		}
		for i, k := range seen {
			if k > 2 {
				t.Errorf("seed %d: frame %d arrived %d times", seed, i, k)
			}
		}
	}
}

// TestSeedsDiffer: two seeds give two patterns; one seed, one pattern.
func TestSeedsDiffer(t *testing.T) {
	o := fault.Options{Loss: 0.1, Seed: 1}
	a, _ := run(o, 1000, 8)
	b, _ := run(o, 1000, 8)
	o.Seed = 2
	c, _ := run(o, 1000, 8)
	if !equalFrames(a, b) {
		t.Error("same seed, different pattern")
	}
	if equalFrames(a, c) {
		t.Error("different seeds, same pattern")
	}
}

func equalFrames(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestDelayAndHold checks the due times: a delayed frame is due Delay after
// it was offered, a held one HoldMax (plus Delay) after, and nothing comes
// out before.
func TestDelayAndHold(t *testing.T) {
	now := time.Unix(1e9, 0)
	var got []int
	emit := func(it fault.Item[int]) { got = append(got, it.Tag) }
	in := fault.NewInjector[int](fault.Options{Delay: time.Millisecond})
	in.Frame(now, 1, 2, []byte{1}, emit)
	if next, ok := in.Next(); !ok || !next.Equal(now.Add(time.Millisecond)) || len(got) != 0 {
		t.Fatalf("Next = %v, %v; delivered %v", next, ok, got)
	}
	in.Due(now.Add(time.Millisecond-1), emit)
	if len(got) != 0 {
		t.Fatal("a delayed frame came out early")
	}
	in.Due(now.Add(time.Millisecond), emit)
	if len(got) != 1 {
		t.Fatal("a delayed frame did not come out when due")
	}
	in = fault.NewInjector[int](fault.Options{Reorder: 1})
	got = nil
	in.Frame(now, 1, 2, []byte{1}, emit)
	in.Frame(now, 2, 3, []byte{2}, emit) // another peer: holds its own
	if next, ok := in.Next(); !ok || !next.Equal(now.Add(fault.HoldMax)) || len(got) != 0 {
		t.Fatalf("Next = %v, %v; delivered %v", next, ok, got)
	}
	in.Frame(now, 3, 2, []byte{3}, emit) // peer 2 already holds 1: 3 goes out, then 1
	in.Due(now.Add(fault.HoldMax), emit)
	if fmt.Sprint(got) != "[3 1 2]" {
		t.Errorf("delivered %v, want [3 1 2]", got)
	}
	in.Stop()
	got = nil
	in.Frame(now, 4, 2, []byte{4}, emit)
	if fmt.Sprint(got) != "[4]" {
		t.Errorf("after Stop delivered %v, want the frame at once", got)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []fault.Options{
		{Loss: -0.1}, {Duplicate: 1.5}, {Reorder: math.NaN()}, {Corrupt: 2}, {Delay: -time.Second},
	} {
		if err := o.Validate(); !errors.Is(err, fault.ErrOptions) {
			t.Errorf("%+v: Validate = %v, want ErrOptions", o, err)
		}
	}
	if err := (fault.Options{Loss: 1, Duplicate: 0.5, Delay: time.Second}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	c := fault.Options{Loss: -1, Duplicate: 2, Reorder: math.NaN(), Corrupt: 0.5, Delay: -time.Second}.Clamped()
	if c != (fault.Options{Duplicate: 1, Corrupt: 0.5}) {
		t.Errorf("Clamped = %+v", c)
	}
}

// TestLineDeliversLate checks a Line's goroutine sends held frames when due,
// and Close drops what is still held.
func TestLineDeliversLate(t *testing.T) {
	late := make(chan int, 4)
	l := fault.NewLine(fault.Options{Reorder: 1}, func(it fault.Item[int]) { late <- it.Tag })
	defer l.Close()
	l.Lock()
	l.Frame(time.Now(), 7, 2, []byte{7}, func(fault.Item[int]) { t.Error("a held frame was delivered at once") })
	l.Unlock()
	select {
	case tag := <-late:
		if tag != 7 {
			t.Errorf("late frame %d, want 7", tag)
		}
	case <-time.After(hangGuard):
		t.Fatal("the held frame never came out")
	}
	l.SetOptions(fault.Options{Delay: time.Hour})
	l.Lock()
	l.Frame(time.Now(), 8, 2, []byte{8}, func(fault.Item[int]) { t.Error("a delayed frame was delivered at once") })
	l.Unlock()
	l.Close() // waits for the goroutine and drops frame 8
	if c := l.Counts(); c.Delayed != 1 || c.Reordered != 1 {
		t.Errorf("Counts = %+v", c)
	}
	select {
	case tag := <-late:
		t.Errorf("frame %d came out after Close", tag)
	default:
	}
}

// TestLineHoldsBack checks HoldsBack: true while reorder or delay is on,
// and while a frame is still held after the options turn to loss only;
// false with loss only and nothing held.
func TestLineHoldsBack(t *testing.T) {
	holds := func(l *fault.Line[int]) bool {
		l.Lock()
		defer l.Unlock()
		return l.HoldsBack()
	}
	for _, c := range []struct {
		name string
		o    fault.Options
		want bool
	}{
		{"loss", fault.Options{Loss: 0.5}, false},
		{"reorder", fault.Options{Reorder: 0.5}, true},
		{"delay", fault.Options{Delay: time.Hour}, true},
	} {
		l := fault.NewLine(c.o, func(fault.Item[int]) {})
		if got := holds(l); got != c.want {
			t.Errorf("%s: HoldsBack = %v, want %v", c.name, got, c.want)
		}
		l.Close()
	}
	l := fault.NewLine(fault.Options{Delay: time.Hour}, func(fault.Item[int]) {})
	defer l.Close()
	l.Lock()
	l.Frame(time.Now(), 1, 2, []byte{1}, func(fault.Item[int]) { t.Error("a delayed frame was delivered at once") })
	l.Unlock()
	l.SetOptions(fault.Options{Loss: 0.5})
	if !holds(l) {
		t.Error("HoldsBack = false with a delayed frame still held under loss only")
	}
}

var _ transport.Transport = (*fault.Transport)(nil)
