package launch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want Job
		err  string
	}{
		{map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, Job{Rank: 2, Size: 4, Launcher: "openmpi"}, ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, Job{Rank: 0, Size: 1, Launcher: "slurm"}, ""},
		{map[string]string{"PMI_RANK": "3", "PMI_SIZE": "8"}, Job{Rank: 3, Size: 8, Launcher: "pmi"}, ""},
		{map[string]string{"PMIX_RANK": "1", "PMI_SIZE": "2"}, Job{Rank: 1, Size: 2, Launcher: "pmix"}, ""},
		// Open MPI wins over a Slurm allocation it runs inside.
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, Job{Rank: 1, Size: 2, Launcher: "openmpi"}, ""},
		// The most ranks on a node, as each launcher says it (Size on one node).
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, Job{Rank: 1, Size: 8, Launcher: "openmpi", NodeRanks: 3}, ""},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_MCA_orte_num_nodes": "1"}, Job{Rank: 1, Size: 8, Launcher: "openmpi", OneNode: true, NodeRanks: 8}, ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "11", "SLURM_STEP_TASKS_PER_NODE": "3(x2),5", "SLURM_TASKS_PER_NODE": "9,2"}, Job{Rank: 0, Size: 11, Launcher: "slurm", NodeRanks: 5}, ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "11", "SLURM_TASKS_PER_NODE": "9,2"}, Job{Rank: 0, Size: 11, Launcher: "slurm", NodeRanks: 9}, ""},
		{map[string]string{"PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALNRANKS": "4"}, Job{Rank: 3, Size: 8, Launcher: "pmi", NodeRanks: 4}, ""},
		{map[string]string{"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, Job{}, "want 0 <= rank < size"},
		{map[string]string{"PMI_RANK": "x", "PMI_SIZE": "2"}, Job{}, "want 0 <= rank < size"},
		{map[string]string{}, Job{}, "mpirun, srun"},
	} {
		j, err := FromEnv(envOf(c.env))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %v, want an error saying %q", c.env, err, c.err)
			}
			continue
		}
		if err != nil || j != c.want {
			t.Errorf("%v: %+v %v, want %+v", c.env, j, err, c.want)
		}
	}
	if _, err := FromEnv(envOf(nil)); !errors.Is(err, ErrNoLauncher) {
		t.Errorf("no launcher: %v", err)
	}
	if _, err := BootstrapAddr(envOf(nil)); err == nil || !strings.Contains(err.Error(), "export GOMX_BOOTSTRAP") {
		t.Errorf("BootstrapAddr without it: %v", err)
	}
	if _, err := BootstrapAddr(envOf(map[string]string{"GOMX_BOOTSTRAP": "nohost"})); err == nil {
		t.Error("BootstrapAddr took an address without a port")
	}
}

// Slurm's tasks-per-node lists: the largest count, 0 for what is not one.
func TestMostTasks(t *testing.T) {
	for list, want := range map[string]int{
		"4": 4, "2(x3)": 2, "2(x3),7,1(x2)": 7, "16385(x1)": 16385,
		"": 0, "x": 0, "4(x": 0, "4(x0)": 0, "4(xa)": 0, "4(x2": 0, "-1": 0, "3,": 0,
	} {
		if got := mostTasks(list); got != want {
			t.Errorf("mostTasks(%q) = %d, want %d", list, got, want)
		}
	}
}

// TestExchange: ranks in goroutines, started in any order (later ranks
// before rank 0 listens is covered by Join's retries), all get the same
// table.
func TestExchange(t *testing.T) {
	const size = 5
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no TCP on loopback: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := make([][][]byte, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := size - 1; r >= 0; r-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := []byte(fmt.Sprintf("rank-%d", r))
			if r == 0 {
				tables[r], errs[r] = Serve(ctx, ln, size, rec)
			} else {
				tables[r], errs[r] = Join(ctx, ln.Addr().String(), r, rec)
			}
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, rec := range tables[r] {
			if string(rec) != fmt.Sprintf("rank-%d", i) {
				t.Fatalf("rank %d's table has %q for rank %d", r, rec, i)
			}
		}
	}
	// A rank that claims a place twice is refused, not merged.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln2.Close()
	go Join(ctx, ln2.Addr().String(), 1, nil)
	go Join(ctx, ln2.Addr().String(), 1, nil)
	if _, err := Serve(ctx, ln2, 3, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate rank: %v", err)
	}
	// Nobody comes: Serve ends with the context.
	ln3, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln3.Close()
	short, c2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer c2()
	if _, err := Serve(short, ln3, 2, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve alone: %v", err)
	}
}

