package pci

// PageableDMA is the optional interface of a DMA domain whose devices reach
// mapped memory through the process's own page tables, as the CPU does: the
// in-process models of package emulated, whose DMA is Go code copying
// bytes. Memory mapped into such a domain need not be pinned, locked or
// physically contiguous, so a driver may give it ordinary pageable memory
// when the locked-memory limit refuses more (hugepage.Options.AllowPageable),
// and any user can run it. Domains of real devices (package vfio) do not
// implement it: a device that masters the bus needs its memory to stay put.
type PageableDMA interface {
	DMA
	// AcceptsPageable reports whether memory mapped into the domain may be
	// pageable.
	AcceptsPageable() bool
}

// AcceptsPageable reports whether memory mapped into d may be ordinary
// pageable memory: true only for a PageableDMA that says so. A driver asks
// it of its device's domain to decide hugepage.Options.AllowPageable,
// without knowing whether the device is real or modelled.
func AcceptsPageable(d DMA) bool {
	p, ok := d.(PageableDMA)
	return ok && p.AcceptsPageable()
}
