package xdp

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/transport"
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
//
// Beside the allocator are the Transport methods that use it: Register,
// RegionMemory and ReleaseRegionMemory, and regionDone, which the completion
// paths call.

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

// inUse reports whether any run is handed out or draining.
func (a *regionFrames) inUse() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held) > 0 || a.waiting > 0
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

// Register implements [transport.Transport.Register]. Memory that lies in
// the first socket's region frames (from RegionMemory) is sent in place
// (Region.InPlace is true; see the package documentation); any other is
// copied into UMEM frames to be sent, like frames without a region. Every
// region takes a Frame.Head (Region.TakesHead), which Send copies behind
// the link headers in the frame's first UMEM frame: a message layer's
// header goes in front of Data sent in place, and in front of Data copied
// with it, one copy for both.
func (t *Transport) Register(mem []byte) (*transport.Region, error) {
	if t.closed.Load() {
		return nil, errClosed
	}
	s := t.socks[0]
	all := s.RegionMemory()
	if len(mem) == 0 || len(all) == 0 || addrOf(mem) < addrOf(all) || addrOf(mem)+uint64(len(mem)) > addrOf(all)+uint64(len(all)) {
		r := transport.NewRegion(t, mem, false, nil)
		r.SetTakesHead()
		return r, nil
	}
	lo := s.u.regionBase + addrOf(mem) - addrOf(all)
	x := &region{lo: lo, hi: lo + uint64(len(mem))}
	x.r = transport.NewRegion(t, mem, true, func() error {
		t.regMu.Lock()
		defer t.regMu.Unlock()
		t.regions = slices.DeleteFunc(t.regions, func(y *region) bool { return y == x })
		return nil
	})
	x.r.SetPoll(t.reap)
	x.r.SetTakesHead()
	t.regMu.Lock()
	t.regions = append(t.regions, x)
	t.regMu.Unlock()
	return x.r, nil
}

// RegionMemory hands out n bytes, rounded up to whole UMEM frames, of the
// region frames TransportOptions.Socket.RegionFrames reserved in the first
// socket's UMEM: memory that Register sends from in place. It is the
// caller's until ReleaseRegionMemory gives it back; a queue transport
// (OpenQueue) hands out its own socket's. It fails with ErrConfig,
// naming the fix, when no run of free region frames is long enough, or
// none were reserved.
func (t *Transport) RegionMemory(n int) ([]byte, error) {
	if t.closed.Load() {
		return nil, errClosed
	}
	if err := t.queuesOpen(); err != nil {
		return nil, err
	}
	all := t.socks[0].RegionMemory()
	fs := t.socks[0].FrameSize()
	frames := (n + fs - 1) / fs
	if len(all) == 0 {
		return nil, configErr("region memory", "no region frames reserved: set TransportOptions.Socket.RegionFrames")
	}
	if n <= 0 || frames > len(all)/fs {
		return nil, configErr("region memory", fmt.Sprintf("%d bytes asked, %d frames of %d bytes reserved: ask for 1 byte or more, at most TransportOptions.Socket.RegionFrames frames", n, len(all)/fs, fs))
	}
	at, ok := t.frames.alloc(uint32(frames))
	if !ok {
		return nil, configErr("region memory", fmt.Sprintf("%d bytes (%d frames) asked, %s: release region memory no longer sent from (ReleaseRegionMemory), or raise TransportOptions.Socket.RegionFrames", n, frames, t.frames.state()))
	}
	off := int(at) * fs
	return all[off : off+n : off+frames*fs], nil
}

// ReleaseRegionMemory gives back memory RegionMemory handed out: b must be
// the slice it returned. The caller must not use b afterwards. Its frames
// are handed out again once the kernel completed every in-place send from
// them (a send from b may still be in flight: Region.Pending need not be
// zero). Memory that is not a run RegionMemory handed out, or that was
// released already, is an ErrConfig. After Close it does nothing.
func (t *Transport) ReleaseRegionMemory(b []byte) error {
	if t.closed.Load() {
		return nil
	}
	all := t.socks[0].RegionMemory()
	fs := uint64(t.socks[0].FrameSize())
	off := addrOf(b) - addrOf(all)
	if len(b) == 0 || addrOf(b) < addrOf(all) || off >= uint64(len(all)) || off%fs != 0 || !t.frames.release(uint32(off/fs)) {
		return configErr("release region memory", fmt.Sprintf("%d bytes that are no run of region frames RegionMemory handed out, or one released already: give back the slice RegionMemory returned, once", len(b)))
	}
	return nil
}

// regionOf returns the registered region r, or nil when r copies.
func (t *Transport) regionOf(r *transport.Region) *region {
	if !r.InPlace() {
		return nil
	}
	t.regMu.RLock()
	defer t.regMu.RUnlock()
	for _, x := range t.regions {
		if x.r == r {
			return x
		}
	}
	return nil
}

// regionDone completes the in-place send of the region descriptor at UMEM
// address addr: the kernel is done with it (the UMEM's reap, under its
// lock), or it was never queued.
func (t *Transport) regionDone(addr uint64) {
	t.frames.done(addr)
	t.regMu.RLock()
	defer t.regMu.RUnlock()
	for _, x := range t.regions {
		if addr >= x.lo && addr < x.hi {
			x.inflight.Add(-1)
			x.r.Done()
			return
		}
	}
}
