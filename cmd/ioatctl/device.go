package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/ioatdev"
	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// deviceFlags are the flags copy, verify and overlap share: which channels
// to run on and how to drive them.
type deviceFlags struct {
	device     string
	channels   int
	policy     string
	interrupts bool
	bandwidth  units.Size
	dsaBW      units.Size
	wqs        int
	hybrid     units.Size
	cbver      string
	chancnt    int
	timeout    time.Duration
	takeOver   bool
}

// register adds the device flags to fs.
func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.device, "device", "auto", "auto, emulated (the CBDMA model), emulated-dsa (the DSA model), emulated,emulated-dsa (both behind one IOMMU, in one engine), PCI addresses of CBDMA functions or DSAs bound to vfio-pci, or the kernel's DSA user work queues (wq0.0; see dsa-config) (comma-separated); auto uses every bound CBDMA function, else the emulated engine")
	fs.IntVar(&d.channels, "channels", 1, "channels of the emulated engine (with emulated-dsa: the DSA's work queues); on real functions (auto, or PCI addresses), how many functions, each run with every channel or work queue it has (with addresses: defaults to their number)")
	fs.StringVar(&d.policy, "policy", "round-robin", "how requests are spread over channels and work queues: "+ioat.PolicyList()+" (by measured rate; docs/copy-engines.md)")
	fs.Var(&d.hybrid, "hybrid-head", "hybrid mode: the CPU copies this many bytes at the head of each copy of at least 1 MiB while the engine copies the rest (0: off, the default; docs/copy-engines.md)")
	fs.BoolVar(&d.interrupts, "interrupts", false, "sleep on the channels' MSI-X interrupts instead of polling while waiting")
	fs.Var(&d.bandwidth, "bandwidth", "emulated engines only: copy rate cap in bytes per second of each CBDMA model channel and of the DSA model, with size suffixes (1G = 1 GiB/s); 0 for none")
	fs.Var(&d.dsaBW, "dsa-bandwidth", "emulated,emulated-dsa only: the DSA model's rate cap, so it can be faster or slower than the channels (default: --bandwidth)")
	fs.IntVar(&d.wqs, "wqs", 1, "emulated,emulated-dsa only: work queues of the DSA model (one engine each; --channels counts the CBDMA model's channels)")
	fs.StringVar(&d.cbver, "cbver", "3.3", "emulated engine only: CBVER of the model, 3.2, 3.3 or 3.4")
	fs.IntVar(&d.chancnt, "chancnt", 1, "emulated engine only: channels per PCI function (CHANCNT), 1 as on every Xeon, up to 4 as on older parts; --channels must be a multiple of it")
	fs.DurationVar(&d.timeout, "timeout", 30*time.Second, "how long to wait for the engine beyond the run's own length before calling it stuck")
	fs.BoolVar(&d.takeOver, "take-over", false, "open channels whose CHANCTRL.IN_USE claim is already set (a previous owner crashed or never closed them)")
}

// deviceChoice is a validated --device and its companions.
type deviceChoice struct {
	kind  string        // "auto", "emulated", "emulated-dsa", "emulated-mixed", "pci" or "user"
	addrs []pci.Address // for "pci"
	wqs   []string      // for "user": the kernel's user WQs

	channels int
	policy   ioat.Policy
	version  uint8
	// chancnt is the emulated functions' channel count (CHANCNT).
	chancnt   int
	bandwidth int64
	// dsaBW caps the DSA model, nwq counts its work queues beside the
	// CBDMA model's channels (emulated-mixed).
	dsaBW int64
	nwq   int
	// hybrid is EngineOptions.HybridHead.
	hybrid int
	// irq asks for interrupt-driven waits.
	irq bool
	// takeOver opens channels someone else claimed.
	takeOver bool
	// emuOnly names the emulated-only flags given explicitly.
	emuOnly []string
	// cmd is the subcommand, for usage errors found when opening.
	cmd string
	// timeout bounds every wait for the engine, beyond the run's length.
	timeout time.Duration
}

