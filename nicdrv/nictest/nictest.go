// Package nictest is the conformance suite every nicdrv driver passes,
// written once against the nicdrv.NIC interface. A driver's tests call
// [Run] with a function that opens two NICs cabled to each other: two
// emulated models (always), or two real or QEMU NICs behind VFIO (when
// present). The suite checks, as subtests, what a user of the interface
// relies on:
//
//   - 100 000 frames of mixed sizes, 60 to 1514 bytes, arrive byte-exact
//     in both directions, which wraps every ring many times over, and the
//     NICs' statistics count them;
//   - with two queues, IPv4/TCP flows come in on both RX queues, every
//     frame byte-exact, and transmit checksum offload fills in checksums a
//     receiver finds correct (on both TX queues);
//   - Alloc on an exhausted pool fails with nicdrv.ErrPoolExhausted at once
//     instead of blocking, receiving with an exhausted pool neither blocks
//     nor fails, and traffic resumes when buffers come back;
//   - a cable pulled and plugged back takes the link down and up, and
//     traffic resumes;
//   - a NIC closed and opened again on the same device (a driver restart)
//     moves frames;
//   - frames sent at a closed NIC cause no DMA (an IOMMU fault would show);
//   - every rule kind the NIC holds (RuleCapacity) lands frames of the
//     matching flow on the queue it names (the last queue, not only 0),
//     with the rule's ID in Buffer.Rule when the NIC reports it, and
//     others elsewhere; a rule removed stops matching; a kind the NIC does
//     not hold is refused with ErrNotSupported; a full table is refused
//     with ErrTableFull, and takes rules again once one is removed;
//   - promiscuous and multicast filtering behave;
//   - in interrupt mode, WaitRx sleeps until a frame comes;
//   - WaitRx on several queues returns one that has a frame, polling and
//     with interrupts; each queue receives into a pool of its own;
//   - with header split, frames of mixed sizes arrive byte-exact when their
//     buffers are put back together: IPv4 and IPv6 TCP and UDP split after
//     their TCP or UDP header, non-IP frames (Open-MX's EtherType) and IP
//     fragments whole in one buffer; a chained buffer is refused by TX;
//   - a frame whose payload is attached memory (Buffer.Attach) arrives
//     byte-exact, its completion comes once the NIC sent it (an empty
//     TxBatch reclaims), its memory is left unchanged, a Buffer freed
//     unsent completes, and checksum offload with an attachment is
//     refused with ErrNotSupported;
//   - a frame whose attached payload straddles a 4 KiB page of base-page
//     memory arrives byte-exact (skipped without an IOMMU);
//   - nothing leaks: closing the NICs gives every buffer back.
//
// Waits are on conditions, bounded by generous deadlines that only keep a
// broken driver from hanging the test; nothing asserts wall time.
//
// Two helpers serve the drivers' own interrupt tests on the model:
// [WaitArmed] waits until a WaitRx has written the mask register that arms
// its vector, so that a frame sent or a cancellation next meets a
// sleeping waiter; [CheckArmClearsLatchedCause] checks that frames taken
// while the vector was masked leave no interrupt behind, the arming write
// having cleared the cause they latched.
//
// [MacSwap] is gomx's macswap reflector (testpmd's forwarding mode of the
// same name), one loop shared by the peers VM (hack/peers), which times it
// against DPDK's testpmd, and the drivers' tests, which count its register
// accesses per frame on the model.
package nictest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// Config says how the suite wants the NICs opened.
type Config struct {
	// Queues is the number of queue pairs (1 or 2).
	Queues int
	// Interrupts asks for interrupt mode.
	Interrupts bool
	// HeaderSplit asks for header split receive (nicdrv's package doc).
	HeaderSplit bool
}

// Rig is two NICs cabled to each other, and what the suite may do to them.
type Rig struct {
	// NICs are the two ends of the cable, opened as Config asked.
	NICs [2]nicdrv.NIC
	// Reopen closes NIC i if it is open and opens it again on the same
	// device with the same configuration (a driver restart).
	Reopen func(i int) (nicdrv.NIC, error)
	// SetLink pulls (false) or plugs back (true) the cable; nil when the
	// platform cannot.
	SetLink func(up bool) error
	// Faults counts DMA accesses the platform's IOMMU refused; nil when it
	// cannot tell.
	Faults func() uint64
	// Check reports programming errors a model recorded; nil for hardware.
	Check func() error
}

