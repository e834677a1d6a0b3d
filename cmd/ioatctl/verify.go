package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/pci"
)

// Geometry of verify's random operations.
const (
	// verifyBuf is the size of each channel's source and destination.
	verifyBuf = 4 << 20
	// verifySmall is the usual largest length (SPDK verify's 512 KiB).
	verifySmall = 512 << 10
	// verifyGuard is how many bytes each side of a destination range are
	// checked to be untouched.
	verifyGuard = 4 << 10
	// verifyBatch is the most operations in flight at once per channel.
	// Their destination ranges, guards included, never overlap, so the
	// result does not depend on the order the engine writes them.
	verifyBatch = 16
	// verifyFullEvery is how often (in batches) the whole destination is
	// compared, to catch writes outside every range checked.
	verifyFullEvery = 64
)

// verifyStats counts one channel's operations.
type verifyStats struct {
	Schema       string   `json:"schema"`
	Run          cli.Meta `json:"run"`
	Device       string   `json:"device"`
	Emulated     bool     `json:"emulated"`
	Seed         uint64   `json:"seed"`
	Channel      string   `json:"channel"`
	CopiesOK     int64    `json:"copies_ok"`
	CopiesFailed int64    `json:"copies_failed"`
	FillsOK      int64    `json:"fills_ok"`
	FillsFailed  int64    `json:"fills_failed"`
	// StrayWrites counts whole-buffer checks that found bytes changed
	// outside every operation's range.
	StrayWrites int64 `json:"stray_writes"`
	Bytes       int64 `json:"bytes"`
	// CPUFills is set when the channel has no fill capability, so the
	// engine's fills ran on the CPU.
	CPUFills bool `json:"cpu_fills,omitempty"`
	// First describes the first failure.
	First string `json:"first_failure,omitempty"`
}

func (s *verifyStats) failed() int64 { return s.CopiesFailed + s.FillsFailed + s.StrayWrites }

// fail records a failure description if it is the first.
func (s *verifyStats) fail(format string, args ...any) {
	if s.First == "" {
		s.First = fmt.Sprintf(format, args...)
	}
}

