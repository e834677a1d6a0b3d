package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/sysfstest"
)

// TestMain points VFIO at a directory that does not exist, so no test can
// touch real devices, and fails the run if a test leaked hugepage memory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ioatctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(envDevVFIO, filepath.Join(dir, "no-dev-vfio"))
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 && hugepage.Live() != 0 {
		fmt.Fprintf(os.Stderr, "leaked hugepage regions:\n%s\n", strings.Join(hugepage.LiveRegions(), "\n"))
		code = 1
	}
	os.Exit(code)
}

// result is what one run of ioatctl produced.
type result struct {
	stdout, stderr string
	err            error
	code           int
}

// ioatctl runs the command line args through run.
func ioatctl(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(&out, &errb, args)
	return result{stdout: out.String(), stderr: errb.String(), err: err, code: code(err)}
}

// buildSysfs creates the tree described by testdata/sysfs.txt.
func buildSysfs(t *testing.T) string {
	t.Helper()
	return sysfstest.Build(t, "testdata/sysfs.txt")
}

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestUsage(t *testing.T) {
	r := ioatctl(t)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "ioatctl: no subcommand: want one of list,") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want 2 and one line on stderr", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"help"}, {"--help"}} {
		r := ioatctl(t, args...)
		if r.code != exitOK {
			t.Errorf("%q: exit %d, want 0 (%v)", args, r.code, r.err)
		}
		for _, c := range []string{"list", "bind", "unbind", "setup", "copy", "verify", "overlap", envSysfsRoot} {
			if !strings.Contains(r.stdout, c) {
				t.Errorf("%q: usage does not mention %q:\n%s", args, c, r.stdout)
			}
		}
	}
}

func TestCommandHelp(t *testing.T) {
	for _, args := range [][]string{{"copy", "-h"}, {"copy", "--help"}, {"help", "copy"}} {
		r := ioatctl(t, args...)
		if r.code != exitOK {
			t.Errorf("%q: exit %d, want 0 (%v)", args, r.code, r.err)
		}
		for _, f := range []string{"--window", "--sweep", "--device", "--cold", "--hot", "--verify", "--plot", "--memory", "MB = 10^6 bytes", "Examples:", "ioatctl copy --channels 4"} {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("%q: help does not mention %q:\n%s", args, f, r.stdout)
			}
		}
	}
	for _, c := range []string{"list", "bind", "unbind", "setup", "verify", "overlap"} {
		r := ioatctl(t, c, "-h")
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage: ioatctl "+c) {
			t.Errorf("%s -h: exit %d, output:\n%s", c, r.code, r.stdout)
		}
	}
}

func TestCopyJSON(t *testing.T) {
	r := ioatctl(t, "copy", "--device", "emulated", "--channels", "2", "--size", "64K", "--iterations", "200", "--verify", "--json", "--memory", "64M")
	if r.err != nil {
		t.Fatalf("copy: %v\n%s", r.err, r.stderr)
	}
	rows := jsonLines(t, r.stdout)
	if len(rows) != 1 {
		t.Fatalf("%d JSON lines, want 1:\n%s", len(rows), r.stdout)
	}
	row := rows[0]
	for _, k := range []string{"device", "channels", "size", "window", "ops", "seconds", "mb_per_s", "cpu_mb_per_s",
		"verified", "ops_per_s", "cpu_ops_per_s", "policy", "cache"} {
		if _, ok := row[k]; !ok {
			t.Errorf("field %q missing from %v", k, row)
		}
	}
	want := map[string]any{
		"schema": "ioatctl.copy/1", "emulated": true, "cold_bytes": float64(32 << 20),
		"device": "emulated", "channels": 2.0, "size": 65536.0, "window": 128.0, "ops": 200.0, "cpu_ops": 200.0,
		"verified": true, "policy": "round-robin", "cache": "cold",
	}
	for k, v := range want {
		if row[k] != v {
			t.Errorf("%s = %v, want %v", k, row[k], v)
		}
	}
	for _, k := range []string{"seconds", "mb_per_s", "cpu_mb_per_s"} {
		if v, _ := row[k].(float64); v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, row[k])
		}
	}
}

