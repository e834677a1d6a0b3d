package leaktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// recorder keeps what a check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Helper() {}

// TestWaitCleanNamesWhatIsLeft: a descriptor, a file in the directory
// and a child not reaped are each reported, the descriptor by what it
// names; once they are gone nothing is.
func TestWaitCleanNamesWhatIsLeft(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "net-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	before := Now(t)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, "net-1", "0.sock")
	if err := os.WriteFile(left, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skipf("no sleep(1) to start: %v", err)
	}
	r := &recorder{TB: t}
	WaitClean(r, before, dir, 50*time.Millisecond)
	all := strings.Join(r.errs, "\n")
	for _, want := range []string{os.DevNull, left, fmt.Sprint(child.Process.Pid)} {
		if !strings.Contains(all, want) {
			t.Errorf("WaitClean did not name %s; it reported:\n%s", want, all)
		}
	}
	child.Process.Kill()
	child.Wait()
	f.Close()
	os.Remove(left)
	r = &recorder{TB: t}
	WaitClean(r, before, dir, 10*time.Second)
	if len(r.errs) != 0 {
		t.Errorf("all given back, WaitClean reported: %q", r.errs)
	}
}