// mpiChildEnv makes the test binary one rank of TestMpirun.
const mpiChildEnv = "GOMX_LAUNCH_TEST_CHILD"

// TestMpirun starts three ranks with Debian's Open MPI mpirun: each finds
// its rank from the environment and all exchange records through rank 0,
// once at a GOMX_BOOTSTRAP address and once without one (the job is on one
// node: a unix socket named after the job).
func TestMpirun(t *testing.T) {
	rankIfChild(mpiChildEnv)
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi not installed (apt-get install openmpi-bin)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no TCP on loopback: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close() // rank 0 listens there
	for _, boot := range []string{"GOMX_BOOTSTRAP=" + addr, "GOMX_BOOTSTRAP=", mpiPMIxEnv + "=1"} {
		t.Run(boot, func(t *testing.T) {
			mpirunRanks(t, 3, nil, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3", "-x", boot)
		})
	}
}

// mpiPMIxEnv makes a rank of TestMpirun trade its record through the PMIx
// server of Open MPI's daemon (PMIxAddr), as the ranks of a job across
// nodes do.
const mpiPMIxEnv = "GOMX_LAUNCH_TEST_PMIX"

// mpirunRanks runs np ranks of TestMpirun with the launcher command
// mpirun (its program and arguments up to the ranks' program), checks that
// every rank got every record, and returns the output.
func mpirunRanks(t *testing.T, np int, env []string, mpirun ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun[0], append(mpirun[1:],
		"-x", mpiChildEnv+"=1", os.Args[0], "-test.run=^TestMpirun$", "-test.count=1")...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	var lines, want []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "rank ") {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	var all []string
	for r := range np {
		all = append(all, fmt.Sprintf("r%d", r))
	}
	for r := range np {
		want = append(want, fmt.Sprintf("rank %d/%d openmpi: %s", r, np, strings.Join(all, " ")))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ranks said:\n%s\nwant:\n%s\n(all output:\n%s)", strings.Join(lines, "\n"), strings.Join(want, "\n"), out)
	}
	return string(out)
}

// rankIfChild makes the test binary one rank, running mpiChild and
// exiting with its outcome, when a launcher started it with env set (the
// test that names env starts the launcher); else it returns.
func rankIfChild(env string) {
	if os.Getenv(env) == "" {
		return
	}
	if err := mpiChild(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func mpiChild() error {
	job, err := FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	addr, err := Bootstrap(job, os.Getenv)
	if err != nil {
		return err
	}
	if os.Getenv(mpiPMIxEnv) != "" {
		addr = PMIxAddr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table, err := Exchange(ctx, job, addr, []byte(fmt.Sprintf("r%d", job.Rank)))
	if err != nil {
		return err
	}
	fmt.Printf("rank %d/%d %s: %s\n", job.Rank, job.Size, job.Launcher, bytes.Join(table, []byte(" ")))
	// Which network namespace the rank ran in, and the address it would
	// bind, for tests across "nodes".
	if ns, err := os.Readlink("/proc/self/ns/net"); err == nil {
		fmt.Printf("netns of rank %d: %s\n", job.Rank, ns)
	}
	a, err := BindAddr(ctx, job, addr, os.Getenv)
	fmt.Printf("bind of rank %d: %v %v\n", job.Rank, a, err)
	return nil
}

// FuzzDecodeTable: whatever rank 0 (or a stray peer) sends, decodeTable
// either refuses it or returns a table whose canonical framing is exactly
// the input (an oracle independent of the parser's logic), within bounds.
func FuzzDecodeTable(f *testing.F) {
	f.Add(encodeTable([][]byte{[]byte("a"), nil, []byte("ccc")}))
	f.Add(encodeTable([][]byte{{}}))
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 'x'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := decodeTable(b)
		if err != nil {
			return
		}
		if len(tab) < 1 || len(tab) > MaxSize {
			t.Fatalf("table of %d ranks", len(tab))
		}
		// The framing, rebuilt here by hand: count, then rank, length, bytes.
		var re []byte
		re = binary.BigEndian.AppendUint32(re, uint32(len(tab)))
		for i, r := range tab {
			re = binary.BigEndian.AppendUint32(re, uint32(i))
			re = binary.BigEndian.AppendUint32(re, uint32(len(r)))
			re = append(re, r...)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("decoded %q from %x, which is not its framing", tab, b)
		}
	})
}

// TestBootstrap: a job on one node needs no GOMX_BOOTSTRAP (a unix socket
// named after the user and the job), a job across nodes does, and the
// variable always wins.
func TestBootstrap(t *testing.T) {
	uid := os.Getuid()
	for _, c := range []struct {
		env  map[string]string
		want string
		err  string
	}{
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_MCA_ess_base_jobid": "77"},
			fmt.Sprintf("unix:@gomx-boot-%d-openmpi-77", uid), ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "1", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3"},
			fmt.Sprintf("unix:@gomx-boot-%d-slurm-12.3", uid), ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "1", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"},
			fmt.Sprintf("unix:@gomx-boot-%d-slurm-12.0", uid), ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "1", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURM_CLUSTER_NAME": "gomx77"},
			fmt.Sprintf("unix:@gomx-boot-%d-slurm-gomx77-12.0", uid), ""},
		// Two nodes: the address must be given, and the error says why.
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2", "SLURM_JOB_ID": "12"}, "", "spans nodes"},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "77"}, "", "GOMX_BOOTSTRAP"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2", "GOMX_BOOTSTRAP": "10.0.0.1:999"}, "10.0.0.1:999", ""},
		{map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "GOMX_BOOTSTRAP": "unix:@x"}, "unix:@x", ""},
		{map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "GOMX_BOOTSTRAP": "unix:"}, "", "unix:PATH"},
		// A Slurm step on two nodes: its first node, a port from the ids.
		{map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1",
			"SLURM_STEP_NODELIST": "node[07-08]", "SLURM_JOB_NODELIST": "node[06-09]", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3"},
			fmt.Sprintf("node07:%d", PortBase+16*12+3), ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "2",
			"SLURM_JOB_NODELIST": "10.77.0.[1-2]", "SLURM_JOB_ID": "300"},
			fmt.Sprintf("10.77.0.1:%d", PortBase+(16*300)%PortSpan), ""},
		// GOMX_BOOTSTRAP still wins.
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2",
			"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "GOMX_BOOTSTRAP": "10.0.0.9:7"}, "10.0.0.9:7", ""},
		// Rank 0 away from the first node: say so, and what to do.
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1",
			"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"}, "", "not its first"},
		{map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2",
			"SLURM_STEP_NODELIST": "n[1-2", "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"}, "", "GOMX_BOOTSTRAP"},
		{map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2",
			"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_JOB_ID": "x", "SLURM_STEP_ID": "0"}, "", "GOMX_BOOTSTRAP"},
		// Hydra hands each rank a PMI connection: the records go through it.
		{map[string]string{"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "4", "PMI_FD": "6"}, PMIAddr, ""},
		{map[string]string{"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "6", "GOMX_BOOTSTRAP": "h:1"}, "h:1", ""},
		// Open MPI across nodes: the records go through the daemons'
		// PMIx servers; on one node the unix socket still wins.
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"PMIX_SERVER_URI41": "77.0;tcp4://127.0.0.1:5", "PMIX_NAMESPACE": "78", "PMIX_RANK": "1"}, PMIxAddr, ""},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_MCA_ess_base_jobid": "78",
			"PMIX_SERVER_URI2": "77.0;tcp4://127.0.0.1:5", "PMIX_NAMESPACE": "78", "PMIX_RANK": "1"}, fmt.Sprintf("unix:@gomx-boot-%d-openmpi-78", uid), ""},
		{map[string]string{"PMIX_RANK": "1", "PMI_SIZE": "4", "PMIX_SERVER_URI4": "77.0;tcp4://127.0.0.1:5", "PMIX_NAMESPACE": "78"}, PMIxAddr, ""},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"PMIX_SERVER_URI41": "77.0;tcp4://127.0.0.1:5", "PMIX_NAMESPACE": "78", "PMIX_RANK": "1", "GOMX_BOOTSTRAP": "h:1"}, "h:1", ""},
		// Open MPI across nodes without a PMIx server: the error names
		// what was tried.
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "", "a PMIx server (PMIX_SERVER_URI41"},
	} {
		job, err := FromEnv(envOf(c.env))
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		got, err := Bootstrap(job, envOf(c.env))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %q %v, want an error saying %q", c.env, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: %q %v, want %q", c.env, got, err, c.want)
		}
	}
}

