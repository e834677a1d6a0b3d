package shm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// The receive queue: one per receiving transport, in its doorbell segment,
// written by every producer that sends to it and read by the receiver
// alone (multi-producer, single-consumer). A pair's first frames, and every
// frame of a pair without a lane of its own, go through it, so a process
// maps one queue per peer it sends to and polls one queue, however many
// peers there are (lanes: send.go and lane.go).
//
// Layout, after the doorbell's own words:
//
//	offset qTailOff   tail  uint64  where the next claim goes (a hint: see claim)
//	offset qHeadOff   head  uint64  cells the consumer has consumed and freed
//	offset qWaitOff   wait  uint32  1: a producer found the queue full
//	offset qLanesOff  lanesFull uint32  1: the consumer takes no more lanes
//	offset qWaitersOff waiters [256]uint64  bit id: producer id waits for room
//	offset qCellsOff  cells [n]cell, n a power of two
//
// A cell is 64 bytes (a cache line), its first 8 the cell word. A record is
// k consecutive cells (modulo n): the first holds the frame's length at
// byte 8 and its first 48 bytes at byte 16, each further cell 56 more
// bytes at byte 8. Every cell keeps its own word, frame bytes never land
// on one: the words at cell starts are only ever written by the protocol,
// whatever the frames carry.
//
// A cell word is (low to high) the cell's cursor (32 bits: cursors only
// grow, and a cell's word names the lap it belongs to), its state (2
// bits: empty, claimed, full), the record's cell count k (16 bits) and the
// producer's id (14 bits, assigned by the consumer at the producer's
// welcome). A fresh queue's words are written empty for the first lap at
// Open; the consumer writes a cell empty for its next lap (cursor + n)
// once it has consumed the record and the frame is no longer lent out
// (commit), before it publishes its head past it.
//
// Claiming. A producer loads the tail c. The room the consumer's head
// leaves for k cells decides whether the queue is full; when there is
// room, it takes the cell with a compare-and-swap from c's empty word
// (empty, for c's lap) to "claimed, k, by me", then moves the tail from c
// to c+k (a compare-and-swap that may fail: someone helped). Only a swap
// that failed makes it load the word: a claimed or full word for c's lap
// means another producer won c, and it helps the tail on by that record's
// k and tries again. The consumer wrote c's empty word before it published
// the head that left room for c, so a word of another lap is a later
// lap's: the tail it loaded was stale (c was claimed, consumed and freed
// since), and it loads the tail again. The claim is on the cell, not on
// the tail, and the expected value names c's lap (its cursor modulo 2^32),
// so a producer that stalled between its loads and its compare-and-swap
// cannot take a cell of a later lap unless 2^32 cells went through the
// queue meanwhile (the word is another lap's, or a record's), nor a cell
// inside another's record (the tail never stops there, and its word is
// that cell's own empty word, not c's). The producer then writes the
// frame and publishes the record by storing "full, k, me" into the first
// cell's word, atomically: the consumer's load of that word acquires the
// frame.
//
// Consuming. The consumer keeps its own cursor and looks at that cell's
// word: empty (nothing claimed there yet: the queue is empty, since a
// claim takes the cell before the tail moves), full (a record: deliver),
// or claimed (a producer is writing it: wait). A producer killed between
// its claim and its publish leaves a claimed cell: once its connection
// has closed (the process is gone, so it will never write again) the
// consumer skips the record's k cells, moving the tail past them if the
// producer died before it did, and counts them (the producer's id says
// whose claim it is). Any other word is a producer that broke the
// protocol: the queue stops delivering and the break is counted.
const (
	qTailOff  = 192
	qHeadOff  = 256
	qWaitOff  = 320
	qLanesOff = 384
	// qWaitersOff: a bit per producer id (qMaxID+1 bits), set by a
	// producer whose backlog waits for room (wantRoom).
	qWaitersOff = 2048
	qCellsOff   = 4096
	cellLen     = 64
	cellHdr     = 16
	cellFirst   = cellLen - cellHdr // frame bytes in a record's first cell
	cellMore    = cellLen - 8       // frame bytes in each further cell

	qEmpty   = 0
	qClaimed = 1
	qFull    = 2

	qMaxK  = 1<<16 - 1
	qMaxID = MaxProducers

	// DefaultQueueSize is Options.QueueSize's default: 4096 cells.
	DefaultQueueSize = 256 << 10
)

