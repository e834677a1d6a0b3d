package mx

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/nic"
)

// The zero-copy tests run over the nic transport on both emulated NIC
// pairs: 82574Ls (whose model shows a test where each TX descriptor
// pointed) and 82599s, each also opened to place received payloads. Those
// of them `make qemu-test` runs also take QEMU's 82574L pair through VFIO
// (zcVFIOModels), and skip it elsewhere.

// zcModel is a NIC pair for the zero-copy tests: an emulated one, or
// two 82574Ls through VFIO (zcVFIOModels).
type zcModel struct {
	name string
	// open returns the pair's two functions, the platform's IOMMU and
	// its Close; tx, when set, sees every TX data descriptor (82574L
	// only).
	open func(t testing.TB, tx func(port int, iova uint64, mem []byte)) ([2]pci.Device, *emulated.IOMMU, func() error)
	drv  func(pci.Device) (nicdrv.NIC, error)
	// place says the receiving NIC places payloads; placedCopies bounds
	// the receiver's copies per byte of a large message then (the
	// payload bytes each reply brings in its header buffer).
	place        bool
	placedCopies float64
	// mtu is the transport's MTU (nic.Options.MTU; 0 for 1500).
	mtu int
	// slow says the pair moves each frame slowly (QEMU without KVM
	// emulates every one): the tests send fewer messages over it.
	slow bool
	// fewPlacedUnderFaults says a placing pair may place nothing under
	// TestZeroCopyFaults' faults: QEMU's 82574L under TCG copies nearly
	// every re-requested reply, so only no loss is checked there.
	fewPlacedUnderFaults bool
	// physical, when set, reports that the pair's DMA addresses are
	// physical (VFIO without an IOMMU): a registration of Go memory
	// breaks where physical memory does, and a frame whose payload
	// straddles a break is copied.
	physical func() bool
}

var zcModels = []zcModel{
	{name: "82574L",
		open: openE1000EPair,
		drv:  func(d pci.Device) (nicdrv.NIC, error) { return e1000e.Open(d, e1000e.DefaultOptions()) }},
	{name: "82599",
		open: openIXGBEPair,
		drv:  func(d pci.Device) (nicdrv.NIC, error) { return ixgbe.Open(d, ixgbe.DefaultOptions()) }},
	{name: "82599-place",
		open: openIXGBEPair,
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := ixgbe.DefaultOptions()
			o.Placement = true
			return ixgbe.Open(d, o)
		},
		place: true, placedCopies: 0.05},
	// Lanes opened for frames of the MTU (MaxFrame = MTU + 14: the lanes
	// strip VLAN tags), as mxbench --nic-place opens them: a lane's span
	// is a full reply's payload, and every reply is placed.
	{name: "82599-lanes",
		open: openIXGBEPair,
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := ixgbe.DefaultOptions()
			o.Placement, o.Queues, o.PlaceOnly = true, 5, 4
			o.MaxFrame = 1514
			return ixgbe.Open(d, o)
		},
		place: true, placedCopies: 0.05},
	// 96 payload bytes of each 1486-byte reply in the 128-byte header
	// buffer, and the replies that take the descriptors ahead: 0.076 per
	// byte.
	{name: "82574L-place",
		open: openE1000EPair,
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := e1000e.DefaultOptions()
			o.Placement = true
			return e1000e.Open(d, o)
		},
		place: true, placedCopies: 0.09},
	// Lanes with jumbo frames: 9000-byte MTU, each frame whole in one
	// 16 KiB receive buffer or placement (SRRCTL.BSIZEPACKET 16 KiB).
	{name: "82599-jumbo-lanes",
		open: openIXGBEPair,
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := ixgbe.DefaultOptions()
			o.Placement, o.Queues, o.PlaceOnly = true, 5, 4
			o.MaxFrame, o.BufferSize, o.PoolBuffers, o.TxRing = 9014, 16384, 1024, 1024
			o.Memory.PageSize = hugepage.Size4K // 80 MiB a NIC: not the host's hugepages
			return ixgbe.Open(d, o)
		},
		place: true, placedCopies: 0.05, mtu: 9000},
}

