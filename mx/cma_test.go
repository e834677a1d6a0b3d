package mx

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gomx-dev/gomx/transport/loopback"
	"golang.org/x/sys/unix"
)

// largeEchoTo starts an echo child in another process whose large
// messages take strategy s, and a board here that takes s too; it returns
// a context that ends with the test (a minute at most), the board (its
// Options are what a test computes expected counts from) and an endpoint
// of that board connected to the child's at addr.
func largeEchoTo(t *testing.T, s LargeStrategy) (ctx context.Context, b *Board, e *Endpoint, addr Addr) {
	t.Helper()
	dir := shmDir(t)
	ctx = testCtx(t, 60*time.Second)
	startShmChild(t, ctx, dir+" 7", "GOMX_SHM_LARGE="+s.String())
	o := shmTestOptions()
	o.Local.Large = s
	b, e, addr = shmBoardTo(t, ctx, dir, o, 7)
	return ctx, b, e, addr
}

// TestLargeStrategies echoes every size class, with one or several
// segments on each side, through an mx endpoint in a child process, once
// with each large-message strategy forced on both sides: every message
// comes back byte-exact, and the counters show which strategy ran (single
// copies by process_vm_readv, or pulls through the rings).
func TestLargeStrategies(t *testing.T) {
	for _, s := range []LargeStrategy{LargeRings, LargeCMA, LargeAuto} {
		t.Run(s.String(), func(t *testing.T) {
			ctx, _, e, addr := largeEchoTo(t, s)
			sizes := []int{0, 1, 32, 128, 4096, 4097, 32768, 32769, 1 << 20, 4<<20 + 1}
			large := 0
			for i, size := range sizes {
				for _, nseg := range []int{1, 3} {
					echoSplit(t, ctx, e, addr, pattern(size, uint64(i)), nseg, uint64(i))
					if size > DefaultShmEager {
						large++
					}
				}
			}
			c := e.Counters()
			cma, pulls := c.Get(RecvCMA), c.Get(SendPull)
			switch s {
			case LargeRings:
				if cma != 0 || pulls == 0 {
					t.Errorf("rings: %d single copies, %d pulls; want none and some", cma, pulls)
				}
			default:
				// Auto stages messages from StageMin (stage.go): one
				// copy or the other, never a pull.
				staged := c.Get(StagedRecvs)
				if cma+staged != uint64(large) || pulls != 0 || s == LargeCMA && staged != 0 {
					t.Errorf("%v: %d single copies, %d staged, %d pulls; want %d in all and no pull (refused %d, failed %d)",
						s, cma, staged, pulls, large, c.Get(CMARefused), c.Get(CMAFailed))
				}
			}
		})
	}
}

// TestLargeStrategyOptions: strategies and the eager threshold come from
// options and the environment, and bad values are refused with the fix.
func TestLargeStrategyOptions(t *testing.T) {
	for _, c := range []struct {
		env, eager string
		want       LargeStrategy
		wantEager  int
		bad        bool
	}{
		{"", "", LargeAuto, DefaultShmEager, false},
		{"rings", "8192", LargeRings, 8192, false},
		{"CMA", "", LargeCMA, DefaultShmEager, false},
		{"engine", "", 0, 0, true},
		{"", "-1", 0, 0, true},
		{"", "4k", 0, 0, true},
	} {
		t.Setenv("GOMX_SHM_LARGE", c.env)
		t.Setenv("GOMX_SHM_EAGER", c.eager)
		var o LocalOptions
		err := o.largeEnv()
		if c.bad {
			if !errors.Is(err, ErrBadOptions) {
				t.Errorf("%q/%q: %v, want ErrBadOptions", c.env, c.eager, err)
			}
			continue
		}
		if err != nil || o.Large != c.want || o.ShmEager != c.wantEager {
			t.Errorf("%q/%q: %v %d %v, want %v %d", c.env, c.eager, o.Large, o.ShmEager, err, c.want, c.wantEager)
		}
	}
	os.Unsetenv("GOMX_SHM_LARGE")
	if _, err := ParseLargeStrategy("x"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("auto, rings, cma, shared, engine or staged")) {
		t.Errorf("ParseLargeStrategy(x) = %v", err)
	}
}