// validate checks the device flags of subcommand cmd, before anything is
// opened. Errors are usage errors.
func (d *deviceFlags) validate(cmd string, fs *flag.FlagSet) (deviceChoice, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c := deviceChoice{hybrid: int(d.hybrid.N), channels: d.channels, chancnt: d.chancnt, bandwidth: d.bandwidth.N, dsaBW: d.bandwidth.N, nwq: d.wqs, irq: d.interrupts, cmd: cmd, timeout: d.timeout, takeOver: d.takeOver}
	if set["dsa-bandwidth"] {
		c.dsaBW = d.dsaBW.N
	}
	if d.timeout <= 0 {
		return c, usagef(cmd, "--timeout %v: want a positive duration such as 30s", d.timeout)
	}
	switch {
	case d.device == "auto" || d.device == "emulated" || d.device == "emulated-dsa":
		c.kind = d.device
	case d.device == "emulated,emulated-dsa" || d.device == "emulated-dsa,emulated":
		c.kind = "emulated-mixed"
		if c.nwq < 1 || c.nwq > 8 {
			return c, usagef(cmd, "--wqs %d: the emulated DSA has 1 to 8 work queues (one per engine)", c.nwq)
		}
	case userWQName.MatchString(strings.Split(d.device, ",")[0]):
		c.kind = "user"
		for _, s := range strings.Split(d.device, ",") {
			s = strings.TrimSpace(s)
			if !userWQName.MatchString(s) {
				return c, usagef(cmd, "--device %s: %q is not a work queue name such as wq0.0 (see `ioatctl dsa-config --check`)", d.device, s)
			}
			c.wqs = append(c.wqs, s)
		}
		if set["channels"] && c.channels != len(c.wqs) {
			return c, usagef(cmd, "--channels %d but --device names %d work queues: drop --channels", c.channels, len(c.wqs))
		}
		c.channels = len(c.wqs)
	default:
		c.kind = "pci"
		seen := map[pci.Address]bool{}
		for _, s := range strings.Split(d.device, ",") {
			a, err := pci.ParseAddress(strings.TrimSpace(s))
			if err != nil {
				return c, usagef(cmd, "--device %s: %v; want auto, emulated, emulated-dsa or PCI addresses such as 0000:00:04.0 (see `ioatctl list`)", d.device, err)
			}
			if seen[a] {
				return c, usagef(cmd, "--device %s: %s is given twice", d.device, a)
			}
			seen[a] = true
			c.addrs = append(c.addrs, a)
		}
		if !set["channels"] {
			c.channels = len(c.addrs)
		} else if c.channels != len(c.addrs) {
			return c, usagef(cmd, "--channels %d but --device names %d functions: drop --channels, or name %d functions", c.channels, len(c.addrs), c.channels)
		}
	}
	if c.channels < 1 {
		return c, usagef(cmd, "--channels %d: want at least 1", c.channels)
	}
	if (c.kind == "emulated" || c.kind == "emulated-mixed") && c.channels > 16 {
		return c, usagef(cmd, "--channels %d: the emulated engine has at most 16 channels", c.channels)
	}
	if c.kind == "emulated-dsa" && c.channels > 8 {
		return c, usagef(cmd, "--channels %d: the emulated DSA has at most 8 work queues (one per engine)", c.channels)
	}
	p, err := ioat.ParsePolicy(d.policy)
	if err != nil {
		return c, usagef(cmd, "--policy %s: want %s", d.policy, ioat.PolicyList())
	}
	c.policy = p
	switch d.cbver {
	case "3.2":
		c.version = hw.Ver32
	case "3.3":
		c.version = hw.Ver33
	case "3.4":
		c.version = hw.Ver34
	default:
		return c, usagef(cmd, "--cbver %s: want 3.2, 3.3 or 3.4", d.cbver)
	}
	if c.hybrid < 0 {
		return c, usagef(cmd, "--hybrid-head must not be negative")
	}
	if c.bandwidth < 0 || c.dsaBW < 0 {
		return c, usagef(cmd, "--bandwidth and --dsa-bandwidth must not be negative")
	}
	if c.kind != "emulated-mixed" && (set["wqs"] || set["dsa-bandwidth"]) {
		return c, usagef(cmd, "--wqs and --dsa-bandwidth size the DSA model beside the CBDMA model: use them with --device emulated,emulated-dsa (with emulated-dsa alone, --channels counts its work queues and --bandwidth caps it)")
	}
	if c.kind == "emulated-dsa" && (set["cbver"] || set["chancnt"]) {
		return c, usagef(cmd, "--cbver and --chancnt apply to the CBDMA model only: drop them, or use --device emulated")
	}
	switch {
	case c.chancnt < 1 || c.chancnt > 4:
		return c, usagef(cmd, "--chancnt %d: want 1 to 4 channels per function", c.chancnt)
	case c.chancnt > 1 && c.version >= hw.Ver34:
		return c, usagef(cmd, "--chancnt %d with --cbver 3.4: a CB 3.4 function has one channel (its channel registers reach past the 0x80 stride); use --cbver 3.2 or 3.3", c.chancnt)
	case c.kind != "pci" && c.channels%c.chancnt != 0:
		return c, usagef(cmd, "--channels %d is not a multiple of --chancnt %d: the emulated engine has whole functions of %d channels", c.channels, c.chancnt, c.chancnt)
	}
	for _, n := range []string{"bandwidth", "dsa-bandwidth", "wqs", "cbver", "chancnt"} {
		if set[n] {
			c.emuOnly = append(c.emuOnly, "--"+n)
		}
	}
	if (c.kind == "pci" || c.kind == "user") && len(c.emuOnly) > 0 {
		return c, usagef(cmd, "%s apply to the emulated engine only: drop them, or use --device emulated", strings.Join(c.emuOnly, " and "))
	}
	return c, nil
}

