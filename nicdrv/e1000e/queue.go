package e1000e

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
)

// rxQueue is one RX ring. The NIC owns slots [RDH, rdt); the driver has
// slots [next, RDH) to read and refills [tail, next-1), keeping slot next-1
// back so that tail never catches up with the NIC's head. Slots [rdt, tail)
// are refilled but not handed over yet (the pool ran short in the middle of
// a refill). The driver refills and writes RDT only once freeThresh slots
// wait between rdt and next-1 (DPDK's rx_free_thresh): a ping-pong then
// pays one RDT write, an exit into the device model under QEMU, and one
// trip to the pool per freeThresh frames instead of per frame, while the
// NIC keeps all but freeThresh of the ring.
type rxQueue struct {
	nic  *NIC
	q    int
	pool *nicdrv.Pool // the queue's own
	ring []byte
	iova uint64
	size uint32

	mu      sync.Mutex  // one batch at a time; Close waits on it
	fill    *drv.RxFill // refills slot (and pay) from the pool
	slot    []*nicdrv.Buffer
	next    uint32 // next slot to look at
	tail    uint32 // first slot not refilled
	rdt     uint32 // RDT as last written
	discard bool   // dropping the rest of a multi-descriptor frame

	freeThresh uint32 // refilled slots that make an RDT write worth it

	// Header split (split.go): packet split descriptors of dsz bytes,
	// each with a payload buffer in pay besides its header buffer in slot.
	ps  bool
	dsz uint32
	pay []*nicdrv.Buffer

	placeState // Options.Placement (place.go): packet split descriptors too

	cnt drv.RxCounters // Stats' RxNoBuffer and RxDropped
}

func (r *rxQueue) desc(i uint32) []byte { return r.ring[i*r.dsz : (i+1)*r.dsz] }

// start fills the ring and programs its registers (RX still disabled).
func (r *rxQueue) start() error {
	n := r.nic
	r.next, r.tail = 0, 0
	clear(r.ring)
	units := uint32(1) // RDT counts 16-byte units
	r.refill()
	if r.ps {
		units = hw.PSDescUnits
	}
	if r.tail == 0 {
		return n.errorf(fmt.Sprintf("fill RX ring %d", r.q), fmt.Errorf("no free buffer in the pool: %w", nicdrv.ErrPoolExhausted))
	}
	n.w32(hw.Q(hw.RDBAL, r.q), uint32(r.iova))
	n.w32(hw.Q(hw.RDBAH, r.q), uint32(r.iova>>32))
	n.w32(hw.Q(hw.RDLEN, r.q), r.size*r.dsz)
	n.w32(hw.Q(hw.RDH, r.q), 0)
	n.w32(hw.Q(hw.RDT, r.q), r.tail*units)
	r.rdt = r.tail
	return nil
}

// rxFreeThresh is how many refilled descriptors the driver gathers before
// it writes RDT: 32, as DPDK's igb and ixgbe default, at most an eighth of
// the ring, so the NIC always owns the rest.
func rxFreeThresh(size uint32) uint32 { return max(1, min(32, size/8)) }

// replenish refills the slots the driver has read and hands them to the
// NIC with one RDT write, once freeThresh of them wait (or the NIC's own
// share, all the ring but those slots, would fall below freeThresh on a
// small ring). The descriptors are written before the tail moves: Write32
// on a BAR (or the model's lock) orders them.
func (r *rxQueue) replenish() {
	if r.place {
		r.refillPlace()
		r.writeTail()
		return
	}
	waiting := (r.next + 2*r.size - 1 - r.rdt) % r.size // [rdt, next-1)
	if waiting == 0 || (waiting < r.freeThresh && r.size-1-waiting >= r.freeThresh) {
		return
	}
	r.refill()
	if r.tail != r.rdt {
		units := uint32(1) // RDT counts 16-byte units
		if r.ps {
			units = hw.PSDescUnits
		}
		r.nic.w32(hw.Q(hw.RDT, r.q), r.tail*units)
		r.rdt = r.tail
	}
}

// refill gives the NIC fresh buffers in slots [tail, next-1): one per
// slot, or with header split two (split.go), and writes their read
// descriptors. It does not write RDT.
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
	for s := from; s != r.tail; {
		r.encode(s)
		if s++; s == r.size {
			s = 0
		}
	}
}

// encode writes slot s's read descriptor, whose buffers are in place: one
// buffer address, or with header split the four of a packet split
// descriptor (buffers 0 and 1; the NIC's write-back overwrote them all).
func (r *rxQueue) encode(s uint32) {
	if r.ps {
		hw.RxPSRead{Buffer: [hw.PSBuffers]uint64{r.slot[s].IOVA(), r.pay[s].IOVA()}}.Encode(r.desc(s))
		return
	}
	hw.RxRead{Buffer: r.slot[s].IOVA()}.Encode(r.desc(s))
}