// MaxProducers is the most boards of other processes that one board's
// receive queue takes at once: a cell's word names its producer in 14
// bits, and id 0 is never given. The receiver refuses the connection of
// one more (its dial fails with transport.ErrUnreachable; mx then sends to
// that peer over its board's own transport), so at most MaxProducers+1
// processes of a host can all reach each other through shared memory.
const MaxProducers = 1<<14 - 1

// qWord is the cell word of cursor c in state st, for a record of k cells
// claimed by producer id.
func qWord(c uint64, st, k, id uint32) uint64 {
	return uint64(uint32(c)) | uint64(st&3)<<32 | uint64(k&qMaxK)<<34 | uint64(id&qMaxID)<<50
}

func qState(w uint64) uint32 { return uint32(w>>32) & 3 }
func qK(w uint64) uint64     { return (w >> 34) & qMaxK }
func qID(w uint64) uint32    { return uint32(w >> 50) }

// cellsFor is how many cells a frame of n bytes takes.
func cellsFor(n int) int {
	if n <= cellFirst {
		return 1
	}
	return 1 + (n-cellFirst+cellMore-1)/cellMore
}

// queueSizeFor is the smallest power-of-two queue (in bytes) at least
// want that holds minFrames frames of mtu bytes.
func queueSizeFor(want, mtu int) int {
	need := max(want, minFrames*cellsFor(mtu)*cellLen, 16*cellLen)
	n := cellLen
	for n < need {
		n <<= 1
	}
	return n
}

// queueSegLen is the doorbell segment's length with a queue of size bytes.
func queueSegLen(size int) int { return qCellsOff + size }

// queue is a view of a receive queue's shared words and cells.
type queue struct {
	cells []byte
	mask  uint64 // n-1
	tail  *atomic.Uint64
	head  *atomic.Uint64
	wait  *atomic.Uint32
	// lanesFull is the consumer's word saying it reads as many lanes as
	// it takes (lane.go): producers then do not ask for one.
	lanesFull *atomic.Uint32
	// waiters has a bit per producer id whose backlog waits for room
	// (wantRoom); wait says that some bit may be set.
	waiters []byte
}

func newQueue(seg []byte) queue {
	cells := seg[qCellsOff:]
	n := uint64(len(cells) / cellLen)
	return queue{cells: cells, mask: n - 1, tail: u64At(seg, qTailOff), head: u64At(seg, qHeadOff), wait: u32At(seg, qWaitOff),
		lanesFull: u32At(seg, qLanesOff), waiters: seg[qWaitersOff:qCellsOff]}
}

func (q *queue) n() uint64 { return q.mask + 1 }

// word is the cell word of cursor c.
func (q *queue) word(c uint64) *atomic.Uint64 { return u64At(q.cells, int(c&q.mask)*cellLen) }

// initQueue writes every cell of a fresh queue empty for its first lap.
func initQueue(seg []byte) {
	q := newQueue(seg)
	for c := uint64(0); c < q.n(); c++ {
		q.word(c).Store(qWord(c, qEmpty, 0, 0))
	}
}

// qProducer is a producer's view of a peer's receive queue.
type qProducer struct {
	queue
	id       uint32
	headSeen uint64 // the consumer's head, reloaded only when the queue looks full
	// end is the cursor just past the last record this producer claimed
	// (0: none): the gate of a lane that takes the pair over (lane.go).
	end uint64
}

// claim takes k cells at the tail for a record (see above) and returns the
// first one's cursor, or false when the queue has no room for them now.
//
// It tries the compare-and-swap from c's empty word first and loads the
// word only when that fails: the cell's line was last written by the
// consumer (it wrote the word empty) or by another producer, and a load
// before the swap fetched it once to read and the swap again to own it,
// two waits for the other CPU on every frame through the queue where the
// swap alone is one. A failed swap changes nothing. The room the
// consumer's head leaves is checked first, on the cached head, and alone
// says the queue is full: the consumer writes the words below its head
// empty for their next lap before it publishes the head, so a cell the
// head leaves room for holds c's empty word, a record of another producer
// at c, or a later lap's word (the tail moved on), never an earlier lap's.
func (p *qProducer) claim(k uint64) (uint64, bool) {
	for range 1 << 12 {
		c := p.tail.Load()
		if c+k > p.headSeen+p.n() {
			// The load acquires: the consumer wrote the words of the
			// cells below its head empty before it stored the head.
			p.headSeen = p.head.Load()
			if c+k > p.headSeen+p.n() {
				return 0, false // a tail that moved since only needs more room
			}
		}
		if p.word(c).CompareAndSwap(qWord(c, qEmpty, 0, 0), qWord(c, qClaimed, uint32(k), p.id)) {
			p.tail.CompareAndSwap(c, c+k)
			p.end = c + k
			return c, true
		}
		w := p.word(c).Load()
		if uint32(w) != uint32(c) {
			// A later lap's word: c was claimed, consumed and freed since
			// the tail was loaded, so the tail moved on. A tail still at c
			// under such a word would be stuck (the consumer moves it past
			// a dead producer's claim before it frees the cells: skip).
			if p.tail.Load() == c {
				return 0, false
			}
			continue
		}
		if qState(w) != qEmpty {
			// Another producer's record at c: help the tail past it.
			if k := qK(w); k != 0 {
				p.tail.CompareAndSwap(c, c+k)
			}
		}
	}
	return 0, false
}

