package ixgbe

import (
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// The 82599 driver's control path: identity, link, statistics and address
// filters. Steering rules are in rules.go, bring-up and Close in ixgbe.go,
// the data path in queue.go.

// Info implements nicdrv.NIC.
func (n *NIC) Info() nicdrv.Info { return n.info }

// MAC implements nicdrv.NIC.
func (n *NIC) MAC() nicdrv.MAC { return n.mac }

// Pool implements nicdrv.NIC.
func (n *NIC) Pool(q int) *nicdrv.Pool {
	if q < 0 || q >= len(n.pools.Packet) {
		return nil
	}
	return n.pools.Packet[q]
}

// Link implements nicdrv.NIC.
func (n *NIC) Link() nicdrv.Link {
	l := n.r32(hw.LINKS)
	if l&hw.LinksUp == 0 || l == 0xFFFFFFFF {
		return nicdrv.Link{}
	}
	speed := map[uint32]int{hw.LinksSpeed10G: 10000, hw.LinksSpeed1G: 1000, hw.LinksSpeed100M: 100}[l&hw.LinksSpeedMask]
	return nicdrv.Link{Up: true, SpeedMbps: speed, FullDuplex: true}
}

// WaitLink implements nicdrv.NIC.
func (n *NIC) WaitLink(want bool, timeout time.Duration) (nicdrv.Link, error) {
	return n.d.WaitLink(n.closed.Load, n.Link, "LINKS.UP", want, timeout)
}

// Stats implements nicdrv.NIC.
func (n *NIC) Stats() (nicdrv.Stats, error) {
	if n.closed.Load() {
		return nicdrv.Stats{}, n.errorf("stats", nicdrv.ErrClosed)
	}
	n.ctlMu.Lock()
	n.readStats()
	s := n.hwStat
	n.ctlMu.Unlock()
	for _, r := range n.rx {
		s.RxNoBuffer += r.noBuf.Load()
		s.RxDropped += r.dropped.Load()
	}
	for _, t := range n.tx {
		s.TxRingFull += t.full.Load()
		s.TxRejected += t.rejected.Load()
	}
	s.Interrupts = n.nIntr.Load()
	return s, nil
}

// readStats adds the clear-on-read counters to hwStat (ctlMu held, or
// during Open).
func (n *NIC) readStats() {
	r64 := func(lo int) uint64 {
		l := uint64(n.r32(lo)) // low half first: reading the high half clears the counter
		return l | uint64(n.r32(lo+4))<<32
	}
	s := &n.hwStat
	s.RxErrors += uint64(n.r32(hw.CRCERRS)) + uint64(n.r32(hw.ILLERRC)) + uint64(n.r32(hw.ERRBC)) +
		uint64(n.r32(hw.RLEC)) + uint64(n.r32(hw.RUC)) + uint64(n.r32(hw.ROC)) + uint64(n.r32(hw.RFC)) + uint64(n.r32(hw.RJC))
	for i := 0; i < 8; i++ {
		s.RxMissed += uint64(n.r32(hw.MPC(i)))
	}
	for q := 0; q < min(n.opts.Queues, hw.QueueStats); q++ {
		s.RxNoDescriptor += uint64(n.r32(hw.QPRDC(q)))
	}
	s.RxFrames += uint64(n.r32(hw.GPRC))
	s.RxBroadcast += uint64(n.r32(hw.BPRC))
	s.RxMulticast += uint64(n.r32(hw.MPRC))
	s.TxFrames += uint64(n.r32(hw.GPTC))
	s.RxBytes += r64(hw.GORCL)
	s.TxBytes += r64(hw.GOTCL)
	n.r32(hw.TPR)
	n.r32(hw.TPT)
	r64(hw.TORL)
	n.r32(hw.MPTC)
	n.r32(hw.BPTC)
}

// SetPromiscuous implements nicdrv.NIC.
func (n *NIC) SetPromiscuous(on bool) error {
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if n.closed.Load() {
		return n.errorf("FCTRL.UPE", nicdrv.ErrClosed)
	}
	n.opts.Promiscuous = on
	n.w32(hw.FCTRL, n.fctrl())
	return nil
}

// SetMulticast implements nicdrv.NIC: the groups are hashed into the
// 4096-bit multicast table (a hash match may let other groups through,
// which the layer above filters).
func (n *NIC) SetMulticast(groups []nicdrv.MAC) error {
	mta, err := drv.MulticastTable(groups, hw.MTAHash)
	if err != nil {
		return n.errorf("MTA", err)
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if n.closed.Load() {
		return n.errorf("MTA", nicdrv.ErrClosed)
	}
	for i, v := range mta {
		n.w32(hw.MTA+4*i, v)
	}
	return nil
}