// Open opens both NICs of r with open(i), and sets Reopen to close NIC i
// (when open) and open it again with open(i). It fails with the first
// error, having closed the NIC it opened before it.
func (r *Rig) Open(open func(i int) (nicdrv.NIC, error)) error {
	r.Reopen = func(i int) (nicdrv.NIC, error) {
		if r.NICs[i] != nil {
			if err := r.NICs[i].Close(); err != nil {
				return nil, err
			}
			r.NICs[i] = nil
		}
		return open(i)
	}
	for i := range 2 {
		n, err := open(i)
		if err != nil {
			if i == 1 {
				err = errors.Join(err, r.NICs[0].Close())
				r.NICs[0] = nil
			}
			return err
		}
		r.NICs[i] = n
	}
	return nil
}

// NewRig opens a rig for one subtest. It registers, with t.Cleanup, the
// release of whatever it made besides the NICs; the suite closes the NICs
// first.
type NewRig func(t *testing.T, c Config) *Rig

// hang bounds every wait: a driver that needs longer is broken.
const hang = 20 * time.Second

// Run runs the suite.
func Run(t *testing.T, newRig NewRig) {
	s := &suite{newRig: newRig}
	t.Run("Frames", s.frames)
	t.Run("BothQueues", s.bothQueues)
	t.Run("PoolExhaustion", s.poolExhaustion)
	t.Run("LinkDownUp", s.linkDownUp)
	t.Run("Restart", s.restart)
	t.Run("NoDMAAfterClose", s.noDMAAfterClose)
	t.Run("Rules", s.rules)
	t.Run("RuleTableFull", s.ruleTableFull)
	t.Run("Filters", s.filters)
	t.Run("Interrupts", s.interrupts)
	t.Run("WaitSeveral", s.waitSeveral)
	t.Run("WaitDeadline", s.waitDeadline)
	t.Run("WaitCancel", s.waitCancel)
	t.Run("HeaderSplit", s.headerSplit)
	t.Run("Attached", s.attached)
	t.Run("AttachedAcrossPages", s.attachedAcrossPages)
}

type suite struct {
	newRig NewRig
}

// rig opens a rig and closes its NICs at the end of the test, checking
// that closing gives every buffer back.
func (s *suite) rig(t *testing.T, c Config) *Rig {
	t.Helper()
	r := s.newRig(t, c)
	t.Cleanup(func() {
		for i, n := range r.NICs {
			if n == nil {
				continue
			}
			if err := n.Close(); err != nil {
				t.Errorf("close NIC %d: %v", i, err)
			}
		}
		if r.Check != nil {
			if err := r.Check(); err != nil {
				t.Error(err)
			}
		}
	})
	for i, n := range r.NICs {
		if _, err := n.WaitLink(true, hang); err != nil {
			t.Fatalf("NIC %d: %v", i, err)
		}
	}
	return r
}

// EtherType is the (IEEE local experimental) EtherType of the suite's test
// frames.
const EtherType = 0x88B5

// Frame writes test frame number seq of size bytes from src to dst into b
// and returns it: Ethernet header, the sequence number, then bytes derived
// from seq, so a receiver can check every byte knowing only seq.
func Frame(b []byte, dst, src nicdrv.MAC, seq uint64, size int) []byte {
	b = b[:size]
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], EtherType)
	binary.BigEndian.PutUint64(b[14:], seq)
	x := seq*0x9E3779B97F4A7C15 | 1
	for i := 22; i < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// Size is the size of test frame seq in the mixed-size stream: 60..1514.
func Size(seq uint64) int { return 60 + int(seq*7919%1455) }

// checkFrame tells what is wrong with a received test frame, "" if nothing.
func checkFrame(got []byte, dst, src nicdrv.MAC) (uint64, string) {
	if len(got) < 22 {
		return 0, fmt.Sprintf("frame of %d bytes", len(got))
	}
	seq := binary.BigEndian.Uint64(got[14:])
	want := Frame(make([]byte, 2048), dst, src, seq, Size(seq))
	if len(got) != len(want) {
		return seq, fmt.Sprintf("frame %d: %d bytes, want %d", seq, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return seq, fmt.Sprintf("frame %d: byte %d is %#02x, want %#02x", seq, i, got[i], want[i])
		}
	}
	return seq, ""
}

