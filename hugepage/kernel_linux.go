package hugepage

// The mechanics of getting memory from Linux: each function here is one
// recipe of system calls (all through golang.org/x/sys/unix). The policy
// (which recipe, when to fall back, what to tell the user) is in alloc.go.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// mapping is one live mmap and the file descriptor behind it (-1 when
// anonymous).
type mapping struct {
	mem []byte
	fd  int
}

// release unmaps the memory and closes the file, reporting both failures.
func (m mapping) release() error {
	var errs []error
	if m.mem != nil {
		if err := unix.Munmap(m.mem); err != nil {
			errs = append(errs, fmt.Errorf("munmap %d bytes: %w", len(m.mem), err))
		}
	}
	if m.fd >= 0 {
		if err := unix.Close(m.fd); err != nil {
			errs = append(errs, fmt.Errorf("close fd %d: %w", m.fd, err))
		}
	}
	return errors.Join(errs...)
}

// isNoMemory reports whether err is the kernel's "not enough hugepages"
// answer to a hugetlb mmap: ENOMEM.
func isNoMemory(err error) bool {
	return errors.Is(err, unix.ENOMEM)
}

const protRW = unix.PROT_READ | unix.PROT_WRITE

// hugeMapFlag encodes ps for mmap(2) (MAP_HUGETLB | log2 << MAP_HUGE_SHIFT).
func hugeMapFlag(ps PageSize) int {
	return unix.MAP_HUGETLB | ps.log2()<<unix.MAP_HUGE_SHIFT
}

// mapHugeAnonymous maps n bytes of private anonymous hugepages, prefaulted.
// ENOMEM means too few free hugepages.
func mapHugeAnonymous(n int, ps PageSize) (mapping, error) {
	mem, err := unix.Mmap(-1, 0, n, protRW, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE|hugeMapFlag(ps))
	if err != nil {
		return mapping{fd: -1}, fmt.Errorf("mmap %d bytes MAP_HUGETLB (%v pages): %w", n, ps, err)
	}
	return mapping{mem: mem, fd: -1}, nil
}

// mapHugeMemfd creates a memfd of n bytes of hugepages and maps it shared,
// prefaulted.
func mapHugeMemfd(name string, n int, ps PageSize) (mapping, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_HUGETLB|ps.log2()<<unix.MFD_HUGE_SHIFT)
	if err != nil {
		return mapping{fd: -1}, fmt.Errorf("memfd_create %q MFD_HUGETLB (%v pages): %w", name, ps, err)
	}
	return mapFile(fd, n, fmt.Sprintf("memfd %q", name))
}

// fileSeq makes hugetlbfs file names unique within the process.
var fileSeq atomic.Uint64

// mapHugetlbfs creates a file of n bytes in the hugetlbfs mount dir, unlinks
// it at once (the descriptor keeps it alive) and maps it shared, prefaulted.
func mapHugetlbfs(dir, name string, n int) (mapping, error) {
	path := filepath.Join(dir, name+"."+strconv.Itoa(os.Getpid())+"."+strconv.FormatUint(fileSeq.Add(1), 10))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return mapping{fd: -1}, fmt.Errorf("create %s: %w", path, err)
	}
	if err := unix.Unlink(path); err != nil {
		unix.Close(fd)
		return mapping{fd: -1}, fmt.Errorf("unlink %s: %w", path, err)
	}
	return mapFile(fd, n, path)
}

// mapFile sizes the file fd to n bytes and maps it shared and prefaulted. On
// failure it closes fd.
func mapFile(fd, n int, what string) (mapping, error) {
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return mapping{fd: -1}, fmt.Errorf("ftruncate %s to %d bytes: %w", what, n, err)
	}
	mem, err := unix.Mmap(fd, 0, n, protRW, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return mapping{fd: -1}, fmt.Errorf("mmap %s (%d bytes): %w", what, n, err)
	}
	return mapping{mem: mem, fd: fd}, nil
}

// errNotLocked is mapSmall's report that the locked-memory limit refused
// mlock and the pages were left pageable, as the caller allowed.
type errNotLocked struct{ err error }