// TestCMACopyOutsideLock: while a single copy is held up, the receiving
// board keeps exchanging other messages (the copy holds neither the board
// lock nor the rings: the goroutine that runs it is held, and waiters that
// poll the rings receive meanwhile), and the held receive completes
// byte-exact once the copy runs.
func TestCMACopyOutsideLock(t *testing.T) {
	o := shmTestOptions()
	o.Local.Large = LargeCMA
	o.BusyPoll = true // the receive loop is the goroutine held in the copy
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	release, started := holdCMACopies(t, ctx)
	big := pattern(1<<20, 5)
	bbuf := make([]byte, len(big))
	rb, _ := pr.a.IRecv([][]byte{bbuf}, 1, ^uint64(0), nil)
	sb, err := pr.b.ISend([][]byte{big}, pr.btoa, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	started()
	// The copy is in flight: small messages both ways still go through.
	for i := range 10 {
		msg := pattern(100, uint64(i))
		buf := make([]byte, 100)
		r, _ := pr.b.IRecv([][]byte{buf}, 2, ^uint64(0), nil)
		s, _ := pr.a.ISend([][]byte{msg}, pr.atob, 2, nil)
		mustWait(t, s, time.Minute)
		mustWait(t, r, time.Minute)
		if !bytes.Equal(buf, msg) {
			t.Fatal("a small message differs")
		}
	}
	if _, ok := rb.Test(); ok {
		t.Fatal("the held receive completed before its copy ran")
	}
	close(release)
	if _, err := rb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mustWait(t, sb, time.Minute)
	if !bytes.Equal(bbuf, big) {
		t.Fatal("the copied message differs")
	}
	if n := pr.a.Counters().Get(RecvCMA); n != 1 {
		t.Fatalf("%d single copies, want 1", n)
	}
}

// TestTestedCMAReceiveCopiedByLoop: a receive the application tests, whose
// single copy a Test's look at the rings queued, is copied by the receive
// loop, not inside the Test: Tests keep returning while the copy is held,
// and the receive completes byte-exact once the copy runs.
func TestTestedCMAReceiveCopiedByLoop(t *testing.T) {
	o := shmTestOptions()
	o.Local.Large = LargeCMA
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	release, started := holdCMACopies(t, ctx)
	big := pattern(1<<20, 9)
	buf := make([]byte, len(big))
	r, _ := pr.a.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	var tests atomic.Int64
	done := make(chan Status, 1)
	go func() {
		for ctx.Err() == nil {
			if st, ok := r.Test(); ok {
				done <- st
				return
			}
			tests.Add(1)
		}
	}()
	s, err := pr.b.ISend([][]byte{big}, pr.btoa, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	started()
	n := tests.Load()
	waitUntil(t, "Tests returning while the copy is held", func() bool { return tests.Load() >= n+100 })
	close(release)
	select {
	case st := <-done:
		if st.Code != nil || !bytes.Equal(buf, big) {
			t.Fatalf("status %v, or the copied message differs", st.Code)
		}
	case <-ctx.Done():
		t.Fatal("the tested receive never completed")
	}
	mustWait(t, s, time.Minute)
	if got := pr.a.Counters().Get(RecvCMA); got != 1 {
		t.Fatalf("%d single copies, want 1", got)
	}
}

// holdCMACopies makes every single copy wait until release is closed, and
// returns release and a wait for the first copy to start (bounded by ctx).
func holdCMACopies(t *testing.T, ctx context.Context) (release chan struct{}, started func()) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	cmaCopyHook = func() {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}
	t.Cleanup(func() { cmaCopyHook = nil })
	return release, func() {
		t.Helper()
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the single copy never started")
		}
	}
}

// TestCopyOutlasts: a single copy is acked ahead only when it could come
// near the sender's retransmission timeout: never on the rings (a second),
// and over a transport with a floor of a few hundred microseconds, for
// copies of a megabyte.
func TestCopyOutlasts(t *testing.T) {
	for _, c := range []struct {
		n    uint32
		rto  time.Duration
		want bool
	}{
		{64 << 10, time.Second, false},
		{64 << 20, time.Second, false},
		{1 << 30, time.Second, true},
		{4 << 10, 200 * time.Microsecond, false},
		{1 << 20, 200 * time.Microsecond, true},
	} {
		if got := copyOutlasts(c.n, int64(c.rto)); got != c.want {
			t.Errorf("copyOutlasts(%d B, rto %v) = %v, want %v", c.n, c.rto, got, c.want)
		}
	}
}