// sendAll transmits bufs on queue q, retrying while the ring is full.
func sendAll(t *testing.T, n nicdrv.NIC, q int, bufs []*nicdrv.Buffer) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for len(bufs) > 0 {
		k, err := n.TxBatch(q, bufs)
		if err != nil {
			t.Fatalf("TxBatch: %v", err)
		}
		bufs = bufs[k:]
		if k == 0 && time.Now().After(deadline) {
			t.Fatalf("TX queue %d took no frame for %v", q, hang)
		}
	}
}

// alloc takes k buffers from n's pool.
func alloc(t *testing.T, n nicdrv.NIC, k int) []*nicdrv.Buffer {
	t.Helper()
	bufs := make([]*nicdrv.Buffer, k)
	if _, err := n.Pool(0).Alloc(bufs); err != nil {
		t.Fatalf("alloc %d buffers: %v", k, err)
	}
	return bufs
}

// stream sends frames [first, first+count) from a to b in windows that fit
// the rings, and checks each as it arrives, in order.
type stream struct {
	from, to nicdrv.NIC
	next     uint64 // next seq to send
	want     uint64 // next seq expected
	end      uint64
	// stale: frames numbered below it are ones sent before the stream,
	// which a NIC may still deliver (whole, and before the stream's own);
	// they are dropped unchecked.
	stale uint64
	rx    []*nicdrv.Buffer
}

func newStream(from, to nicdrv.NIC, first, count uint64) *stream {
	return &stream{from: from, to: to, next: first, want: first, end: first + count, rx: make([]*nicdrv.Buffer, 64)}
}

func (s *stream) done() bool { return s.want == s.end }

// step sends up to a window of frames and receives what has come; it
// reports whether anything moved.
func (s *stream) step(t *testing.T, window int) bool {
	t.Helper()
	moved := false
	inFlight := int(s.next - s.want)
	if k := min(window-inFlight, int(s.end-s.next), 64); k > 0 {
		bufs := alloc(t, s.from, k)
		for i, b := range bufs {
			Frame(b.SetLen(2048), s.to.MAC(), s.from.MAC(), s.next+uint64(i), Size(s.next+uint64(i)))
			b.SetLen(Size(s.next + uint64(i)))
		}
		sendAll(t, s.from, 0, bufs)
		s.next += uint64(k)
		moved = true
	}
	for q := 0; q < s.to.Info().Queues; q++ {
		n, err := s.to.RxBatch(q, s.rx)
		if err != nil {
			t.Fatalf("RxBatch: %v", err)
		}
		for _, b := range s.rx[:n] {
			seq, bad := checkFrame(b.Data, s.to.MAC(), s.from.MAC())
			if seq < s.stale {
				continue // checked against the stream's sizes it would fail
			}
			if bad == "" && seq != s.want {
				bad = fmt.Sprintf("frame %d arrived, want %d next", seq, s.want)
			}
			if bad != "" {
				t.Fatal(bad)
			}
			s.want++
		}
		if n > 0 {
			moved = true
		}
		if err := s.to.Pool(0).Free(s.rx[:n]...); err != nil {
			t.Fatal(err)
		}
	}
	return moved
}

// run drives streams until all are done, failing when none moves for hang.
func run(t *testing.T, window int, ss ...*stream) {
	t.Helper()
	last := time.Now()
	for {
		all := true
		for _, s := range ss {
			if s.done() {
				continue
			}
			all = false
			if s.step(t, window) {
				last = time.Now()
			}
		}
		if all {
			return
		}
		if time.Since(last) > hang {
			for _, s := range ss {
				t.Errorf("%v -> %v: sent up to %d, received up to %d of %d", s.from.MAC(), s.to.MAC(), s.next, s.want, s.end)
			}
			t.Fatalf("no frame moved for %v", hang)
		}
	}
}

// window is how many frames may be in flight: half the smaller ring, so
// no receiver ever runs out of descriptors.
func window(a, b nicdrv.NIC) int {
	return min(a.Info().RxRing, b.Info().RxRing, a.Info().TxRing, b.Info().TxRing) / 2
}

// roundTrip checks that a few frames go both ways.
func roundTrip(t *testing.T, a, b nicdrv.NIC, first uint64) {
	t.Helper()
	run(t, window(a, b), newStream(a, b, first, 32), newStream(b, a, first, 32))
}

