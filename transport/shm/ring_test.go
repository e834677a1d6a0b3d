package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// oracleRing builds rings record by record from the layout as ring.go
// describes it in prose, with code of its own (not reserve or putRecord):
// 64-byte records of a length and a record word, a pad record when the end
// is too short, the next header's word zeroed before a record's own word,
// and one header's room always left free.
type oracleRing struct {
	data       []byte
	head, tail uint64
}

// word is the record word of the record at cursor c.
func (o *oracleRing) word(c uint64) uint32 { return uint32(c>>6)*2 + 1 }

func (o *oracleRing) setWord(c uint64, w uint32) {
	binary.LittleEndian.PutUint32(o.data[c%uint64(len(o.data))+4:], w)
}

// place returns where a frame of n bytes goes (after a pad when at != the
// tail) and its record length, or ok false when it does not fit.
func (o *oracleRing) place(n int) (at uint64, rl int, ok bool) {
	size := uint64(len(o.data))
	rl = (8 + n + 63) / 64 * 64
	at = o.tail
	if left := size - o.tail%size; left < uint64(rl) {
		at += left
	}
	return at, rl, at+uint64(rl)+8-o.head <= size
}

// put writes f, with the bytes fill chooses for the frame (fill gets the
// cursor of the frame's first byte), or reports that it does not fit.
func (o *oracleRing) put(f []byte, fill func(c uint64, f []byte)) bool {
	at, rl, ok := o.place(len(f))
	if !ok {
		return false
	}
	if fill != nil {
		fill(at+8, f)
	}
	size := uint64(len(o.data))
	if at != o.tail {
		binary.LittleEndian.PutUint32(o.data[o.tail%size:], 0xFFFFFFFF)
		o.setWord(at, 0)
		o.setWord(o.tail, o.word(o.tail))
	}
	binary.LittleEndian.PutUint32(o.data[at%size:], uint32(len(f)))
	copy(o.data[at%size+8:], f)
	o.setWord(at+uint64(rl), 0)
	o.setWord(at, o.word(at))
	o.tail = at + uint64(rl)
	return true
}

// poison fills a frame whose first byte is at cursor c with what a
// consumer one lap later would take for a published record: at each
// 4-byte cursor x, the record word of a record at x-4 one lap on. Every
// place the record word of a later record can fall then holds exactly the
// value the consumer waits for.
func poison(size int) func(c uint64, f []byte) {
	return func(c uint64, f []byte) {
		for i := range f {
			x := c + uint64(i)
			if x%4 != 0 || i+4 > len(f) {
				f[i] = 0xA5
				continue
			}
			binary.LittleEndian.PutUint32(f[i:], recWord(x-recWordOff+uint64(size)))
		}
	}
}

// consume reads records at cursor *head of data until a frame (or a
// reference record's bytes) or nothing.
func consume(data []byte, head *uint64, mtu int) ([]byte, error) {
	for range len(data) / ringAlign {
		f, rl, kind, err := parseRecord(data, *head, *head%uint64(len(data)), mtu)
		if err != nil || kind == recNone {
			return nil, err
		}
		*head += rl
		if kind != recPad {
			return f, nil
		}
	}
	return nil, errors.New("only pad records")
}

// TestRingMatchesOracle pushes random frames through a small ring the way
// Send does (codeRing), next to the oracle: the bytes the consumer may read
// must be the same after every record, frames must come out of parseRecord in
// order, byte for byte, and the ring may refuse a frame only when it is
// really full.
func TestRingMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const size, mtu = 4096, 900
	o := &oracleRing{data: make([]byte, size)}
	r := &codeRing{producer: newProducer(make([]byte, size), 0)}
	var fifo [][]byte
	for step := 0; step < 200000; step++ {
		if rng.IntN(2) == 0 {
			f := make([]byte, rng.IntN(mtu+1))
			for i := range f {
				f[i] = byte(rng.Uint32())
			}
			ok := r.put(f, nil)
			if ok != o.put(f, nil) {
				t.Fatalf("step %d: the ring says %v to a %d-byte frame, the oracle %v", step, ok, len(f), !ok)
			}
			if !ok {
				if used := r.cur - r.head; used+uint64(recordLen(len(f))) <= size/2 {
					t.Fatalf("step %d: refused a %d-byte frame with %d of %d bytes used", step, len(f), used, size)
				}
				continue
			}
			if !r.sameAsOracle(o) {
				t.Fatalf("step %d: the producer wrote other bytes than the oracle (tail %d, oracle %d)", step, r.cur, o.tail)
			}
			fifo = append(fifo, f)
			continue
		}
		f, err := consume(r.data, &r.head, mtu)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if (f != nil) != (len(fifo) > 0) {
			t.Fatalf("step %d: got a frame %v with %d queued", step, f != nil, len(fifo))
		}
		if f != nil {
			if !bytes.Equal(f, fifo[0]) {
				t.Fatalf("step %d: frame differs", step)
			}
			fifo = fifo[1:]
		}
		o.head = r.head
	}
}