// backend is a set of opened channels: the devices behind them and how to
// release them.
type backend struct {
	devs []pci.Device
	// user lists the kernel's DSA user work queues to open (--device
	// wqD.Q), instead of devices.
	user []string
	// emulated is true for the in-process models; dsa for the DSA model
	// alone, mixed for both models in one engine.
	emulated, dsa, mixed bool
	// wqs is how many work queues an engine configures on an emulated
	// DSA.
	wqs int
	// name is "emulated" or the comma-separated PCI addresses, for JSON.
	name string
	// why says why this device was chosen.
	why     string
	closers []func() error
}

// ringMemory sets where the channels' rings live: on the emulated engine,
// locked 4 KiB pages (a ring is 256 KiB: 16 channels fit the common 8 MiB
// locked-memory limit) so that no run of the model depends on hugepages.
func (b *backend) ringMemory(o *ioat.Options) {
	if b.emulated {
		o.Memory.PageSize = hugepage.Size4K
	}
}

// workQueues sets how many work queues an engine configures on each DSA:
// on the DSA model, --channels of them alone, --wqs beside the CBDMA
// model (the model has that many engines and groups); on a real DSA, the
// driver's default.
func (b *backend) workQueues(o *ioat.EngineOptions, c deviceChoice) {
	if b.wqs > 0 {
		o.WQs = b.wqs
	}
}

// close releases the devices, last opened first.
func (b *backend) close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	b.closers = nil
	return errors.Join(errs...)
}

// cbdmaFunctions lists the CBDMA functions in sysfs (ioatdev's, under the
// name ioatctl's other subcommands use).
var cbdmaFunctions = ioatdev.CBDMAFunctions

// openBackend opens the channels c asks for. For auto it uses the CBDMA
// functions bound to vfio-pci when there are any, else the emulated engine.
func openBackend(e *env, c deviceChoice) (*backend, error) {
	sys := vfio.Sysfs{Root: e.sysfsRoot}
	switch c.kind {
	case "emulated":
		return openEmulated(c, "asked for with --device emulated")
	case "emulated-dsa":
		return openEmulatedDSA(c, "asked for with --device emulated-dsa")
	case "emulated-mixed":
		return openEmulatedMixed(c, "asked for with --device emulated,emulated-dsa")
	case "pci":
		return openVFIO(e, sys, c.addrs, "asked for with --device")
	case "user":
		return &backend{user: c.wqs, name: strings.Join(c.wqs, ","), why: "the kernel's user work queues, asked for with --device"}, nil
	}
	fns, err := cbdmaFunctions(sys)
	if err != nil {
		return openEmulated(c, fmt.Sprintf("cannot list PCI functions in sysfs (%v)", err))
	}
	var bound []pci.Address
	for _, f := range fns {
		if f.Driver == "vfio-pci" {
			bound = append(bound, f.Addr)
		}
	}
	switch {
	case len(fns) == 0:
		return openEmulated(c, "no CBDMA function in sysfs (see `ioatctl list`)")
	case len(bound) == 0:
		return openEmulated(c, fmt.Sprintf("no CBDMA function is bound to vfio-pci (%d found; see `ioatctl list` / `ioatctl bind`)", len(fns)))
	}
	if len(c.emuOnly) > 0 {
		return nil, fmt.Errorf("%s apply to the emulated engine, but --device auto found %d CBDMA functions bound to vfio-pci: add --device emulated, or drop them",
			strings.Join(c.emuOnly, " and "), len(bound))
	}
	if c.channels > len(bound) {
		return nil, fmt.Errorf("--channels %d, but only %s bound to vfio-pci: bind more with `ioatctl bind --all`, ask for --channels %d, or use --device emulated",
			c.channels, plural(len(bound), "CBDMA function"), len(bound))
	}
	why := plural(len(bound), "CBDMA function") + " bound to vfio-pci"
	if c.channels < len(bound) {
		why += fmt.Sprintf(", using the first %d (--channels)", c.channels)
	}
	return openVFIO(e, sys, bound[:c.channels], why)
}

