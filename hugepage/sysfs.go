package hugepage

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The kernel's hugepage pools, one directory per page size. Tests point
// these at a fake tree.
var (
	sysfsRoot   = "/sys/kernel/mm/hugepages"
	procMounts  = "/proc/mounts"
	procMeminfo = "/proc/meminfo"
)

// realSysfsRoot is where the hints to the user point, whatever sysfsRoot is.
const realSysfsRoot = "/sys/kernel/mm/hugepages"

// PoolStatus is the kernel's pool of hugepages of one size, as
// /sys/kernel/mm/hugepages/hugepages-<size>kB reports it.
type PoolStatus struct {
	// PageSize is the size of the pages in this pool.
	PageSize PageSize
	// Total is nr_hugepages: the pages in the pool, in use or not.
	Total int
	// Free is free_hugepages: pages not faulted in by anyone. Some of them
	// may be promised to mappings already (Reserved).
	Free int
	// Reserved is resv_hugepages: free pages promised to existing mappings.
	// Free-Reserved pages are available to a new mapping.
	Reserved int
	// Surplus is surplus_hugepages: pages above Total allocated through
	// overcommit (nr_overcommit_hugepages).
	Surplus int
}

// Available is the number of pages a new mapping can get: Free minus
// Reserved.
func (s PoolStatus) Available() int {
	if s.Free < s.Reserved {
		return 0
	}
	return s.Free - s.Reserved
}

// poolDir is the sysfs directory of the pool of size ps under root.
func poolDir(root string, ps PageSize) string {
	return filepath.Join(root, "hugepages-"+strconv.Itoa(int(ps>>10))+"kB")
}

// Status reports every hugepage pool of the kernel, smallest page size
// first, from /sys/kernel/mm/hugepages/hugepages-*kB/{nr_hugepages,
// free_hugepages,resv_hugepages,surplus_hugepages}.
func Status() ([]PoolStatus, error) {
	ents, err := os.ReadDir(sysfsRoot)
	if err != nil {
		return nil, fmt.Errorf("hugepage: list hugepage pools: %w (a kernel without CONFIG_HUGETLBFS has none)", err)
	}
	var out []PoolStatus
	for _, e := range ents {
		kb, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, ok = strings.CutSuffix(kb, "kB")
		if !ok {
			continue
		}
		k, err := strconv.Atoi(kb)
		if err != nil || k <= 0 {
			continue
		}
		st, err := readPool(sysfsRoot, PageSize(k)<<10)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return int(a.PageSize>>10) - int(b.PageSize>>10) })
	return out, nil
}

// readPool reads the counters of the pool of size ps under root. A missing
// pool reads as an error wrapping fs.ErrNotExist.
func readPool(root string, ps PageSize) (PoolStatus, error) {
	dir := poolDir(root, ps)
	st := PoolStatus{PageSize: ps}
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"nr_hugepages", &st.Total},
		{"free_hugepages", &st.Free},
		{"resv_hugepages", &st.Reserved},
		{"surplus_hugepages", &st.Surplus},
	} {
		v, err := readCount(filepath.Join(dir, f.name))
		if err != nil {
			return PoolStatus{}, err
		}
		*f.v = v
	}
	return st, nil
}

// readCount reads a file holding one non-negative decimal number.
func readCount(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("hugepage: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("hugepage: %s: want a count, read %q", path, strings.TrimSpace(string(b)))
	}
	return v, nil
}

// reserveMu serialises Reserve within the process; the flock in Reserve
// serialises it between processes.
var reserveMu sync.Mutex

