package peers

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/hack/qemu"
)

func TestTableFilterKeepsTableAndProgress(t *testing.T) {
	var out bytes.Buffer
	f := &TableFilter{Out: &out}
	console := "qemu-test    1.0s: booting peers-e1000e\n" +
		"[peers-e1000e   12.0s] init: ok   mount\n" +
		"[peers-e1000e   50.0s] peers: mx run 1/1 done (5s)\n" +
		"[peers-e1000e   60.0s] testpmd: EAL: Detected 2 lcore(s)\n" +
		"[peers-e1000e   70.0s] " + Marker + "mx over gomx e1000e (VFIO)        64        20.0 20.0\n" +
		"[peers-e1000e   71.0s] init: FAIL bind 0000:00:01.0 to vfio-pci: busy\n"
	// Written in pieces that split lines, as QEMU's console does.
	for i := 0; i < len(console); i += 7 {
		f.Write([]byte(console[i:min(i+7, len(console))]))
	}
	want := "qemu-test    1.0s: booting peers-e1000e\n" +
		"[peers-e1000e   50.0s] peers: mx run 1/1 done (5s)\n" +
		"mx over gomx e1000e (VFIO)        64        20.0 20.0\n" +
		"[peers-e1000e   71.0s] init: FAIL bind 0000:00:01.0 to vfio-pci: busy\n"
	if out.String() != want {
		t.Errorf("filtered console:\n%s\nwant:\n%s", out.String(), want)
	}
	if _, ok := Keep("[x 1.0s] testpmd: EAL: probe", true); !ok {
		t.Error("verbose filter dropped a console line")
	}
}

func TestConfigRunsTheGuestProgram(t *testing.T) {
	c := Config(3, "-testpmd=")
	args := c.InitArgs()
	if !slices.ContainsFunc(args, func(a string) bool { return a == "-run=/bin/guest,-runs=3,-testpmd=" }) {
		t.Errorf("init args %q do not run the guest program with its flags", args)
	}
	if !strings.Contains(c.Append(), "intel_iommu=on") || c.SMP != 2 {
		t.Errorf("peers config %+v: want the IOMMU machine with 2 vCPUs", c)
	}
}

func TestUSBConfigRunsTheGuestOnTheUSBMachine(t *testing.T) {
	guest := []string{"-usb-ping-sizes=8/1K", "-usb-window=2"}
	c := USBConfig(2, guest...)
	if !c.USB || c.Optional {
		t.Fatalf("usb peers config %+v: want the usb machine", c)
	}
	var run string
	for _, a := range c.InitArgs() {
		if v, ok := strings.CutPrefix(a, "-run="); ok {
			run = v
		}
	}
	// The init splits -run at commas: every argument must come back whole.
	got := strings.Split(run, ",")
	want := append([]string{"/bin/guest", "-runs=2", "-usb-device=0525:a4a2", "-b=0000:00:02.0"}, guest...)
	if !slices.Equal(got, want) {
		t.Errorf("the init would run %q, want %q", got, want)
	}
	if !strings.Contains(strings.Join(c.MachineArgs(), " "), "usb-net") {
		t.Errorf("machine %q has no usb-net", c.MachineArgs())
	}
}

// TestReportNamesEveryVMAndProblem: the closing lines name the command,
// each VM with its time, and every problem of a failed boot.
func TestReportNamesEveryVMAndProblem(t *testing.T) {
	rs := []qemu.BootResult{
		{Config: qemu.Config{Name: "peers-usb"}, Wall: 90 * time.Second, Problems: []string{"no table", "guest timed out"}},
	}
	got := Report("peers-usb", time.Now())(rs)
	lines := strings.Split(got, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "peers-usb: VM peers-usb in 90s (wall of the whole run ") ||
		lines[1] != "  problem: no table" || lines[2] != "  problem: guest timed out" {
		t.Fatalf("Report = %q", got)
	}
}
