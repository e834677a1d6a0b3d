package hugepage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestStatus(t *testing.T) {
	root := fakeSysfs(t,
		PoolStatus{PageSize: Size1G, Total: 2, Free: 1},
		PoolStatus{PageSize: Size2M, Total: 64, Free: 60, Reserved: 4, Surplus: 3},
	)
	os.Mkdir(filepath.Join(root, "not-a-pool"), 0o755)
	os.Mkdir(filepath.Join(root, "hugepages-xkB"), 0o755)
	got, err := Status()
	if err != nil {
		t.Fatal(err)
	}
	want := []PoolStatus{
		{PageSize: Size2M, Total: 64, Free: 60, Reserved: 4, Surplus: 3},
		{PageSize: Size1G, Total: 2, Free: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Status() = %+v\nwant %+v", got, want)
	}
	if a := got[0].Available(); a != 56 {
		t.Errorf("Available() = %d, want 56 (free minus reserved)", a)
	}

	bad := filepath.Join(poolDir(root, Size2M), "free_hugepages")
	os.WriteFile(bad, []byte("lots\n"), 0o644)
	if _, err := Status(); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `"lots"`) {
		t.Errorf("Status() with a garbled counter: %v, want an error naming %s", err, bad)
	}
	os.Remove(bad)
	if _, err := Status(); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), bad) {
		t.Errorf("Status() with a missing counter: %v, want fs.ErrNotExist naming %s", err, bad)
	}
}

func TestStatusMissingRoot(t *testing.T) {
	setVar(t, &sysfsRoot, filepath.Join(t.TempDir(), "nope"))
	if _, err := Status(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Status() on a missing sysfs: %v, want fs.ErrNotExist", err)
	}
}

// The real kernel's pools, read-only: whatever they hold, they are
// consistent.
func TestStatusReal(t *testing.T) {
	st, err := Status()
	if err != nil {
		t.Skipf("no hugepage pools on this kernel: %v", err)
	}
	for _, s := range st {
		if !s.PageSize.valid() || s.Free > s.Total+s.Surplus || s.Reserved > s.Free {
			t.Errorf("inconsistent pool %+v", s)
		}
	}
}

func TestReserve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   int
		n       int
		want    int    // got, and the file's count afterwards
		wantErr string // "" for none
	}{
		{"raise", 16, 64, 64, ""},
		{"from nothing", 0, 1, 1, ""},
		{"already enough", 64, 16, 64, ""},
		{"exactly enough", 16, 16, 16, ""},
		{"negative", 16, -1, 0, "negative count -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeSysfs(t, PoolStatus{PageSize: Size2M, Total: tc.total})
			got, err := Reserve(Size2M, tc.n)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Reserve(2MiB, %d) = %d, %v; want an error saying %q", tc.n, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Reserve(2MiB, %d) = %d, %v; want %d", tc.n, got, err, tc.want)
			}
			if now, err := readCount(filepath.Join(poolDir(root, Size2M), "nr_hugepages")); err != nil || now != tc.want {
				t.Errorf("nr_hugepages = %d, %v after Reserve; want %d", now, err, tc.want)
			}
		})
	}
}

