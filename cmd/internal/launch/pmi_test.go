package launch

import (
	"bufio"
	"bytes"
	"context"
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

// fakePMI is a PMI-1 server as the Flux RFC 13 describes one, for ranks
// that connect with PMI_PORT and PMI_ID: a key-value space with puts,
// gets and a barrier over size clients, and values of at most vallen
// bytes. It is written from the protocol, not from the client.
type fakePMI struct {
	ln     net.Listener
	size   int
	vallen int
	mu     sync.Mutex
	kv     map[string]string
	inBar  int
	barGen chan struct{}
	final  int
	done   chan struct{} // closed when the test ends: frees barrier waits
}

func newFakePMI(t *testing.T, size, vallen int) *fakePMI {
	s := &fakePMI{size: size, vallen: vallen, kv: map[string]string{}, barGen: make(chan struct{})}
	s.ln, s.done = fakeServer(t, s.serve)
	return s
}

// fakeServer listens on loopback and serves each connection on a
// goroutine of its own until the test ends, when it closes the listener
// and done (which frees the server's waits).
func fakeServer(t *testing.T, serve func(net.Conn)) (net.Listener, chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no TCP on loopback: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		close(done)
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln, done
}

func (s *fakePMI) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		f := map[string]string{}
		for _, w := range strings.Fields(line) {
			k, v, _ := strings.Cut(w, "=")
			f[k] = v
		}
		var out string
		switch f["cmd"] {
		case "initack":
			out = fmt.Sprintf("cmd=initack\ncmd=set size=%d\ncmd=set rank=%s\ncmd=set debug=0\n", s.size, f["pmiid"])
		case "init":
			out = "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
		case "get_maxes":
			out = fmt.Sprintf("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=%d\n", s.vallen)
		case "get_my_kvsname":
			out = "cmd=my_kvsname kvsname=kvs_fake_0\n"
		case "put":
			if len(f["value"]) > s.vallen || f["kvsname"] != "kvs_fake_0" {
				out = "cmd=put_result rc=-1 msg=too_long\n"
				break
			}
			s.mu.Lock()
			s.kv[f["key"]] = f["value"]
			s.mu.Unlock()
			out = "cmd=put_result rc=0 msg=success\n"
		case "get":
			s.mu.Lock()
			v, ok := s.kv[f["key"]]
			s.mu.Unlock()
			if !ok {
				out = "cmd=get_result rc=-1 msg=key_" + f["key"] + "_not_found\n"
			} else {
				out = "cmd=get_result rc=0 msg=success value=" + v + "\n"
			}
		case "barrier_in":
			s.mu.Lock()
			gen := s.barGen
			if s.inBar++; s.inBar == s.size {
				s.inBar = 0
				s.barGen = make(chan struct{})
				close(gen)
			}
			s.mu.Unlock()
			select {
			case <-gen:
			case <-s.done:
				return
			}
			out = "cmd=barrier_out\n"
		case "finalize":
			s.mu.Lock()
			s.final++
			s.mu.Unlock()
			out = "cmd=finalize_ack\n"
		default:
			out = "cmd=unknown\n"
		}
		if _, err := c.Write([]byte(out)); err != nil {
			return
		}
	}
}

// TestPMIExchange: ranks that reach a PMI-1 server by PMI_PORT trade
// records bigger than one of its values (cut into pieces), all get the
// same table, and every rank finalises.
func TestPMIExchange(t *testing.T) {
	const size = 3
	s := newFakePMI(t, size, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := [][]byte{bytes.Repeat([]byte{0xab}, 100), nil, []byte("rank two")}
	tables := make([][][]byte, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		env := map[string]string{"PMI_RANK": fmt.Sprint(r), "PMI_SIZE": fmt.Sprint(size), "PMI_PORT": s.ln.Addr().String(), "PMI_ID": fmt.Sprint(r)}
		job, err := FromEnv(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		if a, err := Bootstrap(job, envOf(env)); a != PMIAddr || err != nil {
			t.Fatalf("Bootstrap with PMI_PORT: %q %v, want %q", a, err, PMIAddr)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tables[r], errs[r] = pmiExchange(ctx, job, recs[r], envOf(env))
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i := range size {
			if !bytes.Equal(tables[r][i], recs[i]) {
				t.Fatalf("rank %d has %x for rank %d, want %x", r, tables[r][i], i, recs[i])
			}
		}
	}
	s.mu.Lock()
	final := s.final
	s.mu.Unlock()
	if final != size {
		t.Errorf("%d ranks finalised, want %d", final, size)
	}
	// A server that never answers the barrier: the context ends the wait.
	short, c2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer c2()
	env := map[string]string{"PMI_PORT": s.ln.Addr().String(), "PMI_ID": "0"}
	if _, err := pmiExchange(short, Job{Rank: 0, Size: size}, nil, envOf(env)); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("alone at the barrier: %v, want the deadline", err)
	}
	// A descriptor that is not a socket from the launcher.
	if _, err := pmiExchange(ctx, Job{Rank: 0, Size: 1}, nil, envOf(map[string]string{"PMI_FD": "x"})); err == nil || !strings.Contains(err.Error(), "PMI_FD") {
		t.Errorf("PMI_FD=x: %v", err)
	}
}

// hydraChildEnv makes the test binary one rank of TestHydra.
const hydraChildEnv = "GOMX_LAUNCH_HYDRA_CHILD"

// TestHydra starts three ranks with MPICH's mpiexec.hydra, which gives
// each a PMI_FD and no GOMX_BOOTSTRAP: they trade records through hydra's
// PMI key-value space.
func TestHydra(t *testing.T) {
	rankIfChild(hydraChildEnv)
	if testing.Short() {
		t.Skip("-short: starts a job")
	}
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		t.Skip("mpiexec.hydra not installed (apt-get install mpich)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hydra, "-n", "3", "-genv", hydraChildEnv, "1", "-genv", "GOMX_BOOTSTRAP", "",
		os.Args[0], "-test.run=^TestHydra$", "-test.count=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "rank ") {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	want := "rank 0/3 pmi: r0 r1 r2\nrank 1/3 pmi: r0 r1 r2\nrank 2/3 pmi: r0 r1 r2"
	if strings.Join(lines, "\n") != want {
		t.Fatalf("ranks said:\n%s\nwant:\n%s\n(all output:\n%s)", strings.Join(lines, "\n"), want, out)
	}
	// hydra says the job is on one node (MPI_LOCALNRANKS): every rank
	// binds 127.0.0.1.
	for r := range 3 {
		if want := fmt.Sprintf("bind of rank %d: 127.0.0.1 <nil>\n", r); !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