func TestCopyTableSweep(t *testing.T) {
	r := ioatctl(t, "copy", "--device", "emulated", "--sizes", "4K,12K", "--iterations", "50", "--hot",
		"--window", "8", "--policy", "stripe", "--interrupts", "--cbver", "3.4", "--verify")
	if r.err != nil {
		t.Fatalf("copy: %v\n%s", r.err, r.stderr)
	}
	for _, s := range []string{"emulated CBDMA (1 channel, CBVER 3.4", "asked for with --device emulated",
		"policy stripe", "window 8", "cache:   hot", "4 KiB", "the engine is CPU threads", "ordinary (pageable) memory", "12 KiB", "ENGINE MB/s", "CPU MB/s", "MB = 10^6 bytes"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, r.stdout)
		}
	}
	if strings.Contains(r.stdout, " no\n") {
		t.Errorf("a size did not verify:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "--window 8 clamped to the buffer slots (1 for 4 KiB, 1 for 12 KiB)") {
		t.Errorf("the header does not say the hot window was clamped to the one slot:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not a terminal, yet it got progress:\n%s", r.stderr)
	}
}

func TestVerify(t *testing.T) {
	r := ioatctl(t, "verify", "--device", "emulated", "--iterations", "300")
	if r.err != nil {
		t.Fatalf("verify: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "all operations verified") || !strings.Contains(r.stdout, "--seed") {
		t.Errorf("unexpected output:\n%s", r.stdout)
	}
}

func TestVerifyJSONPerChannel(t *testing.T) {
	r := ioatctl(t, "verify", "--device", "emulated", "--channels", "2", "--iterations", "100", "--seed", "7", "--json", "--cbver", "3.2")
	if r.err != nil {
		t.Fatalf("verify: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	rows := jsonLines(t, r.stdout)
	if len(rows) != 2 {
		t.Fatalf("%d JSON lines, want one per channel:\n%s", len(rows), r.stdout)
	}
	for i, row := range rows {
		if want := fmt.Sprintf("emulated/%d", i); row["channel"] != want || row["schema"] != "ioatctl.verify/1" || row["seed"] != 7.0 {
			t.Errorf("row %d: channel %v, schema %v, seed %v; want %s, ioatctl.verify/1, 7", i, row["channel"], row["schema"], row["seed"], want)
		}
		var total float64
		for _, k := range []string{"copies_ok", "fills_ok"} {
			total += row[k].(float64)
		}
		if total != 100 {
			t.Errorf("%v: %v operations verified, want 100", row["channel"], total)
		}
		for _, k := range []string{"copies_failed", "fills_failed", "stray_writes"} {
			if row[k].(float64) != 0 {
				t.Errorf("%v: %s = %v", row["channel"], k, row[k])
			}
		}
	}
}

func TestOverlapJSON(t *testing.T) {
	r := ioatctl(t, "overlap", "--device", "emulated", "--sizes", "64K", "--iterations", "3", "--json")
	if r.err != nil {
		t.Fatalf("overlap: %v\n%s", r.err, r.stderr)
	}
	rows := jsonLines(t, r.stdout)
	if len(rows) != 2 {
		t.Fatalf("%d JSON lines, want engine and cpu:\n%s", len(rows), r.stdout)
	}
	movers := map[string]map[string]any{}
	for _, row := range rows {
		for _, k := range []string{"size", "channels", "t_copy_us", "t_compute_us", "t_total_us", "overlap"} {
			if _, ok := row[k]; !ok {
				t.Errorf("field %q missing from %v", k, row)
			}
		}
		if row["size"] != 65536.0 {
			t.Errorf("size = %v, want 65536", row["size"])
		}
		movers[row["mover"].(string)] = row
	}
	if movers["engine"] == nil || movers["cpu"] == nil {
		t.Fatalf("want one engine and one cpu row: %v", rows)
	}
	if movers["cpu"]["overlap"] != 0.0 {
		t.Errorf("CPU copy overlap = %v, want 0 (it blocks)", movers["cpu"]["overlap"])
	}
}

func TestList(t *testing.T) {
	t.Setenv(envSysfsRoot, buildSysfs(t))
	r := ioatctl(t, "list")
	if r.err != nil {
		t.Fatalf("list: %v", r.err)
	}
	lines := strings.Split(r.stdout, "\n")
	wantRows := map[string][]string{
		"0000:00:04.0": {"2021", "Skylake-SP", "ioatdma", "10", "0"},
		"0000:00:04.1": {"2021", "vfio-pci", "11"},
		"0000:80:04.0": {"(none)", "1"},
	}
	for addr, cells := range wantRows {
		var row string
		for _, l := range lines {
			if strings.HasPrefix(l, addr) {
				row = l
			}
		}
		if row == "" {
			t.Errorf("no row for %s:\n%s", addr, r.stdout)
			continue
		}
		for _, c := range cells {
			if !strings.Contains(row, c) {
				t.Errorf("row %q lacks %q", row, c)
			}
		}
	}
	if strings.Contains(r.stdout, "0000:02:00.0") || strings.Contains(r.stdout, "0000:00:00.0") {
		t.Errorf("non-CBDMA functions listed:\n%s", r.stdout)
	}
	for _, s := range []string{"3 CBDMA functions, at least 3 channels (CHANCNT not read on 3 functions), 1 bound to vfio-pci", "ioatctl bind --all", "CBVER and CHANCNT not read"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, r.stdout)
		}
	}

	r = ioatctl(t, "list", "--json")
	if r.err != nil {
		t.Fatalf("list --json: %v", r.err)
	}
	var entries []listEntry
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var x listEntry
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			t.Fatalf("list --json: %v\n%s", err, r.stdout)
		}
		if x.Schema != "ioatctl.list/2" || x.Run.Tool != "ioatctl" {
			t.Errorf("list --json: schema %q, run %+v", x.Schema, x.Run)
		}
		x.Schema, x.Run = "", cli.Meta{}
		entries = append(entries, x)
	}
	want := []listEntry{
		{Kind: "cbdma", Address: "0000:00:04.0", Device: "2021", Platform: "Skylake-SP/Cascade Lake (SKX)", Driver: "ioatdma", IOMMUGroup: 10, NUMANode: 0},
		{Kind: "cbdma", Address: "0000:00:04.1", Device: "2021", Platform: "Skylake-SP/Cascade Lake (SKX)", Driver: "vfio-pci", IOMMUGroup: 11, NUMANode: 0},
		{Kind: "cbdma", Address: "0000:80:04.0", Device: "2021", Platform: "Skylake-SP/Cascade Lake (SKX)", Driver: "", IOMMUGroup: -1, NUMANode: 1},
	}
	if fmt.Sprint(entries) != fmt.Sprint(want) {
		t.Errorf("list --json:\n got %+v\nwant %+v", entries, want)
	}
}