// watchdog is the channel watchdog for this choice: the driver's default,
// or longer when --bandwidth slows the emulated engine so much that one
// 1 MiB descriptor (its transfer cap) takes longer than that.
func (c deviceChoice) watchdog() time.Duration {
	d := ioat.DefaultOptions().Watchdog
	for _, bw := range []int64{c.bandwidth, c.dsaBW} {
		if bw > 0 {
			if slow := 4 * time.Duration(float64(1<<20)/float64(bw)*float64(time.Second)); slow > d {
				d = slow
			}
		}
	}
	return d
}

// openEmulated builds an emulated CBDMA platform of c.channels channels.
func openEmulated(c deviceChoice, why string) (*backend, error) {
	if c.channels > 16 {
		return nil, usagef(c.cmd, "--channels %d: the emulated engine has at most 16 channels (used because %s)", c.channels, why)
	}
	s, err := ioatdev.OpenEmulated(emulated.CBDMAOptions{Channels: c.channels / c.chancnt, ChannelsPerFunction: c.chancnt, Version: c.version, Bandwidth: c.bandwidth})
	if err != nil {
		return nil, err
	}
	return &backend{devs: s.Devs, emulated: true, name: s.Name, why: why, closers: []func() error{s.Close}}, nil
}

// openEmulatedDSA builds an emulated DSA whose engines, groups and work
// queues number c.channels, so the engine drives that many WQs.
func openEmulatedDSA(c deviceChoice, why string) (*backend, error) {
	s, err := ioatdev.OpenEmulatedDSA(dsaModel(c.channels, c.bandwidth, nil))
	if err != nil {
		return nil, err
	}
	return &backend{devs: s.Devs, emulated: true, dsa: true, wqs: c.channels, name: s.Name, why: why, closers: []func() error{s.Close}}, nil
}

// dsaModel is the DSA model of n engines, groups and work queues at a
// rate cap of bw (0: none), behind iommu (nil: its own). A capped model
// splits transfers at 1 MiB, as the CBDMA model does, so that one
// descriptor's time stays within the watchdog.
func dsaModel(n int, bw int64, iommu *emulated.IOMMU) emulated.DSAOptions {
	o := emulated.DSAOptions{Engines: n, Groups: n, WQs: 8, Bandwidth: bw, IOMMU: iommu}
	if bw > 0 {
		o.MaxXferShift = 20
	}
	return o
}

// openEmulatedMixed builds the CBDMA model (c.channels channels, capped
// at c.bandwidth each) and the DSA model (c.nwq work queues, capped at
// c.dsaBW) behind the CBDMA model's IOMMU, so one engine drives both.
func openEmulatedMixed(c deviceChoice, why string) (*backend, error) {
	cb, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: c.channels / c.chancnt, ChannelsPerFunction: c.chancnt, Version: c.version, Bandwidth: c.bandwidth})
	if err != nil {
		return nil, err
	}
	dsa, err := emulated.NewDSA(dsaModel(c.nwq, c.dsaBW, cb.IOMMU()))
	if err != nil {
		cb.Close()
		return nil, err
	}
	return &backend{devs: append(cb.Devices(), dsa.Devices()...), emulated: true, mixed: true, wqs: c.nwq, name: "emulated,emulated-dsa", why: why,
		closers: []func() error{cb.Close, dsa.Close}}, nil
}

// openVFIO opens the functions at addrs through one VFIO container
// (ioatdev.OpenVFIO).
func openVFIO(e *env, sys vfio.Sysfs, addrs []pci.Address, why string) (*backend, error) {
	s, err := ioatdev.OpenVFIO(sys, e.devVFIO, addrs, "--device emulated")
	if err != nil {
		return nil, err
	}
	return &backend{devs: s.Devs, name: s.Name, why: why, closers: []func() error{s.Close}}, nil
}

