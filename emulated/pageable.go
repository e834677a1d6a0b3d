package emulated

import "github.com/gomx-dev/gomx/pci"

var _ pci.PageableDMA = (*IOMMU)(nil)

// AcceptsPageable implements pci.PageableDMA: the models' DMA is the CPU's,
// through the process's page tables, so memory mapped here may be ordinary
// pageable memory (hugepage.Options.AllowPageable) and a user without a
// locked-memory allowance can run every model.
func (u *IOMMU) AcceptsPageable() bool { return true }
