package emulated

import (
	"encoding/binary"
	"sync"

	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// cbFunction is the register file of one CBDMA PCI function: the global
// registers below 0x80, shared by its channels, and one block per channel
// at 0x80 x (n+1). It routes each BAR0 access to the global registers or
// to the channel whose block holds it.
type cbFunction struct {
	f       *Function
	ver     uint8
	xferCap uint8
	caps    uint32 // DMACAPABILITY
	dcaOff  uint16
	chans   []*cbChannel

	// mu guards the global registers. A channel takes it while holding
	// its own mu (to raise an interrupt), never the other way round.
	mu        sync.Mutex
	intrCtrl  uint8
	intrDelay uint16
	attn      uint32 // ATTNSTATUS: bit n for channel n
	prefLimit uint8
}

// channelAt returns the channel whose register block holds BAR0 offset
// off and the offset within it, or nil.
func (fn *cbFunction) channelAt(off int) (*cbChannel, int) {
	base := hw.ChannelBase(0)
	if off < base {
		return nil, 0
	}
	if len(fn.chans) == 1 {
		// One channel: its block reaches past the stride on 3.4 (DRSCTL,
		// LTR), so everything above 0x80 is its.
		return fn.chans[0], off - base
	}
	n := off/0x80 - 1
	if n >= len(fn.chans) {
		return nil, 0
	}
	return fn.chans[n], off - hw.ChannelBase(n)
}

func (fn *cbFunction) read(off, w int) uint64 {
	if off >= 0x1000 {
		return 0 // MSI-X table and PBA are owned by the platform (VFIO)
	}
	if off < hw.ChannelBase(0) {
		return fn.readGlobal(off, w)
	}
	c, r := fn.channelAt(off)
	if c == nil {
		fn.chans[0].violation("read of %d bytes at BAR0 offset %#x: beyond the function's %d channel blocks", w, off, len(fn.chans))
		return 0
	}
	return c.read(r, w)
}

func (fn *cbFunction) write(off, w int, v uint64) {
	if off >= 0x1000 {
		fn.chans[0].violation("write to MSI-X table/PBA at %#x: owned by the platform, use EnableInterrupts", off)
		return
	}
	if off < hw.ChannelBase(0) {
		fn.writeGlobal(off, w, v)
		return
	}
	c, r := fn.channelAt(off)
	if c == nil {
		fn.chans[0].violation("write of %d bytes at BAR0 offset %#x: beyond the function's %d channel blocks", w, off, len(fn.chans))
		return
	}
	c.write(r, w, v)
}

func (fn *cbFunction) readGlobal(off, w int) uint64 {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	switch {
	case off == hw.RegChanCnt && w == 1:
		return uint64(len(fn.chans))
	case off == hw.RegXferCap && w == 1:
		return uint64(fn.xferCap)
	case off == hw.RegGenCtrl && w == 1:
		return 0
	case off == hw.RegIntrCtrl && w == 1:
		v := fn.intrCtrl
		if fn.attn != 0 {
			v |= hw.IntrCtrlStatus
			if v&hw.IntrCtrlMasterEnable != 0 {
				v |= hw.IntrCtrlStatusMaster
			}
		}
		return uint64(v)
	case off == hw.RegAttnStatus && w == 4:
		v := fn.attn
		fn.attn = 0 // read clears
		return uint64(v)
	case off == hw.RegCBVer && w == 1:
		return uint64(fn.ver)
	case off == hw.RegIntrDelay && w == 2:
		return uint64(fn.intrDelay) | 1<<15
	case off == hw.RegCSStatus && w == 2:
		return 1 << 3 // address remapping (IOMMU) on
	case off == hw.RegDMACap && w == 4:
		return uint64(fn.caps)
	case off == hw.RegDCAOffset && w == 2:
		return uint64(fn.dcaOff)
	case off == hw.RegChWPrefLimit && w == 1 && fn.ver >= hw.Ver34:
		return uint64(fn.prefLimit)
	}
	fn.chans[0].violation("read of %d bytes at BAR0 offset %#x: no such register", w, off)
	return 0
}

func (fn *cbFunction) writeGlobal(off, w int, v uint64) {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	switch {
	case off == hw.RegIntrCtrl && w == 1:
		fn.intrCtrl = uint8(v) & (hw.IntrCtrlMasterEnable | hw.IntrCtrlMSIXVector)
		if v&hw.IntrCtrlStatus != 0 {
			fn.attn = 0
		}
	case off == hw.RegGenCtrl && w == 1:
	case off == hw.RegIntrDelay && w == 2:
		fn.intrDelay = uint16(v) & 0x3FFF
	case off == hw.RegChWPrefLimit && w == 1 && fn.ver >= hw.Ver34:
		fn.prefLimit = uint8(v)
	default:
		fn.chans[0].violation("write of %d bytes at BAR0 offset %#x: read-only or no such register", w, off)
	}
}

// interrupt records channel n's attention and tells whether the function's
// interrupt control lets it through, and on which MSI-X vector: channel
// n's own with INTRCTRL.MSIX_VECTOR_CONTROL (one vector per channel, as
// Linux sets it up), else vector 0, which every channel shares (and
// ATTNSTATUS says which ones want attention).
func (fn *cbFunction) interrupt(n int) (vector int, ok bool) {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	fn.attn |= 1 << n
	if fn.intrCtrl&hw.IntrCtrlMSIXVector != 0 {
		vector = n
	}
	return vector, fn.intrCtrl&(hw.IntrCtrlMasterEnable|hw.IntrCtrlMSIXVector) != 0
}

// prefetchLimit is how many descriptors a DPS channel fetches ahead:
// CHWPREFLMT when software set it (Linux writes its pending level + 1),
// else 32.
func (fn *cbFunction) prefetchLimit() int {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.prefLimit == 0 {
		return 32
	}
	return int(fn.prefLimit)
}

func (fn *cbFunction) configWrite(off, n int) {
	if off <= pci.ConfigCommand+1 && off+n > pci.ConfigCommand {
		for _, c := range fn.chans {
			c.kick() // bus mastering may have been enabled
		}
	}
}

func (fn *cbFunction) flr() {
	for _, c := range fn.chans {
		c.flr()
	}
	fn.mu.Lock()
	fn.intrCtrl, fn.intrDelay, fn.attn, fn.prefLimit = 0, 0, 0, 0
	fn.mu.Unlock()
	if fn.f.hasConfig(hw.CfgChanErrInt) {
		fn.f.cfgMu.Lock()
		binary.LittleEndian.PutUint32(fn.f.cfg[hw.CfgChanErrInt:], 0)
		fn.f.cfgMu.Unlock()
	}
}

func (fn *cbFunction) close() {
	for _, c := range fn.chans {
		c.close()
	}
}