// codeRing writes records the way Send does: reserve, producer.put, then
// producer.clearAhead; or, as SendParts does for a record of one line,
// producer.putLine (given the frame as a head and a part) when it takes it.
type codeRing struct {
	producer
	head uint64
}

// put writes f, its bytes chosen by fill (given the cursor of the frame's
// first byte) unless fill is nil, or reports that it does not fit.
func (r *codeRing) put(f []byte, fill func(c uint64, f []byte)) bool {
	at, ok := r.reserve(r.head, recordLen(len(f)))
	if !ok {
		return false
	}
	if fill != nil {
		fill(at+recHdr, f)
	}
	split := min(len(f), 24) // mx's lane header, then the payload
	if !r.putLine(r.head, len(f), f[:split], f[split:]) {
		r.producer.put(at, f)
	}
	r.clearAhead(r.head + uint64(len(r.data)))
	return true
}

// sameAsOracle reports whether r holds the oracle's records (headers and
// frames) from the consumer's cursor to the tail, and the word after them.
// The rest (free space, pad bytes) may differ: the producer zeroes words
// ahead of its cursor.
func (r *codeRing) sameAsOracle(o *oracleRing) bool {
	if r.cur != o.tail || r.head != o.head {
		return false
	}
	size := uint64(len(r.data))
	same := func(c uint64, n int) bool {
		p := c % size
		return bytes.Equal(r.data[p:p+uint64(n)], o.data[p:p+uint64(n)])
	}
	for c := r.head; c < r.cur; {
		n := binary.LittleEndian.Uint32(o.data[c%size:])
		if n == 0xFFFFFFFF {
			if !same(c, recHdr) {
				return false
			}
			c += size - c%size
			continue
		}
		if !same(c, recHdr+int(n)) {
			return false
		}
		c += uint64(recordLen(int(n)))
	}
	return same(r.cur+recWordOff, 4)
}

// TestStaleWordsNeverAccepted proves the hazard of polling a word inside
// the records gone: an earlier lap leaves, at every place a record word of
// the next lap can fall, exactly the value the consumer will wait for
// there (poison). For frames of every record length from one to five
// lines, starting at every line of the ring, the consumer polls before each
// record is written and must find nothing, then finds exactly the frame.
func TestStaleWordsNeverAccepted(t *testing.T) {
	const size, mtu = 2048, 600
	lines := size / ringAlign
	for _, first := range []int{mtu, 400, 120, 57, 0} { // the earlier lap's frames
		for _, n := range []int{0, 8, 56, 57, 120, 121, 250, 300} {
			r := &codeRing{producer: newProducer(make([]byte, size), 0)}
			// Laps of first-sized frames, every one poisoned, consumed at once.
			for r.cur < 2*size {
				if !r.put(make([]byte, first), poison(size)) {
					t.Fatalf("the earlier lap's %d-byte frame does not fit an empty ring", first)
				}
				if _, err := consume(r.data, &r.head, mtu); err != nil {
					t.Fatal(err)
				}
			}
			// Enough n-byte frames that their starts cover every line.
			for i := 0; i < 3*lines; i++ {
				f, err := consume(r.data, &r.head, mtu)
				if f != nil || err != nil {
					t.Fatalf("earlier lap %d B, frames of %d B: record %d: the consumer at %d (line %d) accepted %d stale bytes (%v)",
						first, n, i, r.head, r.head%size/ringAlign, len(f), err)
				}
				if !r.put(make([]byte, n), poison(size)) {
					t.Fatalf("a %d-byte frame does not fit a drained ring", n)
				}
				want := append([]byte(nil), r.data[(r.cur-uint64(recordLen(n)))%size+recHdr:][:n]...)
				f, err = consume(r.data, &r.head, mtu)
				if err != nil || !bytes.Equal(f, want) {
					t.Fatalf("earlier lap %d B, record %d of %d B: got %d bytes, %v", first, i, n, len(f), err)
				}
			}
		}
	}
}

