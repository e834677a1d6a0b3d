package qemu

import (
	"strings"
	"testing"
)

func passingSummary() Summary {
	return Summary{
		Config: "iommu", Kernel: "6.1.0-56-amd64",
		Setup: []Step{{Name: "load vfio.ko"}, {Name: "bind 0000:00:03.0 to vfio-pci"}},
		Tests: []TestResult{{Binary: "vfio.test", Passed: 70, Skipped: 2, Seconds: 2.5}},
	}
}

func TestParseLog(t *testing.T) {
	ok := FormatSummary(passingSummary())
	failedStep := passingSummary()
	failedStep.Setup[1].Err = "vfio-pci did not take the function"
	timedOut := passingSummary()
	timedOut.Tests[0] = TestResult{Binary: "vfio.test", Exit: -1, TimedOut: true}
	for _, tc := range []struct {
		name string
		log  string
		want []string // substrings of the problems, in order; none for a pass
	}{
		{"pass", "[    1.0] booting\r\n=== RUN   TestX\n--- PASS: TestX (0.00s)\n" + ok + "\r\n[ 5.7] reboot: Power down\n", nil},
		{"pass with kernel noise before the marker", "[ 5.1] DMAR: fault\n" + "garbage " + ok + "\n", nil},
		{"no summary", "[ 1.0] booting\n--- PASS: TestX\n", []string{"no GOMX-QEMU-SUMMARY line"}},
		{"empty log", "", []string{"no GOMX-QEMU-SUMMARY line"}},
		{"FAIL line despite a passing summary", "    --- FAIL: TestX/sub (0.01s)\n" + ok + "\n", []string{"log: --- FAIL: TestX/sub"}},
		{"panic", "panic: runtime error: index out of range\n" + ok + "\n", []string{"log: panic: runtime error"}},
		{"kernel panic", "[ 3.0] Kernel panic - not syncing: Attempted to kill init!\n", []string{"Kernel panic", "no GOMX-QEMU-SUMMARY"}},
		{"failed setup step", FormatSummary(failedStep) + "\n", []string{`setup "bind 0000:00:03.0 to vfio-pci" failed: vfio-pci did not take`}},
		{"timed out binary", FormatSummary(timedOut) + "\n", []string{"vfio.test: timed out, exit -1"}},
		{"no binaries", FormatSummary(Summary{Config: "iommu"}) + "\n", []string{"no test binary ran"}},
		{"truncated summary", ok[:len(ok)-10] + "\n", []string{"summary line does not parse", "no GOMX-QEMU-SUMMARY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, problems := ParseLog([]byte(tc.log))
			if len(problems) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q", problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, problems[i], w)
				}
			}
			if tc.want == nil && (s.Config != "iommu" || len(s.Tests) != 1 || s.Tests[0].Passed != 70) {
				t.Errorf("summary %+v not parsed back", s)
			}
		})
	}
}

func TestTestResultOK(t *testing.T) {
	for _, tc := range []struct {
		r    TestResult
		want bool
	}{
		{TestResult{Binary: "a"}, true},
		{TestResult{Binary: "a", Exit: 1}, false},
		{TestResult{Binary: "a", Failed: 1}, false},
		{TestResult{Binary: "a", Panicked: true}, false},
		{TestResult{Binary: "a", TimedOut: true}, false},
		{TestResult{Binary: "a", Err: "exec format error"}, false},
	} {
		if got := tc.r.OK(); got != tc.want {
			t.Errorf("%+v.OK() = %v, want %v", tc.r, got, tc.want)
		}
		if line := tc.r.Line(); strings.HasPrefix(line, "FAIL") == tc.want {
			t.Errorf("Line() = %q for OK() = %v", line, tc.want)
		}
	}
}

func TestCounter(t *testing.T) {
	var c Counter
	for _, l := range strings.Split(`=== RUN   TestA
--- PASS: TestA (0.00s)
=== RUN   TestB
    --- SKIP: TestB/x (0.00s)
    --- PASS: TestB/y (0.00s)
--- FAIL: TestB (0.01s)
    b_test.go:12: panic: not at the start of the line, not a panic
panic: boom [recovered]
FAIL`, "\n") {
		c.Line(l)
	}
	if c.Passed != 2 || c.Failed != 1 || c.Skipped != 1 || !c.Panicked {
		t.Errorf("counter %+v, want 2 passed, 1 failed, 1 skipped, panicked", c)
	}
}

// FuzzParseLog feeds arbitrary console output to the parser: it must not
// panic, and a log without the marker is never a pass.
func FuzzParseLog(f *testing.F) {
	f.Add([]byte(FormatSummary(passingSummary()) + "\n"))
	f.Add([]byte("--- FAIL: X\n" + SummaryMarker + "{\"tests\":[{}]}\n"))
	f.Add([]byte(SummaryMarker + "{\"setup\":[{\"name\":\"x\",\"err\":\"y\"}]\n"))
	f.Fuzz(func(t *testing.T, log []byte) {
		_, problems := ParseLog(log)
		if !strings.Contains(string(log), strings.TrimSpace(SummaryMarker)) && len(problems) == 0 {
			t.Fatal("a log without a summary passed")
		}
	})
}
