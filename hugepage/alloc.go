package hugepage

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
)

// Alloc maps size bytes, rounded up to a multiple of the region's page size,
// as o asks, and returns them resident: hugepages are prefaulted with
// MAP_POPULATE, base pages are locked with mlock(2), and all of it is
// checked present in /proc/self/pagemap before Alloc returns, so no DMA can
// ever hit an unbacked page.
//
// When there are not enough free hugepages of o.PageSize (HugePages_Free too
// low, ENOMEM from mmap, no pool of that size) or, for HugetlbFS, no mount
// for that size, Alloc falls back to locked, prefaulted 4 KiB pages:
// anonymous ones, or a memfd without MFD_HUGETLB when o.Source is Memfd. The
// Region then says why and how to fix it in Degraded. With o.NoFallback it
// fails instead, with an error wrapping ErrNoHugepages that says the same.
// With o.Reserve it first tries to raise the pool by the shortfall.
//
// Other failures (bad options, a Dir that is not a hugetlbfs mount of the
// right page size, a locked-memory limit too low for the fallback) are
// errors. Every Region is counted by Live until Close.
func Alloc(size int, o Options) (*Region, error) {
	return alloc(size, o, callerOf(2), "")
}

// pageableNote ends a Degraded text for memory left pageable
// (Options.AllowPageable).
const pageableNote = "; using ordinary pageable memory, which only an in-process device model can use"

// shortage is why a hugepage allocation could not be had, and the fix.
type shortage struct {
	why string
	fix string
}

// degraded is the Region's Degraded text.
func (s *shortage) degraded() string {
	return s.why + ": " + s.fix + "; using locked 4KiB pages"
}

// err is Alloc's error when falling back is not allowed.
func (s *shortage) err(n int) error {
	return fmt.Errorf("hugepage: alloc %d bytes: %s: %s: %w", n, s.why, s.fix, ErrNoHugepages)
}

// alloc is Alloc for a caller at who; what, if not empty, says what the
// memory is for in LiveRegions.
func alloc(size int, o Options, who, what string) (*Region, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	ps := o.PageSize
	if size <= 0 || size > math.MaxInt-int(ps) {
		return nil, fmt.Errorf("hugepage: alloc: bad size %d", size)
	}
	n := (size + int(ps) - 1) &^ (int(ps) - 1)

	r := &Region{pageSize: ps, source: o.Source}
	var m mapping
	if ps == Size4K {
		var unlocked *errNotLocked
		m, unlocked, err = mapSmall(n, o.Source == Memfd, o.Name, o.AllowPageable)
		if err != nil {
			return nil, fmt.Errorf("hugepage: alloc %d bytes of 4KiB pages: %w", n, err)
		}
		if unlocked != nil {
			r.degraded = unlocked.Error() + pageableNote
		}
	} else {
		var short *shortage
		m, short, err = mapHuge(n, o)
		if err != nil {
			return nil, err
		}
		if short != nil {
			if o.NoFallback {
				return nil, short.err(n)
			}
			if o.Source != Memfd {
				r.source = Anonymous
			}
			n = (size + int(Size4K) - 1) &^ (int(Size4K) - 1)
			var unlocked *errNotLocked
			m, unlocked, err = mapSmall(n, r.source == Memfd, o.Name, o.AllowPageable)
			if err != nil {
				return nil, fmt.Errorf("hugepage: alloc %d bytes: %s, and falling back to locked 4KiB pages failed: %w", n, short.why, err)
			}
			r.pageSize = Size4K
			r.degraded = short.degraded()
			if unlocked != nil {
				r.degraded = short.why + ", and " + unlocked.Error() + pageableNote
			}
		}
	}
	if err := keepFromChildren(m.mem); err != nil {
		m.release()
		return nil, fmt.Errorf("hugepage: alloc %d bytes: %w", n, err)
	}
	r.mem, r.fd, r.n = m.mem, m.fd, len(m.mem)
	register(r, who, what)
	return r, nil
}

