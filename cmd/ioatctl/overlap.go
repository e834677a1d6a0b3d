package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/ioat"
)

// overlapRow is the result for one size and mover.
type overlapRow struct {
	Schema     string   `json:"schema"`
	Run        cli.Meta `json:"run"`
	Device     string   `json:"device"`
	Emulated   bool     `json:"emulated"`
	Mover      string   `json:"mover"` // "engine" or "cpu"
	Size       int64    `json:"size"`
	Channels   int      `json:"channels"`
	Policy     string   `json:"policy"`
	Iterations int      `json:"iterations"`
	TCopyUS    float64  `json:"t_copy_us"`
	TComputeUS float64  `json:"t_compute_us"`
	TTotalUS   float64  `json:"t_total_us"`
	Overlap    float64  `json:"overlap"`
}

// runOverlap is the overlap subcommand.
func runOverlap(e *env, args []string) (err error) {
	const cmd = "overlap"
	var dev deviceFlags
	fset := newFlags(cmd)
	dev.register(fset)
	sizes := units.List{V: []int64{64 << 10, 256 << 10, 1 << 20, 4 << 20}}
	fset.Var(&sizes, "sizes", "comma-separated copy sizes")
	iterations := fset.Int("iterations", 50, "measurements averaged per size")
	asJSON := fset.Bool("json", false, "print one JSON object per size and mover (schema ioatctl.overlap/1, docs/json.md)")
	pos, err := parseFlags(e, fset, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	if *iterations < 1 {
		return usagef(cmd, "--iterations %d: want at least 1", *iterations)
	}
	for _, s := range sizes.V {
		if s < 1 || s > 1<<30 {
			return usagef(cmd, "size %s: want 1 byte to 1 GiB", units.Format(s))
		}
	}
	choice, err := dev.validate(cmd, fset)
	if err != nil {
		return err
	}
	r, err := openRig(e, choice)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	maxSize := int(slices.Max(sizes.V))
	src, err := r.alloc(maxSize)
	if err != nil {
		return fmt.Errorf("allocate a %s source buffer: %w", units.Format(int64(maxSize)), err)
	}
	defer func() { err = errors.Join(err, src.Close()) }()
	dst, err := r.alloc(maxSize)
	if err != nil {
		return fmt.Errorf("allocate a %s destination buffer: %w", units.Format(int64(maxSize)), err)
	}
	defer func() { err = errors.Join(err, dst.Close()) }()
	fillRandom(src.Bytes(), 2)

	if !*asJSON {
		fmt.Fprintf(e.stdout, "device:  %s\n", r.describe())
		fmt.Fprintf(e.stdout, "run:     %s, policy %s, hot cache (one buffer pair), %d iterations per size\n",
			r.queueCount(), choice.policy, *iterations)
		fmt.Fprintf(e.stdout, "memory:  %s\n", r.memoryNote(src))
		if r.emulated {
			fmt.Fprint(e.stdout, emulatedOverlapNote)
		}
		fmt.Fprintf(e.stdout, "overlap = (Tcopy + Tcompute - Ttotal) / Tcopy; 1 = the copy hides behind the computation.\n\n")
		fmt.Fprintf(e.stdout, "%9s %-7s %12s %12s %12s %8s\n", "SIZE", "MOVER", "Tcopy us", "Tcompute us", "Ttotal us", "OVERLAP")
	}
	meta := cli.NewMeta("ioatctl")
	prog := cli.NewProgress(e.stderr, "ioatctl")
	defer prog.Stop()
	negative := false
	for i, size := range sizes.V {
		s, d := src.Bytes()[:size], dst.Bytes()[:size]
		eng := &engineMover{eng: r.eng, dst: d, src: s, timeout: choice.timeout}
		cpu := &cpuMover{dst: d, src: s}
		for _, m := range []mover{eng, cpu} {
			prog.Set("overlap %s [%d/%d]: %s", units.Format(size), i+1, len(sizes.V), m.name())
			t, err := measureOverlap(m, *iterations)
			prog.Clear()
			if err != nil {
				return fmt.Errorf("overlap of %s: %w", units.Format(size), err)
			}
			row := overlapRow{
				Schema: overlapSchema, Run: meta, Emulated: r.emulated, Device: r.name, Mover: m.name(), Size: size, Channels: r.channels(), Policy: choice.policy.String(),
				Iterations: *iterations, TCopyUS: us(t.copy), TComputeUS: us(t.compute), TTotalUS: us(t.total),
			}
			if m.blocking() {
				row.Overlap = 0 // blocking: nothing to overlap, by construction
			} else {
				row.Overlap = float64(t.copy+t.compute-t.total) / float64(t.copy)
			}
			row.Overlap = math.Round(row.Overlap*1000) / 1000
			negative = negative || row.Overlap < 0
			if *asJSON {
				b, _ := json.Marshal(row)
				fmt.Fprintf(e.stdout, "%s\n", b)
			} else {
				fmt.Fprintf(e.stdout, "%9s %-7s %12.1f %12.1f %12.1f %8.2f\n", units.Format(size), row.Mover, row.TCopyUS, row.TComputeUS, row.TTotalUS, row.Overlap)
			}
		}
	}
	if negative && !*asJSON {
		fmt.Fprint(e.stdout, negativeOverlapNote)
	}
	return nil
}

// overlapSchema names and versions the JSON record of overlap
// (docs/json.md).
const overlapSchema = "ioatctl.overlap/1"

// emulatedOverlapNote is what overlap says about the emulated engine.
const emulatedOverlapNote = `emulated: the engine is CPU threads. Its copy overlaps the computation only
         when another core is free to run the channel's goroutine; the figures
         show the driver's asynchrony, not what CBDMA hardware would do.
`

// negativeOverlapNote explains an overlap below 0.
const negativeOverlapNote = `
A negative overlap means the engine's run took longer than the computation
and a copy done alone (Ttotal > Tcopy + Tcompute): the copy and the
computation slowed each other down. On the emulated engine they compete for
CPU time (the channel is a goroutine that waits for a core on a loaded
machine); on hardware, for memory bandwidth. It is a measurement, not an
error: run on an idle machine, or with fewer channels, to see the overlap.
`

// us converts a duration to microseconds rounded to 0.1.
func us(d time.Duration) float64 { return round1(float64(d) / 1e3) }

// mover starts a copy and waits for it.
type mover interface {
	name() string
	// blocking reports whether start does the whole copy.
	blocking() bool
	start() error
	wait() error
}

// engineMover copies with the engine: start is ICopy, wait is Wait.
type engineMover struct {
	eng      *ioat.Engine
	dst, src []byte
	c        *ioat.Cookie
	timeout  time.Duration // --timeout
}

func (m *engineMover) name() string   { return "engine" }
func (m *engineMover) blocking() bool { return false }

func (m *engineMover) start() error {
	c, err := m.eng.ICopy(m.dst, m.src)
	m.c = c
	return err
}

func (m *engineMover) wait() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	return stuck(m.eng.Wait(ctx, m.c))
}

