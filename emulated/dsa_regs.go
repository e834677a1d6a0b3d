package emulated

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/gomx-dev/gomx/ioat/dsahw"
)

// The DSA model's control path: its register file (the capabilities,
// GENCFG and GENCTRL, the group and WQ configuration tables) and how reads
// and writes of it act, the commands written to CMD (enable and disable
// the device or a WQ, drain, abort, reset) and the checks an enable makes
// of the configuration. The platform and the device's state are in dsa.go;
// the portals and the engine that executes descriptors in dsa_exec.go.

func (d *dsaDevice) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	d.lastViol.Store(&s)
	d.nViol.Add(1)
}

// resetLocked puts the device in its power-on state: disabled, tables
// cleared, queues emptied (their descriptors never complete).
func (d *dsaDevice) resetLocked() {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	d.state = dsahw.StateDisabled
	d.gencfg, d.genctrl, d.intcause = 0, 0, 0
	d.swerr = [4]uint64{}
	d.grp = make([][dsahw.GrpCfgSize / 8]uint64, d.o.Groups)
	d.wqs = make([]dsaWQ, d.o.WQs)
	d.perm = make([]uint32, 1+d.o.WQs)
	d.work.Store(0)
	d.inject = nil
}

func (d *dsaDevice) gencap() uint64 {
	return dsahw.GenCapOverlapCopy | dsahw.GenCapCacheControlMem | dsahw.GenCapConfigEn |
		uint64(d.o.MaxXferShift)<<dsahw.GenCapMaxXferShift | uint64(d.o.MaxBatchShift)<<dsahw.GenCapMaxBatchShift
}

func (d *dsaDevice) wqcap() uint64 {
	return uint64(d.o.TotalWQSize) | uint64(d.o.WQs)<<16 | dsahw.WQCapDedicated | dsahw.WQCapShared | dsahw.WQCapPriority
}

func (d *dsaDevice) opcap() [4]uint64 {
	v := uint64(1<<dsahw.OpNoop | 1<<dsahw.OpBatch | 1<<dsahw.OpDrain | 1<<dsahw.OpMemMove)
	if !d.o.NoFill {
		v |= 1 << dsahw.OpFill
	}
	if !d.o.NoCompare {
		v |= 1 << dsahw.OpCompare
	}
	if !d.o.NoCRC {
		v |= 1 << dsahw.OpCRCGen
	}
	return [4]uint64{v}
}

func (d *dsaDevice) read(off, w int) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.read64Locked(off &^ 7)
	if !ok {
		d.violation("read of %d bytes at BAR0 %#x: no register there", w, off)
		return ^uint64(0) >> (64 - 8*w)
	}
	v >>= 8 * uint(off&7)
	if w < 8 {
		v &= 1<<(8*w) - 1
	}
	return v
}

// read64Locked returns the aligned 64-bit word at off.
func (d *dsaDevice) read64Locked(off int) (uint64, bool) {
	switch {
	case off == dsahw.RegVersion:
		return 0x100, true
	case off == dsahw.RegGenCap:
		return d.gencap(), true
	case off == dsahw.RegWQCap:
		return d.wqcap(), true
	case off == dsahw.RegGrpCap:
		return uint64(d.o.Groups), true
	case off == dsahw.RegEngCap:
		return uint64(d.o.Engines), true
	case off >= dsahw.RegOpCap && off < dsahw.RegOpCap+32:
		return d.opcap()[(off-dsahw.RegOpCap)/8], true
	case off == dsahw.RegTableOff:
		return dsaGrpCfgOff/dsahw.TableUnit | dsaWQCfgOff/dsahw.TableUnit<<dsahw.TableWQCfgShift | dsaMSIXPerm/dsahw.TableUnit<<dsahw.TableMSIXPermShift, true
	case off == dsahw.RegTableOff+8, off == 0x18, off == 0x28, off == dsahw.RegCmdCap, off == 0x70, off == 0x78:
		return 0, true
	case off == dsahw.RegGenCfg:
		return uint64(d.gencfg), true
	case off == dsahw.RegGenCtrl:
		return uint64(d.genctrl), true
	case off == dsahw.RegGenSts:
		return uint64(d.state), true
	case off == dsahw.RegIntCause:
		return uint64(d.intcause), true
	case off == dsahw.RegCmd:
		return 0, true
	case off == dsahw.RegCmdSts:
		v := d.cmdsts
		if time.Now().Before(d.activeUntil) {
			v |= dsahw.CmdStsActive
		}
		return uint64(v), true
	case off >= dsahw.RegSWErr && off < dsahw.RegSWErr+32:
		return d.swerr[(off-dsahw.RegSWErr)/8], true
	case off >= dsaGrpCfgOff && off < dsaGrpCfgOff+d.o.Groups*dsahw.GrpCfgSize:
		g := (off - dsaGrpCfgOff) / dsahw.GrpCfgSize
		return d.grp[g][(off-dsaGrpCfgOff)%dsahw.GrpCfgSize/8], true
	case off >= dsaWQCfgOff && off < dsaWQCfgOff+d.o.WQs*dsaCfgStride:
		wq := &d.wqs[(off-dsaWQCfgOff)/dsaCfgStride]
		i := (off - dsaWQCfgOff) % dsaCfgStride / 4
		cfg := wq.cfg
		if wq.enabled {
			cfg[dsahw.WQCfgState/4] |= dsahw.WQStateEnable << dsahw.WQStateShift
		}
		return uint64(cfg[i]) | uint64(cfg[i+1])<<32, true
	case off >= dsaMSIXPerm && off < dsaMSIXPerm+8*len(d.perm):
		return uint64(d.perm[(off-dsaMSIXPerm)/8]), true
	}
	return 0, false
}