// waiterWord is the word of the waiters' bitmap that holds id's bit.
func (q *queue) waiterWord(id uint32) *atomic.Uint64 {
	return u64At(q.waiters, int(id/64)*8)
}

// wantRoom tells the consumer that this producer found its queue full and
// waits for room: its bit in the waiters' bitmap, then the wait flag, so
// that the consumer publishes its head as soon as it frees cells (release)
// rather than every eighth of the queue, and then writes the producer's
// room bell (takeWaiters, Transport.wakeProducer). The caller looks for
// room again after this (claim loads the head): the stores here and the consumer's
// store of its head and load of the flag after it are sequentially
// consistent (Dekker), so either the producer finds the room or the
// consumer finds the flag and the bit. Loads first: a producer that waits
// on writes no line again.
func (p *qProducer) wantRoom() {
	bit := uint64(1) << (p.id % 64)
	if w := p.waiterWord(p.id); w.Load()&bit == 0 {
		w.Or(bit)
	}
	if p.wait.Load() == 0 {
		p.wait.Store(1)
	}
}

// put writes a frame of l bytes, head followed by parts, into the k =
// cellsFor(l) cells claimed at c, and publishes it.
func (p *qProducer) put(c uint64, l int, head []byte, parts [][]byte) {
	k := uint64(cellsFor(l))
	cell := p.cells[int(c&p.mask)*cellLen:]
	binary.LittleEndian.PutUint32(cell[8:], uint32(l))
	w := qWriter{p: p, c: c, at: cellHdr, cell: cell}
	w.write(head)
	for _, s := range parts {
		w.write(s)
	}
	// Stored last, sequentially consistent: the consumer's load of it
	// acquires the frame, and the producer's load of the sleeping flag
	// (publish) comes after it.
	p.word(c).Store(qWord(c, qFull, uint32(k), p.id))
}

// qWriter copies frame bytes into a record's cells, past each cell's word.
type qWriter struct {
	p    *qProducer
	c    uint64 // the cursor of the cell being written
	at   int    // the next byte of it
	cell []byte
}

func (w *qWriter) write(b []byte) {
	for len(b) > 0 {
		if w.at == cellLen {
			w.c++
			w.cell = w.p.cells[int(w.c&w.p.mask)*cellLen:]
			w.at = 8
		}
		n := copy(w.cell[w.at:cellLen], b)
		w.at += n
		b = b[n:]
	}
}

// qConsumer is the receiver's view of its own queue.
type qConsumer struct {
	// What an empty look reads (peekQueue) first, on one line.
	cur     uint64         // the next record's cursor
	wordAt  *atomic.Uint64 // its word
	broken  bool           // a word broke the protocol: the queue delivers no more
	freed   uint64         // cells below this are written empty for their next lap
	pubHead uint64         // the head as last published
	queue
	// bufs[i] holds the multi-cell frame of a batch's i-th slot,
	// gathered (grown to the longest frame it took, at most the MTU).
	bufs [][]byte
}

func newQConsumer(seg []byte) qConsumer {
	q := qConsumer{queue: newQueue(seg)}
	q.wordAt = q.word(0)
	return q
}

// gatherBuf is the buffer a multi-cell frame of a batch's slot i is
// gathered into: valid until the next Recv (or Take).
func (q *qConsumer) gatherBuf(i int) *[]byte {
	for len(q.bufs) <= i {
		q.bufs = append(q.bufs, nil)
	}
	return &q.bufs[i]
}

// Kinds of record at the consumer's cursor, besides recNone and recFrame
// (ring.go).
const recClaimed = 16

