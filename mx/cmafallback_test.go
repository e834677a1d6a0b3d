package mx

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cmaFallbackEnv gives TestCMARefusedFallback's processes their role:
// "echo DIR" for the sender that forbids process_vm_readv, "receiver" for
// the test's body run without CAP_SYS_PTRACE.
const cmaFallbackEnv = "GOMX_MX_CMA_FALLBACK"

// TestCMARefusedFallback: a peer process that forbids process_vm_readv
// (PR_SET_DUMPABLE 0, read by a process without CAP_SYS_PTRACE) makes
// every large message it sends fall back to the shared-memory rings: the
// kernel's refusal is counted (CMARefused), no single copy happens, and
// every byte still arrives, with the single copy forced (LargeCMA: each
// message tries it first) and with mx's default (LargeAuto: the first
// refusal turns it off for the board). As root the receiving side runs in
// a child started by setpriv without CAP_SYS_PTRACE, since root may read
// any process.
func TestCMARefusedFallback(t *testing.T) {
	role := os.Getenv(cmaFallbackEnv)
	if arg, ok := strings.CutPrefix(role, "echo "); ok {
		if err := nonDumpableEcho(arg); err != nil {
			fmt.Fprintln(os.Stderr, "echo child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if role == "receiver" || !hasPtraceCap() {
		cmaFallbackBody(t)
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("root may read any process, and setpriv (util-linux) is missing to run the receiver without CAP_SYS_PTRACE: apt-get install util-linux")
	}
	ctx := testCtx(t, 120*time.Second)
	cmd := exec.CommandContext(ctx, setpriv, "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace",
		os.Args[0], "-test.run=^TestCMARefusedFallback$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), cmaFallbackEnv+"=receiver")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("receiver without CAP_SYS_PTRACE: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestCMARefusedFallback")) {
		t.Fatalf("receiver did not run the test:\n%s", out)
	}
	t.Logf("receiver (setpriv, no CAP_SYS_PTRACE):\n%s", out)
}

// hasPtraceCap reports whether this process may read any other (effective
// CAP_SYS_PTRACE).
func hasPtraceCap() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.Geteuid() == 0
	}
	return data[0].Effective&(1<<unix.CAP_SYS_PTRACE) != 0
}

func cmaFallbackBody(t *testing.T) {
	if hasPtraceCap() {
		t.Fatal("the receiver still has CAP_SYS_PTRACE: the test would prove nothing")
	}
	for _, s := range []LargeStrategy{LargeCMA, LargeAuto} {
		t.Run(s.String(), func(t *testing.T) {
			dir := shmDir(t)
			ctx := testCtx(t, 60*time.Second)
			cmd, sc := startTestChild(t, ctx, "TestCMARefusedFallback", cmaFallbackEnv+"=echo "+dir, "GOMX_SHM_LARGE="+s.String())
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("echo child did not start: %q", sc.Text())
			}
			o := shmTestOptions()
			o.Local.Large = s
			_, e, addr := shmBoardTo(t, ctx, dir, o, 5)
			sizes := []int{DefaultShmEager + 1, 64 << 10, 1<<20 + 3, 4 << 20}
			echoSizes(t, ctx, e, addr, sizes)
			c := e.Counters()
			refused, cma, pulls := c.Get(CMARefused), c.Get(RecvCMA), c.Get(SendPull)
			want := uint64(len(sizes)) // LargeCMA tries every message
			if s == LargeAuto {
				want = 1 // the first refusal turns the single copy off
			}
			if refused != want || cma != 0 || pulls < uint64(len(sizes)) {
				t.Errorf("%v: %d refused (want %d), %d single copies (want 0), %d pulls (want %d or more)",
					s, refused, want, cma, pulls, len(sizes))
			}
			cmd.Process.Kill()
		})
	}
}

// nonDumpableEcho is the sender: it forbids process_vm_readv of itself
// (PR_SET_DUMPABLE 0) and echoes every message on board 5 of dir.
func nonDumpableEcho(dir string) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	b, e, err := openShmChild(dir, 5, shmTestOptions())
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Println("ready")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return echoLoop(ctx, e, nil)
}
