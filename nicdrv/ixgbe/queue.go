package ixgbe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// rxQueue is one RX ring. The NIC owns slots [RDH, rdt); the driver reads
// [next, RDH) and refills [tail, next-1), keeping slot next-1 back so that
// the tail never catches up with the NIC's head. It writes RDT only once
// freeThresh refilled slots have gathered (DPDK's rx_free_thresh), so a
// stream costs one tail write per 32 frames.
//
// pkt holds each slot's packet buffer, hdr (with header split) its header
// buffer. A frame spread over several descriptors (a jumbo frame) is built
// up in head/last across descriptors, and across calls, as a chain of
// Buffers.
type rxQueue struct {
	nic  *NIC
	q    int
	pool *nicdrv.Pool // packet buffers
	hdrs *nicdrv.Pool // header buffers (header split)
	ring []byte
	d    []desc // ring, by descriptor
	iova uint64
	size uint32

	mu         sync.Mutex // one batch at a time; Close waits on it
	pkt, hdr   []*nicdrv.Buffer
	fill       *drv.RxFill // refills pkt (and hdr) from the pools
	next, tail uint32
	rdt        uint32
	freeThresh uint32
	split      bool
	maxParts   int // buffers one frame may take: its packet buffers and a header buffer
	place      bool
	placeState // Options.Placement (place.go)

	head, last *nicdrv.Buffer // the frame being gathered
	parts      int            // buffers in it
	bytes      int            // its length so far
	bad        bool           // drop it at EOP
	gathering  bool           // parts > 0 or bad: a frame is under way
	sph        uint64         // SPH in a write-back's first word, with header split; else 0

	cnt drv.RxCounters // Stats' RxNoBuffer and RxDropped
}

func newRxQueue(n *NIC, q int, ring []byte, iova uint64) *rxQueue {
	size := uint32(len(ring) / hw.DescSize)
	pool := n.pools.Packet[q]
	bs := pool.BufferSize()
	r := &rxQueue{nic: n, q: q, pool: pool, ring: ring, d: descs(ring), iova: iova, size: size, freeThresh: max(1, min(32, size/8)),
		split: n.opts.HeaderSplit, maxParts: (n.opts.MaxFrame+vlanTag+bs-1)/bs + 1}
	pools := []*nicdrv.Pool{r.pool}
	if n.opts.Placement {
		r.initPlace()
	}
	if r.split {
		r.hdrs = n.pools.Header[q]
		pools = append(pools, r.hdrs)
	}
	if r.split {
		r.sph = hw.HdrInfoSPH << 16
	}
	r.fill = drv.NewRxFill(size, pools, &r.cnt.NoBuf)
	r.pkt = r.fill.Bufs[0]
	if r.split {
		r.hdr = r.fill.Bufs[1]
	}
	return r
}

// encode writes slot s's read descriptor: its packet buffer and, with
// header split, its header buffer. Plain stores: the NIC reads no
// descriptor at or past RDT, and the RDT write that hands this one over
// comes after. The driver itself looks at the slot again only once the NIC
// owned it.
func (r *rxQueue) encode(s uint32) {
	if r.place {
		r.encodePlace(s)
		return
	}
	d := &r.d[s]
	binary.LittleEndian.PutUint64(d[0:8], r.pkt[s].IOVA())
	var hdr uint64
	if r.split {
		hdr = r.hdr[s].IOVA()
	}
	binary.LittleEndian.PutUint64(d[8:16], hdr)
}

func (r *rxQueue) desc(i uint32) []byte { return r.ring[i*hw.DescSize : (i+1)*hw.DescSize] }

// srrctl is the queue's SRRCTL: packet buffers of Options.BufferSize, and with header
// split a 256-byte header buffer size (the headers the NIC recognises fit;
// the driver's header buffers are whole pool buffers), and DROP_EN with
// Options.DropWhenFull.
func (r *rxQueue) srrctl() uint32 {
	bsize := uint32(r.pool.BufferSize() >> 10)
	v := bsize | 4<<hw.SrrctlBSizeHdrShift
	if r.place {
		v = bsize | placeHeader/64<<hw.SrrctlBSizeHdrShift | hw.SrrctlDescAdvHdrAlways
	} else if r.split {
		v |= hw.SrrctlDescAdvHdrSplit
	} else {
		v |= hw.SrrctlDescAdvOneBuf
	}
	if r.nic.opts.DropWhenFull || r.only {
		v |= hw.SrrctlDropEn
	}
	return v
}

