package ioat

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/internal/sysfstest"
	"github.com/gomx-dev/gomx/ioat/idxd"
	"github.com/gomx-dev/gomx/pci"
)

// kernelDSA is a DSA model bound to "the kernel": configured as
// testdata/idxd-user.txt describes it (wq0.0 dedicated, wq0.1 shared,
// wq0.2 of type kernel, wq0.3 disabled), its user WQs' portals handed
// out as mapping /dev/dsa/wqD.Q would, the process's address space as
// its DMA domain.
type kernelDSA struct {
	plat *emulated.DSA
	root string
	o    UserOptions
	// dropsExpected is how many descriptors the test means the model to
	// drop (each a violation it records).
	dropsExpected uint64
}

func newKernelDSA(t testing.TB) *kernelDSA {
	t.Helper()
	plat, err := emulated.NewDSA(emulated.DSAOptions{SVA: true})
	if err != nil {
		t.Fatal(err)
	}
	k := &kernelDSA{plat: plat}
	t.Cleanup(func() {
		if s := plat.Stats(0); s.Violations != k.dropsExpected || s.Dropped != k.dropsExpected {
			t.Errorf("the model recorded %d violations and %d drops, want %d; last: %s", s.Violations, s.Dropped, k.dropsExpected, s.LastViolation)
		}
		plat.Close()
	})
	if err := plat.ConfigureKernel(0, []emulated.KernelWQ{{Size: 16}, {Size: 16, Shared: true}, {Size: 16}, {Size: 16}}); err != nil {
		t.Fatal(err)
	}
	k.root = sysfstest.Build(t, "testdata/idxd-user.txt")
	k.o = UserOptions{Sysfs: k.root, Dev: filepath.Join(k.root, "dev"), DMA: plat.IOMMU(),
		OpenPortal: func(path string, wq idxd.WQ) (Portal, error) { return plat.UserPortal(0, wq.Index) }}
	return k
}

