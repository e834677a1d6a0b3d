package ixgbe

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// A RuleID names the table a rule lives in (bits 31:24) and its entry
// there (bits 23:0): the EtherType filter index, the 5-tuple filter index,
// the Flow Director software index, or the receive address. The NIC reports
// the first three in a received frame's descriptor (ETQF index, FLM and the
// filter's software index) or, for a 5-tuple filter, the driver infers it
// (see ruleOf).
const (
	tagEtherType = 1 + iota
	tagFiveTuple
	tagFdir
	tagRAR
	tagShift = 24
)

func ruleID(tag, i int) nicdrv.RuleID { return nicdrv.RuleID(tag<<tagShift | i) }

// Flow Director compares one set of fields in every perfect filter
// (FDIRM and the port and address masks are global): UDP destination
// ports, or the flex word at one offset. The table's mode follows the
// rules in it, and changes only while it is empty.
const (
	fdirPorts = iota // L4 type and destination port compared (set at Open)
	fdirFlex         // the flex word only
)

// fdirRule is one Flow Director filter the driver installed.
type fdirRule struct {
	used bool
	in   hw.FdirInput // masked, as hashed
}

// ruleTables is what the driver knows of the NIC's filter tables (d.Mu).
type ruleTables struct {
	etqf      [hw.ETQFEntries]bool
	fiveTuple [hw.FiveTupleEntries]uint32 // destination port + 1; 0 when free
	fdir      []fdirRule                  // by software index
	fdirN     int
	fdirMode  int
	flexOff   int
	rar       [hw.RAREntries]bool // 0 is the station address
}

// RuleCapacity implements nicdrv.NIC: 8 EtherType filters; 128 5-tuple
// filters and 2048 Flow Director filters for UDP ports; 2048 Flow Director
// filters for flex words (the same table); 127 spare receive addresses for
// destination MACs (to queue 0). The 82599 matches no single byte.
func (n *NIC) RuleCapacity(k nicdrv.RuleKind) int {
	switch k {
	case nicdrv.RuleEtherType:
		return hw.ETQFEntries
	case nicdrv.RuleUDPDestPort:
		return hw.FiveTupleEntries + hw.FdirPerfect64K
	case nicdrv.RuleFlex:
		return hw.FdirPerfect64K
	case nicdrv.RuleDestMAC:
		return hw.RAREntries - 1
	}
	return 0
}

// AddRule implements nicdrv.NIC (see the package doc for what each kind
// becomes in the 82599).
func (n *NIC) AddRule(r nicdrv.Rule) (nicdrv.RuleID, error) {
	op := "rule " + r.String()
	if err := r.Check(); err != nil {
		return 0, n.errorf("rule", err)
	}
	if r.Queue >= n.opts.Queues {
		return 0, n.errorf(op, fmt.Errorf("queue %d of %d: %w", r.Queue, n.opts.Queues, nicdrv.ErrBadQueue))
	}
	n.d.Mu.Lock()
	defer n.d.Mu.Unlock()
	if n.d.Closed.Load() {
		return 0, n.errorf(op, nicdrv.ErrClosed)
	}
	var id nicdrv.RuleID
	var err error
	switch r.Kind {
	case nicdrv.RuleEtherType:
		id, err = n.addEtherType(r)
	case nicdrv.RuleUDPDestPort:
		if id, err = n.addFiveTuple(r); errors.Is(err, nicdrv.ErrTableFull) {
			id, err = n.addFdir(r, fdirPorts, hw.FdirInput{FlowType: hw.FlowUDP, DstPort: r.Port})
		}
	case nicdrv.RuleFlex:
		id, err = n.addFdir(r, fdirFlex, hw.FdirInput{Flex: [2]byte{byte(r.Flex >> 8), byte(r.Flex)}})
	case nicdrv.RuleDestMAC:
		id, err = n.addDestMAC(r)
	default:
		err = fmt.Errorf("the 82599 compares a 16-bit flex word of IP frames (RuleFlex), never one byte: demultiplex in software: %w", nicdrv.ErrNotSupported)
	}
	if err != nil {
		return 0, n.errorf(op, err)
	}
	return id, nil
}

