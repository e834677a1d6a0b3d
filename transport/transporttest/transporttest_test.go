package transporttest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// brokenEnv names the flaw TestBrokenChild gives the transport under test.
const brokenEnv = "GOMX_TRANSPORTTEST_BROKEN"

// broken wraps a working transport and breaks one promise.
type broken struct {
	transport.Transport
	flaw  string
	count int
}

func (b *broken) Send(frames []transport.Frame) (int, error) {
	if b.flaw == "ignores-mtu" {
		// Sends oversized frames cut to the MTU instead of refusing them.
		for i := range frames {
			if m := b.MTU(); len(frames[i].Data) > m {
				cut := frames[i]
				cut.Data = cut.Data[:m]
				if _, err := b.Transport.Send([]transport.Frame{cut}); err != nil {
					return i, err
				}
				continue
			}
			if _, err := b.Transport.Send(frames[i : i+1]); err != nil {
				return i, err
			}
		}
		return len(frames), nil
	}
	return b.Transport.Send(frames)
}

func (b *broken) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	n, err := b.Transport.Recv(frames, timeout)
	for i := 0; i < n; i++ {
		b.count++
		switch b.flaw {
		case "flips-a-bit":
			if b.count%50 == 0 && len(frames[i].Data) > 0 {
				frames[i].Data[len(frames[i].Data)-1] ^= 0x10
			}
		case "wrong-peer":
			frames[i].Peer ^= 1 << 40
		case "loses":
			if b.count%100 == 0 {
				copy(frames[i:], frames[i+1:n])
				n--
				i--
			}
		}
	}
	return n, err
}

// TestBrokenChild runs the suite over a broken transport. It only runs when
// TestSuiteCatchesFlaws starts it in a child process, and is meant to fail.
func TestBrokenChild(t *testing.T) {
	flaw := os.Getenv(brokenEnv)
	if flaw == "" {
		t.Skip("runs only as the child of TestSuiteCatchesFlaws")
	}
	transporttest.Run(t, func(t *testing.T) (a, b transport.Transport) {
		n := loopback.NewNetwork(loopback.Options{MTU: 1500})
		t.Cleanup(func() { n.Close() })
		pa, err := n.Attach(1)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := n.Attach(2)
		if err != nil {
			t.Fatal(err)
		}
		return &broken{Transport: pa, flaw: flaw}, &broken{Transport: pb, flaw: flaw}
	})
}

// TestSuiteCatchesFlaws checks that the suite fails a transport with each of
// a few flaws, and names the subtest that should catch it.
func TestSuiteCatchesFlaws(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child test processes")
	}
	for _, tc := range []struct{ flaw, subtest string }{
		{"flips-a-bit", "Batch"},
		{"wrong-peer", "RoundTrip"},
		{"loses", "ConcurrentSend"},
		{"ignores-mtu", "TooBig"},
	} {
		t.Run(tc.flaw, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.flaw)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a transport that %s:\n%s", tc.flaw, out)
			}
			if want := "--- FAIL: TestBrokenChild/" + tc.subtest; !strings.Contains(string(out), want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		})
	}
}
