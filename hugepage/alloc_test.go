package hugepage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPageSizeString(t *testing.T) {
	for _, tc := range []struct {
		p         PageSize
		want, opt string
	}{
		{Size4K, "4KiB", "4K"},
		{Size2M, "2MiB", "2M"},
		{Size1G, "1GiB", "1G"},
		{64 << 10, "64KiB", "64K"},
		{32 << 20, "32MiB", "32M"},
		{16 << 30, "16GiB", "16G"},
		{3000, "3000B", "3000B"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("PageSize(%d).String() = %q, want %q", int(tc.p), got, tc.want)
		}
		if got := tc.p.mountOption(); got != tc.opt {
			t.Errorf("PageSize(%d).mountOption() = %q, want %q", int(tc.p), got, tc.opt)
		}
	}
}

func TestSourceString(t *testing.T) {
	for s, want := range map[Source]string{Anonymous: "anonymous", HugetlbFS: "hugetlbfs", Memfd: "memfd", 7: "Source(7)"} {
		if got := s.String(); got != want {
			t.Errorf("Source(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions()
	if o.PageSize != Size2M || o.Source != Anonymous || o.Name != "gomx" || o.Reserve || o.NoFallback || o.Dir != "" {
		t.Errorf("DefaultOptions() = %+v", o)
	}
	z, err := Options{}.withDefaults()
	if err != nil || z != o {
		t.Errorf("zero Options mean %+v, %v; want %+v like DefaultOptions", z, err, o)
	}
}

// Bad requests fail before anything is mapped.
func TestAllocBadRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		o    Options
		want string
	}{
		{"zero size", 0, Options{}, "bad size 0"},
		{"negative size", -5, Options{}, "bad size -5"},
		{"page size not a power of two", 4096, Options{PageSize: 3 << 20}, "bad page size"},
		{"page size below 4KiB", 4096, Options{PageSize: 1024}, "bad page size"},
		{"unknown source", 4096, Options{Source: 9}, "unknown Source(9)"},
		{"hugetlbfs with 4KiB pages", 4096, Options{PageSize: Size4K, Source: HugetlbFS}, "hugetlbfs has no 4KiB pages"},
		{"name with slash", 4096, Options{Name: "a/b"}, `bad name "a/b"`},
		{"dir not hugetlbfs", 4096, Options{Source: HugetlbFS, Dir: os.TempDir()}, "is not a hugetlbfs mount"},
		{"dir missing", 4096, Options{Source: HugetlbFS, Dir: "/nonexistent/hugepages"}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Alloc(tc.size, tc.o)
			if err == nil {
				r.Close()
				t.Fatalf("Alloc(%d, %+v) succeeded, want an error saying %q", tc.size, tc.o, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Alloc(%d, %+v) = %v, want an error saying %q", tc.size, tc.o, err, tc.want)
			}
		})
	}
}

// checkMemory asserts what a user of a fresh region notices: its size, that
// it is writable and readable, and that the kernel backs it with the page
// size the region reports.
func checkMemory(t *testing.T, r *Region, wantLen int) {
	t.Helper()
	b := r.Bytes()
	if r.Len() != wantLen || len(b) != wantLen || cap(b) != wantLen {
		t.Fatalf("Len() = %d, len(Bytes()) = %d, cap = %d; want %d", r.Len(), len(b), cap(b), wantLen)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
		b[min(i+4095, len(b)-1)] = 0xa5
	}
	for i := 0; i < len(b); i += 4096 {
		if b[i] != byte(i>>12) || b[min(i+4095, len(b)-1)] != 0xa5 {
			t.Fatalf("byte %d did not keep what was written", i)
		}
	}
	v := vmaAt(t, addrOf(b))
	if v.kernelPageSize != int(r.PageSize()) {
		t.Errorf("kernel backs the region with %d-byte pages, region says %v", v.kernelPageSize, r.PageSize())
	}
	if r.PageSize() == Size4K && v.locked < wantLen {
		t.Errorf("only %d of %d bytes of 4KiB pages are locked", v.locked, wantLen)
	}
	if r.FD() >= 0 {
		// Another mapping of the descriptor (as another process would make)
		// sees the same memory.
		other, err := unix.Mmap(r.FD(), 0, wantLen, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatalf("mmap of FD() %d: %v", r.FD(), err)
		}
		defer unix.Munmap(other)
		if other[0] != b[0] || other[wantLen-1] != 0xa5 {
			t.Errorf("a second mapping of FD() does not see the region's bytes")
		}
	}
}

func TestAlloc(t *testing.T) {
	const name = "gomx-test"
	for _, tc := range []struct {
		ps      PageSize
		src     Source
		size    int
		wantLen int
	}{
		{Size2M, Anonymous, 3 << 20, 4 << 20},
		{Size2M, Memfd, 1, 2 << 20},
		{Size2M, HugetlbFS, 2 << 20, 2 << 20},
		{Size1G, Anonymous, 1 << 30, 1 << 30},
		{Size1G, Memfd, 100, 1 << 30},
		{Size4K, Anonymous, 10000, 12288},
		{Size4K, Memfd, 4096, 4096},
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.ps, tc.src), func(t *testing.T) {
			o := Options{PageSize: tc.ps, Source: tc.src, Name: name, NoFallback: true}
			if tc.ps != Size4K {
				needHugepages(t, tc.ps, tc.wantLen/int(tc.ps))
			}
			if tc.src == HugetlbFS {
				o.Dir = hugetlbfsDir(t, tc.ps)
			}
			r := mustAlloc(t, tc.size, o)
			if r.Degraded() != "" {
				t.Errorf("Degraded() = %q, want \"\"", r.Degraded())
			}
			if r.PageSize() != tc.ps || r.Source() != tc.src {
				t.Errorf("PageSize(), Source() = %v, %v; want %v, %v", r.PageSize(), r.Source(), tc.ps, tc.src)
			}
			if (r.FD() >= 0) != (tc.src != Anonymous) {
				t.Errorf("FD() = %d for a %v region", r.FD(), tc.src)
			}
			checkMemory(t, r, tc.wantLen)
			if tc.src == Memfd {
				if v := vmaAt(t, addrOf(r.Bytes())); !strings.Contains(v.name, "memfd:"+name) {
					t.Errorf("/proc/self/maps names the region %q, want it to show memfd:%s", v.name, name)
				}
			}
		})
	}
}