func (k *kernelDSA) open(t testing.TB, name string) *WQ {
	t.Helper()
	q, err := OpenUserWQ(name, k.o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// set rewrites one sysfs attribute of the fake tree.
func (k *kernelDSA) set(t testing.TB, rel, v string) {
	t.Helper()
	p := filepath.Join(k.root, idxd.DevicesDir, rel)
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pageBuf returns n bytes starting on a page boundary, so tests can mark
// whole pages of it not present.
func pageBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int((4096 - uintptr(unsafe.Pointer(&b[0]))%4096) % 4096)
	return b[off : off+n : off+n]
}

// TestUserWQCopies runs random copies and fills through an Engine over
// the kernel's dedicated and shared user WQs, byte-exact with guard
// bytes, with no violation of the model (which would catch more than a
// dedicated WQ's size in flight, or ENQCMD to a dedicated WQ).
func TestUserWQCopies(t *testing.T) {
	for _, name := range []string{"wq0.0", "dsa0/wq0.1"} {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			k := newKernelDSA(t)
			q := k.open(t, name)
			if q.Info().Addr.String() != "0000:6a:01.0" {
				t.Errorf("Info.Addr = %v, want the DSA's PCI address from sysfs", q.Info().Addr)
			}
			e, err := NewEngineQueues([]Queue{q}, EngineOptions{CPUThreshold: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.Close(); err != nil {
					t.Error(err)
				}
			}()
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 24; i++ {
				n := rng.IntN(256 << 10)
				switch i % 8 {
				case 0:
					n = rng.IntN(100)
				case 7:
					n = 2<<20 + rng.IntN(1<<20) // split at max_transfer_size
				}
				src := make([]byte, n+16)
				for j := 0; j < len(src); j += 8 {
					v := rng.Uint64()
					for b := j; b < min(j+8, len(src)); b++ {
						src[b] = byte(v >> (8 * (b - j)))
					}
				}
				dst := make([]byte, n+16)
				if i%3 == 0 {
					if err := e.Fill(dst[8:8+n], 0x0102030405060708); err != nil {
						t.Fatal(err)
					}
					for j := 0; j < n; j++ {
						if dst[8+j] != byte(8-j%8) {
							t.Fatalf("fill of %d bytes: byte %d is %#x", n, j, dst[8+j])
						}
					}
				} else {
					if err := e.Copy(dst[8:8+n], src[8:8+n]); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(dst[8:8+n], src[8:8+n]) {
						t.Fatalf("copy of %d bytes differs", n)
					}
				}
				for j := 0; j < 8; j++ {
					if dst[j] != 0 || dst[8+n+j] != 0 {
						t.Fatalf("request %d (%d bytes) wrote a guard byte", i, n)
					}
				}
			}
		})
	}
}

// TestUserWQSharedByTwo opens the shared WQ twice, as two processes
// would, so together they post twice its size: ENQCMD refuses what does
// not fit and the driver retries, and every copy still lands.
func TestUserWQSharedByTwo(t *testing.T) {
	k := newKernelDSA(t)
	e, err := NewEngineQueues([]Queue{k.open(t, "wq0.1"), k.open(t, "wq0.1")}, EngineOptions{CPUThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	var cks []*Cookie
	for off := 0; off < len(src); off += 4096 {
		ck, err := e.ICopy(dst[off:off+4096], src[off:off+4096])
		if err != nil {
			t.Fatal(err)
		}
		cks = append(cks, ck)
	}
	for _, ck := range cks {
		if err := e.Wait(t.Context(), ck); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("copies through the shared WQ differ")
	}
}

// TestUserWQPageFault marks pages of the source and the destination not
// present: the device stops at each with a partial completion, the
// driver touches the page and resumes the rest, and the bytes land
// exactly, for single descriptors, batch members and fills.
func TestUserWQPageFault(t *testing.T) {
	k := newKernelDSA(t)
	q := k.open(t, "wq0.0")
	defer func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	}()
	dma := k.plat.IOMMU()
	const n = 64 << 10
	src, dst := pageBuf(n), pageBuf(n)
	for i := range src {
		src[i] = byte(i*13 + 5)
	}
	sm, _ := dma.Map(src)
	dm, _ := dma.Map(dst)
	defer dma.Unmap(sm)
	defer dma.Unmap(dm)
	var out [64]Completion
	run := func(what string, enq func()) {
		t.Helper()
		enq()
		q.Submit()
		want := q.Outstanding()
		got := 0
		for w := startWait(q.opts.Watchdog); got < want; {
			m := q.Poll(out[got:])
			for _, c := range out[got : got+m] {
				if c.Err != nil {
					t.Fatalf("%s: %v", what, c.Err)
				}
			}
			got += m
			if w.expired() {
				t.Fatalf("%s: %d of %d completed", what, got, want)
			}
		}
	}

	// One descriptor faulting on a source page, then on a destination
	// page, at an odd offset so the resumption is not page-aligned work.
	clear(dst)
	dma.MarkNotPresent(src[12288 : 12288+4096])
	dma.MarkNotPresent(dst[40960 : 40960+8192])
	before := q.Stats().PageFaults
	run("single", func() {
		if err := q.EnqueueCopy(dm, 3, sm, 3, n-3, 1); err != nil {
			t.Fatal(err)
		}
	})
	if !bytes.Equal(dst[3:], src[3:]) || dst[0]|dst[1]|dst[2] != 0 {
		t.Fatal("copy resumed after page faults differs from the source")
	}
	if f := q.Stats().PageFaults - before; f < 3 {
		t.Errorf("PageFaults grew by %d, want one per page marked (3)", f)
	}

	// A batch: eight copies, the third and sixth faulting.
	clear(dst)
	dma.MarkNotPresent(src[2*8192 : 2*8192+1])
	dma.MarkNotPresent(dst[5*8192+4096 : 5*8192+4097])
	run("batch", func() {
		for i := 0; i < 8; i++ {
			if err := q.EnqueueCopy(dm, i*8192, sm, i*8192, 8192, uint64(10+i)); err != nil {
				t.Fatal(err)
			}
		}
	})
	if !bytes.Equal(dst, src) {
		t.Fatal("batch resumed after member page faults differs from the source")
	}

	// A fill whose pattern must go on where the fault stopped it.
	dma.MarkNotPresent(dst[4096*3 : 4096*3+1])
	run("fill", func() {
		if err := q.EnqueueFill(dm, 5, 5*4096, 0x8877665544332211, 20); err != nil {
			t.Fatal(err)
		}
	})
	for i := 0; i < 5*4096; i++ {
		if want := byte(0x11 * (1 + i%8)); dst[5+i] != want {
			t.Fatalf("fill byte %d = %#x, want %#x", i, dst[5+i], want)
		}
	}
}

// TestUserWQFaultUnresumable: a fault on a domain that cannot bring
// pages in fails the request with ErrDMAFault naming why, and the WQ goes
// on.
func TestUserWQFaultUnresumable(t *testing.T) {
	k := newKernelDSA(t)
	q := k.open(t, "wq0.0")
	defer q.Close()
	dma := k.plat.IOMMU()
	q.dma = noTouch{dma}
	src, dst := pageBuf(16384), pageBuf(16384)
	sm, _ := dma.Map(src)
	dm, _ := dma.Map(dst)
	defer dma.Unmap(sm)
	defer dma.Unmap(dm)
	dma.MarkNotPresent(src[8192:8193])
	if err := q.EnqueueCopy(dm, 0, sm, 0, 16384, 1); err != nil {
		t.Fatal(err)
	}
	if err := q.EnqueueCopy(dm, 0, sm, 0, 4096, 2); err != nil {
		t.Fatal(err)
	}
	q.Submit()
	var out [2]Completion
	got := 0
	for w := startWait(q.opts.Watchdog); got < 2 && !w.expired(); {
		got += q.Poll(out[got:])
	}
	var de *DSAError
	if got != 2 || !errors.As(out[0].Err, &de) || !errors.Is(out[0].Err, ErrDMAFault) || de.Touch == nil || de.Bytes != 8192 {
		t.Fatalf("faulting copy: %d completions, err %v; want a *DSAError after 8192 bytes that cannot be resumed", got, out[0].Err)
	}
	if out[1].Err != nil {
		t.Fatalf("the copy after it failed: %v", out[1].Err)
	}
}

type noTouch struct{ pci.DMA }

// lyingTouch says it brought a page in and did not.
type lyingTouch struct{ pci.DMA }

func (lyingTouch) Touch(uint64, bool) error { return nil }

// TestUserWQFaultBound: a page that stays away after every touch fails
// its request after a bounded number of resumptions instead of looping.
func TestUserWQFaultBound(t *testing.T) {
	k := newKernelDSA(t)
	q := k.open(t, "wq0.0")
	defer q.Close()
	dma := k.plat.IOMMU()
	q.dma = lyingTouch{dma}
	src, dst := pageBuf(16384), pageBuf(16384)
	sm, _ := dma.Map(src)
	dm, _ := dma.Map(dst)
	defer dma.Unmap(sm)
	defer dma.Unmap(dm)
	dma.MarkNotPresent(dst[4096:4097])
	if err := q.EnqueueCopy(dm, 0, sm, 0, 16384, 1); err != nil {
		t.Fatal(err)
	}
	q.Submit()
	var out [1]Completion
	for w := startWait(q.opts.Watchdog); q.Poll(out[:]) == 0; {
		if w.expired() {
			t.Fatal("no completion")
		}
	}
	var de *DSAError
	if !errors.As(out[0].Err, &de) || de.Touch == nil || !strings.Contains(de.Error(), "still faulting") || !de.Write || q.Stats().PageFaults != maxFaultTries+1 {
		t.Fatalf("a page that never comes: %v (%d resumptions)", out[0].Err, q.Stats().PageFaults)
	}
}

// TestUserWQErrors: what keeps a user WQ from opening is said with its
// fix.
func TestUserWQErrors(t *testing.T) {
	cases := []struct {
		name, wq string
		edit     func(t *testing.T, k *kernelDSA)
		want     []string
		is       error
	}{
		{"no idxd", "", func(t *testing.T, k *kernelDSA) { os.RemoveAll(filepath.Join(k.root, "bus/dsa")) }, []string{"modprobe idxd"}, nil},
		{"vfio", "", func(t *testing.T, k *kernelDSA) {
			os.RemoveAll(filepath.Join(k.root, "bus/dsa"))
			for _, f := range [][2]string{{"vendor", "0x8086"}, {"device", "0x0b25"}} {
				p := filepath.Join(k.root, "bus/pci/devices/0000:6a:01.0", f[0])
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(f[1]+"\n"), 0o644)
			}
			os.MkdirAll(filepath.Join(k.root, "bus/pci/drivers/vfio-pci/0000:6a:01.0"), 0o755)
		}, []string{"bound to vfio-pci", "ioatctl unbind 0000:6a:01.0", "disable_denylist"}, nil},
		{"none user", "", func(t *testing.T, k *kernelDSA) {
			for _, w := range []string{"wq0.0", "wq0.1", "wq0.3"} {
				k.set(t, w+"/type", "none")
			}
		}, []string{"no enabled work queue of type user", "ioatctl dsa-config"}, ErrNoUserWQ},
		{"kernel type", "wq0.2", nil, []string{`type is "kernel"`, "dsa-config"}, ErrNoUserWQ},
		{"disabled", "wq0.3", nil, []string{"the WQ is disabled", "enable-wq dsa0/wq0.3"}, ErrNoUserWQ},
		{"missing", "wq1.0", nil, []string{`no work queue "wq1.0"`, "wq0.0 enabled"}, ErrNoUserWQ},
		{"no pasid", "wq0.0", func(t *testing.T, k *kernelDSA) { k.set(t, "dsa0/pasid_enabled", "0") }, []string{"PASID", "sm_on"}, pci.ErrNotSupported},
		{"device off", "wq0.0", func(t *testing.T, k *kernelDSA) { k.set(t, "dsa0/state", "disabled") }, []string{"device is disabled", "dsa-config"}, ErrNoUserWQ},
		{"bad op_cap", "wq0.0", func(t *testing.T, k *kernelDSA) { k.set(t, "dsa0/op_cap", "zz") }, []string{"op_cap", "not hex"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := newKernelDSA(t)
			if c.edit != nil {
				c.edit(t, k)
			}
			q, err := OpenUserWQ(c.wq, k.o)
			if err == nil {
				q.Close()
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
		})
	}
	t.Run("permission", func(t *testing.T) {
		err := portalOpenErr("/dev/dsa/wq0.0", idxd.WQ{Name: "wq0.0"}, &os.PathError{Op: "open", Path: "/dev/dsa/wq0.0", Err: os.ErrPermission})
		if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "chown") {
			t.Errorf("permission error %q does not name the fix", err)
		}
	})
	t.Run("interrupts", func(t *testing.T) {
		k := newKernelDSA(t)
		o := k.o
		o.Interrupts = true
		if _, err := OpenUserWQ("wq0.0", o); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "polling") {
			t.Errorf("Interrupts on a user WQ: %v", err)
		}
	})
}

