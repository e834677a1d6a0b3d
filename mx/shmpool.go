package mx

import (
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Library-allocated shared memory (seed 003 §3: the single copy from
// memory the library allocated).
//
// Endpoint.AllocShared gives the application message buffers from the
// board's shared pool (shm.Pool: memfd segments, on hugepages when there
// are free ones). A large send whose buffer lies wholly in one such
// segment is described, besides the CMA table of cma.go, in the pool's
// table (segment 0, shared memory): per sender endpoint and region, four
// words — the region's sequence number with a valid bit, the segment, the
// offset in it and the length. Before the RNDV goes, the transport passes
// the peer every pool segment it has not seen (shm.Transport.ShareSegments:
// SCM_RIGHTS on the ring's connection, acknowledged once mapped), so the
// receiver, when it matches the RNDV, finds the entry in its mapping of the
// table, checks it against the RNDV's region and sequence number, and
// copies the message straight out of its mapping of the sender's segment:
// one copy, no system call, no ptrace permission, no PULL frames. The CPU
// copies it, or the copy engine above LocalOptions.EngineMin (offload.go).
// The NOTIFY then completes the send as on every path. An entry that does
// not check out (a segment the receiver has not mapped, a stale sequence
// number) sends the receiver to CMA or the rings: a shared buffer never
// makes a message fail.
//
// The pool belongs to the board and is made on first use; buffers stay
// valid until FreeShared or until the board closes. A segment the pool
// releases is unmapped by every peer that had it, and a peer that goes
// away takes its segments with it; a receiver's engine drops its cached DMA
// mappings of a segment before unmapping it.

// sharedPool is the board's pool and the transport it shares through.
type sharedPool struct {
	tr   *shm.Transport
	pool *shm.Pool
}

// Table geometry: a fixed stride of maxRegions regions per endpoint, so a
// receiver finds an entry without knowing the sender's Regions option.
const (
	sharedEntryWords = 4 // seq<<1|valid, segment, offset, length
	maxRegions       = 256
	sharedTableWords = MaxEndpoints * maxRegions * sharedEntryWords
)

func sharedIndex(ep, region uint8) int {
	return (int(ep)*maxRegions + int(region)) * sharedEntryWords
}

// ErrNoSharedMemory: the board has no shared-memory transport to share a
// pool through (neither a shm board nor a host path).
var ErrNoSharedMemory = errors.New("mx: no shared-memory transport on this board")

// sharedTransport returns the board's shared-memory transport, or nil
// (b.mu held).
func (b *Board) sharedTransport() *shm.Transport {
	if tr, ok := b.tr.(*shm.Transport); ok {
		return tr
	}
	if h := b.host; h != nil {
		return h.tr
	}
	return nil
}

// AllocShared returns n bytes of shared memory from the board's pool, for
// message buffers: a large message sent from such a buffer to a process of
// this host is copied once by the receiver straight out of it (see
// LargeStrategy). The buffer stays valid until FreeShared or until the
// board closes; it must not be freed while a send from it is pending. It
// fails with ErrNoSharedMemory on a board without shared memory (turn the
// host path on: LocalOptions.Shm, GOMX_SHM=on).
func (e *Endpoint) AllocShared(n int) ([]byte, error) {
	sp, err := e.b.sharedPool()
	if err != nil {
		return nil, e.opErr("alloc shared", err)
	}
	buf, err := sp.pool.Alloc(n)
	if err != nil {
		return nil, e.opErr("alloc shared", fmt.Errorf("%w: %v", ErrBadOptions, err))
	}
	return buf, nil
}

// FreeShared gives back a buffer AllocShared returned; the pool keeps it
// for reuse (LocalOptions.PoolKeep per size) or releases it, and then every
// peer unmaps it. It must not be used after.
func (e *Endpoint) FreeShared(buf []byte) error {
	b := e.b
	b.mu.Lock()
	sp := b.shared
	b.unlockKick()
	if sp == nil {
		return e.opErr("free shared", fmt.Errorf("%w: the board has no shared pool: free only what AllocShared returned", ErrBadRequest))
	}
	if err := sp.pool.Free(buf); err != nil {
		return e.opErr("free shared", fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	return nil
}

// SharedSegments reports how many segments the board's pool holds (its
// table included) and how many segments peers passed to it are mapped here.
func (b *Board) SharedSegments() (own, peers int) {
	b.mu.Lock()
	sp, tr := b.shared, b.sharedTransport()
	b.unlockKick()
	if sp != nil {
		own = sp.pool.Segments()
	}
	if tr != nil {
		peers = tr.PeerSegments()
	}
	return own, peers
}

// sharedPoolHook, when set by a test, runs as the board's pool is made.
var sharedPoolHook func()

// sharedPool returns the board's pool, making it on first use (no lock
// held). The pool's first segment is made without b.mu, under b.poolMu,
// which one maker at a time holds: the board's other work goes on
// meanwhile, and a second caller finds the first one's pool.
func (b *Board) sharedPool() (*sharedPool, error) {
	b.mu.Lock()
	sp, tr, closed := b.shared, b.sharedTransport(), b.closed
	b.unlockKick()
	switch {
	case sp != nil:
		return sp, nil
	case closed:
		return nil, ErrBoardClosed
	case tr == nil:
		return nil, ErrNoSharedMemory
	}
	b.poolMu.Lock()
	defer b.poolMu.Unlock()
	b.mu.Lock()
	sp = b.shared
	b.unlockKick()
	if sp != nil {
		return sp, nil // made while this caller waited for poolMu
	}
	if sharedPoolHook != nil {
		sharedPoolHook()
	}
	p, err := tr.NewPool(shm.PoolOptions{TableWords: sharedTableWords, Keep: b.opts.Local.PoolKeep})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.unlockKick()
	if b.closed {
		// Closed meanwhile: the pool goes (the transport's Close may
		// have closed it already).
		_ = p.Close()
		return nil, ErrBoardClosed
	}
	b.shared = &sharedPool{tr: tr, pool: p}
	return b.shared, nil
}

// sharedUsable reports whether large messages to or from nic may be copied
// out of a shared segment (b.mu held).
func (b *Board) sharedUsable(nic transport.NICID) bool {
	switch b.opts.Local.Large {
	case LargeRings, LargeCMA:
		return false
	}
	return b.shmTo(nic) != nil
}

// publishShared writes region i's entry in the pool's table when r's
// buffer lies in the pool, after passing the pool's segments to r's peer,
// and reports whether it did (b.mu held; r.segs and r.p set). Otherwise
// the entry is cleared.
func (e *Endpoint) publishShared(i int, r *Request) bool {
	b := e.b
	sp := b.shared
	if sp == nil {
		return false
	}
	idx := sharedIndex(e.id, uint8(i))
	sp.pool.StoreWord(idx, 0)
	if r.p == nil || !b.sharedUsable(r.p.nic) || b.shmTo(r.p.nic) != sp.tr {
		return false
	}
	var buf []byte
	for _, s := range r.segs {
		if len(s) == 0 {
			continue
		}
		if buf != nil {
			return false // several segments: CMA or the rings
		}
		buf = s
	}
	seg, off, ok := sp.pool.Locate(buf)
	if !ok {
		return false
	}
	if err := sp.tr.ShareSegments(r.p.nic); err != nil {
		e.cnt[SharedNotPassed]++
		return false
	}
	sp.pool.StoreWord(idx+1, uint64(seg))
	sp.pool.StoreWord(idx+2, uint64(off))
	sp.pool.StoreWord(idx+3, uint64(len(buf)))
	// Last: the entry is valid once every word is in (the RNDV that
	// follows through the ring orders it for the receiver).
	sp.pool.StoreWord(idx, uint64(e.regions[i].seq)<<1|1)
	return true
}

// pullShared completes a matched large receive by copying the message out
// of the sender's shared segment, if the sender published it in its pool's
// table and passed the segment; it reports whether it did. b.mu held.
func (e *Endpoint) pullShared(r *Request, p *partner, match uint64, msgLen, total uint32, ref rndvRef) bool {
	b := e.b
	if !b.sharedUsable(p.nic) {
		return false
	}
	tr := b.shmTo(p.nic)
	var ent [sharedEntryWords]uint64
	var again [1]uint64
	idx := sharedIndex(p.epID, ref.id)
	valid := uint64(ref.seq)<<1 | 1
	// The entry, then its first word again: a region reused meanwhile
	// (only by a stale duplicate RNDV) shows a different first word.
	if !tr.PeerWords(p.nic, idx, ent[:]) || ent[0] != valid || !tr.PeerWords(p.nic, idx, again[:]) || again[0] != valid {
		return false
	}
	if ent[1]&stageFlag != 0 && ent[1]&^stageFlag <= 1<<32-1 {
		return e.pullStaged(r, p, match, msgLen, total, ref, tr, &ent) // stage.go
	}
	seg, off, n := ent[1], ent[2], ent[3]
	if seg > 1<<32-1 {
		return false
	}
	var dst [MaxSegments][]byte
	d := cutSegs(dst[:0], r.segs, int(total))
	copied, engine := false, false
	tr.PeerSegment(p.nic, uint32(seg), func(mem []byte) {
		start, end, ok := sharedSource(off, n, ref.off, total, len(mem))
		if !ok {
			return // the entry does not fit the segment: let another path judge
		}
		copied = true
		if eng := b.opts.Local.Engine; eng != nil && (b.opts.Local.Large == LargeEngine ||
			(b.opts.Local.Large == LargeAuto && int(total) >= b.opts.Local.EngineMin)) {
			engine = true // it copies outside the board lock (offload.go)
			return
		}
		cpuCopy(d, mem[start:end])
	})
	if !copied {
		return false
	}
	if engine {
		e.startEngineCopy(&engineCopy{r: r, p: p, match: match, msgLen: msgLen, total: total, ref: ref,
			tr: tr, seg: uint32(seg), off: off, n: n, dst: append([][]byte(nil), d...)})
		return true
	}
	e.cnt[RecvShared]++
	p.sendNotify(total, ref.id, ref.seq)
	e.finishRecv(r, p, match, msgLen, total)
	return true
}

// sharedSource checks a sender's entry — its buffer at offset off and of
// n bytes in a segment of segLen bytes, as the peer wrote it — against a
// message of total bytes at offset refOff of that buffer (from the RNDV),
// and returns where the message lies in the segment.
func sharedSource(off, n uint64, refOff uint16, total uint32, segLen int) (start, end uint64, ok bool) {
	l := uint64(segLen)
	if off > l || n > l-off || uint64(refOff)+uint64(total) > n {
		return 0, 0, false
	}
	start = off + uint64(refOff)
	return start, start + uint64(total), true
}

// cpuCopy copies src into the concatenation of dst (as long as src).
func cpuCopy(dst [][]byte, src []byte) {
	for _, d := range dst {
		src = src[copy(d, src):]
	}
}
