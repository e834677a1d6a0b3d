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
// STATUS read, an arming) the last. A writer takes every shard, in order,
// and so waits out every reader, as the RWMutex's writer does.
//
// A lock made with one shard (newQueueLock(1), for a model whose data path
// takes the lock for writing, the 82574L's or an 82599's with AsyncDMA, or
// a platform without queues) is that one RWMutex: its writers pay nothing
// for the split.
type queueLock struct {
	shards []lockShard
	mask   int // queue q reads shards[q&mask]: queueShards-1, or 0 for one shard
}

// lockShard is one shard, alone on its cache lines (a line, and the one
// an adjacent-line prefetch pairs it with).
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
func (l *queueLock) RLock() { l.shards[len(l.shards)-1].RLock() }

// RUnlock releases what RLock took.
func (l *queueLock) RUnlock() { l.shards[len(l.shards)-1].RUnlock() }

// queue returns queue q's shard (q >= 0), which its readers read:
// l.queue(q).RLock() and RUnlock(). (A method that took the shard's read
// lock itself would be a call on every tail write and delivery, where
// RWMutex's RLock is inlined.)
func (l *queueLock) queue(q int) *sync.RWMutex { return &l.shards[q&l.mask].RWMutex }
