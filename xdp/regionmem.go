package xdp

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Region memory: the first socket's region frames (Options.RegionFrames)
// are handed out by Transport.RegionMemory as runs of whole UMEM frames and
// taken back by Transport.ReleaseRegionMemory, so a program that registers
// a buffer per message can run for ever on a fixed reservation.
//
// A run released while the kernel still reads some of its frames (an
// in-place send not yet on the completion ring) must not be handed out
// again before it is done: the next owner would write into a frame on its
// way out. So the transport counts, per region frame, the descriptors it
// queued there that have not completed (inPlace adds, regionDone takes
// away, whichever path completes them: the completion ring, a Transmit
// that did not take them, Close). Release frees at once the frames with
// none and marks the others draining; the completion that brings a
// draining frame's count to zero frees it. Both transitions happen under
// the allocator's lock, so a frame is freed exactly once.
//
// Free frames are kept as runs sorted by their first frame, adjacent runs
// merged; RegionMemory takes the first run long enough.

// regionFrames hands out runs of region frames and takes them back.
type regionFrames struct {
	fs   uint64 // UMEM frame size
	base uint64 // UMEM address of region frame 0

	inflight []atomic.Int32 // per frame: in-place descriptors not completed

	mu       sync.Mutex
	free     []frameRun        // runs nobody holds, by first frame
	held     map[uint32]uint32 // runs handed out: first frame -> frames
	draining []bool            // per frame: released while in flight
	waiting  int               // frames draining
}

// frameRun is n region frames from frame at.
type frameRun struct{ at, n uint32 }

func newRegionFrames(frames int, fs int, base uint64) *regionFrames {
	a := &regionFrames{fs: uint64(fs), base: base, inflight: make([]atomic.Int32, frames),
		held: make(map[uint32]uint32), draining: make([]bool, frames)}
	if frames > 0 {
		a.free = []frameRun{{0, uint32(frames)}}
	}
	return a
}

// alloc takes the first free run of n frames and returns its first frame.
func (a *regionFrames) alloc(n uint32) (uint32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, r := range a.free {
		if r.n < n {
			continue
		}
		if r.n == n {
			a.free = slices.Delete(a.free, i, i+1)
		} else {
			a.free[i] = frameRun{r.at + n, r.n - n}
		}
		a.held[r.at] = n
		return r.at, true
	}
	return 0, false
}

// release takes back the run that starts at frame at: its frames without
// in-place sends in flight are free at once, the others once their sends
// complete. It fails for a frame that starts no run handed out.
func (a *regionFrames) release(at uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.held[at]
	if !ok {
		return false
	}
	delete(a.held, at)
	for f := at; f < at+n; f++ {
		if a.inflight[f].Load() > 0 {
			a.draining[f] = true
			a.waiting++
			continue
		}
		a.freeLocked(f, 1)
	}
	return true
}

// begin counts an in-place descriptor queued at UMEM address addr.
func (a *regionFrames) begin(addr uint64) {
	a.inflight[(addr-a.base)/a.fs].Add(1)
}

// done counts the completion of an in-place descriptor at UMEM address
// addr, freeing its frame when it was the last of a released frame.
func (a *regionFrames) done(addr uint64) {
	f := (addr - a.base) / a.fs
	if f >= uint64(len(a.inflight)) || a.inflight[f].Add(-1) != 0 {
		return
	}
	a.mu.Lock()
	if a.draining[f] && a.inflight[f].Load() == 0 {
		a.draining[f] = false
		a.waiting--
		a.freeLocked(uint32(f), 1)
	}
	a.mu.Unlock()
}

// freeLocked adds n frames from frame at to the free runs, merging them
// with their neighbours (a.mu held).
func (a *regionFrames) freeLocked(at, n uint32) {
	i, _ := slices.BinarySearchFunc(a.free, at, func(r frameRun, at uint32) int { return int(int64(r.at) - int64(at)) })
	if i > 0 && a.free[i-1].at+a.free[i-1].n == at {
		i--
		a.free[i].n += n
	} else {
		a.free = slices.Insert(a.free, i, frameRun{at, n})
	}
	if i+1 < len(a.free) && a.free[i].at+a.free[i].n == a.free[i+1].at {
		a.free[i].n += a.free[i+1].n
		a.free = slices.Delete(a.free, i+1, i+2)
	}
}

// state describes the frames for an error message: free, in the longest
// free run, and draining.
func (a *regionFrames) state() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var free, longest uint32
	for _, r := range a.free {
		free += r.n
		longest = max(longest, r.n)
	}
	return fmt.Sprintf("%d of %d region frames free, the longest run %d, %d waiting for in-place sends to complete",
		free, len(a.inflight), longest, a.waiting)
}