// RemoveRule implements nicdrv.NIC.
func (n *NIC) RemoveRule(id nicdrv.RuleID) error {
	op := fmt.Sprintf("remove rule %#x", uint32(id))
	n.d.Mu.Lock()
	defer n.d.Mu.Unlock()
	if n.d.Closed.Load() {
		return n.errorf(op, nicdrv.ErrClosed)
	}
	i := int(id & (1<<tagShift - 1))
	t := &n.rules
	switch int(id >> tagShift) {
	case tagEtherType:
		if i < len(t.etqf) && t.etqf[i] {
			n.w32(hw.ETQF(i), 0)
			n.w32(hw.ETQS(i), 0)
			t.etqf[i] = false
			return nil
		}
	case tagFiveTuple:
		if i < len(t.fiveTuple) && t.fiveTuple[i] != 0 {
			n.w32(hw.FTQF(i), 0)
			n.w32(hw.L34TIMIR(i), 0)
			t.fiveTuple[i] = 0
			n.publishFiveTuple()
			return nil
		}
	case tagFdir:
		if i < len(t.fdir) && t.fdir[i].used {
			if err := n.fdirCommand(hw.FdircmdRemove, t.fdir[i].in, i); err != nil {
				return err
			}
			t.fdir[i] = fdirRule{}
			t.fdirN--
			return nil
		}
	case tagRAR:
		if i > 0 && i < len(t.rar) && t.rar[i] {
			n.w32(hw.RAH(i), 0)
			n.w32(hw.RAL(i), 0)
			t.rar[i] = false
			return nil
		}
	}
	return n.errorf(op, nicdrv.ErrNoRule)
}

// addEtherType takes a free EtherType filter.
func (n *NIC) addEtherType(r nicdrv.Rule) (nicdrv.RuleID, error) {
	if r.EtherType == 0x0800 || r.EtherType == 0x86DD {
		return 0, fmt.Errorf("IPv4 and IPv6 cannot be EtherType-filtered on the 82599; steer by UDP port: %w", nicdrv.ErrNotSupported)
	}
	for i, used := range n.rules.etqf {
		if used {
			continue
		}
		n.rules.etqf[i] = true
		n.w32(hw.ETQS(i), hw.EtqsQueueEn|uint32(r.Queue)<<hw.EtqsQueueShift)
		n.w32(hw.ETQF(i), hw.EtqfFilterEn|uint32(r.EtherType))
		return ruleID(tagEtherType, i), nil
	}
	return 0, fmt.Errorf("all %d EtherType filters (ETQF) in use: remove one: %w", hw.ETQFEntries, nicdrv.ErrTableFull)
}

// addFiveTuple takes a free 5-tuple filter comparing only the protocol
// (UDP) and the destination port.
func (n *NIC) addFiveTuple(r nicdrv.Rule) (nicdrv.RuleID, error) {
	for i, used := range n.rules.fiveTuple {
		if used != 0 {
			continue
		}
		n.rules.fiveTuple[i] = uint32(r.Port) + 1
		n.w32(hw.SAQF(i), 0)
		n.w32(hw.DAQF(i), 0)
		n.w32(hw.SDPQF(i), uint32(r.Port)<<hw.SdpqfDstPortShift)
		n.w32(hw.L34TIMIR(i), uint32(r.Queue)<<hw.L34tQueueShift|hw.L34tReserved|hw.L34tSizeBP)
		n.w32(hw.FTQF(i), hw.FtqfProtoUDP|1<<hw.FtqfPriorityShift|hw.FtqfMaskSrcAddr|hw.FtqfMaskDstAddr|
			hw.FtqfMaskSrcPort|hw.FtqfPoolMaskEn|hw.FtqfQueueEn)
		n.publishFiveTuple()
		return ruleID(tagFiveTuple, i), nil
	}
	return 0, fmt.Errorf("all %d 5-tuple filters in use: %w", hw.FiveTupleEntries, nicdrv.ErrTableFull)
}

// publishFiveTuple gives the receive path a fresh map from destination
// port to the 5-tuple rule that wins it (the lowest index, as the NIC
// picks among filters of equal priority), or nil when there is none.
func (n *NIC) publishFiveTuple() {
	m := map[uint16]nicdrv.RuleID{}
	for i := len(n.rules.fiveTuple) - 1; i >= 0; i-- {
		if p := n.rules.fiveTuple[i]; p != 0 {
			m[uint16(p-1)] = ruleID(tagFiveTuple, i)
		}
	}
	if len(m) == 0 {
		n.fivePorts.Store(nil)
		return
	}
	n.fivePorts.Store(&m)
}