func (d *dsaDevice) write(off, w int, v uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case off == dsahw.RegCmd && w == 4:
		d.commandLocked(uint32(v))
	case off == dsahw.RegGenCfg && w == 4:
		if d.state != dsahw.StateDisabled {
			d.violation("GENCFG written while the device is %s: it is read-only once enabled", dsahw.StateName(d.state))
			return
		}
		d.gencfg = uint32(v) & dsaGenCfgMask
	case off == dsahw.RegGenCtrl && w == 4:
		d.genctrl = uint32(v) & dsahw.GenCtrlSoftErrIntEn
	case off == dsahw.RegIntCause && w == 4:
		d.intcause &^= uint32(v)
	case off >= dsahw.RegSWErr && off < dsahw.RegSWErr+32:
		if off == dsahw.RegSWErr {
			// Writing valid and overflow back clears the entry.
			if v&(dsahw.SWErrValid|dsahw.SWErrOverflow) != 0 {
				d.swerr = [4]uint64{}
			}
			return
		}
		d.violation("write to SWERR+%#x: only the first word's valid and overflow bits are writable", off-dsahw.RegSWErr)
	case off >= dsaGrpCfgOff && off < dsaGrpCfgOff+d.o.Groups*dsahw.GrpCfgSize:
		if d.state != dsahw.StateDisabled {
			d.violation("GRPCFG written while the device is %s: configuration is read-only once the device is enabled", dsahw.StateName(d.state))
			return
		}
		d.tableWrite(d.grp[(off-dsaGrpCfgOff)/dsahw.GrpCfgSize][:], (off-dsaGrpCfgOff)%dsahw.GrpCfgSize, w, v)
	case off >= dsaWQCfgOff && off < dsaWQCfgOff+d.o.WQs*dsaCfgStride:
		wq := &d.wqs[(off-dsaWQCfgOff)/dsaCfgStride]
		if wq.enabled {
			d.violation("WQCFG of WQ %d written while the WQ is enabled: disable it first", (off-dsaWQCfgOff)/dsaCfgStride)
			return
		}
		o := (off - dsaWQCfgOff) % dsaCfgStride
		for i := 0; i < w; i += 4 {
			if (o+i)/4 == dsahw.WQCfgState/4 || (o+i)/4 == 7 {
				continue // state and reserved: read-only
			}
			wq.cfg[(o+i)/4] = uint32(v >> (8 * i))
		}
	case off >= dsaMSIXPerm && off < dsaMSIXPerm+8*len(d.perm) && w == 4:
		d.perm[(off-dsaMSIXPerm)/8] = uint32(v)
	default:
		d.violation("write of %d bytes (%#x) at BAR0 %#x: no writable register of that width there", w, v, off)
	}
}

// tableWrite stores a write of w bytes at byte offset o into a table of
// 64-bit words.
func (d *dsaDevice) tableWrite(t []uint64, o, w int, v uint64) {
	i, sh := o/8, uint(o%8)*8
	mask := ^uint64(0)
	if w < 8 {
		mask = (1<<(8*w) - 1) << sh
	}
	t[i] = t[i]&^mask | v<<sh&mask
}

