package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/cache"
	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/ioat"
)

// sweepSizes are the sizes --sweep measures: 4 KiB to 8 MiB, doubling.
func sweepSizes() []int64 {
	var s []int64
	for n := int64(4 << 10); n <= 8<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

// limit says when a measurement stops: after iterations operations when
// positive, else after duration.
type limit struct {
	iterations int64
	duration   time.Duration
	// wait bounds the waits for the engine beyond the run's length
	// (--timeout).
	wait time.Duration
}

// done reports whether a run that has started n operations since start
// should stop.
func (l limit) done(n int64, start time.Time) bool {
	if l.iterations > 0 {
		return n >= l.iterations
	}
	return time.Since(start) >= l.duration
}

// describe describes the limit for a header, counting iterations as
// what ("copies").
func (l limit) describe(what string) string {
	if l.iterations > 0 {
		return fmt.Sprintf("%d %s", l.iterations, what)
	}
	return l.duration.String()
}

// copyFlags are the flags of the copy subcommand.
type copyFlags struct {
	dev        deviceFlags
	size       units.Size
	sweep      bool
	sizes      units.List
	window     int
	cold, hot  bool
	duration   time.Duration
	iterations int64
	verify     bool
	json       bool
	memory     units.Size
	plot       string
}

// copyRow is the result for one size, one JSON object per line with
// --json.
type copyRow struct {
	Schema     string   `json:"schema"`
	Run        cli.Meta `json:"run"`
	Device     string   `json:"device"`
	Emulated   bool     `json:"emulated"`
	CBVER      string   `json:"cbver"`
	Channels   int      `json:"channels"`
	Policy     string   `json:"policy"`
	Cache      string   `json:"cache"`
	ColdBytes  int64    `json:"cold_bytes,omitempty"`
	LLCBytes   int64    `json:"llc_bytes,omitempty"`
	Size       int64    `json:"size"`
	Window     int      `json:"window"`
	Ops        int64    `json:"ops"`
	Seconds    float64  `json:"seconds"`
	MBPerS     float64  `json:"mb_per_s"`
	OpsPerS    float64  `json:"ops_per_s"`
	CPUOps     int64    `json:"cpu_ops"`
	CPUSeconds float64  `json:"cpu_seconds"`
	CPUMBPerS  float64  `json:"cpu_mb_per_s"`
	CPUOpsPerS float64  `json:"cpu_ops_per_s"`
	Ratio      float64  `json:"ratio"`
	Verified   bool     `json:"verified"`
}

// runCopy is the copy subcommand: engine and CPU copy throughput on the
// same buffers.
func runCopy(e *env, args []string) (err error) {
	const cmd = "copy"
	var f copyFlags
	f.size.N = 4 << 20
	fs := newFlags(cmd)
	f.dev.register(fs)
	fs.Var(&f.size, "size", "bytes per copy, e.g. 64K or 4MiB")
	fs.BoolVar(&f.sweep, "sweep", false, "measure every size from 4 KiB to 8 MiB, doubling")
	fs.Var(&f.sizes, "sizes", "comma-separated sizes to measure, e.g. 4K,64K,1M")
	fs.IntVar(&f.window, "window", 128, "copies outstanding at once (128 as in the paper)")
	fs.BoolVar(&f.cold, "cold", false, "cache-cold buffers: rotate over twice the last-level cache per side (the default)")
	fs.BoolVar(&f.hot, "hot", false, "cache-hot buffers: copy the same buffer pair every time")
	fs.DurationVar(&f.duration, "duration", 2*time.Second, "how long to measure each size, for the engine and again for the CPU")
	fs.Int64Var(&f.iterations, "iterations", 0, "copies per size and mover instead of --duration")
	fs.BoolVar(&f.verify, "verify", false, "check every destination against its source after the engine's run")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per size (schema ioatctl.copy/1, docs/json.md; MB = 10^6 bytes)")
	fs.Var(&f.memory, "memory", "most memory the cold buffers may take, both sides together (default: a quarter of MemAvailable)")
	fs.StringVar(&f.plot, "plot", "", "also draw MB/s against size, engine and CPU, into `FILE`.svg or .png (with --sweep or --sizes)")
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	sizes := []int64{f.size.N}
	switch {
	case f.sweep && f.sizes.IsSet:
		return usagef(cmd, "--sweep and --sizes both give the sizes: pick one")
	case f.size.IsSet && (f.sweep || f.sizes.IsSet):
		return usagef(cmd, "--size gives one size; drop it to use --sweep or --sizes")
	case f.sweep:
		sizes = sweepSizes()
	case f.sizes.IsSet:
		sizes = f.sizes.V
	}
	for _, s := range sizes {
		if s < 1 || s > 1<<30 {
			return usagef(cmd, "size %s: want 1 byte to 1 GiB", units.Format(s))
		}
	}
	if f.cold && f.hot {
		return usagef(cmd, "--cold and --hot exclude each other")
	}
	if f.window < 1 {
		return usagef(cmd, "--window %d: want at least 1", f.window)
	}
	lim, err := parseLimit(cmd, set, f.duration, f.iterations)
	if err != nil {
		return err
	}
	if f.memory.IsSet && f.memory.N < 1<<20 {
		return usagef(cmd, "--memory %s: want at least 1M", units.Format(f.memory.N))
	}
	budget := memoryBudget()
	if f.memory.IsSet {
		budget = f.memory.N
	}
	if err := checkPlot(cmd, f.plot, len(sizes)); err != nil {
		return err
	}
	choice, err := f.dev.validate(cmd, fs)
	if err != nil {
		return err
	}
	lim.wait = choice.timeout

	r, err := openRig(e, choice)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	maxSize := int(slices.Max(sizes))
	bufs, err := newBufSet(r, maxSize, !f.hot, budget)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, bufs.close()) }()
	meta := cli.NewMeta("ioatctl")
	var llcBytes int64
	if l, err := cache.Last(); err == nil {
		llcBytes = l.Total
	}
	prog := cli.NewProgress(e.stderr, "ioatctl")
	defer prog.Stop()
	var rows []copyRow

	cacheKind := "cold"
	if f.hot {
		cacheKind = "hot"
	}
	if !f.json {
		fmt.Fprintf(e.stdout, "device:  %s\n", r.describe())
		cacheNote := "hot (one buffer pair)"
		if !f.hot {
			cacheNote = bufs.coldNote
		}
		window := fmt.Sprint(f.window)
		if cut := windowCut(f.window, bufs, sizes); cut != "" && !set["window"] {
			// The default window, deeper than the buffers: say what ran,
			// as a fact of the run rather than a warning.
			window += " (" + cut + ": one copy per buffer slot)"
		}
		fmt.Fprintf(e.stdout, "run:     %s, policy %s, window %s, %s per size and mover\n",
			r.queueCount(), choice.policy, window, lim.describe("copies"))
		fmt.Fprintf(e.stdout, "cache:   %s\n", cacheNote)
		if note := windowNote(f.window, bufs, sizes); note != "" && set["window"] {
			fmt.Fprintf(e.stdout, "window:  %s\n", note)
		}
		fmt.Fprintf(e.stdout, "memory:  %s\n", bufs.memNote)
		if r.emulated {
			fmt.Fprint(e.stdout, emulatedCopyNote)
		}
		fmt.Fprintf(e.stdout, "MB = 10^6 bytes; CPU = Go's copy() on one core, on the same buffers, sizes and pattern.\n\n")
		fmt.Fprintf(e.stdout, "%9s %12s %12s %12s %12s %8s", "SIZE", "ENGINE MB/s", "ENGINE op/s", "CPU MB/s", "CPU op/s", "RATIO")
		if f.verify {
			fmt.Fprintf(e.stdout, " %9s", "VERIFIED")
		}
		fmt.Fprintln(e.stdout)
	}
	for i, size := range sizes {
		row := copyRow{
			Schema: copySchema, Run: meta, Device: r.name, Emulated: r.emulated, CBVER: cbverString(r.info.Version), Channels: r.channels(),
			Policy: choice.policy.String(), Cache: cacheKind, Size: size, Window: effWindow(f.window, bufs, int(size)), LLCBytes: llcBytes,
		}
		if !f.hot {
			row.ColdBytes = int64(bufs.perSide(int(size)))
		}
		step := fmt.Sprintf("copy %s [%d/%d]", units.Format(size), i+1, len(sizes))
		verr, err := measureCopy(r.eng, bufs, int(size), f.window, lim, f.verify, &row, func(mover string) { prog.Set("%s: %s", step, mover) })
		prog.Clear()
		if err != nil {
			return fmt.Errorf("copy of %s: %w", units.Format(size), err)
		}
		if f.json {
			b, _ := json.Marshal(row)
			fmt.Fprintf(e.stdout, "%s\n", b)
		} else {
			fmt.Fprintf(e.stdout, "%9s %12.1f %12.1f %12.1f %12.1f %7.2fx", units.Format(size), row.MBPerS, row.OpsPerS, row.CPUMBPerS, row.CPUOpsPerS, row.Ratio)
			if f.verify {
				fmt.Fprintf(e.stdout, " %9s", yesNo(row.Verified))
			}
			fmt.Fprintln(e.stdout)
		}
		rows = append(rows, row)
		if verr != nil {
			return fmt.Errorf("copy of %s: verification failed: %w", units.Format(size), verr)
		}
	}
	prog.Stop()
	if f.plot != "" {
		cacheTitle := "cache hot"
		switch {
		case !f.hot && bufs.short:
			cacheTitle = "NOT cold (--memory too small)"
		case !f.hot:
			cacheTitle = "cache cold"
		}
		if err := plotCopy(f.plot, r, rows, cacheTitle); err != nil {
			return err
		}
		if !f.json {
			fmt.Fprintf(e.stdout, "\nplot:    %s\n", f.plot)
		}
	}
	return nil
}

