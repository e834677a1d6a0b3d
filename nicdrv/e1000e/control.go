package e1000e

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// The 82574L driver's control path: identity, link, statistics, address
// filters and steering rules. Bring-up and Close are in e1000e.go, the data
// path in queue.go and split.go.

// Info implements nicdrv.NIC.
func (n *NIC) Info() nicdrv.Info { return n.info }

// MAC implements nicdrv.NIC.
func (n *NIC) MAC() nicdrv.MAC { return n.mac }

// Pool implements nicdrv.NIC.
func (n *NIC) Pool(q int) *nicdrv.Pool { return n.pools.Queue(q) }

// Link implements nicdrv.NIC.
func (n *NIC) Link() nicdrv.Link {
	s := n.r32(hw.STATUS)
	if s&hw.StatusLU == 0 || s == 0xFFFFFFFF {
		return nicdrv.Link{}
	}
	speed := map[uint32]int{0: 10, hw.StatusSpeed100: 100, hw.StatusSpeed1000: 1000, hw.StatusSpeedMask: 1000}[s&hw.StatusSpeedMask]
	return nicdrv.Link{Up: true, SpeedMbps: speed, FullDuplex: s&hw.StatusFD != 0}
}

// WaitLink implements nicdrv.NIC.
func (n *NIC) WaitLink(want bool, timeout time.Duration) (nicdrv.Link, error) {
	return n.d.WaitLink(n.d.Closed.Load, n.Link, "STATUS.LU", want, timeout)
}

// Stats implements nicdrv.NIC.
func (n *NIC) Stats() (nicdrv.Stats, error) { return n.d.Stats(n.readStats) }

// readStats adds the clear-on-read counters to s (d.Mu held, or during
// Open).
func (n *NIC) readStats(s *nicdrv.Stats) {
	n.d.ReadStats(s)
	s.RxErrors += uint64(n.r32(hw.ALGNERRC)) + uint64(n.r32(hw.RXERRC))
	s.RxMissed += uint64(n.r32(hw.MPC))
	s.RxNoDescriptor += uint64(n.r32(hw.RNBC))
	n.d.Read64(hw.TOTL)
}

// SetPromiscuous implements nicdrv.NIC.
func (n *NIC) SetPromiscuous(on bool) error {
	return n.d.Locked("RCTL.UPE", func() error {
		n.opts.Promiscuous = on
		n.w32(hw.RCTL, n.rctl())
		return nil
	})
}

// SetMulticast implements nicdrv.NIC: the groups are hashed into the
// 4096-bit multicast table (a hash match may let other groups through,
// which the layer above filters).
func (n *NIC) SetMulticast(groups []nicdrv.MAC) error {
	return n.d.SetMulticast(groups, hw.MTAHash, hw.MTA)
}

// RuleCapacity implements nicdrv.NIC: the 82574 steers only by RSS hash,
// so the one kind it carries out is a destination MAC to queue 0 of a
// single-queue NIC, in its spare receive addresses.
func (n *NIC) RuleCapacity(k nicdrv.RuleKind) int {
	if k == nicdrv.RuleDestMAC && n.opts.Queues == 1 {
		return hw.RAREntries - 1
	}
	return 0
}

// AddRule implements nicdrv.NIC. The 82574 steers only by RSS hash, so the
// one rule it carries out is "destination MAC M to queue 0" on a
// single-queue NIC, by accepting M in a spare receive address register.
// Everything else fails with nicdrv.ErrNotSupported.
func (n *NIC) AddRule(r nicdrv.Rule) (nicdrv.RuleID, error) {
	if err := r.Check(); err != nil {
		return 0, n.errorf("rule", err)
	}
	if r.Queue >= n.opts.Queues {
		return 0, n.errorf("rule "+r.String(), nicdrv.ErrBadQueue)
	}
	if r.Kind != nicdrv.RuleDestMAC || r.Queue != 0 || n.opts.Queues != 1 {
		return 0, n.errorf("rule "+r.String(), fmt.Errorf("the 82574 steers only by RSS hash of IPv4 flows; demultiplex in software: %w", nicdrv.ErrNotSupported))
	}
	if r.MAC.IsMulticast() {
		return 0, n.errorf("rule "+r.String(), errors.New("a group address: use SetMulticast"))
	}
	n.d.Mu.Lock()
	defer n.d.Mu.Unlock()
	if n.d.Closed.Load() {
		return 0, n.errorf("rule", nicdrv.ErrClosed)
	}
	for i := 1; i < len(n.rar); i++ {
		if n.rar[i] {
			continue
		}
		n.rar[i] = true
		m := r.MAC
		n.w32(hw.RAL(i), uint32(m[0])|uint32(m[1])<<8|uint32(m[2])<<16|uint32(m[3])<<24)
		n.w32(hw.RAH(i), uint32(m[4])|uint32(m[5])<<8|1<<31)
		return nicdrv.RuleID(i), nil
	}
	return 0, n.errorf("rule "+r.String(), fmt.Errorf("all %d spare receive addresses in use: remove one: %w", hw.RAREntries-1, nicdrv.ErrTableFull))
}

// RemoveRule implements nicdrv.NIC: the receive address is cleared.
func (n *NIC) RemoveRule(id nicdrv.RuleID) error {
	n.d.Mu.Lock()
	defer n.d.Mu.Unlock()
	if n.d.Closed.Load() {
		return n.errorf("remove rule", nicdrv.ErrClosed)
	}
	i := int(id)
	if i < 1 || i >= len(n.rar) || !n.rar[i] {
		return n.errorf(fmt.Sprintf("remove rule %#x", uint32(id)), nicdrv.ErrNoRule)
	}
	n.w32(hw.RAH(i), 0)
	n.w32(hw.RAL(i), 0)
	n.rar[i] = false
	return nil
}

// TxRingState describes TX queue q for a stalled sender: the NIC's head
// and tail registers, the driver's clean and tail slots, and the
// descriptors of the around slots each side of the head register (address,
// length, command, DD), so that a ring the NIC stopped processing shows
// where and on what. It reads registers and takes the queue's lock, so it
// is for diagnosis, not the data path.
func (n *NIC) TxRingState(q, around int) string {
	if q < 0 || q >= len(n.tx) {
		return fmt.Sprintf("TX queue %d: no such queue", q)
	}
	if n.d.Closed.Load() {
		return fmt.Sprintf("TX queue %d: NIC closed", q)
	}
	t := n.tx[q]
	t.mu.Lock()
	defer t.mu.Unlock()
	var sb strings.Builder
	head, tail := n.r32(hw.Q(hw.TDH, q)), n.r32(hw.Q(hw.TDT, q))
	fmt.Fprintf(&sb, "TX queue %d: TDH %d TDT %d TCTL %#x, driver clean %d tail %d free %d, %d slots",
		q, head, tail, n.r32(hw.TCTL), t.s.Clean, t.s.Tail, t.s.Free(), t.size)
	for i := -around; i <= around; i++ {
		s := ((int(head)+i)%int(t.size) + int(t.size)) % int(t.size)
		d := t.desc(uint32(s))
		lo, hi := load64(d[0:]), load64(d[8:])
		fmt.Fprintf(&sb, "\n  slot %d: addr %#x len %d cmd %#x status %#x buffer %v",
			s, lo, uint16(hi), uint8(hi>>24), uint8(hi>>32), t.s.Slot[s] != nil)
	}
	return sb.String()
}
