package idxd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gomx-dev/gomx/internal/sysfstest"
)

// fakeKernel is the idxd driver's side of the sysfs ABI, enough to catch
// a configuration written in the wrong order: attribute writes land in
// the files, a WQ's attributes are refused while it is enabled and an
// engine's while its device is, binding a device enables it and binding
// a WQ enables it only when its device is enabled and it is a sized user
// WQ in a group; unbinding disables.
func fakeKernel(t *testing.T, root string) Writer {
	dir := filepath.Join(root, DevicesDir)
	state := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name, "state"))
		return strings.TrimSpace(string(b))
	}
	attr := func(name, a string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name, a))
		return strings.TrimSpace(string(b))
	}
	setState := func(name, s string) { os.WriteFile(filepath.Join(dir, name, "state"), []byte(s+"\n"), 0o644) }
	return func(path, value string) error {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			t.Fatalf("write outside the tree: %s", path)
		}
		parts := strings.Split(rel, string(filepath.Separator))
		switch {
		case len(parts) == 5 && parts[0] == "bus" && parts[2] == "drivers":
			switch parts[4] {
			case "bind":
				if strings.HasPrefix(value, "dsa") {
					setState(value, "enabled")
					return nil
				}
				dev := "dsa" + strings.Split(strings.TrimPrefix(value, "wq"), ".")[0]
				if state(dev) != "enabled" || attr(value, "size") == "0" || attr(value, "type") != "user" || attr(value, "group_id") == "-1" {
					return syscall.EINVAL
				}
				setState(value, "enabled")
			case "unbind":
				setState(value, "disabled")
			}
			return nil
		case len(parts) == 4 && parts[1] == "dsa" && parts[2] == "devices":
			name := parts[3]
			if strings.HasPrefix(name, "wq") && state(name) == "enabled" {
				return syscall.EPERM
			}
			if strings.HasPrefix(name, "engine") && state("dsa0") == "enabled" {
				return syscall.EPERM
			}
		}
		return os.WriteFile(path, []byte(value), 0o644)
	}
}

func TestConfigure(t *testing.T) {
	root := sysfstest.Build(t, "../testdata/idxd-user.txt")
	kern := fakeKernel(t, root)
	p := Plan{Device: "dsa0", WQs: 2, Mode: "shared", MaxBatchSize: 64}
	if _, err := Configure(root, p, kern); err == nil || !strings.Contains(err.Error(), "--reset") {
		t.Fatalf("configuring an enabled device without Reset: %v", err)
	}
	p.Reset = true
	steps, err := Configure(root, p, kern)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	if d.State != "enabled" {
		t.Errorf("device %s after Configure", d.State)
	}
	for i, q := range d.WQs {
		if i < 2 {
			if q.State != "enabled" || q.Mode != "shared" || q.Size != 64 || q.Group != i || q.Type != "user" || q.WQName != "gomx" || q.Threshold != 64 || q.MaxBatchSize != 64 || q.Priority != 10 {
				t.Errorf("%s after Configure: %+v", q.Name, q)
			}
		} else if q.State != "disabled" || q.Size != 0 {
			t.Errorf("%s should be out of use: %+v", q.Name, q)
		}
	}
	for i, e := range d.Engines {
		if e.Group != i%2 {
			t.Errorf("%s in group %d, want %d", e.Name, e.Group, i%2)
		}
	}
	last := steps[len(steps)-1]
	if !strings.HasSuffix(last.Path, "drivers/user/bind") || last.Value != "wq0.1" {
		t.Errorf("last step %+v, want wq0.1 bound to the user driver", last)
	}

	_, ready, probs := Check(root, t.TempDir())
	if len(ready) != 0 || len(probs) == 0 || !strings.Contains(probs[0].What+probs[len(probs)-1].What, "cannot open") {
		t.Errorf("Check without /dev/dsa: ready %v, problems %+v", ready, probs)
	}
	dev := t.TempDir()
	os.MkdirAll(filepath.Join(dev, "dsa"), 0o755)
	for _, n := range []string{"wq0.0", "wq0.1"} {
		os.WriteFile(filepath.Join(dev, "dsa", n), nil, 0o600)
	}
	if _, ready, probs := Check(root, dev); len(ready) != 2 || len(probs) != 0 {
		t.Errorf("Check after Configure: ready %d, problems %+v", len(ready), probs)
	}
}

func TestConfigureRefuses(t *testing.T) {
	root := sysfstest.Build(t, "../testdata/idxd-user.txt")
	kern := fakeKernel(t, root)
	for _, c := range []struct {
		p    Plan
		want string
	}{
		{Plan{Device: "dsa3", WQs: 1}, `no device "dsa3"`},
		{Plan{Device: "dsa0", WQs: 5, Reset: true}, "takes 1..4"},
		{Plan{Device: "dsa0", WQs: 1, Mode: "both", Reset: true}, `mode "both"`},
		{Plan{Device: "dsa0", WQs: 2, Size: 100, Reset: true}, "128 in all"},
		{Plan{Device: "dsa0", WQs: 1, MaxBatchSize: 4096, Reset: true}, "at most 1024"},
	} {
		if _, err := Configure(root, c.p, kern); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
	failing := func(path, value string) error { return syscall.EBUSY }
	_, err := Configure(root, Plan{Device: "dsa0", WQs: 1, Reset: true}, failing)
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "unbind") {
		t.Errorf("a refused write: %v", err)
	}
}

func TestCheckProblems(t *testing.T) {
	root := sysfstest.Build(t, "../testdata/idxd-user.txt")
	os.WriteFile(filepath.Join(root, DevicesDir, "dsa0/pasid_enabled"), []byte("0\n"), 0o644)
	_, ready, probs := Check(root, t.TempDir())
	if len(ready) != 0 {
		t.Errorf("ready %v without PASID", ready)
	}
	var all []string
	for _, p := range probs {
		all = append(all, p.Where+": "+p.What+" -> "+p.Fix)
	}
	s := strings.Join(all, "\n")
	for _, w := range []string{"dsa0: pasid_enabled is 0", "sm_on", "wq0.3: the WQ is disabled", "dsa-config --device dsa0"} {
		if !strings.Contains(s, w) {
			t.Errorf("problems do not say %q:\n%s", w, s)
		}
	}
	if _, _, probs := Check(t.TempDir(), t.TempDir()); len(probs) != 1 || !strings.Contains(probs[0].Fix, "modprobe idxd") {
		t.Errorf("no dsa bus: %+v", probs)
	}
}
