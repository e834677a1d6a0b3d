package e1000e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
)

// SelfTest opens the NIC at dev in the loopback mode asked for (LoopbackMAC
// or LoopbackPHY), sends frames of every size from 60 to 1514 bytes to its
// own address, checks that each comes back byte-exact, and closes the NIC.
// It needs no cable and no peer: it is the driver's answer to "is this NIC
// and its DMA working", as ethtool's self-test is Linux's. The cable's
// state does not matter; frames do not leave the NIC.
func SelfTest(dev pci.Device, mode Loopback, o Options) (err error) {
	if mode != LoopbackMAC && mode != LoopbackPHY {
		return fmt.Errorf("e1000e: self-test needs LoopbackMAC or LoopbackPHY, not mode %d", mode)
	}
	o.Loopback = mode
	o.Interrupts = false
	n, err := Open(dev, o)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := n.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := n.WaitLink(true, n.opts.LinkTimeout); err != nil {
		return err
	}
	rx := make([]*nicdrv.Buffer, 16)
	want := make([]byte, 2048)
	for size := 60; size <= 1514; size += 29 {
		b, err := n.pools.Packet[0].Get()
		if err != nil {
			return err
		}
		fill := func(fr []byte) {
			copy(fr[0:6], n.mac[:])
			copy(fr[6:12], n.mac[:])
			binary.BigEndian.PutUint16(fr[12:], 0x88B5)
			for i := 14; i < len(fr); i++ {
				fr[i] = byte(size*31 + i)
			}
		}
		fill(b.SetLen(size))
		if k, err := n.TxBatch(0, []*nicdrv.Buffer{b}); err != nil || k != 1 {
			_ = n.pools.Packet[0].Free(b)
			return n.errorf("self-test transmit", fmt.Errorf("frame of %d bytes not taken: %v", size, err))
		}
		fill(want[:size])
		deadline := time.Now().Add(n.opts.RegisterTimeout)
		for {
			k, err := n.RxBatch(0, rx)
			if err != nil {
				return err
			}
			if k > 0 {
				ok := k == 1 && bytes.Equal(rx[0].Data, want[:size])
				got := len(rx[0].Data)
				_ = n.pools.Packet[0].Free(rx[:k]...)
				if !ok {
					return n.errorf("self-test", fmt.Errorf("%v loopback: a %d-byte frame came back as %d frames, the first %d bytes and not byte-exact", mode, size, k, got))
				}
				break
			}
			if time.Now().After(deadline) {
				return n.errorf("self-test", fmt.Errorf("%v loopback: a %d-byte frame did not come back within %v: %w", mode, size, n.opts.RegisterTimeout, nicdrv.ErrTimeout))
			}
		}
	}
	return nil
}

// String names the loopback mode.
func (l Loopback) String() string {
	switch l {
	case LoopbackNone:
		return "no"
	case LoopbackMAC:
		return "MAC"
	case LoopbackPHY:
		return "PHY"
	}
	return fmt.Sprintf("Loopback(%d)", int(l))
}
