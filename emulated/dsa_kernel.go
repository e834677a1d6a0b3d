package emulated

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/pci"
)

// The DSA model as the kernel's idxd driver leaves it for user space
// (DSAOptions.SVA): ConfigureKernel does the kernel's part, programming
// groups and WQs through the registers as idxd does when accel-config
// enables a device and its WQs; UserPortal is a WQ's portal page as a
// process gets it by mapping /dev/dsa/wqD.Q, taking MOVDIR64B on a
// dedicated WQ and ENQCMD on a shared one.

// KernelWQ is one work queue the kernel configures.
type KernelWQ struct {
	// Size is the WQ's entries; Shared selects shared mode (ENQCMD)
	// instead of dedicated (MOVDIR64B).
	Size   int
	Shared bool
}

// ConfigureKernel resets function fn and configures it as the idxd
// driver does for user WQs: WQ i in group i with engine i (spare engines
// spread over the groups), each WQ of the given size and mode with
// priority 1, the device's transfer and batch limits and PASID enabled,
// then enables the device and every WQ. It fails if the model recorded a
// violation or a command failed: the configuration is then not one the
// hardware would take.
func (p *DSA) ConfigureKernel(fn int, wqs []KernelWQ) error {
	if fn < 0 || fn >= len(p.devs) {
		return fmt.Errorf("emulated dsa: function %d: the platform has %d", fn, len(p.devs))
	}
	d, f := p.devs[fn], p.fns[fn]
	if !d.o.SVA {
		return fmt.Errorf("emulated dsa: ConfigureKernel on a platform without SVA: a kernel-owned DSA's user WQs take process addresses (DSAOptions.SVA)")
	}
	if len(wqs) == 0 || len(wqs) > min(d.o.WQs, d.o.Groups, d.o.Engines) {
		return fmt.Errorf("emulated dsa: %d WQs: want 1..%d (one group and engine each)", len(wqs), min(d.o.WQs, d.o.Groups, d.o.Engines))
	}
	if err := pci.SetCommand(f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
		return err
	}
	viol := d.nViol.Load()
	r := f.bar
	cmd := func(c, operand uint32) error {
		r.Write32(dsahw.RegCmd, dsahw.Command(c, operand))
		deadline := time.Now().Add(time.Second)
		for r.Read32(dsahw.RegCmdSts)&dsahw.CmdStsActive != 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("emulated dsa: command %d still active after 1s", c)
			}
			time.Sleep(time.Microsecond)
		}
		if code := uint8(r.Read32(dsahw.RegCmdSts)); code != dsahw.CmdOK {
			return fmt.Errorf("emulated dsa: command %d failed: %s", c, dsahw.CmdErrString(code))
		}
		return nil
	}
	if err := cmd(dsahw.CmdResetDevice, 0); err != nil {
		return err
	}
	for g := 0; g < d.o.Groups; g++ {
		base := dsaGrpCfgOff + g*dsahw.GrpCfgSize
		var wqBits, engs uint64
		if g < len(wqs) {
			wqBits = 1 << g
			for e := g; e < d.o.Engines; e += len(wqs) {
				engs |= 1 << e
			}
		}
		r.Write64(base+dsahw.GrpCfgWQs, wqBits)
		r.Write64(base+dsahw.GrpCfgEngines, engs)
	}
	for i := 0; i < d.o.WQs; i++ {
		base := dsaWQCfgOff + i*dsaCfgStride
		if i >= len(wqs) {
			r.Write32(base+dsahw.WQCfgSize, 0)
			continue
		}
		mode := uint32(1<<dsahw.WQPrioShift | 1<<28) // priority 1, PASID enabled
		if !wqs[i].Shared {
			mode |= dsahw.WQModeDedic
		}
		r.Write32(base+dsahw.WQCfgSize, uint32(wqs[i].Size))
		r.Write32(base+dsahw.WQCfgMode, mode)
		r.Write32(base+dsahw.WQCfgLimits, dsahw.WQLimits(d.o.MaxXferShift, d.o.MaxBatchShift))
	}
	if err := cmd(dsahw.CmdEnableDevice, 0); err != nil {
		return err
	}
	for i := range wqs {
		if err := cmd(dsahw.CmdEnableWQ, uint32(i)); err != nil {
			return err
		}
	}
	if n := d.nViol.Load(); n != viol {
		return fmt.Errorf("emulated dsa: the kernel's configuration drew %d violations: %s", n-viol, *d.lastViol.Load())
	}
	return nil
}