// With Dir empty, Alloc finds a hugetlbfs mount of the right page size by
// itself.
func TestAllocHugetlbfsDiscovered(t *testing.T) {
	needHugepages(t, Size2M, 1)
	hugetlbfsDir(t, Size2M)
	r := mustAlloc(t, 4096, Options{Source: HugetlbFS, NoFallback: true})
	if r.Degraded() != "" || r.Source() != HugetlbFS || r.FD() < 0 {
		t.Errorf("got %v with FD %d, degraded %q; want a hugetlbfs region", r, r.FD(), r.Degraded())
	}
	checkMemory(t, r, 2<<20)
}

// When hugepages are lacking, Alloc falls back to locked 4 KiB pages and
// says why and how to fix it, or fails with ErrNoHugepages if told not to
// fall back.
func TestAllocDegraded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T) (size int, o Options)
		src     Source // what the degraded region is
		reasons []string
	}{
		{
			name: "no 2MiB pages/anonymous",
			setup: func(t *testing.T) (int, Options) {
				fakeSysfs(t, PoolStatus{PageSize: Size2M})
				return 2<<20 + 1, Options{}
			},
			src: Anonymous,
			reasons: []string{"no free 2MiB hugepages (HugePages_Free=0 of 0)", "ioatctl setup",
				"echo 2 > /proc/sys/vm/nr_hugepages", "; using locked 4KiB pages"},
		},
		{
			name: "no 2MiB pages/memfd",
			setup: func(t *testing.T) (int, Options) {
				fakeSysfs(t, PoolStatus{PageSize: Size2M, Total: 8, Free: 1})
				return 4 << 20, Options{Source: Memfd}
			},
			src:     Memfd,
			reasons: []string{"too few free 2MiB hugepages: need 2, 1 available (HugePages_Free=1 of 8)", "echo 9 > /proc/sys/vm/nr_hugepages"},
		},
		{
			name: "free pages all promised to other mappings",
			setup: func(t *testing.T) (int, Options) {
				fakeSysfs(t, PoolStatus{PageSize: Size2M, Total: 8, Free: 3, Reserved: 3})
				return 1, Options{}
			},
			src:     Anonymous,
			reasons: []string{"no free 2MiB hugepages (HugePages_Free=3 of 8, HugePages_Rsvd=3)"},
		},
		{
			name: "no hugetlbfs mount",
			setup: func(t *testing.T) (int, Options) {
				empty := filepath.Join(t.TempDir(), "mounts")
				os.WriteFile(empty, []byte("proc /proc proc rw 0 0\n"), 0o644)
				setVar(t, &procMounts, empty)
				return 1, Options{Source: HugetlbFS}
			},
			src:     Anonymous,
			reasons: []string{"no hugetlbfs mount with 2MiB pages", "mount -t hugetlbfs -o pagesize=2M"},
		},
		{
			name: "no pool of that size",
			setup: func(t *testing.T) (int, Options) {
				fakeSysfs(t, PoolStatus{PageSize: Size2M, Total: 8, Free: 8})
				return 1, Options{PageSize: 8 << 20}
			},
			src:     Anonymous,
			reasons: []string{"the kernel has no 8MiB hugepage pool", "hugepages-8192kB is missing", "hugepagesz=8M"},
		},
		{
			name: "1GiB pages lacking",
			setup: func(t *testing.T) (int, Options) {
				// A fake 1 GiB pool of one free page, promised elsewhere.
				fakeSysfs(t, PoolStatus{PageSize: Size1G, Total: 1, Free: 1, Reserved: 1})
				return 1, Options{PageSize: Size1G, Source: Memfd}
			},
			src:     Memfd,
			reasons: []string{"no free 1GiB hugepages", "hugepages-1048576kB/nr_hugepages", "hugepagesz=1G hugepages=2"},
		},
		{
			name: "reserving needs root",
			setup: func(t *testing.T) (int, Options) {
				root := fakeSysfs(t, PoolStatus{PageSize: Size2M})
				unwritable(t, filepath.Join(poolDir(root, Size2M), "nr_hugepages"))
				return 1, Options{Reserve: true}
			},
			src:     Anonymous,
			reasons: []string{"raising nr_hugepages failed", "needs root", "ioatctl setup"},
		},
		{
			name: "more than the real pool has",
			setup: func(t *testing.T) (int, Options) {
				st, err := readPool(sysfsRoot, Size2M)
				if err != nil {
					t.Skipf("no 2MiB hugepage pool to exhaust: %v", err)
				}
				if st.Available() > 64 {
					t.Skipf("%d free 2MiB hugepages: too many to exhaust in a test", st.Available())
				}
				return (st.Available() + 1) * int(Size2M), Options{}
			},
			src:     Anonymous,
			reasons: []string{"2MiB hugepages", "nr_hugepages", "using locked 4KiB pages"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size, o := tc.setup(t)
			r := mustAlloc(t, size, o)
			for _, want := range tc.reasons {
				if !strings.Contains(r.Degraded(), want) {
					t.Errorf("Degraded() = %q\nwant it to say %q", r.Degraded(), want)
				}
			}
			if r.PageSize() != Size4K || r.Source() != tc.src {
				t.Errorf("degraded region has %v pages from %v, want 4KiB pages from %v", r.PageSize(), r.Source(), tc.src)
			}
			if (r.FD() >= 0) != (tc.src == Memfd) {
				t.Errorf("FD() = %d for a degraded %v region", r.FD(), tc.src)
			}
			checkMemory(t, r, (size+4095)&^4095)

			o.NoFallback = true
			r2, err := Alloc(size, o)
			if err == nil {
				r2.Close()
				t.Fatalf("Alloc with NoFallback succeeded, want ErrNoHugepages")
			}
			if !errors.Is(err, ErrNoHugepages) {
				t.Errorf("Alloc with NoFallback: %v, want ErrNoHugepages", err)
			}
			for _, want := range tc.reasons {
				if want = strings.TrimPrefix(want, "; "); !strings.Contains(err.Error(), want) && want != "using locked 4KiB pages" {
					t.Errorf("Alloc with NoFallback: %v\nwant it to say %q", err, want)
				}
			}
		})
	}
}