// zcWire puts two boards on the nic transport over m, the receiving side
// (b) behind a fault wrapper when faults are given. Its close checks that
// no DMA mapping outlived the transports and the IOMMU refused no access
// (the model's; a VFIO pair's open returns no IOMMU and checks its own).
func zcWire(t testing.TB, m zcModel, tx func(int, uint64, []byte), faults *fault.Options) *wire2 {
	devs, iommu, closeModel := m.open(t, tx)
	var trs [2]transport.Transport
	for i := range 2 {
		n, err := m.drv(devs[i])
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nic.New(n, nic.Options{MTU: m.mtu})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		trs[i] = tr
	}
	if faults != nil {
		// Faults on what b receives: a's sends reach its NIC untouched,
		// in place, and the wire loses, reorders and duplicates them.
		w, err := fault.Wrap(trs[1], fault.WrapOptions{Recv: *faults})
		if err != nil {
			t.Fatal(err)
		}
		trs[1] = w
	}
	return &wire2{a: trs[0], b: trs[1],
		third: func() transport.Transport { t.Fatal("the zero-copy wire has two ends"); return nil },
		close: func() {
			if iommu != nil {
				if n := iommu.Live(); n != 0 {
					t.Errorf("%s: %d DMA mappings left after both boards closed", m.name, n)
				}
				if n, last := iommu.Faults(); n != 0 {
					t.Errorf("%s: %d DMA faults, the last %+v", m.name, n, last)
				}
			}
			if err := closeModel(); err != nil {
				t.Errorf("%s: %v", m.name, err)
			}
		}}
}

// zcOptions are fast board options with zero copy as mode asks: "on"
// (no trailer, so replies may go in place; "unpadded" too, the test then
// making the receiver's peer one that pads no reply), "off" (forced off) or
// "negotiated" (the boards agree on the trailer, which only a copy can
// place after the payload).
func zcOptions(mode string) BoardOptions {
	o := fastOptions()
	switch mode {
	case "on", "unpadded":
		o.NoChecksum = true
	case "off":
		o.NoChecksum = true
		o.ZeroCopy.Off = true
	}
	return o
}

// zcSizes is a message of every size class: tiny, small, medium, and
// large ones of one frame, one block, several blocks and a megabyte and
// more (not a multiple of the reply length or the page). zcSizesFew is
// one of each class, for a slow pair.
var (
	zcSizes    = []int{0, 17, 100, 5000, 32 << 10, 40 << 10, 100<<10 + 3, 1 << 20, 1<<20 + 4097}
	zcSizesFew = []int{0, 17, 5000, 40 << 10, 100<<10 + 3, 1<<20 + 4097}
)

