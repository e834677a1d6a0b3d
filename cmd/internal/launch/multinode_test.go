package launch

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/netnstest"
)

// TestExchangeAcrossNodes: four ranks of a Slurm step on two "nodes", two
// network namespaces joined by a veth pair, with the step's nodes given as
// IP literals in Slurm's hostlist syntax. Without GOMX_BOOTSTRAP every rank
// finds rank 0 on the first node at the port of the step, the ranks of the
// second node reach it over the veth, all get the same table, and each
// would bind its node's address. Each rank runs BindAddr and Exchange on
// a thread inside its node's namespace, so every socket it makes belongs
// there; nothing leaves the namespaces.
func TestExchangeAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds network namespaces")
	}
	netnstest.Require(t, "GOMX_REQUIRE_XDP")
	p := netnstest.NewPair(t, 1)
	const size = 4
	nodes := []string{p.NSA, p.NSA, p.NSB, p.NSB}
	list := fmt.Sprintf("%s,%s", p.IPA, p.IPB)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := make([][][]byte, size)
	binds := make([]netip.Addr, size)
	errs := make([]error, size)
	jobID := fmt.Sprint(time.Now().UnixNano() % 100000)
	var wg sync.WaitGroup
	for r := size - 1; r >= 0; r-- {
		env := map[string]string{
			"SLURM_PROCID": fmt.Sprint(r), "SLURM_NTASKS": fmt.Sprint(size),
			"SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": fmt.Sprint(r / 2), "SLURM_STEP_NODELIST": list,
			"SLURM_JOB_ID": jobID, "SLURM_STEP_ID": "0",
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = netnstest.Do(nodes[r], func() error {
				job, err := FromEnv(envOf(env))
				if err != nil {
					return err
				}
				addr, err := Bootstrap(job, envOf(env))
				if err != nil {
					return err
				}
				if binds[r], err = BindAddr(ctx, job, addr, envOf(env)); err != nil {
					return err
				}
				tables[r], err = Exchange(ctx, job, addr, []byte{byte(r)})
				return err
			})
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil {
			t.Errorf("rank %d on %s: %v", r, nodes[r], errs[r])
			continue
		}
		if !bytes.Equal(bytes.Join(tables[r], nil), []byte{0, 1, 2, 3}) {
			t.Fatalf("rank %d: table %v", r, tables[r])
		}
		// Each would bind its node's address that routes to the next node.
		if want := []netip.Addr{p.IPA, p.IPB}[r/2]; binds[r] != want {
			t.Errorf("rank %d binds %v, want %v", r, binds[r], want)
		}
	}
}

// TestMpirunAcrossNodes: four ranks of one Open MPI mpirun on two "nodes",
// network namespaces joined by a veth pair, as a user runs a job across
// machines: mpirun runs on the first node and reaches the second through
// its remote shell (an rsh agent that enters the namespace instead of
// ssh), and starts an orted there. No GOMX_BOOTSTRAP: the ranks trade
// their records through the daemons' PMIx servers, each gets all four, and
// each would bind its node's address that routes to mpirun's host.
func TestMpirunAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds network namespaces and runs mpirun")
	}
	netnstest.Require(t, "GOMX_REQUIRE_XDP")
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi not installed (apt-get install openmpi-bin)")
	}
	p := netnstest.NewPair(t, 1)
	agent := netnstest.RshAgent(t, p, nil)
	out := mpirunRanks(t, 4, nil, "ip", "netns", "exec", p.NSA, mpirun, "--allow-run-as-root",
		"--host", fmt.Sprintf("%s:2,%s:2", p.IPA, p.IPB), "-np", "4", "--mca", "plm_rsh_agent", agent, "-x", "GOMX_BOOTSTRAP=")
	// Ranks 0 and 1 ran on the first node, 2 and 3 on the second.
	nodes := map[string]string{}
	for i, ns := range []string{p.NSA, p.NSB} {
		netnstest.Do(ns, func() error {
			nodes[fmt.Sprint(i)], err = os.Readlink("/proc/thread-self/ns/net")
			return err
		})
	}
	// Each binds the address of its node that routes to mpirun's.
	for r := range 4 {
		ip := []netip.Addr{p.IPA, p.IPB}[r/2]
		for _, want := range []string{fmt.Sprintf("netns of rank %d: %s\n", r, nodes[fmt.Sprint(r/2)]), fmt.Sprintf("bind of rank %d: %s <nil>\n", r, ip)} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
}