// ready reports whether the next slot holds a written-back descriptor,
// and that slot (the ring position RxWaiter.Ready asks for).
func (r *rxQueue) ready() (bool, uint32) {
	if r.nic.d.Closed.Load() {
		return false, 0
	}
	if !r.mu.TryLock() {
		return true, 0 // a batch is running: let the caller look
	}
	defer r.mu.Unlock()
	if r.nic.d.Closed.Load() || r.next == r.rdt {
		return false, r.next // nothing handed to the NIC (see batch)
	}
	return uint32(load64(r.desc(r.next)[8:]))&hw.RxStatDD != 0, r.next
}

// Lock and Unlock take and give back the lock each batch of the queue
// holds (drv.Close waits on it).
func (r *rxQueue) Lock()   { r.mu.Lock() }
func (r *rxQueue) Unlock() { r.mu.Unlock() }

func (r *rxQueue) batch(out []*nicdrv.Buffer) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nic.d.Closed.Load() {
		return 0, r.nic.errorf("RX batch", nicdrv.ErrClosed)
	}
	got := 0
	// Only slots handed to the NIC ([next, rdt)) can hold a frame: once
	// a ring the pool could not refill is drained, next == rdt and the
	// slots from there on hold old write-backs with DD still set.
	for got < len(out) && r.next != r.rdt {
		d := r.desc(r.next)
		if uint32(load64(d[8:]))&hw.RxStatDD == 0 {
			break
		}
		dmasync.Observe()
		s := r.next
		if r.next++; r.next == r.size {
			r.next = 0
		}
		var b *nicdrv.Buffer
		if r.place {
			b = r.takePlace(d, s)
		} else if r.ps {
			b = r.takePS(d, s)
		} else {
			b = r.take(d, s)
		}
		if b != nil {
			out[got] = b
			got++
		}
	}
	r.replenish()
	return got, nil
}

// take makes the frame of slot s's written-back descriptor d (the
// extended format) its Buffer, or drops it (nil): rxAccept decides. The
// slot's buffer leaves it either way.
func (r *rxQueue) take(d []byte, s uint32) *nicdrv.Buffer {
	wb := hw.DecodeRxWriteBack(d)
	b := r.slot[s]
	r.slot[s] = nil
	size, deliver, discardNext := rxAccept(wb, r.discard, nicdrv.BufferSize)
	r.discard = discardNext
	if !deliver || b == nil {
		if !discardNext {
			r.cnt.Dropped.Add(1) // counted once per frame, at its last descriptor
		}
		if b != nil {
			_ = r.pool.Free(b)
		}
		return nil
	}
	b.Data = b.Data[:0:b.Cap()][:size]
	r.stamp(b, wb.MRQ, wb.Hash, wb.Status)
	return b
}

// stamp sets what a received frame's first Buffer says besides its bytes:
// the queue, the checksum results and the RSS hash.
func (r *rxQueue) stamp(b *nicdrv.Buffer, mrq, hash, status uint32) {
	b.Queue = r.q
	b.Flags, b.Hash = rxFlags(hw.RxWriteBack{MRQ: mrq, Hash: hash, Status: status}), 0
	if mrq&0xF != hw.RSSTypeNone {
		b.Flags |= nicdrv.FlagHash
		b.Hash = hash
	}
}

// rxAccept decides what to do with a written-back RX descriptor: deliver
// its frame of size bytes, or drop it. A frame spread over several
// descriptors (never with 2 KiB buffers and standard frames), one the NIC
// reports in error, and a length the buffer cannot hold (a NIC gone wrong)
// are dropped whole; discardNext says the next descriptor continues a frame
// being dropped. What the NIC writes back is outside input: nothing in it
// may make the driver read past a buffer.
func rxAccept(wb hw.RxWriteBack, discarding bool, bufCap int) (size int, deliver, discardNext bool) {
	eop := wb.Status&hw.RxStatEOP != 0
	if discarding || !eop || wb.Status&hw.RxErrFrame != 0 || int(wb.Length) > bufCap || wb.Length < 14 {
		return 0, false, !eop
	}
	return int(wb.Length), true, false
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
	if s&(hw.RxStatTCPCS|hw.RxStatUDPCS) != 0 {
		if s&hw.RxErrTCPE != 0 {
			f |= nicdrv.FlagL4ChecksumBad
		} else {
			f |= nicdrv.FlagL4ChecksumOK
		}
	}
	return f
}

