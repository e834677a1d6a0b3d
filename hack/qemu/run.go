package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	vmqemu "github.com/hugelgupf/vmtest/qemu"
)

// BootResult is how one boot went.
type BootResult struct {
	// Config is the configuration booted.
	Config Config
	// Summary is the guest's summary, zero when it printed none.
	Summary Summary
	// Problems lists everything that makes the boot fail; empty when it
	// passed.
	Problems []string
	// Log is the serial console log file.
	Log string
	// Wall is how long QEMU ran.
	Wall time.Duration
	// Crashed is the fault that ended QEMU itself (a segmentation fault,
	// an abort), empty when it exited or was killed on the timeout.
	Crashed string
	// Earlier is the boot before this one when Run booted the
	// configuration again after QEMU crashed; nil otherwise.
	Earlier *BootResult
}

// Boot runs QEMU in configuration c until the guest powers off or
// c.Timeout passes, writes the serial console to logPath (its first line is
// the QEMU command), copies each console line to stream (prefixed with the
// configuration's name) when stream is not nil, and checks the log.
//
// QEMU is started and waited for by vmtest's qemu package
// (github.com/hugelgupf/vmtest/qemu): its console is a pseudo-terminal that
// vmtest drains, it is killed when the timeout passes, and the output is
// copied to a serialLog, which never blocks QEMU. The options are set here
// rather than through vmtest's OptionsFor, which would add -nographic and
// read VMTEST_* variables: the machine is exactly MachineArgs.
func Boot(ctx context.Context, c Config, kernel, initrd, logPath string, stream io.Writer) BootResult {
	r := BootResult{Config: c, Log: logPath}
	// A human monitor on a socket beside the log, for the guest's
	// set_link requests (setlink.go).
	mon := logPath + ".mon"
	defer os.Remove(mon)
	cable := logPath + ".cable"
	defer os.Remove(cable + "-u")
	defer os.Remove(cable + "-b")
	lf, err := os.Create(logPath)
	if err != nil {
		r.Problems = []string{err.Error()}
		return r
	}
	defer lf.Close()
	fmt.Fprintf(lf, "# qemu-system-x86_64 %s\n", shellQuote(cableArgs(c.QEMUArgs(kernel, initrd), cable)))

	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	start := time.Now()
	links := newLinkPuller(mon, lf, start)
	defer links.stop()
	serial := &serialLog{start: start, name: c.Name, file: lf, stream: stream, onLine: links.request}
	opts := &vmqemu.Options{
		QEMUCommand:  "qemu-system-x86_64",
		QEMUArgs:     cableArgs(monitorArgs(c.MachineArgs(), mon), cable),
		Kernel:       kernel,
		Initramfs:    initrd,
		KernelArgs:   c.Append(),
		SerialOutput: []io.WriteCloser{serial},
	}
	var runErr error
	vm, err := opts.Start(ctx)
	if err != nil {
		runErr = err
	} else {
		runErr = vm.Wait()
	}
	r.Wall = time.Since(start)
	serial.Close() // vm.Wait closed it too; a second Close is harmless

	r.Summary, r.Problems = ParseLog(serial.Bytes())
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.Problems = append(r.Problems, fmt.Sprintf("QEMU killed after the %v timeout", c.Timeout))
	case runErr != nil:
		r.Problems = append(r.Problems, fmt.Sprintf("qemu-system-x86_64: %v", runErr))
		r.Crashed = qemuFault(runErr)
	}
	fmt.Fprintf(lf, "# wall %v, problems: %q\n", r.Wall.Round(time.Millisecond), r.Problems)
	return r
}

// qemuFault names the signal of QEMU's own fault that err reports (QEMU
// died of a segmentation fault, an abort, a bus error...), or "" when err
// is anything else: an exit status, or the kill that ends a timed-out run.
func qemuFault(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return ""
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return ""
	}
	switch sig := ws.Signal(); sig {
	case syscall.SIGSEGV, syscall.SIGABRT, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE:
		return sig.String()
	}
	return ""
}

// serialLog receives QEMU's console output: it keeps all of it for
// ParseLog and writes each line, stamped with the seconds since start, to
// the log file and (prefixed with the configuration's name) to stream.
// Write never blocks on anything but those writers and never fails, so
// QEMU's output always drains.
type serialLog struct {
	start  time.Time
	name   string
	file   io.Writer
	stream io.Writer // nil: not streamed
	// onLine, when set, sees every console line (set_link requests); it
	// must not block.
	onLine func(line string)

	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
}

// maxLine is the longest line serialLog holds back waiting for its end.
const maxLine = 1 << 20

