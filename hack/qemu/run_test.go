package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The console is cut into lines however QEMU's writes fall: carriage
// returns go, each line is stamped in the log file and prefixed in the
// stream, an unterminated last line comes out on Close, and a line too long
// to hold is emitted rather than kept growing.
func TestSerialLog(t *testing.T) {
	var file, stream bytes.Buffer
	s := &serialLog{start: time.Now(), name: "cfg", file: &file, stream: &stream}
	for _, w := range []string{"first li", "ne\r\nsecond\n", "", "third\r\nunterminated"} {
		if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	s.Close()
	s.Close()
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(file.String(), "\n"), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Fatalf("log line %q has no time stamp and text", l)
		}
		lines = append(lines, strings.Join(f[1:], " "))
	}
	want := []string{"first line", "second", "third", "unterminated"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("log lines %q, want %q", lines, want)
	}
	if !strings.Contains(stream.String(), "[cfg ") || strings.Count(stream.String(), "\n") != 4 || strings.Contains(stream.String(), "\r") {
		t.Errorf("stream %q: want 4 lines prefixed with [cfg and no carriage returns", stream.String())
	}
	if got := string(s.Bytes()); got != "first line\r\nsecond\nthird\r\nunterminated" {
		t.Errorf("Bytes = %q, want everything written", got)
	}

	file.Reset()
	long := bytes.Repeat([]byte("x"), maxLine+10)
	s.Write(long)
	if file.Len() < maxLine {
		t.Errorf("a %d-byte line without a newline was held back", len(long))
	}
}

// fakeQEMU puts a qemu-system-x86_64 on PATH that runs script (sh) instead
// of a guest.
func fakeQEMU(t *testing.T, script string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "qemu-system-x86_64"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
}

// Boot's verdict, with a stand-in for QEMU: a summary that passes, a
// failing test line, a crash without a summary, and a guest that never
// ends all come out as a user of `make qemu-test` would need them.
func TestBootVerdict(t *testing.T) {
	summary := FormatSummary(Summary{Config: "iommu", Kernel: "6.1", Tests: []TestResult{{Binary: "vfio.test", Passed: 3}}})
	sumFile := filepath.Join(t.TempDir(), "summary")
	if err := os.WriteFile(sumFile, []byte(summary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script string
		console      string // a line the serial log must hold
		timeout      time.Duration
		want         []string // substrings of the problems, in order; none: passes
	}{
		{"pass", "echo booting; cat " + sumFile, "booting", time.Minute, nil},
		{"failed test", "echo '--- FAIL: TestX (0.00s)'; cat " + sumFile, "--- FAIL: TestX", time.Minute, []string{"--- FAIL: TestX"}},
		{"crash", "echo 'Kernel panic - not syncing: VFS'; exit 1", "Kernel panic", time.Minute, []string{"Kernel panic", "no GOMX-QEMU-SUMMARY", "exit status 1"}},
		{"hang", "echo booting; exec sleep 600", "booting", 2 * time.Second, []string{"no GOMX-QEMU-SUMMARY", "timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeQEMU(t, tc.script)
			c := Configs[0]
			c.Timeout = tc.timeout
			logPath := filepath.Join(t.TempDir(), "serial.log")
			r := Boot(context.Background(), c, "/k", "/i", logPath, nil)
			if len(r.Problems) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q", r.Problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(r.Problems[i], w) {
					t.Errorf("problem %d = %q, want it to mention %q", i, r.Problems[i], w)
				}
			}
			if tc.want == nil && (r.Summary.Config != "iommu" || len(r.Summary.Tests) != 1) {
				t.Errorf("summary %+v, want the guest's", r.Summary)
			}
			log, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(log), "# qemu-system-x86_64 ") || !strings.Contains(string(log), tc.console) {
				t.Errorf("serial log does not start with the QEMU command and hold the console:\n%s", log)
			}
		})
	}
}

// TestBootQEMUFault: a QEMU that dies of its own fault is told apart from
// one that exits with a status or is killed on the timeout, so Run can
// boot the configuration once more and say so.
func TestBootQEMUFault(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		timeout      time.Duration
		want         string
	}{
		{"segmentation fault", "echo booting; kill -SEGV $$", time.Minute, "segmentation fault"},
		{"abort", "echo booting; kill -ABRT $$", time.Minute, "aborted"},
		{"exit status", "echo booting; exit 1", time.Minute, ""},
		{"timeout", "echo booting; exec sleep 600", 2 * time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeQEMU(t, tc.script)
			c := Configs[0]
			c.Timeout = tc.timeout
			r := Boot(context.Background(), c, "/k", "/i", filepath.Join(t.TempDir(), "serial.log"), nil)
			if r.Crashed != tc.want {
				t.Fatalf("Crashed = %q, want %q (problems %q)", r.Crashed, tc.want, r.Problems)
			}
			if len(r.Problems) == 0 {
				t.Fatal("a boot without the guest's summary passed")
			}
		})
	}
	r := BootResult{Config: Configs[0], Wall: time.Second, Earlier: &BootResult{Crashed: "segmentation fault", Wall: 2 * time.Second, Log: "/x/first.log"}}
	if got := Report([]BootResult{r}); !strings.Contains(got, "note: booted twice: QEMU crashed (segmentation fault) after 2.0s of the first boot (serial log /x/first.log)") {
		t.Errorf("the report does not say the configuration was booted twice:\n%s", got)
	}
}