// parse looks at the record at the consumer's cursor. It returns recNone
// (nothing there), recClaimed (a producer is writing it: its id in id, its
// cells in k), or recFrame with the frame (pointing into the cell for a
// frame of one cell, else into *buf, gathered, which grows to hold it) and
// its cells; every length is checked against the queue and the MTU. Any
// other word is an error.
func (q *qConsumer) parse(mtu int, buf *[]byte) (f []byte, k uint64, id uint32, kind int, err error) {
	w := q.wordAt.Load()
	if uint32(w) != uint32(q.cur) {
		if uint32(w) == uint32(q.cur-q.n()) {
			// The record a lap ago, consumed but not yet released: the
			// queue is empty, and no producer may claim this cell yet.
			return nil, 0, 0, recNone, nil
		}
		return nil, 0, 0, recNone, fmt.Errorf("%w: queue word %#x at cursor %d (another lap's)", errCorrupt, w, q.cur)
	}
	k, id = qK(w), qID(w)
	switch qState(w) {
	case qEmpty:
		if w != qWord(q.cur, qEmpty, 0, 0) {
			break
		}
		return nil, 0, 0, recNone, nil
	case qClaimed:
		if k == 0 || k > q.n()/minFrames {
			break
		}
		return nil, k, id, recClaimed, nil
	case qFull:
		cell := q.cells[int(q.cur&q.mask)*cellLen:]
		l := int(binary.LittleEndian.Uint32(cell[8:]))
		if l > mtu || uint64(cellsFor(l)) != k || k > q.n()/minFrames {
			return nil, 0, 0, recNone, fmt.Errorf("%w: a %d-byte frame in %d cells at queue cursor %d (MTU %d)", errCorrupt, l, k, q.cur, mtu)
		}
		if k == 1 {
			return cell[cellHdr : cellHdr+l : cellHdr+l], 1, id, recFrame, nil
		}
		if cap(*buf) < l {
			*buf = make([]byte, l)
		}
		b := (*buf)[:l]
		n := copy(b, cell[cellHdr:cellLen])
		for c := q.cur + 1; n < l; c++ {
			at := int(c&q.mask) * cellLen
			n += copy(b[n:], q.cells[at+8:at+cellLen])
		}
		return b, k, id, recFrame, nil
	}
	return nil, 0, 0, recNone, fmt.Errorf("%w: queue word %#x at cursor %d", errCorrupt, w, q.cur)
}

// skip moves the cursor past the claim of k cells of a producer that went
// away, and the tail past it too when the tail is still at the claim: a
// producer killed between its swap on the cell's word and its move of the
// tail left the tail there, and once release writes those cells empty for
// their next lap no claim at that tail could succeed again.
func (q *qConsumer) skip(k uint64) {
	q.tail.CompareAndSwap(q.cur, q.cur+k)
	q.advance(k)
}

// advance moves the cursor past a record of k cells.
func (q *qConsumer) advance(k uint64) {
	q.cur += k
	q.wordAt = q.word(q.cur)
}

// release writes the cells consumed since the last release empty for their
// next lap, and publishes the head once an eighth of the queue was
// consumed since it last was, or at once when a producer said it found the
// queue full (wantRoom), or always, with force. Called when no frame of
// those cells is lent out any more. It reports whether producers wait for
// the room it published: the caller wakes them (takeWaiters,
// Transport.wakeProducer).
func (q *qConsumer) release(force bool) (wake bool) {
	n := q.n()
	for c := q.freed; c < q.cur; c++ {
		q.word(c).Store(qWord(c+n, qEmpty, 0, 0))
	}
	q.freed = q.cur
	if q.cur == q.pubHead {
		return false
	}
	if !force && q.cur-q.pubHead < n/8 && q.wait.Load() == 0 {
		return false
	}
	// The store releases the empty words above to the producers. The
	// flag's load after it is sequentially consistent with a waiting
	// producer's store of it and its load of the head (wantRoom).
	q.head.Store(q.cur)
	q.pubHead = q.cur
	return q.wait.Load() != 0
}

// takeWaiters clears the wait flag and calls wake with the id of every
// producer whose bit is set in the waiters' bitmap, clearing it, up to
// id high. The flag is cleared first: a producer that sets it (and its
// bit) after that finds the head published before this call.
func (q *qConsumer) takeWaiters(high uint32, wake func(id uint32)) {
	q.wait.Store(0)
	for i := uint32(0); i <= high/64; i++ {
		w := q.waiterWord(i * 64)
		if w.Load() == 0 {
			continue
		}
		for b := w.Swap(0); b != 0; b &= b - 1 {
			wake(i*64 + uint32(bits.TrailingZeros64(b)))
		}
	}
}
