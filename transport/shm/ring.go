package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Ring layout. A ring is one shared segment written by exactly one producer
// process and read by exactly one consumer process:
//
//	offset 64    head   uint64  bytes ever consumed by the consumer
//	offset 128   magic  uint32  ringMagic
//	offset 132   size   uint32  length of the data area
//	offset 4096  data   [size]byte
//
// The head sits on a cache line of its own. Cursors only grow; a position
// in the data area is cursor % size. There is no producer cursor in shared
// memory: each record announces itself (see below).
//
// The data area holds records, each starting on a 64-byte boundary (a cache
// line): a little-endian uint32 length, a uint32 record word, then the
// frame, padded to 64 bytes. A record never wraps: when the contiguous
// space left before the end is too short, the producer writes a pad record
// (length padMark), which tells the consumer to skip to the start of the
// data area. A reference record (length refMark) carries, instead of a
// frame, the refLen bytes that name a frame in a pool segment the producer
// shared (see inplace.go). A closing record (length closeMark, one line) is
// a lane's last: its producer retired the lane (lane.go).
//
// The record word is what the consumer polls. It is recWord(c) for the
// record at cursor c (never 0) once the record is published, and 0 before:
// the producer stores 0 into the word of the next record's header (at the
// cursor just past its record) before it stores its own record's word (or
// has stored it already: producer.clearAhead), and
// never lets the ring fill up to that header (see reserve). So the word the
// consumer looks at is, by construction, either 0 or its record's word,
// never bytes an earlier lap left there: those were overwritten by the 0,
// which the consumer sees because it acquired the previous record's word,
// stored after the 0. Any other value is a broken producer.
const (
	headOff  = 64
	magicOff = 128
	sizeOff  = 132
	// ringGateOff: a lane's gate + 1 (0: not yet taken), ringWaitOff:
	// 1 while its producer's backlog waits for room (lane.go).
	ringGateOff = 320
	ringWaitOff = 384
	dataOff     = 4096
	recHdr      = 8 // length, record word
	recWordOff  = 4 // the record word's offset in a record
	padMark     = 0xFFFFFFFF
	closeMark   = 0xFFFFFFFE
	refMark     = 0x80000000 | refLen
	refLen      = 16
	ringMagic   = 0x676D7872 // "gmxr"
	ringAlign   = 64
	minRingLen  = 64 << 10
)

// Doorbell layout: one segment per receiving transport, shared with every
// producer that sends to it (the wake-up itself goes through an eventfd
// passed with it: see Transport.sleep).
//
//	offset 64  sleeping  uint32  1 while the receiver may sleep on its eventfd
//	offset 68  blocked   uint32  waiters of the layer above blocked in a wait on this transport (AddBlocked)
//	offset 72  slept     uint64  ns the receiver slept with a waiter blocked, added as each sleep ends (PeerSleeps)
//	offset 80  since     uint64  when the receiver's latest sleep with a waiter blocked began, CLOCK_MONOTONIC ns, else 0: written before sleeping goes up (PeerSleeps)
//	offset 128 summary   uint64  the bits of cold rings with news (notify.go)
const (
	bellSleepOff = 64
	bellBlockOff = 68
	bellSleptOff = 72
	bellSinceOff = 80
	bellLen      = 4096
)

// errCorrupt reports a ring whose contents break the layout: its producer
// is buggy or hostile, and the ring is dropped.
var errCorrupt = errors.New("shm: corrupt ring")

// recWord is the record word of the record (or pad) at cursor c: odd, so
// never the 0 of a record not yet published.
func recWord(c uint64) uint32 { return uint32(c/ringAlign)<<1 | 1 }

func alignRec(n int) int { return (n + ringAlign - 1) &^ (ringAlign - 1) }

// recordLen is the ring space a frame of n bytes takes.
func recordLen(n int) int { return alignRec(recHdr + n) }

// ringSegLen is the segment length for a data area of size bytes.
func ringSegLen(size int) int { return dataOff + size }

// Record kinds, as parseRecord finds them at a cursor.
const (
	recNone  = iota // the record word is still 0: nothing published yet
	recFrame        // a frame
	recRef          // a reference record: its refLen bytes (inplace.go)
	recPad          // a pad record: skip to the start of the data area
	recClose        // a closing record: the lane's last (lane.go)
)

