// Package xdptest opens AF_XDP transports for the tests of the layers above
// package xdp (mx, transport/fault): one transport at each end of a veth
// pair in two throwaway network namespaces, built by internal/netnstest,
// which deletes them when the test ends. A test without the privileges
// skips saying what is missing, or fails when GOMX_REQUIRE_XDP=1 says the
// machine must run it. Package xdp's own tests open their transports
// themselves, with the options they vary.
package xdptest

import (
	"net/netip"
	"testing"

	"github.com/gomx-dev/gomx/internal/netnstest"
	"github.com/gomx-dev/gomx/xdp"
)

// RequireEnv is the environment variable that turns a missing privilege
// into a failure instead of a skip.
const RequireEnv = "GOMX_REQUIRE_XDP"

// Pair returns two AF_XDP transports with default options, a on one end of
// a one-queue veth pair and b on the other, or skips t (see the package
// doc). The caller owns and closes them; the namespaces go in t.Cleanup.
func Pair(t testing.TB) (a, b *xdp.Transport) {
	t.Helper()
	return PairWith(t, xdp.TransportOptions{}, xdp.TransportOptions{})
}

// PairWith is Pair with options for each end (a test that sends in place
// reserves region frames in a's UMEM: Socket.RegionFrames). Interface is
// set to the end's veth interface.
func PairWith(t testing.TB, oa, ob xdp.TransportOptions) (a, b *xdp.Transport) {
	t.Helper()
	netnstest.Require(t, RequireEnv)
	p := netnstest.NewPair(t, 1)
	oa.Interface, ob.Interface = p.A, p.B
	return openPair(t, p, oa, ob)
}

// QueuedPair returns two AF_XDP transports with UDP framing (port 40000
// at each end's address) on a veth pair of queues queues per end, so each
// serves its queues as transports of their own (xdp.Transport.OpenQueue,
// mx.NewQueuedBoard), or skips t. UMEMs are kept small (2048 frames per
// queue). The caller owns and closes them; the namespaces go in
// t.Cleanup.
func QueuedPair(t testing.TB, queues int) (a, b *xdp.Transport) {
	t.Helper()
	netnstest.Require(t, RequireEnv)
	p := netnstest.NewPair(t, queues)
	o := xdp.TransportOptions{Socket: xdp.Options{Frames: 2048}}
	oa, ob := o, o
	oa.Interface, oa.UDP = p.A, netip.AddrPortFrom(p.IPA, 40000)
	ob.Interface, ob.UDP = p.B, netip.AddrPortFrom(p.IPB, 40000)
	return openPair(t, p, oa, ob)
}

// openPair opens a transport with oa in p's namespace A and one with ob in
// B, or fails t (closing a when b fails).
func openPair(t testing.TB, p *netnstest.Pair, oa, ob xdp.TransportOptions) (a, b *xdp.Transport) {
	t.Helper()
	if err := p.InA(func() (err error) {
		a, err = xdp.NewTransport(oa)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.InB(func() (err error) {
		b, err = xdp.NewTransport(ob)
		return err
	}); err != nil {
		a.Close()
		t.Fatal(err)
	}
	return a, b
}
