package vfio

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gomx-dev/gomx/internal/movdir"
	"github.com/gomx-dev/gomx/pci"
)

// mmioRegs is a BAR mmapped from the device file. Every method is exactly
// one load or store of its width on the mapping, the way a device register
// must be touched:
//
//   - 32 and 64-bit loads use sync/atomic, which compiles to a single
//     aligned MOV that the compiler may neither split, merge, reorder with
//     other atomics, nor drop;
//   - 32 and 64-bit stores go through store32 and store64 (bar_store_*.go):
//     on amd64 a plain aligned MOV in a function that is never inlined, as
//     Linux's writel is; elsewhere a sync/atomic store, whose release
//     ordering publishes the descriptors written before it. Not a locked
//     XCHG on amd64: a locked instruction on device memory is no cheaper
//     on hardware, and under QEMU's TCG it is an atomic operation on MMIO,
//     which TCG can only run by stopping every other vCPU (a doorbell
//     write cost the other vCPU's polling loop several microseconds);
//   - sync/atomic has no 8 or 16-bit operations, so those are plain loads
//     and stores through an unsafe pointer in functions that are never
//     inlined: a call boundary keeps the compiler from merging or
//     eliminating them, and an aligned byte or halfword access is one
//     instruction.
//
// Before each access the register file checks the device's gone flag, so a
// driver that touches registers after Device.Close gets a panic that says
// so instead of a fault on unmapped memory (a race between Close and an
// access is still the driver's bug).
type mmioRegs struct {
	mem  []byte
	gone *atomic.Bool
	addr pci.Address
	bar  int
}

func (r *mmioRegs) Len() int { return len(r.mem) }

// at checks the access and returns a pointer to the register.
func (r *mmioRegs) at(off, width int) unsafe.Pointer {
	checkReg(r.addr, r.bar, off, width, len(r.mem))
	if r.gone.Load() {
		panic(fmt.Sprintf("vfio: %s BAR%d: register access after Device.Close", r.addr, r.bar))
	}
	return unsafe.Pointer(&r.mem[off])
}

//go:noinline
func (r *mmioRegs) Read8(off int) uint8 { return *(*uint8)(r.at(off, 1)) }

//go:noinline
func (r *mmioRegs) Read16(off int) uint16 { return *(*uint16)(r.at(off, 2)) }

func (r *mmioRegs) Read32(off int) uint32 { return atomic.LoadUint32((*uint32)(r.at(off, 4))) }

func (r *mmioRegs) Read64(off int) uint64 { return atomic.LoadUint64((*uint64)(r.at(off, 8))) }

//go:noinline
func (r *mmioRegs) Write8(off int, v uint8) { *(*uint8)(r.at(off, 1)) = v }

//go:noinline
func (r *mmioRegs) Write16(off int, v uint16) { *(*uint16)(r.at(off, 2)) = v }

func (r *mmioRegs) Write32(off int, v uint32) { store32(r.at(off, 4), v) }

func (r *mmioRegs) Write64(off int, v uint64) { store64(r.at(off, 8), v) }

// WritePortal is one MOVDIR64B of rec to the register at off (package
// internal/movdir: SFENCE first, so what the driver wrote to memory before
// reaches the device first). Every CPU that carries a DSA has the
// instruction; without it the record goes as eight 8-byte stores, which a
// DSA portal would drop.
func (r *mmioRegs) WritePortal(off int, rec *[64]byte) { movdir.Store(r.at(off, 64), rec) }