// start fills the ring, programs it and enables the queue (polling its
// enable bit), then hands the filled slots to the NIC.
func (r *rxQueue) start() error {
	n := r.nic
	r.next, r.tail = 0, 0
	clear(r.ring)
	r.refill()
	if r.tail == 0 && !r.only {
		return n.errorf(fmt.Sprintf("fill RX ring %d", r.q), fmt.Errorf("no free buffer in the pool: %w", nicdrv.ErrPoolExhausted))
	}
	n.w32(hw.RDBAL(r.q), uint32(r.iova))
	n.w32(hw.RDBAH(r.q), uint32(r.iova>>32))
	n.w32(hw.RDLEN(r.q), r.size*hw.DescSize)
	n.w32(hw.SRRCTL(r.q), r.srrctl())
	n.w32(hw.RDH(r.q), 0)
	n.w32(hw.RDT(r.q), 0)
	en := uint32(hw.RxdctlEnable)
	if r.only {
		// A PlaceOnly queue strips a VLAN tag (RXDCTL.VME, per queue on
		// the 82599): the NIC writes at most MaxFrame bytes of a frame
		// there, tagged or not (Info.PlaceOnlyMin).
		en |= hw.RxdctlVME
	}
	n.set32(hw.RXDCTL(r.q), en)
	if err := n.waitReg(fmt.Sprintf("RXDCTL%d.ENABLE", r.q), hw.RXDCTL(r.q), func(v uint32) bool { return v&hw.RxdctlEnable != 0 }); err != nil {
		return err
	}
	n.w32(hw.RDT(r.q), r.tail)
	r.rdt = r.tail
	return nil
}

// refill gives the NIC fresh buffers in slots [tail, next-1): a packet
// buffer from the queue's pool and, with header split, a header buffer from
// its header pool; and writes their read descriptors. It does not write
// RDT.
func (r *rxQueue) refill() {
	if r.place {
		r.refillPlace()
		return
	}
	stop := r.next + r.size - 1
	if stop >= r.size {
		stop -= r.size
	}
	from := r.tail
	r.tail = r.fill.Fill(r.tail, stop)
	if r.split {
		for s := from; s != r.tail; {
			r.encode(s)
			if s++; s == r.size {
				s = 0
			}
		}
		return
	}
	// One buffer a slot: encode's stores, in a loop whose ring, slots
	// and cursor stay in registers.
	d, pkt, size, to := r.d, r.pkt, r.size, r.tail
	for s := from; s != to; {
		w := &d[s]
		binary.LittleEndian.PutUint64(w[0:8], pkt[s].IOVA())
		binary.LittleEndian.PutUint64(w[8:16], 0)
		if s++; s == size {
			s = 0
		}
	}
}

// replenish refills the slots the driver has read and hands them to the
// NIC with one RDT write, once freeThresh of them wait (or the NIC's share
// would fall below freeThresh on a small ring).
func (r *rxQueue) replenish() {
	if r.place {
		r.refillPlace()
		r.writeTail()
		return
	}
	waiting := (r.next + 2*r.size - 1 - r.rdt) % r.size
	if waiting == 0 || (waiting < r.freeThresh && r.size-1-waiting >= r.freeThresh) {
		return
	}
	r.refill()
	if r.tail != r.rdt {
		r.nic.w32(hw.RDT(r.q), r.tail)
		r.rdt = r.tail
	}
}