func (e *errNotLocked) Error() string { return e.err.Error() }

// mapSmall maps n bytes of base pages, anonymous or (memfd) in a memfd
// without MFD_HUGETLB, then locks and thereby prefaults them. When mlock
// fails and pageable is set, the pages stay mapped, prefaulted by a write to
// each, and the returned *errNotLocked says why they are not locked.
func mapSmall(n int, memfd bool, name string, pageable bool) (mapping, *errNotLocked, error) {
	var m mapping
	if memfd {
		fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
		if err != nil {
			return mapping{fd: -1}, nil, fmt.Errorf("memfd_create %q: %w", name, err)
		}
		if err := unix.Ftruncate(fd, int64(n)); err != nil {
			unix.Close(fd)
			return mapping{fd: -1}, nil, fmt.Errorf("ftruncate memfd %q to %d bytes: %w", name, n, err)
		}
		mem, err := unix.Mmap(fd, 0, n, protRW, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			return mapping{fd: -1}, nil, fmt.Errorf("mmap memfd %q (%d bytes): %w", name, n, err)
		}
		m = mapping{mem: mem, fd: fd}
	} else {
		// No MAP_POPULATE here: the pages must not be faulted in as
		// transparent hugepages before MADV_NOHUGEPAGE below.
		mem, err := unix.Mmap(-1, 0, n, protRW, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return mapping{fd: -1}, nil, fmt.Errorf("mmap %d bytes: %w", n, err)
		}
		m = mapping{mem: mem, fd: -1}
	}
	// Keep khugepaged from collapsing the pages into a transparent hugepage,
	// which would move them. EINVAL means a kernel without THP: nothing to
	// keep away.
	if err := unix.Madvise(m.mem, unix.MADV_NOHUGEPAGE); err != nil && !errors.Is(err, unix.EINVAL) {
		m.release()
		return mapping{fd: -1}, nil, fmt.Errorf("madvise MADV_NOHUGEPAGE: %w", err)
	}
	// mlock faults every page in (writable, for a private mapping) and keeps
	// it resident.
	if err := unix.Mlock(m.mem); err != nil {
		limit := "unknown"
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil {
			limit = strconv.FormatUint(rl.Cur, 10) + " bytes"
			if rl.Cur == unix.RLIM_INFINITY {
				limit = "unlimited"
			}
		}
		err = fmt.Errorf("mlock %d bytes: %w: raise the locked-memory limit (now %s) with ulimit -l or LimitMEMLOCK= in a systemd unit, or run as root", n, err, limit)
		if !pageable {
			m.release()
			return mapping{fd: -1}, nil, err
		}
		for i := 0; i < len(m.mem); i += int(Size4K) {
			m.mem[i] = 0 // a write fault maps the page
		}
		return m, &errNotLocked{err: err}, nil
	}
	return m, nil, nil
}

// keepFromChildren sets MADV_DONTFORK, so that a fork (by cgo code; Go's
// own process start does not copy the address space) cannot turn the pages
// copy-on-write and move them under a device's feet.
func keepFromChildren(mem []byte) error {
	if err := unix.Madvise(mem, unix.MADV_DONTFORK); err != nil {
		return fmt.Errorf("madvise MADV_DONTFORK: %w", err)
	}
	return nil
}

// hugetlbfsPageSize returns the page size of the hugetlbfs mount at dir, or
// an error if dir is not a hugetlbfs mount.
func hugetlbfsPageSize(dir string) (PageSize, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if uint32(st.Type) != unix.HUGETLBFS_MAGIC {
		return 0, fmt.Errorf("%s is not a hugetlbfs mount (filesystem magic %#x): mount one with `mount -t hugetlbfs none %s`", dir, uint32(st.Type), dir)
	}
	return PageSize(st.Bsize), nil
}

// lockFile takes an exclusive flock(2) on f: processes that reserve
// hugepages through this package take turns, so that none lowers what
// another just raised.
func lockFile(f *os.File) (unlock func(), err error) {
	fd := int(f.Fd())
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	return func() { unix.Flock(fd, unix.LOCK_UN) }, nil
}
