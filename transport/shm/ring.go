package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Ring layout. A ring is one shared segment written by exactly one producer
// process and read by exactly one consumer process:
//
//	offset 0     tail   uint64  bytes ever published by the producer
//	offset 64    head   uint64  bytes ever consumed by the consumer
//	offset 128   magic  uint32  ringMagic
//	offset 132   size   uint32  length of the data area
//	offset 4096  data   [size]byte
//
// tail and head sit on cache lines of their own, so the producer's writes
// never invalidate the line the consumer polls and the other way round.
// Cursors only grow; a position in the data area is cursor % size.
//
// The data area holds records, each 8-byte aligned: a little-endian uint32
// length, 4 reserved bytes, then the frame, padded to 8 bytes. A record
// never wraps: when the contiguous space left before the end is too short,
// the producer writes a pad record (length padMark), which tells the
// consumer to skip to the start of the data area. A reference record
// (length refMark) carries, instead of a frame, the refLen bytes that name
// a frame in a pool segment the producer shared (see inplace.go).
const (
	tailOff    = 0
	headOff    = 64
	magicOff   = 128
	sizeOff    = 132
	dataOff    = 4096
	recHdr     = 8
	padMark    = 0xFFFFFFFF
	refMark    = 0x80000000 | refLen
	refLen     = 16
	ringMagic  = 0x676D7872 // "gmxr"
	ringAlign  = 8
	minRingLen = 64 << 10
)

// Doorbell layout: one segment per receiving transport, shared with every
// producer that sends to it.
//
//	offset 0   seq       uint32  futex word: bumped by a producer to wake
//	offset 64  sleeping  uint32  1 while the receiver may sleep on seq
const (
	bellSeqOff   = 0
	bellSleepOff = 64
	bellLen      = 4096
)

// errCorrupt reports a ring whose contents break the layout: its producer
// is buggy or hostile, and the ring is dropped.
var errCorrupt = errors.New("shm: corrupt ring")

func align8(n int) int { return (n + ringAlign - 1) &^ (ringAlign - 1) }

// recordLen is the ring space a frame of n bytes takes.
func recordLen(n int) int { return recHdr + align8(n) }

// ringSegLen is the segment length for a data area of size bytes.
func ringSegLen(size int) int { return dataOff + size }

// parseRecord reads the record at cursor head of a ring whose data area is
// data, with tail the producer's published cursor and mtu the largest frame
// allowed. It returns the frame (pointing into data), the cursor after the
// record, and whether there was one. A pad record is consumed silently
// (frame nil, ok true). Every length comes from the other process, so each
// is checked against the data area before it is used.
func parseRecord(data []byte, head, tail uint64, mtu int) (frame []byte, next uint64, ok bool, err error) {
	size := uint64(len(data))
	if tail == head {
		return nil, head, false, nil
	}
	if tail-head > size || tail < head {
		return nil, head, false, fmt.Errorf("%w: %d bytes published past a consumer at %d (ring of %d)", errCorrupt, tail-head, head, size)
	}
	if head%ringAlign != 0 {
		return nil, head, false, fmt.Errorf("%w: unaligned cursor %d", errCorrupt, head)
	}
	pos := head % size
	avail := tail - head
	if avail < recHdr || size-pos < recHdr {
		return nil, head, false, fmt.Errorf("%w: a record header does not fit at %d", errCorrupt, pos)
	}
	n := binary.LittleEndian.Uint32(data[pos:])
	if n == padMark {
		skip := size - pos
		if skip > avail {
			return nil, head, false, fmt.Errorf("%w: pad record past the published data", errCorrupt)
		}
		return nil, head + skip, true, nil
	}
	if n == refMark {
		n = refLen // a reference record: its refLen bytes
	}
	if int64(n) > int64(mtu) {
		return nil, head, false, fmt.Errorf("%w: a %d-byte frame (MTU %d)", errCorrupt, n, mtu)
	}
	rl := uint64(recordLen(int(n)))
	if rl > avail || rl > size-pos {
		return nil, head, false, fmt.Errorf("%w: a %d-byte record at %d overruns the ring", errCorrupt, rl, pos)
	}
	start := pos + recHdr
	return data[start : start+uint64(n) : start+uint64(n)], head + rl, true, nil
}

// reserve finds room for a record of rl bytes for a producer at cursor tail
// whose consumer is at head. It returns the cursor at which the record
// starts (after a pad record, when one is needed: pad reports that) and
// whether it fits.
func reserve(size int, head, tail uint64, rl int) (at uint64, pad bool, ok bool) {
	s := uint64(size)
	pos := tail % s
	free := s - (tail - head)
	need := uint64(rl)
	if s-pos < need {
		// Skip the short end with a pad record: it must fit, plus the record
		// at the start.
		need += s - pos
		if need > free {
			return 0, false, false
		}
		return tail + (s - pos), true, true
	}
	if need > free {
		return 0, false, false
	}
	return tail, false, true
}
