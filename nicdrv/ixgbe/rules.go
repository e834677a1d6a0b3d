package ixgbe

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// ruleTables is what the driver knows of the NIC's filter tables (ctlMu).
type ruleTables struct {
	etqf      [hw.ETQFEntries]bool
	fiveTuple [hw.FiveTupleEntries]bool
	fdir      []bool // by software index
	fdirN     int
	rar       int // receive addresses in use beyond RAR0
}

// AddRule implements nicdrv.NIC (see the package doc for what each kind
// becomes in the 82599).
func (n *NIC) AddRule(r nicdrv.Rule) error {
	if r.Queue < 0 || r.Queue >= n.opts.Queues {
		return n.errorf("rule "+r.String(), fmt.Errorf("queue %d of %d: %w", r.Queue, n.opts.Queues, nicdrv.ErrBadQueue))
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if n.closed.Load() {
		return n.errorf("rule", nicdrv.ErrClosed)
	}
	switch r.Kind {
	case nicdrv.RuleEtherType:
		return n.addEtherType(r)
	case nicdrv.RuleUDPDestPort:
		if err := n.addFiveTuple(r); err == nil || !errors.Is(err, nicdrv.ErrNotSupported) {
			return err
		}
		return n.addFdir(r)
	case nicdrv.RuleDestMAC:
		return n.addDestMAC(r)
	case nicdrv.RuleByte:
		return n.errorf("rule "+r.String(), fmt.Errorf("the 82599 compares a 16-bit flex field of IP frames only, never one byte: demultiplex in software: %w", nicdrv.ErrNotSupported))
	}
	return n.errorf("rule "+r.String(), fmt.Errorf("unknown rule kind: %w", nicdrv.ErrNotSupported))
}

// addEtherType takes a free EtherType filter.
func (n *NIC) addEtherType(r nicdrv.Rule) error {
	if r.EtherType == 0x0800 || r.EtherType == 0x86DD {
		return n.errorf("rule "+r.String(), fmt.Errorf("IPv4 and IPv6 cannot be EtherType-filtered on the 82599; steer by UDP port: %w", nicdrv.ErrNotSupported))
	}
	for i, used := range n.rules.etqf {
		if used {
			continue
		}
		n.rules.etqf[i] = true
		n.w32(hw.ETQS(i), hw.EtqsQueueEn|uint32(r.Queue)<<hw.EtqsQueueShift)
		n.w32(hw.ETQF(i), hw.EtqfFilterEn|uint32(r.EtherType))
		return nil
	}
	return n.errorf("rule "+r.String(), fmt.Errorf("all %d EtherType filters (ETQF) in use: %w", hw.ETQFEntries, nicdrv.ErrNotSupported))
}

// addFiveTuple takes a free 5-tuple filter comparing only the protocol
// (UDP) and the destination port.
func (n *NIC) addFiveTuple(r nicdrv.Rule) error {
	for i, used := range n.rules.fiveTuple {
		if used {
			continue
		}
		n.rules.fiveTuple[i] = true
		n.w32(hw.SAQF(i), 0)
		n.w32(hw.DAQF(i), 0)
		n.w32(hw.SDPQF(i), uint32(r.Port)<<hw.SdpqfDstPortShift)
		n.w32(hw.L34TIMIR(i), uint32(r.Queue)<<hw.L34tQueueShift|hw.L34tReserved|hw.L34tSizeBP)
		n.w32(hw.FTQF(i), hw.FtqfProtoUDP|1<<hw.FtqfPriorityShift|hw.FtqfMaskSrcAddr|hw.FtqfMaskDstAddr|
			hw.FtqfMaskSrcPort|hw.FtqfPoolMaskEn|hw.FtqfQueueEn)
		return nil
	}
	return n.errorf("rule "+r.String(), fmt.Errorf("all %d 5-tuple filters in use: %w", hw.FiveTupleEntries, nicdrv.ErrNotSupported))
}

// fdirInput is the hash input of a UDP destination port filter, masked as
// setupFdir masks every flow: L4 type and destination port compared.
func fdirInput(port uint16) hw.FdirInput {
	return hw.FdirInput{FlowType: hw.FlowUDP, DstPort: port}
}

// addFdir adds a Flow Director perfect filter, with the bucket hash the
// NIC computes for the flow.
func (n *NIC) addFdir(r nicdrv.Rule) error {
	if n.rules.fdir == nil {
		n.rules.fdir = make([]bool, hw.FdirPerfect64K)
	}
	if n.rules.fdirN >= len(n.rules.fdir) || n.r32(hw.FDIRFREE)&0xFFFF == 0 {
		return n.errorf("rule "+r.String(), fmt.Errorf("the 5-tuple filters and all %d Flow Director perfect filters are in use: %w", len(n.rules.fdir), nicdrv.ErrNotSupported))
	}
	sw := 0
	for n.rules.fdir[sw] {
		sw++
	}
	bucket := hw.FdirBucketHash(fdirInput(r.Port), hw.FdirBucketKey)
	n.w32(hw.FDIRIPSA, 0)
	n.w32(hw.FDIRIPDA, 0)
	n.w32(hw.FDIRPORT, uint32(r.Port)<<hw.FdirportDstShift)
	n.w32(hw.FDIRVLAN, 0)
	n.w32(hw.FDIRHASH, bucket|uint32(sw)<<hw.FdirhashSWShift)
	n.w32(hw.FDIRCMD, hw.FdircmdAdd|hw.FdircmdUpdate|hw.FlowUDP<<hw.FdircmdL4TypeShift|hw.FdircmdLast|
		hw.FdircmdQueueEn|uint32(r.Queue)<<hw.FdircmdQueueShift)
	if err := n.waitReg("FDIRCMD", hw.FDIRCMD, func(v uint32) bool { return v&hw.FdircmdCmdMask == 0 }); err != nil {
		return err
	}
	if n.r32(hw.FDIRCMD)&hw.FdircmdCollision != 0 {
		return n.errorf("rule "+r.String(), fmt.Errorf("the Flow Director table refused the filter (collision): %w", nicdrv.ErrNotSupported))
	}
	n.rules.fdir[sw] = true
	n.rules.fdirN++
	return nil
}

// addDestMAC accepts a unicast address in a spare receive address: to
// queue 0 only (another queue needs VMDq pools).
func (n *NIC) addDestMAC(r nicdrv.Rule) error {
	if r.Queue != 0 {
		return n.errorf("rule "+r.String(), fmt.Errorf("a destination MAC steers to another queue only with VMDq pools, which this driver does not set up: %w", nicdrv.ErrNotSupported))
	}
	if r.MAC.IsMulticast() {
		return n.errorf("rule "+r.String(), errors.New("a group address: use SetMulticast"))
	}
	if n.rules.rar+1 >= hw.RAREntries {
		return n.errorf("rule "+r.String(), fmt.Errorf("all %d receive addresses in use: %w", hw.RAREntries, nicdrv.ErrNotSupported))
	}
	n.rules.rar++
	m := r.MAC
	n.w32(hw.RAL(n.rules.rar), binary.LittleEndian.Uint32(m[0:4]))
	n.w32(hw.RAH(n.rules.rar), uint32(m[4])|uint32(m[5])<<8|1<<31)
	return nil
}
