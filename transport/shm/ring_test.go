package shm

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// ringModel writes and reads records through reserve and parseRecord, the
// way Send and Recv do, against a plain FIFO of the frames.
type ringModel struct {
	data       []byte
	head, tail uint64
	mtu        int
}

func (m *ringModel) put(f []byte) bool {
	rl := recordLen(len(f))
	at, pad, ok := reserve(len(m.data), m.head, m.tail, rl)
	if !ok {
		return false
	}
	size := uint64(len(m.data))
	if pad {
		binary.LittleEndian.PutUint32(m.data[m.tail%size:], padMark)
	}
	pos := at % size
	binary.LittleEndian.PutUint32(m.data[pos:], uint32(len(f)))
	copy(m.data[pos+recHdr:], f)
	m.tail = at + uint64(rl)
	return true
}

func (m *ringModel) get() ([]byte, bool, error) {
	for {
		f, next, ok, err := parseRecord(m.data, m.head, m.tail, m.mtu)
		if err != nil || !ok {
			return nil, false, err
		}
		m.head = next
		if f != nil {
			return f, true, nil
		}
	}
}

// TestRingModel pushes random frames through a small ring, wrapping it many
// times, and checks they come out in order, byte for byte, and that the ring
// refuses frames only when it is really full.
func TestRingModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := &ringModel{data: make([]byte, 4096), mtu: 900}
	var fifo [][]byte
	for step := 0; step < 200000; step++ {
		if rng.IntN(2) == 0 {
			f := make([]byte, rng.IntN(m.mtu+1))
			for i := range f {
				f[i] = byte(rng.Uint32())
			}
			if m.put(f) {
				fifo = append(fifo, f)
			} else if used := m.tail - m.head; used+uint64(recordLen(len(f))) <= uint64(len(m.data))/2 {
				t.Fatalf("step %d: refused a %d-byte frame with %d of %d bytes used", step, len(f), used, len(m.data))
			}
			continue
		}
		f, ok, err := m.get()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if ok != (len(fifo) > 0) {
			t.Fatalf("step %d: got a frame %v with %d queued", step, ok, len(fifo))
		}
		if ok {
			if !bytes.Equal(f, fifo[0]) {
				t.Fatalf("step %d: frame differs", step)
			}
			fifo = fifo[1:]
		}
	}
}

// FuzzParseRecord feeds arbitrary ring contents and cursors (what a buggy or
// hostile producer could leave) to the consumer's parser: it must never
// panic, and whatever it returns must obey the layout, checked here from the
// bytes themselves.
func FuzzParseRecord(f *testing.F) {
	m := &ringModel{data: make([]byte, 256), mtu: 100}
	m.put([]byte("hello"))
	m.put(make([]byte, 100))
	m.put([]byte("wrapped"))
	f.Add(append([]byte(nil), m.data...), uint64(0), m.tail, 100)
	f.Add(make([]byte, 64), uint64(8), uint64(72), 16)
	f.Fuzz(func(t *testing.T, data []byte, head, tail uint64, mtu int) {
		data = data[:len(data)&^7]
		if len(data) < 16 || mtu < 0 || mtu > 1<<20 {
			return
		}
		frame, next, ok, err := parseRecord(data, head, tail, mtu)
		if err != nil || !ok {
			if next != head {
				t.Fatalf("moved the cursor to %d on failure", next)
			}
			return
		}
		size := uint64(len(data))
		pos := head % size
		n := binary.LittleEndian.Uint32(data[pos:])
		ref := n == refMark // a reference record: refLen bytes, whatever the MTU
		if ref {
			n = refLen
		}
		switch {
		case next <= head || next-head > tail-head:
			t.Fatalf("cursor %d -> %d past tail %d", head, next, tail)
		case frame == nil:
			if n != padMark || next%size != 0 {
				t.Fatalf("a pad record that is none: length %#x, next %d", n, next)
			}
		default:
			if int(n) != len(frame) || len(frame) > mtu && !ref || pos+recHdr+uint64(n) > size ||
				next-head != uint64(recHdr+(len(frame)+7)&^7) ||
				!bytes.Equal(frame, data[pos+recHdr:pos+recHdr+uint64(n)]) {
				t.Fatalf("bad frame: %d bytes at %d (header %d), next %d", len(frame), pos, n, next)
			}
		}
	})
}