// Write records p and emits every line it completes.
func (s *serialLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all.Write(p)
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.emit(s.partial[:i])
		s.partial = s.partial[i+1:]
	}
	if len(s.partial) > maxLine {
		s.emit(s.partial)
		s.partial = nil
	}
	s.partial = append([]byte(nil), s.partial...) // let the old array go
	return len(p), nil
}

// Close emits an unterminated last line.
func (s *serialLog) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		s.emit(s.partial)
		s.partial = nil
	}
	return nil
}

// Bytes returns everything written so far.
func (s *serialLog) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.all.Bytes())
}

func (s *serialLog) emit(line []byte) {
	t := time.Since(s.start).Seconds()
	l := strings.TrimRight(string(line), "\r")
	fmt.Fprintf(s.file, "%7.2f %s\n", t, l)
	if s.stream != nil {
		fmt.Fprintf(s.stream, "[%s %6.1fs] %s\n", s.name, t, l)
	}
	if s.onLine != nil {
		s.onLine(l)
	}
}

// shellQuote renders args for a shell, to paste when rerunning by hand.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$,=") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

// Options configures Run.
type Options struct {
	// Repo is the repository root; "" finds it from the working directory.
	Repo string
	// BuildDir holds the cache (kernel, modules) and the runs; "" means
	// Repo/build/qemu, which git ignores.
	BuildDir string
	// Configs are the configurations to boot.
	Configs []Config
	// Packages are the Go packages whose tests run in the guest.
	Packages []string
	// Programs, USBPrograms, Files: see Image; for configurations with
	// Config.Run.
	Programs    []string
	USBPrograms []string
	Files       []string
	// Modules are the guest modules to put in the image (default
	// GuestModules, which the init loads); a program may load the others.
	Modules []string
	// Report, when set, replaces Report for the final output.
	Report func([]BootResult) string
	// Keep keeps the run directory (initramfs, test binaries, serial logs)
	// even when every boot passed. A failed run is always kept. The newest
	// five run directories stay; older ones are removed.
	Keep bool
	// Stream copies the guest's console to Out as it runs.
	Stream bool
	// Out receives progress and the results.
	Out io.Writer
}

