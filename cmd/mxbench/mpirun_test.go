package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/shm"
)

// mpirunOrSkip returns Debian's Open MPI mpirun, or skips the test.
func mpirunOrSkip(t *testing.T) string {
	if testing.Short() {
		t.Skip("-short: jobs under mpirun take a while")
	}
	p, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi not installed (apt-get install openmpi-bin)")
	}
	return p
}

// mpirunCmd runs the test binary as np ranks of Open MPI's mpirun on this
// host, with env exported to them.
func mpirunCmd(ctx context.Context, mpirun string, np int, env []string, args ...string) *exec.Cmd {
	a := []string{"--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(np), "-x", "GOMX_BOOTSTRAP="}
	for _, e := range env {
		a = append(a, "-x", e)
	}
	a = append(append(a, os.Args[0]), args...)
	return exec.CommandContext(ctx, mpirun, a...)
}

// TestMpirunAlltoall: `mpirun -np 4 mxbench alltoall` as users run it:
// the ranks come from Open MPI, meet without GOMX_BOOTSTRAP, and only rank
// 0 prints, one JSON row per size.
func TestMpirunAlltoall(t *testing.T) {
	mpirun := mpirunOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := mpirunCmd(ctx, mpirun, 4, []string{asMainEnv + "=1"}, "alltoall", "--sizes", "8,64K", "--iterations", "10", "--warmup", "10", "--wait", "block", "--verify", "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	rows := jsonRows(t, out.String())
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2 (only rank 0 prints):\n%s", len(rows), out.String())
	}
	for _, r := range rows {
		if r.Procs != 4 || r.TMaxUS < r.TMinUS || r.Strategy == "" {
			t.Errorf("row %+v", r)
		}
	}
	if !strings.Contains(out.String(), "the openmpi launcher") {
		t.Errorf("setup does not name the launcher:\n%s", out.String())
	}
}

// TestMpirunAlltoallAtScale: `mpirun -np 64 mxbench alltoall --verify`
// starts, connects and finishes byte-exact on this host (oversubscribed,
// blocking waits), and rank 0 reports the job's start-up time and the
// ranks' resident and shared memory. Without the race detector only (64
// instrumented ranks take minutes): make test-mpirun runs it.
func TestMpirunAlltoallAtScale(t *testing.T) {
	mpirun := mpirunOrSkip(t)
	if raceEnabled {
		t.Skip("64 ranks under the race detector: make test-mpirun runs it without")
	}
	checkAlltoallAtScale(t, "mpirun", func(ctx context.Context, np int, env []string, args ...string) *exec.Cmd {
		return mpirunCmd(ctx, mpirun, np, env, args...)
	})
}

// checkAlltoallAtScale runs `mxbench alltoall --verify` as 64 ranks of the
// command start builds (a launcher, named name in messages: mpirunCmd or
// srunCmd), oversubscribed with blocking waits, and checks that they finish
// byte-exact and that rank 0 reports the job's start-up time and the
// ranks' resident memory and at most 64 MiB of shared memory a rank.
func checkAlltoallAtScale(t *testing.T, name string, start func(ctx context.Context, np int, env []string, args ...string) *exec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := start(ctx, 64, []string{asMainEnv + "=1"}, "alltoall", "--sizes", "8,4K", "--iterations", "2", "--warmup", "1",
		"--wait", "block", "--verify", "--json", "--timeout", "4m")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s with 64 ranks: %v\nstdout:\n%s\nstderr:\n%s", name, err, out.String(), errb.String())
	}
	rows := jsonRows(t, out.String())
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(rows), out.String())
	}
	for _, r := range rows {
		if r.Procs != 64 || r.StartupMS <= 0 || r.RSSMax <= 0 || r.ShmMappedMax <= 0 || r.ShmMappedMax > 64<<20 {
			t.Errorf("row %+v: want 64 procs, a start-up time, resident memory and at most 64 MiB of shared memory a rank", r)
		}
	}
	t.Logf("64 ranks under %s: up and connected within %.0f ms, peak RSS of a rank %.1f MiB, shared memory of a rank %.1f MiB",
		name, rows[0].StartupMS, float64(rows[1].RSSMax)/(1<<20), float64(rows[1].ShmMappedMax)/(1<<20))
}