// addFdir adds a Flow Director perfect filter for in (already masked as
// mode masks it), with the bucket hash the NIC computes for the flow. An
// empty table switches to the mode (and flex offset) the rule needs.
func (n *NIC) addFdir(r nicdrv.Rule, mode int, in hw.FdirInput) (nicdrv.RuleID, error) {
	t := &n.rules
	if t.fdir == nil {
		t.fdir = make([]fdirRule, hw.FdirPerfect64K)
	}
	switch {
	case t.fdirN > 0 && mode != t.fdirMode && mode == fdirFlex:
		return 0, fmt.Errorf("the Flow Director table holds UDP port rules, and the 82599 compares the same fields in all its perfect filters: remove them first: %w", nicdrv.ErrNotSupported)
	case t.fdirN > 0 && mode != t.fdirMode:
		return 0, fmt.Errorf("all %d 5-tuple filters are in use and Flow Director holds flex rules, which UDP port rules cannot share it with: %w", hw.FiveTupleEntries, nicdrv.ErrTableFull)
	case t.fdirN > 0 && mode == fdirFlex && r.Offset != t.flexOff:
		return 0, fmt.Errorf("the 82599 compares one flex offset, and flex rules at offset %d are installed: %w", t.flexOff, nicdrv.ErrNotSupported)
	case t.fdirN >= len(t.fdir) || n.r32(hw.FDIRFREE)&0xFFFF == 0:
		what := "flex"
		if mode == fdirPorts {
			what = "the 5-tuple filters and all"
		}
		return 0, fmt.Errorf("%s %d Flow Director perfect filters are in use: remove one: %w", what, len(t.fdir), nicdrv.ErrTableFull)
	}
	if t.fdirN == 0 && (mode != t.fdirMode || mode == fdirFlex && r.Offset != t.flexOff) {
		if err := n.initFdir(mode, r.Offset); err != nil {
			return 0, err
		}
	}
	sw := 0
	for t.fdir[sw].used {
		sw++
	}
	if err := n.fdirCommand(hw.FdircmdAdd|hw.FdircmdUpdate|hw.FdircmdQueueEn|uint32(r.Queue)<<hw.FdircmdQueueShift, in, sw); err != nil {
		return 0, err
	}
	if n.r32(hw.FDIRCMD)&hw.FdircmdCollision != 0 {
		return 0, fmt.Errorf("the Flow Director table refused the filter (collision): %w", nicdrv.ErrTableFull)
	}
	t.fdir[sw] = fdirRule{used: true, in: in}
	t.fdirN++
	return ruleID(tagFdir, sw), nil
}

// fdirCommand writes a perfect filter's fields and then FDIRCMD (cmd, with
// the flow's L4 type and LAST), and polls the command done.
func (n *NIC) fdirCommand(cmd uint32, in hw.FdirInput, sw int) error {
	bucket := hw.FdirBucketHash(in, hw.FdirBucketKey)
	n.w32(hw.FDIRIPSA, 0)
	n.w32(hw.FDIRIPDA, 0)
	n.w32(hw.FDIRPORT, uint32(in.DstPort)<<hw.FdirportDstShift)
	n.w32(hw.FDIRVLAN, uint32(in.Flex[0])<<hw.FdirvlanFlexShift|uint32(in.Flex[1])<<(hw.FdirvlanFlexShift+8))
	n.w32(hw.FDIRHASH, bucket|uint32(sw)<<hw.FdirhashSWShift)
	n.w32(hw.FDIRCMD, cmd|uint32(in.FlowType)<<hw.FdircmdL4TypeShift|hw.FdircmdLast)
	return n.waitReg("FDIRCMD", hw.FDIRCMD, func(v uint32) bool { return v&hw.FdircmdCmdMask == 0 })
}

// addDestMAC accepts a unicast address in a spare receive address: to
// queue 0 only (another queue needs VMDq pools).
func (n *NIC) addDestMAC(r nicdrv.Rule) (nicdrv.RuleID, error) {
	if r.Queue != 0 {
		return 0, fmt.Errorf("a destination MAC steers to another queue only with VMDq pools, which this driver does not set up: %w", nicdrv.ErrNotSupported)
	}
	if r.MAC.IsMulticast() {
		return 0, errors.New("a group address: use SetMulticast")
	}
	for i := 1; i < len(n.rules.rar); i++ {
		if n.rules.rar[i] {
			continue
		}
		n.rules.rar[i] = true
		m := r.MAC
		n.w32(hw.RAL(i), binary.LittleEndian.Uint32(m[0:4]))
		n.w32(hw.RAH(i), uint32(m[4])|uint32(m[5])<<8|1<<31)
		return ruleID(tagRAR, i), nil
	}
	return 0, fmt.Errorf("all %d spare receive addresses in use: remove one: %w", hw.RAREntries-1, nicdrv.ErrTableFull)
}