// TestZeroCopyByteExact sends messages of every size class, from one
// segment, several segments and an offset into a buffer, over every NIC
// pair (VFIO's too) with zero copy on, forced off and negotiated away:
// every byte arrives, and the copy accounting says how: a large message
// sent in place costs its sender no copy, the others two per byte.
func TestZeroCopyByteExact(t *testing.T) {
	for _, m := range slices.Concat(zcModels, zcVFIOModels) {
		modes := []string{"on", "off", "negotiated"}
		if m.place {
			modes = append(modes, "unpadded")
		}
		for _, mode := range modes {
			t.Run(m.name+"/"+mode, func(t *testing.T) {
				checkLeaks(t)
				pr := newPairOn(t, zcWire(t, m, nil, nil), zcOptions(mode))
				if mode == "unpadded" {
					// b learnt of a peer that never announced
					// ExtReplyPad (as Open-MX): its replies come
					// unpadded, split 32 bytes into the payload.
					pr.bb.mu.Lock()
					pr.btoa.p.replyPad = false
					pr.bb.mu.Unlock()
				}
				on := mode == "on" || mode == "unpadded"
				broken := m.physical != nil && m.physical()
				thr := pr.ba.RendezvousThreshold()
				var placedAll uint64
				sizes, shapes := zcSizes, []string{"one", "offset", "segments"}
				if m.slow {
					sizes, shapes = zcSizesFew, []string{"one", "segments"}
				}
				for i, size := range sizes {
					src := pattern(size+64, uint64(i+1))
					for _, shape := range shapes {
						var segs [][]byte
						switch shape {
						case "one":
							segs = [][]byte{src[:size]}
						case "offset":
							segs = [][]byte{src[37 : 37+size]}
						case "segments":
							segs = [][]byte{src[:size/3], src[size/3 : size/2], src[size/2 : size]}
						}
						want := bytes.Join(segs, nil)
						dst := make([]byte, size)
						before, resent := pr.a.CopyStats(), retransmits(pr)
						beforeB := pr.b.CopyStats()
						// A bound per message: the models move every byte
						// with the CPU, slowly on a loaded host under -race.
						exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 9, ^uint64(0), segs, [][]byte{dst})
						if !bytes.Equal(dst, want) {
							t.Fatalf("%d bytes (%s): arrived changed", size, shape)
						}
						c := pr.a.CopyStats().Sub(before)
						large := size > thr
						rc := pr.b.CopyStats().Sub(beforeB)
						if m.place && on && large {
							// The NIC places what took its own span;
							// what landed elsewhere (a frame resent
							// early took a span) is copied once.
							placedAll += rc.RecvPlaced
							if rc.RecvPlaced+rc.RecvScatter < uint64(size) || rc.RecvPerByte() > 1 && retransmits(pr) == resent {
								t.Errorf("%d bytes (%s): received %d in place, %.3f copied per byte: want the rest copied, at most once", size, shape, rc.RecvPlaced, rc.RecvPerByte())
							}
						} else if rc.RecvPlaced != 0 && (!on || !large) {
							t.Errorf("%d bytes (%s, zero copy %s): %d bytes received in place", size, shape, mode, rc.RecvPlaced)
						}
						switch {
						case on && large && shape != "segments" && !broken:
							// At least the message: a reply asked for again
							// goes out in place again.
							// An earlier eager message resent late is
							// copied in the meantime.
							if c.SendInPlace < uint64(size) || (c.SendCopied() != 0 && retransmits(pr) == resent) {
								t.Errorf("%d bytes (%s): %d sent in place, %d copied; want all in place, none copied", size, shape, c.SendInPlace, c.SendCopied())
							}
						case on && large:
							// Only the frames that straddle two segments
							// (or a break in physical memory) are copied.
							if c.SendInPlace == 0 || c.SendInPlace+c.SendTransport < uint64(size) {
								t.Errorf("%d bytes (%s): %d sent in place, %d copied: want most in place", size, shape, c.SendInPlace, c.SendCopied())
							}
						default:
							if c.SendInPlace != 0 {
								t.Errorf("%d bytes (%s, zero copy %s): %d bytes sent in place", size, shape, mode, c.SendInPlace)
							}
						}
					}
				}
				if m.place && on && placedAll == 0 {
					t.Errorf("nothing was received in place")
				}
				s := pr.ba.ZeroCopyStats()
				if on && (s.Misses == 0 || s.Hits == 0) {
					t.Errorf("registration cache %+v: want misses on first use, hits after", s)
				}
				if !on && s.Misses+s.Hits != 0 && s.Registered != 0 {
					t.Errorf("zero copy %s: the cache holds %d registrations", mode, s.Registered)
				}
			})
		}
	}
}

// TestZeroCopyGuard: a sender that writes a guard pattern into its buffer
// as soon as its send completes never has it read again: the 82574L
// model sees no TX descriptor point into the buffer after completion, and
// the receiver gets the message as it was (over VFIO, where nothing sees
// the descriptors, the receiver's bytes are the check). The wire loses,
// reorders and duplicates frames, so re-requested replies are in flight
// as sends complete.
func TestZeroCopyGuard(t *testing.T) {
	for _, m := range []zcModel{zcModels[0], zcVFIOModels[0]} {
		t.Run(m.name, func(t *testing.T) { zeroCopyGuard(t, m) })
	}
}