// commandLocked runs a CMD write (dsahw.Cmd*). The command takes effect
// at once; CMDSTS stays active for CommandDelay, during which a second
// command is a violation and is ignored.
func (d *dsaDevice) commandLocked(v uint32) {
	now := time.Now()
	if now.Before(d.activeUntil) {
		d.violation("CMD %#x written while CMDSTS is still active: poll CMDSTS.active clear before the next command", v)
		return
	}
	cmd, operand := v>>dsahw.CmdShift&0x1F, v&0xFFFFF
	code := d.runCommand(cmd, operand)
	d.cmdsts = uint32(code)
	d.activeUntil = now.Add(d.o.CommandDelay)
	if v&dsahw.CmdIntReq != 0 {
		d.intcause |= dsahw.IntCauseCommand
		d.raise(0)
	}
}

func (d *dsaDevice) runCommand(cmd, operand uint32) uint8 {
	switch cmd {
	case dsahw.CmdEnableDevice:
		return d.enableDevice()
	case dsahw.CmdDisableDevice:
		if d.state != dsahw.StateEnabled {
			return dsahw.CmdErrDisDevEnabled
		}
		d.drainLocked(-1)
		d.qmu.Lock()
		for i := range d.wqs {
			d.wqs[i].enabled = false
		}
		d.state = dsahw.StateDisabled
		d.qmu.Unlock()
	case dsahw.CmdDrainAll:
		d.drainLocked(-1)
	case dsahw.CmdAbortAll:
		for i := range d.wqs {
			d.abortLocked(i)
		}
	case dsahw.CmdResetDevice:
		d.resetLocked()
	case dsahw.CmdEnableWQ:
		return d.enableWQ(int(operand))
	case dsahw.CmdDisableWQ, dsahw.CmdDrainWQ, dsahw.CmdAbortWQ, dsahw.CmdResetWQ:
		base := int(operand>>16) * 16
		mask := operand & 0xFFFF
		if mask == 0 {
			return dsahw.CmdErrInvalWQIdx
		}
		for m := mask; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros32(m)
			if i >= len(d.wqs) {
				return dsahw.CmdErrInvalWQIdx
			}
			if cmd != dsahw.CmdResetWQ && !d.wqs[i].enabled {
				return dsahw.CmdErrWQNotEnabled
			}
		}
		for m := mask; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros32(m)
			switch cmd {
			case dsahw.CmdDisableWQ:
				d.drainLocked(i)
				d.qmu.Lock()
				d.wqs[i].enabled = false
				d.qmu.Unlock()
			case dsahw.CmdDrainWQ:
				d.drainLocked(i)
			case dsahw.CmdAbortWQ:
				d.abortLocked(i)
			case dsahw.CmdResetWQ:
				d.abortLocked(i)
				d.qmu.Lock()
				d.wqs[i] = dsaWQ{}
				d.qmu.Unlock()
			}
		}
	default:
		d.violation("CMD %d: no such command", cmd)
		return dsahw.CmdErrInvalCmd
	}
	return dsahw.CmdOK
}

// enableDevice checks the group configuration as the hardware does.
func (d *dsaDevice) enableDevice() uint8 {
	if d.state == dsahw.StateEnabled {
		return dsahw.CmdErrDevEnabled
	}
	if !d.f.busMaster() {
		d.violation("ENABLE_DEVICE with bus mastering off")
		return dsahw.CmdErrBusMaster
	}
	total := 0
	for i := range d.wqs {
		total += int(d.wqs[i].cfg[0] & 0xFFFF)
	}
	if total > d.o.TotalWQSize {
		d.violation("ENABLE_DEVICE with WQ sizes adding up to %d, over WQCAP's total %d", total, d.o.TotalWQSize)
		return dsahw.CmdErrWQSizeERange
	}
	var wqOwner, engOwner uint64
	for g := range d.grp {
		wqs := d.grp[g][0] | d.grp[g][1] | d.grp[g][2] | d.grp[g][3]
		engs := d.grp[g][dsahw.GrpCfgEngines/8]
		if d.grp[g][1]|d.grp[g][2]|d.grp[g][3] != 0 || wqs>>uint(d.o.WQs) != 0 || engs>>uint(d.o.Engines) != 0 {
			d.violation("ENABLE_DEVICE: group %d names a WQ or engine beyond WQCAP/ENGCAP (WQs %#x, engines %#x)", g, wqs, engs)
			return dsahw.CmdErrGrpConfig4
		}
		if wqs != 0 && engs == 0 {
			d.violation("ENABLE_DEVICE: group %d has WQs %#x and no engine", g, wqs)
			return dsahw.CmdErrGrpConfig
		}
		if engOwner&engs != 0 {
			d.violation("ENABLE_DEVICE: engines %#x in two groups", engOwner&engs)
			return dsahw.CmdErrGrpConfig2
		}
		if wqOwner&wqs != 0 {
			d.violation("ENABLE_DEVICE: WQs %#x in two groups", wqOwner&wqs)
			return dsahw.CmdErrGrpConfig3
		}
		engOwner |= engs
		wqOwner |= wqs
	}
	d.qmu.Lock()
	d.state = dsahw.StateEnabled
	d.qmu.Unlock()
	return dsahw.CmdOK
}

