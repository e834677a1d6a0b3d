package cli

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns both ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to test on: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Skipf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Skipf("pseudo-terminal number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// Nothing reaches a buffer, a pipe or a file: only terminals get the line.
func TestProgressOnlyOnTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, "tool")
	p.Set("step %d", 1)
	p.Clear()
	p.Stop()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	q := NewProgress(w, "tool")
	q.Set("step")
	q.Stop()
	w.Close()
	var piped bytes.Buffer
	piped.ReadFrom(r)
	if buf.Len() != 0 || piped.Len() != 0 {
		t.Errorf("progress written to a buffer (%q) or a pipe (%q)", buf.String(), piped.String())
	}
	if IsTerminal(w) || IsTerminal(&buf) {
		t.Error("a pipe or a buffer taken for a terminal")
	}
}

// On a terminal the line appears once the run is long enough, shows the
// step, and is erased by Clear and Stop.
func TestProgressOnTerminal(t *testing.T) {
	master, slave := openPTY(t)
	if !IsTerminal(slave) {
		t.Fatal("a pseudo-terminal is not taken for a terminal")
	}
	var mu sync.Mutex
	var got bytes.Buffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			mu.Lock()
			got.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(got.String(), s)
	}
	p := NewProgress(slave, "tool")
	p.delay = 0
	p.Set("copy 4K [1/2]: engine")
	for i := 0; !seen("tool: copy 4K [1/2]: engine, 0:0") && i < 600; i++ {
		time.Sleep(50 * time.Millisecond) // polling a condition, bounded
	}
	if !seen("tool: copy 4K [1/2]: engine, 0:0") {
		t.Fatalf("no progress line on the terminal: %q", got.String())
	}
	p.Stop()
	erased := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.HasSuffix(got.String(), "\r\x1b[K")
	}
	for i := 0; !erased() && i < 600; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !erased() {
		t.Errorf("the line was not erased at the end: %q", got.String())
	}
}