func TestReserveErrors(t *testing.T) {
	t.Run("no such pool", func(t *testing.T) {
		fakeSysfs(t, PoolStatus{PageSize: Size2M})
		_, err := Reserve(Size1G, 1)
		if err == nil || !strings.Contains(err.Error(), "no 1GiB hugepage pool") || !strings.Contains(err.Error(), "hugepages-1048576kB is missing") {
			t.Errorf("Reserve of a missing pool: %v, want an error naming the missing directory", err)
		}
	})
	t.Run("bad size", func(t *testing.T) {
		for _, ps := range []PageSize{0, Size4K, 3 << 20} {
			if _, err := Reserve(ps, 1); err == nil || !strings.Contains(err.Error(), "bad hugepage size") {
				t.Errorf("Reserve(%v, 1) = %v, want a bad-size error", ps, err)
			}
		}
	})
	t.Run("needs root", func(t *testing.T) {
		root := fakeSysfs(t, PoolStatus{PageSize: Size2M})
		file := filepath.Join(poolDir(root, Size2M), "nr_hugepages")
		cur := unwritable(t, file)
		got, err := Reserve(Size2M, cur+1)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "needs root") {
			t.Errorf("Reserve on an unwritable nr_hugepages: %v, want a permission error naming %s and saying it needs root", err, file)
		}
		if got != cur {
			t.Errorf("Reserve on an unwritable nr_hugepages returned %d, want the unchanged %d", got, cur)
		}
		// Asking for no more than there is needs no write, so no root.
		if got, err := Reserve(Size2M, cur); err != nil || got != cur {
			t.Errorf("Reserve of what is already there = %d, %v; want %d, nil", got, err, cur)
		}
	})
	t.Run("garbled count", func(t *testing.T) {
		root := fakeSysfs(t, PoolStatus{PageSize: Size2M})
		file := filepath.Join(poolDir(root, Size2M), "nr_hugepages")
		os.WriteFile(file, []byte("-3\n"), 0o644)
		if _, err := Reserve(Size2M, 1); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("Reserve with a garbled nr_hugepages: %v, want an error naming %s", err, file)
		}
	})
}

// The kernel may grant fewer pages than asked; the verdict says both numbers
// and what to do.
func TestCheckGranted(t *testing.T) {
	const file = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	if err := checkGranted(file, Size2M, 64, 64); err != nil {
		t.Errorf("all granted: %v", err)
	}
	if err := checkGranted(file, Size2M, 64, 70); err != nil {
		t.Errorf("more than asked: %v", err)
	}
	err := checkGranted(file, Size2M, 64, 40)
	for _, want := range []string{"asked for 64 2MiB hugepages", "granted 40", file, "compact_memory"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("short grant: %v, want it to say %q", err, want)
		}
	}
	if !errors.Is(err, ErrNoHugepages) {
		t.Errorf("short grant: %v, want ErrNoHugepages", err)
	}
	if err := checkGranted(file, Size1G, 4, 1); err == nil || !strings.Contains(err.Error(), "hugepagesz=1G hugepages=4") {
		t.Errorf("short 1GiB grant: %v, want the boot-time hint", err)
	}
}

func TestReserveHint(t *testing.T) {
	meminfo := filepath.Join(t.TempDir(), "meminfo")
	os.WriteFile(meminfo, []byte("MemTotal:       24684360 kB\nHugepagesize:       2048 kB\n"), 0o644)
	setVar(t, &procMeminfo, meminfo)
	for _, tc := range []struct {
		ps    PageSize
		n     int
		wants []string
	}{
		{Size2M, 64, []string{"ioatctl setup", "`echo 64 > /proc/sys/vm/nr_hugepages`"}},
		{Size1G, 2, []string{"`echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages`", "hugepagesz=1G hugepages=2"}},
	} {
		h := reserveHint(tc.ps, tc.n)
		for _, w := range tc.wants {
			if !strings.Contains(h, w) {
				t.Errorf("reserveHint(%v, %d) = %q, want it to say %q", tc.ps, tc.n, h, w)
			}
		}
	}
	// With 1 GiB default pages, 2 MiB pools are only reachable in sysfs.
	os.WriteFile(meminfo, []byte("Hugepagesize:    1048576 kB\n"), 0o644)
	if h := reserveHint(Size2M, 8); !strings.Contains(h, "hugepages-2048kB/nr_hugepages") {
		t.Errorf("reserveHint(2MiB) with 1GiB default pages = %q, want the sysfs file", h)
	}
}

func TestHugetlbfsMounts(t *testing.T) {
	const mounts = `sysfs /sys sysfs rw,nosuid 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
none /mnt/huge\0401G hugetlbfs rw,relatime,pagesize=1024M 0 0
tmpfs /run tmpfs rw 0 0
none /odd\134path hugetlbfs rw 0 0
none /bad\9escape hugetlbfs rw 0 0
short line
`
	got := hugetlbfsMounts(strings.NewReader(mounts))
	want := []string{"/dev/hugepages", "/mnt/huge 1G", `/odd\path`, `/bad\9escape`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hugetlbfsMounts = %q, want %q", got, want)
	}
}