func zeroCopyGuard(t *testing.T, m zcModel) {
	const size = 600 << 10
	var buf atomic.Pointer[[]byte]
	var done atomic.Bool
	var late atomic.Int64
	tx := func(port int, iova uint64, mem []byte) {
		p := buf.Load()
		if port != 0 || p == nil || len(mem) == 0 || !done.Load() {
			return
		}
		b := *p
		if &mem[0] == &b[0] || within(b, mem) {
			late.Add(1)
		}
	}
	fo := fault.Options{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02, Seed: 7}
	checkLeaks(t)
	pr := newPairOn(t, zcWire(t, m, tx, &fo), zcOptions("on"))
	n := 20
	if m.slow {
		n = 3
	}
	for i := range n {
		ctx := testCtx(t, time.Minute) // per message: the model is slow on a loaded host under -race
		src := pattern(size, uint64(100+i))
		want := append([]byte(nil), src...)
		buf.Store(&src)
		dst := make([]byte, size)
		r, err := pr.b.IRecv([][]byte{dst}, 5, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.a.ISend([][]byte{src}, pr.atob, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		done.Store(true)
		for j := range src {
			src[j] = 0xEE // the guard
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("message %d: the guard written after completion reached the receiver", i)
		}
		done.Store(false)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("the NIC read a sender's buffer %d times after its send completed", n)
	}
	if c := pr.a.CopyStats(); c.SendInPlace == 0 {
		t.Errorf("nothing was sent in place: %+v", c)
	}
}

// TestZeroCopyFaults: loss, reordering and duplication on the wire with
// zero copy on, over every NIC pair: every message arrives whole, several
// in flight at once. A placing model places some; over QEMU's pair under
// TCG, with frames asked for again, nearly every reply lands outside its
// span and is copied (none, or under 1 % of the bytes, placed): there the
// test checks only that nothing is lost.
func TestZeroCopyFaults(t *testing.T) {
	for _, m := range slices.Concat(zcModels, zcVFIOModels) {
		t.Run(m.name, func(t *testing.T) {
			fo := fault.Options{Loss: 0.03, Reorder: 0.03, Duplicate: 0.03, Seed: 11}
			checkLeaks(t)
			pr := newPairOn(t, zcWire(t, m, nil, &fo), zcOptions("on"))
			rounds := 6
			if m.slow {
				rounds = 2
			}
			windowedRounds(t, pr, []int{64 << 10, 200<<10 + 1, 1 << 20, 50 << 10}, rounds, nil)
			c := pr.a.CopyStats()
			if c.SendInPlace == 0 {
				t.Errorf("nothing was sent in place: %+v", c)
			}
			if rc := pr.b.CopyStats(); m.place {
				t.Logf("received %d bytes, %d in place, %.3f copied per byte", rc.RecvBytes, rc.RecvPlaced, rc.RecvPerByte())
				if rc.RecvPlaced == 0 && !m.fewPlacedUnderFaults {
					t.Errorf("nothing was received in place: %+v", rc)
				}
			}
			if f := pr.b.Counters().Get(PullFramesRerequested); f == 0 {
				t.Logf("the faults made no re-request (seed %d)", fo.Seed)
			}
		})
	}
}

// TestZeroCopyCache: the board's registrations are cached (a second
// message from the same memory, or part of it, maps nothing new), evicted
// past CacheBytes, and dropped by Invalidate, after which memory mapped
// again at the same address is registered afresh and its new bytes are
// sent, never the old pages'. Over the 82599 model and VFIO.
func TestZeroCopyCache(t *testing.T) {
	for _, m := range []zcModel{zcModels[1], zcVFIOModels[0]} {
		t.Run(m.name, func(t *testing.T) { zeroCopyCache(t, m) })
	}
}

func zeroCopyCache(t *testing.T, m zcModel) {
	o := zcOptions("on")
	o.ZeroCopy.CacheBytes = 3 << 20
	checkLeaks(t)
	pr := newPairOn(t, zcWire(t, m, nil, nil), o)
	send := func(src []byte) {
		t.Helper()
		dst := make([]byte, len(src))
		exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 3, ^uint64(0), [][]byte{src}, [][]byte{dst})
		if !bytes.Equal(src, dst) {
			t.Fatalf("%d bytes arrived changed", len(src))
		}
	}
	a := pattern(2<<20, 1)
	send(a)
	send(a[4096 : 1<<20])
	if s := pr.ba.ZeroCopyStats(); s.Misses != 1 || s.Hits != 1 || s.Registered != 1 {
		t.Fatalf("after two messages from one buffer: %+v, want one registration, one hit", s)
	}
	b := pattern(2<<20, 2)
	send(b) // past CacheBytes: a's idle registration goes
	if s := pr.ba.ZeroCopyStats(); s.Evictions != 1 || s.Registered != 1 {
		t.Fatalf("after a second buffer past the limit: %+v, want the first evicted", s)
	}

	// Memory the program maps itself, unmapped and mapped again at the
	// same address.
	mem, err := mapAnon(1 << 20)
	if err != nil {
		t.Skipf("anonymous mapping: %v", err)
	}
	copy(mem, pattern(len(mem), 3))
	send(mem)
	if n := pr.ba.Invalidate(mem); n != 1 {
		t.Fatalf("Invalidate dropped %d registrations, want 1", n)
	}
	addr := &mem[0]
	if err := unmapAnon(mem); err != nil {
		t.Fatal(err)
	}
	mem2, err := mapAnonAt(addr, 1<<20)
	if err != nil {
		t.Skipf("mapping again at the same address: %v", err)
	}
	defer unmapAnon(mem2)
	copy(mem2, pattern(len(mem2), 4))
	misses := pr.ba.ZeroCopyStats().Misses
	send(mem2)
	if s := pr.ba.ZeroCopyStats(); s.Misses != misses+1 || s.Invalidations != 1 {
		t.Errorf("memory mapped again at an invalidated address: %+v, want a new registration", s)
	}
	pr.ba.Invalidate(mem2) // before the deferred unmap
}

// TestZeroCopyLoopbackCopies: over a transport that copies, zero copy on
// changes nothing but what the cache learns once: every reply is copied
// and counted so.
func TestZeroCopyLoopbackCopies(t *testing.T) {
	pr := newPair(t, transportFactories[0], zcOptions("on"), loopback.Faults{})
	ctx := testCtx(t, 20*time.Second)
	for i := range 3 {
		src := pattern(300<<10, uint64(i))
		dst := make([]byte, len(src))
		exchange(t, ctx, pr.a, pr.atob, pr.b, 1, ^uint64(0), [][]byte{src}, [][]byte{dst})
		if !bytes.Equal(src, dst) {
			t.Fatal("arrived changed")
		}
	}
	if c := pr.a.CopyStats(); c.SendInPlace != 0 || c.SendTransport < c.SentBytes {
		t.Errorf("over the copying loopback wire: %+v", c)
	}
	if s := pr.ba.ZeroCopyStats(); s.Registered != 0 || s.Misses > 1 {
		t.Errorf("the cache kept asking a transport that copies: %+v", s)
	}
}

// TestZeroCopyReceiveInPlace: over the 82599 and 82574L pairs opened to
// place payloads, a 1 MiB message received on a quiet wire has its payload
// written by the NIC into the receive buffer, byte-exact, every byte
// written once (by the NIC or, for the replies that took the pool
// descriptors ahead and the last one, by the CPU). From a peer that pads
// its replies (wire.ExtReplyPad) the replies in place cost the CPU
// nothing; from one that does not (as Open-MX), the payload bytes of each
// that came in the header buffer (32 on the 82599, 96 on the 82574L) are
// copied. A frame no pull counted (a question, an ack of a resend) costs
// at most the rest of a window each. Where frames were resent, at most
// one byte per byte.
func TestZeroCopyReceiveInPlace(t *testing.T) {
	inHeader := map[string]int{"82599-place": 32, "82599-lanes": 32, "82599-jumbo-lanes": 32, "82574L-place": 96}
	for _, m := range zcModels {
		if !m.place {
			continue
		}
		for _, padded := range []bool{true, false} {
			t.Run(m.name+"/"+map[bool]string{true: "padded", false: "unpadded"}[padded], func(t *testing.T) {
				checkLeaks(t)
				o := zcOptions("on")
				o.PullTimeout = 200 * time.Millisecond // no re-request on a slow host
				pr := newPairOn(t, zcWire(t, m, nil, nil), o)
				if !padded {
					// What b learnt at connect of a peer that never
					// announced ExtReplyPad.
					pr.bb.mu.Lock()
					pr.btoa.p.replyPad = false
					pr.bb.mu.Unlock()
				}
				// A window: the replies of the blocks a pull keeps asked
				// for at once, each at most a reply's length.
				pr.bb.mu.Lock()
				window := uint64(pr.bb.opts.PullBlocks * pr.bb.opts.PullBlockFrames * pr.btoa.p.replyLen)
				pr.bb.mu.Unlock()
				if window == 0 {
					t.Fatalf("no reply length learnt at connect")
				}
				const size = 1 << 20
				frames := size / (cmp.Or(m.mtu, 1500) - 100) // more than there are
				// What the previous message resent or asked: its acks and
				// answers may come during the next one.
				var resentPrev, askedPrev uint64
				for i := range 3 {
					src := pattern(size, uint64(40+i))
					dst := make([]byte, size)
					before, resent, asked := pr.b.CopyStats(), retransmits(pr), questions(pr)
					exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 9, ^uint64(0), [][]byte{src}, [][]byte{dst})
					if !bytes.Equal(dst, src) {
						t.Fatalf("message %d arrived changed", i)
					}
					c := pr.b.CopyStats().Sub(before)
					t.Logf("message %d: %d bytes in place, %.4f copied per byte", i, c.RecvPlaced, c.RecvPerByte())
					if c.RecvPerByte() > 1 {
						t.Errorf("message %d: %.4f copied per byte: want at most one", i, c.RecvPerByte())
					}
					prevQuiet := i == 0 || resent == resentPrev && asked == askedPrev
					// The frames no pull counted that may have crossed
					// this one: its questions, and the previous
					// message's resends and questions (their acks and
					// answers come when they do).
					strays := questions(pr) - asked
					if i > 0 {
						strays += resent - resentPrev + asked - askedPrev
					}
					resentPrev, askedPrev = resent, asked
					if retransmits(pr) != resent {
						continue
					}
					if questions(pr) != asked || !prevQuiet {
						// A loaded host: a question (ask.go) crossed the
						// pull, or the previous message was resent or
						// asked about. The answers to the receiver's
						// questions come before the replies, and are
						// counted; a question of the sender's, or its ack
						// of a frame the receiver resent, arrives when it
						// does, and takes a descriptor of the spans posted
						// then: the rest of that window lands late, and
						// the next block is realigned (placerecv.go). Each
						// such stray costs at most a window, not the
						// message; the sender asks again each askWait,
						// doubled, so a host that keeps it late for long
						// asks two or more in a message (two cost 224 of
						// 724 replies at load 14). So: what a quiet
						// message places, less a window a stray.
						if lost := strays * window; c.RecvPlaced+lost < size*9/10 {
							t.Errorf("message %d: %d bytes in place after %d questions or resends: want all but a window's (%d bytes) each, over 90%% less %d", i, c.RecvPlaced, strays, window, lost)
						}
						continue
					}
					if c.RecvScatter+c.RecvPlaced != size {
						t.Errorf("message %d: %d bytes copied and %d placed of %d: want each written once", i, c.RecvScatter, c.RecvPlaced, size)
					}
					switch {
					case c.RecvPlaced < size*9/10 || c.RecvPerByte() > m.placedCopies:
						t.Errorf("message %d: %d bytes in place, %.4f copied per byte: want over 90%% in place, at most %.2f copied", i, c.RecvPlaced, c.RecvPerByte(), m.placedCopies)
					case padded && c.RecvScatter > 12*1500:
						t.Errorf("message %d: %d bytes copied: want only the replies before the first span and the last one", i, c.RecvScatter)
					case !padded && c.RecvScatter < uint64(inHeader[m.name]*frames/2):
						t.Errorf("message %d: %d bytes copied: want the %d bytes of each reply's header buffer", i, c.RecvScatter, inHeader[m.name])
					}
				}
			})
		}
	}
}