// Run is `make qemu-test`: it installs missing host tools, fetches the
// guest kernel, builds the no-IOMMU vfio.ko when a configuration needs it,
// builds the initramfs, boots every configuration and reports. It returns
// the results and an error when any boot failed.
func Run(ctx context.Context, o Options) ([]BootResult, error) {
	start := time.Now()
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	log := func(format string, args ...any) {
		fmt.Fprintf(out, "qemu-test %6.1fs: %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if o.Repo == "" {
		r, err := FindRepo()
		if err != nil {
			return nil, err
		}
		o.Repo = r
	}
	if o.BuildDir == "" {
		o.BuildDir = filepath.Join(o.Repo, "build", "qemu")
	}
	onlyUSB := len(o.Configs) > 0
	for _, c := range o.Configs {
		onlyUSB = onlyUSB && c.USB
	}
	if len(o.Packages) == 0 && len(o.Programs) == 0 {
		o.Packages = DefaultPackages
	}
	if onlyUSB {
		// The usb configuration runs USBPackages only.
		o.Packages = nil
	}
	if len(o.Modules) == 0 {
		o.Modules = GuestModules
	}
	if o.Report == nil {
		o.Report = Report
	}
	if len(o.Configs) == 0 {
		return nil, errors.New("no configuration to boot")
	}
	cache := filepath.Join(o.BuildDir, "cache")
	pruneRuns(o.BuildDir, keepRuns-1)
	runDir := filepath.Join(o.BuildDir, "run-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, err
	}
	keep := o.Keep
	defer func() {
		if keep {
			log("artifacts and serial logs kept in %s", runDir)
		} else {
			os.RemoveAll(runDir)
			log("passed; removed %s (set GOMX_QEMU_KEEP=1 to keep it)", runDir)
		}
	}()
	fail := func(err error) ([]BootResult, error) {
		keep = true
		return nil, err
	}
	// Tool output (apt, go build) goes to a file; it is shown on failure.
	toolLog, err := os.Create(filepath.Join(runDir, "build.log"))
	if err != nil {
		return fail(err)
	}
	defer toolLog.Close()
	wrap := func(err error) error {
		return fmt.Errorf("%w (output in %s)", err, toolLog.Name())
	}

	if err := EnsureTools(ctx, toolLog, log); err != nil {
		return fail(wrap(err))
	}
	k, err := FetchKernel(ctx, cache, toolLog, log)
	if err != nil {
		return fail(wrap(err))
	}
	modules := o.Modules
	var usbPackages []string
	for _, c := range o.Configs {
		if c.USB {
			if err := EnsureUSBBuild(ctx, toolLog, log); err != nil {
				return fail(wrap(err))
			}
			modules = append(append([]string(nil), modules...), USBGuestModules...)
			break
		}
	}
	for _, c := range o.Configs {
		if c.USB && len(c.Run) == 0 {
			// A configuration with a program of its own runs no tests.
			usbPackages = USBPackages
		}
	}
	mods, err := ResolveModulesNamed(ctx, k, toolLog, modules)
	if err != nil {
		return fail(wrap(err))
	}
	im := Image{Repo: o.Repo, Kernel: k, Modules: mods, Packages: o.Packages, USBPackages: usbPackages, Programs: o.Programs, USBPrograms: o.USBPrograms, Files: o.Files}
	for _, c := range o.Configs {
		if c.NoIOMMU {
			if im.NoIOMMUVfio, err = BuildNoIOMMUVfio(ctx, o.Repo, cache, k, toolLog, log); err != nil {
				return fail(wrap(err))
			}
			break
		}
	}
	initrd, err := im.Build(ctx, runDir, toolLog, log)
	if err != nil {
		return fail(wrap(err))
	}
	log("guest kernel %s, initramfs %s", k.Release, initrd)

	var results []BootResult
	var failed []string
	for _, c := range o.Configs {
		log("booting %s: %s", c.Name, c.Doc)
		var stream io.Writer
		if o.Stream {
			stream = out
		}
		r := Boot(ctx, c, k.Vmlinux, initrd, filepath.Join(runDir, c.Name+".serial.log"), stream)
		if r.Crashed != "" && ctx.Err() == nil {
			// QEMU itself died, which no guest may cause: a fault of
			// the emulator (multi-threaded TCG is where it was seen),
			// not a verdict on the tests, which get one more boot.
			// Both boots are reported; the second decides.
			log("QEMU crashed (%s) after %.1fs of %s; booting it once more (serial log %s kept)", r.Crashed, r.Wall.Seconds(), c.Name, r.Log)
			first := r
			r = Boot(ctx, c, k.Vmlinux, initrd, filepath.Join(runDir, c.Name+".again.serial.log"), stream)
			r.Earlier = &first
		}
		results = append(results, r)
		verdict := "PASS"
		if len(r.Problems) > 0 {
			verdict = "FAIL"
			failed = append(failed, c.Name)
		}
		log("%s %s in %.1fs (serial log %s)", verdict, c.Name, r.Wall.Seconds(), r.Log)
	}
	fmt.Fprintln(out, o.Report(results))
	log("total %.1fs", time.Since(start).Seconds())
	if len(failed) > 0 {
		keep = true
		return results, fmt.Errorf("qemu-test: %s failed", strings.Join(failed, ", "))
	}
	return results, nil
}

// keepRuns is how many run directories (kept failed runs, or runs kept on
// request) stay in the build directory; older ones are removed when a run
// starts.
const keepRuns = 5

// pruneRuns removes all but the newest n run directories.
func pruneRuns(buildDir string, n int) {
	runs, _ := filepath.Glob(filepath.Join(buildDir, "run-*"))
	sort.Strings(runs) // run-YYYYmmdd-HHMMSS sorts by time
	for len(runs) > n {
		os.RemoveAll(runs[0])
		runs = runs[1:]
	}
}

// Report renders the results as the summary table printed at the end of a
// run: one line per configuration and test binary, then the problems.
func Report(results []BootResult) string {
	var b strings.Builder
	b.WriteString("== qemu-test summary\n")
	for _, r := range results {
		verdict := "PASS"
		if len(r.Problems) > 0 {
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "%s %-11s %5.1fs  kernel %s\n", verdict, r.Config.Name, r.Wall.Seconds(), r.Summary.Kernel)
		if e := r.Earlier; e != nil {
			fmt.Fprintf(&b, "     note: booted twice: QEMU crashed (%s) after %.1fs of the first boot (serial log %s)\n", e.Crashed, e.Wall.Seconds(), e.Log)
		}
		for _, t := range r.Summary.Tests {
			fmt.Fprintf(&b, "     %s\n", t.Line())
		}
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "     problem: %s\n", p)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// FindRepo walks up from the working directory to the directory holding
// the gomx go.mod.
func FindRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/gomx-dev/gomx\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("not inside the gomx repository: run from the repository (go.mod with module github.com/gomx-dev/gomx)")
}