// TestTransportIgnoresStaleWords runs the same proof through Send and Recv
// of two transports: frames that poison the smallest ring for its next
// lap, then, for frames of every line count, a Recv that polls before each
// Send returns nothing, and one after returns exactly the frame.
func TestTransportIgnoresStaleWords(t *testing.T) {
	const mtu = 1024
	a, b := newTestPair(t, Options{MTU: mtu, RingSize: minRingLen, NoHugepages: true, Spin: -1})
	defer a.Close()
	defer b.Close()
	// Where a's frames land in the ring to b, worked out by the oracle.
	o := &oracleRing{data: make([]byte, minRingLen)}
	frames := make([]transport.Frame, 4)
	send := func(f []byte) {
		t.Helper()
		if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: f}}); err != nil {
			t.Fatal(err)
		}
		n, err := b.Recv(frames, 5*time.Second)
		if err != nil || n != 1 || !bytes.Equal(frames[0].Data, f) {
			t.Fatalf("sent %d bytes, received %d frames (%v)", len(f), n, err)
		}
	}
	for _, size := range []int{mtu, 700, 300, 100, 56, 0} {
		for end := o.tail + 3*minRingLen/2; o.tail < end; {
			if n, err := b.Recv(frames, 0); n != 0 || err != nil {
				t.Fatalf("at cursor %d, before a %d-byte frame: received %d frames (%v)", o.tail, size, n, err)
			}
			f := make([]byte, size)
			if !o.put(f, poison(minRingLen)) {
				t.Fatal("the oracle found no room in a drained ring")
			}
			send(f)
			o.head = o.tail
		}
	}
	for _, c := range b.Counters() {
		if c.Name == "shm corrupt rings dropped" && c.Value != 0 {
			t.Fatalf("%s: %d", c.Name, c.Value)
		}
	}
}

// FuzzRingOracle drives the producer (codeRing, as Send) and the consumer
// (parseRecord) by a script of puts and gets, next to the oracle ring, on a
// ring that an earlier lap poisoned (see poison) and whose cursors start
// anywhere: the bytes the consumer may read must equal the oracle's, and
// the consumer must return exactly the frames put, in order, and nothing
// else.
func FuzzRingOracle(f *testing.F) {
	f.Add([]byte{10, 200, 0, 0, 30, 0, 255, 1, 0, 7}, uint16(3))
	f.Add([]byte{255, 255, 255, 0, 0, 0, 40, 40, 40, 40, 0, 0, 0, 0}, uint16(31))
	f.Fuzz(func(t *testing.T, script []byte, start uint16) {
		const size, mtu = 1024, 300
		base := uint64(3*size) + uint64(start)%(size/ringAlign)*ringAlign
		o := &oracleRing{data: make([]byte, size), head: base, tail: base}
		// The lap before left poison everywhere, and its last record
		// zeroed the word at base.
		poison(size)(base-size, o.data[base%size:])
		poison(size)(base-base%size, o.data[:base%size])
		o.setWord(base, 0)
		r := &codeRing{producer: newProducer(append([]byte(nil), o.data...), base), head: base}
		var fifo [][]byte
		for step, op := range script {
			if op&1 == 1 {
				fr := make([]byte, int(op>>1)*mtu/127)
				ok := r.put(fr, poison(size))
				if ok != o.put(fr, poison(size)) {
					t.Fatalf("step %d: the ring says %v to %d bytes, the oracle %v", step, ok, len(fr), !ok)
				}
				if ok {
					if !r.sameAsOracle(o) {
						t.Fatalf("step %d: the producer wrote other bytes than the oracle", step)
					}
					fifo = append(fifo, fr)
				}
				continue
			}
			got, err := consume(r.data, &r.head, mtu)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if (got != nil) != (len(fifo) > 0) || got != nil && !bytes.Equal(got, fifo[0]) {
				t.Fatalf("step %d: got %d bytes (%v) with %d frames queued", step, len(got), got != nil, len(fifo))
			}
			if got != nil {
				fifo = fifo[1:]
			}
			o.head = r.head
		}
	})
}