// TestSlurmPort: every port lies in the documented range, and the first
// sixteen steps of a job and consecutive jobs differ.
func TestSlurmPort(t *testing.T) {
	seen := map[int]bool{}
	for job := uint64(1000); job < 1000+PortSpan/16; job++ {
		for step := uint64(0); step < 16; step++ {
			p := SlurmPort(job, step)
			if p < PortBase || p >= PortBase+PortSpan || p >= 32768 {
				t.Fatalf("SlurmPort(%d, %d) = %d, outside %d..%d", job, step, p, PortBase, PortBase+PortSpan-1)
			}
			if seen[p] {
				t.Fatalf("SlurmPort(%d, %d) = %d twice", job, step, p)
			}
			seen[p] = true
		}
	}
}

// TestPeerHost: a rank binds toward the next node of its step.
func TestPeerHost(t *testing.T) {
	env := map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "6", "SLURM_STEP_NUM_NODES": "3", "SLURM_NODEID": "2", "SLURM_STEP_NODELIST": "a[1-2],b"}
	j, err := FromEnv(envOf(env))
	if err != nil || j.PeerHost() != "a1" {
		t.Errorf("%+v: PeerHost %q, %v; want a1", j, j.PeerHost(), err)
	}
	env["SLURM_NODEID"] = "0"
	if j, _ = FromEnv(envOf(env)); j.PeerHost() != "a2" {
		t.Errorf("%+v: PeerHost %q, want a2", j, j.PeerHost())
	}
	env["SLURM_STEP_NUM_NODES"] = "1"
	if j, _ = FromEnv(envOf(env)); j.PeerHost() != "" {
		t.Errorf("one node: PeerHost %q, want none", j.PeerHost())
	}
	// Open MPI names no nodes: its ranks bind toward mpirun's host.
	for uri, want := range map[string]string{
		"1987182592.0;tcp://192.0.2.2:53473;tcp6://[fd00::2]:44373": "192.0.2.2",
		"5.0;tcp://10.1.0.1,10.2.0.1:1024":                          "10.1.0.1",
		"5.0;tcp6://[fd00::2]:44373":                                "fd00::2",
		"5.0;usock://x":                                             "",
		"":                                                          "",
	} {
		env := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_orte_hnp_uri": uri}
		if j, _ := FromEnv(envOf(env)); j.PeerHost() != want {
			t.Errorf("hnp %q: PeerHost %q, want %q", uri, j.PeerHost(), want)
		}
		env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4"
		if j, _ := FromEnv(envOf(env)); j.PeerHost() != "" {
			t.Errorf("hnp %q, one node: PeerHost %q, want none", uri, j.PeerHost())
		}
	}
}

// TestExchangeUnix: the bootstrap over an abstract unix socket, ranks
// started before rank 0 listens.
func TestExchangeUnix(t *testing.T) {
	const size = 3
	addr := fmt.Sprintf("unix:@gomx-boot-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := make([][][]byte, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := size - 1; r >= 0; r-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tables[r], errs[r] = Exchange(ctx, Job{Rank: r, Size: size}, addr, []byte{byte(r)})
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if !bytes.Equal(bytes.Join(tables[r], nil), []byte{0, 1, 2}) {
			t.Fatalf("rank %d: table %v", r, tables[r])
		}
	}
}