// cpuMover copies with Go's copy: start does the copy, wait nothing.
type cpuMover struct{ dst, src []byte }

func (m *cpuMover) name() string   { return "cpu" }
func (m *cpuMover) blocking() bool { return true }
func (m *cpuMover) start() error   { copy(m.dst, m.src); return nil }
func (m *cpuMover) wait() error    { return nil }

// overlapTimes are the averages the overlap formula needs.
type overlapTimes struct {
	copy, compute, total time.Duration
}

// measureOverlap measures Tcopy (start then wait), calibrates the compute
// loop to about 1.5 x Tcopy (and more than Tcopy), measures Tcompute alone
// and Ttotal (start, compute, wait), each averaged over iterations.
func measureOverlap(m mover, iterations int) (overlapTimes, error) {
	var t overlapTimes
	// Warm up: first-touch costs, channel wake-up.
	for range 3 {
		if err := copyOnce(m); err != nil {
			return t, err
		}
	}
	start := time.Now()
	for range iterations {
		if err := copyOnce(m); err != nil {
			return t, err
		}
	}
	t.copy = time.Since(start) / time.Duration(iterations)
	if t.copy <= 0 {
		t.copy = 1
	}

	n := calibrate(t.copy * 3 / 2)
	for range 5 {
		start = time.Now()
		for range iterations {
			compute(n)
		}
		t.compute = time.Since(start) / time.Duration(iterations)
		if t.compute > t.copy {
			break
		}
		// The machine got faster (or the copy slower): scale up.
		n = n*3/2 + 1
	}

	start = time.Now()
	for range iterations {
		if err := m.start(); err != nil {
			return t, err
		}
		compute(n)
		if err := m.wait(); err != nil {
			return t, err
		}
	}
	t.total = time.Since(start) / time.Duration(iterations)
	return t, nil
}

// copyOnce starts a copy and waits for it.
func copyOnce(m mover) error {
	if err := m.start(); err != nil {
		return err
	}
	return m.wait()
}

// calibrate returns the number of compute rounds that take about d.
func calibrate(d time.Duration) int {
	rounds := 1 << 12
	for {
		start := time.Now()
		compute(rounds)
		el := time.Since(start)
		if el >= 2*time.Millisecond || rounds >= 1<<30 {
			return max(1, int(float64(rounds)*float64(d)/float64(el)))
		}
		rounds *= 4
	}
}

// compute runs n rounds of arithmetic on registers only: a 64-bit linear
// congruential step and a xorshift, which touches no memory. KeepAlive
// keeps the result, so the loop cannot be optimised away.
func compute(n int) {
	x := uint64(n) | 1
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	runtime.KeepAlive(x)
}
