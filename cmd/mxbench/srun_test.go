package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireSrunEnv, when "1", turns the srun tests' skips into failures
// (make test-srun sets it: there the cluster must be up).
const requireSrunEnv = "GOMX_REQUIRE_SRUN"

// srunOrSkip returns Slurm's srun when a cluster is reachable (SLURM_CONF
// set, as hack/slurm/run.sh does), or skips the test.
func srunOrSkip(t *testing.T) string {
	t.Helper()
	skip := func(why string) {
		if os.Getenv(requireSrunEnv) == "1" {
			t.Fatalf("%s (and %s=1 requires srun)", why, requireSrunEnv)
		}
		t.Skip(why)
	}
	if testing.Short() {
		skip("-short: jobs under srun take a while")
	}
	p, err := exec.LookPath("srun")
	if err != nil {
		skip("srun not installed: make test-srun installs Slurm and runs these tests in a private cluster (hack/slurm/run.sh)")
	}
	if os.Getenv("SLURM_CONF") == "" {
		skip("SLURM_CONF not set: run under a Slurm cluster, e.g. `make test-srun` (hack/slurm/run.sh)")
	}
	return p
}

// srunCmd runs the test binary as n tasks of a Slurm job step, with env
// added to the environment srun exports to them (all of this process's,
// GOMX_BOOTSTRAP removed so the ranks find each other as users' would).
func srunCmd(ctx context.Context, srun string, n int, env []string, args ...string) *exec.Cmd {
	a := append([]string{"-n", fmt.Sprint(n), "--overcommit", "--kill-on-bad-exit=1", os.Args[0]}, args...)
	c := exec.CommandContext(ctx, srun, a...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOMX_BOOTSTRAP=") {
			c.Env = append(c.Env, e)
		}
	}
	c.Env = append(c.Env, env...)
	return c
}

// TestSrunJobs: `srun -n 4 mxbench alltoall` and `srun -n 2 mxbench
// pingpong` as users run them: the ranks come from Slurm, meet without
// GOMX_BOOTSTRAP, verify every byte, and only rank 0 prints, saying the
// slurm launcher started them and that all pairs use shared memory.
func TestSrunJobs(t *testing.T) {
	srun := srunOrSkip(t)
	for _, c := range []struct {
		n    int
		args []string
		rows int
	}{
		{4, []string{"alltoall", "--sizes", "8,64K,1M", "--iterations", "10", "--warmup", "10", "--wait", "block", "--verify", "--json"}, 3},
		{2, []string{"pingpong", "--sizes", "8,4K,1M", "--iterations", "50", "--wait", "block", "--verify", "--json"}, 3},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.args[0], c.n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := srunCmd(ctx, srun, c.n, []string{asMainEnv + "=1"}, c.args...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("srun: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
			}
			rows := jsonRows(t, out.String())
			if len(rows) != c.rows {
				t.Fatalf("%d rows, want %d (only rank 0 prints):\n%s", len(rows), c.rows, out.String())
			}
			for _, r := range rows {
				if r.Procs != c.n || r.Strategy == "" {
					t.Errorf("row %+v", r)
				}
			}
			for _, want := range []string{"the slurm launcher", fmt.Sprintf("shared memory among all %d ranks", c.n)} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("setup does not say %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestSrunAlltoallAtScale: `srun -n 64 mxbench alltoall --verify` starts,
// connects and finishes byte-exact on this one node (--overcommit,
// blocking waits), with the start-up time and the ranks' memory reported.
func TestSrunAlltoallAtScale(t *testing.T) {
	srun := srunOrSkip(t)
	if raceEnabled {
		t.Skip("64 ranks under the race detector: make test-srun runs it without")
	}
	checkAlltoallAtScale(t, "srun", func(ctx context.Context, np int, env []string, args ...string) *exec.Cmd {
		return srunCmd(ctx, srun, np, env, args...)
	})
}

// TestSrunMixedMessages: the mixed messages of TestMpirunMixedMessages
// (25 000 of them: make test-mpirun sends the 100 000, this proves srun)
// among 4 ranks that Slurm's srun starts: every message arrives byte-exact
// at the receive meant for it, and nothing is left behind.
func TestSrunMixedMessages(t *testing.T) {
	if os.Getenv(mixedEnv) != "" {
		if err := mixedRank(); err != nil {
			fmt.Printf("rank %s: error: %v\n", os.Getenv("SLURM_PROCID"), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	srun := srunOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	checkMixedJob(t, srunCmd(ctx, srun, 4, []string{mixedEnv + "=1", mixedCountEnv + "=25000"}, "-test.run=^TestSrunMixedMessages$", "-test.count=1"))
}
