package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// Hydra's settings for MPICH's own network code, which BindAddr honours as
// an MPICH user expects: mpiexec.hydra gives every process the name of its
// node as the host list (-hosts, -f) spells it in InterfaceHostnameEnv, or,
// with -iface NAME, the interface in NetworkIfaceEnv instead.
const (
	InterfaceHostnameEnv = "MPIR_CVAR_CH3_INTERFACE_HOSTNAME"
	NetworkIfaceEnv      = "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE"
)

// routeProbe is the address whose route BindAddr asks the kernel for to
// find the default route's source: TEST-NET-3 (RFC 5737), documentation
// only. A UDP "connect" picks the route and sends nothing.
const routeProbe = "203.0.113.1:9"

// node is what BindAddr asks of the host it runs on; tests give their own.
type node struct {
	getenv   func(string) string
	hostname func() (string, error)
	// lookup resolves a host name to its IPv4 addresses.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// addrs returns the IPv4 addresses of interface iface, or of every
	// interface when iface is "".
	addrs func(iface string) ([]netip.Addr, error)
	// routeFrom returns the source address of the route to dst, a
	// host:port whose host may be a name.
	routeFrom func(dst string) (netip.Addr, error)
}

// thisNode is the node BindAddr runs on.
func thisNode(getenv func(string) string) node {
	return node{
		getenv:   getenv,
		hostname: os.Hostname,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			as, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
			for i := range as {
				as[i] = as[i].Unmap()
			}
			return as, err
		},
		addrs: func(iface string) ([]netip.Addr, error) {
			var as []net.Addr
			var err error
			if iface == "" {
				as, err = net.InterfaceAddrs()
			} else {
				var i *net.Interface
				if i, err = net.InterfaceByName(iface); err == nil {
					as, err = i.Addrs()
				}
			}
			var out []netip.Addr
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
						out = append(out, ip.Unmap())
					}
				}
			}
			return out, err
		},
		routeFrom: func(dst string) (netip.Addr, error) {
			c, err := net.Dial("udp4", dst)
			if err != nil {
				return netip.Addr{}, err
			}
			defer c.Close()
			return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
		},
	}
}

// BindAddr returns the IPv4 address of this node that a rank of job binds
// the sockets the other ranks reach (a UDP transport's) to, when the user
// names none. bootstrap is the job's address from Bootstrap; getenv reads
// the launcher's environment (os.Getenv in programs). In order:
//
//   - 127.0.0.1 when the job runs on one node (Job.OneNode, or a
//     bootstrap on a unix socket).
//   - mpiexec.hydra -iface NAME (NetworkIfaceEnv): the first IPv4 address
//     of interface NAME, as MPICH itself takes it; an error when NAME has
//     none here.
//   - A host the launcher names: the source address of the route to it,
//     another node of the job (Job.PeerHost), else the host of a
//     host:port bootstrap (rank 0's).
//   - Else, as MPICH picks its own address: the first IPv4 address that
//     this node's name resolves to and that is one of this node's and not
//     a loopback one; the name is the one hydra gives the node
//     (InterfaceHostnameEnv, as its host list spells it), then the
//     host's name (os.Hostname). A name that resolves to a loopback
//     address only (Debian's 127.0.1.1) or to none of this node's
//     (another network namespace's) is passed over.
//   - Else the source address of the default route (a UDP "connect"
//     toward a documentation address: nothing is sent).
//
// When none gives an address the error says what was tried; the caller
// names its own way out (mxbench's --listen).
func BindAddr(ctx context.Context, job Job, bootstrap string, getenv func(string) string) (netip.Addr, error) {
	return bindAddr(ctx, job, bootstrap, thisNode(getenv))
}

func bindAddr(ctx context.Context, job Job, bootstrap string, n node) (netip.Addr, error) {
	if strings.HasPrefix(bootstrap, "unix:") || job.OneNode {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	if iface := n.getenv(NetworkIfaceEnv); iface != "" {
		as, err := n.addrs(iface)
		if err != nil || len(as) == 0 {
			if err == nil {
				err = errors.New("it has no IPv4 address")
			}
			return netip.Addr{}, fmt.Errorf("launch: %s=%s (mpiexec -iface %s): %v: name an interface of this node with an IPv4 address the other nodes reach", NetworkIfaceEnv, iface, iface, err)
		}
		return as[0], nil
	}
	host, port, err := net.SplitHostPort(bootstrap)
	if err != nil || bootstrap == PMIAddr || bootstrap == PMIxAddr {
		host, port = "", "9"
	}
	if p := job.PeerHost(); p != "" {
		host = p
	}
	if host != "" {
		a, err := n.routeFrom(net.JoinHostPort(host, port))
		if err != nil {
			return netip.Addr{}, fmt.Errorf("launch: no route to the job's host %s (%s): %w", host, job.Launcher, err)
		}
		return a, nil
	}
	var tried []string
	mine, err := n.addrs("")
	if err != nil {
		tried = append(tried, fmt.Sprintf("this node's addresses (%v)", err))
	}
	names := []string{n.getenv(InterfaceHostnameEnv)}
	if h, err := n.hostname(); err == nil {
		names = append(names, h)
	}
	for i, name := range names {
		if name == "" || (i > 0 && name == names[0]) {
			continue
		}
		as, err := n.lookup(ctx, name)
		if a, ok := reachable(as, mine); ok {
			return a, nil
		}
		switch {
		case err != nil:
			tried = append(tried, fmt.Sprintf("the node's name %s (%v)", name, err))
		case allLoopback(as):
			tried = append(tried, fmt.Sprintf("the node's name %s (resolves to loopback %v)", name, as))
		default:
			tried = append(tried, fmt.Sprintf("the node's name %s (resolves to %v, not this node's %v)", name, as, mine))
		}
	}
	a, err := n.routeFrom(routeProbe)
	switch {
	case err == nil && !a.IsLoopback() && !a.IsUnspecified():
		return a, nil
	case err != nil:
		tried = append(tried, fmt.Sprintf("the default route (%v)", err))
	default:
		tried = append(tried, fmt.Sprintf("the default route (from %v)", a))
	}
	hint := ""
	if job.Launcher == "pmi" {
		hint = " (mpiexec.hydra -iface NAME picks an interface)"
	}
	return netip.Addr{}, fmt.Errorf("launch: the job spans nodes and %s names no host of it to bind toward; tried %s%s", job.Launcher, strings.Join(tried, ", "), hint)
}

// allLoopback reports whether every address of as is a loopback one.
func allLoopback(as []netip.Addr) bool {
	for _, a := range as {
		if !a.IsLoopback() {
			return false
		}
	}
	return true
}

// reachable returns the first of as that is one of this node's addresses
// (mine) and not a loopback one.
func reachable(as, mine []netip.Addr) (netip.Addr, bool) {
	for _, a := range as {
		a = a.Unmap()
		if !a.Is4() || a.IsLoopback() || a.IsUnspecified() {
			continue
		}
		for _, m := range mine {
			if m == a {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}
