package mx

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// stageRig is two shm boards of this process, a sending a and receiving b,
// connected both ways (the single copy and staging work between boards of
// one process as between processes).
type stageRig struct {
	ba, bb     *Board
	a, b       *Endpoint
	atob, btoa Addr
}

// newStageRig opens the rig and readies staging both ways (prepare);
// receiver, when not nil, edits b's board before a connects (before it
// learns b's capability).
func newStageRig(t *testing.T, large LargeStrategy, busy bool, receiver func(*Board)) *stageRig {
	t.Helper()
	g := openStageRig(t, large, busy, receiver)
	g.prepare(t)
	return g
}

// prepare readies staging both ways as the first large sends do (they go
// by the single copy), and waits until each board knows whether the other
// receives staged messages.
func (g *stageRig) prepare(t *testing.T) {
	t.Helper()
	g.exchange(t, 1<<20)
	waitStagePrepared(t, g.ba, g.bb.NICID())
	waitStagePrepared(t, g.bb, g.ba.NICID())
}

// waitStagePrepared waits until b knows whether the board at nic receives
// staged messages (stagePrepare ran).
func waitStagePrepared(t *testing.T, b *Board, nic transport.NICID) {
	t.Helper()
	waitCond(t, "staging to the peer is prepared", func() bool {
		_, ok := b.stage.caps.Load(nic)
		return ok
	})
}

