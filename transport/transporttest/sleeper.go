package transporttest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// sleeper checks a transport.Sleeper (skipped for other transports): Wake
// ends a Recv waiting without bound and makes the next Recv return at
// once, and Recv works as before afterwards; ArmSleep's descriptor polls
// readable once a frame arrived (or ArmSleep says not to sleep), and after
// EndSleep a Recv returns the frame.
func (s *suite) sleeper(t *testing.T) {
	a, b := s.pair(t)
	sb, ok := b.(transport.Sleeper)
	if !ok {
		t.Skipf("%T is not a transport.Sleeper", b)
	}
	frames := make([]transport.Frame, 4)

	// Wake ends a Recv that waits without bound.
	done := make(chan error, 1)
	go func() {
		n, err := b.Recv(frames, -1)
		if err == nil && n != 0 {
			t.Errorf("a woken Recv returned %d frames from an idle wire", n)
		}
		done <- err
	}()
	woken := false
	for i := 0; !woken; i++ {
		if i > 0 && i%100 == 0 && i*10 > int(hangGuard/time.Millisecond) {
			t.Fatal("Wake did not end a waiting Recv")
		}
		sb.Wake() // until the Recv, which may not have started, returns
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("woken Recv: %v", err)
			}
			woken = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	// A Wake before a Recv: that one returns at once, the next waits.
	sb.Wake()
	if n, err := b.Recv(frames, hangGuard); n != 0 || err != nil {
		t.Fatalf("Recv after Wake: %d frames, %v", n, err)
	}
	if n, err := b.Recv(frames, time.Millisecond); n != 0 || err != nil {
		t.Fatalf("bounded Recv after a woken one: %d frames, %v", n, err)
	}

	// ArmSleep: the descriptor polls readable once a frame came.
	want := content(64, 7)
	got := false
	deadline := time.Now().Add(hangGuard)
	for !got {
		if time.Now().After(deadline) {
			t.Fatal("no frame made the armed descriptor readable")
		}
		fd, sleep := sb.ArmSleep()
		if !sleep {
			t.Fatal("ArmSleep on an idle wire says a frame waits")
		}
		if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: want}}); err != nil {
			t.Fatal(err)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		wait := hangGuard
		if s.opts.Lossy {
			wait = 100 * time.Millisecond // then send again
		}
		ts := unix.NsecToTimespec(int64(wait))
		if _, err := unix.Ppoll(fds, &ts, nil); err != nil && err != unix.EINTR {
			t.Fatalf("ppoll: %v", err)
		}
		readable := fds[0].Revents&unix.POLLIN != 0
		sb.EndSleep(readable)
		if !readable {
			continue
		}
		// With the frame still there, a sleep must not sleep: ArmSleep
		// says so, or the descriptor is readable at once.
		fd, sleep = sb.ArmSleep()
		if sleep {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Ppoll(fds, &unix.Timespec{}, nil); err != nil || fds[0].Revents&unix.POLLIN == 0 {
				t.Errorf("with a frame waiting, ArmSleep says sleep and its descriptor is not readable (%v)", err)
			}
			sb.EndSleep(fds[0].Revents&unix.POLLIN != 0)
		} else {
			sb.EndSleep(false)
		}
		fr, ok := recvOne(t, b, hangGuard)
		if !ok || !s.matches(fr.Data, want) || fr.Peer != a.Addr() {
			t.Fatalf("after the sleep: frame %v from %v, want %d bytes from %v", ok, fr.Peer, len(want), a.Addr())
		}
		got = true
	}
}