func (s *suite) frames(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	a, b := r.NICs[0], r.NICs[1]
	if a.MAC() == (nicdrv.MAC{}) || a.MAC() == b.MAC() || a.MAC().IsMulticast() {
		t.Fatalf("MACs %v and %v: want two distinct unicast addresses", a.MAC(), b.MAC())
	}
	count := uint64(100000)
	if testing.Short() {
		count = 10000
	}
	sa0, _ := a.Stats()
	sb0, _ := b.Stats()
	ab, ba := newStream(a, b, 0, count), newStream(b, a, 1<<40, count)
	run(t, window(a, b), ab, ba)
	if ring := uint64(max(a.Info().RxRing, a.Info().TxRing)); count < 4*ring {
		t.Errorf("%d frames wrap rings of %d only %d times", count, ring, count/ring)
	}
	// A driver may count a sent frame when it reaps the transfer's
	// completion, which can come after the peer has the frame (the USB
	// driver's settler does so on a goroutine of its own): wait, bounded,
	// for the counts to catch up.
	var sa, sb nicdrv.Stats
	for i := 0; ; i++ {
		var err error
		if sa, err = a.Stats(); err != nil {
			t.Fatal(err)
		}
		sb, _ = b.Stats()
		caught := sa.TxFrames-sa0.TxFrames >= count && sb.RxFrames-sb0.RxFrames >= count && sb.TxFrames-sb0.TxFrames >= count && sa.RxFrames-sa0.RxFrames >= count
		if caught || i == 10000 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if sa.TxFrames-sa0.TxFrames < count || sb.RxFrames-sb0.RxFrames < count || sb.TxFrames-sb0.TxFrames < count || sa.RxFrames-sa0.RxFrames < count {
		t.Errorf("statistics count fewer than %d frames each way: A %+v, B %+v", count, sa, sb)
	}
	if sa.RxBytes == 0 || sb.TxBytes == 0 {
		t.Errorf("byte counters stayed 0: A %+v, B %+v", sa, sb)
	}
	for _, st := range []nicdrv.Stats{sa, sb} {
		if st.RxDropped != 0 || st.RxErrors != 0 || st.TxRejected != 0 {
			t.Errorf("drops or errors on a clean run: %+v", st)
		}
	}
}

// tcpFrame builds an IPv4/TCP frame from src to dst with the given source
// port; the checksums are left 0 when zero is set, else computed here.
func tcpFrame(b []byte, dst, src nicdrv.MAC, port uint16, seq uint64, size int, zero bool) []byte {
	b = b[:size]
	clear(b)
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[8] = 64
	ip[9] = 6
	copy(ip[12:16], []byte{10, 0, 0, 1})
	copy(ip[16:20], []byte{10, 0, 0, 2})
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], port)
	binary.BigEndian.PutUint16(tcp[2:], 5000)
	tcp[12] = 5 << 4
	binary.BigEndian.PutUint64(tcp[20:], seq)
	for i := 28; i < len(tcp); i++ {
		tcp[i] = byte(seq) + byte(i)
	}
	if !zero {
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip[:20])))
		binary.BigEndian.PutUint16(tcp[16:], ^fold(sum(pseudo(ip), tcp)))
	}
	return b
}

