// Package netnstest builds throwaway network namespaces joined by a veth
// pair for tests that need a real wire: AF_XDP sockets, raw and UDP
// transports. It wraps package internal/netns: everything it creates is
// deleted in t.Cleanup, also when the test fails, and tests that lack root
// or the ip tool skip with the fix, or fail when the caller's environment
// variable demands the wire (Require).
package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/netns"
	"github.com/vishvananda/netlink"
)

// Pair is two network namespaces joined by a veth pair; see netns.Pair.
type Pair = netns.Pair

// Require skips t, saying what is missing and how to fix it, unless the
// process can create namespaces and veth pairs (root, or CAP_SYS_ADMIN and
// CAP_NET_ADMIN). When the environment variable env is
// "1" it fails the test instead of skipping it.
func Require(t testing.TB, env string) {
	t.Helper()
	why := netns.Missing()
	if why == "" {
		return
	}
	if env != "" && os.Getenv(env) == "1" {
		t.Fatalf("%s (and %s=1 requires it)", why, env)
	}
	t.Skip(why)
}

// NewPair creates a Pair with queues rx and tx queues per end, fails the
// test if any step fails, and deletes both namespaces in t.Cleanup.
func NewPair(t testing.TB, queues int) *Pair {
	t.Helper()
	p, err := netns.NewPair(queues)
	if err != nil {
		t.Fatalf("netnstest: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("netnstest: cleanup: %v", err)
		}
	})
	return p
}

// Missing says what this process lacks to build namespaces and veth pairs,
// or "" when nothing is missing.
func Missing() string { return netns.Missing() }

// HasCap reports whether the process has capability c in its effective set.
func HasCap(c int) bool { return netns.HasCap(c) }

// Do runs fn on an OS thread inside the named namespace; see netns.Do.
func Do(ns string, fn func() error) error { return netns.Do(ns, fn) }

// Link returns an interface in a namespace as netlink reports it; see
// netns.Link.
func Link(ns, iface string) (netlink.Link, error) { return netns.Link(ns, iface) }

// SetLinkUp brings an interface in a namespace up or down; see
// netns.SetLinkUp.
func SetLinkUp(ns, iface string, up bool) error { return netns.SetLinkUp(ns, iface, up) }

// RshAgent writes a script that Open MPI's mpirun takes as its remote
// shell (--mca plm_rsh_agent), and MPICH's mpiexec.hydra as its rsh
// (-launcher rsh -launcher-exec), to reach the pair's "other node" without
// ssh: called as rsh is, "AGENT HOST COMMAND...", it runs COMMAND with sh
// inside the namespace of HOST (p.IPA is NSA, p.IPB is NSB), with the
// variables env[HOST] ("NAME=VALUE") added. It skips t when the ip tool
// is missing and returns the script's path, in a directory t removes.
func RshAgent(t testing.TB, p *Pair, env map[string][]string) string {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("the ip tool is missing (apt-get install iproute2)")
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# An rsh agent for mpirun: run the command in the namespace of the host.\nhost=$1\nshift\ncase $host in\n")
	for _, n := range []struct {
		ip netip.Addr
		ns string
	}{{p.IPA, p.NSA}, {p.IPB, p.NSB}} {
		fmt.Fprintf(&b, "%s) ns=%s", n.ip, quote(n.ns))
		for _, e := range env[n.ip.String()] {
			fmt.Fprintf(&b, "; export %s", quote(e))
		}
		b.WriteString(" ;;\n")
	}
	fmt.Fprintf(&b, "*) echo \"rsh agent: no namespace for host $host\" >&2; exit 1 ;;\nesac\nexec %s netns exec \"$ns\" sh -c \"$*\"\n", quote(ip))
	path := filepath.Join(t.TempDir(), "rsh-agent")
	if err := os.WriteFile(path, []byte(b.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}