// txQueue is one TX ring: slots [clean, tail) are with the NIC, the rest
// free; one slot stays empty so that a full ring is not mistaken for an
// empty one.
//
// txQueue is one TX ring. The NIC reports a descriptor done (writes DD back
// into it) only when the descriptor asks with RS; drv.TxSlots puts RS on
// one descriptor in 32 (DPDK em's tx_rs_thresh: QEMU pays each write-back
// through its emulated IOMMU on the latency path) and reclaims up to each
// one whose DD is set. A frame with memory attached (Buffer.Attach: the
// header from the buffer, the payload in place) puts RS on its last
// descriptor as well, so the caller learns that its memory is free again
// at the next reclaim after the NIC read it, not 32 frames later.
type txQueue struct {
	nic  *NIC
	q    int
	ring []byte
	iova uint64
	size uint32

	mu    sync.Mutex
	pools drv.PoolCheck // which buffers the NIC may send
	s     *drv.TxSlots  // which slots hold which buffers, which ask for RS
	ctx   hw.TxDesc     // the checksum context last loaded (queue 0)

	cnt drv.TxCounters // Stats' TxRingFull and TxRejected
}

func (t *txQueue) desc(i uint32) []byte { return t.ring[i*hw.DescSize : (i+1)*hw.DescSize] }

// done reports whether the NIC wrote DD back into slot m's descriptor.
func (t *txQueue) done(m uint32) bool {
	if load64(t.desc(m)[8:])>>32&hw.TxStatDD == 0 {
		return false
	}
	dmasync.Observe()
	return true
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
	t.s.Reclaim()
	free := t.s.Free()
	old := t.s.Tail
	sent := 0
	var err error
	for _, b := range bufs {
		ext, extIOVA := b.Attached()
		if l := len(b.Data) + len(ext); l < 14 || l > hw.MaxFrame || !t.pools.OK(b) || b.Next != nil ||
			ext != nil && (len(b.Data) == 0 || len(ext) == 0 || b.Flags&(nicdrv.FlagTxIPChecksum|nicdrv.FlagTxL4Checksum) != 0) {
			t.cnt.Rejected.Add(1)
			switch {
			case !t.pools.OK(b):
				err = n.errorf("TX batch", fmt.Errorf("buffer %d is not from a pool mapped in the NIC's DMA domain: allocate it from the NIC's Pool", sent))
			case b.Next != nil:
				err = n.errorf("TX batch", fmt.Errorf("frame %d is a chain of %d buffers (header split): TX sends one-buffer frames; copy it whole with AppendFrame into one buffer: %w", sent, b.Segments(), nicdrv.ErrFrameSize))
			case ext != nil && (len(b.Data) == 0 || len(ext) == 0):
				err = n.errorf("TX batch", fmt.Errorf("frame %d: %d bytes in the buffer and %d attached: an attachment follows a nonempty Data and is nonempty: %w", sent, len(b.Data), len(ext), nicdrv.ErrFrameSize))
			case ext != nil:
				err = n.errorf("TX batch", fmt.Errorf("frame %d asks for checksum offload with memory attached: the checksums need the whole frame in Data; copy the frame into the buffer: %w", sent, nicdrv.ErrNotSupported))
			default:
				err = n.errorf("TX batch", fmt.Errorf("frame %d of %d bytes, want 14..%d: %w", sent, l, hw.MaxFrame, nicdrv.ErrFrameSize))
			}
			break
		}
		if ext != nil {
			// Header from the buffer, payload in place: a descriptor for
			// the header and one for each IOMMU page the payload touches
			// (attachPieces), the last asking for DD so that the
			// attachment completes as soon as the NIC has read it.
			need := 1 + attachPieces(extIOVA, len(ext))
			if free < need {
				t.cnt.Full.Add(1)
				break
			}
			t.put(hw.LegacyTx(b.IOVA(), len(b.Data), hw.TxCmdIFCS), nil, false)
			for iova, left := extIOVA, len(ext); left > 0; {
				k := min(left, int(txPage-iova%txPage))
				if k == left {
					t.put(hw.LegacyTx(iova, k, hw.TxCmdEOP|hw.TxCmdIFCS), b, true)
				} else {
					t.put(hw.LegacyTx(iova, k, hw.TxCmdIFCS), nil, false)
				}
				iova += uint64(k)
				left -= k
			}
			free -= need
			sent++
			continue
		}
		need := uint32(1)
		ctx, offload := t.offload(b)
		if offload && ctx != t.ctx {
			need = 2
		}
		if free < need {
			t.cnt.Full.Add(1)
			break
		}
		if offload && ctx != t.ctx {
			t.put(ctx, nil, false)
			t.ctx = ctx
			free--
		}
		cmd := uint8(hw.TxCmdEOP | hw.TxCmdIFCS)
		if offload {
			var popts uint8
			if b.Flags&nicdrv.FlagTxIPChecksum != 0 {
				popts |= hw.TxPoptsIXSM
			}
			if b.Flags&nicdrv.FlagTxL4Checksum != 0 {
				popts |= hw.TxPoptsTXSM
			}
			t.put(hw.DataTx(b.IOVA(), len(b.Data), cmd, popts), b, false)
		} else {
			t.put(hw.LegacyTx(b.IOVA(), len(b.Data), cmd), b, false)
		}
		free--
		sent++
	}
	if t.s.Tail != old {
		n.w32(hw.Q(hw.TDT, t.q), t.s.Tail)
		// QEMU transmits synchronously on the TDT write: reclaim now so
		// buffers go back to the pool without waiting for the next batch.
		t.s.Reclaim()
	}
	return sent, err
}