func TestListNone(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bus/pci/devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envSysfsRoot, root)
	r := ioatctl(t, "list")
	if r.err != nil {
		t.Fatalf("list: %v", r.err)
	}
	if !strings.Contains(r.stdout, "No CBDMA") || !strings.Contains(r.stdout, "copy --device emulated") {
		t.Errorf("list with no function:\n%s", r.stdout)
	}
	r = ioatctl(t, "list", "--json")
	if r.err != nil || r.stdout != "" {
		t.Errorf("list --json with no function: %q, %v; want no line", r.stdout, r.err)
	}
}

func TestListNoSysfs(t *testing.T) {
	t.Setenv(envSysfsRoot, filepath.Join(t.TempDir(), "nothing"))
	r := ioatctl(t, "list")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), envSysfsRoot) {
		t.Errorf("list without sysfs: exit %d, %v", r.code, r.err)
	}
}

func TestAutoDevice(t *testing.T) {
	root := buildSysfs(t)
	t.Setenv(envSysfsRoot, root)
	// 00:04.1 is bound to vfio-pci, but VFIO is not there: auto must not
	// fall back silently to the model.
	r := ioatctl(t, "copy", "--size", "4K", "--iterations", "10", "--memory", "16M")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "--device emulated") {
		t.Errorf("auto with a bound function but no VFIO: exit %d, %v", r.code, r.err)
	}
	r = ioatctl(t, "copy", "--size", "4K", "--iterations", "10", "--memory", "16M", "--channels", "2")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "only 1 CBDMA function bound") {
		t.Errorf("auto with too few bound functions: exit %d, %v", r.code, r.err)
	}
	r = ioatctl(t, "copy", "--size", "4K", "--iterations", "10", "--memory", "16M", "--bandwidth", "1G")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "emulated engine") {
		t.Errorf("auto on hardware with --bandwidth: exit %d, %v", r.code, r.err)
	}
	r = ioatctl(t, "copy", "--device", "0000:00:04.0", "--size", "4K", "--iterations", "10")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "ioatctl bind 0000:00:04.0") {
		t.Errorf("--device naming a function bound to ioatdma: exit %d, %v", r.code, r.err)
	}

	// With nothing bound, auto uses the emulated engine and says why.
	if err := os.Remove(filepath.Join(root, "devices/pci0000:00/0000:00:04.1/driver")); err != nil {
		t.Fatal(err)
	}
	r = ioatctl(t, "copy", "--size", "4K", "--iterations", "10", "--memory", "16M", "--channels", "3")
	if r.err != nil {
		t.Fatalf("auto without bound functions: %v", r.err)
	}
	if !strings.Contains(r.stdout, "emulated CBDMA (3 channels") || !strings.Contains(r.stdout, "no CBDMA function is bound to vfio-pci (3 found") {
		t.Errorf("auto does not say it fell back and why:\n%s", r.stdout)
	}
}