// TestZeroCopyPlaceLanes: over 82599s keeping four queues for
// placement, many large receives matched at once (as mxbench stream's
// window of 16) each place on a lane of their own, so the RNDVs, acks
// and other pulls' replies that arrive meanwhile take none of their
// spans: byte-exact, and the CPU copies nothing (the last reply of each
// message too: TestPlacedLaneEveryByte). Every lane is free at the end.
func TestZeroCopyPlaceLanes(t *testing.T) {
	checkLeaks(t)
	o := zcOptions("on")
	// No re-request of a late frame, however slow the host: the pull
	// timer before and after a round trip was measured.
	o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
	pr := newPairOn(t, zcWire(t, zcModels[3], nil, nil), o)
	if pl := pr.bb.plc; pl == nil || pl.lanes != 4 {
		t.Fatalf("the receiving board has no lanes: %+v", pl)
	}
	sizes := []int{1 << 20, 300<<10 + 7, 1<<20 + 4097, 64 << 10}
	const window = 16
	ctx := testCtx(t, 2*time.Minute)
	before, resent := pr.b.CopyStats(), retransmits(pr)
	rs, ss, srcs, dsts := postWindow(t, pr, window, func(k int) (uint64, []byte, []byte) {
		size := sizes[k%len(sizes)]
		return uint64(k), pattern(size, uint64(70+k)), make([]byte, size)
	})
	for k := range window {
		if _, err := ss[k].Wait(ctx); err != nil {
			pr.b.Counters().NonZero(func(k Counter, v uint64) { t.Logf("b %v %d", k, v) })
			for _, c := range pr.bb.tr.(transport.Stats).Counters() {
				if c.Value != 0 {
					t.Logf("b %s %d", c.Name, c.Value)
				}
			}
			t.Fatal(err)
		}
		if _, err := rs[k].Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(srcs[k], dsts[k]) {
			t.Fatalf("message %d arrived changed", k)
		}
	}
	c := pr.b.CopyStats().Sub(before)
	t.Logf("%d bytes received, %d in place, %.4f copied per byte", c.RecvBytes, c.RecvPlaced, c.RecvPerByte())
	// A lane's queue takes only what is posted on it and drops a frame
	// that finds no posting: on a lossless wire every reply of a pull
	// finds its own, whatever else the batch that asked for it holds, and
	// nothing is asked for again (the pull timer is long enough that no
	// frame is merely late).
	for _, n := range pr.bb.tr.(transport.Stats).Counters() {
		if n.Name == "nic_rx_no_descriptor" && n.Value != 0 {
			t.Errorf("the receiving NIC dropped %d frames that found nothing posted on their lane", n.Value)
		}
	}
	if n := pr.b.Counters().Get(PullFramesRerequested); n != 0 {
		t.Errorf("%d pull frames asked for again on a lossless wire", n)
	}
	switch {
	case c.RecvPerByte() > 1:
		t.Errorf("%.4f copied per byte: want at most one", c.RecvPerByte())
	case retransmits(pr) == resent && c.RecvScatter != 0:
		t.Errorf("%d bytes copied with nothing resent: want every reply placed, the pulls one a lane", c.RecvScatter)
	}
	pr.bb.mu.Lock()
	defer pr.bb.mu.Unlock()
	for k, pl := range pr.bb.plc.busy {
		if pl != nil {
			t.Errorf("lane %d still bound to a pull", k)
		}
	}
	if n := len(pr.bb.plc.drain); n != 0 {
		t.Errorf("%d receives wait for their spans", n)
	}
}

