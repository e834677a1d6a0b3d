package loopback

import (
	"container/heap"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// pending is a frame the fault injector holds for later delivery: delayed,
// or held back to be reordered.
type pending struct {
	due      time.Time
	seq      uint64 // tie-break: equal due times leave in send order
	src, dst transport.NICID
	from     *Port // sender, for its unknown-peer counter
	data     []byte
	copies   int  // 2 if duplicated
	held     bool // held back by Reorder (see faultEngine.held)
	done     bool // already delivered (a held frame released early)
}

// pendingHeap orders pending frames by due time.
type pendingHeap []*pending

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(*pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// faultEngine applies Faults to frames. Every decision is drawn under mu in
// send order, which is what makes a seed reproducible.
type faultEngine struct {
	n *Network

	mu      sync.Mutex
	f       Faults
	rng     *rand.Rand
	held    map[transport.NICID]*pending // frame held back per destination
	q       pendingHeap
	seq     uint64
	scratch []byte
	running bool // the timer goroutine is started
	stopped bool

	kick     chan struct{} // the earliest due time changed
	quit     chan struct{}
	finished chan struct{}

	dropped, duplicated, reordered, corrupted, delayed, unknownPeer atomic.Uint64
}

func (fe *faultEngine) init(n *Network) {
	fe.n = n
	fe.held = make(map[transport.NICID]*pending)
	fe.kick = make(chan struct{}, 1)
	fe.quit = make(chan struct{})
	fe.finished = make(chan struct{})
}

func (fe *faultEngine) set(f Faults) {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.f = f
	fe.rng = rand.New(rand.NewPCG(uint64(f.Seed), 0x6d78_6c6f_6f70)) // "mxloop"
	if f.needsTimer() && !fe.running && !fe.stopped {
		fe.running = true
		go fe.run()
	}
	fe.n.faulty.Store(f.active())
}

// chance draws one decision with probability p. It always draws when p > 0,
// so the sequence of draws depends only on the faults and the send order.
func (fe *faultEngine) chance(p float64) bool {
	return p > 0 && fe.rng.Float64() < p
}

// send is Port.Send with faults on.
func (fe *faultEngine) send(p *Port, frames []transport.Frame) (int, error) {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	now := time.Now()
	for i := range frames {
		if len(frames[i].Data) > p.mtu {
			return i, p.tooBig(i, len(frames[i].Data))
		}
		p.tx.sent.Add(1)
		fe.frame(p, frames[i], now)
	}
	return len(frames), nil
}

// frame applies the faults to one frame (under mu).
func (fe *faultEngine) frame(from *Port, fr transport.Frame, now time.Time) {
	f := &fe.f
	if fe.chance(f.Loss) {
		fe.dropped.Add(1)
		return
	}
	data := fr.Data
	if fe.chance(f.Corrupt) && len(data) > 0 {
		fe.scratch = append(fe.scratch[:0], data...)
		fe.scratch[fe.rng.IntN(len(data))] ^= 1 << fe.rng.IntN(8)
		data = fe.scratch
		fe.corrupted.Add(1)
	}
	copies := 1
	if fe.chance(f.Duplicate) {
		copies = 2
		fe.duplicated.Add(1)
	}
	if fe.chance(f.Reorder) && fe.held[fr.Peer] == nil && !fe.stopped {
		h := &pending{
			due: now.Add(f.Delay + holdMax), src: from.id, dst: fr.Peer, from: from,
			data: clone(data), copies: copies, held: true,
		}
		fe.held[fr.Peer] = h
		fe.push(h)
		fe.reordered.Add(1)
		return
	}
	fe.emit(from, from.id, fr.Peer, data, copies, now)
	if h := fe.held[fr.Peer]; h != nil {
		// The held frame goes out right after the one that overtook it.
		delete(fe.held, fr.Peer)
		h.done = true
		fe.emit(h.from, h.src, h.dst, h.data, h.copies, now)
	}
}

// emit delivers a frame now, or after the delay.
func (fe *faultEngine) emit(from *Port, src, dst transport.NICID, data []byte, copies int, now time.Time) {
	if fe.f.Delay > 0 && !fe.stopped {
		fe.push(&pending{due: now.Add(fe.f.Delay), src: src, dst: dst, from: from, data: clone(data), copies: copies})
		fe.delayed.Add(1)
		return
	}
	fe.deliver(from, src, dst, data, copies)
}

func (fe *faultEngine) deliver(from *Port, src, dst transport.NICID, data []byte, copies int) {
	for range copies {
		if !fe.n.deliver(src, dst, data) {
			if from != nil && !from.closed.Load() {
				from.tx.unknownPeer.Add(1)
			} else {
				fe.unknownPeer.Add(1)
			}
		}
	}
}

func (fe *faultEngine) push(x *pending) {
	fe.seq++
	x.seq = fe.seq
	heap.Push(&fe.q, x)
	if fe.q[0] == x {
		select {
		case fe.kick <- struct{}{}:
		default:
		}
	}
}

// run is the timer goroutine: it delivers pending frames when they are due.
func (fe *faultEngine) run() {
	defer close(fe.finished)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		fe.mu.Lock()
		now := time.Now()
		for len(fe.q) > 0 && !fe.q[0].due.After(now) {
			x := heap.Pop(&fe.q).(*pending)
			if x.done {
				continue
			}
			if x.held {
				delete(fe.held, x.dst)
			}
			fe.deliver(x.from, x.src, x.dst, x.data, x.copies)
		}
		wait := time.Duration(-1)
		if len(fe.q) > 0 {
			wait = fe.q[0].due.Sub(now)
		}
		fe.mu.Unlock()
		if wait >= 0 {
			t.Reset(wait)
		} else {
			t.Stop()
		}
		select {
		case <-t.C:
		case <-fe.kick:
		case <-fe.quit:
			return
		}
	}
}

// stop ends the timer goroutine and drops what it holds.
func (fe *faultEngine) stop() {
	fe.mu.Lock()
	running := fe.running && !fe.stopped
	fe.stopped = true
	fe.q = nil
	clear(fe.held)
	fe.mu.Unlock()
	if running {
		close(fe.quit)
		<-fe.finished
	}
}

func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}