// DisableWQ disables WQ wq of function fn, as writing to the idxd user
// driver's unbind file does: descriptors written to its portal are then
// dropped (MOVDIR64B) or refused (ENQCMD).
func (p *DSA) DisableWQ(fn, wq int) error {
	f := p.fns[fn]
	f.bar.Write32(dsahw.RegCmd, dsahw.Command(dsahw.CmdDisableWQ, 1<<(wq%16)|uint32(wq/16)<<16))
	deadline := time.Now().Add(time.Second)
	for f.bar.Read32(dsahw.RegCmdSts)&dsahw.CmdStsActive != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("emulated dsa: DISABLE_WQ %d still active after 1s", wq)
		}
		time.Sleep(time.Microsecond)
	}
	return nil
}

// DSAPortal is one WQ's portal page as a process maps it from the WQ's
// character device: not a BAR of a PCI function the process owns, but a
// page of the kernel's device. It takes 64-byte writes only.
type DSAPortal struct {
	d      *dsaDevice
	wq     int
	closed atomic.Bool
	// Refused counts ENQCMDs the WQ refused (full or disabled).
	refused atomic.Uint64
}

// UserPortal returns WQ wq's portal on function fn.
func (p *DSA) UserPortal(fn, wq int) (*DSAPortal, error) {
	if fn < 0 || fn >= len(p.devs) || wq < 0 || wq >= p.devs[fn].o.WQs {
		return nil, fmt.Errorf("emulated dsa: no WQ %d on function %d", wq, fn)
	}
	if !p.devs[fn].o.SVA {
		return nil, fmt.Errorf("emulated dsa: UserPortal on a platform without SVA (DSAOptions.SVA)")
	}
	return &DSAPortal{d: p.devs[fn], wq: wq}, nil
}

// Write64B takes a descriptor written with MOVDIR64B: a dedicated WQ
// queues it, anything else drops it (and records a violation), as the
// posted write gives the writer no answer.
func (pt *DSAPortal) Write64B(rec *[64]byte) {
	if pt.closed.Load() {
		pt.d.violation("MOVDIR64B to WQ %d's portal after it was unmapped", pt.wq)
		return
	}
	pt.d.portalWrite(2, dsahw.PortalOffset(pt.wq), rec)
}

// Enqueue takes a descriptor written with ENQCMD and reports whether the
// shared WQ accepted it; false (the CPU's ZF) means full or not enabled:
// retry. ENQCMD to a dedicated WQ is refused and recorded as a violation.
func (pt *DSAPortal) Enqueue(rec *[64]byte) bool {
	d := pt.d
	if pt.closed.Load() {
		d.violation("ENQCMD to WQ %d's portal after it was unmapped", pt.wq)
		return false
	}
	d.qmu.Lock()
	defer d.qmu.Unlock()
	wq := &d.wqs[pt.wq]
	switch {
	case d.state != dsahw.StateEnabled || !wq.enabled:
		pt.refused.Add(1)
		return false
	case wq.dedicated:
		pt.refused.Add(1)
		d.violation("ENQCMD to dedicated WQ %d: dedicated WQs take MOVDIR64B", pt.wq)
		return false
	case wq.qN == wq.size:
		pt.refused.Add(1)
		return false
	}
	d.queueLocked(wq, rec)
	return true
}

// Refused counts the ENQCMDs the WQ refused.
func (pt *DSAPortal) Refused() uint64 { return pt.refused.Load() }

// Close unmaps the portal: later writes are violations.
func (pt *DSAPortal) Close() error {
	pt.closed.Store(true)
	return nil
}

// Hold makes function fn's engines take nothing from its WQs while hold
// is set, as a device busy with other work: descriptors queue up until
// the WQs are full, so a driver's handling of a full WQ (ENQCMD refused,
// dedicated WQ overfilled) can be tested.
func (p *DSA) Hold(fn int, hold bool) {
	d := p.devs[fn]
	d.paused.Store(hold)
	if !hold {
		d.kick()
	}
}
