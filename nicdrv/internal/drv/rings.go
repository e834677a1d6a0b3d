package drv

import (
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/pci"
)

// Rings is the memory of a NIC's descriptor rings: one region, mapped in
// the NIC's DMA domain, that Cut hands out ring by ring, in order. Release
// unmaps and frees it, once the NIC is quiet.
type Rings struct {
	mem *hugepage.Region
	m   *pci.Mapping
	dma pci.DMA
	off int
}

// AllocRings allocates size bytes of ring memory as mem says (named name
// unless mem names it; pageable where the function's DMA domain accepts
// it) and maps it in the function's DMA domain, or undoes both and fails.
func (d *Device) AllocRings(size int, mem hugepage.Options, name string) (*Rings, error) {
	if mem.Name == "" {
		mem.Name = name
	}
	dma := d.Dev.DMA()
	mem.AllowPageable = mem.AllowPageable || pci.AcceptsPageable(dma)
	r, err := hugepage.Alloc(size, mem)
	if err != nil {
		return nil, d.Errorf("ring memory", err)
	}
	m, err := dma.Map(r.Bytes())
	if err != nil {
		r.Close()
		return nil, d.Errorf("map rings", err)
	}
	return &Rings{mem: r, m: m, dma: dma}, nil
}

// Cut takes the next ln bytes as a ring and returns them with their IOVA.
// It fails when they cross an IOVA segment edge (the NIC reads a ring as
// one run), or, with align above 0, when their IOVA is not a multiple of
// it; the bytes are taken either way.
func (r *Rings) Cut(ln int, align uint64) ([]byte, uint64, error) {
	off := r.off
	iova, contig, err := r.m.IOVA(off)
	if err == nil && contig < ln {
		err = fmt.Errorf("a ring of %d bytes at offset %d crosses an IOVA segment edge: allocate ring memory in hugepages", ln, off)
	}
	if err == nil && align > 0 && iova%align != 0 {
		err = fmt.Errorf("ring IOVA %#x is not %d-byte aligned", iova, align)
	}
	b := r.mem.Bytes()[off : off+ln : off+ln]
	r.off += ln
	return b, iova, err
}

// Release unmaps the ring memory and frees it; later calls do nothing.
func (r *Rings) Release() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := errors.Join(r.dma.Unmap(r.m), r.mem.Close())
	r.m, r.mem = nil, nil
	return err
}
