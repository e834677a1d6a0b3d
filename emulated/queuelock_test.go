package emulated

import (
	"slices"
	"sync"
	"testing"
)

// A queue's reader holds its queue's shard alone (queues queueShards apart
// share one), a reader that is no queue's holds the last, and a writer
// holds every shard; a lock of one shard is one RWMutex for all.
func TestQueueLockShards(t *testing.T) {
	held := func(l *queueLock) (w []bool) {
		for i := range l.shards {
			ok := l.shards[i].TryLock()
			if ok {
				l.shards[i].Unlock()
			}
			w = append(w, !ok)
		}
		return w
	}
	only := func(n, i int) []bool {
		w := make([]bool, n)
		w[i] = true
		return w
	}
	l := newQueueLock(queueShards + 1)
	for q := range 2*queueShards + 1 {
		l.queue(q).RLock()
		if got, want := held(&l), only(queueShards+1, q%queueShards); !slices.Equal(got, want) {
			t.Errorf("queue %d's reader holds shards %v, want %v", q, got, want)
		}
		l.queue(q).RUnlock()
	}
	l.RLock()
	if got, want := held(&l), only(queueShards+1, queueShards); !slices.Equal(got, want) {
		t.Errorf("a reader of no queue holds shards %v, want %v", got, want)
	}
	l.RUnlock()
	l.Lock()
	for i := range l.shards {
		if l.shards[i].TryRLock() {
			t.Errorf("shard %d readable under the writer", i)
			l.shards[i].RUnlock()
		}
	}
	l.Unlock()
	if got := held(&l); !slices.Equal(got, make([]bool, queueShards+1)) {
		t.Errorf("shards %v held after the writer left", got)
	}

	one := newQueueLock(1)
	one.queue(5).RLock()
	one.RLock()
	if got := held(&one); !slices.Equal(got, []bool{true}) {
		t.Errorf("a one-shard lock's readers hold %v", got)
	}
	one.RUnlock()
	one.queue(5).RUnlock()
}

// A writer excludes the readers of every queue: readers of many queues
// read what a writer writes meanwhile, and the race detector sees no
// access unordered.
func TestQueueLockWriterExcludesEveryQueue(t *testing.T) {
	l := newQueueLock(queueShards + 1)
	var v [4]int // what the writer writes whole under Lock
	var wg sync.WaitGroup
	for q := range 2*queueShards + 1 {
		wg.Go(func() {
			for range 200 {
				if q == 2*queueShards {
					l.RLock()
				} else {
					l.queue(q).RLock()
				}
				if v[0] != v[1] || v[1] != v[2] || v[2] != v[3] {
					t.Errorf("queue %d read a write half done: %v", q, v)
				}
				if q == 2*queueShards {
					l.RUnlock()
				} else {
					l.queue(q).RUnlock()
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			l.Lock()
			for k := range v {
				v[k] = i
			}
			l.Unlock()
		}
	})
	wg.Wait()
}
