package ioat

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/gomx-dev/gomx/internal/movdir"
	"github.com/gomx-dev/gomx/ioat/idxd"
	"github.com/gomx-dev/gomx/pci"
	"golang.org/x/sys/unix"
)

// portalSize is what the idxd driver lets a process map of a user WQ's
// character device: one 4 KiB page, the WQ's unlimited portal.
const portalSize = 4096

// charDevPortal is a WQ portal mapped from /dev/dsa/wqD.Q.
type charDevPortal struct {
	f   *os.File
	mem []byte
}

// openCharDev opens the WQ's character device and maps its portal
// (write-only, shared, as the idxd driver allows), checking first that
// the CPU has the instruction the WQ's mode needs.
func openCharDev(path string, wq idxd.WQ) (Portal, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, portalOpenErr(path, wq, err)
	}
	if st.Mode()&os.ModeCharDevice == 0 {
		return nil, fmt.Errorf("ioat: %s: %s is not a character device: is /dev the kernel's devtmpfs (UserOptions.Dev)? %w", wq.Name, path, ErrNoUserWQ)
	}
	if wq.Dedicated() && !movdir.Supported() {
		return nil, fmt.Errorf("ioat: %s: this CPU lacks MOVDIR64B (CPUID.7.0:ECX bit 28), which a dedicated WQ's portal needs: %w", wq.Name, pci.ErrNotSupported)
	}
	if !wq.Dedicated() && !movdir.EnqueueSupported() {
		return nil, fmt.Errorf("ioat: %s is a shared WQ and this CPU lacks ENQCMD (CPUID.7.0:ECX bit 29); no software path submits to a shared WQ: configure a dedicated one (ioatctl dsa-config --mode dedicated): %w", wq.Name, pci.ErrNotSupported)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, portalOpenErr(path, wq, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, portalSize, unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ioat: %s: map the portal of %s: %w", wq.Name, path, err)
	}
	return &charDevPortal{f: f, mem: mem}, nil
}

func (p *charDevPortal) Write64B(rec *[64]byte) { movdir.Store(unsafe.Pointer(&p.mem[0]), rec) }

func (p *charDevPortal) Enqueue(rec *[64]byte) bool {
	return movdir.Enqueue(unsafe.Pointer(&p.mem[0]), rec)
}

func (p *charDevPortal) Close() error {
	return errors.Join(unix.Munmap(p.mem), p.f.Close())
}

// processMemory is the DMA domain of the kernel path: the process's own
// address space, which a DSA with PASID reaches through the IOMMU's
// shared virtual memory. A buffer's device address is its virtual
// address; nothing is pinned, so the device may find a page not present
// and report it in the completion record (see WQ and Touch).
type processMemory struct{}

// ProcessMemory returns the process's address space as a DMA domain, as
// a kernel-owned DSA work queue with shared virtual memory sees it: Map
// is the identity (the buffer must stay where it is, which Go's heap and
// mmapped memory do; stacks do not: never map a stack variable), Unmap
// forgets nothing, and pageable memory is accepted.
func ProcessMemory() pci.DMA { return processMemory{} }

func (processMemory) Map(buf []byte) (*pci.Mapping, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("ioat: map of an empty buffer: %w", pci.ErrBadRange)
	}
	return &pci.Mapping{Buf: buf, Segments: []pci.Segment{{IOVA: uint64(addrOf(buf)), Len: len(buf)}}, Handle: processMemory{}}, nil
}

func (processMemory) Unmap(m *pci.Mapping) error {
	if m == nil || m.Handle != (processMemory{}) {
		return fmt.Errorf("ioat: unmap of a mapping made elsewhere: %w", pci.ErrNotMapped)
	}
	return nil
}

// AcceptsPageable is true: the device faults pages in through the
// completion record.
func (processMemory) AcceptsPageable() bool { return true }

// Touch brings in the page at addr, writable when write is set, with
// madvise(MADV_POPULATE_READ or _WRITE) (Linux 5.14), which faults it in
// as a load or store would without changing its bytes.
func (processMemory) Touch(addr uint64, write bool) error {
	adv := unix.MADV_POPULATE_READ
	if write {
		adv = unix.MADV_POPULATE_WRITE
	}
	page := uintptr(addr) &^ (portalSize - 1)
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, page, portalSize, uintptr(adv)); e != 0 {
		if e == unix.EINVAL {
			return fmt.Errorf("bring in page %#x: madvise(MADV_POPULATE) needs Linux 5.14: %w", page, e)
		}
		return fmt.Errorf("bring in page %#x: not memory of this process (%w)", page, e)
	}
	return nil
}
