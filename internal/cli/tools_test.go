package cli_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests in this file build ioatctl and mxbench and run the binaries, as
// a user does: what main prints and the exit status it returns are what is
// checked, not what run returns.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// tools builds both commands once per test binary into a directory any
// user may read, and returns it.
func tools(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "gomx-tools-")
		if buildErr != nil {
			return
		}
		if buildErr = os.Chmod(binDir, 0o755); buildErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go command in PATH to build the tools: %w", err)
			return
		}
		cmd := exec.Command(goTool, "build", "-o", binDir, "github.com/gomx-dev/gomx/cmd/ioatctl", "github.com/gomx-dev/gomx/cmd/mxbench")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// outcome is what one run of a binary did.
type outcome struct {
	stdout, stderr string
	code           int
}

// runTool runs a built tool with args, bounded so that a hang fails the
// test instead of the test binary's deadline.
func runTool(t *testing.T, cmd *exec.Cmd) outcome {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not end: a wait is not bounded", cmd.Args)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
		code = ee.ExitCode()
	}
	return outcome{stdout: out.String(), stderr: errb.String(), code: code}
}

// freeUDPPort returns a UDP port on 127.0.0.1 nobody listened on a moment
// ago.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// Every bad invocation a newcomer is likely to type gets exit status 2 (a
// usage error) or 1 (it could not run), nothing on stdout, and exactly one
// line on stderr that starts with the tool's name and says what to do.
func TestBadInvocations(t *testing.T) {
	dir := tools(t)
	noServer := fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
	for _, tc := range []struct {
		tool string
		args []string
		code int
		want string // in the stderr line
	}{
		{"ioatctl", nil, 2, "no subcommand"},
		{"ioatctl", []string{"frob"}, 2, "unknown subcommand"},
		{"ioatctl", []string{"help", "frob"}, 2, "no subcommand"},
		{"ioatctl", []string{"version", "extra"}, 2, "takes no arguments"},
		{"ioatctl", []string{"copy", "--size", "12Q"}, 2, `bad size "12Q"`},
		{"ioatctl", []string{"copy", "--size", "2G"}, 2, "want 1 byte to 1 GiB"},
		{"ioatctl", []string{"copy", "--channels", "0"}, 2, "want at least 1"},
		{"ioatctl", []string{"copy", "--channels", "100000"}, 2, "at most 16"},
		{"ioatctl", []string{"copy", "--window", "0"}, 2, "--window 0"},
		{"ioatctl", []string{"copy", "--cold", "--hot"}, 2, "exclude each other"},
		{"ioatctl", []string{"copy", "--sweep", "--sizes", "4K"}, 2, "pick one"},
		{"ioatctl", []string{"copy", "--duration", "0s"}, 2, "positive duration"},
		{"ioatctl", []string{"copy", "--iterations", "-1"}, 2, "--iterations -1"},
		{"ioatctl", []string{"copy", "--device", "0000:zz"}, 2, "want auto, emulated, emulated-dsa or PCI addresses"},
		{"ioatctl", []string{"copy", "--policy", "fastest"}, 2, "--policy fastest"},
		{"ioatctl", []string{"copy", "--cbver", "9"}, 2, "--cbver 9"},
		{"ioatctl", []string{"copy", "--memory", "1K"}, 2, "--memory"},
		{"ioatctl", []string{"copy", "--plot", "out.pdf"}, 2, ".svg or .png"},
		{"ioatctl", []string{"copy", "--bogus"}, 2, "flag provided but not defined"},
		{"ioatctl", []string{"overlap", "--timeout", "0s"}, 2, "--timeout 0s"},
		{"ioatctl", []string{"copy", "extra"}, 2, "unexpected argument"},
		{"ioatctl", []string{"verify", "--iterations", "-1"}, 2, "--iterations -1"},
		{"ioatctl", []string{"overlap", "--iterations", "0"}, 2, "--iterations 0"},
		{"ioatctl", []string{"bind"}, 2, "name the functions"},
		{"ioatctl", []string{"setup", "--size", "3M"}, 2, "want 2M or 1G"},
		{"ioatctl", []string{"setup", "--check", "--pages", "1"}, 2, "--check changes nothing"},
		{"mxbench", nil, 2, "no subcommand"},
		{"mxbench", []string{"frob"}, 2, "unknown subcommand"},
		{"mxbench", []string{"pingpong", "--loss", "2.0"}, 2, "--loss 2"},
		{"mxbench", []string{"pingpong", "--reorder", "-0.1"}, 2, "--reorder"},
		{"mxbench", []string{"pingpong", "--iterations", "-1"}, 2, "must not be negative"},
		{"mxbench", []string{"pingpong", "--transport", "foo"}, 2, `--transport "foo"`},
		{"mxbench", []string{"pingpong", "--peer", "notahost"}, 2, "want HOST:PORT"},
		{"mxbench", []string{"pingpong", "--peer", "host.invalid:4000", "--timeout", "5s"}, 1, "host.invalid"},
		{"mxbench", []string{"pingpong", "--peer", noServer, "--timeout", "2s", "--sizes", "8"}, 1, "mxbench serve"},
		{"mxbench", []string{"pingpong", "--peer", "127.0.0.1:4000", "--transport", "loopback"}, 2, "--peer needs a network transport"},
		{"mxbench", []string{"pingpong", "--transport", "udp", "--dup", "1.5"}, 2, "--dup 1.5"},
		{"mxbench", []string{"pingpong", "--transport", "xdp", "--iface", "nosuch0", "--peer-iface", "nosuch1"}, 2, "no such interface"},
		{"mxbench", []string{"pingpong", "--iface", "lo"}, 2, "need --transport xdp"},
		{"mxbench", []string{"pingpong", "--sizes", "1X"}, 2, "bad size"},
		{"mxbench", []string{"pingpong", "--sizes", "128M"}, 2, "largest message"},
		{"mxbench", []string{"pingpong", "--start", "1M", "--end", "1K"}, 2, "is above --end"},
		{"mxbench", []string{"pingpong", "--multiplier", "1"}, 2, "--multiplier 1"},
		{"mxbench", []string{"pingpong", "--wait", "nap"}, 2, "--wait"},
		{"mxbench", []string{"pingpong", "--timeout", "0s"}, 2, "--timeout"},
		{"mxbench", []string{"pingpong", "--plot", "x.gif"}, 2, ".svg or .png"},
		{"mxbench", []string{"pingpong", "--plot", "x.svg", "--sizes", "8"}, 2, "two sizes or more"},
		{"mxbench", []string{"stream", "--window", "0"}, 2, "--window 0"},
		{"mxbench", []string{"pingpong", "--remote-endpoint", "300"}, 2, "--remote-endpoint 300"},
		{"mxbench", []string{"pingpong", "--key", "0x1ffffffff"}, 2, "32-bit"},
		{"mxbench", []string{"pingpong", "extra"}, 2, "unexpected arguments"},
		{"mxbench", []string{"serve", "--endpoint", "300"}, 2, "--endpoint 300"},
		{"mxbench", []string{"serve", "--listen", "nope"}, 2, "--listen"},
		{"mxbench", []string{"serve", "--wait", "x"}, 2, "--wait"},
	} {
		name := tc.tool + " " + strings.Join(tc.args, " ")
		t.Run(name, func(t *testing.T) {
			o := runTool(t, exec.Command(filepath.Join(dir, tc.tool), tc.args...))
			if o.code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %q\nstderr: %q", o.code, tc.code, o.stdout, o.stderr)
			}
			if o.stdout != "" {
				t.Errorf("stdout %q, want nothing on a failure", o.stdout)
			}
			lines := strings.Split(strings.TrimSuffix(o.stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tc.tool+": ") || len(lines[0]) <= len(tc.tool)+2 {
				t.Fatalf("stderr %q: want one line starting %q", o.stderr, tc.tool+": ")
			}
			if !strings.Contains(lines[0], tc.want) {
				t.Errorf("stderr %q does not say %q", lines[0], tc.want)
			}
			if tc.code == 2 && !strings.Contains(lines[0], " -h` for its flags") && !strings.Contains(lines[0], " help` for the subcommands") {
				t.Errorf("usage error %q does not say where the help is", lines[0])
			}
		})
	}
}

