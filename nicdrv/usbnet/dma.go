package usbnet

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/pci"
)

// hostDMA is the DMA domain of USB NICs. A USB host controller reaches
// memory through the kernel's own transfer buffers, never the pool's: the
// driver copies every frame between the pool and the transfers. The domain
// exists so that pools, and memory attached for transmit
// (nicdrv.Buffer.Attach), have the mappings the nicdrv contract speaks of;
// its IOVAs are tokens, unique per mapping, that nothing dereferences.
type hostDMA struct {
	mu   sync.Mutex
	next uint64
	live map[*pci.Mapping]bool
}

var theDMA = &hostDMA{next: 1 << 40, live: map[*pci.Mapping]bool{}}

// DMA returns the DMA domain of every USB NIC: make a pool to share among
// them, or memory to attach, with nicdrv.NewPool(usbnet.DMA(), ...) and
// DMA().Map.
func DMA() pci.DMA { return theDMA }

// Map implements pci.DMA: one segment, at a fresh token IOVA.
func (d *hostDMA) Map(buf []byte) (*pci.Mapping, error) {
	if len(buf) == 0 {
		return nil, errors.New("usbnet: map an empty buffer")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	iova := d.next
	d.next += uint64(len(buf)+4095)&^4095 + 4096
	m := &pci.Mapping{Buf: buf, Segments: []pci.Segment{{IOVA: iova, Len: len(buf)}}}
	d.live[m] = true
	return m, nil
}

// AcceptsPageable implements pci.PageableDMA: libusb copies every
// transfer between these buffers and the kernel's, so no device ever
// reads or writes them directly and they need not be locked.
func (d *hostDMA) AcceptsPageable() bool { return true }

// Unmap implements pci.DMA.
func (d *hostDMA) Unmap(m *pci.Mapping) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.live[m] {
		return fmt.Errorf("usbnet: unmap a mapping this domain did not make or already unmapped: %w", pci.ErrNotMapped)
	}
	delete(d.live, m)
	return nil
}