// FuzzParseRecord feeds arbitrary ring contents and cursors on line starts
// (what a buggy or hostile producer could leave; the consumer's cursor is
// aligned by construction) to the consumer's parser: it must never panic,
// and whatever it returns must obey the layout, checked here from the bytes
// themselves.
func FuzzParseRecord(f *testing.F) {
	o := &oracleRing{data: make([]byte, 256)}
	o.put([]byte("hello"), nil)
	o.put(make([]byte, 100), nil)
	o.put([]byte("wrapped"), nil)
	f.Add(append([]byte(nil), o.data...), uint64(0), 100)
	f.Add(append([]byte(nil), o.data...), uint64(192), 100)
	f.Add(make([]byte, 64), uint64(64), 16)
	closing := make([]byte, 128) // a lane's closing record at cursor 64
	binary.LittleEndian.PutUint32(closing[64:], closeMark)
	binary.LittleEndian.PutUint32(closing[64+recWordOff:], recWord(64))
	f.Add(closing, uint64(64), 100)
	f.Fuzz(func(t *testing.T, in []byte, head uint64, mtu int) {
		// A data area is a multiple of 64 bytes, 64-byte aligned (a fresh
		// slice is at least 8-byte aligned, enough for the atomics).
		data := append([]byte(nil), in[:len(in)&^(ringAlign-1)]...)
		if len(data) == 0 || mtu < 0 || mtu > 1<<20 {
			return
		}
		head &^= ringAlign - 1
		size := uint64(len(data))
		pos := head % size
		frame, rl, kind, err := parseRecord(data, head, pos, mtu)
		if err != nil || kind == recNone {
			if rl != 0 || frame != nil {
				t.Fatalf("returned %d bytes and a %d-byte record on failure", len(frame), rl)
			}
			return
		}
		next := head + rl
		n := binary.LittleEndian.Uint32(data[pos:])
		ref := n == refMark // a reference record: refLen bytes, whatever the MTU
		if ref {
			n = refLen
		}
		w := binary.LittleEndian.Uint32(data[pos+recWordOff:])
		switch {
		case w == 0 || w != uint32(head>>6)*2+1:
			t.Fatalf("accepted record word %#x at cursor %d", w, head)
		case next <= head || next-head > size-pos:
			t.Fatalf("cursor %d -> %d past the end of the ring", head, next)
		case n == closeMark || kind == recClose:
			if kind != recClose || frame != nil || n != closeMark || next-head != ringAlign {
				t.Fatalf("a closing record that is none: length %#x, kind %d, next %d", n, kind, next)
			}
		case kind == recPad || frame == nil:
			if kind != recPad || frame != nil || n != padMark || next%size != 0 {
				t.Fatalf("a pad record that is none: length %#x, next %d", n, next)
			}
		default:
			if ref != (kind == recRef) || int(n) != len(frame) || len(frame) > mtu && !ref || pos+recHdr+uint64(n) > size ||
				next-head != uint64((recHdr+len(frame)+63)&^63) ||
				!bytes.Equal(frame, data[pos+recHdr:pos+recHdr+uint64(n)]) {
				t.Fatalf("bad frame: %d bytes at %d (header %d), next %d", len(frame), pos, n, next)
			}
		}
	})
}

// TestCopyWords checks that copyWords copies as copy does, byte for byte,
// whatever the lengths: below, at and past wordsMax, not multiples of 8,
// a destination shorter than the source, and nothing past what it copied.
func TestCopyWords(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 23, 24, 63, 64, 65, 71, 72, 200, 4096, 4097} {
		for _, dl := range []int{n, n + 13, n / 2} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*7 + 1)
			}
			dst := make([]byte, dl+8)
			for i := range dst {
				dst[i] = 0xEE
			}
			got := copyWords(dst[:dl], src)
			want := min(n, dl)
			if got != want {
				t.Fatalf("copyWords(%d into %d) = %d, want %d", n, dl, got, want)
			}
			if !bytes.Equal(dst[:want], src[:want]) {
				t.Fatalf("copyWords(%d into %d): bytes differ", n, dl)
			}
			for i := want; i < len(dst); i++ {
				if dst[i] != 0xEE {
					t.Fatalf("copyWords(%d into %d) wrote byte %d past its copy", n, dl, i)
				}
			}
		}
	}
}
