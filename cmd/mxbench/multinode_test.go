package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/netns"
	"github.com/gomx-dev/gomx/internal/netnstest"
)

// twoNodeJob starts a job of 4 ranks on two "nodes", network namespaces
// joined by a veth pair (ranks 0 and 1 on the first, 2 and 3 on the
// second), each rank a copy of the test binary running inside its node's
// namespace (nsenter) with the environment srun gives a step on two nodes:
// the nodes as IP literals in Slurm's hostlist syntax, this rank's node
// index, and no GOMX_BOOTSTRAP. Each node has its own endpoint directory
// (GOMX_SHM_DIR), as each machine has its own /dev/shm. It returns every
// rank's output, rank 0's first.
func twoNodeJob(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds network namespaces and runs a job")
	}
	netnstest.Require(t, "GOMX_REQUIRE_XDP")
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter not installed (apt-get install util-linux)")
	}
	p := netnstest.NewPair(t, 1)
	nodes := []string{p.NSA, p.NSB}
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o700); err != nil { // mx refuses a directory others can open
			t.Fatal(err)
		}
	}
	const size = 4
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	jobID := fmt.Sprint(time.Now().UnixNano()%1_000_000 + 1)
	outs := make([]bytes.Buffer, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		node := r / 2
		c := exec.CommandContext(ctx, nsenter, append([]string{"--net=" + filepath.Join(netns.Dir, nodes[node]), "--", os.Args[0]}, args...)...)
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "GOMX_BOOTSTRAP=") && !strings.HasPrefix(e, "SLURM_") && !strings.HasPrefix(e, "OMPI_") && !strings.HasPrefix(e, "PMI") {
				c.Env = append(c.Env, e)
			}
		}
		c.Env = append(c.Env, env...)
		c.Env = append(c.Env, "SLURM_PROCID="+fmt.Sprint(r), "SLURM_NTASKS="+fmt.Sprint(size),
			"SLURM_JOB_ID="+jobID, "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2", "SLURM_NODEID="+fmt.Sprint(node),
			"SLURM_STEP_NODELIST="+fmt.Sprintf("%s,%s", p.IPA, p.IPB), "GOMX_SHM_DIR="+dirs[node])
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		// A rank still running when another failed (or at the deadline)
		// is stopped with SIGQUIT: the Go runtime prints every
		// goroutine's stack before it exits, so a hang explains itself
		// in the failure's output.
		c.Cancel = func() error { return c.Process.Signal(syscall.SIGQUIT) }
		c.WaitDelay = 20 * time.Second
		if err := c.Start(); err != nil {
			t.Fatalf("start rank %d: %v", r, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = c.Wait(); errs[r] != nil {
				cancel() // one rank failed: the others would wait for it
			}
		}()
	}
	wg.Wait()
	res := make([]string, size)
	for r := range size {
		res[r] = outs[r].String()
	}
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("rank %d on %s: %v\n%s", r, nodes[r/2], errs[r], strings.Join(res, "\n----\n"))
		}
	}
	return res
}

// TestTwoNodesAlltoall: alltoall among 4 ranks on two nodes, verified,
// found rank 0 without GOMX_BOOTSTRAP, and says that ranks of one node
// use shared memory and ranks of different nodes udp.
func TestTwoNodesAlltoall(t *testing.T) {
	outs := twoNodeJob(t, []string{asMainEnv + "=1"}, "alltoall", "--sizes", "8,4K,64K,1M", "--iterations", "5", "--warmup", "10", "--wait", "block", "--verify", "--json")
	rows := jsonRows(t, outs[0])
	if len(rows) != 4 {
		t.Fatalf("%d rows from rank 0, want 4:\n%s", len(rows), outs[0])
	}
	for _, r := range rows {
		if r.Procs != 4 {
			t.Errorf("row %+v", r)
		}
	}
	want := "paths: shared memory within ranks [0 1] [2 3], udp between these 2 hosts"
	if !strings.Contains(outs[0], want) || !strings.Contains(outs[0], "the slurm launcher") {
		t.Errorf("setup does not say %q and name slurm:\n%s", want, outs[0])
	}
	for r, o := range outs[1:] {
		if o != "" {
			t.Errorf("rank %d printed:\n%s", r+1, o)
		}
	}
}

