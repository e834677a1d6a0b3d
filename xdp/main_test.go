package xdp

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/netnstest"
)

// requireEnv turns the skips of tests that need root, AF_XDP and BPF into
// failures; CI sets it.
const requireEnv = "GOMX_REQUIRE_XDP"

// TestMain fails the run if any test leaks UMEM memory.
func TestMain(m *testing.M) {
	code := m.Run()
	if n := hugepage.Live(); n != 0 {
		fmt.Fprintf(os.Stderr, "xdp: %d regions leaked:\n\t%s\n", n, strings.Join(hugepage.LiveRegions(), "\n\t"))
		code = 1
	}
	os.Exit(code)
}

// requireXDP skips t (or fails it under GOMX_REQUIRE_XDP=1) unless the
// process can build namespaces and veth pairs, open AF_XDP sockets and load
// and attach XDP programs, saying what is missing and how to fix it.
func requireXDP(t testing.TB) {
	t.Helper()
	netnstest.Require(t, requireEnv)
	var missing []string
	for _, c := range []struct {
		cap  int
		name string
	}{{unix.CAP_NET_RAW, "CAP_NET_RAW"}, {unix.CAP_BPF, "CAP_BPF"}, {unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}} {
		if !netnstest.HasCap(c.cap) {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		msg := "AF_XDP tests need " + strings.Join(missing, ", ") + ": run them as root, e.g. `go test -exec sudo ./xdp/`"
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("%s (and %s=1 requires them)", msg, requireEnv)
		}
		t.Skip(msg)
	}
	fd, err := unix.Socket(afXDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		msg := fmt.Sprintf("socket(AF_XDP): %v: the kernel needs CONFIG_XDP_SOCKETS=y (Linux 5.10 or later)", err)
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("%s (and %s=1 requires it)", msg, requireEnv)
		}
		t.Skip(msg)
	}
	unix.Close(fd)
}