// sum, fold and pseudo are the suite's own Internet checksum (RFC 1071),
// written apart from internal/csum: the drivers' software checksums and the
// models' offload compute with that package, and the suite checks what
// they wrote against this independent sum.
func sum(s uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

func pseudo(ip []byte) uint32 {
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	return sum(0, ip[12:20]) + uint32(ip[9]) + uint32(tot-20)
}

func (s *suite) bothQueues(t *testing.T) {
	r := s.rig(t, Config{Queues: 2})
	a, b := r.NICs[0], r.NICs[1]
	if a.Info().Queues < 2 || b.Info().Queues < 2 {
		t.Skipf("NICs opened with %d and %d queues", a.Info().Queues, b.Info().Queues)
	}
	const frames = 512
	perQueue := [2]int{}
	rx := make([]*nicdrv.Buffer, 64)
	want := make([]byte, 2048)
	got := 0
	for i := 0; i < frames; i += 16 {
		bufs := alloc(t, a, 16)
		for j, bf := range bufs {
			seq := uint64(i + j)
			tcpFrame(bf.SetLen(2048), b.MAC(), a.MAC(), uint16(1000+seq), seq, 80+int(seq%1400), true)
			bf.SetLen(80 + int(seq%1400))
			bf.Flags = nicdrv.FlagTxIPChecksum | nicdrv.FlagTxL4Checksum
		}
		// Alternate TX queues: queue 0 may offload in hardware, queue 1
		// may fall back to the driver; both must produce right sums.
		sendAll(t, a, (i/16)%2, bufs)
		deadline := time.Now().Add(hang)
		for got < i+16 {
			for q := 0; q < 2; q++ {
				n, err := b.RxBatch(q, rx)
				if err != nil {
					t.Fatal(err)
				}
				for _, bf := range rx[:n] {
					seq := binary.BigEndian.Uint64(bf.Data[14+20+20:])
					w := tcpFrame(want, b.MAC(), a.MAC(), uint16(1000+seq), seq, 80+int(seq%1400), false)
					if string(bf.Data) != string(w) {
						t.Fatalf("frame %d on queue %d differs from the one sent with checksums computed independently:\n got % x\nwant % x", seq, q, bf.Data[:54], w[:54])
					}
					if bf.Flags&(nicdrv.FlagIPChecksumBad|nicdrv.FlagL4ChecksumBad) != 0 {
						t.Errorf("frame %d: NIC flags a bad checksum (%#x)", seq, bf.Flags)
					}
					if bf.Queue != q {
						t.Errorf("frame from queue %d says queue %d", q, bf.Queue)
					}
					if bf.Pool() != b.Pool(q) {
						t.Errorf("frame from queue %d is in another queue's pool: queues must not share a pool's lock", q)
					}
					perQueue[q]++
				}
				got += n
				if err := b.Pool(0).Free(rx[:n]...); err != nil {
					t.Fatal(err)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames arrived", got, i+16)
			}
		}
	}
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("frames per RX queue %v: RSS should spread 512 flows over both", perQueue)
	}
	if b.Pool(0) == b.Pool(1) || b.Pool(2) != nil || b.Pool(-1) != nil {
		t.Errorf("Pool(0) %p, Pool(1) %p, Pool(2) %p: want a pool per queue and nil past the last", b.Pool(0), b.Pool(1), b.Pool(2))
	}
}

// waitSeveral checks WaitRx on several queues: it returns a queue that
// has a frame, whichever of them RSS picked, and ends with the context on
// idle queues.
func (s *suite) waitSeveral(t *testing.T) {
	for _, intr := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupts=%v", intr), func(t *testing.T) {
			r := s.rig(t, Config{Queues: 2, Interrupts: intr})
			a, b := r.NICs[0], r.NICs[1]
			if b.Info().Queues < 2 {
				t.Skipf("NIC opened with %d queues", b.Info().Queues)
			}
			seen := [2]bool{}
			rx := make([]*nicdrv.Buffer, 1)
			for port := uint16(0); port < 64 && !(seen[0] && seen[1]); port++ {
				bufs := alloc(t, a, 1)
				tcpFrame(bufs[0].SetLen(2048), b.MAC(), a.MAC(), 1000+port, uint64(port), 80, false)
				bufs[0].SetLen(80)
				sendAll(t, a, 0, bufs)
				ctx, cancel := context.WithTimeout(context.Background(), hang)
				q, err := b.WaitRx(ctx, time.Time{})
				cancel()
				if err != nil {
					t.Fatalf("WaitRx on every queue: %v", err)
				}
				k, err := b.RxBatch(q, rx)
				if err != nil || k != 1 {
					t.Fatalf("WaitRx said queue %d, whose RxBatch gives %d frames (%v)", q, k, err)
				}
				_ = b.Pool(q).Free(rx[0])
				seen[q] = true
			}
			if !seen[0] || !seen[1] {
				t.Errorf("64 flows woke WaitRx on queues %v only", seen)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if _, err := b.WaitRx(ctx, time.Time{}, 0, 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitRx on idle queues: %v, want the context's deadline", err)
			}
			if _, err := b.WaitRx(ctx, time.Time{}, 2); !errors.Is(err, nicdrv.ErrBadQueue) {
				t.Errorf("WaitRx on queue 2 of 2: %v, want ErrBadQueue", err)
			}
		})
	}
}

