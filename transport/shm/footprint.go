package shm

import (
	"bytes"
	"encoding/binary"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultRingBudget is Options.RingBudget's default: a process writes at
// most this in lanes and reads at most as much, at any size of the job
// (with the default Lanes, each lane of a job of nine processes or more
// is 1 MiB).
const DefaultRingBudget = 8 << 20

// minFrames is how many frames of the MTU the smallest ring holds. The
// rings stay live with a record of up to 7/16 of the ring (see commit);
// a third leaves room.
const minFrames = 3

// ringSize is the data size of a new lane this transport writes:
// Options.RingSize, or when Options.RingBudget does not give that to each
// of the lanes it may write (Options.Lanes, or the other boards the
// endpoint directory lists when they are fewer), the budget shared among
// them (segment headers included) in whole pages, but never
// less than minFrames frames of the MTU nor minRingLen. A share of more
// than a hugepage is rounded down to whole hugepages, unless
// Options.NoHugepages: see hugeShare.
func (t *Transport) ringSize() int {
	size := t.opts.RingSize
	if t.opts.RingBudget <= 0 {
		return size
	}
	peers := min(t.boardsListed()-1, max(t.opts.Lanes, 1))
	if peers < 1 {
		return size
	}
	share := t.opts.RingBudget / peers
	if !t.opts.NoHugepages {
		share = hugeShare(share)
	}
	// Whole pages, so that the segment is all the kernel maps for it
	// (Footprint counts segments; /proc/self/maps lists pages).
	share = share&^(page-1) - dataOff
	return max(min(size, share), minFrames*recordLen(t.opts.MTU), minRingLen)
}

// hugeShare rounds a lane's share of the budget, segment header included,
// down to whole 2 MiB hugepages when it is more than one, so that the
// lane goes on hugepages (newLane) where there are free ones.
//
// A lane is made, and every page of it faulted in (MAP_POPULATE), while
// its pair's messages flow, on CPUs that on an oversubscribed node the
// ranks share. On hugepages that is a fault and a 2 MiB clear per
// hugepage; on ordinary pages a fault, an allocation and a clear per
// 4 KiB. Among four boards the default budget gives each of the three
// lanes a third of 8 MiB, 2.7 MiB: not a hugepage multiple, so 683
// ordinary pages, where two, three and five boards get whole hugepages
// (4 MiB, 4 MiB, 2 MiB), and from six boards a share below one hugepage
// (1 MiB from nine) stays on ordinary pages. Four ranks on 2 CPUs spent a quarter
// of the CPU of an 8 B alltoall's first 1,000 rounds making their twelve
// lanes, and those rounds took 30-36 µs against 7-10 µs once they were
// made (docs/intranode-scale.md, "The first thousand rounds"). Rounded
// down, the three lanes are 2 MiB hugepages; where none are free they are
// 512 ordinary pages instead of 683. Rounding down keeps every bound the
// budget sets.
func hugeShare(share int) int {
	if share > hugePage {
		return share &^ (hugePage - 1)
	}
	return share
}

// boardsListed counts the board sockets in the endpoint directory, this
// board's among them.
//
// RetireIdle's looks call it while there are spares (every LaneIdle/8),
// so it reads the directory through a descriptor it keeps open (dirList)
// into a buffer it reuses, with no allocation and no open or close: a
// board that moves messages allocates nothing in its steady state
// (TestCMANoAllocations), and a job's N processes do not each open and
// read a directory of N entries at every look.
func (t *Transport) boardsListed() int {
	d := &t.dirList
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.opened {
		d.opened = true
		d.open(t.opts.Dir)
	}
	n := d.count()
	if n == 0 && d.fd >= 0 {
		// This board's own socket is listed while it is open, so none
		// means the directory was removed (and perhaps made again by
		// another Open) under the descriptor: look at it by its path.
		unix.Close(d.fd)
		d.open(t.opts.Dir)
		n = d.count()
	}
	return n
}

// open opens dir for count (fd -1 when it cannot).
func (d *dirList) open(dir string) {
	d.fd = -1
	if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		d.fd = fd
	}
}

// count counts the board sockets listed through the descriptor, 0 when
// it has none or a read fails.
func (d *dirList) count() int {
	if d.fd < 0 {
		return 0
	}
	if d.buf == nil {
		d.buf = make([]byte, 8<<10)
	}
	if _, err := unix.Seek(d.fd, 0, 0); err != nil {
		return 0
	}
	n := 0
	for {
		m, err := unix.Getdents(d.fd, d.buf)
		if err != nil {
			return 0
		}
		if m <= 0 {
			return n
		}
		n += socketsIn(d.buf[:m])
	}
}

// socketsIn counts the names ending in ".sock" among the linux_dirent64
// records of b (d_ino 8 bytes, d_off 8, d_reclen 2, d_type 1, then the
// name, NUL-terminated).
func socketsIn(b []byte) int {
	n := 0
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			return n
		}
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if bytes.HasSuffix(name, sockSuffix) {
			n++
		}
		b = b[reclen:]
	}
	return n
}

// sockSuffix ends a board's socket file name.
var sockSuffix = []byte(".sock")

// dirList is the endpoint directory held open for boardsListed, opened at
// its first call: fd is -1 when it could not be opened (boardsListed then
// counts none) and after Close.
type dirList struct {
	mu     sync.Mutex
	opened bool
	fd     int
	buf    []byte
}

// closeDirList closes it (Close): a later boardsListed counts none.
func (t *Transport) closeDirList() {
	d := &t.dirList
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opened && d.fd >= 0 {
		unix.Close(d.fd)
	}
	d.opened, d.fd = true, -1
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
	// RingBytes is the rings both ways, the doorbells and SpareBytes.
	RingBytes int64
	// SpareBytes is the spare lanes: segments made for lanes before a
	// pair asks for one (spare.go), owned, not yet counted as rings.
	SpareBytes int64
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
	// CounterLanesRetired counts the lanes a transport retired as their
	// producer (RetireIdle, and at their consumer's ask).
	CounterLanesRetired = "shm lanes retired"
	// CounterLanesAskedBack counts the lanes a transport, as their
	// consumer at its bound, asked their producers to retire for a
	// busier pair.
	CounterLanesAskedBack = "shm lanes asked back for busier pairs"
)

// Footprint reports the shared memory t maps now (see [Footprint]). It
// takes the transport's table locks, briefly: it is for counters and
// reports, not for a fast path.
func (t *Transport) Footprint() Footprint {
	var f Footprint
	peers := make(map[uint64]struct{})
	t.outMu.Lock()
	if !t.closed.Load() {
		n := int64(len(t.bell.mem)) // the doorbell and receive queue
		f.RingBytes += n
		f.OwnedBytes += n
	}
	// A ring in the table is unmapped only under outMu (outFor, Close):
	// its segment can be read here without the ring's own lock, which a
	// sender waiting for room holds.
	for p, o := range t.out {
		if o.bell.mem == nil {
			continue // closed
		}
		f.RingBytes += int64(len(o.bell.mem)) // the peer's doorbell and queue
		peers[uint64(p)] = struct{}{}
		if n := o.laneBytes.Load(); n != 0 {
			f.RingBytes += n
			f.OwnedBytes += n
			f.RingsOut++
		}
	}
	if n := t.spareBytes(); n != 0 { // spare.go: lanes made ahead
		f.SpareBytes = n
		f.RingBytes += n
		f.OwnedBytes += n
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
		peers[uint64(r.peer)] = struct{}{}
		if r.data != nil {
			f.RingBytes += int64(len(r.seg.mem))
			f.RingsIn++
		}
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
