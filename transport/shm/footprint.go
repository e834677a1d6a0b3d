package shm

import (
	"os"
	"strings"
)

// DefaultRingBudget is Options.RingBudget's default: with every process
// of a job talking to every other, a process maps about twice this in
// rings, at any size of the job (until the rings reach their floor of
// three frames of the MTU: some 1,000 peers at the default MTU).
const DefaultRingBudget = 30 << 20

// minFrames is how many frames of the MTU the smallest ring holds. The
// rings stay live with a record of up to 7/16 of the ring (see commit);
// a third leaves room.
const minFrames = 3

// ringSize is the data size of a new ring this transport writes:
// Options.RingSize, or when the endpoint directory lists more boards than
// Options.RingBudget gives rings of that size to, the budget shared among
// them (segment headers included) on a cache-line multiple, but never
// less than minFrames frames of the MTU nor minRingLen. The boards listed
// are the processes this one may come to talk to: in a job they have all
// opened their boards before the first frame (they traded their
// addresses), so every rank sizes its rings alike. A board opened later
// finds the directory fuller, and its rings are the smaller.
func (t *Transport) ringSize() int {
	size := t.opts.RingSize
	if t.opts.RingBudget <= 0 {
		return size
	}
	peers := t.boardsListed() - 1
	if peers < 1 {
		return size
	}
	share := (t.opts.RingBudget/peers - dataOff) &^ (ringAlign - 1)
	return max(min(size, share), minFrames*recordLen(t.opts.MTU), minRingLen)
}

// boardsListed counts the board sockets in the endpoint directory, this
// board's among them.
func (t *Transport) boardsListed() int {
	ents, err := os.ReadDir(t.opts.Dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sock") {
			n++
		}
	}
	return n
}

// Footprint is the shared memory a transport holds, counted from its own
// tables: the ring segments it writes (one per peer it sent to), the ring
// segments peers write to it (one per peer that sent to it), the doorbells
// (its own, and each consumer's it rings), and pool segments (its own
// pool's, and those peers shared with it). Every segment is mapped with
// MAP_POPULATE, so a mapped byte is a resident byte of the node.
//
// Owned counts what this process created (its doorbell, the rings it
// writes, its pool's segments): summed over the processes of a node, it
// is the node's shared memory, each segment counted once. Mapped counts
// every mapping this process has, its own and its peers': a process's
// address-space and page-table footprint, and what a per-process bound is
// about.
type Footprint struct {
	// MappedBytes is every shared byte this process maps: RingBytes and
	// PoolBytes.
	MappedBytes int64
	// OwnedBytes is what this process created of MappedBytes.
	OwnedBytes int64
	// RingBytes is the rings both ways and the doorbells.
	RingBytes int64
	// PoolBytes is the pool segments, this process's and its peers'.
	PoolBytes int64
	// RingsOut and RingsIn count the rings this process writes and reads.
	RingsOut, RingsIn int
	// Peers counts the boards with a ring either way.
	Peers int
}

// The names of the footprint's counters that a report sums over the
// processes of a node.
const (
	// CounterMappedBytes is Footprint.MappedBytes.
	CounterMappedBytes = "shm bytes mapped"
	// CounterOwnedBytes is Footprint.OwnedBytes.
	CounterOwnedBytes = "shm bytes owned"
	// CounterRingsWritten is Footprint.RingsOut.
	CounterRingsWritten = "shm rings written"
	// CounterRingsRead is Footprint.RingsIn.
	CounterRingsRead = "shm rings read"
)

// Footprint reports the shared memory t maps now (see [Footprint]). It
// takes the transport's table locks, briefly: it is for counters and
// reports, not for a fast path.
func (t *Transport) Footprint() Footprint {
	var f Footprint
	peers := make(map[uint64]struct{})
	t.outMu.Lock()
	if !t.closed.Load() {
		f.RingBytes += bellLen
		f.OwnedBytes += bellLen
	}
	// A ring in the table is unmapped only under outMu (outFor, Close):
	// its segment can be read here without the ring's own lock, which a
	// sender waiting for room holds.
	for p, o := range t.out {
		if o.seg.mem != nil {
			n := int64(len(o.seg.mem))
			f.RingBytes += n + int64(len(o.bell.mem))
			f.OwnedBytes += n
			f.RingsOut++
			peers[uint64(p)] = struct{}{}
		}
	}
	if p := t.pool; p != nil {
		p.mu.Lock()
		for _, s := range p.segs {
			f.PoolBytes += int64(len(s.seg.mem))
			f.OwnedBytes += int64(len(s.seg.mem))
		}
		p.mu.Unlock()
	}
	t.outMu.Unlock()
	t.inMu.Lock()
	for _, r := range *t.in.Load() {
		if r.data == nil {
			continue
		}
		f.RingBytes += int64(len(r.seg.mem))
		f.RingsIn++
		peers[uint64(r.peer)] = struct{}{}
		r.segMu.RLock()
		for _, s := range r.segs {
			f.PoolBytes += int64(len(s.mem))
		}
		r.segMu.RUnlock()
	}
	t.inMu.Unlock()
	f.Peers = len(peers)
	f.MappedBytes = f.RingBytes + f.PoolBytes
	return f
}