// openE1000EPair opens a cabled pair of model 82574Ls for zcModels; tx
// sees every TX data descriptor. Its close fails when a model counted a
// violation (the driver programmed it as the hardware forbids).
func openE1000EPair(t testing.TB, tx func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
	o := emulated.DefaultE1000EOptions()
	o.TxBuffer = tx
	p, err := emulated.NewE1000E(o)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Functions()
	return [2]pci.Device{f[0], f[1]}, p.IOMMU(), func() error {
		return modelClose(p.Close, func(i int) (uint64, string) { s := p.Stats(i); return s.Violations, s.LastViolation })
	}
}

// openIXGBEPair opens a cabled pair of model 82599s for zcModels; its
// close fails as openE1000EPair's.
func openIXGBEPair(t testing.TB, _ func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
	p, err := emulated.NewIXGBE(emulated.DefaultIXGBEOptions())
	if err != nil {
		t.Fatal(err)
	}
	f := p.Functions()
	return [2]pci.Device{f[0], f[1]}, p.IOMMU(), func() error {
		return modelClose(p.Close, func(i int) (uint64, string) { s := p.Stats(i); return s.Violations, s.LastViolation })
	}
}

// modelClose closes a pair of models and reports the violations either
// counted (viols: port i's count and the last).
func modelClose(close func() error, viols func(i int) (uint64, string)) error {
	var errs []error
	for i := range 2 {
		if n, last := viols(i); n != 0 {
			errs = append(errs, fmt.Errorf("model NIC %d counted %d violations, the last %q", i, n, last))
		}
	}
	return errors.Join(append(errs, close())...)
}

