package e1000e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// reflectOnce is one step of gomx's macswap reflector on n, the one the
// peers VM runs against testpmd's.
func reflectOnce(n nicdrv.NIC, rx []*nicdrv.Buffer) error {
	_, err := nictest.MacSwap(n, 0, rx)
	return err
}

// rawPingPong sends frames of size bytes from a to a macswap reflector on b
// one at a time and returns the sorted round-trip times; every reply is
// checked byte for byte. Pinger and reflector take turns on one goroutine,
// so the figure is the drivers' and the NICs' path, not the scheduler's
// (in a one-CPU guest two spinning goroutines only meet every time slice).
func rawPingPong(t *testing.T, a, b nicdrv.NIC, size, rounds int) []time.Duration {
	t.Helper()
	rtts := make([]time.Duration, 0, rounds)
	want := make([]byte, 2048)
	rx := make([]*nicdrv.Buffer, 4)
	brx := make([]*nicdrv.Buffer, 32)
	for i := range rounds {
		buf, err := a.Pool(0).Get()
		if err != nil {
			t.Fatal(err)
		}
		nictest.Frame(buf.SetLen(2048), b.MAC(), a.MAC(), uint64(i), size)
		buf.SetLen(size)
		start := time.Now()
		if k, err := a.TxBatch(0, []*nicdrv.Buffer{buf}); k != 1 || err != nil {
			t.Fatalf("send: %d, %v", k, err)
		}
		deadline := start.Add(10 * time.Second)
		for {
			if err := reflectOnce(b, brx); err != nil {
				t.Fatal(err)
			}
			k, err := a.RxBatch(0, rx)
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 {
				rtts = append(rtts, time.Since(start))
				w := nictest.Frame(want, a.MAC(), b.MAC(), uint64(i), size)
				if k != 1 || string(rx[0].Data) != string(w) {
					t.Fatalf("round %d: %d frames back, the first not the reflected one", i, k)
				}
				a.Pool(0).Free(rx[:k]...)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no reply", i)
			}
		}
	}
	slices.Sort(rtts)
	return rtts
}

func logRTTs(t *testing.T, what string, size int, rtts []time.Duration) {
	q := func(p float64) time.Duration { return rtts[int(p*float64(len(rtts)-1))] }
	t.Logf("%s raw ping, %d B, %d rounds: round trip p50 %v, p90 %v, p99 %v (one way ~%v)",
		what, size, len(rtts), q(0.5), q(0.9), q(0.99), q(0.5)/2)
}

// TestRawPingPong is the raw-frame ping of gomx's driver on NIC A against
// gomx's own macswap reflector on NIC B: byte-exact replies, and round-trip
// figures in the log (not asserted). Over the model here; over QEMU's
// e1000e pair in `make qemu-test`.
func TestRawPingPong(t *testing.T) {
	for _, rig := range []struct {
		name   string
		rig    nictest.NewRig
		rounds int
	}{{"model", modelRig, 300}, {"vfio", vfioRig, 2000}} {
		t.Run(rig.name, func(t *testing.T) {
			r := rig.rig(t, nictest.Config{Queues: 1})
			defer func() {
				for _, n := range r.NICs {
					n.Close()
				}
			}()
			for _, size := range []int{64, 1514} {
				rounds := rig.rounds
				if testing.Short() {
					rounds = 100
				}
				logRTTs(t, fmt.Sprintf("%s %v->%v", rig.name, r.NICs[0].Info().Addr, r.NICs[1].Info().Addr), size, rawPingPong(t, r.NICs[0], r.NICs[1], size, rounds))
			}
		})
	}
}