func TestBindUnbind(t *testing.T) {
	root := buildSysfs(t)
	t.Setenv(envSysfsRoot, root)
	// The recorded tree has no kernel behind it: vfio-pci never takes the
	// function, and bind must say so and undo its override.
	r := ioatctl(t, "bind", "0000:00:04.0")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "vfio-pci did not take the function") {
		t.Errorf("bind on a tree without kernel: exit %d, %v", r.code, r.err)
	}
	if ov := lastWrite(t, root, "0000:00:04.0", "driver_override"); ov != "" {
		t.Errorf("driver_override after a failed bind: %q; want it cleared", ov)
	}
	r = ioatctl(t, "bind", "0000:02:00.0")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "not a CBDMA function") {
		t.Errorf("bind of a NIC: exit %d, %v", r.code, r.err)
	}
	r = ioatctl(t, "bind", "0000:00:04.1")
	if r.err != nil || !strings.Contains(r.stdout, "0000:00:04.1: vfio-pci -> vfio-pci") {
		t.Errorf("bind of a function bound already: %v\n%s", r.err, r.stdout)
	}
	r = ioatctl(t, "unbind", "0000:00:04.1")
	if r.err != nil {
		t.Errorf("unbind: %v", r.err)
	}
	if ov := lastWrite(t, root, "0000:00:04.1", "driver_override"); ov != "" {
		t.Errorf("driver_override after unbind: %q; want it cleared", ov)
	}
	r = ioatctl(t, "bind", "--all")
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "0000:00:04.0") || !strings.Contains(r.err.Error(), "0000:80:04.0") {
		t.Errorf("bind --all: exit %d, %v; want both unbound functions tried", r.code, r.err)
	}
}

