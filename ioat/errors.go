package ioat

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/internal/sentinel"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// Sentinel errors. Operations return them wrapped, with the channel and the
// detail; test with errors.Is. ErrTimeout and ErrClosed are the values every
// gomx package uses for these meanings (internal/sentinel): ioat.ErrClosed
// is pci.ErrClosed, nicdrv.ErrClosed, transport.ErrClosed, and ErrTimeout is
// nicdrv.ErrTimeout.
var (
	// ErrNotCBDMA means the PCI function is not a CBDMA channel the driver
	// knows (vendor/device ID or CBVER).
	ErrNotCBDMA = errors.New("not a supported I/OAT (CBDMA) channel")
	// ErrTimeout means a register did not reach the expected value in time.
	ErrTimeout = sentinel.ErrTimeout
	// ErrRingFull means the descriptor ring has no room: reap completions
	// (Poll) and retry.
	ErrRingFull = errors.New("descriptor ring full")
	// ErrClosed means the channel or engine is closed; operations still
	// outstanding at Close fail with it.
	ErrClosed = sentinel.ErrClosed
	// ErrNoFill means the channel lacks the block-fill capability.
	ErrNoFill = errors.New("channel has no fill capability")
	// ErrBadRequest means a request's arguments are wrong (lengths,
	// offsets outside the mapping).
	ErrBadRequest = errors.New("bad request")
	// ErrDMAFault is matched by a *ChanError whose CHANERR bits say an
	// address was refused (source, destination, read or write data: an
	// unmapped or bad IOVA).
	ErrDMAFault = errors.New("DMA address fault")
	// ErrDescriptor is matched by a *ChanError whose CHANERR bits say the
	// descriptor itself was refused (length, control, alignment).
	ErrDescriptor = errors.New("descriptor refused")
	// ErrChannelBroken means recovery failed repeatedly; the channel takes no
	// more work. Close it and open it again.
	ErrChannelBroken = errors.New("channel broken after failed recovery")
	// ErrStalled is matched by a *ChanError for a request that failed
	// because its channel stopped completing for Options.Watchdog with
	// work outstanding; the channel was reset and carries on.
	ErrStalled = errors.New("channel stopped completing")
)

// ChanError is a request failure reported by the engine: the channel halted
// with CHANERR bits set while executing the request's descriptor.
type ChanError struct {
	// Addr is the channel's PCI function.
	Addr pci.Address
	// Op is "copy", "fill" or "null".
	Op string
	// ChanErr is the CHANERR register value.
	ChanErr uint32
	// ChanErrInt is config-space CHANERR_INT (read below CB 3.3 only).
	ChanErrInt uint32
	// Desc is the bus address of the failed descriptor.
	Desc uint64
	// Stalled is set when no CHANERR bit explains the failure: the
	// channel made no progress for Waited, in State, and the watchdog
	// reset it.
	Stalled bool
	State   hw.State
	Waited  time.Duration
}

// Error describes the failure in one line: the channel, the operation and
// its cause.
func (e *ChanError) Error() string {
	if e.Stalled {
		return fmt.Sprintf("ioat %s: %s failed: the channel made no progress for %v with the request outstanding (CHANSTS state %v, no CHANERR bits); the watchdog reset the channel", e.Addr, e.Op, e.Waited, e.State)
	}
	hint := ""
	switch {
	case e.ChanErr&(hw.ErrSrcAddr|hw.ErrReadData) != 0:
		hint = ": the source address was refused (not mapped for DMA, or beyond the device's reach)"
	case e.ChanErr&(hw.ErrDstAddr|hw.ErrWriteData) != 0:
		hint = ": the destination address was refused (not mapped for DMA, or beyond the device's reach)"
	case e.ChanErr&(hw.ErrDescLen|hw.ErrDescCtrl|hw.ErrDescriptor) != 0:
		hint = ": the descriptor was refused (a driver bug: please report it)"
	}
	return fmt.Sprintf("ioat %s: %s failed: CHANERR=%s%s", e.Addr, e.Op, hw.ErrString(e.ChanErr), hint)
}

// Is matches ErrDMAFault and ErrDescriptor by the CHANERR bits.
func (e *ChanError) Is(target error) bool {
	switch target {
	case ErrDMAFault:
		return e.ChanErr&(hw.ErrSrcAddr|hw.ErrDstAddr|hw.ErrReadData|hw.ErrWriteData|hw.ErrNextAddr) != 0
	case ErrDescriptor:
		return e.ChanErr&(hw.ErrDescriptor|hw.ErrDescCtrl|hw.ErrDescLen|hw.ErrChainAddr) != 0
	case ErrStalled:
		return e.Stalled
	}
	return false
}

func opErr(addr pci.Address, op string, err error) error {
	return &pci.OpError{Op: op, Addr: addr, Err: err}
}
