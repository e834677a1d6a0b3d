package fault_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// laneTransport is a loopback port that behaves, for Frame.Lane, as a
// transport with lanes does: Recv marks every frame with the lane it
// "arrived on" (recvLane), and Send records the Lane of every frame it
// is given, as the NIC transport writes it into the frame's EtherType.
type laneTransport struct {
	*loopback.Port
	recvLane uint8
	mu       sync.Mutex
	sent     []uint8
}

func (l *laneTransport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	n, err := l.Port.Recv(frames, timeout)
	for i := range frames[:n] {
		frames[i].Lane = l.recvLane
	}
	return n, err
}

func (l *laneTransport) Send(frames []transport.Frame) (int, error) {
	l.mu.Lock()
	for _, f := range frames {
		l.sent = append(l.sent, f.Lane)
	}
	l.mu.Unlock()
	return l.Port.Send(frames)
}

// recvAll receives n frames from w, bounded.
func recvAll(t *testing.T, w transport.Transport, n int) []transport.Frame {
	t.Helper()
	var got []transport.Frame
	buf := make([]transport.Frame, 64) // room for every copy of a batch: none waits as a copy
	for tries := 0; len(got) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("received %d of %d frames", len(got), n)
		}
		k, err := w.Recv(buf, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range buf[:k] {
			got = append(got, transport.Frame{Peer: f.Peer, Data: bytes.Clone(f.Data), Lane: f.Lane})
		}
	}
	return got
}

// TestLanePassesThrough: the wrapper keeps Frame.Lane both ways. On Send,
// with or without send faults, every frame reaches the wrapped transport
// with the Lane it was given (a held or delayed frame included). On Recv,
// a frame delivered as the wrapped transport returned it keeps the Lane
// that transport gave it; a copy the model made (here the second copy of
// each duplicated frame) has Lane 0, since it took no posting in the
// batch that delivers it.
func TestLanePassesThrough(t *testing.T) {
	const frames = 20
	for _, tc := range []struct {
		name       string
		send, recv fault.Options
	}{
		{name: "no faults"},
		{name: "send faults", send: fault.Options{Duplicate: 1, Delay: time.Millisecond, Seed: 3}},
		{name: "receive duplicates", recv: fault.Options{Duplicate: 1, Seed: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, pb := loopPair(t)
			la := &laneTransport{Port: pa}
			lb := &laneTransport{Port: pb, recvLane: 3}
			wa := wrap(t, la, fault.WrapOptions{Send: tc.send})
			wb := wrap(t, lb, fault.WrapOptions{Recv: tc.recv})
			out := make([]transport.Frame, frames)
			for i := range out {
				out[i] = transport.Frame{Peer: wb.Addr(), Data: []byte{byte(i), 0xa5}, Lane: uint8(1 + i%4)}
			}
			if n, err := wa.Send(out); err != nil || n != frames {
				t.Fatalf("send: %d, %v", n, err)
			}
			sendCopies, copies := 1, 1
			if tc.send.Duplicate == 1 {
				sendCopies = 2
			}
			copies = sendCopies
			if tc.recv.Duplicate == 1 {
				copies *= 2
			}
			got := recvAll(t, wb, frames*copies)
			la.mu.Lock()
			sent := append([]uint8(nil), la.sent...)
			la.mu.Unlock()
			if len(sent) != frames*sendCopies {
				t.Fatalf("the wrapped transport was given %d frames, want %d", len(sent), frames*sendCopies)
			}
			byData := map[byte][]uint8{}
			for _, f := range got {
				byData[f.Data[0]] = append(byData[f.Data[0]], f.Lane)
			}
			for i := range frames {
				lanes := byData[byte(i)]
				if len(lanes) != copies {
					t.Fatalf("frame %d arrived %d times, want %d", i, len(lanes), copies)
				}
				marked := 0
				for _, l := range lanes {
					switch l {
					case 3:
						marked++
					case 0:
					default:
						t.Errorf("frame %d arrived with Lane %d, want 3 (as the wrapped transport returned it) or 0 (a copy)", i, l)
					}
				}
				want := copies
				if tc.recv.Duplicate == 1 {
					want = copies / 2 // each received frame's second copy is the model's
				}
				if marked != want {
					t.Errorf("frame %d: %d copies with the wrapped transport's Lane, want %d (lanes %v)", i, marked, want, lanes)
				}
			}
			// The send side: each frame's Lane reached the wrapped Send.
			count := map[uint8]int{}
			for _, l := range sent {
				count[l]++
			}
			for k := uint8(1); k <= 4; k++ {
				if count[k] != frames/4*sendCopies {
					t.Errorf("Lane %d given to the wrapped transport %d times, want %d (lanes sent %v)", k, count[k], frames/4*sendCopies, sent)
				}
			}
			if count[0] != 0 {
				t.Errorf("%d frames reached the wrapped transport without their Lane", count[0])
			}
		})
	}
}