// ready reports whether the next slot holds a written-back descriptor,
// and that slot (the ring position RxWaiter.Ready asks for).
func (r *rxQueue) ready() (bool, uint32) {
	if r.nic.d.Closed.Load() {
		return false, 0
	}
	if !r.mu.TryLock() {
		return true, 0
	}
	defer r.mu.Unlock()
	if r.nic.d.Closed.Load() || r.next == r.rdt {
		return false, r.next
	}
	return uint32(load64(r.desc(r.next)[8:]))&hw.RxStatDD != 0, r.next
}

// add appends b, holding k bytes, to the frame being gathered.
func (r *rxQueue) add(b *nicdrv.Buffer, k int) {
	b.Data = b.Data[:0:b.Cap()][:k]
	b.Next = nil
	if r.head == nil {
		r.head = b
	} else {
		r.last.Next = b
	}
	r.last = b
	r.parts++
	r.bytes += k
}

// txLimit is the longest frame starting with data the NIC sends when
// MaxFrame is maxFrame: 4 bytes longer with a VLAN tag (EtherType 0x8100),
// as MAXFRS.MFS does not count the tag.
func txLimit(data []byte, maxFrame int) int {
	if len(data) >= 14 && data[12] == 0x81 && data[13] == 0x00 {
		return maxFrame + vlanTag
	}
	return maxFrame
}

// Lock and Unlock take and give back the lock each batch of the queue
// holds (drv.Close waits on it).
func (r *rxQueue) Lock()   { r.mu.Lock() }
func (r *rxQueue) Unlock() { r.mu.Unlock() }

func (r *rxQueue) batch(out []*nicdrv.Buffer) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nic
	if n.d.Closed.Load() {
		return 0, n.errorf("RX batch", nicdrv.ErrClosed)
	}
	got := 0
	// The NIC admits a VLAN-tagged frame 4 bytes past MaxFrame.
	maxFrame := n.opts.MaxFrame + vlanTag
	// The common frame's loop keeps the ring's cursor and arrays in
	// locals (the compiler would otherwise load each field again after
	// every store through a Buffer); the general path below works on
	// the fields, so the cursor goes back to r.next before it.
	d, pkt, next, rdt, size := r.d, r.pkt, r.next, r.rdt, r.size
	fast := !r.place && !r.gathering
	sph, q := r.sph, r.q
	for got < len(out) && next != rdt {
		hi := d[next].hi()
		if uint32(hi)&hw.RxStatDD == 0 {
			break
		}
		dmasync.Observe()
		lo := binary.LittleEndian.Uint64(d[next][0:8])
		s := next
		if next++; next == size {
			next = 0
		}
		// The common frame: the first descriptor since the last frame
		// ended cleanly (nothing gathered, nothing marked bad), the last
		// of its frame, no error, no header split off, a length that
		// fits both the slot's buffer and MaxFrame. Its packet buffer is
		// the frame, handed over as it is: its Next is nil (Alloc gave it
		// so) and its capacity the buffer size. Every other descriptor
		// takes the general path below, which decides the same for this
		// one.
		if fast && hi&(hw.RxStatEOP|hw.RxErrRXE) == hw.RxStatEOP && lo&sph == 0 {
			k := int(uint16(hi >> 32))
			if pb := pkt[s]; pb != nil && k >= 14 && k <= cap(pb.Data) && k <= maxFrame {
				pkt[s] = nil
				pb.Data = pb.Data[:k]
				// What deliver does, with the queue in a register.
				pb.Queue = q
				if lo&0xFFFF|hi&(hw.RxStatFLM|hw.RxStatIPCS|hw.RxStatL4CS) != 0 {
					r.classify(pb, lo, hi)
				}
				out[got] = pb
				got++
				continue
			}
		}
		if r.place && !r.gathering && hi&(hw.RxStatEOP|hw.RxErrRXE) == hw.RxStatEOP {
			if f := r.placedFrame(s, lo, hi, maxFrame); f != nil {
				out[got] = f
				got++
				continue
			}
		}
		r.next = next
		got += r.general(out[got:], s, lo, hi, maxFrame)
		fast = !r.place && !r.gathering
	}
	r.next = next
	r.replenish()
	return got, nil
}

