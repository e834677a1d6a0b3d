package launch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// fakeNode is a node with addresses 10.0.0.5 (eth0) and 127.0.0.1 (lo),
// names resolved from names, and routes: toward 10.0.0.9 and a1 from
// 10.0.0.5, the default route from dflt (none when it is not valid).
func fakeNode(env, names map[string]string, host string, dflt netip.Addr) (node, *[]string) {
	var routed []string
	ifaces := map[string][]netip.Addr{
		"eth0": {netip.MustParseAddr("10.0.0.5")},
		"lo":   {netip.MustParseAddr("127.0.0.1")},
		"ib0":  nil,
	}
	return node{
		getenv:   envOf(env),
		hostname: func() (string, error) { return host, nil },
		lookup: func(_ context.Context, h string) ([]netip.Addr, error) {
			if a, err := netip.ParseAddr(h); err == nil {
				return []netip.Addr{a}, nil
			}
			v, ok := names[h]
			if !ok {
				return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
			}
			var out []netip.Addr
			for _, s := range strings.Fields(v) {
				out = append(out, netip.MustParseAddr(s))
			}
			return out, nil
		},
		addrs: func(iface string) ([]netip.Addr, error) {
			if iface == "" {
				return append(ifaces["lo"], ifaces["eth0"]...), nil
			}
			as, ok := ifaces[iface]
			if !ok {
				return nil, errors.New("route ip+net: no such network interface")
			}
			return as, nil
		},
		routeFrom: func(dst string) (netip.Addr, error) {
			routed = append(routed, dst)
			switch h, _, _ := net.SplitHostPort(dst); {
			case h == "10.0.0.9" || h == "a1":
				return netip.MustParseAddr("10.0.0.5"), nil
			case dst == routeProbe && dflt.IsValid():
				return dflt, nil
			}
			return netip.Addr{}, errors.New("connect: network is unreachable")
		},
	}, &routed
}

// TestBindAddr: the address a rank binds when the user names none, from
// what the launcher says and what the node has.
func TestBindAddr(t *testing.T) {
	hydra := Job{Rank: 1, Size: 4, Launcher: "pmi"}
	slurm := Job{Rank: 1, Size: 4, Launcher: "slurm", NodeList: "a[0-1]", NodeID: 0, NumNodes: 2}
	none := netip.Addr{}
	for _, c := range []struct {
		name      string
		job       Job
		bootstrap string
		env       map[string]string
		names     map[string]string
		host      string
		dflt      netip.Addr
		want      string // an address, or "error: ..." the error contains
		routed    string // where BindAddr asked for a route, comma-separated
	}{
		{name: "one node", job: Job{Size: 4, Launcher: "pmi", OneNode: true}, bootstrap: PMIAddr, want: "127.0.0.1"},
		{name: "unix socket", job: Job{Size: 4, Launcher: "openmpi"}, bootstrap: "unix:@x", want: "127.0.0.1"},
		{name: "slurm: toward the next node", job: slurm, bootstrap: "a0:28001", want: "10.0.0.5", routed: "a1:28001"},
		{name: "openmpi: toward mpirun", job: Job{Size: 4, Launcher: "openmpi", HeadHost: "10.0.0.9"}, bootstrap: PMIxAddr, want: "10.0.0.5", routed: "10.0.0.9:9"},
		{name: "GOMX_BOOTSTRAP: toward rank 0", job: hydra, bootstrap: "10.0.0.9:5000", want: "10.0.0.5", routed: "10.0.0.9:5000"},
		{name: "no route to the job's host", job: hydra, bootstrap: "10.9.9.9:5000", want: "error: no route to the job's host 10.9.9.9", routed: "10.9.9.9:5000"},
		// mpiexec -iface: the interface's address, whatever else is said.
		{name: "hydra -iface", job: hydra, bootstrap: PMIAddr, env: map[string]string{NetworkIfaceEnv: "eth0", InterfaceHostnameEnv: "n1"}, want: "10.0.0.5"},
		{name: "hydra -iface lo", job: hydra, bootstrap: "10.0.0.9:5000", env: map[string]string{NetworkIfaceEnv: "lo"}, want: "127.0.0.1"},
		{name: "hydra -iface missing", job: hydra, bootstrap: PMIAddr, env: map[string]string{NetworkIfaceEnv: "eth7"}, want: "error: mpiexec -iface eth7"},
		{name: "hydra -iface without IPv4", job: hydra, bootstrap: PMIAddr, env: map[string]string{NetworkIfaceEnv: "ib0"}, want: "error: it has no IPv4 address"},
		// Hydra's name for the node, as its host list spells it.
		{name: "hydra host list name", job: hydra, bootstrap: PMIAddr, env: map[string]string{InterfaceHostnameEnv: "n1"}, names: map[string]string{"n1": "10.0.0.5"}, host: "vm", dflt: netip.MustParseAddr("10.0.0.5"), want: "10.0.0.5"},
		{name: "hydra host list IP", job: hydra, bootstrap: PMIAddr, env: map[string]string{InterfaceHostnameEnv: "10.0.0.5"}, want: "10.0.0.5"},
		// A name for 127.0.1.1 (Debian), then the host's name.
		{name: "loopback name, then hostname", job: hydra, bootstrap: PMIAddr, env: map[string]string{InterfaceHostnameEnv: "n1"}, names: map[string]string{"n1": "127.0.1.1", "vm": "127.0.1.1 10.0.0.5"}, host: "vm", want: "10.0.0.5"},
		// Names of another node (or namespace): the default route.
		{name: "not this node's, default route", job: hydra, bootstrap: PMIAddr, env: map[string]string{InterfaceHostnameEnv: "n1"}, names: map[string]string{"n1": "10.0.0.77", "vm": "127.0.0.1"}, host: "vm", dflt: netip.MustParseAddr("10.0.0.5"), want: "10.0.0.5", routed: routeProbe},
		{name: "unresolved, default route", job: hydra, bootstrap: PMIAddr, host: "vm", dflt: netip.MustParseAddr("10.0.0.5"), want: "10.0.0.5", routed: routeProbe},
		{name: "nothing", job: hydra, bootstrap: PMIAddr, env: map[string]string{InterfaceHostnameEnv: "n1"}, names: map[string]string{"n1": "127.0.1.1"}, host: "vm", dflt: none, want: "error: pmi names no host of it to bind toward; tried the node's name n1 (resolves to loopback [127.0.1.1]), the node's name vm (lookup vm: no such host), the default route (connect: network is unreachable) (mpiexec.hydra -iface NAME picks an interface)", routed: routeProbe},
		{name: "default route on loopback", job: hydra, bootstrap: PMIAddr, host: "vm", names: map[string]string{"vm": "127.0.0.1"}, dflt: netip.MustParseAddr("127.0.0.1"), want: "error: the default route (from 127.0.0.1)", routed: routeProbe},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env == nil {
				c.env = map[string]string{}
			}
			n, routed := fakeNode(c.env, c.names, c.host, c.dflt)
			a, err := bindAddr(context.Background(), c.job, c.bootstrap, n)
			if e, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), e) {
					t.Errorf("got %v, %v; want an error saying %q", a, err, e)
				}
			} else if err != nil || a.String() != c.want {
				t.Errorf("got %v, %v; want %s", a, err, c.want)
			}
			if r := strings.Join(*routed, ","); r != c.routed {
				t.Errorf("asked for routes to %q, want %q", r, c.routed)
			}
		})
	}
}
