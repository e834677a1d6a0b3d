package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/gomx-dev/gomx/cmd/internal/ioatdev"
	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// A job's copy engine (--engine): every rank gives its boards an
// ioat.Engine (mx.LocalOptions.Engine), which copies the large messages
// it receives out of the sender's shared buffers under the strategies
// engine (always) and auto (from GOMX_SHM_ENGINE_MIN, 2 MiB, up). The
// channels are opened as ioatctl opens them (cmd/internal/ioatdev): the
// emulated CBDMA model, CPU threads of this process, or CBDMA functions
// bound to vfio-pci. A VFIO group belongs to one process, so with real
// channels rank r takes the r-th function.
//
// Under the strategies shared and engine, the ranks send from buffers the
// board allocates in its shared pool (mx.Endpoint.AllocShared): those are
// the buffers the receiver can copy straight out of.

// engineNone is --engine's value that gives the boards no engine.
const engineNone = "none"

// registerEngine adds --engine and --engine-cpu.
func (f *commonFlags) registerEngine(fs *flag.FlagSet) {
	fs.StringVar(&f.job.engine, "engine", "", "between processes: the copy engine of every rank's boards, for --strategy engine or auto: emulated (the CBDMA model: CPU threads), none, or PCI addresses of CBDMA functions bound to vfio-pci, one per rank (default: the bound functions when there are enough, else emulated, when --strategy asks for engine; none otherwise)")
	fs.IntVar(&f.job.engineCPU, "engine-cpu", 0, "with the emulated engine: run every rank's engine threads on this CPU, a processor of its own as a device has its own silicon (e.g. on 2 CPUs, --engine-cpu 1: rank 0 computes on CPU 0 while its engine copies on CPU 1); default: the engine's threads run wherever the rank's do")
}

// jobEngine is a validated --engine: how each rank opens its channels.
type jobEngine struct {
	kind  string        // "" (no engine), "emulated" or "pci"
	addrs []pci.Address // for "pci": rank r opens addrs[r]
	why   string        // why this engine, for the header
	cpu   int           // for "emulated": the CPU of its threads, or -1
}

// sysfsRoot and devVFIO are where the VFIO functions are looked up (the
// environment ioatctl reads too, for tests on a fake sysfs).
func sysfsRoot() string { return envOr("GOMX_SYSFS_ROOT", "/sys") }
func devVFIO() string   { return envOr("GOMX_DEV_VFIO", "/dev/vfio") }

// chooseEngine validates --engine and --engine-cpu against the strategies
// and the job's size, and settles their defaults.
func (f *benchFlags) chooseEngine(cmd string, strategies []string, procs int) (jobEngine, error) {
	e, err := f.pickEngine(cmd, strategies, procs)
	e.cpu = -1
	if err != nil || !f.job.given["engine-cpu"] {
		return e, err
	}
	switch {
	case e.kind != "emulated":
		return jobEngine{}, usagef(cmd, "--engine-cpu %d places the emulated engine's threads, and this run's engine is %q: add --engine emulated, or drop --engine-cpu", f.job.engineCPU, cmp.Or(e.kind, engineNone))
	case f.job.engineCPU < 0:
		return jobEngine{}, usagef(cmd, "--engine-cpu %d: want a CPU number (see lscpu), or leave it out", f.job.engineCPU)
	}
	e.cpu = f.job.engineCPU
	return e, nil
}

// pickEngine validates --engine against the strategies and the job's
// size, and settles its default.
func (f *benchFlags) pickEngine(cmd string, strategies []string, procs int) (jobEngine, error) {
	wantsEngine := slices.Contains(strategies, mx.LargeEngine.String())
	usesEngine := wantsEngine || slices.Contains(strategies, "") || slices.Contains(strategies, mx.LargeAuto.String())
	v := strings.TrimSpace(f.job.engine)
	switch {
	case v == engineNone && wantsEngine:
		return jobEngine{}, usagef(cmd, "--strategy engine copies with the engine: drop --engine none, or choose another --strategy")
	case v == engineNone:
		return jobEngine{}, nil
	case v != "" && !usesEngine:
		return jobEngine{}, usagef(cmd, "--engine %s: only the strategies engine and auto use a copy engine (--strategy %s does not): add --strategy engine, or drop --engine", v, f.job.strategy)
	case v == "emulated":
		return jobEngine{kind: "emulated", why: "asked for with --engine emulated"}, nil
	case v == "":
		if !wantsEngine {
			return jobEngine{}, nil
		}
		return autoEngine(procs), nil
	}
	var e jobEngine
	e.kind, e.why = "pci", "asked for with --engine"
	for _, s := range strings.Split(v, ",") {
		a, err := pci.ParseAddress(strings.TrimSpace(s))
		if err != nil {
			return jobEngine{}, usagef(cmd, "--engine %s: %v; want emulated, none, or PCI addresses such as 0000:00:04.0, one per rank (see `ioatctl list`)", v, err)
		}
		if slices.Contains(e.addrs, a) {
			return jobEngine{}, usagef(cmd, "--engine %s: %s is given twice: a VFIO function belongs to one process, give each rank its own", v, a)
		}
		e.addrs = append(e.addrs, a)
	}
	if len(e.addrs) < procs {
		return jobEngine{}, usagef(cmd, "--engine %s names %d CBDMA functions for %d processes: a VFIO function belongs to one process, name one per rank (or use --engine emulated)", v, len(e.addrs), procs)
	}
	return e, nil
}

