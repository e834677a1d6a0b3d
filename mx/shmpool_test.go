package mx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
)

// sharedChildEnv makes the test binary an echo server that receives into
// and sends from its shared pool: "DIR BOARD".
const sharedChildEnv = "GOMX_MX_SHARED_CHILD"

// waitCond polls cond until it holds, at most 10s.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// sharedEchoChild echoes messages from a buffer of its shared pool until
// echoStop, then prints how many it received out of a shared segment.
func sharedEchoChild(arg string) error {
	f := strings.Fields(arg)
	board, _ := strconv.Atoi(f[1])
	b, e, err := openShmChild(f[0], board, shmTestOptions())
	if err != nil {
		return err
	}
	defer b.Close()
	buf, err := e.AllocShared(4<<20 + 1)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := echoLoop(ctx, e, buf); err != nil {
		return err
	}
	fmt.Println("shared", e.Counters().Get(RecvShared))
	return e.FreeShared(buf)
}

// TestSharedProcesses echoes every size class with a process whose send
// and receive buffers are in its shared pool, from buffers of ours, with
// the shared strategy forced on both sides: every message comes back
// byte-exact, each large one was copied once out of the sender's segment
// on both sides (no CMA, no pull), and when the child exits, every segment
// it passed us is unmapped and no descriptor or mapping is left.
func TestSharedProcesses(t *testing.T) {
	runChild(sharedChildEnv, sharedEchoChild)
	checkLeaks(t)
	dir := shmDir(t)
	before := leaktest.Now(t)
	ctx := testCtx(t, 60*time.Second)
	cmd, sc := startTestChild(t, ctx, "TestSharedProcesses", sharedChildEnv+"="+dir+" 41", "GOMX_SHM_LARGE=shared")
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child did not start: %q", sc.Text())
	}
	o := shmTestOptions()
	o.Local.Large = LargeShared
	b, e, addr := shmBoardTo(t, ctx, dir, o, 41)
	sizes := []int{1, 32, 4096, 4097, 32768, 32769, 1 << 20, 4<<20 + 1}
	large := 0
	for i, size := range sizes {
		msg, err := e.AllocShared(size)
		if err != nil {
			t.Fatal(err)
		}
		copy(msg, pattern(size, uint64(i)))
		for _, nseg := range []int{1, 3} {
			buf := make([]byte, size)
			r, _ := e.IRecv(split(buf, nseg), uint64(i), ^uint64(0), nil)
			s, err := e.ISend([][]byte{msg}, addr, uint64(i), nil)
			if err != nil {
				t.Fatal(err)
			}
			mustWait(t, s, 30*time.Second)
			if st := mustWait(t, r, 30*time.Second); int(st.XferLength) != size || !bytes.Equal(buf, msg) {
				t.Fatalf("echo of %d bytes into %d segments differs (%d received)", size, nseg, st.XferLength)
			}
			if size > DefaultShmEager {
				large++
			}
		}
		if err := e.FreeShared(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.FreeShared(make([]byte, 10)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("FreeShared of a heap buffer: %v, want ErrBadRequest", err)
	}
	c := e.Counters()
	if c.Get(RecvShared) != uint64(large) || c.Get(RecvCMA) != 0 || c.Get(SendPull) != 0 {
		t.Errorf("%d copies out of shared segments, %d by CMA, %d pulls; want %d, none, none",
			c.Get(RecvShared), c.Get(RecvCMA), c.Get(SendPull), large)
	}
	if _, peers := b.SharedSegments(); peers == 0 {
		t.Error("the child's segments are not mapped here")
	}
	// The child may exit before it acknowledges the stop: the send can
	// end either way.
	if _, err := e.ISend(nil, addr, echoStop, nil); err != nil {
		t.Fatal(err)
	}
	if !sc.Scan() || sc.Text() != "shared "+strconv.Itoa(large) {
		t.Errorf("child: %q, want %d copies out of our segments", sc.Text(), large)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	waitCond(t, "the child's segments are unmapped", func() bool { _, p := b.SharedSegments(); return p == 0 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	leaktest.WaitClean(t, before, "", 10*time.Second)
}

// engineRig is two shm boards of this process (the in-process shortcut
// off, so every message crosses the rings), the receiver with a copy engine
// on an emulated CBDMA platform.
type engineRig struct {
	plat       *emulated.CBDMA
	eng        *ioat.Engine
	ba, bb     *Board
	a, b       *Endpoint
	atob, btoa Addr
}

func newEngineRig(t testing.TB, large LargeStrategy, sender, receiver func(*BoardOptions)) *engineRig {
	t.Helper()
	return newEngineRigOn(t, emulated.CBDMAOptions{Channels: 2}, large, sender, receiver)
}

// newEngineRigOn is newEngineRig on an emulated platform of options po.
func newEngineRigOn(t testing.TB, po emulated.CBDMAOptions, large LargeStrategy, sender, receiver func(*BoardOptions)) *engineRig {
	t.Helper()
	checkLeaks(t)
	dir := shmDir(t)
	before := leaktest.Now(t)
	plat, err := emulated.NewCBDMA(po)
	if err != nil {
		t.Fatal(err)
	}
	eo := ioat.DefaultEngineOptions()
	eo.CPUThreshold = -1 // every chunk to the engine
	eng, err := ioat.NewEngine(plat.Devices(), eo)
	if err != nil {
		plat.Close()
		t.Fatal(err)
	}
	g := &engineRig{plat: plat, eng: eng}
	t.Cleanup(func() {
		g.ba.Close()
		g.bb.Close()
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		if n := plat.IOMMU().Live(); n != 0 {
			t.Errorf("%d DMA mappings left behind", n)
		}
		plat.Close()
		leaktest.WaitClean(t, before, "", 10*time.Second)
	})
	open := func(o BoardOptions) (*Board, *Endpoint) {
		tr, err := shm.Open(shm.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBoard(tr, o)
		if err != nil {
			tr.Close()
			t.Fatal(err)
		}
		e, err := b.OpenEndpoint(0, testKey)
		if err != nil {
			t.Fatal(err)
		}
		return b, e
	}
	oa := shmTestOptions()
	if sender != nil {
		sender(&oa)
	}
	g.ba, g.a = open(oa)
	ob := shmTestOptions()
	ob.Local.Engine = eng
	ob.Local.Large = large
	if receiver != nil {
		receiver(&ob)
	}
	g.bb, g.b = open(ob)
	ctx := testCtx(t, 30*time.Second)
	if g.atob, err = g.a.Connect(ctx, g.bb.NICID(), 0, testKey); err != nil {
		t.Fatal(err)
	}
	if g.btoa, err = g.b.Connect(ctx, g.ba.NICID(), 0, testKey); err != nil {
		t.Fatal(err)
	}
	return g
}

// send sends msg (a buffer of a's pool) from a to b, received into nseg
// heap segments, and checks the bytes.
func (g *engineRig) send(t testing.TB, msg []byte, nseg int, match uint64) {
	t.Helper()
	buf := make([]byte, len(msg))
	r, err := g.b.IRecv(split(buf, nseg), match, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.a.ISend([][]byte{msg}, g.atob, match, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, 30*time.Second)
	if st := mustWait(t, r, 30*time.Second); int(st.XferLength) != len(msg) || !bytes.Equal(buf, msg) {
		t.Fatalf("%d bytes into %d segments arrived wrong (%d received)", len(msg), nseg, st.XferLength)
	}
}

// TestEngineSizes: with the engine strategy forced, every size class sent
// from a shared buffer arrives byte-exact, into one or several segments,
// each large one copied by the engine (and none by the CPU or CMA).
func TestEngineSizes(t *testing.T) {
	g := newEngineRig(t, LargeEngine, nil, nil)
	large := 0
	for i, size := range []int{1, 4096, 4097, 8191, 32769, 100000, 1 << 20, 2<<20 + 7, 4<<20 + 1} {
		msg, err := g.a.AllocShared(size)
		if err != nil {
			t.Fatal(err)
		}
		copy(msg, pattern(size, uint64(i)))
		for _, nseg := range []int{1, 3} {
			g.send(t, msg, nseg, uint64(i))
			if size > DefaultShmEager {
				large++
			}
		}
		g.a.FreeShared(msg)
	}
	c := g.b.Counters()
	if c.Get(RecvEngine) != uint64(large) || c.Get(RecvShared) != 0 || c.Get(EngineFallbacks) != 0 || c.Get(RecvCMA) != 0 {
		t.Errorf("engine %d, CPU %d, fallbacks %d, CMA %d; want %d by the engine",
			c.Get(RecvEngine), c.Get(RecvShared), c.Get(EngineFallbacks), c.Get(RecvCMA), large)
	}
	if st := g.eng.CacheStats(); st.Misses == 0 {
		t.Errorf("the engine mapped nothing: %+v", st)
	}
}

// TestEngineThreshold: with LargeAuto, the engine takes messages from
// EngineMin (2 MiB by default) and the CPU the smaller ones.
func TestEngineThreshold(t *testing.T) {
	g := newEngineRig(t, LargeAuto, nil, nil)
	for i, size := range []int{1<<20 + 3, 2 << 20, 3 << 20} {
		msg, _ := g.a.AllocShared(size)
		copy(msg, pattern(size, uint64(i)))
		g.send(t, msg, 1, uint64(i))
	}
	if c := g.b.Counters(); c.Get(RecvShared) != 1 || c.Get(RecvEngine) != 2 {
		t.Errorf("CPU %d, engine %d; want 1 and 2", c.Get(RecvShared), c.Get(RecvEngine))
	}
}

// TestEngineCacheReuse: a shared buffer freed and reused for new bytes is
// copied again through the cached mapping (no new mapping of the source)
// and the new bytes arrive, never the old ones.
func TestEngineCacheReuse(t *testing.T) {
	g := newEngineRig(t, LargeEngine, nil, nil)
	const size = 1 << 20
	msg, _ := g.a.AllocShared(size)
	copy(msg, pattern(size, 1))
	g.send(t, msg, 1, 1)
	before := g.eng.CacheStats()
	g.a.FreeShared(msg)
	msg2, _ := g.a.AllocShared(size)
	if &msg2[0] != &msg[0] {
		t.Fatal("the pool did not reuse the freed buffer")
	}
	copy(msg2, pattern(size, 2))
	g.send(t, msg2, 1, 2) // send checks the bytes: the new ones
	after := g.eng.CacheStats()
	if after.Hits <= before.Hits {
		t.Errorf("the reused buffer was not found in the cache: %+v then %+v", before, after)
	}
}

// TestEngineCacheInvalidatedByFree: a shared buffer the sender frees is
// released (PoolKeep < 0); the receiver drops the engine's mappings of it
// before unmapping it, and a new buffer, perhaps mapped at the same
// address here, delivers its own bytes. No mapping of a released segment
// remains.
func TestEngineCacheInvalidatedByFree(t *testing.T) {
	g := newEngineRig(t, LargeEngine, func(o *BoardOptions) { o.Local.PoolKeep = -1 }, nil)
	const size = 2 << 20
	for i := 0; i < 4; i++ {
		msg, _ := g.a.AllocShared(size)
		copy(msg, pattern(size, uint64(i)))
		g.send(t, msg, 1, uint64(i))
		_, peers := g.bb.SharedSegments()
		g.a.FreeShared(msg)
		waitCond(t, "the receiver unmaps the released segment", func() bool {
			_, p := g.bb.SharedSegments()
			return p == peers-1
		})
	}
	if st := g.eng.CacheStats(); st.Invalidations < 4 {
		t.Errorf("mappings of released segments were not dropped: %+v", st)
	}
}

// TestEngineFault: the engine fails a copy in the middle of a message
// (channel 0's third descriptor from now reports a read error): the
// message still arrives byte-exact, copied again by the CPU, the fallback
// is counted, and the next message goes by the engine again.
func TestEngineFault(t *testing.T) {
	g := newEngineRig(t, LargeEngine, nil, nil)
	const size = 4 << 20
	msg, _ := g.a.AllocShared(size)
	copy(msg, pattern(size, 7))
	g.plat.InjectError(0, 2, hw.ErrReadData)
	g.send(t, msg, 1, 1)
	if c := g.b.Counters(); c.Get(EngineFallbacks) != 1 || c.Get(RecvEngine) != 0 {
		t.Fatalf("fallbacks %d, engine %d; want 1 and 0", c.Get(EngineFallbacks), c.Get(RecvEngine))
	}
	copy(msg, pattern(size, 8))
	g.send(t, msg, 2, 2)
	if c := g.b.Counters(); c.Get(RecvEngine) != 1 {
		t.Fatalf("after the fault, %d copies by the engine, want 1", c.Get(RecvEngine))
	}
}

// TestEngineOptions: GOMX_SHM_ENGINE_MIN sets the threshold, bad values
// and the engine strategy without an engine are refused with the fix.
func TestEngineOptions(t *testing.T) {
	t.Setenv("GOMX_SHM_ENGINE_MIN", "")
	var o LocalOptions
	if err := o.largeEnv(); err != nil || o.EngineMin != DefaultEngineMin {
		t.Fatalf("default: %v %d", err, o.EngineMin)
	}
	t.Setenv("GOMX_SHM_ENGINE_MIN", "65536")
	o = LocalOptions{}
	if err := o.largeEnv(); err != nil || o.EngineMin != 65536 {
		t.Fatalf("65536: %v %d", err, o.EngineMin)
	}
	t.Setenv("GOMX_SHM_ENGINE_MIN", "2M")
	if err := (&LocalOptions{}).largeEnv(); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("2M: %v", err)
	}
	t.Setenv("GOMX_SHM_ENGINE_MIN", "")
	err := (&LocalOptions{Large: LargeEngine}).largeEnv()
	if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "LocalOptions.Engine") {
		t.Fatalf("engine without an engine: %v", err)
	}
	for _, s := range []LargeStrategy{LargeShared, LargeEngine} {
		if p, err := ParseLargeStrategy(s.String()); err != nil || p != s {
			t.Errorf("ParseLargeStrategy(%q) = %v, %v", s.String(), p, err)
		}
	}
}

// TestSharedNeedsShm: a board without shared memory refuses AllocShared
// and says how to get it.
func TestSharedNeedsShm(t *testing.T) {
	p := newPair(t, transportFactories[0], fastOptions(), loopback.Faults{})
	if _, err := p.a.AllocShared(4096); !errors.Is(err, ErrNoSharedMemory) {
		t.Fatalf("AllocShared on a loopback board: %v, want ErrNoSharedMemory", err)
	}
}

// TestSharedPeerKilled: a process whose shared segments we mapped is
// killed: its segments are unmapped here without any call of ours, and
// after Close nothing of either pool is left.
func TestSharedPeerKilled(t *testing.T) {
	checkLeaks(t)
	dir := shmDir(t)
	leaktest.Check(t, "") // once the child is reaped, in startTestChild's cleanup
	ctx := testCtx(t, 60*time.Second)
	cmd, sc := startTestChild(t, ctx, "TestSharedProcesses", sharedChildEnv+"="+dir+" 42")
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child did not start: %q", sc.Text())
	}
	b, e, addr := shmBoardTo(t, ctx, dir, shmTestOptions(), 42)
	if _, err := e.AllocShared(1 << 20); err != nil { // a pool of ours too, freed by Close
		t.Fatal(err)
	}
	echoSizes(t, ctx, e, addr, []int{1 << 20}) // the child answers from its pool
	if c := e.Counters(); c.Get(RecvShared) != 1 {
		t.Fatalf("%d copies out of the child's segments, want 1", c.Get(RecvShared))
	}
	if _, peers := b.SharedSegments(); peers < 2 {
		t.Fatalf("%d of the child's segments mapped here, want its table and buffer", peers)
	}
	cmd.Process.Kill()
	waitCond(t, "the killed child's segments are unmapped", func() bool { _, p := b.SharedSegments(); return p == 0 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// heldEngine is a copy engine whose first copy blocks until the test
// releases it (free).
type heldEngine struct {
	CopyEngine
	once, freed      sync.Once
	entered, release chan struct{}
}

// free releases the held copy; later calls do nothing.
func (h *heldEngine) free() { h.freed.Do(func() { close(h.release) }) }

// newHeldEngineRig is newEngineRig with the receiver's engine held at its
// first copy; receiver, when not nil, sets the receiver's other options.
// A test that ends without releasing the copy releases it, so nothing is
// left hanging.
func newHeldEngineRig(t *testing.T, receiver func(*BoardOptions)) (*engineRig, *heldEngine) {
	t.Helper()
	held := &heldEngine{entered: make(chan struct{}), release: make(chan struct{})}
	g := newEngineRig(t, LargeEngine, nil, func(o *BoardOptions) {
		if receiver != nil {
			receiver(o)
		}
		held.CopyEngine = o.Local.Engine
		o.Local.Engine = held
	})
	t.Cleanup(held.free)
	return g, held
}

// sendHeld sends a 1 MiB message from a shared buffer of g.a (pattern
// seed) to g.b with match tag and returns once the engine holds its copy:
// the message, the receive buffer, the receive and the send.
func (g *engineRig) sendHeld(t *testing.T, held *heldEngine, tag, seed uint64) (msg, buf []byte, r, s *Request) {
	t.Helper()
	msg, err := g.a.AllocShared(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.a.FreeShared(msg) })
	copy(msg, pattern(len(msg), seed))
	buf = make([]byte, len(msg))
	if r, err = g.b.IRecv([][]byte{buf}, tag, ^uint64(0), nil); err != nil {
		t.Fatal(err)
	}
	if s, err = g.a.ISend([][]byte{msg}, g.atob, tag, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.entered:
	case <-testCtx(t, time.Minute).Done():
		t.Fatal("the engine copy never started")
	}
	return msg, buf, r, s
}

func (h *heldEngine) CopyAsync(dst, src []byte) (func() error, error) {
	h.once.Do(func() {
		close(h.entered)
		<-h.release
	})
	return h.CopyEngine.CopyAsync(dst, src)
}

// TestEngineCopyOutsideLock: while an engine copy is held up, the
// receiving board keeps exchanging other messages both ways (the copy does
// not hold the board lock), and the held receive completes byte-exact,
// counted as an engine copy, once the engine runs.
func TestEngineCopyOutsideLock(t *testing.T) {
	g, held := newHeldEngineRig(t, nil)
	ctx := testCtx(t, time.Minute)
	big, bbuf, rb, sb := g.sendHeld(t, held, 1, 9)
	for i := range 10 {
		msg := pattern(100, uint64(i))
		buf := make([]byte, 100)
		r, _ := g.a.IRecv([][]byte{buf}, 2, ^uint64(0), nil)
		s, _ := g.b.ISend([][]byte{msg}, g.btoa, 2, nil)
		mustWait(t, s, time.Minute)
		mustWait(t, r, time.Minute)
		msg2, buf2 := pattern(100, uint64(i+100)), make([]byte, 100)
		r, _ = g.b.IRecv([][]byte{buf2}, 3, ^uint64(0), nil)
		s, _ = g.a.ISend([][]byte{msg2}, g.atob, 3, nil)
		mustWait(t, s, time.Minute)
		mustWait(t, r, time.Minute)
		if !bytes.Equal(buf, msg) || !bytes.Equal(buf2, msg2) {
			t.Fatal("a small message differs")
		}
	}
	if _, ok := rb.Test(); ok {
		t.Fatal("the held receive completed before its copy ran")
	}
	held.free()
	if _, err := rb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mustWait(t, sb, time.Minute)
	if !bytes.Equal(bbuf, big) {
		t.Fatal("the copied message differs")
	}
	if c := g.b.Counters(); c.Get(RecvEngine) != 1 || c.Get(EngineFallbacks) != 0 {
		t.Fatalf("engine copies %d, fallbacks %d; want 1, 0", c.Get(RecvEngine), c.Get(EngineFallbacks))
	}
}

// TestSharedPoolMadeOutsideLock: while a board's shared pool is being made
// (its first AllocShared, held up inside), the board goes on with other
// work (its counters, a message from another endpoint), and two callers
// racing to make it get buffers of the same one pool.
func TestSharedPoolMadeOutsideLock(t *testing.T) {
	g := openStageRig(t, LargeAuto, false, nil)
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	sharedPoolHook = func() {
		entered <- struct{}{}
		<-release
	}
	t.Cleanup(func() { sharedPoolHook = nil })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	bufs := make(chan []byte, 2)
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			buf, err := g.a.AllocShared(64 << 10)
			errc <- err
			bufs <- buf
		}()
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no AllocShared began making the pool")
	}
	ctx := testCtx(t, 30*time.Second)
	var done atomic.Bool
	sent := make(chan error, 1)
	go func() {
		g.ba.Counters()
		r, err := g.b.IRecv([][]byte{make([]byte, 4096)}, 13, ^uint64(0), nil)
		if err == nil {
			var s *Request
			if s, err = g.a.ISend([][]byte{pattern(4096, 13)}, g.atob, 13, nil); err == nil {
				if _, err = s.Wait(ctx); err == nil {
					_, err = r.Wait(ctx)
				}
			}
		}
		sent <- err
		done.Store(true)
	}()
	waitCond(t, "the board exchanges a message while its pool is made", done.Load)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	free()
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, _, ok := g.ba.shared.pool.Locate(<-bufs); !ok {
			t.Fatal("a buffer AllocShared returned lies outside the board's pool")
		}
	}
	if len(entered) != 0 {
		t.Fatal("the pool was made twice")
	}
	if own, _ := g.ba.SharedSegments(); own != 3 {
		t.Fatalf("the pool holds %d segments, want 3 (its table and two buffers)", own)
	}
}
