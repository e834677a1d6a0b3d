package mx

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/gomx-dev/gomx/transport"
)

// Names maps board names ("host:0", as Open-MX prints them) to NIC ids and
// back, like Open-MX's peer table of hostnames. Boards register themselves
// (BoardOptions.Names); other entries are added with Register. Names that are
// not in the table fall back to the system resolver for UDP boards:
// "host:port" resolves host to an IPv4 address and packs it with the port
// (see transport.UDPNICID). A Names is safe for concurrent use; the zero
// value is empty and ready.
type Names struct {
	mu     sync.RWMutex
	byName map[string]transport.NICID
	byNIC  map[transport.NICID]string
}

// NewNames returns an empty name table.
func NewNames() *Names { return &Names{} }

// Register adds or replaces name → nic.
func (n *Names) Register(name string, nic transport.NICID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byName == nil {
		n.byName = make(map[string]transport.NICID)
		n.byNIC = make(map[transport.NICID]string)
	}
	if old, ok := n.byName[name]; ok {
		delete(n.byNIC, old)
	}
	n.byName[name] = nic
	n.byNIC[nic] = name
}

// Unregister removes name.
func (n *Names) Unregister(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nic, ok := n.byName[name]; ok {
		delete(n.byName, name)
		if n.byNIC[nic] == name {
			delete(n.byNIC, nic)
		}
	}
}

// HostnameToNICID looks name up in the table, then, if name has the form
// "host:port" with a numeric port, resolves host with the system resolver
// to a UDP NIC id. It returns ErrHostNotFound when both fail.
func (n *Names) HostnameToNICID(ctx context.Context, name string) (transport.NICID, error) {
	if n != nil {
		n.mu.RLock()
		nic, ok := n.byName[name]
		n.mu.RUnlock()
		if ok {
			return nic, nil
		}
	}
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not registered and is not host:port", ErrHostNotFound, name)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: bad port", ErrHostNotFound, name)
	}
	return ResolveUDP(ctx, host, uint16(p))
}

// NICIDToHostname returns the registered name of nic.
func (n *Names) NICIDToHostname(nic transport.NICID) (string, error) {
	if n != nil {
		n.mu.RLock()
		name, ok := n.byNIC[nic]
		n.mu.RUnlock()
		if ok {
			return name, nil
		}
	}
	return "", fmt.Errorf("%w: no name for NIC %v", ErrHostNotFound, nic)
}

// ResolveUDP resolves host with the system resolver and returns the UDP NIC
// id of its first IPv4 address and port.
func ResolveUDP(ctx context.Context, host string, port uint16) (transport.NICID, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return transport.UDPNICID(netip.AddrPortFrom(ip, port))
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return 0, fmt.Errorf("%w: %s: %v", ErrHostNotFound, host, err)
	}
	return transport.UDPNICID(netip.AddrPortFrom(ips[0], port))
}
