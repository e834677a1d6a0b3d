package ioat

import (
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/pci"
)

// fnVectors is the MSI-X vectors of one CBDMA function, shared by the
// channels opened on it with interrupts. A function has one vector per
// channel, vector n for channel n, routed so by INTRCTRL's MSI-X vector
// control bit (Linux's ioat_dma_setup_interrupts asks for CHANCNT
// vectors). The platform enables a function's vectors all at once, so
// the first channel opened with interrupts enables them for every
// channel, and the last one closed disables them.
type fnVectors struct {
	dev   pci.Device
	irqs  []*pci.Interrupt
	users []*Channel // by channel index; nil where none uses its vector
	n     int        // channels using a vector
}

// vecKey names a function: its address within its DMA domain (one VFIO
// container or one emulated platform), so wrappers of one device share
// its vectors and equal addresses on different platforms do not.
type vecKey struct {
	dma  pci.DMA
	addr pci.Address
}

// vectors holds the vector sets of the functions that have channels open
// with interrupts.
var vectors = struct {
	mu    sync.Mutex
	byKey map[vecKey]*fnVectors
}{byKey: map[vecKey]*fnVectors{}}

func keyOf(dev pci.Device) vecKey { return vecKey{dev.DMA(), dev.Address()} }

// acquireVector gives channel c its function's vector for its index,
// enabling the function's nch vectors if no channel of it has yet.
func acquireVector(c *Channel, nch int) error {
	vectors.mu.Lock()
	defer vectors.mu.Unlock()
	k := keyOf(c.dev)
	g := vectors.byKey[k]
	if g == nil {
		irqs, err := c.dev.EnableInterrupts(nch)
		if err != nil {
			if nch > 1 {
				return fmt.Errorf("ioat: %s: interrupts requested but unavailable: the function's %d channels need one MSI-X vector each (open without Interrupts to poll): %w", c.info.Addr, nch, err)
			}
			return fmt.Errorf("ioat: %s: interrupts requested but unavailable (open without Interrupts to poll): %w", c.info.Addr, err)
		}
		g = &fnVectors{dev: c.dev, irqs: irqs, users: make([]*Channel, nch)}
		vectors.byKey[k] = g
	}
	i := c.info.Index
	switch {
	case i >= len(g.irqs):
		return opErr(c.info.Addr, "interrupts", fmt.Errorf("%w: channel %d of a function whose vectors were enabled for %d channels", ErrBadRequest, i, len(g.irqs)))
	case g.users[i] != nil && !c.opts.TakeOver:
		return opErr(c.info.Addr, "interrupts", fmt.Errorf("%w: channel %d's vector is in use by a Channel of this process that was never closed: close it, or set Options.TakeOver", pci.ErrBusy, i))
	case g.users[i] != nil:
		// Taken over: the old Channel loses its vector (its waits
		// time out and poll) and its Close leaves the set alone.
		g.users[i].irq.Store(nil)
	default:
		g.n++
	}
	g.users[i] = c
	c.irq.Store(g.irqs[i])
	return nil
}

// releaseVector takes channel c's vector back, and disables the
// function's vectors when no channel uses one any more.
func releaseVector(c *Channel) {
	vectors.mu.Lock()
	defer vectors.mu.Unlock()
	c.irq.Store(nil)
	k := keyOf(c.dev)
	g := vectors.byKey[k]
	if g == nil || c.info.Index >= len(g.users) || g.users[c.info.Index] != c {
		return
	}
	g.users[c.info.Index] = nil
	g.n--
	if g.n == 0 {
		delete(vectors.byKey, k)
		_ = g.dev.DisableInterrupts()
	}
}

// rewireVectors has the platform write the function's MSI-X table again
// after a channel reset wiped it (QuirkMSIXResetWipe), and hands every
// channel using a vector its new Interrupt. A waiter on the old one
// wakes with an error and looks again. It does nothing when no channel
// of the function uses interrupts.
func rewireVectors(dev pci.Device) error {
	vectors.mu.Lock()
	defer vectors.mu.Unlock()
	g := vectors.byKey[keyOf(dev)]
	if g == nil {
		return nil
	}
	_ = g.dev.DisableInterrupts()
	irqs, err := g.dev.EnableInterrupts(len(g.irqs))
	if err != nil {
		return fmt.Errorf("ioat: %s: restore MSI-X after reset: %w", dev.Address(), err)
	}
	g.irqs = irqs
	for i, u := range g.users {
		if u != nil {
			u.irq.Store(irqs[i])
		}
	}
	return nil
}
