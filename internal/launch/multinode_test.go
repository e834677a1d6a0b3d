package launch

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/netnstest"
)

// TestExchangeAcrossNodes: four ranks of a Slurm step on two "nodes", two
// network namespaces joined by a veth pair, with the step's nodes given as
// IP literals in Slurm's hostlist syntax. Without GOMX_BOOTSTRAP every rank
// finds rank 0 on the first node at the port of the step, the ranks of the
// second node reach it over the veth, and all get the same table. Each
// rank runs Exchange on a thread inside its node's namespace, so every
// socket it makes belongs there; nothing leaves the namespaces.
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
	}
}
