package hugepage

import (
	"encoding/binary"
	"fmt"
	"os"
)

// PhysRange is one physically contiguous run of a translated buffer.
type PhysRange struct {
	// Phys is the physical address of the run's first byte.
	Phys uint64
	// Off is the offset of the run's first byte in the translated buffer.
	Off int
	// Len is the length of the run in bytes.
	Len int
}

// Translate returns the physically contiguous runs behind b, in order,
// covering all of b (it is what VFIO's no-IOMMU mode hands a device).
// Adjacent pages that happen to be physically adjacent share a run.
//
// b must be resident and locked, as memory from Alloc is: heap memory can
// be moved or swapped by the kernel after Translate has looked. A page that
// is not present fails with an error wrapping ErrNoPhys; so does a process
// that may not see physical addresses (it needs CAP_SYS_ADMIN). An empty b
// has no runs.
func Translate(b []byte) ([]PhysRange, error) {
	if len(b) == 0 {
		return nil, nil
	}
	return translate(addrOf(b), len(b))
}

// Bits of a /proc/self/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagemapPresent = 1 << 63
	pagemapSwapped = 1 << 62
	pagemapPFN     = 1<<55 - 1
	pagemapEntry   = 8 // bytes per entry, one entry per base page
)

// pagemapChunk is how many entries translate reads at a time.
const pagemapChunk = 512

// translate returns the runs behind the n bytes at virtual address addr.
func translate(addr uintptr, n int) ([]PhysRange, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("hugepage: translate: %w", err)
	}
	defer f.Close()

	pg := uintptr(os.Getpagesize())
	first := addr &^ (pg - 1)
	end := addr + uintptr(n)
	npages := int((end - first + pg - 1) / pg)
	raw := make([]byte, min(npages, pagemapChunk)*pagemapEntry)
	var out []PhysRange
	for i := 0; i < npages; {
		k := min(npages-i, pagemapChunk)
		page := first + uintptr(i)*pg
		if _, err := f.ReadAt(raw[:k*pagemapEntry], int64(page/pg)*pagemapEntry); err != nil {
			return nil, fmt.Errorf("hugepage: translate: read /proc/self/pagemap at %#x: %w", page, err)
		}
		for j := range k {
			e := binary.NativeEndian.Uint64(raw[j*pagemapEntry:])
			start, stop := max(page, addr), min(page+pg, end)
			off := int(start - addr)
			pfn, err := entryPFN(e, off)
			if err != nil {
				return nil, err
			}
			phys := pfn*uint64(pg) + uint64(start-page)
			l := int(stop - start)
			if last := len(out) - 1; last >= 0 && out[last].Phys+uint64(out[last].Len) == phys {
				out[last].Len += l
			} else {
				out = append(out, PhysRange{Phys: phys, Off: off, Len: l})
			}
			page += pg
		}
		i += k
	}
	return out, nil
}

// entryPFN is the page frame number in pagemap entry e, which describes the
// page holding byte off of the buffer being translated.
func entryPFN(e uint64, off int) (uint64, error) {
	switch {
	case e&pagemapPresent == 0 && e&pagemapSwapped != 0:
		return 0, fmt.Errorf("hugepage: the page at offset %d is swapped out: only locked memory (from Alloc, or mlock'ed) has a stable physical address: %w", off, ErrNoPhys)
	case e&pagemapPresent == 0:
		return 0, fmt.Errorf("hugepage: the page at offset %d is not present: fault it in and lock it first (memory from Alloc always is): %w", off, ErrNoPhys)
	case e&pagemapPFN == 0:
		return 0, fmt.Errorf("hugepage: /proc/self/pagemap reads PFN 0 at offset %d: the process lacks CAP_SYS_ADMIN, so the kernel hides physical addresses; run as root / grant CAP_SYS_ADMIN: %w", off, ErrNoPhys)
	}
	return e & pagemapPFN, nil
}

// resident reports whether every page of size ps in mem is present, and if
// not the offset of the first that is not. It reads one pagemap entry per
// page; if pagemap cannot be read it has nothing to say and reports true.
func resident(mem []byte, ps int) (ok bool, off int) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return true, 0
	}
	defer f.Close()
	pg := uintptr(os.Getpagesize())
	base := addrOf(mem)
	var raw [pagemapEntry]byte
	for off := 0; off < len(mem); off += ps {
		if _, err := f.ReadAt(raw[:], int64((base+uintptr(off))/pg)*pagemapEntry); err != nil {
			return true, 0
		}
		if binary.NativeEndian.Uint64(raw[:])&pagemapPresent == 0 {
			return false, off
		}
	}
	return true, 0
}