// TestCMAReadvInPieces: a copy larger than cmaRawMax, from several remote
// vectors into several local ones whose bounds fall elsewhere, arrives
// byte-exact in raw calls of cmaRawMax at most (counted by cmaPieceHook);
// one whose receive is shorter than the message copies what fits, as does
// one whose message is shorter than the receive; one whose remote vector
// ends in unmapped memory copies up to there (the count tells its caller,
// which pulls the message through the rings); and one that copies nothing
// fails as process_vm_readv does.
func TestCMAReadvInPieces(t *testing.T) {
	pid := os.Getpid()
	src := make([]byte, 3*cmaRawMax+1234)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	remoteOf := func(src []byte, cuts ...int) []unix.RemoteIovec {
		var r []unix.RemoteIovec
		lo := 0
		for _, hi := range append(cuts, len(src)) {
			r = append(r, unix.RemoteIovec{Base: uintptr(unsafe.Pointer(&src[lo])), Len: hi - lo})
			lo = hi
		}
		return r
	}
	localOf := func(sizes ...int) ([]unix.Iovec, [][]byte) {
		var l []unix.Iovec
		var bufs [][]byte
		for _, n := range sizes {
			b := make([]byte, n)
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(n)
			l, bufs = append(l, v), append(bufs, b)
		}
		return l, bufs
	}
	var pieces []int
	cmaPieceHook = func(n int) { pieces = append(pieces, n) }
	defer func() { cmaPieceHook = nil }()
	remote := remoteOf(src, 1000, cmaRawMax+77, 2*cmaRawMax)
	local, bufs := localOf(cmaRawMax-5, 10, 2*cmaRawMax, len(src)-3*cmaRawMax-5)
	n, err := cmaReadv(pid, local, remote)
	if err != nil || n != len(src) {
		t.Fatalf("cmaReadv of %d B = %d, %v", len(src), n, err)
	}
	if got := bytes.Join(bufs, nil); !bytes.Equal(got, src) {
		t.Fatal("the bytes copied in pieces differ from the source")
	}
	sum := 0
	for _, p := range pieces {
		if p > cmaRawMax {
			t.Errorf("a raw call of %d B, over cmaRawMax (%d)", p, cmaRawMax)
		}
		sum += p
	}
	if want := (len(src) + cmaRawMax - 1) / cmaRawMax; len(pieces) != want || sum != len(src) {
		t.Fatalf("%d B copied in raw calls of %v B, want %d calls for %d B", len(src), pieces, want, len(src))
	}
	// The message shorter than the receive.
	msg := src[:2*cmaRawMax+99]
	local, bufs = localOf(len(src))
	if n, err := cmaReadv(pid, local, remoteOf(msg, 500)); err != nil || n != len(msg) || !bytes.Equal(bufs[0][:n], msg) {
		t.Fatalf("cmaReadv of %d B into %d B = %d, %v", len(msg), len(src), n, err)
	}
	short := cmaRawMax + 99
	local, bufs = localOf(short)
	if n, err := cmaReadv(pid, local, remote); err != nil || n != short || !bytes.Equal(bufs[0], src[:short]) {
		t.Fatalf("cmaReadv into %d B = %d, %v (bytes equal: %v)", short, n, err, bytes.Equal(bufs[0], src[:short]))
	}
	// A page that stays mapped, before one no longer mapped.
	page := os.Getpagesize()
	at, err := unix.MmapPtr(-1, 0, nil, uintptr(2*page), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.MunmapPtr(at, uintptr(page))
	if err := unix.MunmapPtr(unsafe.Add(at, page), uintptr(page)); err != nil {
		t.Fatal(err)
	}
	mem := unsafe.Slice((*byte)(at), page)
	copy(mem, src[:page])
	local, _ = localOf(cmaRawMax + page)
	gap := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&mem[0])), Len: cmaRawMax + page}}
	if n, err := cmaReadv(pid, local, gap); err != nil || n != page {
		t.Fatalf("cmaReadv up to unmapped memory = %d, %v, want %d bytes", n, err, page)
	}
	gap[0].Base += uintptr(page)
	if n, err := cmaReadv(pid, local, gap); err == nil {
		t.Fatalf("cmaReadv of unmapped memory = %d, no error", n)
	}
}