// general takes slot s, written back as lo and hi, the way every
// descriptor but the common frame's is taken: into the frame being
// gathered, which it hands over in out[0] at its last descriptor. It
// returns 1 when it handed over a frame, else 0.
func (r *rxQueue) general(out []*nicdrv.Buffer, s uint32, lo, hi uint64, maxFrame int) int {
	// What the NIC writes back is outside input: no length in it may
	// make the driver read past a buffer.
	wb := writeBack(lo, hi)
	if r.place {
		r.placeDesc(s, wb)
	} else if r.split && wb.Split() && r.head == nil {
		h := wb.HeaderLen()
		if hb := r.hdr[s]; hb != nil && h >= 14 && h <= hb.Cap() {
			r.hdr[s] = nil
			r.add(hb, h)
		} else {
			r.bad = true
		}
	}
	if k := int(wb.Length); k > 0 && !r.place {
		if pb := r.pkt[s]; pb != nil && k <= pb.Cap() {
			r.pkt[s] = nil
			r.add(pb, k)
		} else {
			r.bad = true
		}
	}
	if r.parts > r.maxParts || r.bytes > maxFrame {
		r.bad = true
	}
	if wb.Status&hw.RxStatEOP == 0 {
		r.gathering = r.parts > 0 || r.bad
		return 0
	}
	f := r.head
	if r.bad || f == nil || r.bytes < 14 || wb.Status&hw.RxErrRXE != 0 {
		r.cnt.Dropped.Add(1)
		if f != nil {
			_ = r.pool.Free(f)
		}
		r.head, r.last, r.parts, r.bytes, r.bad, r.gathering = nil, nil, 0, 0, false, false
		return 0
	}
	r.deliver(f, lo, hi)
	out[0] = f
	r.head, r.last, r.parts, r.bytes, r.bad, r.gathering = nil, nil, 0, 0, false, false
	return 1
}

// deliver sets what the write-back of frame f's last descriptor (its two
// words lo and hi) says about it: its queue, offload flags, RSS hash and
// the rule that matched. f came from Pool.Alloc, which zeroed its Flags,
// Hash and Rule, so a frame the NIC neither classified nor checked (no
// packet type, no RSS type, no checksum status: a raw EtherType frame)
// costs one store; others take classify.
func (r *rxQueue) deliver(f *nicdrv.Buffer, lo, hi uint64) {
	f.Queue = r.q
	if lo&0xFFFF|hi&(hw.RxStatFLM|hw.RxStatIPCS|hw.RxStatL4CS) != 0 {
		r.classify(f, lo, hi)
	}
}

// writeBack decodes a write-back descriptor's two words.
func writeBack(lo, hi uint64) hw.RxWriteBack {
	return hw.RxWriteBack{PktInfo: uint16(lo), HdrInfo: uint16(lo >> 16), Hash: uint32(lo >> 32),
		Status: uint32(hi), Length: uint16(hi >> 32), VLAN: uint16(hi >> 48)}
}

// classify sets f's offload flags, RSS hash and matched rule from the
// write-back of its last descriptor.
func (r *rxQueue) classify(f *nicdrv.Buffer, lo, hi uint64) {
	wb := writeBack(lo, hi)
	f.Flags = rxFlags(wb)
	if wb.PktInfo&hw.PktTypeETQF != 0 || wb.Status&hw.RxStatFLM != 0 || wb.PktInfo&hw.PktTypeUDP != 0 {
		f.Rule = r.nic.ruleOf(wb, f.Data)
	}
	if wb.PktInfo&0xF != hw.RSSTypeNone && wb.Status&hw.RxStatFLM == 0 {
		f.Flags |= nicdrv.FlagHash
		f.Hash = wb.Hash
	}
}

func rxFlags(wb hw.RxWriteBack) nicdrv.Flags {
	var f nicdrv.Flags
	s := wb.Status
	if s&hw.RxStatIPCS != 0 {
		if s&hw.RxErrIPE != 0 {
			f |= nicdrv.FlagIPChecksumBad
		} else {
			f |= nicdrv.FlagIPChecksumOK
		}
	}
	if s&hw.RxStatL4CS != 0 {
		if s&hw.RxErrTCPE != 0 {
			f |= nicdrv.FlagL4ChecksumBad
		} else {
			f |= nicdrv.FlagL4ChecksumOK
		}
	}
	return f
}