// copySchema names and versions the JSON record of copy (docs/json.md).
const copySchema = "ioatctl.copy/1"

// emulatedCopyNote is what copy says about figures of the emulated engine.
const emulatedCopyNote = `emulated: the engine is CPU threads (one goroutine per channel copying with
         the CPU, on whichever cores are free), not a DMA engine. Its MB/s shows
         the driver's and the model's overhead and how copies spread over cores;
         it says nothing about what CBDMA hardware would do. With several
         channels it can beat the CPU column, which is one core copying.
`

// parseLimit checks --duration and --iterations (set names the flags given).
func parseLimit(cmd string, set map[string]bool, d time.Duration, iterations int64) (limit, error) {
	switch {
	case set["duration"] && set["iterations"]:
		return limit{}, usagef(cmd, "--duration and --iterations both bound the run: pick one")
	case iterations < 0:
		return limit{}, usagef(cmd, "--iterations %d: want a positive count", iterations)
	case iterations == 0 && d <= 0:
		return limit{}, usagef(cmd, "--duration %v: want a positive duration such as 2s", d)
	}
	return limit{iterations: iterations, duration: d}, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// round1 rounds to one decimal, for JSON that reads well.
func round1(x float64) float64 { return math.Round(x*10) / 10 }

// measureCopy runs copies of size bytes on the engine, verifies them when
// asked, then runs the same copies with the CPU, and fills row. It returns
// the verification failure apart from the errors that stop the run.
func measureCopy(eng *ioat.Engine, b *bufSet, size, window int, lim limit, verify bool, row *copyRow, phase func(string)) (verr, err error) {
	n := b.slots(size)
	phase("engine")
	if verify {
		poison(b.dst.Bytes(), b.perSide(size))
	}
	ops, secs, err := engineCopies(eng, b, size, window, lim)
	if err != nil {
		return nil, err
	}
	if verify {
		verr = checkSlots(b.src.Bytes(), b.dst.Bytes(), size, int(min(ops, int64(n))))
		row.Verified = verr == nil
	}
	phase("CPU")
	cops, csecs := cpuCopies(b, size, lim)
	row.Ops, row.Seconds = ops, secs
	row.MBPerS = round1(float64(ops) * float64(size) / secs / 1e6)
	row.OpsPerS = round1(float64(ops) / secs)
	row.CPUOps, row.CPUSeconds = cops, csecs
	row.CPUMBPerS = round1(float64(cops) * float64(size) / csecs / 1e6)
	row.CPUOpsPerS = round1(float64(cops) / csecs)
	if row.CPUMBPerS > 0 {
		row.Ratio = math.Round(row.MBPerS/row.CPUMBPerS*100) / 100
	}
	return verr, nil
}

// effWindow is the window copies of size bytes run with: --window, at
// most the buffer slots of that size, so no two copies in flight write
// one destination (the bytes would land in either order, and on the
// models, whose engines are goroutines, the writes race).
func effWindow(window int, b *bufSet, size int) int { return min(window, b.slots(size)) }

// windowCut lists the sizes whose window the buffer slots cut below
// window, with the window they run ("16 for 4 MiB"); "" when none.
func windowCut(window int, b *bufSet, sizes []int64) string {
	var cut []string
	for _, s := range sizes {
		if w := effWindow(window, b, int(s)); w < window {
			cut = append(cut, fmt.Sprintf("%d for %s", w, units.Format(s)))
		}
	}
	return strings.Join(cut, ", ")
}

// windowNote says for which sizes a --window the user gave was clamped to
// the buffer slots, and how to get the window asked for; "" when it was
// not.
func windowNote(window int, b *bufSet, sizes []int64) string {
	cut := windowCut(window, b, sizes)
	if cut == "" {
		return ""
	}
	fix := "raise --memory"
	if !b.cold {
		fix = "drop --hot"
	}
	return fmt.Sprintf("--window %d clamped to the buffer slots (%s): copies in flight never share a destination; for a deeper window %s",
		window, cut, fix)
}

// engineCopies keeps window copies outstanding on the engine (at most
// one per buffer slot: effWindow), rotating over the slots, until the
// limit, then waits for the rest. It returns the number of copies and the
// seconds from the first start to the last completion.
func engineCopies(eng *ioat.Engine, b *bufSet, size, window int, lim limit) (int64, float64, error) {
	n := int64(b.slots(size))
	src, dst := b.src.Bytes(), b.dst.Bytes()
	window = effWindow(window, b, size)
	ring := make([]*ioat.Cookie, window)
	w := int64(window)
	budget := lim.duration + lim.wait
	if lim.iterations > 0 {
		budget = lim.wait + time.Duration(lim.iterations)*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var sub, done int64
	drain := func() error {
		var errs []error
		for ; done < sub; done++ {
			errs = append(errs, eng.Wait(ctx, ring[done%w]))
			ring[done%w] = nil
		}
		return errors.Join(errs...)
	}
	start := time.Now()
	for !lim.done(sub, start) {
		if sub-done == w {
			if err := eng.Wait(ctx, ring[done%w]); err != nil {
				done++
				return 0, 0, errors.Join(stuck(err), drain())
			}
			ring[done%w] = nil
			done++
		}
		k := int(sub % n)
		c, err := eng.ICopy(slot(dst, k, size), slot(src, k, size))
		if err != nil {
			return 0, 0, errors.Join(err, drain())
		}
		ring[sub%w] = c
		sub++
	}
	if err := drain(); err != nil {
		return 0, 0, stuck(err)
	}
	return sub, time.Since(start).Seconds(), nil
}

// stuck explains a wait that ran out of time.
func stuck(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the engine stopped completing copies: %w (see `ioatctl verify`; --timeout waits longer on a loaded machine)", err)
	}
	return err
}

// cpuCopies does what engineCopies does with Go's copy, one at a time.
func cpuCopies(b *bufSet, size int, lim limit) (int64, float64) {
	n := int64(b.slots(size))
	src, dst := b.src.Bytes(), b.dst.Bytes()
	var ops int64
	start := time.Now()
	for !lim.done(ops, start) {
		k := int(ops % n)
		copy(slot(dst, k, size), slot(src, k, size))
		ops++
	}
	return ops, time.Since(start).Seconds()
}

// checkSlots checks that the first used destination slots hold their
// source slots.
func checkSlots(src, dst []byte, size, used int) error {
	for k := range used {
		s, d := slot(src, k, size), slot(dst, k, size)
		if i := firstDiff(d, s); i >= 0 {
			return fmt.Errorf("destination slot %d, byte %d: got %#02x, want %#02x", k, i, d[i], s[i])
		}
	}
	return nil
}