// runVerify is the verify subcommand.
func runVerify(e *env, args []string) (err error) {
	const cmd = "verify"
	var dev deviceFlags
	fset := newFlags(cmd)
	dev.register(fset)
	duration := fset.Duration("duration", 2*time.Second, "how long each channel runs")
	iterations := fset.Int64("iterations", 0, "operations per channel instead of --duration")
	seed := fset.Uint64("seed", 0, "random seed (0: pick one and print it)")
	asJSON := fset.Bool("json", false, "print one JSON object per channel (schema ioatctl.verify/1, docs/json.md)")
	pos, err := parseFlags(e, fset, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	lim, err := parseLimit(cmd, set, *duration, *iterations)
	if err != nil {
		return err
	}
	choice, err := dev.validate(cmd, fset)
	if err != nil {
		return err
	}
	lim.wait = choice.timeout
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())&(1<<53-1) | 1
	}

	b, err := openBackend(e, choice)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()
	// One engine per CBDMA channel (every channel of every function), so
	// that every operation is counted on the channel that ran it. A DSA
	// is configured whole by the one engine that opens it, so its work
	// queues cannot be split among engines: it runs one stream over all
	// of them, and the table says how the stream spread.
	var engs []*ioat.Engine
	var names []string // each engine's stream, named for tables and JSON
	var wqs []int      // each engine's DSA work queues (0: a CBDMA channel)
	defer func() {
		for _, eng := range engs {
			err = errors.Join(err, eng.Close())
		}
	}()
	r := &rig{backend: b}
	open := func(d pci.Device, mask uint32, wq string) error {
		o := ioat.DefaultEngineOptions()
		o.CPUThreshold = -1
		o.HybridHead = choice.hybrid
		o.ChannelMask = mask
		o.Channel.Interrupts = choice.irq
		b.ringMemory(&o.Channel)
		o.Channel.Watchdog = choice.watchdog()
		o.Channel.TakeOver = choice.takeOver
		o.Channel.Logger = e.logger()
		b.workQueues(&o, choice)
		var eng *ioat.Engine
		var err error
		if wq != "" {
			eng, err = b.engine(e, o, []string{wq})
		} else {
			eng, err = ioat.NewEngine([]pci.Device{d}, o)
		}
		if err != nil {
			return engineHint(err, b)
		}
		engs = append(engs, eng)
		r.chans = append(r.chans, channelInfos(eng)...)
		return nil
	}
	for _, wq := range b.user {
		// One stream per kernel work queue.
		if err := open(nil, 0, wq); err != nil {
			return err
		}
		names = append(names, wq)
		wqs = append(wqs, 1)
	}
	for _, d := range b.devs {
		if ioat.IsDSA(d) {
			if err := open(d, 0, ""); err != nil {
				return err
			}
			name := d.Address().String()
			if b.emulated {
				name = "emulated-dsa"
			}
			names = append(names, name)
			wqs = append(wqs, len(engs[len(engs)-1].Queues()))
			continue
		}
		n, err := ioat.ChannelCount(d)
		if err != nil {
			return engineHint(err, b)
		}
		for i := range n {
			if err := open(d, 1<<i, ""); err != nil {
				return err
			}
			names = append(names, r.channelName(len(r.chans)-1))
			wqs = append(wqs, 0)
		}
	}
	r.eng, r.info = engs[0], engs[0].Queues()[0].Info()
	per := "channel" // what one stream runs on
	for _, n := range wqs {
		if n > 0 {
			per = "stream"
		}
	}
	if !*asJSON {
		fmt.Fprintf(e.stdout, "device:  %s\n", r.describe())
		fmt.Fprintf(e.stdout, "memory:  %s\n", r.memoryNote(nil))
		fmt.Fprintf(e.stdout, "seed:    %d (repeat this run with --seed %d)\n", *seed, *seed)
		fmt.Fprintf(e.stdout, "run:     %s per %s; random copies and 64-bit pattern fills in %s buffers, %s guards checked\n\n",
			lim.describe("operations"), per, units.Format(verifyBuf), units.Format(verifyGuard))
	}

	meta := cli.NewMeta("ioatctl")
	stats := make([]verifyStats, len(engs))
	prog := cli.NewProgress(e.stderr, "ioatctl")
	prog.Set("verify: %s, %s", r.queueCount(), lim.describe("operations per "+per))
	errs := make([]error, len(engs))
	var wg sync.WaitGroup
	for i, eng := range engs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i] = verifyStats{Schema: verifySchema, Run: meta, Device: b.name, Emulated: b.emulated, Seed: *seed, Channel: names[i]}
			errs[i] = verifyChannel(r, eng, *seed, uint64(i), lim, &stats[i])
		}()
	}
	wg.Wait()
	prog.Stop()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	var total verifyStats
	total.Channel = "total"
	for _, s := range stats {
		total.CopiesOK += s.CopiesOK
		total.CopiesFailed += s.CopiesFailed
		total.FillsOK += s.FillsOK
		total.FillsFailed += s.FillsFailed
		total.StrayWrites += s.StrayWrites
		total.Bytes += s.Bytes
		if total.First == "" && s.First != "" {
			total.First = s.Channel + ": " + s.First
		}
	}
	if *asJSON {
		for _, s := range stats {
			js, _ := json.Marshal(s)
			fmt.Fprintf(e.stdout, "%s\n", js)
		}
	} else {
		fmt.Fprintf(e.stdout, "%-14s %10s %13s %10s %12s %7s %10s\n", "CHANNEL", "COPIES OK", "COPIES FAILED", "FILLS OK", "FILLS FAILED", "STRAYS", "MB MOVED")
		rows := stats
		if len(stats) > 1 {
			rows = append(rows[:len(rows):len(rows)], total)
		}
		for _, s := range rows {
			fmt.Fprintf(e.stdout, "%-14s %10d %13d %10d %12d %7d %10.1f\n", s.Channel, s.CopiesOK, s.CopiesFailed, s.FillsOK, s.FillsFailed, s.StrayWrites, float64(s.Bytes)/1e6)
		}
		for i, s := range stats {
			if wqs[i] > 0 {
				fmt.Fprintf(e.stdout, "%s ran one stream over its %s, requests spread round-robin (%s).\n", s.Channel, plural(wqs[i], "work queue"), wqSpread(engs[i]))
			}
		}
		for _, s := range stats {
			if s.CPUFills {
				fmt.Fprintf(e.stdout, "%s has no fill capability: its fills ran on the CPU.\n", s.Channel)
			}
		}
	}
	if n := total.failed(); n > 0 {
		ops := total.CopiesOK + total.CopiesFailed + total.FillsOK + total.FillsFailed
		return fmt.Errorf("verify: %d failures in %d operations (seed %d); first: %s", n, ops, *seed, total.First)
	}
	if !*asJSON {
		fmt.Fprintln(e.stdout, "\nall operations verified.")
	}
	return nil
}