// lastWrite returns the first line of a function's sysfs attribute in the
// recorded tree. Files there are not truncated on write, unlike sysfs, so
// the first line is what was written last.
func lastWrite(t *testing.T, root, addr, attr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "bus/pci/devices", addr, attr))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return first
}

func TestSetupReportOnly(t *testing.T) {
	t.Setenv(envSysfsRoot, buildSysfs(t))
	r := ioatctl(t, "setup", "--pages", "0")
	if r.err != nil {
		t.Fatalf("setup --pages 0: %v", r.err)
	}
	for _, s := range []string{"hugepage pools", "/dev/vfio/vfio", "missing", "vfio-pci driver", "IOMMU",
		"3 found, 1 bound to vfio-pci", "not ready", "--device emulated"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("setup report lacks %q:\n%s", s, r.stdout)
		}
	}
}

// setup --check reports and fails on a machine that is not ready, and
// reserves nothing even when run as root.
func TestSetupCheck(t *testing.T) {
	t.Setenv(envSysfsRoot, buildSysfs(t))
	before, _ := hugepage.Status()
	r := ioatctl(t, "setup", "--check")
	if r.code != exitFailure || !strings.Contains(r.stdout, "not ready") || !strings.Contains(r.stderr, "ioatctl: not ready for the hardware") {
		t.Errorf("setup --check on an unready tree: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "reserve:") {
		t.Errorf("setup --check reserved pages:\n%s", r.stdout)
	}
	after, _ := hugepage.Status()
	for i := range min(len(before), len(after)) {
		if after[i].Total != before[i].Total {
			t.Errorf("the %v pool went from %d to %d pages", after[i].PageSize, before[i].Total, after[i].Total)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := ioatctl(t, args...)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "ioatctl ") || !strings.Contains(r.stdout, "revision:") {
			t.Errorf("%q: exit %d, output:\n%s", args, r.code, r.stdout)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown subcommand"},
		{[]string{"copy", "--size", "12Q"}, `bad size "12Q"`},
		{[]string{"copy", "--size", "4KB"}, "ambiguous"},
		{[]string{"copy", "--channels", "0"}, "--channels 0: want at least 1"},
		{[]string{"copy", "--device", "emulated", "--channels", "17"}, "at most 16"},
		{[]string{"copy", "--device", "0000:zz"}, "want auto, emulated, emulated-dsa or PCI addresses"},
		{[]string{"copy", "--device", "0000:00:04.0,0000:00:04.1", "--channels", "3"}, "names 2 functions"},
		{[]string{"copy", "--device", "0000:00:04.0", "--cbver", "3.4"}, "emulated engine only"},
		{[]string{"copy", "--bogus"}, "flag provided but not defined"},
		{[]string{"copy", "--cold", "--hot"}, "exclude each other"},
		{[]string{"copy", "--sweep", "--size", "4K"}, "--size gives one size"},
		{[]string{"copy", "--sweep", "--sizes", "4K"}, "pick one"},
		{[]string{"copy", "--policy", "fastest"}, "--policy fastest"},
		{[]string{"copy", "--window", "0"}, "--window 0"},
		{[]string{"copy", "--duration", "1s", "--iterations", "5"}, "pick one"},
		{[]string{"copy", "--duration", "0s"}, "positive duration"},
		{[]string{"copy", "--cbver", "2.0"}, "--cbver 2.0"},
		{[]string{"copy", "extra"}, "unexpected argument"},
		{[]string{"verify", "--iterations", "-1"}, "--iterations -1"},
		{[]string{"overlap", "--sizes", "4K,,8K"}, "empty element"},
		{[]string{"overlap", "--iterations", "0"}, "--iterations 0"},
		{[]string{"bind"}, "name the functions"},
		{[]string{"bind", "--all", "0000:00:04.0"}, "exclude each other"},
		{[]string{"unbind", "04.0"}, "bad address"},
		{[]string{"setup", "--size", "4M"}, "want 2M or 1G"},
		{[]string{"list", "x"}, "unexpected argument"},
		{[]string{"copy", "--channels", "100000"}, "at most 16"},
		{[]string{"verify", "--timeout", "-1s"}, "--timeout -1s"},
		{[]string{"copy", "--memory", "1K"}, "--memory 1 KiB"},
		{[]string{"copy", "--plot", "x.pdf"}, ".svg or .png"},
		{[]string{"copy", "--plot", "x.svg"}, "add --sweep or --sizes"},
		{[]string{"setup", "--check", "--pages", "4"}, "--check changes nothing"},
		{[]string{"version", "x"}, "takes no arguments"},
		{[]string{"help", "frob"}, "no subcommand"},
	} {
		r := ioatctl(t, tc.args...)
		if r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%v)", tc.args, r.code, exitUsage, r.err)
			continue
		}
		if !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%q: error %q does not contain %q", tc.args, r.err, tc.want)
		}
		if !strings.Contains(r.err.Error(), "-h") && !strings.Contains(r.err.Error(), "ioatctl help") {
			t.Errorf("%q: error %q does not say where the help is", tc.args, r.err)
		}
		if !strings.Contains(r.stderr, "ioatctl: ") {
			t.Errorf("%q: error not printed on stderr: %q", tc.args, r.stderr)
		}
	}
}