func (s *suite) poolExhaustion(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	a, b := r.NICs[0], r.NICs[1]
	p := b.Pool(0)
	var held []*nicdrv.Buffer
	chunk := make([]*nicdrv.Buffer, 256)
	var exhausted error
	for range p.Len()/len(chunk) + 2 {
		n, err := p.Alloc(chunk)
		held = append(held, chunk[:n]...)
		if err != nil {
			exhausted = err
			break
		}
	}
	if !errors.Is(exhausted, nicdrv.ErrPoolExhausted) {
		t.Fatalf("alloc from an empty pool: %v, want ErrPoolExhausted", exhausted)
	}
	if _, err := p.Get(); !errors.Is(err, nicdrv.ErrPoolExhausted) {
		t.Fatalf("Get from an empty pool: %v, want ErrPoolExhausted", err)
	}
	// B receives with an empty pool: frames already in its ring come in,
	// RxBatch neither blocks nor fails.
	st := newStream(a, b, 0, uint64(b.Info().RxRing/2))
	deadline := time.Now().Add(hang)
	for !st.done() && time.Now().Before(deadline) {
		st.step(t, b.Info().RxRing/2)
	}
	if !st.done() {
		t.Fatalf("frames sent into a filled ring did not all arrive with the pool empty: %d of %d", st.want, st.end)
	}
	if err := p.Free(held...); err != nil {
		t.Fatal(err)
	}
	// With buffers back, traffic flows again and the ring refills.
	roundTrip(t, a, b, 1<<20)
	run(t, window(a, b), newStream(a, b, 1<<21, uint64(4*b.Info().RxRing)))
}

func (s *suite) linkDownUp(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	if r.SetLink == nil {
		t.Skip("the platform cannot pull the cable")
	}
	a, b := r.NICs[0], r.NICs[1]
	if err := r.SetLink(false); err != nil {
		t.Fatal(err)
	}
	for _, n := range []nicdrv.NIC{a, b} {
		if l, err := n.WaitLink(false, hang); err != nil || l.Up {
			t.Fatalf("link after the cable was pulled: %v, %v", l, err)
		}
	}
	// Frames sent while the link is down are lost, not queued forever.
	bufs := alloc(t, a, 4)
	for i, bf := range bufs {
		Frame(bf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), 60)
		bf.SetLen(60)
	}
	sendAll(t, a, 0, bufs)
	if err := r.SetLink(true); err != nil {
		t.Fatal(err)
	}
	for _, n := range []nicdrv.NIC{a, b} {
		if l, err := n.WaitLink(true, hang); err != nil || !l.Up || l.SpeedMbps == 0 {
			t.Fatalf("link after the cable was plugged back: %v, %v", l, err)
		}
	}
	// Some NICs deliver frames queued in their FIFO when the link returns,
	// and a driver that moves frames on its own goroutines (USB) may do so
	// after the link is seen up: whatever of the four comes through is
	// dropped as it comes, then traffic must flow both ways.
	ab, ba := newStream(a, b, 1<<30, 32), newStream(b, a, 1<<30, 32)
	ab.stale = uint64(len(bufs))
	run(t, window(a, b), ab, ba)
}

func (s *suite) restart(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	roundTrip(t, r.NICs[0], r.NICs[1], 0)
	for round := range 3 {
		mac := r.NICs[0].MAC()
		n, err := r.Reopen(0)
		if err != nil {
			r.NICs[0] = nil
			t.Fatalf("restart %d: %v", round, err)
		}
		r.NICs[0] = n
		if n.MAC() != mac {
			t.Errorf("MAC %v after restart, was %v", n.MAC(), mac)
		}
		if _, err := n.WaitLink(true, hang); err != nil {
			t.Fatal(err)
		}
		roundTrip(t, r.NICs[0], r.NICs[1], uint64(round+1)<<32)
	}
}

func (s *suite) noDMAAfterClose(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	if r.Faults == nil {
		t.Skip("the platform cannot count DMA faults")
	}
	a, b := r.NICs[0], r.NICs[1]
	roundTrip(t, a, b, 0)
	before := r.Faults()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r.NICs[1] = nil
	// Calls on a closed NIC fail cleanly.
	if _, err := b.RxBatch(0, make([]*nicdrv.Buffer, 1)); !errors.Is(err, nicdrv.ErrClosed) {
		t.Errorf("RxBatch after Close: %v, want ErrClosed", err)
	}
	bufs := alloc(t, a, 64)
	for i, bf := range bufs {
		Frame(bf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), Size(uint64(i)))
		bf.SetLen(Size(uint64(i)))
	}
	sendAll(t, a, 0, bufs)
	if after := r.Faults(); after > before {
		t.Errorf("%d DMA faults after the NIC was closed", after-before)
	}
}