// parseRecord reads the record at cursor head, at offset pos (head % the
// size) of a ring whose data area is data (a multiple of ringAlign long),
// with mtu the largest frame allowed. It returns the record's kind, its
// bytes (pointing into data: the frame, or the reference record's refLen
// bytes; nil for a pad and a closing record) and the ring space it takes
// (for a pad, the rest of the data area; for a closing record, one line).
// The record word is loaded atomically, which acquires the record's
// length and bytes; every length comes from the other process, so each is
// checked against the data area and the MTU before it is used.
//
// The caller keeps the cursor aligned (it starts aligned, checked when the
// ring is mapped, and moves by record lengths, multiples of ringAlign), so
// pos+recHdr <= len(data) and the cursor is not checked again here: the
// consumer calls this once per look at a ring.
func parseRecord(data []byte, head, pos uint64, mtu int) (rec []byte, rl uint64, kind int, err error) {
	w := u32At(data, int(pos)+recWordOff).Load()
	if w == 0 {
		return nil, 0, recNone, nil
	}
	// A frame's record, every small message's, is parsed here; marks
	// and errors in parseOther, whose calls of fmt would otherwise give
	// this one a large frame to set up at every record.
	n := binary.LittleEndian.Uint32(data[pos:])
	if w != recWord(head) || n >= 1<<31 || int64(n) > int64(mtu) {
		return parseOther(data, head, pos, mtu, w, n)
	}
	rl = uint64(recordLen(int(n)))
	if rl > uint64(len(data))-pos {
		return parseOther(data, head, pos, mtu, w, n)
	}
	start := pos + recHdr
	return data[start : start+uint64(n) : start+uint64(n)], rl, recFrame, nil
}

// parseOther is parseRecord for a record with word w and length word n
// that is not a plain frame's: a pad, a closing or a reference record, or
// a broken one.
func parseOther(data []byte, head, pos uint64, mtu int, w, n uint32) (rec []byte, rl uint64, kind int, err error) {
	size := uint64(len(data))
	if w != recWord(head) {
		return nil, 0, recNone, fmt.Errorf("%w: record word %#x at cursor %d (want 0 or %#x)", errCorrupt, w, head, recWord(head))
	}
	kind = recFrame
	switch {
	case n == padMark:
		return nil, size - pos, recPad, nil
	case n == closeMark:
		return nil, ringAlign, recClose, nil
	case n == refMark:
		n, kind = refLen, recRef
	case int64(n) > int64(mtu):
		return nil, 0, recNone, fmt.Errorf("%w: a %d-byte frame (MTU %d)", errCorrupt, n, mtu)
	}
	rl = uint64(recordLen(int(n)))
	if rl > size-pos {
		return nil, 0, recNone, fmt.Errorf("%w: a %d-byte record at %d overruns the ring", errCorrupt, rl, pos)
	}
	start := pos + recHdr
	return data[start : start+uint64(n) : start+uint64(n)], rl, kind, nil
}

// reserve finds room for a record of rl bytes for the producer, whose
// consumer is at head. It returns the cursor at which the record starts
// (past p.cur when a pad record must skip the end of the data area first)
// and whether it fits. Room means the record and the header after it: the
// producer zeroes that header's word (producer.put), so it must not belong
// to a record the consumer has yet to read.
func (p *producer) reserve(head uint64, rl int) (at uint64, ok bool) {
	s := uint64(len(p.data))
	at = p.cur
	if left := s - (p.cur - p.lap); left < uint64(rl) {
		at += left // a pad record skips the short end
	}
	return at, at+uint64(rl)+recHdr-head <= s
}

// clearAheadLen is how far past its cursor a producer keeps the record
// words at line starts 0, so that publishing a small record does not wait
// for the line of the next header (a line last touched a lap ago) before
// its own record word can be stored.
const clearAheadLen = 16 * ringAlign

// producer is the producer's private view of a ring. It keeps the start
// of the lap its cursor is in, so that finding a cursor's place in the data
// area takes a subtraction, not a division (the size need not be a power
// of two).
type producer struct {
	data  []byte // the data area
	cur   uint64 // the cursor after the last record written
	clear uint64 // the record words at the line starts of [cur, clear) are 0
	lap   uint64 // cur - cur%len(data): lap <= cur < lap+len(data)
}

// newProducer returns the producer of data whose next record goes at
// cursor cur (a multiple of ringAlign; 0 for a new ring).
func newProducer(data []byte, cur uint64) producer {
	return producer{data: data, cur: cur, clear: cur, lap: cur - cur%uint64(len(data))}
}

// put writes frame f as the record at cursor at, after a pad record at cur
// when at is past it (reserve decides both), and publishes each: the word
// of the header after it is 0 first, the record's own word is stored last,
// atomically: the consumer polls it, and its load of a record word acquires
// everything written before it.
func (p *producer) put(at uint64, f []byte) { p.putRecord(at, uint32(len(f)), f) }

// putRecord is put with the record's length word n given: len(f), or
// refMark for a reference record (inplace.go).
func (p *producer) putRecord(at uint64, n uint32, f []byte) { p.putParts(at, n, len(f), f, nil) }

// putParts is putRecord for a record of l bytes made of head and then the
// bytes of parts (Transport.SendParts). head's first bytes are copied 8 at
// a time (copyWords).
func (p *producer) putParts(at uint64, n uint32, l int, head []byte, parts [][]byte) {
	size := uint64(len(p.data))
	if at != p.cur {
		pos := p.cur - p.lap
		binary.LittleEndian.PutUint32(p.data[pos:], padMark)
		p.lap += size
		p.zero(at) // the start of the data area
		u32At(p.data, int(pos)+recWordOff).Store(recWord(p.cur))
		p.cur, p.clear = at, at+ringAlign
	}
	end := at + uint64(recordLen(l))
	if p.clear <= end {
		p.zero(end)
		p.clear = end + ringAlign
	}
	pos := at - p.lap
	binary.LittleEndian.PutUint32(p.data[pos:], n)
	k := pos + recHdr + uint64(copyWords(p.data[pos+recHdr:], head))
	for _, s := range parts {
		k += uint64(copy(p.data[k:], s))
	}
	u32At(p.data, int(pos)+recWordOff).Store(recWord(at))
	p.cur = end
	if end-p.lap == size {
		p.lap = end
	}
}

