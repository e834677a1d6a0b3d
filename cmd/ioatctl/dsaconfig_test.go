package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/sysfstest"
)

// dsaSysfs builds the idxd tree of ioat's tests (dsa0 enabled, wq0.0
// dedicated and wq0.1 shared user WQs enabled, wq0.2 a kernel WQ, wq0.3
// a disabled user WQ) and a /dev holding the character devices named.
func dsaSysfs(t *testing.T, chardevs ...string) string {
	t.Helper()
	root := sysfstest.Build(t, "../../ioat/testdata/idxd-user.txt")
	dev := t.TempDir()
	os.MkdirAll(filepath.Join(dev, "dsa"), 0o755)
	for _, c := range chardevs {
		os.WriteFile(filepath.Join(dev, "dsa", c), nil, 0o600)
	}
	t.Setenv(envSysfsRoot, root)
	t.Setenv(envDev, dev)
	return root
}

func TestDSAConfigCheck(t *testing.T) {
	dsaSysfs(t)
	r := ioatctl(t, "dsa-config", "--check")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no DSA user work queue is ready") {
		t.Errorf("--check without /dev/dsa: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, w := range []string{"0000:6a:01.0", "wq0.1", "shared", "cannot open", "wq0.3: the WQ is disabled", "enable-wq dsa0/wq0.3"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("--check output lacks %q:\n%s", w, r.stdout)
		}
	}

	dsaSysfs(t, "wq0.0", "wq0.1")
	r = ioatctl(t, "dsa-config", "--check")
	if r.code != exitOK || !strings.Contains(r.stdout, "ready:") || !strings.Contains(r.stdout, "dsa/wq0.0") {
		t.Errorf("--check with both user WQs there: exit %d, stdout:\n%s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

func TestDSAConfigure(t *testing.T) {
	root := dsaSysfs(t, "wq0.0", "wq0.1")
	r := ioatctl(t, "dsa-config", "--wqs", "2")
	if r.code != exitFailure || !strings.Contains(r.stderr, "--reset") {
		t.Fatalf("configuring an enabled device without --reset: exit %d, stderr %q", r.code, r.stderr)
	}
	r = ioatctl(t, "dsa-config", "--wqs", "2", "--reset", "--max-batch", "32", "--max-transfer", "1M", "--name", "mpi")
	if r.code != exitOK || !strings.Contains(r.stdout, "configured dsa0: 2 dedicated user WQ(s)") {
		t.Fatalf("dsa-config: exit %d, stdout:\n%s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, "bus/dsa/devices", rel))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for rel, want := range map[string]string{"wq0.1/mode": "dedicated", "wq0.1/size": "64", "wq0.1/name": "mpi", "wq0.1/max_transfer_size": "1048576",
		"wq0.0/max_batch_size": "32", "wq0.2/type": "none", "wq0.3/size": "0", "engine0.3/group_id": "1"} {
		if got := read(rel); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "bus/dsa/drivers/user/bind")); string(b) != "wq0.1" {
		t.Errorf("last WQ bound: %q", b)
	}
	if !strings.Contains(r.stderr, "bus/dsa/drivers/idxd/bind <- dsa0") {
		t.Errorf("the writes are not echoed on stderr:\n%s", r.stderr)
	}
	r = ioatctl(t, "dsa-config", "--mode", "both")
	if r.code != exitFailure || !strings.Contains(r.stderr, `mode "both"`) {
		t.Errorf("--mode both: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestUserWQDevice: --device takes the kernel's user WQs by name, and
// what keeps one from opening reaches the user with its fix.
func TestUserWQDevice(t *testing.T) {
	dsaSysfs(t, "wq0.0")
	r := ioatctl(t, "verify", "--device", "wq0.0", "--iterations", "4")
	if r.code != exitFailure || !strings.Contains(r.stderr, "not a character device") {
		t.Errorf("verify on a WQ whose /dev node is a plain file: exit %d, stderr %q", r.code, r.stderr)
	}
	r = ioatctl(t, "copy", "--device", "wq0.3", "--size", "64K")
	if r.code != exitFailure || !strings.Contains(r.stderr, "enable-wq dsa0/wq0.3") {
		t.Errorf("copy on a disabled WQ: exit %d, stderr %q", r.code, r.stderr)
	}
	r = ioatctl(t, "copy", "--device", "wq0.0,0000:00:04.0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "not a work queue name") {
		t.Errorf("a WQ and a PCI address mixed: exit %d, stderr %q", r.code, r.stderr)
	}
	// No shared virtual memory: the fix is the IOMMU's scalable mode.
	root := dsaSysfs(t, "wq0.0")
	os.WriteFile(filepath.Join(root, "bus/dsa/devices/dsa0/pasid_enabled"), []byte("0\n"), 0o644)
	r = ioatctl(t, "copy", "--device", "wq0.0", "--size", "64K")
	if r.code != exitFailure || !strings.Contains(r.stderr, "sm_on") {
		t.Errorf("copy without PASID: exit %d, stderr %q", r.code, r.stderr)
	}
	// No user WQ at all: the fix is dsa-config.
	root = dsaSysfs(t, "wq0.0")
	for _, w := range []string{"wq0.0", "wq0.1", "wq0.3"} {
		os.WriteFile(filepath.Join(root, "bus/dsa/devices", w, "type"), []byte("none\n"), 0o644)
	}
	r = ioatctl(t, "copy", "--device", "wq0.0", "--size", "64K")
	if r.code != exitFailure || !strings.Contains(r.stderr, "dsa-config") {
		t.Errorf("copy with no user WQ: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestListUserWQs: list names the kernel's user WQs beside the PCI
// functions, and says how to configure one when there is none.
func TestListUserWQs(t *testing.T) {
	// The PCI tree of list's DSA test, with the idxd tree of ioat's.
	var desc []byte
	for _, f := range []string{"testdata/sysfs-dsa.txt", "../../ioat/testdata/idxd-user.txt"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		desc = append(append(desc, b...), '\n')
	}
	both := filepath.Join(t.TempDir(), "sysfs.txt")
	os.WriteFile(both, desc, 0o644)
	root := sysfstest.Build(t, both)
	t.Setenv(envSysfsRoot, root)
	r := ioatctl(t, "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "wq0.0 (dedicated, 16 entries, enabled), wq0.1 (shared") || !strings.Contains(r.stdout, "--device wq0.0") {
		t.Errorf("list with user WQs: exit %d, stdout:\n%s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// --json: the DSA with idxd's view of it, then a record per
	// configured WQ, all in the documented schema.
	r = ioatctl(t, "list", "--json")
	if r.err != nil {
		t.Fatalf("list --json: %v", r.err)
	}
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := cli.CheckJSONLines(doc, []byte(r.stdout)); len(errs) > 0 {
		t.Errorf("list --json against docs/json.md: %v", errs)
	}
	var dsa *listEntry
	wqs := map[string]listWQ{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var x listEntry
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			t.Fatal(err)
		}
		switch x.Kind {
		case "dsa":
			dsa = &x
		case "wq":
			if dsa == nil || x.Address != dsa.Address || x.WQ == nil {
				t.Errorf("WQ record %s before its DSA's, or without its WQ", line)
				continue
			}
			wqs[x.WQ.Name] = *x.WQ
		}
	}
	if dsa == nil || dsa.IDXD == nil || dsa.IDXD.Name != "dsa0" || dsa.IDXD.State != "enabled" || !dsa.IDXD.PASIDEnabled || dsa.IDXD.WQs != len(wqs) {
		t.Errorf("DSA record %+v (idxd %+v), %d WQ records", dsa, dsa.IDXD, len(wqs))
	}
	if w := wqs["wq0.0"]; w.Mode != "dedicated" || w.Type != "user" || w.State != "enabled" || w.Size != 16 {
		t.Errorf("wq0.0: %+v, want dedicated user enabled with 16 entries", w)
	}
	if w := wqs["wq0.1"]; w.Mode != "shared" {
		t.Errorf("wq0.1: %+v, want shared", w)
	}
	for _, w := range []string{"wq0.0", "wq0.1", "wq0.3"} {
		os.WriteFile(filepath.Join(root, "bus/dsa/devices", w, "type"), []byte("none\n"), 0o644)
	}
	r = ioatctl(t, "list")
	if !strings.Contains(r.stdout, "no user work queue: `sudo ioatctl dsa-config`") {
		t.Errorf("list without user WQs:\n%s\nstderr %s", r.stdout, r.stderr)
	}
}