// TestUserWQNoAllocs: enqueue, submit and poll on a user WQ allocate
// nothing, as on the VFIO path.
func TestUserWQNoAllocs(t *testing.T) {
	k := newKernelDSA(t)
	q := k.open(t, "wq0.0")
	defer q.Close()
	dma := k.plat.IOMMU()
	src, dst := make([]byte, 4096), make([]byte, 4096)
	sm, _ := dma.Map(src)
	dm, _ := dma.Map(dst)
	defer dma.Unmap(sm)
	defer dma.Unmap(dm)
	var out [32]Completion
	allocs := testing.AllocsPerRun(50, func() {
		for i := 0; i < 32; i++ {
			if err := q.EnqueueCopy(dm, i*64, sm, i*64, 64, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		q.Submit()
		for got, w := 0, startWait(q.opts.Watchdog); got < 32 && !w.expired(); {
			got += q.Poll(out[got:])
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch of 32", allocs)
	}
}

// TestUserWQStall: the kernel disables the WQ under an open user (its
// portal then drops what is written to it); the watchdog fails the
// request with ErrStalled, saying the kernel owns the WQ, the WQ takes no
// more work, and Close leaves the ring mapped, since user space cannot
// stop the device from writing into it.
func TestUserWQStall(t *testing.T) {
	k := newKernelDSA(t)
	o := k.o
	o.Watchdog = 20 * time.Millisecond
	q, err := OpenUserWQ("wq0.0", o)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.plat.DisableWQ(0, 0); err != nil {
		t.Fatal(err)
	}
	k.dropsExpected = 1
	dma := k.plat.IOMMU()
	buf := make([]byte, 8192)
	m, _ := dma.Map(buf)
	defer dma.Unmap(m)
	if err := q.EnqueueCopy(m, 0, m, 4096, 4096, 7); err != nil {
		t.Fatal(err)
	}
	q.Submit()
	var out [1]Completion
	for w := startWait(5 * time.Second); q.Poll(out[:]) == 0; {
		if w.expired() {
			t.Fatal("the watchdog never failed the request")
		}
		time.Sleep(time.Millisecond)
	}
	var de *DSAError
	if !errors.Is(out[0].Err, ErrStalled) || !errors.As(out[0].Err, &de) || !de.Kernel || !strings.Contains(out[0].Err.Error(), "kernel owns it") {
		t.Errorf("stalled request: %v", out[0].Err)
	}
	if err := q.EnqueueNull(8); !errors.Is(err, ErrChannelBroken) || !strings.Contains(err.Error(), "dsa-config") {
		t.Errorf("enqueue after the stall: %v", err)
	}
	if err := q.Close(); err == nil || !strings.Contains(err.Error(), "left mapped") {
		t.Errorf("Close after a stall: %v", err)
	}
	q.freeRing() // the test knows the model's WQ is disabled: nothing can write there now
}

// TestUserWQSharedFull: two openers of one shared WQ, the device held
// busy. The first fills the WQ; the second's ENQCMDs are refused (retried,
// bounded, then left for Poll) and nothing of it is lost: once the device
// runs again, Poll posts it and every copy lands.
func TestUserWQSharedFull(t *testing.T) {
	k := newKernelDSA(t)
	k.o.Watchdog = time.Minute // a loaded machine must not make the full WQ look starved
	a, b := k.open(t, "wq0.1"), k.open(t, "wq0.1")
	defer a.Close()
	defer b.Close()
	dma := k.plat.IOMMU()
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i*5 + 1)
	}
	sm, _ := dma.Map(src)
	dm, _ := dma.Map(dst)
	defer dma.Unmap(sm)
	defer dma.Unmap(dm)
	k.plat.Hold(0, true)
	for i := 0; i < 16; i++ { // 16 single descriptors: the WQ's 16 entries
		if err := a.EnqueueCopy(dm, i*2048, sm, i*2048, 2048, uint64(i)); err != nil {
			t.Fatal(err)
		}
		a.Submit()
	}
	for i := 16; i < 32; i++ {
		if err := b.EnqueueCopy(dm, i*2048, sm, i*2048, 2048, uint64(i)); err != nil {
			t.Fatal(err)
		}
		b.Submit()
	}
	if r := b.Stats().EnqRetries; r < enqTries {
		t.Fatalf("the second opener's ENQCMDs were refused %d times, want at least %d (the WQ was full)", r, enqTries)
	}
	k.plat.Hold(0, false)
	var out [32]Completion
	for _, q := range []*WQ{a, b} {
		got := 0
		for w := startWait(q.opts.Watchdog); got < 16; {
			n := q.Poll(out[got:])
			for _, c := range out[got : got+n] {
				if c.Err != nil {
					t.Fatal(c.Err)
				}
			}
			got += n
			if w.expired() {
				t.Fatalf("%d of 16 completed", got)
			}
		}
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("copies through the full shared WQ differ")
	}
}

// TestUserWQSharedStarved: a shared WQ that other users keep full fails
// what this opener waits to post after the watchdog time, instead of
// leaving it waiting forever; once the WQ has room, new requests run.
func TestUserWQSharedStarved(t *testing.T) {
	k := newKernelDSA(t)
	a := k.open(t, "wq0.1")
	defer a.Close()
	o := k.o
	o.Watchdog = 20 * time.Millisecond
	b, err := OpenUserWQ("wq0.1", o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dma := k.plat.IOMMU()
	buf := make([]byte, 64<<10)
	m, _ := dma.Map(buf)
	defer dma.Unmap(m)
	k.plat.Hold(0, true)
	for i := 0; i < 16; i++ {
		if err := a.EnqueueNull(uint64(i)); err != nil {
			t.Fatal(err)
		}
		a.Submit()
	}
	if err := b.EnqueueCopy(m, 0, m, 4096, 4096, 1); err != nil {
		t.Fatal(err)
	}
	b.Submit()
	var out [16]Completion
	for w := startWait(5 * time.Second); b.Poll(out[:1]) == 0; {
		if w.expired() {
			t.Fatal("the starved request never failed")
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(out[0].Err, ErrStalled) || !strings.Contains(out[0].Err.Error(), "other users keep it full") {
		t.Errorf("starved request: %v", out[0].Err)
	}
	k.plat.Hold(0, false)
	for got, w := 0, startWait(5*time.Second); got < 16; {
		got += a.Poll(out[got:])
		if w.expired() {
			t.Fatalf("the first opener got %d of 16", got)
		}
	}
	if err := b.EnqueueCopy(m, 0, m, 4096, 4096, 2); err != nil {
		t.Fatal(err)
	}
	b.Submit()
	for w := startWait(5 * time.Second); b.Poll(out[:1]) == 0; {
		if w.expired() {
			t.Fatal("no completion once the WQ had room")
		}
	}
	if out[0].Err != nil {
		t.Errorf("a request once the WQ had room: %v", out[0].Err)
	}
}
