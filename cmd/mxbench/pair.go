package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// pair is two connected endpoints in this process, each on its own board.
type pair struct {
	a, b  *mx.Endpoint
	aAddr mx.Addr // a's address of b
	bAddr mx.Addr // b's address of a
	net   *loopback.Network
	what  string // the transport, for the report header
	close func() error
	// wire counts what the fault model did to the frames of both boards
	// so far; nil when no fault flag was given.
	wire func() fault.Counts
	// aBoards are side a's mx boards: a's, or each of its queues'.
	aBoards []*mx.Board
}

// boardOptions returns the board options the flags ask for.
func (f *benchFlags) boardOptions() mx.BoardOptions {
	o := mx.DefaultBoardOptions()
	o.Local.Off = true // measure the transport, not mx's in-process shortcut
	o.BusyPoll = f.spin()
	o.Yield = f.yieldPolicy()
	o.NoChecksum = f.noChecksum
	o.ZeroCopy.Off = f.noZeroCopy
	if f.rndv.IsSet {
		o.RendezvousThreshold = int(f.rndv.N)
	}
	if f.faults.any() {
		// A lossy wire is the point of the run: resend soon rather than
		// after Open-MX's half second, so a sweep finishes in seconds.
		o.ResendDelay = 20 * time.Millisecond
		o.PullTimeout = 50 * time.Millisecond
	}
	return o
}

// transports opens the two transports of an in-process run on the wire
// --transport names.
func (f *benchFlags) transports() (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	w, ok := wireNamed(f.transport)
	if !ok {
		return nil, nil, "", nil, fmt.Errorf("unknown transport %q", f.transport)
	}
	return w.open(f)
}

// wrapFaults puts the fault model on the frames tr sends and receives,
// for a wire that does not inject faults itself. On error it closes tr.
func (f *benchFlags) wrapFaults(tr transport.Transport, o fault.WrapOptions) (*fault.Transport, error) {
	w, err := fault.Wrap(tr, o)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("--loss, --reorder, --dup, --corrupt: %w", err)
	}
	return w, nil
}

// newPair opens both boards and endpoints and connects them both ways.
func (f *benchFlags) newPair(ctx context.Context) (*pair, error) {
	ta, tb, what, nw, err := f.transports()
	if err != nil {
		return nil, err
	}
	p := &pair{what: what, net: nw}
	switch {
	case f.faults.any() && nw != nil:
		p.wire = func() fault.Counts {
			st := nw.Stats()
			return fault.Counts{Frames: st.Sent, Dropped: st.Dropped, Duplicated: st.Duplicated,
				Reordered: st.Reordered, Corrupted: st.Corrupted, Delayed: st.Delayed}
		}
	case f.faults.any():
		// Each frame crosses the model once, in its sender's wrapper, as
		// on the loopback wire; the boards draw from their own seeds.
		wa, err := f.wrapFaults(ta, fault.WrapOptions{Send: f.faults.options(f.faults.seed)})
		if err != nil {
			tb.Close()
			return nil, err
		}
		wb, err := f.wrapFaults(tb, fault.WrapOptions{Send: f.faults.options(f.faults.seed + 1)})
		if err != nil {
			wa.Close()
			return nil, err
		}
		ta, tb = wa, wb
		p.what += ", " + f.faults.describe() + " (each board's sends)"
		p.wire = func() fault.Counts {
			sa, _ := wa.Counts()
			sb, _ := wb.Counts()
			return sa.Add(sb)
		}
	}
	var closers []func() error
	p.close = func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		if nw != nil {
			errs = append(errs, nw.Close())
		}
		return errors.Join(errs...)
	}
	ba, err := f.openBoard(ta, 0)
	if err != nil {
		tb.Close()
		p.close()
		return nil, err
	}
	closers = append(closers, ba.close)
	p.aBoards = ba.boards
	bb, err := f.openBoard(tb, 1)
	if err != nil {
		p.close()
		return nil, err
	}
	closers = append(closers, bb.close)
	key := uint32(f.key)
	if p.a, err = ba.open(0, key); err != nil {
		p.close()
		return nil, err
	}
	if p.b, err = bb.open(0, key); err != nil {
		p.close()
		return nil, err
	}
	if f.queues > 0 {
		p.what += fmt.Sprintf(", queued boards of %d queues%s", f.queues, ba.note)
	}
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if p.aAddr, err = p.a.Connect(cctx, p.b.Addr().NIC, p.b.ID(), key); err != nil {
		p.close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if p.bAddr, err = p.b.Connect(cctx, p.a.Addr().NIC, p.a.ID(), key); err != nil {
		p.close()
		return nil, fmt.Errorf("connect back: %w", err)
	}
	return p, nil
}

// localFor returns the local IPv4 address that routes toward peer, so a
// udp board bound to it has a NIC id the peer can answer.
func localFor(peer string) (string, error) {
	c, err := net.Dial("udp4", peer)
	if err != nil {
		return "", fmt.Errorf("no route to %s: %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String() + ":0", nil
}

// udpBaselinePair opens the two sockets of an in-process UDP baseline on
// 127.0.0.1.
func udpBaselinePair() (a, b transport.Transport, err error) {
	ua, err := listenPlainUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		return nil, nil, err
	}
	ub, err := listenPlainUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		ua.Close()
		return nil, nil, err
	}
	return ua, ub, nil
}

// pairCounts is a snapshot of both endpoints' copy accounting and
// counters, side a first.
type pairCounts struct {
	copies   [2]mx.CopyStats
	counters [2]mx.Counters
}

// counts snapshots both endpoints.
func (p *pair) counts() pairCounts {
	return pairCounts{copies: [2]mx.CopyStats{p.a.CopyStats(), p.b.CopyStats()},
		counters: [2]mx.Counters{p.a.Counters(), p.b.Counters()}}
}