// txPage is the IOMMU page an attachment's descriptors stay within. Memory
// attached to a frame (Buffer.Attach) is contiguous in the NIC's IOVA
// space but, outside the pool's hugepages, not in physical memory: behind
// each 4 KiB IOMMU page is a page of its own. A NIC reads through the
// IOMMU page by page and does not care, but QEMU 7.2's e1000e maps each
// TX descriptor's buffer with a single DMA map (net_tx_pkt_add_raw_fragment)
// that stops where the next page's physical address does not follow, and
// then drops the whole frame while still writing DD back: the sender sees
// the frame sent and it never reaches the wire. So the driver gives the
// NIC one descriptor per page an attachment touches.
const txPage = 4096

// attachPieces is the number of TX descriptors the n bytes attached at
// iova take: one per txPage they touch (n > 0).
func attachPieces(iova uint64, n int) uint32 {
	return uint32((iova+uint64(n)-1)/txPage - iova/txPage + 1)
}

// put writes a descriptor at the tail for a frame that frees b once done
// (nil on its other descriptors), asking for a write-back (RS) where the
// slots say: the word with the command last, in one atomic store, so the
// NIC never fetches a half-written descriptor.
func (t *txQueue) put(d hw.TxDesc, b *nicdrv.Buffer, rs bool) {
	slot, ask := t.s.Put(b, rs)
	if ask {
		d.Lower |= uint32(hw.TxCmdRS) << 24
	}
	var tmp [hw.DescSize]byte
	d.Encode(tmp[:])
	p := t.desc(slot)
	store64(p[0:], binary.LittleEndian.Uint64(tmp[0:]))
	store64(p[8:], binary.LittleEndian.Uint64(tmp[8:]))
}

// offload prepares the checksums a frame asks for. On queue 0 it seeds the
// TCP/UDP pseudo-header sum and returns the checksum context descriptor
// for the NIC; on queue 1, which shares the NIC's single context with queue
// 0, it computes the checksums itself and returns false.
func (t *txQueue) offload(b *nicdrv.Buffer) (ctx hw.TxDesc, hwOffload bool) {
	var none hw.TxDesc
	want := b.Flags & (nicdrv.FlagTxIPChecksum | nicdrv.FlagTxL4Checksum)
	if want == 0 {
		return none, false
	}
	fr := b.Data
	if len(fr) < 34 || fr[12] != 0x08 || fr[13] != 0 || fr[14]>>4 != 4 {
		return none, false // not IPv4: nothing to fill in
	}
	ihl := int(fr[14]&0xF) * 4
	tot := int(binary.BigEndian.Uint16(fr[16:]))
	if ihl < 20 || 14+tot > len(fr) || tot < ihl {
		return none, false
	}
	proto := fr[23]
	l4 := 14 + ihl
	csumAt := -1
	if want&nicdrv.FlagTxL4Checksum != 0 {
		switch {
		case proto == 6 && tot-ihl >= 20:
			csumAt = l4 + 16
		case proto == 17 && tot-ihl >= 8:
			csumAt = l4 + 6
		}
	}
	if t.q != 0 {
		nicdrv.FillChecksums(fr, want)
		return none, false
	}
	// RS is put's to decide, as on any descriptor.
	tucmd := uint8(hw.TxTucmdIP)
	if proto == 6 {
		tucmd |= hw.TxTucmdTCP
	}
	if csumAt >= 0 {
		// Seed the field with the folded pseudo-header sum; the NIC adds
		// the rest.
		s := drv.PseudoSum(fr[26:34], proto, tot-ihl)
		binary.BigEndian.PutUint16(fr[csumAt:], s)
	} else if want&nicdrv.FlagTxIPChecksum == 0 {
		return none, false
	}
	tucso := 0
	if csumAt >= 0 {
		tucso = csumAt
	}
	return hw.ContextTx(14, 24, uint16(l4-1), uint8(l4), uint8(tucso), uint16(14+tot-1), tucmd), true
}