// TestCMAReadvYieldsItsP: with one P (GOMAXPROCS=1), a goroutine made
// runnable when a large copy starts runs before the copy has gone
// cmaYieldEvery bytes past its start, not only once the whole copy is done:
// the receive loop and the timers run during a 4-64 MiB copy.
func TestCMAReadvYieldsItsP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	src := make([]byte, cmaYieldEvery+3*cmaRawMax)
	dst := make([]byte, len(src))
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
	var ran atomic.Bool
	copied, ranAt := 0, -1
	cmaPieceHook = func(n int) {
		if copied == 0 {
			go ran.Store(true) // runnable, on the only P, behind the copy
		}
		if ranAt < 0 && ran.Load() {
			ranAt = copied
		}
		copied += n
	}
	defer func() { cmaPieceHook = nil }()
	if n, err := cmaReadv(os.Getpid(), local, remote); err != nil || n != len(src) {
		t.Fatalf("cmaReadv of %d B = %d, %v", len(src), n, err)
	}
	if ranAt < 0 || ranAt > cmaYieldEvery {
		t.Fatalf("a goroutine runnable at the start of a %d B copy ran after %d B (-1: after the copy), want within %d", len(src), ranAt, cmaYieldEvery)
	}
}

// TestCMAReadsWhereTheLastEntrySaid: a single copy reads the region's
// entry and the message in one process_vm_readv, the message from where
// the sender endpoint's last entry put its buffer, once two entries in a
// row named the same buffer. A sender that keeps its buffer costs one call
// a message; one that moves to another buffer, to two segments, or to a
// shorter message at another offset of the same buffer costs a second
// call for that message (the first read the wrong bytes, or none) and for
// the next (read after its entry, until the buffer is seen to stay); one
// that alternates between two buffers costs two calls a message. Every
// message arrives byte-exact whichever it was.
func TestCMAReadsWhereTheLastEntrySaid(t *testing.T) {
	o := shmTestOptions()
	o.Local.Large = LargeCMA
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	const size = 64 << 10
	bufA, bufB := pattern(size, 1), pattern(size, 2)
	split := pattern(size, 3)
	steps := []struct {
		name  string
		segs  [][]byte
		calls uint64
	}{
		{"first from A (the table, the entry, the data)", [][]byte{bufA}, 3},
		{"A again (the entry, then the data)", [][]byte{bufA}, 2},
		{"A a third time", [][]byte{bufA}, 1},
		{"A a fourth time", [][]byte{bufA}, 1},
		{"B", [][]byte{bufB}, 2},
		{"B again", [][]byte{bufB}, 2},
		{"B a third time", [][]byte{bufB}, 1},
		{"A", [][]byte{bufA}, 2},
		{"B: alternating", [][]byte{bufB}, 2},
		{"A: alternating", [][]byte{bufA}, 2},
		{"A in two segments", [][]byte{bufA[:size/3], bufA[size/3:]}, 2},
		{"A in the same two segments", [][]byte{bufA[:size/3], bufA[size/3:]}, 2},
		{"A in the same two segments again", [][]byte{bufA[:size/3], bufA[size/3:]}, 1},
		{"two other segments", [][]byte{split[:size/2], split[size/2:]}, 2},
		{"the second half of B", [][]byte{bufB[size/2:]}, 2},
		{"the second half of B again", [][]byte{bufB[size/2:]}, 2},
		{"the second half of B a third time", [][]byte{bufB[size/2:]}, 1},
	}
	buf := make([]byte, size)
	for i, s := range steps {
		var want []byte
		for _, seg := range s.segs {
			want = append(want, seg...)
		}
		clear(buf)
		c0 := pr.a.Counters()
		exchange(t, ctx, pr.b, pr.btoa, pr.a, uint64(i), ^uint64(0), s.segs, [][]byte{buf})
		d := countersSince(c0, pr.a.Counters())
		if d.Get(CMARefused) > 0 {
			t.Skipf("the kernel refuses process_vm_readv (Yama ptrace_scope?): %d refusals", d.Get(CMARefused))
		}
		if !bytes.Equal(buf[:len(want)], want) {
			t.Fatalf("step %d (%s): the message differs", i, s.name)
		}
		if got := d.Get(RecvCMA); got != 1 {
			t.Fatalf("step %d (%s): %d single copies, want 1", i, s.name, got)
		}
		if got := d.Get(CMAReads); got != s.calls {
			t.Errorf("step %d (%s): %d process_vm_readv calls, want %d", i, s.name, got, s.calls)
		}
		if got := d.Get(CMAFailed); got != 0 {
			t.Errorf("step %d (%s): %d failed copies", i, s.name, got)
		}
	}
}

