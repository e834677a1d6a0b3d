package xdp

import (
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// The region frames' allocator hands out runs first fit, merges what comes
// back with its neighbours, and keeps a released frame with an in-place
// send in flight until the send completes; releasing twice, or a frame
// that starts no run, fails.
func TestRegionFramesAllocator(t *testing.T) {
	const fs, base = 4096, 1 << 20
	a := newRegionFrames(8, fs, base)
	take := func(n uint32) uint32 {
		t.Helper()
		at, ok := a.alloc(n)
		if !ok {
			t.Fatalf("alloc(%d) failed: %s", n, a.state())
		}
		return at
	}
	x, y, z := take(3), take(2), take(3)
	if x != 0 || y != 3 || z != 5 {
		t.Fatalf("runs at %d, %d, %d, want 0, 3, 5", x, y, z)
	}
	if _, ok := a.alloc(1); ok {
		t.Fatal("alloc from no free frame succeeded")
	}
	// An in-place send from y's second frame is in flight.
	a.begin(base + 4*fs + 100)
	if !a.release(x) || !a.release(y) {
		t.Fatal("release of runs handed out failed")
	}
	if a.release(y) || a.release(6) {
		t.Error("a second release, or one of a frame inside a run, succeeded")
	}
	// Frames 0-3 merged; frame 4 is draining.
	if _, ok := a.alloc(5); ok {
		t.Fatalf("a run of 5 over the draining frame was handed out: %s", a.state())
	}
	if at := take(4); at != 0 {
		t.Fatalf("run of 4 at %d, want 0", at)
	}
	a.done(base + 4*fs + 100) // the send completed: frame 4 is free
	if at := take(1); at != 4 {
		t.Fatalf("run of 1 at %d, want the drained frame 4", at)
	}
	// Everything back, in any order, makes one run again.
	a.release(0)
	a.release(z)
	a.release(4)
	if at := take(8); at != 0 {
		t.Fatalf("the whole reservation at %d, want 0", at)
	}
}

// Allocating and releasing region memory many times over the reserved
// total keeps working, every run sent in place with its bytes intact; a
// run released while its in-place sends are in flight is not handed out
// again until they complete.
func TestTransportRegionMemoryReuse(t *testing.T) {
	a, b, _ := newTransports(t, 1, true)
	fs := a.Sockets()[0].FrameSize()
	total := len(a.Sockets()[0].RegionMemory()) / fs
	size := min(1000, a.MTU())
	overlaps := func(p, q []byte) bool {
		return addrOf(p) < addrOf(q)+uint64(cap(q)) && addrOf(q) < addrOf(p)+uint64(cap(p))
	}
	// sendFrom sends one frame from the start of mem in place until it
	// arrives intact, and returns its region, its send maybe still in
	// flight.
	sendFrom := func(mem []byte, seed byte) *transport.Region {
		t.Helper()
		for i := range mem {
			mem[i] = seed + byte(i*7)
		}
		r, err := a.Register(mem)
		if err != nil || !r.InPlace() {
			t.Fatalf("Register: %v (in place %v)", err, r != nil && r.InPlace())
		}
		for try := 0; ; try++ {
			if try == 20 {
				t.Fatalf("a frame sent in place 20 times never arrived")
			}
			if n, err := a.Send([]transport.Frame{r.Frame(b.Addr(), 0, size)}); n != 1 || err != nil {
				t.Fatalf("Send: %d, %v", n, err)
			}
			got, err := recvAll(t, b, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 1 && string(got[0].Data) == string(mem[:size]) {
				return r
			}
		}
	}
	settle := func(r *transport.Region) {
		t.Helper()
		for k := 0; r.Pending() != 0; k++ {
			if k == 5000 {
				t.Fatalf("%d in-place sends pending: the kernel never completed them", r.Pending())
			}
			a.Sockets()[0].Flush()
			time.Sleep(100 * time.Microsecond)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Four times the reservation, in runs of 1 to 3 frames.
	for i, handed := 0, 0; handed < 4*total; i++ {
		n := (1+i%3)*fs - 10
		mem, err := a.RegionMemory(n)
		if err != nil {
			t.Fatalf("after %d frames handed out and released: %v", handed, err)
		}
		settle(sendFrom(mem, byte(i)))
		if err := a.ReleaseRegionMemory(mem); err != nil {
			t.Fatal(err)
		}
		handed += (n + fs - 1) / fs
	}
	// In flight: nothing reaps the completion ring until Pending looks
	// (no Send, no Recv on a), so the send from the first of these two
	// frames stays in flight while the rest of the reservation is handed
	// out, and the second frame is free at once.
	mem, err := a.RegionMemory(2 * fs)
	if err != nil {
		t.Fatal(err)
	}
	r := sendFrom(mem, 99)
	if err := a.ReleaseRegionMemory(mem); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseRegionMemory(mem); !errors.Is(err, ErrConfig) {
		t.Errorf("a second release: %v, want ErrConfig", err)
	}
	sent := mem[:fs:fs]
	held := 0
	for range total {
		m, err := a.RegionMemory(1)
		if errors.Is(err, ErrConfig) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if overlaps(m, sent) {
			t.Fatalf("memory with an in-place send in flight (%d pending) was handed out again", r.Pending())
		}
		held++
	}
	if held != total-1 {
		t.Fatalf("%d frames handed out beside the one in flight, want the other %d", held, total-1)
	}
	settle(r)
	// Completed: the frame of the send is handed out again.
	if m, err := a.RegionMemory(1); err != nil || !overlaps(m, sent) {
		t.Fatalf("once its send completed, the released frame is not handed out: %v", err)
	}
	if _, err := a.RegionMemory(1); !errors.Is(err, ErrConfig) {
		t.Errorf("region memory past the reservation: %v, want ErrConfig", err)
	}
}
