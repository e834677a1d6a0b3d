package fault_test

import (
	"errors"
	"testing"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// embeddedPort is a transport that adds to another by embedding it, as
// mxbench's NIC transports do: its Register is the embedded port's, so the
// regions it hands out are owned by the port, not by it.
type embeddedPort struct{ *loopback.Port }

// TestRegionFramesBehindForwarder: frames of a region registered through
// the wrapper, around a transport whose Register forwards to another (one
// that embeds a transport, another wrapper), pass through the send faults
// as copies, frame by frame what the oracle computes, and are counted as
// copied by their region. A region of another transport is still refused.
func TestRegionFramesBehindForwarder(t *testing.T) {
	const count, size = 600, 200
	o := fault.Options{Loss: 0.03, Duplicate: 0.03, Reorder: 0.03, Seed: 4242}
	for _, tc := range []struct {
		name  string
		inner func(t *testing.T, p *loopback.Port) transport.Transport
	}{
		{"embedded", func(t *testing.T, p *loopback.Port) transport.Transport { return embeddedPort{p} }},
		{"wrapper", func(t *testing.T, p *loopback.Port) transport.Transport { return wrap(t, p, fault.WrapOptions{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := loopPair(t)
			w := wrap(t, tc.inner(t, a), fault.WrapOptions{Send: o})
			mem := make([]byte, 0, count*size)
			for i := range count {
				mem = append(mem, frameData(i, size)...)
			}
			r, err := w.Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			frames := make([]transport.Frame, count)
			for i := range frames {
				frames[i] = r.Frame(b.Addr(), i*size, size)
			}
			if n, err := w.Send(frames); n != count || err != nil {
				t.Fatalf("Send of %d frames of a region = %d, %v", count, n, err)
			}
			want, wc := oracle(o, count, size)
			checkOracle(t, recvN(t, b, len(want), 4096), want)
			if send, _ := w.Counts(); send != wc {
				t.Errorf("Counts = %+v; oracle %+v", send, wc)
			}
			if got := r.CopiedSends(); got != count {
				t.Errorf("the region counts %d frames copied, want %d", got, count)
			}
			if p := r.Pending(); p != 0 {
				t.Errorf("%d in-place sends pending after the wrapper copied them all", p)
			}

			// A region of b's is not the wrapper's to send from.
			rb, err := b.Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := w.Send([]transport.Frame{rb.Frame(b.Addr(), 0, size)}); n != 0 || !errors.Is(err, transport.ErrForeignRegion) {
				t.Errorf("Send of a frame of another transport's region = %d, %v; want 0, ErrForeignRegion", n, err)
			}
			if err := r.Close(); err != nil {
				t.Error(err)
			}
			if n, err := w.Send(frames[:1]); n != 0 || !errors.Is(err, transport.ErrForeignRegion) {
				t.Errorf("Send of a frame of a closed region = %d, %v; want 0, ErrForeignRegion", n, err)
			}
		})
	}
}