// TestCMALastEntryChangesUnderIt: the single copy that reads a message
// from where the sender's last entry put it before the entry confirms it
// (TestCMAReadsWhereTheLastEntrySaid) delivers each message's own bytes
// whatever the sender did to that buffer meanwhile: new contents at the
// same address, the buffer unmapped and another mapped in its place, the
// buffer unmapped and the message sent from elsewhere (the first call
// reads the entry and stops at the unmapped data; a second reads the
// message where the entry says), and an entry whose sequence number is
// not the RNDV's (the copy gives up on it and pulls through the rings).
// Every message arrives byte-exact.
func TestCMALastEntryChangesUnderIt(t *testing.T) {
	o := shmTestOptions()
	o.Local.Large = LargeCMA
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	const size = 64 << 10
	buf := make([]byte, size)
	tag := uint64(0)
	// send sends msg from pr.b to pr.a and checks its bytes, one single
	// copy (or none, ring), the number of process_vm_readv calls and no
	// failed copy.
	send := func(name string, msg []byte, ring bool, calls uint64) {
		t.Helper()
		want := bytes.Clone(msg)
		clear(buf)
		c0 := pr.a.Counters()
		tag++
		exchange(t, ctx, pr.b, pr.btoa, pr.a, tag, ^uint64(0), [][]byte{msg}, [][]byte{buf})
		d := countersSince(c0, pr.a.Counters())
		if d.Get(CMARefused) > 0 {
			t.Skipf("the kernel refuses process_vm_readv (Yama ptrace_scope?): %d refusals", d.Get(CMARefused))
		}
		if !bytes.Equal(buf[:len(want)], want) {
			t.Fatalf("%s: the message differs", name)
		}
		single := uint64(1)
		if ring {
			single = 0
		}
		if got := d.Get(RecvCMA); got != single {
			t.Fatalf("%s: %d single copies, want %d", name, got, single)
		}
		if got := d.Get(CMAReads); got != calls {
			t.Errorf("%s: %d process_vm_readv calls, want %d", name, got, calls)
		}
		if got := d.Get(CMAFailed); got != 0 {
			t.Errorf("%s: %d failed copies", name, got)
		}
	}

	// New contents at one address: each message carries its own bytes.
	a := pattern(size, 1)
	send("first from A", a, false, 3)
	send("A again", a, false, 2)
	for i := range 3 {
		copy(a, pattern(size, uint64(10+i)))
		send("A rewritten", a, false, 1)
	}

	// A buffer unmapped, another mapped at its address.
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	addr := unsafe.Pointer(unsafe.SliceData(m))
	copy(m, pattern(size, 20))
	send("from a mapping", m, false, 2)
	send("the mapping again", m, false, 2)
	send("the mapping a third time", m, false, 1)
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	p, err := unix.MmapPtr(-1, 0, addr, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		t.Skipf("could not map again at %p (something else took it, or no MAP_FIXED_NOREPLACE): %v", addr, err)
	}
	m = unsafe.Slice((*byte)(p), size)
	if p != addr {
		unix.MunmapPtr(p, size)
		t.Skipf("the kernel mapped at %p, not at %p", p, addr)
	}
	copy(m, pattern(size, 21))
	send("a new mapping at the old address", m, false, 1)
	// Unmapped, and the next message from elsewhere: the first call
	// reads the entry and stops at the unmapped page.
	if err := unix.MunmapPtr(p, size); err != nil {
		t.Fatal(err)
	}
	b := pattern(size, 30)
	send("B after the mapping went", b, false, 2)

	// A stale entry: the RNDV's region entry says another sequence.
	send("B again", b, false, 2)
	send("B a third time", b, false, 1)
	e := pr.b
	r, err := pr.b.ISend([][]byte{b}, pr.btoa, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.b.mu.Lock()
	i := -1
	for k := range e.regions {
		if e.regions[k].used && e.regions[k].r == r {
			i = k
		}
	}
	if i >= 0 {
		e.cmaTab[i*cmaEntryWords] = uint64(e.regions[i].seq+1)<<1 | 1
	}
	e.b.mu.Unlock()
	if i < 0 {
		t.Fatal("the send has no region")
	}
	clear(buf)
	c0 := pr.a.Counters()
	rr, err := pr.a.IRecv([][]byte{buf}, 100, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	d := countersSince(c0, pr.a.Counters())
	if !bytes.Equal(buf, b) {
		t.Fatal("the message read after a stale entry differs")
	}
	if got := d.Get(RecvCMA); got != 0 {
		t.Errorf("%d single copies after an entry with another sequence number, want the rings", got)
	}
	if got := d.Get(CMAReads); got != 1 {
		t.Errorf("%d process_vm_readv calls for a stale entry, want 1", got)
	}
	send("B after the stale entry", b, false, 1)
}