// mapHuge maps n bytes of hugepages as o asks. It returns a shortage, and no
// error, when the pages (or a mount) are lacking and falling back is the
// answer.
func mapHuge(n int, o Options) (mapping, *shortage, error) {
	ps := o.PageSize
	need := n / int(ps)
	none := mapping{fd: -1}

	var dir string
	if o.Source == HugetlbFS {
		if o.Dir != "" {
			got, err := hugetlbfsPageSize(o.Dir)
			if err != nil {
				return none, nil, fmt.Errorf("hugepage: Options.Dir: %w", err)
			}
			if got != ps {
				return none, nil, fmt.Errorf("hugepage: Options.Dir: %s is a hugetlbfs mount of %v pages, not %v: mount one with `mount -t hugetlbfs -o pagesize=%s none DIR`",
					o.Dir, got, ps, ps.mountOption())
			}
			dir = o.Dir
		} else {
			d, err := findHugetlbfs(ps)
			if err != nil {
				return none, nil, err
			}
			if d == "" {
				return none, &shortage{
					why: fmt.Sprintf("no hugetlbfs mount with %v pages in %s", ps, procMounts),
					fix: fmt.Sprintf("mount one with `mkdir -p /dev/hugepages-%s && mount -t hugetlbfs -o pagesize=%s none /dev/hugepages-%s`, or use Source Anonymous or Memfd",
						ps.mountOption(), ps.mountOption(), ps.mountOption()),
				}, nil
			}
			dir = d
		}
	}

	st, err := readPool(sysfsRoot, ps)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(sysfsRoot); serr == nil {
			return none, &shortage{
				why: fmt.Sprintf("the kernel has no %v hugepage pool (%s is missing)", ps, poolDir(sysfsRoot, ps)),
				fix: fmt.Sprintf("use another page size, or boot with hugepagesz=%s hugepages=%d if the CPU supports %v pages", ps.mountOption(), need, ps),
			}, nil
		}
		// No sysfs to ask: let mmap decide.
	case err != nil:
		// Unreadable counters: let mmap decide.
	case st.Available() < need:
		var reserveErr error
		if o.Reserve {
			_, reserveErr = Reserve(ps, st.Total+need-st.Available())
			if again, err := readPool(sysfsRoot, ps); err == nil {
				st = again
			}
		}
		if st.Available() < need {
			why := fmt.Sprintf("too few free %v hugepages: need %d, %d available (%s)", ps, need, st.Available(), poolCounts(st))
			if st.Available() == 0 {
				why = fmt.Sprintf("no free %v hugepages (%s)", ps, poolCounts(st))
			}
			if reserveErr != nil {
				why += "; raising nr_hugepages failed: " + strings.TrimPrefix(reserveErr.Error(), "hugepage: ")
			}
			return none, &shortage{why: why, fix: reserveHint(ps, st.Total+need-st.Available())}, nil
		}
	}

	var m mapping
	switch o.Source {
	case Anonymous:
		m, err = mapHugeAnonymous(n, ps)
	case Memfd:
		m, err = mapHugeMemfd(o.Name, n, ps)
	case HugetlbFS:
		m, err = mapHugetlbfs(dir, o.Name, n)
	}
	if err != nil {
		if isNoMemory(err) {
			now, _ := readPool(sysfsRoot, ps)
			return none, &shortage{
				why: fmt.Sprintf("%d %v hugepages could not be had: %v (%s)", need, ps, err, poolCounts(now)),
				fix: reserveHint(ps, now.Total+need),
			}, nil
		}
		return none, nil, fmt.Errorf("hugepage: alloc %d bytes of %v pages: %w", n, ps, err)
	}
	if ok, off := resident(m.mem, int(ps)); !ok {
		m.release()
		return none, &shortage{
			why: fmt.Sprintf("%v hugepage at offset %d was not resident after MAP_POPULATE (a hugetlb cgroup limit?)", ps, off),
			fix: fmt.Sprintf("check the cgroup's hugetlb.%s.max, or %s", ps.mountOption()+"B", reserveHint(ps, need)),
		}, nil
	}
	return m, nil, nil
}

// poolCounts formats a pool's counters as /proc/meminfo names them.
func poolCounts(st PoolStatus) string {
	s := fmt.Sprintf("HugePages_Free=%d of %d", st.Free, st.Total)
	if st.Reserved > 0 {
		s += fmt.Sprintf(", HugePages_Rsvd=%d", st.Reserved)
	}
	return s
}