// TestTakeOverFlag: --take-over is accepted by the commands that open
// channels (the emulated channels are never claimed, so it changes
// nothing there) and documented in their help.
func TestTakeOverFlag(t *testing.T) {
	r := ioatctl(t, "copy", "--device", "emulated", "--size", "64K", "--iterations", "10", "--take-over")
	if r.err != nil {
		t.Fatalf("copy --take-over: %v\n%s", r.err, r.stderr)
	}
	h := ioatctl(t, "copy", "-h")
	if !strings.Contains(h.stdout+h.stderr, "take-over") {
		t.Fatal("copy -h does not mention --take-over")
	}
}

// TestCopyWindowClamped: a window deeper than the buffer slots is
// clamped to them, so the DSA model's engines never write one
// destination from two copies at once (the race detector would flag it),
// and the row reports the window run.
func TestCopyWindowClamped(t *testing.T) {
	r := ioatctl(t, "copy", "--device", "emulated-dsa", "--size", "1M", "--memory", "4M", "--window", "128", "--iterations", "20", "--verify", "--json")
	if r.err != nil {
		t.Fatalf("copy: %v\n%s", r.err, r.stderr)
	}
	rows := jsonLines(t, r.stdout)
	if len(rows) != 1 || rows[0]["window"] != 2.0 || rows[0]["verified"] != true {
		t.Fatalf("want one verified row with window 2 (2 slots of 1 MiB per side):\n%s", r.stdout)
	}
	r = ioatctl(t, "copy", "--device", "emulated-dsa", "--size", "1M", "--memory", "4M", "--window", "128", "--iterations", "4")
	if r.err != nil || !strings.Contains(r.stdout, "--window 128 clamped to the buffer slots (2 for 1 MiB): copies in flight never share a destination; for a deeper window raise --memory") {
		t.Fatalf("the header does not explain the clamp (%v):\n%s", r.err, r.stdout)
	}
	// The default window, deeper than the buffers, is a fact of the run
	// on its line, not a warning about a flag the user never gave.
	r = ioatctl(t, "copy", "--device", "emulated-dsa", "--size", "1M", "--memory", "4M", "--iterations", "4")
	if r.err != nil || !strings.Contains(r.stdout, "window 128 (2 for 1 MiB: one copy per buffer slot)") || strings.Contains(r.stdout, "window:  ") {
		t.Fatalf("the default window's header (%v):\n%s", r.err, r.stdout)
	}
}