// TestHydraAcrossNodes: four ranks of one mpiexec.hydra on two "nodes",
// network namespaces joined by a veth pair: mpiexec runs on the first and
// starts its proxy on the second through its rsh launcher (an rsh agent
// that enters the namespace). No GOMX_BOOTSTRAP: the ranks trade their
// records through hydra's PMI key-value space, each gets all four, and
// each would bind the address of its own node as the host list names it.
func TestHydraAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds network namespaces and runs mpiexec.hydra")
	}
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		t.Skip("mpiexec.hydra not installed (apt-get install mpich)")
	}
	netnstest.Require(t, "GOMX_REQUIRE_XDP")
	p := netnstest.NewPair(t, 1)
	agent := netnstest.RshAgent(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.NSA, hydra, "-launcher", "rsh", "-launcher-exec", agent,
		"-hosts", fmt.Sprintf("%s,%s", p.IPA, p.IPB), "-n", "4", "-ppn", "2",
		"-genv", hydraChildEnv, "1", "-genv", "GOMX_BOOTSTRAP", "", os.Args[0], "-test.run=^TestHydra$", "-test.count=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v\n%s", err, out)
	}
	for r := range 4 {
		ip := []string{p.IPA.String(), p.IPB.String()}[r/2]
		for _, want := range []string{fmt.Sprintf("rank %d/4 pmi: r0 r1 r2 r3\n", r), fmt.Sprintf("bind of rank %d: %s <nil>\n", r, ip)} {
			if !strings.Contains(string(out), want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
}

// TestBindAddrInNamespace: BindAddr on a real node, a network namespace
// whose only address besides 127.0.0.1 is IPA, for a rank of a hydra job
// across nodes. mpiexec -iface names its interface: IPA. Hydra names the
// node by an address of another node (IPB) and the host's name resolves
// to none of the namespace's: without a default route there is nothing
// to bind and the error says what was tried; with one, its source, IPA.
func TestBindAddrInNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds network namespaces")
	}
	netnstest.Require(t, "GOMX_REQUIRE_XDP")
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("the ip tool is missing (apt-get install iproute2)")
	}
	p := netnstest.NewPair(t, 1)
	job := Job{Rank: 2, Size: 4, Launcher: "pmi"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bind := func(env map[string]string) (a netip.Addr, err error) {
		if derr := netnstest.Do(p.NSA, func() error {
			a, err = BindAddr(ctx, job, PMIAddr, envOf(env))
			return nil
		}); derr != nil {
			t.Fatal(derr)
		}
		return a, err
	}
	if a, err := bind(map[string]string{NetworkIfaceEnv: p.A}); err != nil || a != p.IPA {
		t.Errorf("-iface %s: %v, %v; want %v", p.A, a, err, p.IPA)
	}
	other := map[string]string{InterfaceHostnameEnv: p.IPB.String()}
	a, err := bind(other)
	t.Logf("no default route: %v", err)
	if err == nil || !strings.Contains(err.Error(), "not this node's") || !strings.Contains(err.Error(), "the default route") {
		t.Errorf("no default route: %v, %v; want an error naming %s, not this node's, and the default route", a, err, p.IPB)
	}
	if out, err := exec.Command(ip, "-n", p.NSA, "route", "add", "default", "via", p.IPB.String()).CombinedOutput(); err != nil {
		t.Fatalf("add a default route: %v: %s", err, out)
	}
	if a, err := bind(other); err != nil || a != p.IPA {
		t.Errorf("default route: %v, %v; want %v", a, err, p.IPA)
	}
}
