package main

import (
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/sysfstest"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
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

// TestMixedModels runs copy, verify and overlap on one engine over the
// CBDMA model's channels and the DSA model's work queues behind one
// IOMMU, with the adaptive policy and the models at different speeds.
func TestMixedModels(t *testing.T) {
	mixed := []string{"--device", "emulated,emulated-dsa", "--channels", "2", "--wqs", "1", "--bandwidth", "256M", "--dsa-bandwidth", "1G", "--policy", "adaptive"}
	for _, args := range [][]string{
		// A window within the buffer slots: copies in flight never share a
		// destination.
		append([]string{"copy", "--size", "256K", "--iterations", "40", "--verify", "--memory", "16M", "--window", "8"}, mixed...),
		append([]string{"verify", "--iterations", "100"}, mixed[:6]...),
		append([]string{"overlap", "--sizes", "64K", "--iterations", "3"}, mixed...),
	} {
		r := ioatctl(t, args...)
		if r.err != nil {
			t.Fatalf("%v: %v\n%s%s", args, r.err, r.stdout, r.stderr)
		}
		if args[0] != "verify" && !strings.Contains(r.stdout, "CBDMA and DSA behind one IOMMU (2 channels and 1 work queue") {
			t.Errorf("%v: the header does not name both models:\n%s", args, r.stdout)
		}
		if args[0] == "verify" && (!strings.Contains(r.stdout, "emulated/1") || !strings.Contains(r.stdout, "emulated-dsa")) {
			t.Errorf("verify does not name each channel and the DSA:\n%s", r.stdout)
		}
	}
	// Hybrid mode on both: the CPU copies the head of each 1 MiB copy.
	if r := ioatctl(t, append([]string{"copy", "--size", "1M", "--iterations", "20", "--verify", "--memory", "16M", "--window", "4", "--hybrid-head", "64K"}, mixed...)...); r.err != nil {
		t.Fatalf("copy --hybrid-head: %v\n%s", r.err, r.stderr)
	}
	// The DSA model alone takes a rate cap too.
	if r := ioatctl(t, "copy", "--device", "emulated-dsa", "--bandwidth", "1G", "--size", "64K", "--iterations", "10"); r.err != nil {
		t.Fatalf("emulated-dsa --bandwidth: %v", r.err)
	}
}

func TestDSAUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"copy", "--device", "emulated-dsa", "--channels", "9"}, "at most 8 work queues"},
		{[]string{"copy", "--device", "emulated-dsa", "--cbver", "3.4"}, "CBDMA model only"},
		{[]string{"copy", "--device", "emulated-dsa", "--wqs", "2"}, "--device emulated,emulated-dsa"},
		{[]string{"copy", "--device", "emulated", "--dsa-bandwidth", "1G"}, "--device emulated,emulated-dsa"},
		{[]string{"copy", "--device", "emulated,emulated-dsa", "--wqs", "9"}, "1 to 8 work queues"},
		{[]string{"copy", "--device", "emulated,emulated-dsa", "--dsa-bandwidth", "-1"}, "bad size"},
		{[]string{"copy", "--device", "emulated", "--policy", "fastest"}, "adaptive"},
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

// TestDSAQueuesCounted: a DSA's work queues are counted and named as
// queues, never as one channel: the headers say "N work queues", verify
// runs one stream over them (one engine configures the whole DSA) and
// says how it spread, and JSON counts the queues.
func TestDSAQueuesCounted(t *testing.T) {
	r := ioatctl(t, "verify", "--device", "emulated-dsa", "--channels", "3", "--iterations", "30", "--seed", "5")
	if r.err != nil {
		t.Fatalf("verify: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	for _, want := range []string{"emulated DSA (3 work queues,", "30 operations per stream", "emulated-dsa ran one stream over its 3 work queues", "WQ 2 "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("verify output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = ioatctl(t, "verify", "--device", "emulated-dsa", "--channels", "2", "--iterations", "20", "--json")
	if r.err != nil {
		t.Fatalf("verify --json: %v\n%s", r.err, r.stderr)
	}
	rows := jsonLines(t, r.stdout)
	if len(rows) != 1 || rows[0]["channel"] != "emulated-dsa" || rows[0]["copies_ok"].(float64)+rows[0]["fills_ok"].(float64) != 20 {
		t.Errorf("verify --json on the DSA model: %v, want one emulated-dsa stream of 20 operations", rows)
	}
	r = ioatctl(t, "copy", "--device", "emulated-dsa", "--channels", "3", "--size", "64K", "--iterations", "20", "--json")
	if r.err != nil {
		t.Fatalf("copy --json: %v\n%s", r.err, r.stderr)
	}
	if rows := jsonLines(t, r.stdout); rows[0]["channels"] != 3.0 {
		t.Errorf("copy on a 3-WQ DSA reports %v channels, want 3", rows[0]["channels"])
	}
	r = ioatctl(t, "overlap", "--device", "emulated-dsa", "--channels", "3", "--sizes", "64K", "--iterations", "2")
	if r.err != nil || !strings.Contains(r.stdout, "run:     3 work queues,") {
		t.Errorf("overlap header does not count the work queues (%v):\n%s", r.err, r.stdout)
	}
	r = ioatctl(t, "copy", "--device", "emulated-dsa", "--chancnt", "2")
	if r.code != exitUsage || !strings.Contains(r.err.Error(), "CBDMA model only") {
		t.Errorf("--chancnt with emulated-dsa: exit %d, %v; want a usage error", r.code, r.err)
	}
}

// TestQueueNames: work queues are named like channels (ADDRESS/N, or
// emulated-dsa/N on the model), and a run over both kinds counts each.
func TestQueueNames(t *testing.T) {
	a := pci.Address{Bus: 0x6a, Device: 1}
	wq := ioat.Info{Addr: a, Index: 1, Channels: 4}
	if got := channelName(wq); got != "0000:6a:01.0/1" {
		t.Errorf("WQ 1 of four: %q", got)
	}
	r := &rig{backend: &backend{emulated: true, dsa: true}, chans: []ioat.Info{{Index: 0, Channels: 2}, {Index: 1, Channels: 2}}}
	if got := r.channelName(1); got != "emulated-dsa/1" {
		t.Errorf("the model's WQ 1: %q", got)
	}
	if got := r.queueCount(); got != "2 work queues" {
		t.Errorf("two WQs counted as %q", got)
	}
	r = &rig{backend: &backend{}, chans: []ioat.Info{{Version: hw.Ver33}, {Version: hw.Ver33}, wq}}
	if got := r.queueCount(); got != "2 channels and 1 work queue" {
		t.Errorf("mixed run counted as %q", got)
	}
}