// Reserve makes the kernel's pool of size hugepages hold at least n pages,
// by raising nr_hugepages for that size; it never lowers it. It returns how
// many pages the pool holds afterwards. Writing nr_hugepages needs root; the
// error then names the file and says so (errors.Is(err, fs.ErrPermission)).
// If the kernel grants fewer than n (memory too fragmented or too little
// free), Reserve returns what it got and an error with both numbers that
// wraps ErrNoHugepages.
//
// Pages reserved stay reserved after the process ends; that is the point of
// the pool.
func Reserve(size PageSize, n int) (got int, err error) {
	if !size.valid() || size == Size4K {
		return 0, fmt.Errorf("hugepage: reserve: bad hugepage size %v", size)
	}
	if n < 0 {
		return 0, fmt.Errorf("hugepage: reserve: negative count %d", n)
	}
	dir := poolDir(sysfsRoot, size)
	file := filepath.Join(dir, "nr_hugepages")
	cur, err := readCount(file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("hugepage: reserve %d %v hugepages: the kernel has no %v hugepage pool (%s is missing)", n, size, size, dir)
	}
	if err != nil || cur >= n {
		return cur, err
	}

	reserveMu.Lock()
	defer reserveMu.Unlock()
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return cur, reserveOpError(file, size, n, err)
	}
	defer f.Close()
	unlock, err := lockFile(f)
	if err != nil {
		return cur, fmt.Errorf("hugepage: reserve %d %v hugepages: %w", n, size, err)
	}
	defer unlock()
	// Somebody may have raised it while we waited for the lock.
	if cur, err = readCount(file); err != nil || cur >= n {
		return cur, err
	}
	if _, err := f.WriteString(strconv.Itoa(n) + "\n"); err != nil {
		return cur, reserveOpError(file, size, n, err)
	}
	got, err = readCount(file)
	if err != nil {
		return 0, err
	}
	return got, checkGranted(file, size, n, got)
}

// reserveOpError explains a failure to open or write nr_hugepages.
func reserveOpError(file string, size PageSize, n int, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("hugepage: reserve %d %v hugepages: writing %s needs root: run as root, or reserve pages once with `sudo ioatctl setup`: %w", n, size, file, err)
	}
	return fmt.Errorf("hugepage: reserve %d %v hugepages: write %s: %w", n, size, file, err)
}

// checkGranted is the verdict on a write of want to nr_hugepages after which
// the pool holds got pages.
func checkGranted(file string, size PageSize, want, got int) error {
	if got >= want {
		return nil
	}
	hint := "free some (sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory) and retry"
	if size >= Size1G {
		hint = fmt.Sprintf("reserve them at boot instead (kernel command line hugepagesz=%s hugepages=%d)", size.mountOption(), want)
	}
	return fmt.Errorf("hugepage: asked for %d %v hugepages (%s), the kernel granted %d: memory is too fragmented or too little is free; %s: %w",
		want, size, file, got, hint, ErrNoHugepages)
}

// reserveHint tells the user how to get a pool of size ps to hold want
// pages.
func reserveHint(ps PageSize, want int) string {
	file := filepath.Join(poolDir(realSysfsRoot, ps), "nr_hugepages")
	if ps == defaultHugepageSize() {
		file = "/proc/sys/vm/nr_hugepages"
	}
	hint := fmt.Sprintf("reserve some with `ioatctl setup` or `echo %d > %s`", want, file)
	if ps >= Size1G {
		hint += fmt.Sprintf(" (%v pages are most reliably reserved at boot: hugepagesz=%s hugepages=%d)", ps, ps.mountOption(), want)
	}
	return hint
}

// defaultHugepageSize is the kernel's default hugepage size (Hugepagesize in
// /proc/meminfo), or 0 if unknown.
func defaultHugepageSize() PageSize {
	f, err := os.Open(procMeminfo)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "Hugepagesize:")
		if !ok {
			continue
		}
		kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		if err != nil {
			return 0
		}
		return PageSize(kb) << 10
	}
	return 0
}

// hugetlbfsMounts lists the mount points of the hugetlbfs mounts in a
// /proc/mounts-format table, in table order.
func hugetlbfsMounts(r io.Reader) []string {
	var dirs []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[2] == "hugetlbfs" {
			dirs = append(dirs, unescapeMountPath(f[1]))
		}
	}
	return dirs
}

// unescapeMountPath undoes the octal escapes (\040 for a space, \011, \012,
// \134) that /proc/mounts applies to paths.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findHugetlbfs returns the first hugetlbfs mount in /proc/mounts whose page
// size is ps, or "" if there is none.
func findHugetlbfs(ps PageSize) (string, error) {
	f, err := os.Open(procMounts)
	if err != nil {
		return "", fmt.Errorf("hugepage: find a hugetlbfs mount: %w", err)
	}
	defer f.Close()
	for _, dir := range hugetlbfsMounts(f) {
		if got, err := hugetlbfsPageSize(dir); err == nil && got == ps {
			return dir, nil
		}
	}
	return "", nil
}