// TestTwoNodesMixedMessages: the mixed messages of TestMpirunMixedMessages
// (fewer: 4000) among 4 ranks on two nodes, byte-exact, within each node
// by shared memory and between them over udp on the veth.
func TestTwoNodesMixedMessages(t *testing.T) {
	if os.Getenv(mixedEnv) != "" {
		if err := mixedRank(); err != nil {
			fmt.Printf("rank %s: error: %v\n", os.Getenv("SLURM_PROCID"), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	outs := twoNodeJob(t, []string{mixedEnv + "=1", mixedCountEnv + "=4000"}, "-test.run=^TestTwoNodesMixedMessages$", "-test.count=1")
	all := strings.Join(outs, "")
	if n := strings.Count(all, " received "); n != 4 {
		t.Fatalf("%d ranks reported, want 4:\n%s", n, all)
	}
	// Every rank gets a few dozen large messages from each side: its
	// neighbour's by single copy through shared memory, the other node's
	// pulled over udp.
	for _, l := range strings.Split(all, "\n") {
		var rank, msgs, wild, nbytes, copies, pulls int
		if _, err := fmt.Sscanf(l, "rank %d: received %d messages (%d by wildcard), %d bytes; %d single copies, %d pulls", &rank, &msgs, &wild, &nbytes, &copies, &pulls); err != nil {
			continue
		}
		if copies == 0 || pulls == 0 {
			t.Errorf("rank %d: %d single copies (shared memory) and %d pulls (udp): want both", rank, copies, pulls)
		}
	}
	t.Logf("\n%s", all)
}

// launcherJob runs a verified alltoall of 4 ranks across two nodes,
// network namespaces joined by a veth pair, as a user runs one with the
// launcher named: the launcher starts on the first node and reaches the
// second through an rsh agent (netnstest.RshAgent) that enters its
// namespace instead of ssh. command gives the launcher's command line to
// run in the first namespace, from the pair and the agent, without the
// program and its arguments, which it appends. Each node has its own
// endpoint directory (GOMX_SHM_DIR): the first node's ranks are the
// launcher's children, the second's the agent's. It checks the rows and
// that the setup line names the launcher and says that ranks of a node
// take shared memory and ranks of different nodes udp.
func launcherJob(t *testing.T, launcher string, command func(p *netnstest.Pair, agent string) []string) {
	t.Helper()
	netnstest.Require(t, "GOMX_REQUIRE_XDP")
	p := netnstest.NewPair(t, 1)
	dirs := []string{t.TempDir(), t.TempDir()} // each node its own /dev/shm
	for _, d := range dirs {
		if err := os.Chmod(d, 0o700); err != nil { // mx refuses a directory others can open
			t.Fatal(err)
		}
	}
	agent := netnstest.RshAgent(t, p, map[string][]string{p.IPB.String(): {"GOMX_SHM_DIR=" + dirs[1]}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"netns", "exec", p.NSA}, command(p, agent)...)
	args = append(args, os.Args[0], "alltoall", "--sizes", "8,64K,1M", "--iterations", "5", "--warmup", "10", "--wait", "block", "--verify", "--json")
	cmd := exec.CommandContext(ctx, "ip", args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOMX_BOOTSTRAP=") && !strings.HasPrefix(e, "GOMX_SHM_DIR=") && !strings.HasPrefix(e, "PMI") && !strings.HasPrefix(e, "MPIR_CVAR_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "GOMX_SHM_DIR="+dirs[0])
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", launcher, err, out.String(), errb.String())
	}
	rows := jsonRows(t, out.String())
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3 (only rank 0 prints):\n%s", len(rows), out.String())
	}
	for _, r := range rows {
		if r.Procs != 4 {
			t.Errorf("row %+v", r)
		}
	}
	want := "paths: shared memory within ranks [0 1] [2 3], udp between these 2 hosts"
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "the "+launcher+" launcher") {
		t.Errorf("setup does not say %q and name %s:\n%s", want, launcher, out.String())
	}
}

// TestTwoNodesMpirun: `mpirun --host A,B -np 4 mxbench alltoall` across
// two nodes, as an Open MPI user runs it: mpirun on the first node starts
// its daemon on the second through its remote shell. No GOMX_BOOTSTRAP:
// the ranks trade their endpoint addresses through the daemons' PMIx
// servers, bind their boards toward mpirun's host, and the verified
// alltoall takes shared memory within a node and udp between.
func TestTwoNodesMpirun(t *testing.T) {
	mpirun := mpirunOrSkip(t)
	launcherJob(t, "openmpi", func(p *netnstest.Pair, agent string) []string {
		return []string{mpirun, "--allow-run-as-root", "--host", fmt.Sprintf("%s:2,%s:2", p.IPA, p.IPB), "-np", "4",
			"--mca", "plm_rsh_agent", agent, "-x", "GOMX_BOOTSTRAP=", "-x", asMainEnv + "=1"}
	})
}

// TestTwoNodesHydra: `mpiexec.hydra -hosts A,B -n 4 mxbench alltoall`
// across two nodes, as an MPICH user runs it: mpiexec on the first node
// starts its proxy on the second through its rsh launcher. No
// GOMX_BOOTSTRAP and no --listen: the ranks trade their records through
// hydra's PMI key-value space, each binds its board to the address its
// node's name in the host list resolves to (launch.BindAddr), and the
// verified alltoall takes shared memory within a node and udp between.
func TestTwoNodesHydra(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds network namespaces and runs mpiexec.hydra")
	}
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		t.Skip("mpiexec.hydra not installed (apt-get install mpich)")
	}
	launcherJob(t, "pmi", func(p *netnstest.Pair, agent string) []string {
		// hydra passes its whole environment to every rank unless told
		// otherwise: -genvlist passes PATH only, so the second node's
		// ranks keep the endpoint directory the agent gives them.
		return []string{hydra, "-launcher", "rsh", "-launcher-exec", agent, "-hosts", fmt.Sprintf("%s,%s", p.IPA, p.IPB),
			"-n", "4", "-ppn", "2", "-genvlist", "PATH", "-genv", asMainEnv, "1"}
	})
}