// autoEngine is --strategy engine's default: one CBDMA function bound to
// vfio-pci per rank when there are enough, else the emulated model.
func autoEngine(procs int) jobEngine {
	fns, err := ioatdev.CBDMAFunctions(vfio.Sysfs{Root: sysfsRoot()})
	var bound []pci.Address
	for _, f := range fns {
		if f.Driver == "vfio-pci" {
			bound = append(bound, f.Addr)
		}
	}
	switch {
	case err != nil:
		return jobEngine{kind: "emulated", why: fmt.Sprintf("cannot list PCI functions in sysfs (%v)", err)}
	case len(bound) == 0:
		return jobEngine{kind: "emulated", why: "no CBDMA function is bound to vfio-pci"}
	case len(bound) < procs:
		return jobEngine{kind: "emulated", why: fmt.Sprintf("%d CBDMA functions bound to vfio-pci for %d processes, which need one each", len(bound), procs)}
	}
	return jobEngine{kind: "pci", addrs: bound, why: fmt.Sprintf("%d CBDMA functions bound to vfio-pci, one per rank", len(bound))}
}

// describe is the engine's part of the report header.
func (e jobEngine) describe() string {
	switch e.kind {
	case "emulated":
		if e.cpu >= 0 {
			return fmt.Sprintf("; copy engine: emulated CBDMA, 1 channel per rank, its threads on CPU %d (--engine-cpu: a processor of its own, as a device's silicon; %s)", e.cpu, e.why)
		}
		return fmt.Sprintf("; copy engine: emulated CBDMA, 1 channel per rank (CPU threads of each rank: on a machine with few cores it competes with the ranks for them, --engine-cpu gives it one; %s)", e.why)
	case "pci":
		return fmt.Sprintf("; copy engine: vfio-pci, rank r on the r-th of %v (%s)", e.addrs, e.why)
	}
	return ""
}

// cpuField is the engine's JSON engine_cpu: its threads' CPU, or nil.
func (e jobEngine) cpuField() *int {
	if e.cpu < 0 {
		return nil
	}
	return &e.cpu
}

// name is the engine's JSON name: "emulated", rank 0's PCI address, or "".
func (e jobEngine) name() string {
	switch e.kind {
	case "emulated":
		return "emulated"
	case "pci":
		return e.addrs[0].String()
	}
	return ""
}

// rankEngine is one rank's opened engine.
type rankEngine struct {
	set *ioatdev.Set
	eng *ioat.Engine
}

// open opens rank's channels and an engine over them that offloads every
// copy it is given (mx decides what to give it). It returns nil, nil when
// the job has no engine.
func (e jobEngine) open(rank int) (*rankEngine, error) {
	var set *ioatdev.Set
	var err error
	switch e.kind {
	case "":
		return nil, nil
	case "emulated":
		po := emulated.CBDMAOptions{Channels: 1}
		if e.cpu >= 0 {
			po.CPUs = []int{e.cpu}
		}
		set, err = ioatdev.OpenEmulated(po)
	default:
		set, err = ioatdev.OpenVFIO(vfio.Sysfs{Root: sysfsRoot()}, devVFIO(), e.addrs[rank:rank+1], "--engine emulated")
	}
	if err != nil {
		return nil, fmt.Errorf("--engine: rank %d: %w", rank, err)
	}
	o := ioat.DefaultEngineOptions()
	o.CPUThreshold = -1
	// A wait longer than the engine's short spin sleeps on the channel's
	// interrupt, as a driver waits on its device, instead of polling the
	// rank's CPU away from the rank (and, for the emulated model, from the
	// channel's own thread).
	o.Channel.Interrupts = true
	if set.Emulated {
		// The model needs no hugepages: its rings in locked 4 KiB pages
		// fit the common 8 MiB locked-memory limit.
		o.Channel.Memory.PageSize = hugepage.Size4K
	}
	eng, err := ioat.NewEngine(set.Devs, o)
	if err != nil {
		set.Close()
		if errors.Is(err, pci.ErrBusy) {
			err = fmt.Errorf("%w (another process holds the channel; see `ioatctl list`, or use --engine emulated)", err)
		}
		return nil, fmt.Errorf("--engine: rank %d: %w", rank, err)
	}
	return &rankEngine{set: set, eng: eng}, nil
}

// close closes the engine, then its devices; the boards using it must be
// closed first.
func (r *rankEngine) close() error {
	if r == nil {
		return nil
	}
	return errors.Join(r.eng.Close(), r.set.Close())
}

// sendsShared reports whether a strategy sends from the board's shared
// pool: shared and engine copy only out of it.
func sendsShared(strategy string) bool {
	return strategy == mx.LargeShared.String() || strategy == mx.LargeEngine.String()
}

// sharedBuffers replaces bufs by as many buffers of the same sizes from
// ep's shared pool when strategy sends from it; the board frees them when
// it closes.
func sharedBuffers(ep *mx.Endpoint, strategy string, bufs [][]byte) error {
	if !sendsShared(strategy) {
		return nil
	}
	for i, b := range bufs {
		s, err := ep.AllocShared(max(len(b), 1))
		if err != nil {
			return fmt.Errorf("--strategy %s sends from shared buffers: %w", strategy, err)
		}
		bufs[i] = s[:len(b)]
	}
	return nil
}