func (d *dsaDevice) inGroup(wq int) bool {
	for g := range d.grp {
		if d.grp[g][0]>>uint(wq)&1 != 0 && d.grp[g][dsahw.GrpCfgEngines/8] != 0 {
			return true
		}
	}
	return false
}

// enableWQ checks a WQ's configuration as the hardware does.
func (d *dsaDevice) enableWQ(i int) uint8 {
	if i >= len(d.wqs) {
		d.violation("ENABLE_WQ %d: the device has %d WQs", i, len(d.wqs))
		return dsahw.CmdErrInvalWQIdx
	}
	if d.state != dsahw.StateEnabled {
		d.violation("ENABLE_WQ %d with the device %s: enable the device first", i, dsahw.StateName(d.state))
		return dsahw.CmdErrDevNotEnabled
	}
	wq := &d.wqs[i]
	if wq.enabled {
		return dsahw.CmdErrWQEnabled
	}
	size := int(wq.cfg[0] & 0xFFFF)
	mode := wq.cfg[dsahw.WQCfgMode/4]
	lim := wq.cfg[dsahw.WQCfgLimits/4]
	xs, bs := uint(lim&0x1F), uint(lim>>5&0xF)
	switch {
	case size == 0:
		d.violation("ENABLE_WQ %d with size 0", i)
		return dsahw.CmdErrWQSize
	case size+d.enabledSize() > d.o.TotalWQSize:
		d.violation("ENABLE_WQ %d of size %d with %d entries already in enabled WQs: over WQCAP's total %d", i, size, d.enabledSize(), d.o.TotalWQSize)
		return dsahw.CmdErrWQSize
	case mode>>dsahw.WQPrioShift&0xF == 0:
		d.violation("ENABLE_WQ %d with priority 0", i)
		return dsahw.CmdErrWQPriority
	case mode&dsahw.WQModeDedic == 0 && mode>>28&1 == 0:
		d.violation("ENABLE_WQ %d in shared mode without PASID: a shared WQ needs PASID (kernel SVA); use dedicated mode", i)
		return dsahw.CmdErrPASIDEn
	case mode&dsahw.WQModeBOF != 0:
		d.violation("ENABLE_WQ %d with block-on-fault, which GENCAP does not offer", i)
		return dsahw.CmdErrBOFEn
	case xs > d.o.MaxXferShift || xs == 0:
		d.violation("ENABLE_WQ %d with max_xfer_shift %d (GENCAP allows 1..%d)", i, xs, d.o.MaxXferShift)
		return dsahw.CmdErrMaxXferSize
	case bs > d.o.MaxBatchShift || bs == 0:
		d.violation("ENABLE_WQ %d with max_batch_shift %d (GENCAP allows 1..%d)", i, bs, d.o.MaxBatchShift)
		return dsahw.CmdErrMaxBatchSize
	case !d.inGroup(i):
		d.violation("ENABLE_WQ %d: the WQ is in no group with an engine", i)
		return dsahw.CmdErrConfig
	}
	d.qmu.Lock()
	wq.enabled, wq.dedicated = true, mode&dsahw.WQModeDedic != 0
	wq.size, wq.xferShift, wq.batchShift = size, xs, bs
	wq.q = make([][dsahw.DescSize]byte, size)
	wq.qHead, wq.qN = 0, 0
	d.qmu.Unlock()
	return dsahw.CmdOK
}

// enabledSize is the entries the enabled WQs hold.
func (d *dsaDevice) enabledSize() int {
	n := 0
	for i := range d.wqs {
		if d.wqs[i].enabled {
			n += d.wqs[i].size
		}
	}
	return n
}

// drainLocked waits (bounded) for WQ i's descriptors, or every WQ's with
// i < 0, to complete; the engine runs them meanwhile.
func (d *dsaDevice) drainLocked(i int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		pending := 0
		d.qmu.Lock()
		for j := range d.wqs {
			if i < 0 || i == j {
				pending += d.wqs[j].qN
			}
		}
		d.qmu.Unlock()
		if pending == 0 {
			return
		}
		// Run them here: the engine goroutine waits on mu.
		d.stepLocked()
	}
}

func (d *dsaDevice) abortLocked(i int) {
	d.qmu.Lock()
	wq := &d.wqs[i]
	d.work.Add(-int32(wq.qN))
	wq.qHead, wq.qN = 0, 0
	d.qmu.Unlock()
}