// waitDeadline checks WaitRx's deadline, polling and with interrupts: the
// zero Time is no deadline (a wait on an idle queue ends with its
// context, cancelled), one to come ends a wait on an idle queue with
// context.DeadlineExceeded, and a passed one still gets a last look at
// the queue: a frame waiting there is returned, none ends the wait with
// context.DeadlineExceeded.
func (s *suite) waitDeadline(t *testing.T) {
	for _, intr := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupts=%v", intr), func(t *testing.T) {
			r := s.rig(t, Config{Queues: 1, Interrupts: intr})
			a, b := r.NICs[0], r.NICs[1]
			ctx, cancel := context.WithCancel(context.Background())
			stop := time.AfterFunc(20*time.Millisecond, cancel)
			defer stop.Stop()
			if _, err := b.WaitRx(ctx, time.Time{}, 0); !errors.Is(err, context.Canceled) {
				t.Errorf("WaitRx on an idle queue, no deadline, cancelled: %v, want context.Canceled", err)
			}
			if _, err := b.WaitRx(context.Background(), time.Now().Add(20*time.Millisecond), 0); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitRx on an idle queue until a deadline: %v, want context.DeadlineExceeded", err)
			}
			past := time.Now().Add(-time.Second)
			if _, err := b.WaitRx(context.Background(), past, 0); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitRx on an idle queue, the deadline passed: %v, want context.DeadlineExceeded", err)
			}
			sendFrame(t, a, func(f []byte) []byte { return Frame(f, b.MAC(), a.MAC(), 1, 100) })
			wctx, wcancel := context.WithTimeout(context.Background(), hang)
			defer wcancel()
			if q, err := b.WaitRx(wctx, time.Time{}, 0); q != 0 || err != nil {
				t.Fatalf("WaitRx for a frame sent, no deadline: queue %d, %v", q, err)
			}
			if q, err := b.WaitRx(context.Background(), past, 0); q != 0 || err != nil {
				t.Errorf("WaitRx with a frame waiting, the deadline passed: queue %d, %v; want queue 0, nil (the last look)", q, err)
			}
			if got := recvOne(t, b); got == nil {
				t.Fatal("WaitRx returned but no frame")
			}
		})
	}
}

// waitCancel: a WaitRx on several queues, with a deadline an hour away,
// ends with context.Canceled when its context is cancelled as it starts
// (the cancel races the waiter's goroutine: in one round it comes before
// the sleep, in another during it; no driver tells when its waiter
// sleeps, and pci's TestWaitAnyCancelWakes cancels sleeps for sure), and
// so does one whose context was cancelled before it; the cancel is not
// left behind: the next WaitRx returns a frame's queue.
func (s *suite) waitCancel(t *testing.T) {
	for _, intr := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupts=%v", intr), func(t *testing.T) {
			r := s.rig(t, Config{Queues: 2, Interrupts: intr})
			a, b := r.NICs[0], r.NICs[1]
			queues := []int{0, 1}[:min(2, b.Info().Queues)]
			far := time.Now().Add(time.Hour)
			for round := range 5 {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := b.WaitRx(ctx, far, queues...)
					done <- err
				}()
				cancel()
				select {
				case err := <-done:
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("round %d: WaitRx on queues %v, cancelled: %v, want context.Canceled", round, queues, err)
					}
				case <-time.After(hang):
					t.Fatalf("round %d: WaitRx on queues %v still waits %v after its context was cancelled", round, queues, hang)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := b.WaitRx(ctx, far, queues...); !errors.Is(err, context.Canceled) {
				t.Errorf("WaitRx on queues %v, its context cancelled before: %v, want context.Canceled", queues, err)
			}
			sendFrame(t, a, func(f []byte) []byte { return Frame(f, b.MAC(), a.MAC(), 1, 100) })
			wctx, wcancel := context.WithTimeout(context.Background(), hang)
			defer wcancel()
			q, err := b.WaitRx(wctx, far, queues...)
			if err != nil {
				t.Fatalf("WaitRx for a frame sent after the cancels: %v", err)
			}
			rx := make([]*nicdrv.Buffer, 1)
			if k, err := b.RxBatch(q, rx); err != nil || k != 1 {
				t.Fatalf("WaitRx said queue %d, whose RxBatch gives %d frames (%v)", q, k, err)
			}
			_ = b.Pool(q).Free(rx[0])
		})
	}
}

