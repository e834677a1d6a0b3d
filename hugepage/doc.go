// Package hugepage provides DMA-able memory for user-space drivers: memory
// that is resident before any device touches it, whose pages do not move
// while a device may, and whose physical addresses can be looked up when
// there is no IOMMU to translate for the device.
//
// # Why hugepages
//
// A device reaches memory by I/O virtual address (with an IOMMU, see package
// vfio) or by physical address (without one). Either way every page of a
// buffer is one translation: an IOMMU entry, or a break in the physical
// address range that the driver must split a transfer at. A 2 MiB hugepage
// is 512 base pages in one physically contiguous piece, so rings and buffer
// pools fit in a handful of pages and a transfer rarely crosses an edge.
// Hugetlb pages are also never swapped and are taken from a pool the
// administrator reserved, which makes their supply predictable.
//
// # Allocating
//
// [Alloc] maps a [Region] as [Options] ask: a [PageSize] (2 MiB by
// default, 1 GiB, or plain 4 KiB) and a [Source]:
//
//   - Anonymous: mmap(2) with MAP_HUGETLB, private to the process;
//   - HugetlbFS: a file in a hugetlbfs mount (Options.Dir, or the first
//     mount of the right page size in /proc/mounts), unlinked at once;
//   - Memfd: memfd_create(2) with MFD_HUGETLB; no mount needed.
//
// File-backed regions have a descriptor ([Region.FD]) that another process
// can map to share the memory. Memory is prefaulted (MAP_POPULATE, or
// mlock(2) for base pages) and its presence verified before Alloc returns.
//
// # Falling back
//
// A machine without reserved hugepages should still run, slower, and say so.
// When there are too few free hugepages of the asked size (the pool's
// free_hugepages minus resv_hugepages, or ENOMEM from the kernel), or no
// hugetlbfs mount for it, Alloc falls back to locked, prefaulted 4 KiB pages
// and records in [Region.Degraded] a sentence that names the shortage and the
// fix, e.g.
//
//	no free 2MiB hugepages (HugePages_Free=0 of 0): reserve some with
//	`ioatctl setup` or `echo 1 > /proc/sys/vm/nr_hugepages`; using locked 4KiB pages
//
// Options.NoFallback turns the fallback into an error wrapping
// [ErrNoHugepages]; Options.Reserve first tries to grow the pool.
//
// Locking is the last thing an ordinary user runs out of: most machines
// allow a user 8 MiB of locked memory. Memory for an in-process device
// model (package emulated), whose DMA is done by the CPU through the
// process's own page tables, need not be locked at all: with
// Options.AllowPageable, which drivers set when their device's DMA domain
// accepts it (pci.AcceptsPageable), pages the limit refuses to lock stay
// ordinary pageable memory and Degraded says so. A real device never gets
// them.
//
// # Reserving
//
// [Status] reads the kernel's pools (/sys/kernel/mm/hugepages) and [Reserve]
// grows one, as `ioatctl setup` does. Reserve never shrinks a pool, and
// processes reserving through this package take turns on the pool's
// nr_hugepages file, so that none undoes what another just did.
//
// # Physical addresses
//
// [Region.Phys], [Region.PhysSegments] and [Translate] read
// /proc/self/pagemap. The kernel shows page frame numbers only to a process
// with CAP_SYS_ADMIN; to others, and for pages not present, they fail with
// [ErrNoPhys]. Hugetlb pages keep their physical address while mapped, and
// base pages from Alloc are locked and kept out of transparent hugepages; but
// only an IOMMU mapping (package vfio) truly pins memory against the
// kernel's page migration, which is why no-IOMMU mode is for trusted test
// machines.
//
// # Pools
//
// A [Pool] carves one Region into equal, 64-byte aligned buffers with a
// lock-free free list: Get and Put neither lock nor allocate, and Put catches
// foreign buffers and buffers put twice.
//
// # Leaks
//
// Every Region is counted from Alloc to Close. [Live] and [LiveRegions] (which
// names the allocating file:line) let a TestMain fail a run that leaks
// memory. Nothing is freed by the garbage collector: a Region not closed
// stays mapped, and hugepages stay taken, until the process exits.
//
// # Errors
//
// Failures wrap the sentinels [ErrNoHugepages], [ErrNoPhys], [ErrClosed],
// [ErrExhausted], [ErrNotPooled] and [ErrDoublePut], or an errno, with the
// size, file or offset concerned and what to do about it; use errors.Is.
package hugepage
