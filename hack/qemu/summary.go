package qemu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// SummaryMarker starts the one line on the serial console that carries the
// guest's Summary as JSON. The guest prints it once, after every test
// binary has run, and powers off.
const SummaryMarker = "GOMX-QEMU-SUMMARY "

// Summary is what the guest reports about one boot: how the setup went and
// how each test binary ended.
type Summary struct {
	// Config names the boot configuration, as the host passed it.
	Config string `json:"config"`
	// Kernel is the guest's kernel release (uname -r).
	Kernel string `json:"kernel"`
	// Setup lists the setup steps (modules, hugepages, binding) in order.
	Setup []Step `json:"setup"`
	// Tests has one entry per test binary, in the order they ran.
	Tests []TestResult `json:"tests"`
}

// Step is one setup step of the guest's init.
type Step struct {
	// Name says what the step did ("load vfio.ko", "bind 0000:00:03.0").
	Name string `json:"name"`
	// Err is "" when the step worked, else why it failed.
	Err string `json:"err,omitempty"`
}

// TestResult is how one test binary ended.
type TestResult struct {
	// Binary is the file name, for example "vfio.test".
	Binary string `json:"binary"`
	// Exit is the exit status, -1 when the binary did not exit by itself
	// (killed after its timeout, or it could not start).
	Exit int `json:"exit"`
	// Counts of "--- PASS", "--- FAIL" and "--- SKIP" lines, subtests
	// included.
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	// Panicked is set when the output had a "panic: " line.
	Panicked bool `json:"panicked,omitempty"`
	// TimedOut is set when the init killed the binary after its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Err says why the binary could not be run, "" otherwise.
	Err string `json:"err,omitempty"`
	// Seconds is the wall time the binary ran, in guest time.
	Seconds float64 `json:"seconds"`
}

// OK reports whether the binary passed: exit status 0, no failed test, no
// panic, no timeout.
func (r TestResult) OK() bool {
	return r.Exit == 0 && r.Failed == 0 && !r.Panicked && !r.TimedOut && r.Err == ""
}

// FormatSummary renders s as the single console line the host looks for.
func FormatSummary(s Summary) string {
	b, err := json.Marshal(s)
	if err != nil { // only plain strings and numbers: cannot happen
		panic(err)
	}
	return SummaryMarker + string(b)
}

// Errors lists everything wrong with the run the summary describes: failed
// setup steps, test binaries that did not pass, and the absence of any
// test binary. An empty result means the run passed.
func (s Summary) Errors() []string {
	var out []string
	for _, st := range s.Setup {
		if st.Err != "" {
			out = append(out, fmt.Sprintf("setup %q failed: %s", st.Name, st.Err))
		}
	}
	if len(s.Tests) == 0 {
		out = append(out, "no test binary ran")
	}
	for _, t := range s.Tests {
		if t.OK() {
			continue
		}
		var why []string
		if t.Err != "" {
			why = append(why, t.Err)
		}
		if t.TimedOut {
			why = append(why, "timed out")
		}
		if t.Panicked {
			why = append(why, "panicked")
		}
		if t.Failed > 0 {
			why = append(why, fmt.Sprintf("%d failed", t.Failed))
		}
		why = append(why, fmt.Sprintf("exit %d", t.Exit))
		out = append(out, fmt.Sprintf("%s: %s", t.Binary, strings.Join(why, ", ")))
	}
	return out
}

// Line is one line of a summary table: a binary and its counts.
func (r TestResult) Line() string {
	verdict := "ok  "
	if !r.OK() {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %-16s pass=%-3d fail=%-2d skip=%-2d exit=%d %.1fs", verdict, r.Binary, r.Passed, r.Failed, r.Skipped, r.Exit, r.Seconds)
}

// ErrNoSummary means the serial log has no summary line: the guest did not
// get to the end (a kernel panic, an init crash, a timeout).
var ErrNoSummary = errors.New("no " + strings.TrimSpace(SummaryMarker) + " line on the serial console")

// ParseLog finds the guest's summary in a serial console log and checks the
// log itself: a "--- FAIL" or "panic: " line anywhere, or a kernel panic,
// is an error even when the summary says otherwise. It returns the summary
// (zero when missing) and every problem found; problems is empty only for
// a passing run.
func ParseLog(log []byte) (s Summary, problems []string) {
	found := false
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, SummaryMarker); i >= 0 {
			var got Summary
			if err := json.Unmarshal([]byte(line[i+len(SummaryMarker):]), &got); err != nil {
				problems = append(problems, fmt.Sprintf("summary line does not parse: %v", err))
				continue
			}
			s, found = got, true
			continue
		}
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "--- FAIL"):
			problems = append(problems, "log: "+t)
		case strings.HasPrefix(t, "panic: "):
			problems = append(problems, "log: "+t)
		case strings.Contains(line, "Kernel panic"):
			problems = append(problems, "log: "+t)
		}
	}
	if err := sc.Err(); err != nil {
		problems = append(problems, "reading the serial log: "+err.Error())
	}
	if !found {
		return s, append(problems, ErrNoSummary.Error())
	}
	return s, append(problems, s.Errors()...)
}

// Counter counts the outcome lines of `go test -v` output, fed one line at
// a time.
type Counter struct {
	// Passed, Failed and Skipped count "--- PASS", "--- FAIL" and
	// "--- SKIP" lines, subtests included.
	Passed, Failed, Skipped int
	// Panicked is set by a line starting with "panic: ".
	Panicked bool
}

// Line counts one line of output.
func (c *Counter) Line(line string) {
	t := strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(t, "--- PASS"):
		c.Passed++
	case strings.HasPrefix(t, "--- FAIL"):
		c.Failed++
	case strings.HasPrefix(t, "--- SKIP"):
		c.Skipped++
	case strings.HasPrefix(t, "panic: "):
		c.Panicked = true
	}
}