// Options.Reserve grows the real pool by what is missing (as root).
func TestAllocReserve(t *testing.T) {
	st, err := readPool(sysfsRoot, Size2M)
	if err != nil {
		skipOrFail(t, Size2M, "no 2MiB hugepage pool: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("raising nr_hugepages needs root; run the tests as root")
	}
	need := st.Available() + 1
	if need > 64 {
		t.Skipf("%d free 2MiB hugepages: too many to exhaust in a test", st.Available())
	}
	// Give back what the test adds to the pool, unless someone else has
	// changed the pool since.
	file := filepath.Join(poolDir(sysfsRoot, Size2M), "nr_hugepages")
	t.Cleanup(func() {
		if now, err := readCount(file); err == nil && now == st.Total+1 {
			os.WriteFile(file, []byte(strconv.Itoa(st.Total)+"\n"), 0o644)
		}
	})
	r := mustAlloc(t, need*int(Size2M), Options{Reserve: true})
	if d := r.Degraded(); d != "" {
		if !strings.Contains(d, "raising nr_hugepages failed") && !strings.Contains(d, "too few") {
			t.Errorf("Reserve could not help and Degraded() = %q does not say why", d)
		}
		skipOrFail(t, Size2M, "the kernel could not grow the 2MiB pool: %s", d)
	}
	checkMemory(t, r, need*int(Size2M))
}

func TestRegionClose(t *testing.T) {
	for _, ps := range []PageSize{Size4K, Size2M} {
		t.Run(ps.String(), func(t *testing.T) {
			before := Live()
			r, err := Alloc(1, Options{PageSize: ps, Source: Memfd})
			if err != nil {
				t.Fatal(err)
			}
			if Live() != before+1 {
				t.Errorf("Live() = %d after Alloc, want %d", Live(), before+1)
			}
			fd := r.FD()
			if err := r.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := r.Close(); err != nil {
				t.Errorf("second Close: %v, want nil", err)
			}
			if Live() != before {
				t.Errorf("Live() = %d after Close, want %d", Live(), before)
			}
			if r.Bytes() != nil || r.FD() != -1 || r.Len() != int(r.PageSize()) {
				t.Errorf("after Close: Bytes() = %d bytes, FD() = %d, Len() = %d", len(r.Bytes()), r.FD(), r.Len())
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
				t.Errorf("fd %d still open after Close", fd)
			}
			if _, err := r.Phys(0); !errors.Is(err, ErrClosed) {
				t.Errorf("Phys after Close: %v, want ErrClosed", err)
			}
			if _, err := r.PhysSegments(); !errors.Is(err, ErrClosed) {
				t.Errorf("PhysSegments after Close: %v, want ErrClosed", err)
			}
			if !strings.HasSuffix(r.String(), "(closed)") {
				t.Errorf("String() = %q, want it to say closed", r.String())
			}
		})
	}
}

func TestLiveRegions(t *testing.T) {
	r, err := Alloc(5000, Options{PageSize: Size4K}) // this line is named below
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(100, 3, Options{PageSize: Size4K})
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	lines := LiveRegions()
	if len(lines) != Live() {
		t.Errorf("LiveRegions has %d lines, Live() = %d", len(lines), Live())
	}
	wantR := "8192 bytes of anonymous 4KiB pages, allocated at hugepage/alloc_test.go:"
	wantP := "4096 bytes of anonymous 4KiB pages for a pool of 3 buffers of 128 bytes, allocated at hugepage/alloc_test.go:"
	var sawR, sawP bool
	for _, l := range lines {
		sawR = sawR || strings.HasPrefix(l, wantR)
		sawP = sawP || strings.HasPrefix(l, wantP)
	}
	if !sawR || !sawP {
		t.Errorf("LiveRegions() = %q\nwant lines starting %q and %q", lines, wantR, wantP)
	}
	r.Close()
	p.Close()
	for _, l := range LiveRegions() {
		if strings.Contains(l, "alloc_test.go") {
			t.Errorf("closed region still listed: %s", l)
		}
	}
}

// AllowPageable keeps pages the locked-memory limit refuses as ordinary
// pageable memory, says so in Degraded, and is refused without it. It needs
// a process the limit binds: root locks any amount.
func TestAllocPageable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may lock any amount, so the limit cannot refuse: run as a user (make test-unprivileged) to exercise the fallback")
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		t.Fatal(err)
	}
	low := rl
	low.Cur = 0
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
		t.Fatalf("lower RLIMIT_MEMLOCK: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
			t.Errorf("restore RLIMIT_MEMLOCK: %v", err)
		}
	})
	const size = 3*4096 + 1
	if r, err := Alloc(size, Options{PageSize: Size4K}); err == nil {
		r.Close()
		t.Fatal("Alloc of 4KiB pages with a locked-memory limit of 0 succeeded without AllowPageable")
	} else if !strings.Contains(err.Error(), "raise the locked-memory limit") {
		t.Errorf("Alloc without AllowPageable: %v\nwant it to name the locked-memory limit", err)
	}

	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T) Options
		reasons []string
	}{
		{"4KiB pages", func(t *testing.T) Options { return Options{PageSize: Size4K, AllowPageable: true} },
			[]string{"mlock", "raise the locked-memory limit", "using ordinary pageable memory"}},
		{"no 2MiB pages", func(t *testing.T) Options {
			fakeSysfs(t, PoolStatus{PageSize: Size2M})
			return Options{AllowPageable: true}
		}, []string{"no free 2MiB hugepages", "raise the locked-memory limit", "using ordinary pageable memory"}},
		{"memfd", func(t *testing.T) Options { return Options{PageSize: Size4K, Source: Memfd, AllowPageable: true} },
			[]string{"using ordinary pageable memory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.setup(t)
			r, err := Alloc(size, o)
			if err != nil {
				t.Fatalf("Alloc with AllowPageable: %v", err)
			}
			defer r.Close()
			for _, want := range tc.reasons {
				if !strings.Contains(r.Degraded(), want) {
					t.Errorf("Degraded() = %q\nwant it to say %q", r.Degraded(), want)
				}
			}
			b := r.Bytes()
			if r.PageSize() != Size4K || len(b) != 4*4096 {
				t.Fatalf("region of %d bytes of %v pages, want %d of 4KiB", len(b), r.PageSize(), 4*4096)
			}
			for i := range b {
				b[i] = byte(i * 7)
			}
			for i := range b {
				if b[i] != byte(i*7) {
					t.Fatalf("byte %d did not keep what was written", i)
				}
			}
			if v := vmaAt(t, addrOf(b)); v.locked != 0 {
				t.Errorf("%d bytes of a pageable region are locked", v.locked)
			}
			if ok, off := resident(b, 4096); !ok {
				t.Errorf("page at offset %d not resident: pageable memory is still prefaulted", off)
			}
		})
	}
}
