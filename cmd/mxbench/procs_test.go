package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/internal/cli"
)

// failEnv, in the environment of a rank --procs started from the test
// binary, makes it fail as told instead of running mxbench: entries
// "rank,status,file,message" separated by ";". The rank named waits for
// file to exist (none: at once; while it waits, file+".waiting" exists),
// prints message on stderr and exits with status.
const failEnv = "GOMX_MXBENCH_TEST_FAIL"

// failAsAsked is TestMain's part of failEnv: it returns when this process
// is no rank failEnv names.
func failAsAsked() {
	rank := os.Getenv("PMI_RANK")
	for _, e := range strings.Split(os.Getenv(failEnv), ";") {
		f := strings.SplitN(e, ",", 4)
		if len(f) != 4 || f[0] != rank {
			continue
		}
		status, _ := strconv.Atoi(f[1])
		if f[2] != "" {
			os.WriteFile(f[2]+".waiting", nil, 0o600)
			// This goroutine waits parked, never running, for another
			// that looks for the file: when SIGQUIT lands, the runtime
			// prints no stack for a goroutine running on another
			// thread, and the tests look for this function in the
			// stacks. Bounded: the test creates the file or ends, and
			// rank 0 kills this process when the test is gone.
			found := make(chan struct{})
			go func() {
				defer close(found)
				for range 12000 {
					if _, err := os.Stat(f[2]); err == nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
			<-found
		}
		fmt.Fprintf(os.Stderr, "log line 1\nlog line 2\nlog line 3\n%s\n", f[3])
		os.Exit(status)
	}
}

// startFailing starts, as rank 0 of --procs, a job of size ranks that
// fail as fails says (failEnv), and returns it with a function that reads
// what they printed on rank 0's stderr so far.
func startFailing(t *testing.T, size int, fails string) (*jobRun, func() string) {
	t.Helper()
	t.Setenv(asMainEnv, "1")
	t.Setenv(failEnv, fails)
	var buf bytes.Buffer
	lw := &lockedWriter{w: &buf}
	jr, err := startJob(context.Background(), launch.Job{Size: size, Launcher: "mxbench --procs"}, []string{"pingpong"}, nil, lw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jr.ln.Close() })
	return jr, func() string {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		return buf.String()
	}
}

// awaitFile waits until file exists: a rank of failEnv creates it.
func awaitFile(t *testing.T, file string) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := os.Stat(file); err == nil {
			return
		}
		if i == 12000 {
			t.Fatalf("no rank created %s in 2 minutes", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitFailure waits until a rank's failure cancelled the job.
func awaitFailure(t *testing.T, jr *jobRun) {
	t.Helper()
	select {
	case <-jr.ctx.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("no rank failed in 2 minutes")
	}
}

// TestProcsReportsEveryFailure: when ranks of --procs fail one after the
// other, rank 0 reports each, the earliest first, with its exit status and
// the last line it printed, so the cause comes before its symptoms; its
// own failure, when it comes first, leads the report. The ranks' stderr
// also reaches rank 0's as they print it.
func TestProcsReportsEveryFailure(t *testing.T) {
	defer func(g time.Duration) { killGrace = g }(killGrace)
	killGrace = 2 * time.Minute // a rank failing second has all the time a loaded machine needs
	for _, tc := range []struct {
		name  string
		own   error // rank 0's failure, first
		fails string
		want  []string // the report's parts, in order; none: no error
	}{
		{
			name:  "none",
			fails: "1,0,,rank 1: all is well;2,0,,rank 2: all is well",
		},
		{
			name:  "two ranks",
			fails: "2,3,,rank 2: its disk is full;1,4,MARK,rank 1: rank 2 is unreachable",
			want: []string{
				"2 ranks failed, the earliest first: rank 2 of 3 failed (exit status 3), its stderr ending: log line 2 / log line 3 / rank 2: its disk is full",
				"rank 1 of 3 failed (exit status 4), its stderr ending: log line 2 / log line 3 / rank 1: rank 2 is unreachable",
			},
		},
		{
			name:  "rank 0 first",
			own:   errors.New("rank 0 of 2: its buffer is too small"),
			fails: "1,5,MARK,rank 1: rank 0 is unreachable",
			want: []string{
				"2 ranks failed, the earliest first: rank 0 of 2: its buffer is too small",
				"rank 1 of 2 failed (exit status 5), its stderr ending: log line 2 / log line 3 / rank 1: rank 0 is unreachable",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "first failed")
			size := 3
			if tc.own != nil {
				size = 2
			}
			jr, stderr := startFailing(t, size, strings.ReplaceAll(tc.fails, "MARK", mark))
			if tc.own != nil {
				jr.fail(tc.own)
			}
			if tc.want == nil {
				if err := jr.wait(nil); err != nil {
					t.Errorf("ranks that all exited with status 0: %v", err)
				}
				if n := strings.Count(stderr(), "all is well\n"); n != 2 {
					t.Errorf("rank 0's stderr has %d of the 2 ranks' lines:\n%s", n, stderr())
				}
				return
			}
			// The first failure is noted before the next rank fails.
			awaitFailure(t, jr)
			if err := os.WriteFile(mark, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			err := jr.wait(tc.own)
			if !errors.Is(err, errRankFailed) || code(err) != 1 {
				t.Errorf("error %v (exit status %d), want a rank's failure (exit status 1)", err, code(err))
			}
			var got bytes.Buffer
			cli.Report(&got, "mxbench", err)
			line := got.String()
			pos := 0
			for _, w := range tc.want {
				i := strings.Index(line[pos:], w)
				if i < 0 {
					t.Fatalf("the report\n%s\ndoes not have, after byte %d,\n%s", line, pos, w)
				}
				pos += i + len(w)
			}
			if strings.Contains(line, "log line 1") {
				t.Errorf("the report repeats more than a rank's last %d lines: %s", stderrTail, line)
			}
			if strings.Count(line, "\n") != 1 {
				t.Errorf("the report is not one line: %q", line)
			}
			for _, w := range tc.want {
				i := strings.LastIndex(w, " / ")
				if i < 0 {
					continue // rank 0's own
				}
				msg := w[i+3:]
				if !strings.Contains(stderr(), msg+"\n") {
					t.Errorf("rank 0's stderr %q lacks the rank's own line %q", stderr(), msg)
				}
			}
		})
	}
}

// TestProcsStacksOnHang: with GOTRACEBACK=all, a rank still running after
// another failed is stopped with SIGQUIT, prints its goroutines and is no
// failure of its own; rank 0 prints its own goroutines when the job fails.
// A job that hangs says where every rank waited.
func TestProcsStacksOnHang(t *testing.T) {
	defer func(g time.Duration) { killGrace = g }(killGrace)
	killGrace = 10 * time.Millisecond // rank 1 waits for a file that never comes: no grace is too short
	t.Setenv("GOTRACEBACK", "all")
	// Rank 2 fails once rank 1 waits (its runtime is up: SIGQUIT makes
	// it print its goroutines) for a file that never comes.
	never := filepath.Join(t.TempDir(), "never")
	jr, stderr := startFailing(t, 3, "2,3,"+never+".waiting,rank 2: its disk is full;1,4,"+never+",rank 1: it should have been stopped")
	awaitFailure(t, jr)
	own := fmt.Errorf("rank 0 of 3: alltoall of 128 KiB, round 3: %w", context.DeadlineExceeded)
	jr.fail(own)
	err := jr.wait(own)
	msg := err.Error()
	if !strings.Contains(msg, "rank 0 of 3: alltoall") || !strings.Contains(msg, "rank 2 of 3 failed (exit status 3)") || strings.Contains(msg, "rank 1 ") {
		t.Errorf("the report %q does not have rank 0's and rank 2's failures, or has rank 1, which was stopped", msg)
	}
	out := stderr()
	for _, want := range []string{
		// rank 0's own goroutines, at rank 2's failure or its own
		"GOTRACEBACK=all, so its goroutines follow", "TestProcsStacksOnHang",
		"SIGQUIT", "failAsAsked", // rank 1's, printed by its runtime
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rank 0's stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "it should have been stopped") {
		t.Error("rank 1 was not stopped: it printed its line")
	}
}

// TestProcsStacksOnTimeout: with GOTRACEBACK=all, rank 0 whose wait timed
// out stops the other ranks with SIGQUIT at once, before its boards close:
// every rank prints where it waited, and only rank 0's timeout is
// reported.
func TestProcsStacksOnTimeout(t *testing.T) {
	defer func(g time.Duration) { killGrace = g }(killGrace)
	killGrace = 2 * time.Minute // the ranks must be stopped by the timeout, not by the grace
	t.Setenv("GOTRACEBACK", "all")
	dir := t.TempDir()
	never := []string{filepath.Join(dir, "never1"), filepath.Join(dir, "never2")}
	jr, stderr := startFailing(t, 3, "1,4,"+never[0]+",rank 1: it should have been stopped;2,4,"+never[1]+",rank 2: it should have been stopped")
	// Both ranks wait (their runtimes are up: SIGQUIT prints stacks).
	for _, f := range never {
		awaitFile(t, f+".waiting")
	}
	own := fmt.Errorf("rank 0 of 3: alltoall of 128 KiB, round 3: %w", context.DeadlineExceeded)
	jr.fail(own)
	if err := jr.wait(own); err != own {
		t.Errorf("the job's error %v, want only rank 0's %v", err, own)
	}
	out := stderr()
	// One frame of failAsAsked for each of ranks 1 and 2 (its looking
	// goroutine's frames are failAsAsked.func1()).
	if n := strings.Count(out, ".failAsAsked()"); !strings.Contains(out, "rank 0 of 3 timed out") || n < 2 {
		t.Errorf("rank 0's stderr lacks rank 0's goroutines or those of ranks 1 and 2 (%d stacks in failAsAsked):\n%s", n, out)
	}
	if strings.Contains(out, "it should have been stopped") {
		t.Error("a rank was not stopped: it printed its line")
	}
}