// recvOne waits for one frame on queue 0 and returns a copy (nil on
// timeout).
func recvOne(t *testing.T, n nicdrv.NIC) []byte {
	t.Helper()
	rx := make([]*nicdrv.Buffer, 1)
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		k, err := n.RxBatch(0, rx)
		if err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			out := append([]byte(nil), rx[0].Data...)
			_ = n.Pool(0).Free(rx[0])
			return out
		}
	}
	return nil
}

// absent checks that no frame comes in: it sends a marker frame after
// the one that must be filtered, and requires the marker to come first.
func absent(t *testing.T, from, to nicdrv.NIC, what string) {
	t.Helper()
	bufs := alloc(t, from, 1)
	Frame(bufs[0].SetLen(2048), to.MAC(), from.MAC(), 0xFEED, 64)
	bufs[0].SetLen(64)
	sendAll(t, from, 0, bufs)
	got := recvOne(t, to)
	if got == nil {
		t.Fatalf("marker frame after %s did not arrive", what)
	}
	if binary.BigEndian.Uint64(got[14:]) != 0xFEED {
		t.Errorf("%s was received", what)
	}
}

func (s *suite) filters(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	a, b := r.NICs[0], r.NICs[1]
	other := nicdrv.MAC{0x02, 0xAA, 0, 0, 0, 1}
	group := nicdrv.MAC{0x01, 0x00, 0x5E, 0x00, 0x00, 0xFB}
	send := func(dst nicdrv.MAC, seq uint64) {
		bufs := alloc(t, a, 1)
		Frame(bufs[0].SetLen(2048), dst, a.MAC(), seq, 64)
		bufs[0].SetLen(64)
		sendAll(t, a, 0, bufs)
	}
	send(other, 1)
	absent(t, a, b, "a frame for another unicast address")
	if err := b.SetPromiscuous(true); err != nil {
		t.Fatal(err)
	}
	send(other, 2)
	if got := recvOne(t, b); got == nil || binary.BigEndian.Uint64(got[14:]) != 2 {
		t.Error("promiscuous NIC did not receive a frame for another address")
	}
	if err := b.SetPromiscuous(false); err != nil {
		t.Fatal(err)
	}
	send(group, 3)
	absent(t, a, b, "a frame for an unsubscribed group")
	if err := b.SetMulticast([]nicdrv.MAC{group}); err != nil {
		t.Fatal(err)
	}
	send(group, 4)
	if got := recvOne(t, b); got == nil || binary.BigEndian.Uint64(got[14:]) != 4 {
		t.Error("subscribed group frame did not arrive")
	}
	if err := b.SetMulticast([]nicdrv.MAC{other}); err == nil {
		t.Error("SetMulticast took a unicast address")
	}
	send(nicdrv.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, 5)
	if got := recvOne(t, b); got == nil || binary.BigEndian.Uint64(got[14:]) != 5 {
		t.Error("broadcast frame did not arrive")
	}
}

func (s *suite) interrupts(t *testing.T) {
	r := s.rig(t, Config{Queues: 1, Interrupts: true})
	a, b := r.NICs[0], r.NICs[1]
	if !b.Info().Interrupts {
		t.Skip("the NIC was opened without interrupts")
	}
	for round := range 20 {
		woke := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			_, err := b.WaitRx(ctx, time.Time{}, 0)
			woke <- err
		}()
		sendFrame(t, a, func(f []byte) []byte { return Frame(f, b.MAC(), a.MAC(), uint64(round), 100) })
		if err := <-woke; err != nil {
			t.Fatalf("round %d: WaitRx: %v", round, err)
		}
		if got := recvOne(t, b); got == nil {
			t.Fatalf("round %d: WaitRx returned but no frame", round)
		}
	}
	// An idle queue: WaitRx ends with the context, not before.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.WaitRx(ctx, time.Time{}, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRx on an idle queue: %v, want the context's deadline", err)
	}
	// Close wakes a sleeper.
	done := make(chan error, 1)
	go func() {
		_, err := b.WaitRx(context.Background(), time.Time{}, 0)
		done <- err
	}()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r.NICs[1] = nil
	if err := <-done; !errors.Is(err, nicdrv.ErrClosed) {
		t.Errorf("WaitRx across Close: %v, want ErrClosed", err)
	}
	if st, err := a.Stats(); err == nil && st.TxFrames == 0 {
		t.Error("no frames counted")
	}
}