// postWindow puts n messages from pr.a to pr.b in flight at once, each
// receive posted before its send: msg(k) gives message k's match, its
// bytes and the buffer that receives them. It returns the requests and
// the buffers, in order.
func postWindow(t *testing.T, pr *pair, n int, msg func(k int) (match uint64, src, dst []byte)) (rs, ss []*Request, srcs, dsts [][]byte) {
	t.Helper()
	for k := range n {
		match, src, dst := msg(k)
		r, err := pr.b.IRecv([][]byte{dst}, match, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.a.ISend([][]byte{src}, pr.atob, match, nil)
		if err != nil {
			t.Fatal(err)
		}
		rs, ss, srcs, dsts = append(rs, r), append(ss, s), append(srcs, src), append(dsts, dst)
	}
	return rs, ss, srcs, dsts
}

// windowedRounds sends rounds of 4 messages in flight from pr.a to pr.b,
// their sizes taken in turn from sizes, and fails the test unless every
// send and receive completes and every message arrives byte-exact.
// where, if not nil, says where a changed message first differs.
func windowedRounds(t *testing.T, pr *pair, sizes []int, rounds int, where func(src, dst []byte) string) {
	t.Helper()
	const window = 4
	for round := range rounds {
		ctx := testCtx(t, time.Minute) // per round
		rs, ss, srcs, dsts := postWindow(t, pr, window, func(k int) (uint64, []byte, []byte) {
			size, match := sizes[(round+k)%len(sizes)], uint64(round*window+k)
			return match, pattern(size, match), make([]byte, size)
		})
		for k := range window {
			if _, err := rs[k].Wait(ctx); err != nil {
				t.Fatalf("round %d message %d: %v (counters %v)", round, k, err, nonZero(pr.b.Counters()))
			}
			if _, err := ss[k].Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(srcs[k], dsts[k]) {
				at := ""
				if where != nil {
					at = " at " + where(srcs[k], dsts[k])
				}
				t.Fatalf("round %d message %d: arrived changed%s", round, k, at)
			}
		}
	}
}
