package emulated

import "sync"

// queueLock is a reader-writer lock whose read side is split by queue,
// for state that a NIC's queues all read on their data path and only the
// control path writes (an 82599's registers, the IOMMU's mappings). A
// sync.RWMutex's readers all write its one reader count, so two queues
// moving frames at once on two CPUs passed that cache line back and forth
// at every tail write, ring walk and delivery, where the chip's queues
// share nothing. Here a reader takes one shard, a sync.RWMutex on cache
// lines of its own: queue q's readers take shard q mod queueShards (so
// queues q and q+queueShards share one), readers that are no queue's (a
// STATUS read, a mask write that names no vector) the last. A writer takes every shard, in
// ascending order, and so waits out every reader, as the RWMutex's writer
// does; a reader never holds two shards of one lock, so a reader and a
// writer never wait on each other in a cycle. Two queues' readers write
// no cache line in common only while they read shards apart: a caller
// that picks a shard by something other than its queue (an 82599's
// delivery, by its destination port) keeps them apart only where that
// pick equals the queue.
//
// The 82599 model's writers are its control path: a register read other
// than STATUS, and a register write other than a tail (TDT, RDT) or an
// arming's (a write of EICR or an interrupt mask register that names
// vectors alone, which reads the shard of the lowest), take every shard of
// its register lock; a write that reprograms a TX ring or stops transmit
// DMA (TXDCTL, TDBAL/H, TDLEN, TDH, DMATXCTL, CTRL) takes every shard of
// txMu as well.
//
// A lock made with one shard (newQueueLock(1), for a model whose data path
// takes the lock for writing, the 82574L's, an 82599's with AsyncDMA, whose
// transmit engine takes txMu for writing, or a platform without queues) is that
// one RWMutex: its writers pay nothing for the split.
type queueLock struct {
	shards []lockShard
	mask   int // queue q reads shards[q&mask]: queueShards-1, or 0 for one shard
}

// lockShard is one shard, 128 bytes: two cache lines' worth, so no two
// shards' mutexes share a 64-byte line. (The slice is not 128-byte
// aligned, so a shard need not fill the pair of lines an adjacent-line
// prefetch fetches together; such a prefetch may still bring a
// neighbour's line.)
type lockShard struct {
	sync.RWMutex
	_ [128 - 24]byte // 24: a sync.RWMutex
}

// queueShards is how many shards the queues of a queueLock made with
// queue shards spread over.
const queueShards = 8

// newQueueLock makes a lock of n shards: 1, or queueShards+1 (the
// queues' and the others').
func newQueueLock(n int) queueLock {
	mask := 0
	if n > 1 {
		mask = queueShards - 1
	}
	return queueLock{shards: make([]lockShard, n), mask: mask}
}

// Lock takes every shard for writing.
func (l *queueLock) Lock() {
	for i := range l.shards {
		l.shards[i].Lock()
	}
}

// Unlock releases what Lock took.
func (l *queueLock) Unlock() {
	for i := len(l.shards) - 1; i >= 0; i-- {
		l.shards[i].Unlock()
	}
}

// RLock takes the shard of readers that are no queue's.
func (l *queueLock) RLock() { l.others().RLock() }

// RUnlock releases what RLock took.
func (l *queueLock) RUnlock() { l.others().RUnlock() }

// others returns the shard of readers that are no queue's.
func (l *queueLock) others() *sync.RWMutex { return &l.shards[len(l.shards)-1].RWMutex }

// queue returns queue q's shard (q >= 0), which its readers read:
// l.queue(q).RLock() and RUnlock(). (A method that took the shard's read
// lock itself would be a call on every tail write and delivery, where
// RWMutex's RLock is inlined.)
func (l *queueLock) queue(q int) *sync.RWMutex { return &l.shards[q&l.mask].RWMutex }