// putLine is putParts for the commonest record, a small message's: one
// line (a frame of head and part, n <= ringAlign-recHdr bytes), that needs
// no pad record, finds room below headSeen, the consumer's head as
// cached, and has the next record's word zeroed already (clearAhead). It
// reports false, having written nothing, otherwise: putParts then writes
// it. A line is a fixed-size array here, so its stores need no bounds
// checks and no slice of the data area is built per store.
func (p *producer) putLine(headSeen uint64, n int, head, part []byte) bool {
	at := p.cur
	pos := at - p.lap
	size := uint64(len(p.data))
	end := at + ringAlign
	if n > ringAlign-recHdr || len(head)+len(part) != n || size-pos < ringAlign || end+recHdr-headSeen > size || p.clear <= end {
		return false
	}
	rec := (*[ringAlign]byte)(p.data[pos:])
	le := binary.LittleEndian
	le.PutUint32(rec[:], uint32(n))
	copyLine(rec, copyLine(rec, recHdr, head), part)
	u32At(rec[:], recWordOff).Store(recWord(at))
	// Never the data area's last line: clearAhead stops at its end, so
	// that line fails the p.clear test above, and p.lap stays.
	p.cur = end
	return true
}

// clearAhead zeroes the record words of the lines up to clearAheadLen past
// the cursor, stopping at the end of the data area (a pad record zeroes the
// start) and at limit, the first cursor whose line the consumer may still
// read (its head plus the ring size). Called after a batch is published, it
// moves those lines into the producer's cache off the latency path.
//
// It also prefetches the line it will zero clearAheadLen later. A zeroed
// line was last touched a lap ago, and its store waits in the CPU's store
// buffer until the line comes; the caller's next locked instruction (mx's
// board lock, a request's done flag, the next record's word) waits for
// every store before it, so each small message waited once for a line of
// memory (an 8-rank 8 B alltoall: 90 % of Endpoint.complete's samples on
// the instruction after its done flag's store). A prefetch waits for
// nothing, and the line is in the cache when its zero comes. Zeroing many
// lines at once, the other way to share the wait, puts the whole wait in
// front of one message: a two-process ping-pong, whose round trip hides one
// line a record, was 6-11 % slower so (0.149-0.151 -> 0.160-0.167 us
// one-way, 2026-11-30).
func (p *producer) clearAhead(limit uint64) {
	stop := min(p.cur+clearAheadLen, p.lap+uint64(len(p.data)), limit)
	for ; p.clear+ringAlign <= stop; p.clear += ringAlign {
		p.zero(p.clear)
	}
	if at := p.clear + clearAheadLen - p.lap; at < uint64(len(p.data)) {
		prefetch(&p.data[at])
	}
}

// zero stores 0 into the record word of the line at cursor c, a cursor
// past the record the consumer may be polling, in the producer's lap or at
// the start of the next. So no load races with this
// store, and a plain store will do: the consumer loads this word only after
// it acquired the word of a record published after this store, and an
// atomic store here would wait for the line (cold, a lap old) before the
// producer could go on.
func (p *producer) zero(c uint64) {
	pos := c - p.lap
	if pos >= uint64(len(p.data)) {
		pos -= uint64(len(p.data))
	}
	binary.LittleEndian.PutUint32(p.data[pos+recWordOff:], 0)
}

// copyWords copies src into dst as copy does, its first wordsMax bytes 8
// at a time, then the rest with copy: a header its caller just wrote with
// 8-byte stores (mx's lane header, wire.PutLane) is read back by loads the
// CPU forwards from those stores. copy's wider loads span several of them,
// and each such load waits until the stores reach the cache (a
// store-forwarding stall on the path of every lane message). Past the
// header, copy is the faster by far: a record of a few KiB copied 8 bytes at
// a time into ring lines the consumer last read (each store waits for its
// line in turn) cost more than the rest of the message's path: mxbench
// pingpong --procs 2 at 4 KiB, 1.75 us one-way that way, 0.61 us so.
func copyWords(dst, src []byte) int {
	n := min(len(dst), len(src))
	w := min(n, wordsMax) &^ 7
	le := binary.LittleEndian
	i := 0
	for ; i < w; i += 8 {
		le.PutUint64(dst[i:], le.Uint64(src[i:]))
	}
	return i + copy(dst[i:n], src[i:n])
}

// wordsMax is how much of a record's head copyWords copies 8 bytes at a
// time: more than any header (mx's lane header is 24 bytes, an Open-MX
// frame's 40 at most).
const wordsMax = 64