// Release implements drv.Releaser: it gives back every buffer the queue
// holds (Close, after the NIC is quiet).
func (r *rxQueue) Release() error {
	errs := []error{r.fill.Release()}
	if r.place {
		errs = append(errs, r.releasePlace())
	}
	clear(r.pkt)
	clear(r.hdr)
	if r.head != nil {
		errs = append(errs, r.pool.Free(r.head))
		r.head, r.last = nil, nil
	}
	r.parts, r.bytes, r.bad, r.gathering = 0, 0, false, false
	return errors.Join(errs...)
}

// txQueue is one TX ring: drv.TxSlots keeps which slots hold which
// buffers and which descriptors ask for a write-back (RS on one in 32, and
// on the last descriptor of a batch that sent memory attached, so that
// the completions of its attachments come at the next reclaim: one
// write-back a batch, where RS on each such frame cost the NIC one a
// frame).
type txQueue struct {
	nic  *NIC
	q    int
	ring []byte
	d    []desc // ring, by descriptor
	iova uint64
	size uint32

	mu    sync.Mutex
	pools drv.PoolCheck // which buffers the NIC may send
	s     *drv.TxSlots
	ctx   hw.TxDesc // the checksum context last loaded (slot 0)
	// attached says a frame with memory attached was put since the
	// last descriptor that asks for a write-back: the batch ends with
	// one that asks (batch).
	attached bool

	cnt drv.TxCounters // Stats' TxRingFull and TxRejected
}

func newTxQueue(n *NIC, q int, ring []byte, iova uint64) *txQueue {
	size := uint32(len(ring) / hw.DescSize)
	t := &txQueue{nic: n, q: q, ring: ring, d: descs(ring), iova: iova, size: size, pools: drv.PoolCheck{DMA: n.dev.DMA()}}
	t.s = drv.NewTxSlots(size, n.pools.Packet[q], t.done)
	return t
}

// done reports whether the NIC wrote DD back into slot m's descriptor.
func (t *txQueue) done(m uint32) bool {
	if uint32(t.d[m].hi()>>32)&hw.TxStatDD == 0 {
		return false
	}
	dmasync.Observe()
	return true
}

// reject explains why frame i cannot be sent, or returns nil.
func (t *txQueue) reject(i int, b *nicdrv.Buffer) error {
	n := t.nic
	ext, _ := b.Attached()
	l := len(b.Data) + len(ext)
	switch {
	case !t.pools.OK(b):
		return n.errorf("TX batch", fmt.Errorf("buffer %d is not from a pool mapped in the NIC's DMA domain: allocate it from the NIC's Pool", i))
	case b.Next != nil:
		return n.errorf("TX batch", fmt.Errorf("frame %d is a chain of %d buffers (header split or jumbo receive): TX sends one buffer, plus memory attached with Buffer.Attach: %w", i, b.Segments(), nicdrv.ErrFrameSize))
	case ext != nil && (len(b.Data) == 0 || len(ext) == 0):
		return n.errorf("TX batch", fmt.Errorf("frame %d: %d bytes in the buffer and %d attached: an attachment follows a nonempty Data and is nonempty: %w", i, len(b.Data), len(ext), nicdrv.ErrFrameSize))
	case ext != nil && b.Flags&(nicdrv.FlagTxIPChecksum|nicdrv.FlagTxL4Checksum) != 0:
		return n.errorf("TX batch", fmt.Errorf("frame %d asks for checksum offload with memory attached: the driver seeds the checksum in Data; copy the frame into the buffer: %w", i, nicdrv.ErrNotSupported))
	case l < 14 || l > txLimit(b.Data, n.opts.MaxFrame):
		return n.errorf("TX batch", fmt.Errorf("frame %d of %d bytes, want 14..%d (4 more with a VLAN tag): %w", i, l, n.opts.MaxFrame, nicdrv.ErrFrameSize))
	}
	return nil
}

