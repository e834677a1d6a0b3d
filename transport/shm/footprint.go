package shm

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