// rig is an engine on a backend, ready for a benchmark.
type rig struct {
	*backend
	eng  *ioat.Engine
	info ioat.Info // of the first channel
	// chans describes every channel the run drives, in order: a function
	// of the backend may hold several (CHANCNT).
	chans []ioat.Info
}

// openRig opens the backend and an engine over every channel, offloading
// every request (CPUThreshold -1).
func openRig(e *env, c deviceChoice) (*rig, error) {
	b, err := openBackend(e, c)
	if err != nil {
		return nil, err
	}
	o := ioat.DefaultEngineOptions()
	o.Policy = c.policy
	o.CPUThreshold = -1
	o.HybridHead = c.hybrid
	o.Channel.Interrupts = c.irq
	b.ringMemory(&o.Channel)
	o.Channel.Watchdog = c.watchdog()
	o.Channel.TakeOver = c.takeOver
	o.Channel.Logger = e.logger()
	b.workQueues(&o, c)
	eng, err := b.engine(e, o, b.user)
	if err != nil {
		b.close()
		return nil, engineHint(err, b)
	}
	return &rig{backend: b, eng: eng, info: eng.Queues()[0].Info(), chans: channelInfos(eng)}, nil
}

// engine opens an engine over the backend's devices, or over the kernel's
// user work queues wqs when the backend has them.
func (b *backend) engine(e *env, o ioat.EngineOptions, wqs []string) (*ioat.Engine, error) {
	if len(b.user) == 0 {
		return ioat.NewEngine(b.devs, o)
	}
	var qs []ioat.Queue
	for _, name := range wqs {
		q, err := ioat.OpenUserWQ(name, ioat.UserOptions{Options: o.Channel, Sysfs: e.sysfsRoot, Dev: e.devDir})
		if err != nil {
			for _, q := range qs {
				q.Close()
			}
			return nil, err
		}
		qs = append(qs, q)
	}
	return ioat.NewEngineQueues(qs, o)
}

// userWQName matches a DSA work queue's name, as sysfs and /dev/dsa give it.
var userWQName = regexp.MustCompile(`^(dsa[0-9]+/)?wq[0-9]+\.[0-9]+$`)

// logger is where the driver's warnings go: stderr, one line each,
// without a timestamp.
func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

// channelInfos describes an engine's queues: its CBDMA channels and DSA
// work queues, in the engine's order.
func channelInfos(eng *ioat.Engine) []ioat.Info {
	var infos []ioat.Info
	for _, q := range eng.Queues() {
		infos = append(infos, q.Info())
	}
	return infos
}

// engineHint adds what to do to an engine that failed to open, by the
// failure's cause: each hint answers that cause and no other.
func engineHint(err error, b *backend) error {
	switch {
	case len(b.user) > 0:
		return err // the kernel path's errors name their fix
	case errors.Is(err, ioat.ErrNotCBDMA):
		return fmt.Errorf("%w (see `ioatctl list`)", err)
	case b.emulated:
		return err
	case errors.Is(err, pci.ErrBusy):
		return fmt.Errorf("%w (another process, or a kernel driver (ioatdma, idxd), holds the channel or DSA: stop it, or pass --take-over if its owner is gone)", err)
	case errors.Is(err, ioat.ErrDMAFault):
		return fmt.Errorf("%w (the IOMMU refused the channel's DMA: an address it used is not mapped in the VFIO container's DMA domain, or a descriptor pointed at memory the driver never mapped; `dmesg` shows the DMAR fault)", err)
	case errors.Is(err, ioat.ErrDescriptor):
		return fmt.Errorf("%w (the channel refused a descriptor or its chain address: a driver bug or an unsupported part; please report it with `ioatctl list` output)", err)
	case errors.Is(err, ioat.ErrTimeout):
		return fmt.Errorf("%w (the channel did not respond in time: check `dmesg` for errors on the function; --device emulated works anyway)", err)
	}
	return fmt.Errorf("%w (see `ioatctl list` and `ioatctl setup`; --device emulated works anyway)", err)
}

// alloc returns n bytes registered with the engine. The emulated engine
// reads and writes them with the CPU, so ordinary Go memory does: nothing
// is pinned, no hugepages or locked-memory allowance are needed, and any
// user can run. Real channels get hugepages (or locked 4 KiB pages).
func (r *rig) alloc(n int) (*ioat.Buffer, error) {
	if r.emulated {
		return r.eng.Register(pageAligned(n))
	}
	return r.eng.Alloc(n)
}