// mixedEnv makes the test binary one rank of TestMpirunMixedMessages.
const mixedEnv = "GOMX_MXBENCH_MIXED_CHILD"

// Mixed messages: how many, and in rounds of how many (receives of a round
// are posted before any of its messages is sent, so the unexpected queue
// stays small and memory bounded). With the race detector every rank runs
// several times slower (about 300 s for the 100 000 on this 2-core
// machine, against 45 s without), so `make test` sends a quarter of them
// and `make test-mpirun` (CI) all of them without it.
const (
	mixedRound = 2_000
	wildBit    = uint64(1) << 63
)

var mixedMessages = 100_000

// mixedCountEnv, in a rank's environment, sets how many messages the
// mixed-message plan has (the multi-node test sends fewer over its veth).
const mixedCountEnv = "GOMX_MXBENCH_MIXED_COUNT"

func init() {
	if raceEnabled {
		mixedMessages = 25_000
	}
	if n, err := strconv.Atoi(os.Getenv(mixedCountEnv)); err == nil && n > 0 {
		mixedMessages = n
	}
}

// mixedMsg is one message of the plan every rank derives from the seed.
type mixedMsg struct {
	src, dst, size int
	tag            uint64
	wild           bool // received by a wildcard receive
}

// mixedPlan is the job's messages, the same on every rank: all size classes
// (tiny, small, medium, large below and above the shared-memory eager
// threshold, up to 4 MiB + 1), random tags (the message's source and number
// in the low bits, so any receive can tell which message it got), one in
// four received by a wildcard receive (any source, any tag of the wildcard
// kind), the others by an exact one.
func mixedPlan(size int, seed uint64) []mixedMsg {
	rng := rand.New(rand.NewPCG(seed, 7))
	plan := make([]mixedMsg, mixedMessages)
	for i := range plan {
		m := &plan[i]
		m.src = rng.IntN(size)
		m.dst = (m.src + 1 + rng.IntN(size-1)) % size
		switch c := rng.IntN(1000); {
		case c < 350:
			m.size = rng.IntN(33) // tiny, 0 included
		case c < 600:
			m.size = 33 + rng.IntN(96) // small
		case c < 850:
			m.size = 129 + rng.IntN(4096-128) // medium, eager on the host path
		case c < 997:
			m.size = 4097 + rng.IntN(60<<10) // eager up to mx.DefaultShmEager, then rendezvous: single copy or rings
		default:
			m.size = 1<<20 + rng.IntN(3<<20+2) // large, up to 4 MiB + 1
		}
		m.wild = rng.IntN(4) == 0
		m.tag = rng.Uint64()&^(wildBit|0xffffff_ffff) | uint64(m.src)<<32 | uint64(i)
		if m.wild {
			m.tag |= wildBit
		}
	}
	return plan
}

// TestMpirunMixedMessages: 100 000 messages (25 000 under -race) of every size class, random
// tags, wildcard and exact receives, among 4 ranks launched by Open MPI's
// mpirun; every message arrives byte-exact at the receive meant for it (or
// a wildcard one), and nothing of the job is left in the endpoint
// directory afterwards.
func TestMpirunMixedMessages(t *testing.T) {
	if os.Getenv(mixedEnv) != "" {
		if err := mixedRank(); err != nil {
			job, _ := launch.FromEnv(os.Getenv)
			fmt.Printf("rank %d: error: %v\n", job.Rank, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	mpirun := mpirunOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := mpirunCmd(ctx, mpirun, 4, []string{mixedEnv + "=1"}, "-test.run=^TestMpirunMixedMessages$", "-test.count=1")
	checkMixedJob(t, cmd)
}

// checkMixedJob runs cmd, a launcher starting 4 ranks of the mixed-message
// test, and checks that every rank received its messages and that nothing
// of the job is left in the endpoint directory afterwards.
func checkMixedJob(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(cmd.Path), err, out)
	}
	var nics []string
	var done int
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, "nics "); ok {
			nics = strings.Fields(s)
		}
		if strings.Contains(l, " received ") {
			done++
		}
	}
	if done != 4 || len(nics) != 4 {
		t.Fatalf("%d ranks reported, %d NIC ids (want 4 and 4):\n%s", done, len(nics), out)
	}
	t.Logf("\n%s", out)
	// Every rank has exited: its endpoint socket must be gone.
	dir := shm.DefaultDir()
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		for _, n := range nics {
			if err == nil && strings.Contains(d.Name(), n) {
				left = append(left, p)
			}
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left in %s after the job: %v", dir, left)
	}
}

