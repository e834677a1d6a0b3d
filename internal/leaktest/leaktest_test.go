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

// startSleep starts a child that lives until the test ends.
func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skipf("no sleep(1) to start: %v", err)
	}
	t.Cleanup(func() {
		child.Process.Kill()
		child.Wait()
	})
	return child
}

// TestWaitCleanNamesWhatIsLeft: a descriptor added, one gone, a file in
// the directory and a child not reaped are each reported, the
// descriptors by what they name; a child started before Now is not. Once
// they are back as they were nothing is.
func TestWaitCleanNamesWhatIsLeft(t *testing.T) {
	older := startSleep(t)
	gone, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
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
	child := startSleep(t)
	gone.Close()
	r := &recorder{TB: t}
	WaitClean(r, before, dir, 50*time.Millisecond)
	all := strings.Join(r.errs, "\n")
	for _, want := range []string{`added: ["/dev/null"`, `gone: ["/proc/`, left, fmt.Sprintf("pids [%d]", child.Process.Pid)} {
		if !strings.Contains(all, want) {
			t.Errorf("WaitClean did not name %s; it reported:\n%s", want, all)
		}
	}
	if strings.Contains(all, fmt.Sprint(older.Process.Pid)) {
		t.Errorf("WaitClean named %d, started before Now; it reported:\n%s", older.Process.Pid, all)
	}
	child.Process.Kill()
	child.Wait()
	f.Close()
	os.Remove(left)
	if gone, err = os.Open("/proc/self/status"); err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	r = &recorder{TB: t}
	WaitClean(r, before, dir, 10*time.Second)
	if len(r.errs) != 0 {
		t.Errorf("all given back, WaitClean reported: %q", r.errs)
	}
}

// TestWaitCleanWaits: a descriptor closed some 100 ms after WaitClean
// starts, as a peer's teardown would on another goroutine, is waited for.
func TestWaitCleanWaits(t *testing.T) {
	before := Now(t)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		time.Sleep(100 * time.Millisecond)
		f.Close()
	}()
	r := &recorder{TB: t}
	WaitClean(r, before, "", time.Minute)
	<-closed
	if len(r.errs) != 0 {
		t.Errorf("a descriptor closed after 100 ms: WaitClean reported %q", r.errs)
	}
}

// TestCheckRefusesParallel: the counts are the whole process's, so a
// parallel test may not use Check.
func TestCheckRefusesParallel(t *testing.T) {
	t.Run("parallel", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Error("Check in a parallel test did not panic")
			}
		}()
		Check(t, "")
	})
}
