package main

import (
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/sysfstest"
)

// TestDSAModel runs copy, verify and overlap on the emulated DSA.
func TestDSAModel(t *testing.T) {
	for _, args := range [][]string{
		{"copy", "--device", "emulated-dsa", "--channels", "2", "--size", "256K", "--iterations", "100", "--verify", "--memory", "64M"},
		{"verify", "--device", "emulated-dsa", "--channels", "2", "--iterations", "200"},
		{"overlap", "--device", "emulated-dsa", "--sizes", "64K", "--iterations", "3"},
	} {
		r := ioatctl(t, args...)
		if r.err != nil {
			t.Fatalf("%v: %v\n%s%s", args, r.err, r.stdout, r.stderr)
		}
		if args[0] != "verify" && !strings.Contains(r.stdout, "emulated DSA (2 work queues") && !strings.Contains(r.stdout, "emulated DSA (1 work queue") {
			t.Errorf("%v: the header does not name the DSA model:\n%s", args, r.stdout)
		}
	}
}

func TestDSAUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"copy", "--device", "emulated-dsa", "--channels", "9"}, "at most 8 work queues"},
		{[]string{"copy", "--device", "emulated-dsa", "--cbver", "3.4"}, "CBDMA model only"},
		{[]string{"copy", "--device", "emulated-dsa", "--bandwidth", "1G"}, "CBDMA model only"},
	} {
		r := ioatctl(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%v: exit %d, %v; want a usage error saying %q", tc.args, r.code, r.err, tc.want)
		}
	}
}

// TestListDSA shows a DSA beside the CBDMA functions, and a DSA owned by
// idxd named with --device says how to hand it to vfio-pci.
func TestListDSA(t *testing.T) {
	t.Setenv(envSysfsRoot, sysfstest.Build(t, "testdata/sysfs-dsa.txt"))
	r := ioatctl(t, "list")
	if r.err != nil {
		t.Fatalf("list: %v", r.err)
	}
	if !strings.Contains(r.stdout, "0000:6a:01.0") || !strings.Contains(r.stdout, "DSA (Sapphire Rapids)") || !strings.Contains(r.stdout, "1 DSA") {
		t.Errorf("list does not show the DSA:\n%s", r.stdout)
	}
	r = ioatctl(t, "copy", "--device", "0000:6a:01.0", "--size", "64K", "--iterations", "1")
	if r.err == nil || !strings.Contains(r.err.Error(), "bound to idxd") || !strings.Contains(r.err.Error(), "disable_denylist") {
		t.Errorf("copy on an idxd-owned DSA: %v", r.err)
	}
}