// mixedRank is one rank of TestMpirunMixedMessages.
func mixedRank() error {
	job, err := launch.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	addr, err := launch.Bootstrap(job, os.Getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := &benchFlags{commonFlags: commonFlags{wait: "block", timeout: time.Minute, key: 0x6d786265}}
	w, err := openWorld(ctx, f, job, addr, nil, []string{""}, nil, false)
	if err != nil {
		return err
	}
	defer w.close()
	// The seed comes from rank 0, so every run differs and all ranks agree.
	seed, err := w.bcast(ctx, binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())))
	if err != nil {
		return err
	}
	plan := mixedPlan(job.Size, binary.BigEndian.Uint64(seed))
	ep := w.eps[0]
	var got, wildGot, bytesGot int
	for first := 0; first < len(plan); first += mixedRound {
		round := plan[first:min(first+mixedRound, len(plan))]
		type posted struct {
			r   *mx.Request
			buf []byte
		}
		var recvs []posted
		wildMax := 0
		for _, m := range round {
			if m.dst != job.Rank {
				continue
			}
			if m.wild {
				wildMax = max(wildMax, m.size)
				continue
			}
			buf := make([]byte, m.size)
			r, err := ep.IRecv([][]byte{buf}, m.tag, ^uint64(0), nil)
			if err != nil {
				return err
			}
			recvs = append(recvs, posted{r, buf})
		}
		for _, m := range round {
			if m.dst == job.Rank && m.wild {
				buf := make([]byte, wildMax)
				r, err := ep.IRecv([][]byte{buf}, wildBit, wildBit, nil)
				if err != nil {
					return err
				}
				recvs = append(recvs, posted{r, buf})
			}
		}
		if err := w.barrier(ctx); err != nil {
			return err
		}
		var sends []*mx.Request
		for i, m := range round {
			if m.src != job.Rank {
				continue
			}
			buf := make([]byte, m.size)
			pattern(buf, first+i)
			s, err := ep.ISend([][]byte{buf}, w.peers[0][m.dst], m.tag, nil)
			if err != nil {
				return err
			}
			sends = append(sends, s)
		}
		for _, p := range recvs {
			st, err := p.r.Wait(ctx)
			if err != nil {
				return fmt.Errorf("round at %d: %w", first, err)
			}
			i := int(st.Match & 0xffff_ffff)
			if i >= len(plan) {
				return fmt.Errorf("a message with tag %#x, which no rank sent", st.Match)
			}
			m := plan[i]
			if m.tag != st.Match || m.dst != job.Rank || int(st.XferLength) != m.size || int(st.MsgLength) != m.size {
				return fmt.Errorf("message %d (%d bytes from rank %d, tag %#x) arrived as %d bytes with tag %#x", i, m.size, m.src, m.tag, st.XferLength, st.Match)
			}
			if at := check(p.buf[:m.size], i); at >= 0 {
				return fmt.Errorf("message %d of %d bytes from rank %d: byte %d differs", i, m.size, m.src, at)
			}
			got++
			bytesGot += m.size
			if m.wild {
				wildGot++
			}
		}
		for _, s := range sends {
			if _, err := s.Wait(ctx); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
	}
	want := 0
	for _, m := range plan {
		if m.dst == job.Rank {
			want++
		}
	}
	if got != want {
		return fmt.Errorf("received %d messages, want %d", got, want)
	}
	if err := w.finish(ctx); err != nil {
		return err
	}
	if job.Rank == 0 {
		var nics []string
		for _, n := range w.nics[0] {
			nics = append(nics, fmt.Sprintf("n%012x.sock", uint64(n)))
		}
		fmt.Println("nics", strings.Join(nics, " "))
	}
	c := ep.Counters()
	fmt.Printf("rank %d: received %d messages (%d by wildcard), %d bytes; %d single copies, %d pulls\n",
		job.Rank, got, wildGot, bytesGot, c.Get(mx.RecvCMA), c.Get(mx.SendPull))
	return nil
}