// openStageRig opens the rig, connected both ways, without readying
// staging.
func openStageRig(t *testing.T, large LargeStrategy, busy bool, receiver func(*Board)) *stageRig {
	t.Helper()
	checkLeaks(t)
	dir := shmDir(t)
	open := func() (*Board, *Endpoint) {
		tr, err := shm.Open(shm.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		o := shmTestOptions()
		o.Local.Large = large
		o.BusyPoll = busy
		b, err := NewBoard(tr, o)
		if err != nil {
			tr.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		e, err := b.OpenEndpoint(0, testKey)
		if err != nil {
			t.Fatal(err)
		}
		return b, e
	}
	g := &stageRig{}
	g.ba, g.a = open()
	g.bb, g.b = open()
	if receiver != nil {
		receiver(g.bb)
	}
	ctx := testCtx(t, 30*time.Second)
	var err error
	if g.atob, err = g.a.Connect(ctx, g.bb.NICID(), 0, testKey); err != nil {
		t.Fatal(err)
	}
	if g.btoa, err = g.b.Connect(ctx, g.ba.NICID(), 0, testKey); err != nil {
		t.Fatal(err)
	}
	// A message each way, so that each board's transport knows the
	// other's process (staging starts once the peer connected back).
	g.exchange(t, 8)
	return g
}

// endStaged waits for the receive r into buf and the send s of msg, and
// checks that msg arrived whole, as b's one staged receive.
func (g *stageRig) endStaged(t *testing.T, r, s *Request, buf, msg []byte) {
	t.Helper()
	mustWait(t, r, 30*time.Second)
	mustWait(t, s, 30*time.Second)
	if !bytes.Equal(buf, msg) {
		t.Fatal("the message arrived wrong")
	}
	if c := g.b.Counters(); c.Get(StagedRecvs) != 1 {
		t.Fatalf("%d staged receives, want 1", c.Get(StagedRecvs))
	}
}

// exchange sends an n-byte message each way.
func (g *stageRig) exchange(t *testing.T, n int) {
	t.Helper()
	for _, d := range []struct {
		from, to *Endpoint
		addr     Addr
	}{{g.a, g.b, g.atob}, {g.b, g.a, g.btoa}} {
		buf := make([]byte, n)
		r, _ := d.to.IRecv([][]byte{buf}, 1<<60, ^uint64(0), nil)
		s, err := d.from.ISend([][]byte{make([]byte, n)}, d.addr, 1<<60, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustWait(t, s, 30*time.Second)
		mustWait(t, r, 30*time.Second)
	}
}

// setStageHooks installs the sender's test hooks for the test's duration.
func setStageHooks(t *testing.T, claim func() bool, cp func(int)) {
	stageClaimHook, stageCopyHook = claim, cp
	t.Cleanup(func() { stageClaimHook, stageCopyHook = nil, nil })
}

// stageBufsFree reports whether none of b's staging buffers is in use.
func stageBufsFree(b *Board) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, sb := range b.stage.bufs {
		if sb.busy {
			return false
		}
	}
	return true
}

// TestStaged echoes messages of many sizes, around the chunk and staging
// buffer boundaries, through an mx endpoint in a child process with the
// staged strategy on both sides, with busy-polling and blocking waits:
// every message comes back byte-exact, and the counters show each one
// that fits a staging buffer and comes from one segment went staged both
// ways (the larger ones by the single copy).
func TestStaged(t *testing.T) {
	for _, busy := range []bool{true, false} {
		name := "block"
		if busy {
			name = "busy"
		}
		t.Run(name, func(t *testing.T) {
			dir := shmDir(t)
			ctx := testCtx(t, 60*time.Second)
			startShmChild(t, ctx, dir+" 7", "GOMX_SHM_LARGE=staged")
			o := shmTestOptions()
			o.Local.Large = LargeStaged
			o.BusyPoll = busy
			_, e, addr := shmBoardTo(t, ctx, dir, o, 7)
			stagedBothWays(t, ctx, e, addr)
			base := e.Counters()
			sizes := []int{DefaultShmEager + 1, stageChunk - 1, stageChunk, stageChunk + 1, 1 << 20,
				3*stageChunk + 5, stageBufSize - 1, stageBufSize, stageBufSize + 1}
			staged := 0
			for i, size := range sizes {
				for _, nseg := range []int{1, 3} {
					echoSplit(t, ctx, e, addr, pattern(size, uint64(i*7+nseg)), nseg, uint64(i))
					if size <= stageBufSize && nseg == 1 {
						staged++
					}
				}
			}
			c := countersSince(base, e.Counters())
			if c.Get(StagedSends) != uint64(staged) {
				t.Errorf("%d sends staged, want %d", c.Get(StagedSends), staged)
			}
			// The child echoes from one buffer: every message that fits went staged.
			if want := uint64(2 * (len(sizes) - 1)); c.Get(StagedRecvs) != want {
				t.Errorf("%d receives staged, want %d (cma %d, refused %d, failed %d)", c.Get(StagedRecvs), want,
					c.Get(RecvCMA), c.Get(CMARefused), c.Get(CMAFailed))
			}
			if c.Get(SendPull) != 0 {
				t.Errorf("%d pulls through the rings, want none", c.Get(SendPull))
			}
		})
	}
}

// stagedBothWays echoes 1 MiB messages with the echo server at addr until
// one goes staged both ways: the first large sends each way start readying
// staging (and go by the single copy).
func stagedBothWays(t *testing.T, ctx context.Context, e *Endpoint, addr Addr) {
	t.Helper()
	msg := pattern(1<<20, 98)
	waitCond(t, "large messages go staged both ways", func() bool {
		before := e.Counters()
		echoSplit(t, ctx, e, addr, msg, 1, 1<<59)
		d := countersSince(before, e.Counters())
		return d.Get(StagedSends) == 1 && d.Get(StagedRecvs) == 1
	})
}

// stagedOnce sends msg from g.a to g.b, received into nseg segments, and
// checks it arrived byte-exact; it returns b's counters.
func (g *stageRig) stagedOnce(t *testing.T, msg []byte, nseg int, match uint64) Counters {
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
	if st := mustWait(t, r, 30*time.Second); int(st.XferLength) != len(msg) || !bytes.Equal(buf, msg) {
		t.Fatalf("%d bytes arrived wrong (%d received)", len(msg), st.XferLength)
	}
	mustWait(t, s, 30*time.Second)
	return g.b.Counters()
}

// TestStagedSenderAbsent: a sender that never copies (no copier claims a
// chunk) leaves the receiver to read every chunk from the sender's buffer
// with process_vm_readv, and the message still arrives whole.
func TestStagedSenderAbsent(t *testing.T) {
	g := newStageRig(t, LargeStaged, true, nil)
	setStageHooks(t, func() bool { return false }, nil)
	for i, size := range []int{stageChunk, 3*stageChunk + 1, stageBufSize} {
		before := g.b.Counters()
		after := g.stagedOnce(t, pattern(size, uint64(i)), 2, uint64(i))
		d := countersSince(before, after)
		want := uint64((size + stageChunk - 1) / stageChunk)
		if d.Get(StagedRecvs) != 1 || d.Get(StagedCMAChunks) != want {
			t.Fatalf("%d bytes: %d staged receives, %d chunks read by CMA; want 1 and %d", size,
				d.Get(StagedRecvs), d.Get(StagedCMAChunks), want)
		}
	}
	if c := g.a.Counters(); c.Get(StagedChunks) != 0 {
		t.Fatalf("the absent sender copied %d chunks", c.Get(StagedChunks))
	}
	waitCond(t, "the staging buffers are free", func() bool { return stageBufsFree(g.ba) })
}

// TestStagedSlowEnds: a sender descheduled on a chunk it claimed has it
// taken over by the receiver (read from the sender's buffer), and a
// receiver that comes late finds the whole message staged; both arrive
// whole, and the stalled copier finishes before the send completes.
func TestStagedSlowEnds(t *testing.T) {
	t.Run("sender", func(t *testing.T) {
		g := newStageRig(t, LargeStaged, false, nil)
		release := make(chan struct{})
		var stalled atomic.Bool
		setStageHooks(t, nil, func(i int) {
			if i == 0 && stalled.CompareAndSwap(false, true) {
				<-release
			}
		})
		msg := pattern(stageBufSize, 3)
		buf := make([]byte, len(msg))
		s, err := g.a.ISend([][]byte{msg}, g.atob, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, "the stager stalls on chunk 0", stalled.Load)
		r, _ := g.b.IRecv([][]byte{buf}, 3, ^uint64(0), nil)
		mustWait(t, r, 30*time.Second)
		if !bytes.Equal(buf, msg) {
			t.Fatal("the message arrived wrong")
		}
		if c := g.b.Counters(); c.Get(StagedRecvs) != 1 || c.Get(StagedCMAChunks) == 0 {
			t.Fatalf("%d staged receives with %d chunks by CMA; want 1 with the stalled chunk among them",
				c.Get(StagedRecvs), c.Get(StagedCMAChunks))
		}
		close(release) // the send completes once its copier is done
		mustWait(t, s, 30*time.Second)
	})
	t.Run("receiver", func(t *testing.T) {
		g := newStageRig(t, LargeStaged, true, nil)
		msg := pattern(stageBufSize-7, 4)
		s, err := g.a.ISend([][]byte{msg}, g.atob, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, "the sender claimed every chunk", func() bool { return g.ba.stage.pending.Load() == 0 })
		buf := make([]byte, len(msg))
		r, _ := g.b.IRecv([][]byte{buf}, 4, ^uint64(0), nil)
		g.endStaged(t, r, s, buf, msg)
	})
}

// TestStagedGuard: once a staged send completed, nothing of its buffer
// reaches any receiver: a guard pattern written into it right after the
// completion, while a copier had stalled on one of its chunks, appears
// neither in that message nor in the next one through the same staging
// buffers.
func TestStagedGuard(t *testing.T) {
	g := newStageRig(t, LargeStaged, false, nil)
	release := make(chan struct{})
	var stalled atomic.Bool
	setStageHooks(t, nil, func(i int) {
		if stalled.CompareAndSwap(false, true) {
			<-release
		}
	})
	msg := pattern(stageBufSize, 5)
	want := bytes.Clone(msg)
	buf := make([]byte, len(msg))
	s, err := g.a.ISend([][]byte{msg}, g.atob, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the stager stalls on a chunk", stalled.Load)
	r, _ := g.b.IRecv([][]byte{buf}, 5, ^uint64(0), nil)
	mustWait(t, r, 30*time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the send waits for the stalled copier
		defer wg.Done()
		close(release)
	}()
	mustWait(t, s, 30*time.Second)
	wg.Wait()
	guard := bytes.Repeat([]byte{0xA5}, len(msg))
	copy(msg, guard)
	if !bytes.Equal(buf, want) {
		t.Fatal("the first message arrived wrong")
	}
	for k := range 3 {
		next := pattern(stageBufSize-k, uint64(6+k))
		g.stagedOnce(t, next, 1, uint64(6+k))
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the first receive changed after it completed")
	}
	waitCond(t, "the staging buffers are free", func() bool { return stageBufsFree(g.ba) })
}

// TestStagedPeerKilled: a staged send whose receiver process is killed
// fails with ErrUnreachable instead of hanging, and its staging buffer
// is free again; a staged receive whose sender is killed before it is
// matched completes, with the message (staged before the kill) or
// ErrUnreachable, never hanging.
func TestStagedPeerKilled(t *testing.T) {
	t.Run("receiver", func(t *testing.T) {
		dir := shmDir(t)
		ctx := testCtx(t, 60*time.Second)
		cmd := startShmChild(t, ctx, dir+" 8 compute", "GOMX_SHM_LARGE=staged")
		o := shmTestOptions()
		o.Local.Large = LargeStaged
		b, e, addr := shmBoardTo(t, ctx, dir, o, 8)
		// One large echo first: the child knows us, we know it, and
		// our send starts readying staging to it.
		echo(t, ctx, e, addr, pattern(1<<20, 1), make([]byte, 1<<20), 1)
		waitStagePrepared(t, b, addr.NIC)
		// The child now computes: our staged send waits for a receive
		// that never comes, until the child dies.
		s, err := e.ISend([][]byte{pattern(1<<20, 2)}, addr, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c := e.Counters(); c.Get(StagedSends) != 1 {
			t.Fatalf("%d staged sends, want 1", c.Get(StagedSends))
		}
		cmd.Process.Kill()
		if _, err := s.Wait(ctx); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("send to a killed peer: %v, want ErrUnreachable", err)
		}
		waitCond(t, "the staging buffer is free", func() bool { return stageBufsFree(b) })
	})
	t.Run("sender", func(t *testing.T) {
		dir := shmDir(t)
		ctx := testCtx(t, 60*time.Second)
		cmd := startShmChild(t, ctx, dir+" 9", "GOMX_SHM_LARGE=staged")
		o := shmTestOptions()
		o.Local.Large = LargeStaged
		_, e, addr := shmBoardTo(t, ctx, dir, o, 9)
		stagedBothWays(t, ctx, e, addr) // the child's answer below goes staged
		// Match 1<<62: the child answers with an unexpected 1 MiB
		// message, staged, whose send never completes.
		s, _ := e.ISend(nil, addr, 1<<62, nil)
		if _, err := e.Probe(ctx, 1<<62, ^uint64(0)); err != nil {
			t.Fatal(err)
		}
		mustWait(t, s, 30*time.Second)
		cmd.Process.Kill()
		cmd.Wait()
		buf := make([]byte, 1<<20)
		r, _ := e.IRecv([][]byte{buf}, 1<<62, ^uint64(0), nil)
		_, err := r.Wait(ctx)
		switch {
		case err == nil && !bytes.Equal(buf, pattern(1<<20, 62)):
			t.Fatal("a message from a killed sender completed with the wrong bytes")
		case err != nil && !errors.Is(err, ErrUnreachable):
			t.Fatalf("receive from a killed sender: %v, want the message or ErrUnreachable", err)
		}
	})
}

// TestStagedClose: closing the boards with staged messages in flight (a
// send whose receive is not posted, a receive whose sender never
// copies) completes them, and leaves no goroutine behind.
func TestStagedClose(t *testing.T) {
	g := newStageRig(t, LargeStaged, true, nil)
	s, err := g.a.ISend([][]byte{pattern(2<<20, 9)}, g.atob, 9, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.ba.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(testCtx(t, 30*time.Second)); err == nil {
		t.Fatal("a staged send in flight completed without error when its board closed")
	}
	if err := g.bb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStagedOldPeer: a peer that does not advertise staging (no magic
// word after its endpoint tables, as an older gomx) gets the single copy.
func TestStagedOldPeer(t *testing.T) {
	g := newStageRig(t, LargeStaged, true, func(b *Board) {
		b.mu.Lock()
		b.cmaEps[MaxEndpoints] = 0
		b.mu.Unlock()
	})
	before := g.b.Counters()
	c := countersSince(before, g.stagedOnce(t, pattern(2<<20, 10), 1, 10))
	if c.Get(StagedRecvs) != 0 || c.Get(RecvCMA) != 1 || g.a.Counters().Get(StagedSends) != 0 {
		t.Fatalf("to an old peer: %d staged sends, %d staged receives, %d single copies; want 0, 0, 1",
			g.a.Counters().Get(StagedSends), c.Get(StagedRecvs), c.Get(RecvCMA))
	}
}

// TestStageMinOption: GOMX_SHM_STAGE_MIN sets StageMin, and a bad value
// is refused with the fix.
func TestStageMinOption(t *testing.T) {
	t.Setenv("GOMX_SHM_STAGE_MIN", "")
	o := LocalOptions{}
	if err := o.largeEnv(); err != nil || o.StageMin != DefaultStageMin {
		t.Fatalf("default: %v, StageMin %d", err, o.StageMin)
	}
	t.Setenv("GOMX_SHM_STAGE_MIN", "2097152")
	o = LocalOptions{}
	if err := o.largeEnv(); err != nil || o.StageMin != 2<<20 {
		t.Fatalf("2 MiB: %v, StageMin %d", err, o.StageMin)
	}
	t.Setenv("GOMX_SHM_STAGE_MIN", "1M")
	if err := (&LocalOptions{}).largeEnv(); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("GOMX_SHM_STAGE_MIN=1M: %v, want ErrBadOptions", err)
	}
	if s, err := ParseLargeStrategy("staged"); err != nil || s != LargeStaged || s.String() != "staged" {
		t.Fatalf("staged parses as %v, %v", s, err)
	}
}

// TestStagedReadAfterSendFailed: a receiver reading a staged message by
// process_vm_readv while its send fails (the sender's endpoint closes) and
// the application writes its buffer again never completes holding those
// later bytes: the read counts only if the message was still staged after
// it.
func TestStagedReadAfterSendFailed(t *testing.T) {
	g := newStageRig(t, LargeStaged, false, nil)
	setStageHooks(t, func() bool { return false }, nil) // the sender copies nothing: the receiver reads every chunk
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	stageReadHook = func(i int) {
		if i == 0 { // the last chunk the receiver claims from the top
			once.Do(func() { close(entered); <-release })
		}
	}
	t.Cleanup(func() { stageReadHook = nil })
	msg := pattern(1<<20, 5)
	want := bytes.Clone(msg)
	buf := make([]byte, len(msg))
	s, err := g.a.ISend([][]byte{msg}, g.atob, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := make(chan error, 1)
	go func() {
		r, err := g.b.IRecv([][]byte{buf}, 5, ^uint64(0), nil)
		if err != nil {
			rc <- err
			return
		}
		_, err = r.Wait(testCtx(t, 30*time.Second))
		rc <- err
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the receiver never reached the last chunk")
	}
	cl := make(chan error, 1)
	go func() { cl <- g.a.Close() }()
	if _, err := s.Wait(testCtx(t, 30*time.Second)); err == nil {
		t.Fatal("the send completed without error although its endpoint closed under it")
	}
	// The application owns its buffer again: it writes a guard.
	copy(msg, bytes.Repeat([]byte{0xA5}, len(msg)))
	close(release)
	rerr := <-rc
	if err := <-cl; err != nil {
		t.Fatal(err)
	}
	if rerr == nil {
		n := 0
		for k := range buf {
			if buf[k] == 0xA5 {
				n++
			}
		}
		t.Fatalf("the receive completed without error, holding %d guard bytes written after its send completed (equal to the message: %v)", n, bytes.Equal(buf, want))
	}
}

// TestStagedCopierHoldsNoBoard: a copier of the sender descheduled inside
// a chunk holds up nothing but its own send: once the receiver has the
// whole message (it read the stalled chunk itself) and the sending board
// has its NOTIFY, another endpoint of that board exchanges a message with
// the receiver while the copier is still held, and the staged send
// completes only after the copier left its chunk.
func TestStagedCopierHoldsNoBoard(t *testing.T) {
	g := newStageRig(t, LargeStaged, false, nil)
	ctx := testCtx(t, 30*time.Second)
	other, err := g.ba.OpenEndpoint(1, testKey)
	if err != nil {
		t.Fatal(err)
	}
	toB, err := other.Connect(ctx, g.bb.NICID(), 0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var stalled atomic.Bool
	setStageHooks(t, nil, func(i int) {
		if stalled.CompareAndSwap(false, true) {
			<-release
		}
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // a failing test lets the copier go before the boards close
	msg := pattern(stageBufSize, 11)
	buf := make([]byte, len(msg))
	s, err := g.a.ISend([][]byte{msg}, g.atob, 11, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, "a copier stalls inside a chunk", stalled.Load)
	r, _ := g.b.IRecv([][]byte{buf}, 11, ^uint64(0), nil)
	mustWait(t, r, 30*time.Second)
	if !bytes.Equal(buf, msg) {
		t.Fatal("the message arrived wrong")
	}
	small := make([]byte, 8)
	r2, _ := g.b.IRecv([][]byte{small}, 12, ^uint64(0), nil)
	waitCond(t, "the sending board takes the NOTIFY", func() bool { return g.a.Counters().Get(RecvNotify) > 0 })
	var done atomic.Bool
	errc := make(chan error, 1)
	go func() {
		// The sending board serves its other endpoint.
		s2, err := other.ISend([][]byte{pattern(8, 12)}, toB, 12, nil)
		if err == nil {
			_, err = s2.Wait(ctx)
		}
		if err == nil {
			_, err = r2.Wait(ctx)
		}
		errc <- err
		done.Store(true)
	}()
	waitCond(t, "another endpoint of the sending board exchanges a message while a copier is held", done.Load)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s.Done() {
		t.Fatal("the staged send completed while a copier was still inside its chunk")
	}
	free()
	mustWait(t, s, 30*time.Second)
	waitCond(t, "the staging buffers are free", func() bool { return stageBufsFree(g.ba) })
}

// TestStagedRecvLeavesSegmentTable: a staged receive holds the sender's
// segment only for a step at a time, never while it waits: while it is
// held up reading a chunk from the sender's buffer, the sender passes it
// a new pool segment (which the receiving transport maps under its
// segment table's lock) without waiting for the message, and the message
// still arrives whole.
func TestStagedRecvLeavesSegmentTable(t *testing.T) {
	g := newStageRig(t, LargeStaged, false, nil)
	setStageHooks(t, func() bool { return false }, nil) // the receiver reads every chunk
	entered := make(chan struct{})
	release := make(chan struct{})
	var once, freed sync.Once
	stageReadHook = func(int) {
		once.Do(func() { close(entered); <-release })
	}
	free := func() { freed.Do(func() { close(release) }) }
	t.Cleanup(func() { stageReadHook = nil })
	t.Cleanup(free)
	msg := pattern(stageBufSize, 14)
	buf := make([]byte, len(msg))
	r, err := g.b.IRecv([][]byte{buf}, 14, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.a.ISend([][]byte{msg}, g.atob, 14, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the receiver never read a chunk from the sender's buffer")
	}
	before := g.bb.sharedTransport().PeerSegments()
	if _, err := g.a.AllocShared(1 << 20); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	shared := make(chan error, 1)
	go func() {
		shared <- g.ba.sharedTransport().ShareSegments(g.bb.NICID())
		done.Store(true)
	}()
	waitCond(t, "a new segment is passed while the staged receive is held", done.Load)
	if err := <-shared; err != nil {
		t.Fatal(err)
	}
	if after := g.bb.sharedTransport().PeerSegments(); after != before+1 {
		t.Fatalf("the receiver maps %d segments of its peer, want %d", after, before+1)
	}
	free()
	g.endStaged(t, r, s, buf, msg)
}

// TestStagePreparedOffSend: readying staging to a peer (allocating the
// staging buffers, passing them, which may wait for the peer) never runs
// in ISend: while it is held up, the first large send to the peer, which
// started it, goes by the single copy and completes; once it is done, the
// next large send goes staged.
func TestStagePreparedOffSend(t *testing.T) {
	g := openStageRig(t, LargeStaged, false, nil)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	stagePrepHook = func() {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { stagePrepHook = nil })
	t.Cleanup(free)
	ctx := testCtx(t, 30*time.Second)
	msg := pattern(1<<20, 15)
	buf := make([]byte, len(msg))
	r, err := g.b.IRecv([][]byte{buf}, 15, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	sent := make(chan error, 1)
	go func() {
		s, err := g.a.ISend([][]byte{msg}, g.atob, 15, nil)
		if err == nil {
			_, err = s.Wait(ctx)
		}
		sent <- err
		done.Store(true)
	}()
	waitCond(t, "the first large send completes while staging to its peer is being readied", done.Load)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	mustWait(t, r, 30*time.Second)
	if !bytes.Equal(buf, msg) {
		t.Fatal("the message arrived wrong")
	}
	if c := g.b.Counters(); c.Get(RecvCMA) != 1 || g.a.Counters().Get(StagedSends) != 0 {
		t.Fatalf("the first large send: %d single copies, %d staged; want 1 and 0", c.Get(RecvCMA), g.a.Counters().Get(StagedSends))
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first large send did not start readying staging")
	}
	free()
	waitStagePrepared(t, g.ba, g.bb.NICID())
	g.stagedOnce(t, pattern(1<<20, 16), 1, 16)
	if n := g.a.Counters().Get(StagedSends); n != 1 {
		t.Fatalf("%d staged sends once staging was ready, want 1", n)
	}
}

// TestStagePrepareClose: a board closes while it readies staging to a peer
// (held up until the board closes, as a peer that never acknowledges
// holds up the passing of segments until the transport closes): Close
// returns, and the preparation has ended by then.
func TestStagePrepareClose(t *testing.T) {
	g := openStageRig(t, LargeStaged, false, nil)
	entered := make(chan struct{}, 1)
	stagePrepHook = func() {
		entered <- struct{}{}
		<-g.ba.quit
	}
	t.Cleanup(func() { stagePrepHook = nil })
	s, err := g.a.ISend([][]byte{pattern(1<<20, 17)}, g.atob, 17, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the large send did not start readying staging")
	}
	if err := g.ba.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.ba.stage.caps.Load(g.bb.NICID()); !ok {
		t.Fatal("Close returned before the preparation ended")
	}
	if _, err := s.Wait(testCtx(t, 30*time.Second)); err == nil {
		t.Fatal("a send in flight completed without error when its board closed")
	}
}

// TestStagedEndpointCloseWaitsForCopier: closing an endpoint whose staged
// send a copier is inside a chunk of (held there) does not return before
// that send completed with ErrEndpointClosed, which it does as the copier
// leaves the chunk; Close returns then.
func TestStagedEndpointCloseWaitsForCopier(t *testing.T) {
	g := newStageRig(t, LargeStaged, false, nil)
	release := make(chan struct{})
	var stalled atomic.Bool
	setStageHooks(t, nil, func(i int) {
		if stalled.CompareAndSwap(false, true) {
			<-release
		}
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // a failing test lets the copier go before the boards close
	s, err := g.a.ISend([][]byte{pattern(stageBufSize, 13)}, g.atob, 13, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, "a copier stalls inside a chunk", stalled.Load)
	var returned atomic.Bool
	doneAtReturn := make(chan bool, 1)
	go func() {
		g.a.Close()
		d := s.Done()
		returned.Store(true)
		doneAtReturn <- d
	}()
	waitCond(t, "Close returns or waits", func() bool { return returned.Load() || closeWaits() })
	if returned.Load() {
		t.Fatalf("Endpoint.Close returned while a copier was inside a chunk of its staged send (the send done: %v)", <-doneAtReturn)
	}
	free()
	if !<-doneAtReturn {
		t.Fatal("Endpoint.Close returned before its staged send completed")
	}
	if _, err := s.Wait(testCtx(t, 30*time.Second)); !errors.Is(err, ErrEndpointClosed) {
		t.Fatalf("the staged send of a closed endpoint: %v, want ErrEndpointClosed", err)
	}
	waitCond(t, "the staging buffers are free", func() bool { return stageBufsFree(g.ba) })
}

// closeWaits reports whether a goroutine waits in Endpoint.Close.
func closeWaits() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "[chan receive") && strings.Contains(g, ".(*Endpoint).Close(") {
			return true
		}
	}
	return false
}

// TestStageGenerationBase: two boards number their staged messages from
// different bases, so a board that takes over the NIC id of one that went
// away does not present the generations that board gave to a receive of
// its messages still under way.
func TestStageGenerationBase(t *testing.T) {
	g := newStageRig(t, LargeStaged, true, nil)
	g.exchange(t, 2<<20)
	if n := g.a.Counters().Get(StagedSends) + g.b.Counters().Get(StagedSends); n != 2 {
		t.Fatalf("%d staged sends, want 2", n)
	}
	g.ba.mu.Lock()
	ga := g.ba.stage.gen
	g.ba.mu.Unlock()
	g.bb.mu.Lock()
	gb := g.bb.stage.gen
	g.bb.mu.Unlock()
	if ga == gb {
		t.Fatalf("both boards gave their first staged message generation %d", ga)
	}
}
