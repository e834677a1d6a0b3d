package ixgbe

import (
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
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
func (n *NIC) Pool(q int) *nicdrv.Pool { return n.pools.Queue(q) }

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
	return n.d.WaitLink(n.d.Closed.Load, n.Link, "LINKS.UP", want, timeout)
}

// Stats implements nicdrv.NIC.
func (n *NIC) Stats() (nicdrv.Stats, error) { return n.d.Stats(n.readStats) }

// readStats adds the clear-on-read counters to s (d.Mu held, or during
// Open).
func (n *NIC) readStats(s *nicdrv.Stats) {
	n.d.ReadStats(s)
	s.RxErrors += uint64(n.r32(hw.ILLERRC)) + uint64(n.r32(hw.ERRBC)) + uint64(n.r32(hw.RLEC)) + uint64(n.r32(hw.RFC)) + uint64(n.r32(hw.RJC))
	for i := 0; i < 8; i++ {
		s.RxMissed += uint64(n.r32(hw.MPC(i)))
	}
	for q := 0; q < min(n.opts.Queues, hw.QueueStats); q++ {
		s.RxNoDescriptor += uint64(n.r32(hw.QPRDC(q)))
	}
}

// SetPromiscuous implements nicdrv.NIC.
func (n *NIC) SetPromiscuous(on bool) error {
	return n.d.Locked("FCTRL.UPE", func() error {
		n.opts.Promiscuous = on
		n.w32(hw.FCTRL, n.fctrl())
		return nil
	})
}

// SetMulticast implements nicdrv.NIC: the groups are hashed into the
// 4096-bit multicast table (a hash match may let other groups through,
// which the layer above filters).
func (n *NIC) SetMulticast(groups []nicdrv.MAC) error {
	return n.d.SetMulticast(groups, hw.MTAHash, hw.MTA)
}
