package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain fails the run if any test leaks a Region.
func TestMain(m *testing.M) {
	code := m.Run()
	if n := Live(); n != 0 {
		fmt.Fprintf(os.Stderr, "hugepage: %d regions leaked:\n", n)
		for _, l := range LiveRegions() {
			fmt.Fprintln(os.Stderr, "\t"+l)
		}
		code = 1
	}
	os.Exit(code)
}

// requireEnv is the variable that turns skips for lack of hugepages into
// failures: "1" for the default 2 MiB pages, a value containing "1G" (such
// as "1,1G") for 1 GiB pages too.
const requireEnv = "GOMX_REQUIRE_HUGEPAGES"

// required reports whether hugepages of size ps must be available.
func required(ps PageSize) bool {
	v := os.Getenv(requireEnv)
	if v == "" || v == "0" {
		return false
	}
	if ps >= Size1G {
		return strings.Contains(strings.ToUpper(v), "1G")
	}
	return true
}

// skipOrFail skips t with a reason that says how to fix it, or fails it
// when GOMX_REQUIRE_HUGEPAGES says the resource must be there.
func skipOrFail(t testing.TB, ps PageSize, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if required(ps) {
		t.Fatalf("%s (and %s=%s requires %v hugepages)", msg, requireEnv, os.Getenv(requireEnv), ps)
	}
	t.Skip(msg)
}

// needHugepages makes sure n hugepages of size ps are available to the test,
// reserving 2 MiB pages if it must (as root) and never 1 GiB ones, which
// would take a large, slow-to-find piece of memory.
func needHugepages(t testing.TB, ps PageSize, n int) {
	t.Helper()
	st, err := readPool(sysfsRoot, ps)
	if err != nil {
		skipOrFail(t, ps, "no %v hugepage pool: %v", ps, err)
	}
	if st.Available() >= n {
		return
	}
	if ps >= Size1G {
		skipOrFail(t, ps, "%d free %v hugepages needed, %d available: reserve one with `echo %d > %s` (or boot with hugepagesz=1G hugepages=%d)",
			n, ps, st.Available(), st.Total+n-st.Available(), filepath.Join(poolDir(realSysfsRoot, ps), "nr_hugepages"), n)
	}
	if _, err := Reserve(ps, st.Total+n-st.Available()); err != nil {
		skipOrFail(t, ps, "%d free %v hugepages needed, %d available, and reserving more failed: %v", n, ps, st.Available(), err)
	}
	if st, err = readPool(sysfsRoot, ps); err != nil || st.Available() < n {
		skipOrFail(t, ps, "%d free %v hugepages needed, %d available after reserving (%v)", n, ps, st.Available(), err)
	}
}

// fakeSysfs points the package at a fake /sys/kernel/mm/hugepages holding
// the given pools, for the duration of the test, and returns its path.
func fakeSysfs(t *testing.T, pools ...PoolStatus) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range pools {
		dir := poolDir(root, p.PageSize)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]int{
			"nr_hugepages": p.Total, "free_hugepages": p.Free,
			"resv_hugepages": p.Reserved, "surplus_hugepages": p.Surplus,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	setVar(t, &sysfsRoot, root)
	return root
}

// setVar sets a package variable for the duration of the test.
func setVar(t *testing.T, v *string, to string) {
	old := *v
	*v = to
	t.Cleanup(func() { *v = old })
}

// unwritable replaces path with a count file that the test process cannot
// open for writing, and returns the count it reads as. Root writes any file
// mode, so for root it is a link to a read-only sysctl (the kernel refuses
// writes to those even from root, with EACCES, as it does for sysfs).
func unwritable(t *testing.T, path string) int {
	t.Helper()
	os.Remove(path)
	if os.Geteuid() == 0 {
		const ro = "/proc/sys/kernel/ngroups_max"
		v, err := readCount(ro)
		if err != nil {
			t.Skipf("no read-only sysctl to stand for a read-only file: %v", err)
		}
		if err := os.Symlink(ro, path); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := os.WriteFile(path, []byte("3\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	return 3
}

// vma is what /proc/self/smaps says about the mapping holding an address.
type vma struct {
	name           string
	kernelPageSize int // bytes
	locked         int // bytes
}

// vmaAt finds the mapping holding addr in /proc/self/smaps.
func vmaAt(t *testing.T, addr uintptr) vma {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v vma
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fs[0], "-"); ok && len(fs) >= 5 {
			if in {
				return v
			}
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h {
				in = true
				v.name = strings.Join(fs[5:], " ")
			}
			continue
		}
		if !in || len(fs) < 2 {
			continue
		}
		kb, _ := strconv.Atoi(fs[1])
		switch fs[0] {
		case "KernelPageSize:":
			v.kernelPageSize = kb << 10
		case "Locked:":
			v.locked = kb << 10
		}
	}
	if !in {
		t.Fatalf("no mapping holds %#x in /proc/self/smaps", addr)
	}
	return v
}

// canSeePhys reports whether the process has CAP_SYS_ADMIN, without which
// pagemap hides physical addresses.
func canSeePhys() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0
}

// hugetlbfsDir returns a hugetlbfs mount of page size ps: an existing one,
// or one the test mounts (as root) in a temporary directory and unmounts at
// the end.
func hugetlbfsDir(t *testing.T, ps PageSize) string {
	t.Helper()
	dir, err := findHugetlbfs(ps)
	if err != nil {
		t.Fatal(err)
	}
	if dir != "" {
		return dir
	}
	dir = t.TempDir()
	if err := unix.Mount("none", dir, "hugetlbfs", 0, "pagesize="+ps.mountOption()); err != nil {
		skipOrFail(t, ps, "no hugetlbfs mount with %v pages, and mounting one failed (%v): run as root or `mount -t hugetlbfs -o pagesize=%s none /dev/hugepages`",
			ps, err, ps.mountOption())
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// mustAlloc allocates or fails the test, and closes the region at the end.
func mustAlloc(t testing.TB, size int, o Options) *Region {
	t.Helper()
	r, err := Alloc(size, o)
	if err != nil && os.Geteuid() != 0 && strings.Contains(err.Error(), "raise the locked-memory limit") {
		// Degraded memory is locked, and an unprivileged process may lock
		// only so much.
		t.Skipf("cannot lock %d bytes as an unprivileged user: run the tests as root or raise `ulimit -l`: %v", size, err)
	}
	if err != nil {
		t.Fatalf("Alloc(%d, %+v): %v", size, o, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}
