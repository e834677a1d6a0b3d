package hugepage

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/internal/sentinel"
)

// Sentinel errors. Functions of this package wrap them with context (the
// size, the file, the fix), so test for them with errors.Is. ErrClosed,
// ErrExhausted and ErrNotPooled are the values every gomx package uses for
// these meanings (internal/sentinel): hugepage.ErrClosed is pci.ErrClosed,
// nicdrv.ErrClosed, transport.ErrClosed, and nicdrv.ErrPoolExhausted is
// ErrExhausted.
var (
	// ErrNoHugepages means there were not enough free hugepages of the asked
	// size (or no hugetlbfs mount for it) and Options.NoFallback forbade
	// falling back to locked 4 KiB pages.
	ErrNoHugepages = errors.New("no free hugepages")
	// ErrNoPhys means /proc/self/pagemap gave no page frame number: either
	// the process lacks CAP_SYS_ADMIN (the kernel then reports every PFN as
	// 0) or the page is not present. The wrapping error says which, and the
	// fix.
	ErrNoPhys = errors.New("no physical address")
	// ErrClosed means the Region or Pool was already closed.
	ErrClosed = sentinel.ErrClosed
	// ErrExhausted means every buffer of a Pool is handed out.
	ErrExhausted = sentinel.ErrExhausted
	// ErrNotPooled means a buffer given to Pool.Put did not come from that
	// pool's Get: another pool, another allocation, or a re-sliced buffer
	// that no longer starts where Get's did or has another capacity.
	ErrNotPooled = sentinel.ErrNotPooled
	// ErrDoublePut means a buffer was given to Pool.Put while already free.
	ErrDoublePut = errors.New("buffer put twice")
)

// PageSize is the size of the pages backing a Region, in bytes.
type PageSize int

// Page sizes of x86-64 (and of arm64 with 4 KiB base pages).
const (
	// Size4K is the base page size: memory that is not hugepage-backed.
	Size4K PageSize = 4 << 10
	// Size2M is the usual (default) hugepage size.
	Size2M PageSize = 2 << 20
	// Size1G is the gigantic page size, best reserved at boot
	// (hugepagesz=1G hugepages=N on the kernel command line).
	Size1G PageSize = 1 << 30
)

// String returns the size in binary units, as "4KiB", "2MiB" or "1GiB".
func (p PageSize) String() string {
	switch {
	case p > 0 && p%(1<<30) == 0:
		return strconv.Itoa(int(p>>30)) + "GiB"
	case p > 0 && p%(1<<20) == 0:
		return strconv.Itoa(int(p>>20)) + "MiB"
	case p > 0 && p%(1<<10) == 0:
		return strconv.Itoa(int(p>>10)) + "KiB"
	default:
		return strconv.Itoa(int(p)) + "B"
	}
}

// mountOption is the size as hugetlbfs spells its pagesize= mount option
// ("2M", "1G").
func (p PageSize) mountOption() string {
	return strings.TrimSuffix(p.String(), "iB")
}

// valid reports whether p is a power of two of at least 4 KiB.
func (p PageSize) valid() bool {
	return p >= Size4K && p&(p-1) == 0
}

// log2 is the base-2 logarithm of a valid page size, as the kernel encodes
// it in the MAP_HUGE_* and MFD_HUGE_* flags.
func (p PageSize) log2() int {
	return bits.TrailingZeros64(uint64(p))
}

// Source is where the memory of a Region comes from.
type Source int

const (
	// Anonymous memory is private to the process: mmap with MAP_HUGETLB.
	// It has no file descriptor.
	Anonymous Source = iota
	// HugetlbFS memory is a file in a hugetlbfs mount. The file is unlinked
	// as soon as it is mapped, so nothing is left behind if the process
	// dies; share it through Region.FD.
	HugetlbFS
	// Memfd memory is a memfd_create(2) file with MFD_HUGETLB: shareable
	// with another process through Region.FD without any mount.
	Memfd
)

// String names the source: "anonymous", "hugetlbfs" or "memfd".
func (s Source) String() string {
	switch s {
	case Anonymous:
		return "anonymous"
	case HugetlbFS:
		return "hugetlbfs"
	case Memfd:
		return "memfd"
	default:
		return "Source(" + strconv.Itoa(int(s)) + ")"
	}
}

// Options says how Alloc and NewPool get their memory. The zero value is
// valid and means the same as DefaultOptions.
type Options struct {
	// PageSize is the page size to ask for; Size2M when zero. Size4K asks
	// for locked, prefaulted base pages and is not a degradation.
	PageSize PageSize
	// Source is where the memory comes from; Anonymous by default.
	Source Source
	// Dir is the hugetlbfs mount to create the file in, for Source
	// HugetlbFS. Empty means the first hugetlbfs mount in /proc/mounts
	// whose page size is PageSize.
	Dir string
	// Name names the memfd or hugetlbfs file, so that the mapping is
	// recognisable in /proc/PID/maps; "gomx" when empty.
	Name string
	// Reserve, when there are too few free hugepages, first raises
	// nr_hugepages for PageSize by the shortfall (see Reserve; needs root).
	Reserve bool
	// NoFallback makes Alloc fail with ErrNoHugepages instead of falling
	// back to locked 4 KiB pages.
	NoFallback bool
	// AllowPageable lets Alloc keep 4 KiB pages it could not lock (the
	// locked-memory limit, RLIMIT_MEMLOCK, refused them) as ordinary
	// pageable memory, prefaulted but free to be swapped or moved by the
	// kernel; Region.Degraded then says so. Only memory that no device
	// reaches on its own may be pageable: memory for the in-process models
	// of package emulated, whose DMA is the CPU's (pci.AcceptsPageable).
	// Drivers set it from their device's DMA domain.
	AllowPageable bool
}

// DefaultOptions returns anonymous 2 MiB hugepages named "gomx", falling
// back to locked 4 KiB pages when none are free.
func DefaultOptions() Options {
	return Options{PageSize: Size2M, Source: Anonymous, Name: "gomx"}
}

// withDefaults fills in the zero fields and checks the rest, before anything
// touches the kernel.
func (o Options) withDefaults() (Options, error) {
	if o.PageSize == 0 {
		o.PageSize = Size2M
	}
	if o.Name == "" {
		o.Name = "gomx"
	}
	if !o.PageSize.valid() {
		return o, fmt.Errorf("hugepage: bad page size %d: want a power of two of at least 4KiB (Size2M, Size1G, Size4K)", int(o.PageSize))
	}
	switch o.Source {
	case Anonymous, Memfd:
	case HugetlbFS:
		if o.PageSize == Size4K {
			return o, fmt.Errorf("hugepage: hugetlbfs has no 4KiB pages: use Source Anonymous or Memfd for 4KiB pages")
		}
	default:
		return o, fmt.Errorf("hugepage: unknown %v: want Anonymous, HugetlbFS or Memfd", o.Source)
	}
	// memfd_create(2) limits names to 249 bytes; a file name to 255.
	if len(o.Name) > 200 || strings.ContainsAny(o.Name, "/\x00") {
		return o, fmt.Errorf("hugepage: bad name %q: at most 200 bytes, no '/' or NUL", o.Name)
	}
	return o, nil
}