// memoryNote says, for a header, what memory buf (from alloc) is; with a
// nil buf, what alloc gives.
func (r *rig) memoryNote(buf *ioat.Buffer) string {
	switch {
	case r.emulated:
		return "ordinary (pageable) memory: the emulated engine is CPU threads, it needs no pinned memory, hugepages or locked-memory allowance"
	case buf != nil && buf.Degraded() != "":
		return buf.Degraded()
	}
	return "hugepages, registered with the engine"
}

// channelName names queue i of the run (r.chans[i], a CBDMA channel or
// a DSA work queue) in tables and JSON: its PCI address, followed by /n
// for channel or work queue n of a function with several; or
// "emulated/i" for the CBDMA model and "emulated-dsa/n" for work queue n
// of the DSA model, which have no address a reader could mistake for a
// device on the machine.
func (r *rig) channelName(i int) string {
	if r.emulated && isWQ(r.chans[i]) {
		return fmt.Sprintf("emulated-dsa/%d", r.chans[i].Index)
	}
	if r.emulated {
		return fmt.Sprintf("emulated/%d", i)
	}
	return channelName(r.chans[i])
}

// channelName names a real channel or work queue: its function's PCI
// address, with /n for channel (or work queue) n when the function has
// several.
func channelName(in ioat.Info) string {
	if in.Channels > 1 {
		return fmt.Sprintf("%s/%d", in.Addr, in.Index)
	}
	return in.Addr.String()
}

// channels is how many queues (channels and work queues) the run drives.
func (r *rig) channels() int { return len(r.chans) }

// isWQ tells a DSA work queue's Info from a CBDMA channel's: a DSA has no
// CBVER.
func isWQ(in ioat.Info) bool { return in.Version == 0 }

// queueCount says what the run drives, by kind: "4 channels", "2 work
// queues", "4 channels and 1 work queue".
func (r *rig) queueCount() string {
	cb, wq := 0, 0
	for _, in := range r.chans {
		if isWQ(in) {
			wq++
		} else {
			cb++
		}
	}
	var parts []string
	if cb > 0 || wq == 0 {
		parts = append(parts, plural(cb, "channel"))
	}
	if wq > 0 {
		parts = append(parts, plural(wq, "work queue"))
	}
	return strings.Join(parts, " and ")
}

// close closes the engine, then the devices.
func (r *rig) close() error {
	return errors.Join(r.eng.Close(), r.backend.close())
}

// describe is the one-line account of the device: what it is and why it
// was chosen.
func (r *rig) describe() string {
	v := "CBVER " + cbverString(r.info.Version)
	n := r.queueCount()
	if len(r.chans) != len(r.devs) && !isWQ(r.info) {
		n += " in " + plural(len(r.devs), "function")
	}
	if len(r.user) > 0 {
		return fmt.Sprintf("kernel DSA work queues %s (%s, transfers up to %s): %s", r.name, r.info.Platform, units.Format(int64(r.info.MaxTransfer)), r.why)
	}
	if r.dsa {
		return fmt.Sprintf("emulated DSA (%s, modelled on %s, transfers up to %s): %s", n, r.info.Platform, units.Format(int64(r.info.MaxTransfer)), r.why)
	}
	if r.mixed {
		return fmt.Sprintf("emulated CBDMA and DSA behind one IOMMU (%s, %s, modelled on %s and %s): %s", n, v, r.info.Platform, r.chans[len(r.chans)-1].Platform, r.why)
	}
	if r.emulated {
		return fmt.Sprintf("emulated CBDMA (%s, %s, modelled on %s): %s", n, v, r.info.Platform, r.why)
	}
	if isWQ(r.info) {
		return fmt.Sprintf("vfio-pci %s (%s, %s, transfers up to %s): %s", r.name, n, r.info.Platform, units.Format(int64(r.info.MaxTransfer)), r.why)
	}
	return fmt.Sprintf("vfio-pci %s (%s, %s, %s): %s", r.name, n, v, r.info.Platform, r.why)
}

// plural formats a count and a noun, adding an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// cbverString formats a CBVER value as "3.3".
func cbverString(v uint8) string { return fmt.Sprintf("%d.%d", v>>4, v&0xF) }