// Lock and Unlock take and give back the lock each batch of the queue
// holds (drv.Close waits on it).
func (t *txQueue) Lock()   { t.mu.Lock() }
func (t *txQueue) Unlock() { t.mu.Unlock() }

func (t *txQueue) batch(bufs []*nicdrv.Buffer) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nic
	if n.d.Closed.Load() {
		return 0, n.errorf("TX batch", nicdrv.ErrClosed)
	}
	s := t.s
	s.Reclaim()
	free := s.Free()
	old := s.Tail
	sent := 0
	var err error
	maxFrame := n.opts.MaxFrame
	d := t.d
	for sent < len(bufs) {
		// A run of common frames: one buffer of a pool the NIC may
		// read, of a length the NIC takes, nothing attached, no checksum
		// asked: one data descriptor each, checked and written here,
		// with the slots' cursor and RS count in locals (what Put does,
		// without a call's loads and stores of them per frame). The
		// first other frame goes to sendOther, whose calls would
		// otherwise cost this loop its registers.
		slots, tail, since, every := s.Slot, s.Tail, s.SinceRS, s.RSEvery
		ok := t.pools.Last()
		// The run ends at the last frame or the last free slot; the
		// length check is one unsigned comparison (14..maxFrame).
		start, end, span := sent, min(len(bufs), sent+int(free)), uint(maxFrame-14)
		for ; sent < end; sent++ {
			b := bufs[sent]
			l := len(b.Data)
			if !b.Plain() || b.Next != nil || b.Flags&(nicdrv.FlagTxIPChecksum|nicdrv.FlagTxL4Checksum) != 0 ||
				uint(l-14) > span || (b.Pool() != ok && !t.pools.OK(b)) {
				break
			}
			ok = b.Pool()
			cmd := uint64(uint32(l)|hw.TxDTypData|hw.TxCmdDEXT|hw.TxCmdEOP|hw.TxCmdIFCS) | uint64(l)<<(32+hw.TxPaylenShift)
			if since++; since >= every {
				since = 0
				s.Mark(tail)
				cmd |= hw.TxCmdRS
			}
			slots[tail] = b
			// Plain stores, as in put.
			w := &d[tail]
			binary.LittleEndian.PutUint64(w[0:8], b.IOVA())
			binary.LittleEndian.PutUint64(w[8:16], cmd)
			if tail++; int(tail) == len(slots) {
				tail = 0
			}
		}
		free -= uint32(sent - start)
		s.Tail, s.SinceRS = tail, since
		if sent == len(bufs) {
			break
		}
		var used uint32
		if used, err = t.sendOther(sent, bufs[sent], free); used == 0 {
			break
		}
		free -= used
		sent++
	}
	if t.attached {
		t.askLast()
	}
	if s.Tail != old {
		n.w32(hw.TDT(t.q), s.Tail)
		s.Reclaim()
	}
	return sent, err
}

// sendOther queues frame i, b, which is not a common frame (or met a full
// ring), with the general checks, and returns how many of the free slots
// it took: 0 when it was refused (err says why) or the ring is full.
func (t *txQueue) sendOther(i int, b *nicdrv.Buffer, free uint32) (uint32, error) {
	if err := t.reject(i, b); err != nil {
		t.cnt.Rejected.Add(1)
		return 0, err
	}
	ext, extIOVA := b.Attached()
	total := uint32(len(b.Data)+len(ext)) << hw.TxPaylenShift
	if ext != nil {
		if free < 2 {
			t.cnt.Full.Add(1)
			return 0, nil
		}
		t.put(hw.DataTx(b.IOVA(), len(b.Data), hw.TxCmdIFCS, total), nil, false)
		if t.put(hw.DataTx(extIOVA, len(ext), hw.TxCmdEOP|hw.TxCmdIFCS, 0), b, false) {
			t.attached = false
		} else {
			t.attached = true
		}
		return 2, nil
	}
	ctx, popts := t.offload(b)
	need := uint32(1)
	if popts != 0 && ctx != t.ctx {
		need = 2
	}
	if free < need {
		t.cnt.Full.Add(1)
		return 0, nil
	}
	if need == 2 {
		t.put(ctx, nil, false)
		t.ctx = ctx
	}
	t.put(hw.DataTx(b.IOVA(), len(b.Data), hw.TxCmdEOP|hw.TxCmdIFCS, total|popts), b, false)
	return need, nil
}