// -h, help and version answer on stdout with exit status 0, and the help
// has a description and examples.
func TestHelpAndVersion(t *testing.T) {
	dir := tools(t)
	for _, tc := range []struct {
		tool string
		args []string
		want []string
	}{
		{"ioatctl", []string{"-h"}, []string{"Commands:", "version"}},
		{"ioatctl", []string{"copy", "-h"}, []string{"Usage: ioatctl copy", "Examples:", "--channels"}},
		{"ioatctl", []string{"setup", "--help"}, []string{"--check", "Examples:"}},
		{"ioatctl", []string{"version"}, []string{"ioatctl ", "revision:", "go:"}},
		{"mxbench", []string{"help"}, []string{"omx_perf", "Commands:", "pingpong"}},
		{"mxbench", []string{"pingpong", "-h"}, []string{"Usage: mxbench pingpong", "Examples:", "udp er", "--timeout"}},
		{"mxbench", []string{"serve", "-h"}, []string{"Usage: mxbench serve", "--listen"}},
		{"mxbench", []string{"--version"}, []string{"mxbench ", "module:   github.com/gomx-dev/gomx"}},
	} {
		o := runTool(t, exec.Command(filepath.Join(dir, tc.tool), tc.args...))
		if o.code != 0 || o.stderr != "" {
			t.Errorf("%s %q: exit %d, stderr %q", tc.tool, tc.args, o.code, o.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(o.stdout, w) {
				t.Errorf("%s %q: stdout lacks %q:\n%s", tc.tool, tc.args, w, o.stdout)
			}
		}
		if strings.Contains(o.stdout, "(default -1)") {
			t.Errorf("%s %q: help shows a sentinel default:\n%s", tc.tool, tc.args, o.stdout)
		}
	}
}

// memlockLimit is the locked-memory limit of the unprivileged runs: the
// default of most distributions.
const memlockLimit = 8 << 20

// unprivileged returns cmd set to run the built tool as a user with no
// privileges and an 8 MiB locked-memory limit: as nobody (uid 65534) when
// the test runs as root, else as the user running the test, who is not
// privileged to begin with.
func unprivileged(t *testing.T, dir, tool string, args ...string) *exec.Cmd {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh to lower the locked-memory limit with: %v", err)
	}
	// ulimit -l lowers the soft and hard limits of the shell, which execs
	// the tool: an unprivileged user cannot raise them again.
	script := fmt.Sprintf(`ulimit -l %d && exec "$0" "$@"`, memlockLimit>>10)
	cmd := exec.Command(sh, append([]string{"-c", script, filepath.Join(dir, tool)}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C"}
	cmd.Dir = "/"
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return cmd
}

// The README's first run (ioatctl copy) works for a user with no privileges, no
// hugepages of their own and an 8 MiB locked-memory limit: the emulated
// engine runs on ordinary memory and says so. So do verify and overlap.
func TestUnprivileged(t *testing.T) {
	dir := tools(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"copy", "--channels", "4", "--iterations", "2000", "--memory", "256M"},
			[]string{"emulated CBDMA (4 channels", "ordinary (pageable) memory", "the engine is CPU threads", "ENGINE MB/s"}},
		{[]string{"copy", "--channels", "16", "--sizes", "4K,1M", "--iterations", "100", "--memory", "64M", "--json"},
			[]string{`"schema":"ioatctl.copy/1"`, `"emulated":true`}},
		{[]string{"verify", "--channels", "4", "--iterations", "200"},
			[]string{"emulated/3", "all operations verified", "ordinary (pageable) memory"}},
		{[]string{"overlap", "--channels", "2", "--sizes", "64K", "--iterations", "3"},
			[]string{"ordinary (pageable) memory", "OVERLAP"}},
	} {
		o := runTool(t, unprivileged(t, dir, "ioatctl", tc.args...))
		if o.code != 0 {
			t.Errorf("ioatctl %q as an unprivileged user: exit %d\nstdout:\n%s\nstderr:\n%s", tc.args, o.code, o.stdout, o.stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(o.stdout, w) {
				t.Errorf("ioatctl %q: output lacks %q:\n%s", tc.args, w, o.stdout)
			}
		}
	}
	// setup --check answers for any user, with a status a script can test
	// and without trying to reserve anything.
	o := runTool(t, unprivileged(t, dir, "ioatctl", "setup", "--check"))
	switch {
	case o.code == 0 && strings.Contains(o.stdout, "\nready:"):
	case o.code == 1 && strings.HasPrefix(o.stderr, "ioatctl: not ready") && strings.Contains(o.stdout, "not ready"):
	default:
		t.Errorf("setup --check as an unprivileged user: exit %d\nstdout:\n%s\nstderr:\n%s", o.code, o.stdout, o.stderr)
	}
	if strings.Contains(o.stdout, "reserve:") {
		t.Errorf("setup --check tried to reserve hugepages:\n%s", o.stdout)
	}
}