// ruleOf is the rule that steered a received frame: an EtherType filter
// (its index in pkt_info), a Flow Director filter (FLM, its software index
// in the hash field), or a 5-tuple filter, which the descriptor does not
// name: a UDP frame that matched neither of the others went through the
// 5-tuple filters first, and the driver's own map says which of them (if
// any) takes its destination port.
func (n *NIC) ruleOf(wb hw.RxWriteBack, fr []byte) nicdrv.RuleID {
	switch {
	case wb.PktInfo&hw.PktTypeETQF != 0:
		return ruleID(tagEtherType, int(wb.PktInfo>>hw.PktTypeETQFShift&7))
	case wb.Status&hw.RxStatFLM != 0:
		return ruleID(tagFdir, int(wb.Hash&0xFFFF))
	case wb.PktInfo&(hw.PktTypeIPv4|hw.PktTypeUDP) != hw.PktTypeIPv4|hw.PktTypeUDP:
		return 0 // 5-tuple filters match IPv4 only
	}
	m := n.fivePorts.Load()
	if m == nil || len(fr) < 14+20+4 {
		return 0
	}
	ihl := int(fr[14]&0xF) * 4
	if len(fr) < 14+ihl+4 {
		return 0
	}
	return (*m)[binary.BigEndian.Uint16(fr[14+ihl+2:])]
}

// initFdir (re)initialises Flow Director perfect filters for mode: the hash
// keys; masks that compare the L4 type and destination port (fdirPorts) or
// the flex word at flexOff (fdirFlex), nothing else; then FDIRCTRL, whose
// INIT_DONE is polled. The 82599 takes FDIRCTRL only with receive off, so
// a NIC receiving stops for the moment it takes (frames wait in the packet
// buffer); the table is empty after.
func (n *NIC) initFdir(mode, flexOff int) error {
	rxOn := n.r32(hw.RXCTRL)&hw.RxctrlRXEN != 0
	if rxOn {
		n.clr32(hw.RXCTRL, hw.RxctrlRXEN)
	}
	n.w32(hw.FDIRHKEY, hw.FdirBucketKey)
	n.w32(hw.FDIRSKEY, hw.FdirSignatureKey)
	n.w32(hw.FDIRSIP4M, 0xFFFFFFFF)
	n.w32(hw.FDIRDIP4M, 0xFFFFFFFF)
	ctrl := uint32(fdirPBAlloc | hw.FdirctrlPerfectMatch | hw.FdirctrlReportStatus | 0xA<<hw.FdirctrlMaxLenShift | 0xF<<hw.FdirctrlFullThShift)
	if mode == fdirFlex {
		n.w32(hw.FDIRM, hw.FdirmVLANID|hw.FdirmVLANP|hw.FdirmPool|hw.FdirmL4P)
		n.w32(hw.FDIRTCPM, 0xFFFFFFFF)
		n.w32(hw.FDIRUDPM, 0xFFFFFFFF)
		ctrl |= uint32(flexOff/2) << hw.FdirctrlFlexShift & hw.FdirctrlFlexMask
	} else {
		n.w32(hw.FDIRM, hw.FdirmVLANID|hw.FdirmVLANP|hw.FdirmPool|hw.FdirmFlex)
		n.w32(hw.FDIRTCPM, 0x0000FFFF) // source port not compared
		n.w32(hw.FDIRUDPM, 0x0000FFFF)
	}
	n.w32(hw.FDIRCTRL, ctrl)
	err := n.waitReg("FDIRCTRL.INIT_DONE", hw.FDIRCTRL, func(v uint32) bool { return v&hw.FdirctrlInitDone != 0 })
	if rxOn {
		n.set32(hw.RXCTRL, hw.RxctrlRXEN)
	}
	if err != nil {
		return err
	}
	n.rules.fdirMode, n.rules.flexOff = mode, flexOff
	return nil
}