// put writes a descriptor at the tail for a frame that frees b once done
// (nil on its other descriptors), asking for a write-back where the slots
// say, and reports whether it asked.
func (t *txQueue) put(d hw.TxDesc, b *nicdrv.Buffer, rs bool) bool {
	slot, ask := t.s.Put(b, rs)
	if ask {
		d.CmdType |= hw.TxCmdRS
	}
	// Plain stores: the NIC reads no descriptor past TDT, and the TDT
	// write (an uncached MMIO store, or the model's lock) comes after.
	w := &t.d[slot]
	binary.LittleEndian.PutUint64(w[0:8], d.Addr)
	binary.LittleEndian.PutUint64(w[8:16], uint64(d.CmdType)|uint64(d.Olinfo)<<32)
	return ask
}

// askLast makes the last descriptor put ask for a write-back, unless it
// already does, before the tail hands it to the NIC: the attachments put
// since the last that asked complete at the next reclaim after the NIC
// sent them. A descriptor that asks is the last of its frame (RSEvery's
// are, and sendOther's attachment descriptor is its frame's last), so
// the slots' buffers before it are all of frames it covers.
func (t *txQueue) askLast() {
	t.attached = false
	s := t.s
	if s.SinceRS == 0 {
		return // the last descriptor put asks already
	}
	last := (s.Tail + s.Size - 1) % s.Size
	s.SinceRS = 0
	s.Mark(last)
	w := &t.d[last]
	binary.LittleEndian.PutUint64(w[8:16], binary.LittleEndian.Uint64(w[8:16])|uint64(hw.TxCmdRS))
}

// offload prepares the checksums an IPv4 frame asks for: the IP checksum
// field zeroed, the TCP or UDP one seeded with the pseudo-header sum, and
// the context descriptor and POPTS the NIC needs. Frames that ask nothing,
// or are not IPv4, need no context (popts 0).
func (t *txQueue) offload(b *nicdrv.Buffer) (ctx hw.TxDesc, popts uint32) {
	want := b.Flags & (nicdrv.FlagTxIPChecksum | nicdrv.FlagTxL4Checksum)
	fr := b.Data
	if want == 0 || len(fr) < 34 || fr[12] != 0x08 || fr[13] != 0 || fr[14]>>4 != 4 {
		return hw.TxDesc{}, 0
	}
	ihl := int(fr[14]&0xF) * 4
	tot := int(binary.BigEndian.Uint16(fr[16:]))
	if ihl < 20 || 14+tot > len(fr) || tot < ihl {
		return hw.TxDesc{}, 0
	}
	proto := fr[23]
	tucmd := uint32(hw.TxCtxTucmdIPv4)
	if want&nicdrv.FlagTxIPChecksum != 0 {
		binary.BigEndian.PutUint16(fr[24:], 0)
		popts |= hw.TxPoptsIXSM
	}
	if want&nicdrv.FlagTxL4Checksum != 0 {
		at := -1
		switch {
		case proto == 6 && tot-ihl >= 20:
			at, tucmd = 14+ihl+16, tucmd|hw.TxCtxTucmdL4TCP
		case proto == 17 && tot-ihl >= 8:
			at = 14 + ihl + 6
		}
		if at >= 0 {
			binary.BigEndian.PutUint16(fr[at:], drv.PseudoSum(fr[26:34], proto, tot-ihl))
			popts |= hw.TxPoptsTXSM
		}
	}
	if popts == 0 {
		return hw.TxDesc{}, 0
	}
	return hw.ContextTx(14, ihl, tucmd), popts
}
