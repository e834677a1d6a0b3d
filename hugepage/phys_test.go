package hugepage

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// checkSegments asserts that segs cover n bytes in order without gaps, that
// neighbours are not physically contiguous (else they would be one run), and
// that every run agrees with phys for its first and last byte.
func checkSegments(t *testing.T, segs []PhysRange, n int, phys func(off int) (uint64, error)) {
	t.Helper()
	off := 0
	for i, s := range segs {
		if s.Off != off || s.Len <= 0 {
			t.Fatalf("segment %d = %+v, want it to start at offset %d", i, s, off)
		}
		if s.Phys == 0 {
			t.Errorf("segment %d has physical address 0", i)
		}
		if i > 0 && segs[i-1].Phys+uint64(segs[i-1].Len) == s.Phys {
			t.Errorf("segments %d and %d are physically contiguous but not merged: %+v %+v", i-1, i, segs[i-1], s)
		}
		for _, o := range []int{s.Off, s.Off + s.Len - 1} {
			p, err := phys(o)
			if err != nil {
				t.Fatal(err)
			}
			if want := s.Phys + uint64(o-s.Off); p != want {
				t.Errorf("byte %d is at %#x, segment %+v puts it at %#x", o, p, s, want)
			}
		}
		off += s.Len
	}
	if off != n {
		t.Errorf("segments cover %d bytes, want %d", off, n)
	}
}

func TestPhys(t *testing.T) {
	for _, tc := range []struct {
		ps    PageSize
		pages int
	}{
		{Size2M, 3},
		{Size4K, 16},
	} {
		t.Run(tc.ps.String(), func(t *testing.T) {
			if tc.ps != Size4K {
				needHugepages(t, tc.ps, tc.pages)
			}
			r := mustAlloc(t, tc.pages*int(tc.ps), Options{PageSize: tc.ps, NoFallback: true})
			if !canSeePhys() {
				_, err := r.Phys(0)
				if !errors.Is(err, ErrNoPhys) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") || !strings.Contains(err.Error(), "run as root") {
					t.Errorf("Phys without CAP_SYS_ADMIN: %v, want ErrNoPhys saying to run as root / grant CAP_SYS_ADMIN", err)
				}
				if _, err := r.PhysSegments(); !errors.Is(err, ErrNoPhys) {
					t.Errorf("PhysSegments without CAP_SYS_ADMIN: %v, want ErrNoPhys", err)
				}
				return
			}
			ps := int(tc.ps)
			for page := range tc.pages {
				base, err := r.Phys(page * ps)
				if err != nil {
					t.Fatal(err)
				}
				if base == 0 || base%uint64(ps) != 0 {
					t.Errorf("page %d starts at physical %#x, want a non-zero multiple of %v", page, base, tc.ps)
				}
				// Two bytes in one page are as far apart physically as
				// virtually.
				for _, off := range []int{1, 100, 4095, ps / 2, ps - 1} {
					p, err := r.Phys(page*ps + off)
					if err != nil {
						t.Fatal(err)
					}
					if p != base+uint64(off) {
						t.Errorf("byte %d of page %d is at %#x, want %#x", off, page, p, base+uint64(off))
					}
				}
			}
			segs, err := r.PhysSegments()
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) > tc.pages {
				t.Errorf("%d segments for %d pages", len(segs), tc.pages)
			}
			for _, s := range segs {
				if s.Len%ps != 0 || s.Phys%uint64(ps) != 0 {
					t.Errorf("segment %+v is not made of whole %v pages", s, tc.ps)
				}
			}
			checkSegments(t, segs, r.Len(), r.Phys)
		})
	}
}

func TestPhysBadOffset(t *testing.T) {
	r := mustAlloc(t, 4096, Options{PageSize: Size4K})
	for _, off := range []int{-1, 4096, 1 << 40} {
		if _, err := r.Phys(off); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("offset %d outside", off)) {
			t.Errorf("Phys(%d) = %v, want an out-of-range error", off, err)
		}
	}
}

// Translate works on any resident memory: here locked 4 KiB pages, where
// every page may be somewhere else physically, and a slice that starts and
// ends in the middle of pages.
func TestTranslate(t *testing.T) {
	r := mustAlloc(t, 64<<10, Options{PageSize: Size4K})
	b := r.Bytes()[100 : 60<<10+7]
	segs, err := Translate(b)
	if !canSeePhys() {
		if !errors.Is(err, ErrNoPhys) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
			t.Errorf("Translate without CAP_SYS_ADMIN: %v, want ErrNoPhys naming CAP_SYS_ADMIN", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	checkSegments(t, segs, len(b), func(off int) (uint64, error) { return r.Phys(100 + off) })
	if p, _ := r.Phys(100); segs[0].Phys != p || p%4096 != 100 {
		t.Errorf("first segment starts at %#x, want byte 100 of the region at %#x", segs[0].Phys, p)
	}

	if segs, err := Translate(nil); err != nil || segs != nil {
		t.Errorf("Translate(nil) = %v, %v; want no segments", segs, err)
	}
	one, err := Translate(b[5:6])
	if p, _ := r.Phys(105); err != nil || len(one) != 1 || one[0] != (PhysRange{Phys: p, Off: 0, Len: 1}) {
		t.Errorf("Translate of one byte = %+v, %v; want one run at %#x", one, err, p)
	}
}

// Memory never touched has no physical address, and Translate says so
// rather than returning 0.
func TestTranslateNotPresent(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	_, err = Translate(mem)
	if !errors.Is(err, ErrNoPhys) || !strings.Contains(err.Error(), "offset 0 is not present") {
		t.Errorf("Translate of untouched memory: %v, want ErrNoPhys saying the page is not present", err)
	}
	mem[0] = 1 // first page present, second not
	_, err = Translate(mem)
	if canSeePhys() && (!errors.Is(err, ErrNoPhys) || !strings.Contains(err.Error(), "offset 4096 is not present")) {
		t.Errorf("Translate of half-touched memory: %v, want ErrNoPhys for offset 4096", err)
	}
}

func TestEntryPFN(t *testing.T) {
	for _, tc := range []struct {
		e    uint64
		pfn  uint64
		want string // in the error; "" for none
	}{
		{pagemapPresent | 0x1234, 0x1234, ""},
		{pagemapPresent | 1<<55 | 0x1234, 0x1234, ""}, // soft-dirty bit is not part of the PFN
		{pagemapPresent, 0, "lacks CAP_SYS_ADMIN"},
		{0, 0, "not present"},
		{pagemapSwapped | 0x55, 0, "swapped out"},
	} {
		pfn, err := entryPFN(tc.e, 7)
		switch {
		case tc.want == "" && (err != nil || pfn != tc.pfn):
			t.Errorf("entryPFN(%#x) = %#x, %v; want %#x", tc.e, pfn, err, tc.pfn)
		case tc.want != "" && (!errors.Is(err, ErrNoPhys) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("entryPFN(%#x) = %v, want ErrNoPhys saying %q", tc.e, err, tc.want)
		}
	}
}