// verifySchema names and versions the JSON record of verify
// (docs/json.md).
const verifySchema = "ioatctl.verify/1"

// vop is one random operation of verify.
type vop struct {
	fill           bool
	srcOff, dstOff int
	n              int
	pattern        uint64
	cookie         *ioat.Cookie
	err            error
}

// wqSpread says how many requests each of an engine's queues completed:
// "WQ 0 410, WQ 1 402".
func wqSpread(eng *ioat.Engine) string {
	var parts []string
	for i, st := range eng.ChannelStats() {
		parts = append(parts, fmt.Sprintf("WQ %d %d", eng.Queues()[i].Info().Index, st.Ops))
	}
	return strings.Join(parts, ", ")
}

// verifyChannel runs random operations on a one-channel engine until the
// limit and checks each. It returns an error only when it cannot run;
// failed operations are counted in st.
func verifyChannel(r *rig, eng *ioat.Engine, seed, ch uint64, lim limit, st *verifyStats) (err error) {
	rng := rand.New(rand.NewPCG(seed, ch))
	er := &rig{backend: r.backend, eng: eng, info: r.info}
	srcBuf, err := er.alloc(verifyBuf)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srcBuf.Close()) }()
	dstBuf, err := er.alloc(verifyBuf)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dstBuf.Close()) }()
	src, dst := srcBuf.Bytes(), dstBuf.Bytes()
	fillRandom(src, seed^ch<<32)
	fillRandom(dst, ^seed^ch<<32)
	srcWant := bytes.Clone(src)
	want := bytes.Clone(dst)
	st.CPUFills = !eng.Queues()[0].Info().Fill

	budget := lim.duration + lim.wait
	if lim.iterations > 0 {
		budget = lim.wait + time.Duration(lim.iterations)*10*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()

	var ops int64
	batch := make([]vop, 0, verifyBatch)
	start := time.Now()
	for batches := 1; !lim.done(ops, start); batches++ {
		batch = batch[:0]
		for len(batch) < verifyBatch && !lim.done(ops+int64(len(batch)), start) {
			op := randomOp(rng)
			if overlapsAny(batch, op) {
				break
			}
			batch = append(batch, op)
		}
		if len(batch) == 0 {
			// The first operation of a batch always fits.
			return errors.New("verify: internal error: empty batch")
		}
		for i := range batch {
			op := &batch[i]
			if op.fill {
				op.cookie, op.err = eng.IFill(dst[op.dstOff:op.dstOff+op.n], op.pattern)
			} else {
				op.cookie, op.err = eng.ICopy(dst[op.dstOff:op.dstOff+op.n], src[op.srcOff:op.srcOff+op.n])
			}
		}
		for i := range batch {
			op := &batch[i]
			if op.err == nil {
				op.err = eng.Wait(ctx, op.cookie)
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("verify: channel %s stopped completing operations after %d: %w", st.Channel, ops, ctx.Err())
		}
		for i := range batch {
			checkOp(&batch[i], src, dst, want, st)
		}
		ops += int64(len(batch))
		if batches%verifyFullEvery == 0 {
			checkWhole(dst, want, st)
		}
	}
	checkWhole(dst, want, st)
	if i := firstDiff(src, srcWant); i >= 0 {
		st.StrayWrites++
		st.fail("the source buffer changed at byte %d", i)
	}
	return nil
}

// randomOp draws one operation: a copy or a fill, 512 KiB at most three
// times in four and up to the whole buffer otherwise, at random offsets;
// half the fills are 8-byte aligned in length and offset, as SPDK's.
func randomOp(rng *rand.Rand) vop {
	maxLen := verifySmall
	if rng.IntN(4) == 0 {
		maxLen = verifyBuf
	}
	op := vop{fill: rng.IntN(2) == 0, n: rng.IntN(maxLen + 1)}
	op.srcOff = rng.IntN(verifyBuf - op.n + 1)
	op.dstOff = rng.IntN(verifyBuf - op.n + 1)
	if op.fill {
		op.pattern = rng.Uint64()
		if rng.IntN(2) == 0 {
			op.n &^= 7
			op.dstOff &^= 7
		}
	}
	return op
}

// guardRange is the part of the destination an operation's check covers:
// its range and verifyGuard bytes on each side, within the buffer.
func guardRange(op vop) (lo, hi int) {
	return max(0, op.dstOff-verifyGuard), min(verifyBuf, op.dstOff+op.n+verifyGuard)
}

// overlapsAny reports whether op's checked range meets one of batch's.
func overlapsAny(batch []vop, op vop) bool {
	lo, hi := guardRange(op)
	for _, b := range batch {
		blo, bhi := guardRange(b)
		if lo < bhi && blo < hi {
			return true
		}
	}
	return false
}

// checkOp applies op to the expected destination and compares the
// operation's range and guards with the real one. A mismatch is counted
// and the expected bytes resynchronised, so it is reported once.
func checkOp(op *vop, src, dst, want []byte, st *verifyStats) {
	what := "copy"
	if op.fill {
		what = "fill"
		patternFill(want[op.dstOff:op.dstOff+op.n], op.pattern)
	} else {
		copy(want[op.dstOff:op.dstOff+op.n], src[op.srcOff:op.srcOff+op.n])
	}
	lo, hi := guardRange(*op)
	ok := op.err == nil
	if op.err != nil {
		st.fail("%s of %d bytes to offset %d: %v", what, op.n, op.dstOff, op.err)
	} else if i := firstDiff(dst[lo:hi], want[lo:hi]); i >= 0 {
		ok = false
		at := lo + i
		where := "inside the range"
		if at < op.dstOff || at >= op.dstOff+op.n {
			where = "in the guard bytes"
		}
		st.fail("%s of %d bytes (src %d, dst %d, pattern %#x): byte %d %s: got %#02x, want %#02x",
			what, op.n, op.srcOff, op.dstOff, op.pattern, at, where, dst[at], want[at])
	}
	if !ok {
		copy(want[lo:hi], dst[lo:hi])
	}
	switch {
	case op.fill && ok:
		st.FillsOK++
	case op.fill:
		st.FillsFailed++
	case ok:
		st.CopiesOK++
	default:
		st.CopiesFailed++
	}
	if ok {
		st.Bytes += int64(op.n)
	}
}

// checkWhole compares the whole destination with what it should hold.
func checkWhole(dst, want []byte, st *verifyStats) {
	if i := firstDiff(dst, want); i >= 0 {
		st.StrayWrites++
		st.fail("byte %d of the destination changed outside every operation: got %#02x, want %#02x", i, dst[i], want[i])
		copy(want, dst)
	}
}

// patternFill lays the 64-bit pattern over b little-endian from its start,
// as the engine's IFill does: byte i gets byte i%8 of the pattern.
func patternFill(b []byte, pattern uint64) {
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], pattern)
	n := copy(b, p[:])
	for done := n; done < len(b); done *= 2 {
		copy(b[done:], b[:done])
	}
}
